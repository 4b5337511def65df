"""Reader of aiperf's and genai-perf's profile exports, for ``kvplan validate --real``
(``calibration.real_runs.read_json_run`` sends such files here).

Why: aiperf (ai-dynamo/aiperf, genai-perf's successor) is the client NVIDIA's Dynamo and
AIConfigurator benchmark with, so a team deploying with them holds its files, not vllm bench's.
Its default workload also differs from every other client's in a way that moves the numbers: the
prompts come from a pool of ``--num-dataset-entries`` distinct entries (default 100), reused until
the run ends, so with the server's prefix cache on most requests skip their prefill. Replaying such
a run with fresh prompts predicts the wrong TTFT and, at high concurrency, the wrong TPOT. This
reader keeps the pool (``sim.workload.prompt_pool``) and the warm-up.

The file: ``profile_export_aiperf.json`` (aiperf, ``exporters/metrics_json_exporter.py``) or
``profile_export_genai_perf.json`` (genai-perf): one object with a block per metric,
``{"unit": "ms", "avg": ..., "p50": ..., "p90": ..., "p99": ...}``, and ``input_config``, the
tool's settings. Read:

- metrics: ``time_to_first_token`` and ``request_latency`` (mean, p90, p99; ms, or s / us / ns as
  their ``unit`` says), ``request_throughput``, ``input_sequence_length`` and
  ``output_sequence_length`` (means), ``request_count`` and ``error_request_count`` (aiperf);
- the load, from ``input_config``: aiperf nests it (``loadgen.concurrency``,
  ``loadgen.request_rate``, ``loadgen.request_count``, ``loadgen.warmup_request_count``,
  ``loadgen.arrival_pattern``; ``input.prompt.input_tokens.{mean,stddev}``,
  ``input.prompt.output_tokens.{mean,stddev}``, ``input.conversation.num_dataset_entries`` or
  ``input.num_dataset_entries``, ``input.dataset_sampling_strategy``, ``input.random_seed``;
  ``endpoint.model_names``), and writes only what the user set (``exclude_unset``), so a missing
  field is aiperf's default (``common/config/config_defaults.py``: 100 entries, ``shuffle``
  sampling for synthetic prompts, Poisson arrivals at a request rate); genai-perf writes it flat
  (``concurrency``, ``request_rate``, ``request_count``, ``warmup_request_count``,
  ``num_dataset_entries``, ``synthetic_input_tokens_mean`` / ``_stddev``,
  ``output_tokens_mean`` / ``_stddev``, ``model``, ``random_seed``), and perf_analyzer steps
  through the entries in order (``sequential``).

The replay: ``--concurrency N`` alone is a closed loop of N clients; a request rate is Poisson
(aiperf's ``arrival_pattern: constant``: evenly spaced; ``gamma`` with ``arrival_smoothness`` k:
gaps of CV 1 / sqrt(k), as vLLM's ``--burstiness``), capped at ``concurrency`` when both are set.
Every request is an entry of the pool; each entry's lengths are drawn once, normal around the
configured mean with its stddev (rounded, at least 1; exact when the stddev is 0, as in most
runs), from a generator seeded by the run's ``random_seed`` (0 when unset). With a
``warmup_request_count`` the warm-up is simulated first on the same pool and not scored (it is
what fills the prefix cache). A file with no input or output length in ``input_config`` uses the
measured means for every entry, with a note.

Malformed input is a one-line ``RealRunError`` naming the file and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, cast

import numpy as np

from calibration.real_runs import (LATENCY_STATS, MeasuredStage, RealRun, RealRunError, _dig, _int, _num,
                                   _tpot, engine_version_of)
from sim.workload.prompt_pool import DEFAULT_ENTRIES, SAMPLINGS, PromptPool
from sim.workload.shared_prefix import Stage

#: Milliseconds per unit a metric block may state.
_TO_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "us": 1e-3, "ns": 1e-6}
#: The statistics read, by kvplan's name: aiperf and genai-perf call the mean ``avg``.
_STAT_KEYS = {"mean": "avg", "p90": "p90", "p99": "p99"}


def is_genai_perf(cfg: dict) -> bool:
    """genai-perf's ``input_config`` is flat; aiperf's nests ``loadgen`` / ``input`` / ``endpoint``."""
    return not any(isinstance(cfg.get(k), dict) for k in ("loadgen", "input", "endpoint"))


def read_aiperf_export(path: Path, data: dict) -> RealRun:
    cfg = data["input_config"]
    genai = is_genai_perf(cfg)
    fmt = "genai-perf" if genai else "aiperf"
    notes: list[str] = []
    setting = _flat if genai else _nested

    ttft = _stats(data, "time_to_first_token", path)
    e2e = _stats(data, "request_latency", path)
    if ttft["mean"] is None or e2e["mean"] is None:
        raise RealRunError(f"{path}: time_to_first_token.avg: missing (was the run streamed? "
                           f"TTFT needs --streaming)")
    throughput = _scalar(data, "request_throughput", path)
    out_mean = _scalar(data, "output_sequence_length", path)
    in_mean = _scalar(data, "input_sequence_length", path)
    completed = _scalar(data, "request_count", path)
    failed = _scalar(data, "error_request_count", path) or 0.0
    concurrency = _opt_int(setting(cfg, "concurrency"), path, "input_config concurrency")
    rate = setting(cfg, "request_rate")
    rate = None if rate is None else _num(rate, path, "input_config request_rate", positive=True)
    # genai-perf writes 0 for a count it left to perf_analyzer (a measurement window instead).
    asked = _opt_int(setting(cfg, "request_count") or None, path, "input_config request_count")
    warmup_n = _opt_int(setting(cfg, "warmup_request_count"), path, "input_config warmup_request_count",
                        minimum=0) or 0
    if throughput is None:
        raise RealRunError(f"{path}: request_throughput.avg: missing")
    if rate is None and concurrency is None:
        raise RealRunError(f"{path}: input_config: neither concurrency nor request_rate: the load is unknown")
    if completed is None:
        if asked is not None:
            completed = float(asked)
        else:  # a measurement window: replay a steady stretch of it
            # concurrency is set when rate is not (checked above)
            completed = float(10 * cast(int, concurrency)) if rate is None else max(10.0, round(rate * 60))
            notes.append(f"request count not recorded (a measurement window): {completed:.0f} requests replayed")
    n = int(round(completed + failed))
    if n < 1:
        raise RealRunError(f"{path}: request_count: 0 requests measured: nothing to compare")
    duration = n / throughput
    if rate is None:
        stage = Stage(rate=throughput, duration_s=duration, num_requests=n, process="closed",
                      concurrency=concurrency)
        warm = Stage(rate=throughput, duration_s=warmup_n / throughput, num_requests=warmup_n, process="closed",
                     concurrency=concurrency) if warmup_n else None
        notes.append(f"concurrency {concurrency}: replayed as a closed loop of {concurrency} clients")
    else:
        pattern = str(setting(cfg, "arrival_pattern") or "poisson").lower()
        process, cv = ("constant", 1.0) if pattern == "constant" else ("poisson", 1.0)
        if pattern == "gamma":  # aiperf's --arrival-smoothness is vLLM's --burstiness: the shape
            shape = _num(setting(cfg, "arrival_smoothness") or 1.0, path, "input_config arrival_smoothness",
                         positive=True)
            cv = 1.0 / shape ** 0.5
        stage = Stage(rate=rate, duration_s=n / rate, num_requests=n, process=process, cv=cv,
                      concurrency=concurrency)
        warm = Stage(rate=rate, duration_s=warmup_n / rate, num_requests=warmup_n, process=process, cv=cv,
                     concurrency=concurrency) if warmup_n else None
        notes.append(f"request rate {rate:g}/s ({pattern}" + (f", CV {cv:.2f}" if cv != 1.0 else "") + ")"
                     + (f", at most {concurrency} in flight" if concurrency else ""))

    entries = _opt_int(setting(cfg, "num_dataset_entries"), path, "input_config num_dataset_entries")
    if entries is None:
        entries = DEFAULT_ENTRIES
        notes.append(f"num_dataset_entries not set: {fmt}'s default, {DEFAULT_ENTRIES} distinct prompts")
    sampling = "sequential" if genai else str(setting(cfg, "dataset_sampling_strategy") or "shuffle").lower()
    if sampling not in SAMPLINGS:
        raise RealRunError(f"{path}: input_config dataset_sampling_strategy: {sampling!r} is not one of "
                           f"{', '.join(SAMPLINGS)}")
    seed = _opt_int(setting(cfg, "random_seed"), path, "input_config random_seed", minimum=0) or 0
    rng = np.random.default_rng(seed)
    lens = []
    for role, measured in (("input", in_mean), ("output", out_mean)):
        mean = setting(cfg, f"{role}_mean")
        if mean is None:
            if measured is None:
                raise RealRunError(f"{path}: {role}_sequence_length.avg: missing, and input_config sets "
                                   f"no {role} length")
            notes.append(f"{role} length not in input_config: every entry {measured:.0f} tokens (the measured mean)")
            mean, sd = measured, 0.0
        else:
            mean = _num(mean, path, f"input_config {role} tokens mean", positive=True)
            sd = _num(setting(cfg, f"{role}_stddev") or 0.0, path, f"input_config {role} tokens stddev")
        draws = rng.normal(mean, sd, entries) if sd > 0 else np.full(entries, mean)
        lens.append([max(1, int(round(v))) for v in draws])
    pool = PromptPool(entries=entries, sampling=sampling)
    notes.append(f"prompts from a pool of {entries} entries ({sampling}): a repeat hits the prefix cache"
                 + (f"; {warmup_n} warm-up requests first" if warmup_n else ""))

    measured_stage = MeasuredStage(index=0, sent=n, completed=int(round(completed)), failures=int(round(failed)),
                                   e2el_ms=e2e, ttft_ms=ttft, tpot_ms=_tpot(e2e, ttft, out_mean),
                                   request_throughput=throughput, output_len=out_mean, prompt_len=in_mean)
    model = setting(cfg, "model")
    return RealRun(path=path, format=fmt, name=path.parent.name or path.stem, model=model, server={},
                   stages=[stage], measured=[measured_stage], notes=notes, prompt_pool=pool,
                   pool_lens=(lens[0], lens[1]), warmup=warm,
                   engine_version=engine_version_of(cfg, path))


# --- input_config lookups -----------------------------------------------------------------

#: Where aiperf keeps each setting (first path found wins; older releases differ).
_NESTED = {
    "concurrency": (("loadgen", "concurrency"),),
    "request_rate": (("loadgen", "request_rate"),),
    "request_count": (("loadgen", "request_count"),),
    "warmup_request_count": (("loadgen", "warmup_request_count"),),
    "arrival_pattern": (("loadgen", "arrival_pattern"),),
    "arrival_smoothness": (("loadgen", "arrival_smoothness"),),
    "num_dataset_entries": (("input", "conversation", "num_dataset_entries"), ("input", "num_dataset_entries"),
                            ("input", "prompt", "num")),
    "dataset_sampling_strategy": (("input", "dataset_sampling_strategy"),),
    "random_seed": (("input", "random_seed"),),
    "input_mean": (("input", "prompt", "input_tokens", "mean"), ("input", "synthetic_tokens", "mean")),
    "input_stddev": (("input", "prompt", "input_tokens", "stddev"), ("input", "synthetic_tokens", "stddev")),
    "output_mean": (("input", "prompt", "output_tokens", "mean"), ("input", "output_tokens", "mean")),
    "output_stddev": (("input", "prompt", "output_tokens", "stddev"), ("input", "output_tokens", "stddev")),
    "model": (("endpoint", "model_names"), ("model_names",)),
}
#: genai-perf's flat names.
_FLAT = {"input_mean": "synthetic_input_tokens_mean", "input_stddev": "synthetic_input_tokens_stddev",
         "output_mean": "output_tokens_mean", "output_stddev": "output_tokens_stddev", "model": "model"}


def _nested(cfg: dict, name: str) -> Any:
    for keys in _NESTED[name]:
        v = _dig(cfg, *keys)
        if v is not None:
            return _first(v)
    return None


def _flat(cfg: dict, name: str) -> Any:
    return _first(cfg.get(_FLAT.get(name, name)))


def _first(v: Any) -> Any:
    """A model list's first name (both tools take several models)."""
    return (v[0] if v else None) if isinstance(v, list) else v


