"""Reader of SGLang's serving benchmark results, ``python -m sglang.bench_serving --output-file
X.jsonl``, for ``kvplan validate --real`` (``calibration.real_runs.read_run`` sends such files here).

Why: teams serving with SGLang measure with its own client, not vllm bench serve; reading its
file lets them score the simulator on their runs without converting anything by hand.

The file (sgl-project/sglang ``python/sglang/bench_serving.py``, function ``benchmark``: the
``result`` dict it appends to ``--output-file``) holds one JSON object a line, one line per
invocation, so a file of several invocations is a run of several load stages, replayed in line
order (stage ``i`` is the ``i``-th non-blank line, from 0). Fields read:

- the load: ``backend`` (``sglang``, ``sglang-native``, ``sglang-oai``, ``sglang-oai-chat``,
  ``vllm``, ``vllm-chat``, ``lmdeploy``, ``trt``, ...), ``request_rate`` (req/s; ``inf``, which
  Python's ``json`` writes as ``Infinity``, sends every request at once; bench_serving's
  ``get_request`` draws exponential gaps otherwise), ``max_concurrency`` (its semaphore; null when
  unset), ``dataset_name``, ``random_input_len``, ``random_output_len``, ``random_range_ratio``,
  ``sharegpt_output_len``;
- the results (``calculate_metrics``): ``duration`` (s), ``completed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``input_throughput``, ``output_throughput``,
  ``{mean,median,std,p99}_{ttft,tpot,itl}_ms``, ``p95_itl_ms``, ``{mean,median,std,p99}_e2e_latency_ms``
  (ms; ``p90_*`` where a version writes it), ``concurrency`` (sum of E2E over the duration);
- with ``--output-details``, per request sent: ``input_lens``, ``output_lens`` (0 for a failed
  request), ``ttfts`` and ``itls`` (s), ``errors``;
- where the version records it, ``server_info`` (the server's ``/get_server_info``):
  ``model_path``, ``tp_size``, ``context_length``, ``max_running_requests``,
  ``chunked_prefill_size``, ``dtype``, ``version``.

Each line is renamed into a ``vllm bench serve --save-result`` document (``to_vllm_bench``:
``*_e2e_latency_ms`` -> ``*_e2el_ms``, ``total_throughput`` -> ``total_token_throughput``, the
server's settings under vLLM's names) and read by ``read_vllm_bench``, so a stage is replayed as
vllm bench's would be: open loop at ``request_rate`` (``inf``: all at once), capped by
``max_concurrency``, or with ``inf`` and ``max_concurrency`` a closed loop of that many clients;
the comparison then scores the same metrics as for every other reader.

Lengths, best first: the per-request ``input_lens``/``output_lens`` of ``--output-details``;
for the ``random``/``random-ids`` datasets, lengths drawn by the dataset's rule (uniform integers
in ``[max(int(len * random_range_ratio), 1), len]``, ``compute_random_lens``: in
``bench_serving.py``, in newer releases ``python/sglang/benchmark/datasets/common.py``) from
numpy's legacy generator seeded with bench_serving's default ``--seed 1``, inputs first, as
``sample_random_requests`` draws them; else every request gets the run's means
(``total_input_tokens`` / ``completed``, likewise out). Without ``--output-details`` failed
requests are not in the file: the ``completed`` ones are replayed.

The engine: a ``backend`` starting with ``sglang`` was served by SGLang (``engine_name``
"sglang", which ``validate_real.build_config`` puts in ``engine.name``); ``vllm`` by vLLM; any
other backend keeps its name (kvplan prices what it does not model as vLLM, with a note). One
file is one server: lines of different engines or models are refused.

Malformed input is a one-line ``RealRunError`` naming the file and line
(``runs.jsonl:3: not JSON``, ``runs.jsonl:2: missing field request_rate``).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from calibration.json_lines import json_objects
from calibration.real_runs import (RealRun, RealRunError, dataset_prompt_text, engine_version_of, read_bytes,
                                   read_vllm_bench)

FORMAT = "sglang-bench"
#: Keys SGLang's result has and vllm bench serve's does not: with ``backend``, what marks a line.
SGLANG_KEYS = ("mean_e2e_latency_ms", "median_e2e_latency_ms", "random_range_ratio", "sharegpt_output_len")
#: Fields every line must have.
REQUIRED = ("backend", "request_rate", "duration", "completed", "mean_e2e_latency_ms", "mean_ttft_ms")
#: Datasets whose lengths follow the random rule.
RANDOM_DATASETS = ("random", "random-ids")
#: bench_serving's ``--seed`` default.
DEFAULT_SEED = 1
#: ``server_info`` keys (SGLang's server arguments) and the vLLM-named settings kvplan reads.
SERVER_INFO_KEYS = {"tp_size": "tensor_parallel_size", "context_length": "max_model_len",
                    "max_running_requests": "max_num_seqs", "chunked_prefill_size": "max_num_batched_tokens",
                    "stream_interval": "stream_interval"}
#: Statistics bench_serving writes (p90 in some versions, p95 for ITL).
_STATS = ("mean", "median", "std", "p90", "p95", "p99")
#: Per-request lists of ``--output-details`` (same names in vllm bench serve's ``--save-detailed``).
_DETAILS = ("input_lens", "output_lens", "ttfts", "itls", "errors")
_PASSED = ("max_concurrency", "duration", "completed", "total_input_tokens", "total_output_tokens",
           "request_throughput", "input_throughput", "output_throughput", "max_itl_ms")


def looks_like_sglang(rec: Any) -> bool:
    """An object with a string ``backend`` and one of SGLang's own keys (``SGLANG_KEYS``)."""
    return isinstance(rec, dict) and isinstance(rec.get("backend"), str) and any(k in rec for k in SGLANG_KEYS)


