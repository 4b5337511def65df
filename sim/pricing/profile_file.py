"""The calibration profile file (``kvplan-profile/1``): a fitted step-cost model and where it came
from, including the machine it was measured on (``machine``, ``sim.pricing.machine``).

One JSON object, written by ``kvplan calibrate`` and read by the simulator
(``cost_model.profile``) and ``kvplan validate``::

    {"format": "kvplan-profile/1",
     "created": "2026-11-29T13:00:00+00:00",
     "hardware": "Intel(R) Xeon(R) Processor", "device": "cpu", "num_threads": 2,
     "model": "SmolLM2 135M Instruct", "catalog_model": "smollm2-135m", "model_spec": "smollm2",
     "dtype": "bfloat16", "block_size": 16,
     "software": {"python": "3.11.9", "torch": "2.13.0", "kvplan": "0.1.0"},
     "machine": {"cpu": "Intel(R) Xeon(R) Processor", "cpu_flags": ["avx2", "avx512f", ...],
                 "logical_cores": 2, "torch_threads": 2, "gpus": []},   # absent in old files
     "features": ["intercept", "gemm_rows", ...],
     "coefficients": {"intercept": 0.021, "gemm_rows": 0.0009, ...},   # seconds per unit
     "gemm_knee": 64,                                                 # or null
     "gemm_tables": {"body": {"rows": [1, 2, ...], "seconds": [...]},  # optional: measured
                     "lm_head": {...}, "method": "..."},               # linear-layer times
     "fit": {"heldout_mape": 0.06, "heldout_p90_ape": 0.12, "num_samples": 412, ...},
     "source": {"kind": "grid", "grid": "full"}}

A profile fitted to real benchmark runs (``kvplan calibrate --real``) has no coefficients: it
names the pricer it adjusts and the adjustments, and the simulator prices the scenario's own
model and GPU with that pricer::

    {"format": "kvplan-profile/1", ..., "features": [], "coefficients": {}, "gemm_knee": null,
     "base": "operator_tables",                                       # or "roofline"
     "adjustments": {"step_scale": 1.01, "request_overhead_ms": 8.9},
     "fit": {"heldout_mape": ..., "lomo": {...}}, "source": {"kind": "real_runs", "runs": [...]}}

Every field is checked on load; a problem raises ``ProfileError`` naming the file and field.
No torch here: the simulator loads profiles in its light core. Why it lives in ``sim.pricing``
(not ``calibration``): the simulator reads it to price steps; calibration only writes it.
"""

from __future__ import annotations

import json
import math
import platform
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional, Union

from sim.errors import KvplanError
from sim.pricing.features import FEATURES, TABLE_FEATURES
from sim.pricing.gemm_table import GemmTables, TableError

FORMAT = "kvplan-profile/1"
#: Pricers a real-run profile can adjust (``base``), and its adjustments with their ranges
#: (the ``cost_model.step_scale`` / ``request_overhead_ms`` keys' ranges).
BASES = ("operator_tables", "roofline")
ADJUSTMENTS = {"step_scale": (0.0, 10.0), "request_overhead_ms": (0.0, 1e6)}


class ProfileError(KvplanError):
    """A profile file that is missing, unreadable or malformed (names the file and field)."""


@dataclass
class Profile:
    hardware: str
    device: str
    model: str
    dtype: str
    block_size: int
    features: list[str]
    coefficients: dict[str, float]
    gemm_knee: Optional[float]
    fit: dict[str, Any]
    source: dict[str, Any]
    num_threads: Optional[int] = None
    catalog_model: Optional[str] = None  # the simulator catalog's slug for this model's shapes
    model_spec: Optional[str] = None  # what to pass to runtime.LLM(...) to load it again
    software: dict[str, str] = field(default_factory=dict)
    #: ``machine_fingerprint()`` of the machine measured; None in profiles made before it was
    #: recorded (they load, and warn that their machine is unknown).
    machine: Optional[dict[str, Any]] = None
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    path: Optional[str] = None  # where it was loaded from (not written)
    #: A real-run profile: the pricer it adjusts (``BASES``); None for a coefficient profile.
    base: Optional[str] = None
    #: ``step_scale`` and ``request_overhead_ms`` of a real-run profile.
    adjustments: dict[str, float] = field(default_factory=dict)
    #: Linear-layer times by row count measured with the profile (``sim.pricing.gemm_table``);
    #: None in profiles fitted from traces or made before tables existed.
    gemm_tables: Optional[GemmTables] = None

    @property
    def step_scale(self) -> float:
        return float(self.adjustments.get("step_scale", 1.0))

    @property
    def request_overhead_ms(self) -> float:
        return float(self.adjustments.get("request_overhead_ms", 0.0))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("path")
        if self.base is None:  # coefficient profiles are written as they always were
            d.pop("base")
            d.pop("adjustments")
        if self.gemm_tables is None:
            d.pop("gemm_tables")
        else:
            d["gemm_tables"] = self.gemm_tables.to_dict()
        return {"format": FORMAT, **d}

    def save(self, path: Union[str, Path]) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return p