# --- metric blocks ------------------------------------------------------------------------


def _block(data: dict, name: str, path: Path) -> Optional[dict]:
    b = data.get(name)
    if b is None:
        return None
    if not isinstance(b, dict):
        raise RealRunError(f"{path}: {name}: expected an object with avg (and unit)")
    return b


def _stats(data: dict, name: str, path: Path) -> dict[str, Optional[float]]:
    b = _block(data, name, path)
    if b is None:
        return {s: None for s in LATENCY_STATS}
    unit = str(b.get("unit", "ms")).lower()
    if unit not in _TO_MS:
        raise RealRunError(f"{path}: {name}.unit: {unit!r} is not a time unit ({', '.join(_TO_MS)})")
    out: dict[str, Optional[float]] = {}
    for stat in LATENCY_STATS:
        v = b.get(_STAT_KEYS[stat])
        out[stat] = None if v is None else _TO_MS[unit] * _num(v, path, f"{name}.{_STAT_KEYS[stat]}")
    return out


def _scalar(data: dict, name: str, path: Path) -> Optional[float]:
    b = _block(data, name, path)
    if b is None or b.get("avg") is None:
        return None
    return _num(b["avg"], path, f"{name}.avg")


def _opt_int(v: Any, path: Path, name: str, minimum: int = 1) -> Optional[int]:
    return None if v is None else _int(v, path, name, minimum=minimum)


__all__ = ["is_genai_perf", "read_aiperf_export"]