def is_sglang_bench(path: Path) -> bool:
    """Whether ``read_run`` reads ``path`` as SGLang runs: a ``.jsonl`` file (bench_serving's
    default name; kvplan reads no other JSONL here), or a file whose first non-blank line is an
    SGLang result (``looks_like_sglang``)."""
    if path.suffix.lower() == ".jsonl":
        return True
    try:
        with open(path, "rb") as fh:
            first = next((ln for ln in fh if ln.strip()), b"")
    except OSError:
        return False
    if b'"backend"' not in first or not any(f'"{k}"'.encode() in first for k in SGLANG_KEYS):
        return False  # cheap test first: a vllm bench file is often one long line
    try:
        return looks_like_sglang(json.loads(first))
    except ValueError:
        return False


def engine_of(backend: str) -> str:
    """The serving engine of a bench_serving ``backend``: "sglang" for ``sglang*``, "vllm" for
    ``vllm*``, else the backend's own name (``lmdeploy``, ``trt``, ...)."""
    for engine in ("sglang", "vllm"):
        if backend.startswith(engine):
            return engine
    return backend


# --- one line ---------------------------------------------------------------------------


def to_vllm_bench(rec: dict, where: str, notes: list[str]) -> dict:
    """The ``vllm bench serve --save-result --save-detailed`` document of one SGLang result line
    (``where`` = ``FILE:LINE`` for errors; notes on what was assumed are appended to ``notes``)."""
    for key in REQUIRED:
        if rec.get(key) is None:
            raise RealRunError(f"{where}: missing field {key}")
    if not isinstance(rec["backend"], str) or not rec["backend"].strip():
        raise RealRunError(f"{where}: backend: expected bench_serving's --backend name, got {rec['backend']!r}")
    doc: dict[str, Any] = {"backend": rec["backend"], "request_rate": _rate(rec["request_rate"], where)}
    for key in _PASSED:
        if key in rec:
            doc[key] = rec[key]
    if "total_throughput" in rec:
        doc["total_token_throughput"] = rec["total_throughput"]
    for stat in _STATS:
        for metric in ("ttft", "tpot", "itl"):
            if f"{stat}_{metric}_ms" in rec:
                doc[f"{stat}_{metric}_ms"] = rec[f"{stat}_{metric}_ms"]
        if f"{stat}_e2e_latency_ms" in rec:
            doc[f"{stat}_e2el_ms"] = rec[f"{stat}_e2e_latency_ms"]
    ins, outs = _lengths(rec, where, notes)
    doc.update(input_lens=ins, output_lens=outs, num_prompts=len(ins), failed=len(ins) - _completed(rec, where))
    for key in _DETAILS[2:]:
        if isinstance(rec.get(key), list):
            doc[key] = rec[key]
    info = _server_info(rec)
    model = info.get("model_path") or rec.get("model_id") or rec.get("model")
    if isinstance(model, str) and model:
        doc["model_id"] = model
    for key, vllm_key in SERVER_INFO_KEYS.items():
        v = info.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            doc[vllm_key] = v
    if info.get("dtype") in ("float16", "bfloat16"):
        doc["dtype"] = info["dtype"]
    return doc


