"""``validation.json``: the simulator's predictions against real measurements, per metric.

Why a file format of its own: the calibration workflow (real engine + simulator on one trace)
produces it and the dashboard and reports read it, at different times and on different
machines. The format (documented in docs/dashboard.md):

    {"format": "kvplan-validation/1",
     "source": {"profile": ..., "hardware": ..., "model": ..., "trace": ..., ...},
     "metrics": [{"name": "p99_ttft_ms", "unit": "ms", "real": 120.0, "predicted": 131.0,
                  "error": 0.0917}, ...],
     "samples": {"ttft_ms": {"real": [...], "predicted": [...]}}}

``error`` is the signed relative error (predicted - real) / real; it is computed when absent.
``metrics`` may also be a mapping from name to {real, predicted[, error, unit]}. ``samples``
(optional) holds per-request values for CDF overlays.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional, Union

from sim.errors import KvplanError

FORMAT = "kvplan-validation/1"


class ValidationFileError(KvplanError):
    """A validation.json that does not follow the format (names the field)."""


def load_validation(source: Union[str, Path, bytes, dict], name: str = "validation.json") -> dict:
    """Read and check a validation file (a path, its bytes/text, or the parsed dict) and return
    the normalised record ``{"kind": "validation", "source", "metrics", "samples", "mape",
    "max_abs_error"}``."""
    data, name = _parse(source, name)
    if not isinstance(data, dict):
        raise ValidationFileError(f"{name}: the top level must be an object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise ValidationFileError(f"{name}: format {fmt!r} is not {FORMAT!r}")
    raw = data.get("metrics")
    if isinstance(raw, dict):
        raw = [{"name": k, **v} if isinstance(v, dict) else v for k, v in raw.items()]
    if not isinstance(raw, list) or not raw:
        raise ValidationFileError(f"{name}: metrics: expected a non-empty list of "
                                  f"{{name, real, predicted[, error, unit]}}")
    metrics = [_metric(m, f"{name}: metrics[{i}]") for i, m in enumerate(raw)]
    source_info = data.get("source") or {}
    if not isinstance(source_info, dict):
        raise ValidationFileError(f"{name}: source: expected an object")
    samples = _samples(data.get("samples") or {}, name)
    errors = [abs(m["error"]) for m in metrics if m["error"] is not None]
    return {"kind": "validation", "source": source_info, "metrics": metrics, "samples": samples,
            "mape": sum(errors) / len(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None}


def write_validation(path: Union[str, Path], metrics: list[dict], source: Optional[dict] = None,
                     samples: Optional[dict] = None) -> Path:
    """Write a validation file (``metrics``: dicts with name, real, predicted[, unit])."""
    doc = {"format": FORMAT, "source": source or {},
           "metrics": [_metric(m, f"metrics[{i}]") for i, m in enumerate(metrics)]}
    if samples:
        doc["samples"] = samples
    p = Path(path)
    p.write_text(json.dumps(doc, indent=2) + "\n")
    return p


def _parse(source: Union[str, Path, bytes, dict], name: str) -> tuple[Any, str]:
    """The parsed document and the name errors should use (a path read here names itself)."""
    if isinstance(source, dict):
        return source, name
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        p = Path(source)
        if not p.is_file():
            raise ValidationFileError(f"{p}: file not found")
        try:
            name, source = str(p), p.read_bytes()
        except OSError as exc:
            raise ValidationFileError(f"{p}: {exc.strerror or exc}") from None
    try:
        return json.loads(source), name
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise ValidationFileError(f"{name}: not valid JSON{where}") from None


def _metric(m: Any, where: str) -> dict:
    if not isinstance(m, dict):
        raise ValidationFileError(f"{where}: expected an object with name, real, predicted")
    name = m.get("name")
    if not isinstance(name, str) or not name:
        raise ValidationFileError(f"{where}.name: expected a metric name, e.g. p99_ttft_ms")
    real, pred = _num(m.get("real"), f"{where}.real"), _num(m.get("predicted"), f"{where}.predicted")
    err = m.get("error")
    if err is None:
        err = (pred - real) / real if real else None
    else:
        err = _num(err, f"{where}.error")
    unit = m.get("unit") or _unit(name)
    return {"name": name, "unit": unit, "real": real, "predicted": pred, "error": err}


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValidationFileError(f"{where}: expected a finite number, got {v!r}")
    return float(v)


def _samples(raw: Any, name: str) -> dict:
    if not isinstance(raw, dict):
        raise ValidationFileError(f"{name}: samples: expected an object of metric -> {{real, predicted}}")
    out: dict[str, dict[str, list[float]]] = {}
    for metric, pair in raw.items():
        if not isinstance(pair, dict):
            raise ValidationFileError(f"{name}: samples.{metric}: expected {{real: [...], predicted: [...]}}")
        out[metric] = {}
        for side in ("real", "predicted"):
            values = pair.get(side)
            if not isinstance(values, list):
                raise ValidationFileError(f"{name}: samples.{metric}.{side}: expected a list of numbers")
            out[metric][side] = [_num(v, f"{name}: samples.{metric}.{side}[{i}]") for i, v in enumerate(values)]
    return out


def _unit(name: str) -> str:
    if name.endswith("_ms"):
        return "ms"
    if "throughput" in name:
        return "tok/s" if "token" in name or "output" in name else "req/s"
    return ""


#: Mean absolute errors that separate a simulator to trust, to use with care, and one that does
#: not describe the machine (the smollm2 CPU loop validates at 3-9%, Vidur reports under 9%).
GOOD_MAPE, FAIR_MAPE = 0.10, 0.25


def verdict(record: dict) -> tuple[str, str]:
    """(level, sentence) a reader sees first: ``good`` (mean error within 10%), ``fair`` (25%)
    or ``bad``, with what to do about it; ``none`` when nothing could be scored."""
    mape = record.get("mape")
    if mape is None:
        return "none", "No metric could be scored (every real value was 0 or missing)."
    worst = record.get("max_abs_error")
    if mape <= GOOD_MAPE:
        return "good", (f"The simulator matches these runs: {mape:.1%} mean error over "
                        f"{len(record['metrics'])} metrics (largest {worst:.1%}).")
    if mape <= FAIR_MAPE:
        return "fair", (f"The simulator is off by {mape:.1%} on average (largest {worst:.1%}): use "
                        f"its numbers with that margin, or recalibrate (kvplan calibrate).")
    return "bad", (f"The simulator does not match this machine: {mape:.0%} mean error (largest "
                   f"{worst:.0%}). Recalibrate on this machine (kvplan calibrate) before trusting "
                   f"its predictions.")