def _check_machine(machine: Any, where: str) -> None:
    """Check a profile's ``machine`` object (``machine_fingerprint``), naming ``where``."""
    if not isinstance(machine, dict):
        raise ProfileError(f"{where}: expected an object, got {machine!r}")
    cpu = machine.get("cpu")
    if cpu is not None and not isinstance(cpu, str):
        raise ProfileError(f"{where}.cpu: expected a string, got {cpu!r}")
    flags = machine.get("cpu_flags")
    if flags is not None and (not isinstance(flags, list) or not all(isinstance(f, str) for f in flags)):
        raise ProfileError(f"{where}.cpu_flags: expected a list of flag names, got {flags!r}")
    for key in ("logical_cores", "torch_threads"):
        v = machine.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ProfileError(f"{where}.{key}: expected a positive integer or null, got {v!r}")
    gpu_list = machine.get("gpus")
    if gpu_list is not None and (not isinstance(gpu_list, list)
                                 or not all(isinstance(g, dict) for g in gpu_list)):
        raise ProfileError(f"{where}.gpus: expected a list of {{name, driver}} objects, got {gpu_list!r}")


def software_versions() -> dict[str, str]:
    """Versions of python, kvplan and, when this process used it (profiling, validation),
    torch; never imports torch (a trace fit runs without it)."""
    from sim import __version__

    out = {"python": platform.python_version(), "kvplan": __version__}
    version = getattr(sys.modules.get("torch"), "__version__", None)
    if version:
        out["torch"] = str(version)
    return out


def load_profile(path: Union[str, Path]) -> Profile:
    """Read and check a profile file; ``ProfileError`` (one line) on any problem."""
    p = Path(path)
    key = str(p.resolve()) if p.exists() else str(p)
    mtime = p.stat().st_mtime_ns if p.is_file() else 0
    return _load_cached(key, mtime)