def _server_info(rec: dict) -> dict:
    """The line's ``server_info`` (the server's ``/get_server_info``), {} where not recorded."""
    info = rec.get("server_info")
    return info if isinstance(info, dict) else {}


def _rate(v: Any, where: str) -> Any:
    """``request_rate`` as vllm bench writes it: a positive number or "inf"."""
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return "inf"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return "inf" if math.isinf(v) and v > 0 else v
    if v == "trace":
        raise RealRunError(f"{where}: request_rate 'trace' (--use-trace-timestamps): trace replay "
                           f"timing is not in the file, kvplan cannot rebuild the load")
    raise RealRunError(f"{where}: request_rate: expected a number or inf, got {v!r}")


def _completed(rec: dict, where: str) -> int:
    v = rec["completed"]
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise RealRunError(f"{where}: completed: expected an integer >= 0, got {v!r}")
    return v


def _lengths(rec: dict, where: str, notes: list[str]) -> tuple[list, list]:
    """(prompt lengths, output lengths) per request replayed: ``--output-details``' lists, else
    the random dataset's rule, else the means (see the module's docstring)."""
    completed = _completed(rec, where)
    ins, outs = rec.get("input_lens"), rec.get("output_lens")
    if ins is not None or outs is not None:
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) or len(ins) < completed:
            raise RealRunError(f"{where}: input_lens, output_lens: expected two lists of the same length, "
                               f"one entry per request sent (--output-details), at least completed ({completed})")
        return ins, outs
    if completed == 0:
        raise RealRunError(f"{where}: completed is 0: nothing to compare")
    notes.append("failed requests are not recorded without --output-details: the completed ones replayed")
    if rec.get("dataset_name") in RANDOM_DATASETS and all(
            _is_count(rec.get(k)) for k in ("random_input_len", "random_output_len")) \
            and rec.get("random_range_ratio") is not None:
        return _random_lengths(rec, completed, where, notes)
    means = []
    for key in ("total_input_tokens", "total_output_tokens"):
        if rec.get(key) is None:
            raise RealRunError(f"{where}: missing field {key} (the replayed lengths without --output-details)")
        v = rec[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise RealRunError(f"{where}: {key}: expected a positive number, got {v!r}")
        means.append(max(1, int(round(v / completed))))
    notes.append(f"no per-request lengths (--output-details): every request {means[0]} in, "
                 f"{means[1]} out (the run's means)")
    return [means[0]] * completed, [means[1]] * completed


def _random_lengths(rec: dict, n: int, where: str, notes: list[str]) -> tuple[list, list]:
    ratio = rec["random_range_ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise RealRunError(f"{where}: random_range_ratio: expected a number in [0, 1], got {ratio!r}")
    rng = np.random.RandomState(DEFAULT_SEED)
    drawn, spans = [], []
    for key in ("random_input_len", "random_output_len"):
        full = int(rec[key])
        low = max(int(full * ratio), 1)
        drawn.append(rng.randint(low, full + 1, size=n).tolist())
        spans.append(f"[{low}, {full}]")
    notes.append(f"no per-request lengths (--output-details): {n} drawn by the {rec['dataset_name']} "
                 f"dataset's rule, uniform in {spans[0]} in and {spans[1]} out (seed {DEFAULT_SEED})")
    total = rec.get("total_input_tokens")
    if isinstance(total, (int, float)) and total > 0:
        mean, drawn_mean = total / n, sum(drawn[0]) / n
        if abs(drawn_mean - mean) > 0.1 * mean:
            notes.append(f"the drawn prompts average {drawn_mean:.0f} tokens, the run's "
                         f"{mean:.0f} (total_input_tokens / completed): another --seed?")
    return drawn[0], drawn[1]


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


# --- the file -----------------------------------------------------------------------------


def read_sglang_bench(path: Path) -> RealRun:
    """Every non-blank line of ``path`` one load stage, in order (module docstring)."""
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise RealRunError(f"{path}: not UTF-8 text") from None
    lines = []  # (line number, record, one-stage run, notes)
    for number, rec in json_objects(text, str(path), RealRunError,
                                    "JSON object (one bench_serving result a line)"):
        where = f"{path}:{number}"
        notes: list[str] = []
        doc = to_vllm_bench(rec, where, notes)
        one = read_vllm_bench(Path(where), doc)
        # vllm bench's own advice (its --metadata flag) does not apply to this file.
        notes += [n for n in one.notes if "--metadata" not in n]
        lines.append((number, rec, one, notes))
    if not lines:
        raise RealRunError(f"{path}: no results (every line is blank)")
    return _one_server(path, lines)


def _one_server(path: Path, lines: list) -> RealRun:
    """The lines as the stages of one run; lines of another engine or model are refused."""
    first_no, first, first_run, _ = lines[0]
    engine = engine_of(first["backend"])
    model = None
    for number, rec, one, _ in lines:
        if engine_of(rec["backend"]) != engine:
            raise RealRunError(f"{path}:{number}: backend {rec['backend']}, but line {first_no} measured "
                               f"{first['backend']}: one file is one server; put each server's runs in a file of its own")
        if one.model is not None:
            if model is not None and one.model != model:
                raise RealRunError(f"{path}:{number}: model {one.model}, but an earlier line measured "
                                   f"{model}: one file is one server")
            model = model or one.model
    notes: list[str] = []
    for number, _, _, line_notes in lines:
        notes += [f"line {number}: {n}" for n in line_notes]
    server: dict[str, Any] = {}
    for _, _, one, _ in lines:
        server = {**one.server, **server}
    if "tensor_parallel_size" not in server:
        notes.append("the server's settings are not in the file (bench_serving records server_info "
                     "in recent releases): kvplan's defaults unless --set says otherwise")
    info = _server_info(first)
    if engine == "sglang" and isinstance(info.get("version"), str):
        notes.append(f"SGLang {info['version']} (server_info.version)")
    version = None
    if engine == "vllm":  # a vLLM release named in the lines, else by meta.json or the folder
        version = engine_version_of(*(rec for _, rec, _, _ in lines)) or first_run.engine_version
    return RealRun(
        path=path, format=FORMAT, name=path.stem, model=model, server=server,
        stages=[one.stages[0] for _, _, one, _ in lines],
        measured=[replace(one.measured[0], index=k) for k, (_, _, one, _) in enumerate(lines)],
        prompt_lens=[v for _, _, one, _ in lines for v in one.prompt_lens],
        prompt_text=dataset_prompt_text(first.get("dataset_name")),
        output_lens=[v for _, _, one, _ in lines for v in one.output_lens],
        dtype=first_run.dtype, notes=notes, engine_version=version, engine_name=engine)
