"""One scenario reduced to what plots and reports need: latency samples for CDFs, the step log
binned over time (KV memory breakdown, batch size, queue length), and a rate-latency curve.

Why reduce: a run's step log has one row per model step (tens of thousands); a browser and an
HTML report need a few hundred points, and a saved record must stay small enough to embed.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Callable, Optional, Sequence, TypeVar, Union

import numpy as np
import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

from analysis.capacity import with_rate
from analysis.steady import run_length, window_metrics
from analysis.utilization import UtilizationModel, model_for_run, overall, step_work
from sim.api import SimResult, resolve_deployment, simulate
from sim.errors import ConfigError, KvplanError, file_error

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
KV_PARTS = ("token_states", "internal_fragmentation", "external_fragmentation", "reserved", "free")
QUEUE_PARTS = ("batch_size", "num_running", "num_waiting")
WORK_COLUMNS = ("num_prefill_tokens", "num_decode_seqs", "num_spec_tokens", "decode_context_tokens")
_Parsed = TypeVar("_Parsed")  # what a run file parses to


def simulation_record(result: SimResult, *, label: str = "", max_points: int = 400,
                      replica: int = 0) -> dict:
    """``{"kind": "simulation", label, config, summary, latencies, timeline}``."""
    lat: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": [], "e2el_ms": []}
    for r in result.requests:
        if r.ttft is not None and r.e2el is not None:
            lat["ttft_ms"].append(r.ttft * 1000)
            lat["e2el_ms"].append(r.e2el * 1000)
            if r.tpot is not None:
                lat["tpot_ms"].append(r.tpot * 1000)
    scenario = result.summary.get("scenario", {})
    um = model_for_run(scenario, result.config)
    record = {"kind": "simulation", "label": label, "config": result.config,
              "summary": result.summary,
              "latencies": {k: quantile_points(v, max_points) for k, v in lat.items()},
              "timeline": timeline(result.steps, scenario, max_points, replica, um),
              "memory": memory_split(result.config, scenario)}
    if um is not None and result.steps.get("duration_s"):
        record["utilization"] = overall(result.steps, um)
    record["peaks"] = {k: int(max(result.steps[k])) for k in QUEUE_PARTS if len(result.steps.get(k) or ())}
    return record


def memory_split(config: dict, scenario: dict) -> Optional[dict]:
    """One GPU's memory in GB: weights, activation reserve (activations at the step token
    budget plus CUDA context, graphs and communication buffers), KV pool, and what
    ``gpu_memory_utilization`` leaves unused (vLLM's split, from the memory plan)."""
    try:
        mem = resolve_deployment(config).memory
    except KvplanError:
        return None
    gb = 1e9
    return {"total_gb": mem.memory_bytes / gb, "weights_gb": mem.weights_bytes / gb,
            "activation_reserve_gb": mem.activation_reserve_bytes / gb,
            "kv_pool_gb": mem.kv_pool_bytes / gb,
            "unused_gb": (mem.memory_bytes - mem.budget_bytes) / gb,
            "gpu_memory_utilization": mem.gpu_memory_utilization}


def quantile_points(values: Sequence[float], max_points: int = 400) -> list[float]:
    """Sorted values thinned to at most ``max_points`` evenly spaced quantiles (a CDF)."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size > max_points:
        x = np.quantile(x, np.linspace(0, 1, max_points))
    return [round(float(v), 4) for v in x]


def timeline(steps: dict, scenario: dict, max_points: int = 400, replica: int = 0,
             utilization: Optional[UtilizationModel] = None) -> dict:
    """Step log of one replica, duration-weighted means in at most ``max_points`` time bins;
    KV columns in GB (slots x bytes per slot); with ``utilization``, MFU and memory-bandwidth
    utilisation per bin (the bin's work over its busy time at peak)."""
    cols = {k: np.asarray(v, dtype=float) for k, v in steps.items() if k != "replica" and len(v)}
    if not cols or "start_s" not in cols:
        return {"time_s": []}
    if "replica" in steps and len(steps["replica"]):
        keep = np.asarray(steps["replica"]) == replica
        cols = {k: v[keep] for k, v in cols.items()}
    start, dur = cols["start_s"], np.maximum(cols["duration_s"], 1e-12)
    if start.size == 0:
        return {"time_s": []}
    end = float(start[-1] + dur[-1])
    width = max(end / max_points, 1e-9)
    idx = np.minimum((start / width).astype(int), max_points - 1)
    weight = np.bincount(idx, weights=dur, minlength=max_points)
    used = weight > 0
    out: dict = {"time_s": [round(float(t), 4) for t in (np.arange(max_points)[used] + 0.5) * width],
                 "replica": replica}
    slots = scenario.get("kv_slots_per_replica") or 0
    gb_per_slot = (scenario.get("kv_pool_gb") or 0.0) / slots if slots else 0.0
    out["kv_gb_per_slot"] = gb_per_slot
    for part in KV_PARTS:
        col = cols.get(f"kv_{part}")
        if col is not None:
            mean = np.bincount(idx, weights=col * dur, minlength=max_points)[used] / weight[used]
            out[f"kv_{part}_gb"] = [round(float(v * gb_per_slot), 5) for v in mean]
    for part in QUEUE_PARTS:
        col = cols.get(part)
        if col is not None:
            mean = np.bincount(idx, weights=col * dur, minlength=max_points)[used] / weight[used]
            out[part] = [round(float(v), 3) for v in mean]
    if utilization is not None and all(k in cols for k in WORK_COLUMNS):
        flops, nbytes = step_work(cols, utilization)
        busy = np.bincount(idx, weights=cols["duration_s"], minlength=max_points)[used]
        busy = np.maximum(busy, 1e-12)
        out["mfu"] = [round(float(v), 5) for v in
                      np.bincount(idx, weights=flops, minlength=max_points)[used] / busy / utilization.peak_flops]
        out["mbu"] = [round(float(v), 5) for v in
                      np.bincount(idx, weights=nbytes, minlength=max_points)[used] / busy / utilization.bandwidth]
    return out


def rate_curve(config: dict, rates: Sequence[float], *, duration_s: float = 60.0,
               min_requests: int = 200, max_requests: int = 20000, seed: Optional[int] = None,
               on_done: Optional[Callable[[int, int], None]] = None) -> list[dict]:
    """Latency against offered load: one run per rate, sized like capacity-search runs
    (arrivals span ``duration_s``) and judged on the same steady-state window."""
    clean = sorted({float(r) for r in rates})
    if not clean or any(not (r > 0 and math.isfinite(r)) for r in clean):
        raise ConfigError("rates: expected positive request rates, e.g. 2, 4, 8")
    slo = config["slo"]
    points = []
    for i, rate in enumerate(clean):
        n = run_length(rate, duration_s, min_requests, max_requests)
        res = simulate(with_rate(config, rate, seed, n))
        m = window_metrics(res.requests, slo_ttft_ms=slo["ttft_ms"], slo_tpot_ms=slo["tpot_ms"],
                           stream_interval=res.stream_interval)
        m["rate"] = rate
        m["num_requests"] = n
        points.append(m)
        if on_done:
            on_done(i + 1, len(clean))
    return points


def _run_file(path: Path, parse: Callable[[str], _Parsed]) -> _Parsed:
    """One file of a run folder, parsed; any problem is one ``ConfigError`` naming it."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise file_error(path, exc) from None
    except (ValueError, yaml.YAMLError, csv.Error) as exc:
        raise ConfigError(f"{path}: not readable as kvplan output ({' '.join(str(exc).split())})") from None


def _run_float(value: str, path: Path, column: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{path}: {column}: {value!r} is not a number") from None


def load_run_dir(path: Union[str, Path], max_points: int = 400) -> dict:
    """A ``kvplan simulate --out DIR`` folder as a simulation record."""
    d = Path(path)
    summary_path = d / "summary.json"
    if not summary_path.is_file():
        raise ConfigError(f"{d}: no summary.json (expected a `kvplan simulate --out` folder)")
    summary = _run_file(summary_path, json.loads)
    if not isinstance(summary, dict):
        raise ConfigError(f"{summary_path}: expected a JSON object (a simulate summary)")
    config = _run_file(d / "config.yaml", yaml.safe_load) if (d / "config.yaml").is_file() else {}
    if not isinstance(config, dict):
        raise ConfigError(f"{d / 'config.yaml'}: expected a mapping of config keys")
    lat: dict[str, list[float]] = {"ttft_ms": [], "tpot_ms": [], "e2el_ms": []}
    if (d / "requests.csv").is_file():
        for row in _run_file(d / "requests.csv", lambda text: list(csv.DictReader(text.splitlines()))):
            for k in lat:
                if row.get(k):
                    lat[k].append(_run_float(row[k], d / "requests.csv", k))
    steps: dict[str, list] = {}
    if (d / "steps.csv").is_file():
        rows = _run_file(d / "steps.csv", lambda text: list(csv.reader(text.splitlines())))
        names = rows[0] if rows else []
        columns: list[Sequence[str]] = list(zip(*rows[1:])) or [[] for _ in names]
        steps = {n: [_run_float(x, d / "steps.csv", n) for x in col] for n, col in zip(names, columns)}
    scenario = summary.get("scenario", {})
    um = model_for_run(scenario, config) if config else None
    record = {"kind": "simulation", "label": d.name, "config": config, "summary": summary,
              "latencies": {k: quantile_points(v, max_points) for k, v in lat.items()},
              "timeline": timeline(steps, scenario, max_points, utilization=um),
              "memory": memory_split(config, scenario) if config else None}
    if um is not None and steps.get("duration_s") and all(k in steps for k in WORK_COLUMNS):
        record["utilization"] = overall(steps, um)
    return record