@lru_cache(maxsize=32)
def _load_cached(path: str, mtime: int) -> Profile:
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"{p}: profile file not found")
    try:
        data = json.loads(p.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ProfileError(f"{p}: not valid JSON{where}") from None
    prof = parse_profile(data, str(p))
    prof.path = str(p)
    return prof


def parse_profile(data: Any, name: str = "profile") -> Profile:
    """Check a parsed profile document field by field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{name}: the top level must be a JSON object")
    fmt = data.get("format")
    if fmt != FORMAT:
        raise ProfileError(f"{name}: format: {fmt!r} is not {FORMAT!r}")

    def need(key: str, kind: type, what: str) -> Any:
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, kind):
            raise ProfileError(f"{name}: {key}: expected {what}, got {v!r}")
        return v

    for key in ("hardware", "device", "model", "dtype"):
        if not need(key, str, "a non-empty string"):
            raise ProfileError(f"{name}: {key}: expected a non-empty string, got ''")
    if need("block_size", int, "a positive integer") < 1:
        raise ProfileError(f"{name}: block_size: expected a positive integer, got {data['block_size']!r}")
    base, adjustments = _base_and_adjustments(data, name)
    if base is not None:
        data = {"features": [], "coefficients": {}, **data}
    feats = need("features", list, "a list of feature names")
    if base is not None and feats:
        raise ProfileError(f"{name}: features: a profile with a base ({base}) has no coefficients")
    if base is None and not feats:
        raise ProfileError(f"{name}: features: expected a non-empty list of feature names")
    for i, f in enumerate(feats):
        if f not in FEATURES:
            raise ProfileError(f"{name}: features[{i}]: {f!r} is not one of {', '.join(FEATURES)}")
    coefs = need("coefficients", dict, "an object of feature -> seconds per unit")
    for f in feats:
        v = coefs.get(f)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ProfileError(f"{name}: coefficients.{f}: expected a finite number >= 0, got {v!r}")
    tables = None
    if data.get("gemm_tables") is not None:
        try:
            tables = GemmTables.from_dict(data["gemm_tables"])
        except TableError as exc:
            raise ProfileError(f"{name}: gemm_tables.{exc}") from None
    for f in feats:
        if f in TABLE_FEATURES and tables is None:
            raise ProfileError(f"{name}: features: {f} needs gemm_tables, which this profile lacks")
    extra = sorted(set(coefs) - set(feats))
    if extra:
        raise ProfileError(f"{name}: coefficients.{extra[0]}: not in features")
    knee = data.get("gemm_knee")
    if "gemm_rows_over_knee" in feats and (isinstance(knee, bool) or not isinstance(knee, (int, float))
                                           or not math.isfinite(knee) or knee < 0):
        raise ProfileError(f"{name}: gemm_knee: expected a number >= 0 (the features use it), got {knee!r}")
    fit = need("fit", dict, "an object with the fit's error")
    for key in ("heldout_mape", "heldout_p90_ape"):
        v = fit.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ProfileError(f"{name}: fit.{key}: expected a finite number >= 0, got {v!r}")
    for key in ("num_samples", "num_heldout"):
        v = fit.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ProfileError(f"{name}: fit.{key}: expected a count, got {v!r}")
    source = data.get("source", {})
    if not isinstance(source, dict):
        raise ProfileError(f"{name}: source: expected an object, got {source!r}")
    software = data.get("software", {})
    if not isinstance(software, dict):
        raise ProfileError(f"{name}: software: expected an object, got {software!r}")
    threads = data.get("num_threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)):
        raise ProfileError(f"{name}: num_threads: expected an integer or null, got {threads!r}")
    machine = data.get("machine")
    if machine is not None:
        _check_machine(machine, f"{name}: machine")
    for key in ("catalog_model", "model_spec"):
        v = data.get(key)
        if v is not None and not isinstance(v, str):
            raise ProfileError(f"{name}: {key}: expected a model name or null, got {v!r}")
    return Profile(
        hardware=data["hardware"], device=data["device"], model=data["model"], dtype=data["dtype"],
        block_size=data["block_size"], features=list(feats),
        coefficients={f: float(coefs[f]) for f in feats},
        gemm_knee=None if knee is None else float(knee), fit=fit, source=source,
        num_threads=threads, catalog_model=data.get("catalog_model"),
        model_spec=data.get("model_spec"), software=software, machine=machine,
        created=str(data.get("created", "")), base=base, adjustments=adjustments,
        gemm_tables=tables,
    )


def _base_and_adjustments(data: dict, name: str) -> tuple[Optional[str], dict[str, float]]:
    """A real-run profile's ``base`` and ``adjustments`` (None, {} for a coefficient profile)."""
    base = data.get("base")
    adj = data.get("adjustments")
    if base is None:
        if adj is not None:
            raise ProfileError(f"{name}: adjustments: only a profile with a base ({', '.join(BASES)}) has them")
        return None, {}
    if base not in BASES:
        raise ProfileError(f"{name}: base: {base!r} is not one of {', '.join(BASES)}")
    if not isinstance(adj, dict):
        raise ProfileError(f"{name}: adjustments: expected an object with step_scale and "
                           f"request_overhead_ms, got {adj!r}")
    out = {}
    for key, value in adj.items():
        if key not in ADJUSTMENTS:
            raise ProfileError(f"{name}: adjustments.{key}: unknown (known: {', '.join(ADJUSTMENTS)})")
        lo, hi = ADJUSTMENTS[key]
        ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
              and lo <= value <= hi and not (key == "step_scale" and value == lo))
        if not ok:
            bound = f"({lo:g}, {hi:g}]" if key == "step_scale" else f"[{lo:g}, {hi:g}]"
            raise ProfileError(f"{name}: adjustments.{key}: expected a number in {bound}, got {value!r}")
        out[key] = float(value)
    return base, out
