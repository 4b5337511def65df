"""kvplan against AIConfigurator's measured end-to-end points (issue #24, part 4): every vLLM
aggregated row of ``aiconfigurator_core/systems/silicon_sample.csv`` replayed as a closed loop.

Each row of that file is one closed-loop measurement: ``batch_size`` clients, fixed ``isl`` /
``osl``, one deployment (GPU, TP, attention DP, MoE TP / EP, weight quantisation, vLLM release)
and the measured mean TTFT and TPOT. ``row_to_point`` maps a row to a kvplan config (a pure
function: no simulation, no file but the package's model configs), ``replay`` simulates it and
compares. Nothing is fitted: the file is a check, and anything fitted to it would have to be
leave-one-model-out.

    .venv/bin/python benchmarks/silicon_matrix.py                          # every vLLM agg row
    .venv/bin/python benchmarks/silicon_matrix.py --sample 60 --seed 0     # stratified sample
    .venv/bin/python benchmarks/silicon_matrix.py --limit 10 --workers 2

Writes ``benchmarks/results/silicon_matrix_<backend>.json`` and ``.md`` (``--out`` changes the
stem): coverage (rows replayed / rows, skip reasons with counts), TTFT, TPOT and E2E MAPE overall,
per GPU, per data source and per GPU x model x precision, the pricer that priced each partition,
seconds per point.

The CSV is found with ``importlib.util.find_spec("aiconfigurator_core")`` (the package's
folder; its code is never imported).

Assumptions about the measurement (the CSV does not record the client's settings):

- Client: N concurrent clients, N = ``silicon_concurrency`` (in ``silicon_data_source``), else
  ``batch_size`` x ``attention_dp_size`` (AIConfigurator's ``batch_size`` is per attention-DP
  rank: the two agree on every row that has both), no think time, prompts that share no prefix
  (random tokens), ignore_eos, 10N requests. Which client measured a row (``client_of``): every
  collection but ``aic-auto-gap-analysis`` holds InferenceX's single-node sweep alone (its three
  ISL / OSL pairs, its concurrencies, models and GPUs), measured by its ``benchmark_serving.py``
  (``benchmarks/benchmark_lib.sh``: ``--num-prompts 10 x CONC --max-concurrency CONC
  --random-range-ratio 0.8 --num-warmups 2 x CONC``): prompt and output lengths uniform on
  [int(0.8 L), L]. The ``aic-auto-gap-analysis`` rows are AIConfigurator's genai-perf runner's
  (``aiconfigurator/eval/benchmarks/genai_perf_runner.py``: ``--concurrency N --request-count
  10N --warmup-request-count 2N``, min = max tokens = osl): fixed lengths.
  Default here (``--phases burst``): the measured phase alone, as both clients run it: the
  warm-up drains before it starts (both await every warm-up response), so the ``10N`` measured
  requests begin on an idle server with all N clients sending at once, and all of them count
  (the first wave and the drain at the end included). ``--phases spread`` / ``together``
  simulate ``2N`` warm-up requests and drop them (``--warmup-per-client``,
  ``--requests-per-client``). The summary's all-request means are reported beside them.
- Server: vLLM's defaults for the release (``engine.version``: chunked prefill, its batch
  limits by GPU class, CUDA graphs, async scheduling from 0.14), ``max_num_seqs`` raised to the
  clients per DP rank where they exceed the default (``server_seats``), ``gpu_memory_utilization``
  0.9, the KV cache in FP8 for FP8 / NVFP4 weights and in the model dtype otherwise
  (``kv_cache_dtype``), prefix caching irrelevant (no shared prefixes),
  ``max_model_len = isl + osl``. InferenceX's rows add the flags its script passed on the row's
  measured date (``--server scripts``, the default; ``inferencex_script_flags``): token
  budgets, seats, memory fractions, KV dtypes, SGLang chunk sizes, running-request caps and
  request polling, stream intervals, each with its commit in the row's notes, and what kvplan
  cannot express (CUDA-graph sizes, kernel back ends) named there as not modelled.

After the first wave the clients drift apart: InferenceX's lengths differ from request to
request. Fixed lengths would keep identical clients in step for ever in a deterministic
simulation (``--phases together``: 2-3 times the measured TTFTs); for the fixed-length rows
(and under ``--client fixed``) a 1% output spread (CV) stands in for what drifts real clients
apart on vLLM; SGLang's separate prefill and decode batches put a wave's requests back in step
(``cohorts_stay_in_step``), so its fixed-length rows keep the exact lengths. ``--output-cv`` is a sensitivity check of that spread. ``--server defaults`` replays every
row with the release's defaults, ``--server aic-benchmark | aic-generator`` with AIConfigurator's
generator flags (what-ifs).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # silicon_sample, beside this script

from sim.catalog.engines import DEFAULT_SGLANG_VERSION, DEFAULT_VLLM_VERSION, get_engine  # noqa: E402
from sim.catalog.package_models import package_root  # noqa: E402
from sim.catalog.hardware import get_hardware  # noqa: E402
from sim.config import parse_override  # noqa: E402
from sim.errors import ConfigError, DoesNotFitError, KvplanError  # noqa: E402
from inferencex_sglang_flags import script_flags as sglang_script_flags  # noqa: E402
from inferencex_sweeps import EITHER_CONFIG, outside_sweep, spec_decode_run  # noqa: E402
import inferencex_vllm_flags  # noqa: E402
from inferencex_vllm_flags import script_flags as vllm_script_flags  # noqa: E402
from silicon_sample import CSV_NAME, package_version, read_rows, same_means, silicon_csv  # noqa: E402,F401
RESULTS = ROOT / "benchmarks" / "results"

#: AIConfigurator's system folder -> kvplan's hardware slug.
HARDWARE_OF: dict[str, str] = {
    "a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
    "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300", "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}

#: Checkpoints kvplan cannot resolve by id whose architecture it models under another id: the
#: same network with quantised weights (NVIDIA's ModelOpt FP8 export of Llama-3.1-8B-Instruct:
#: per-tensor FP8 W8A8, the architecture of meta-llama/Llama-3.1-8B). Each use is noted per row.
CHECKPOINT_ALIASES: dict[str, str] = {
    "nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B-Instruct",
    # GLM-5's old Hub org (the rows' model_path); the package ships its config under zai-org.
    "zhipuai/GLM-5": "zai-org/GLM-5",
}

#: The last release before vLLM 0.14 (the first whose defaults kvplan prices differently:
#: async scheduling) for rows with no ``backend_version`` measured before 2026. kvplan prices
#: 0.11.0 to 0.13.x alike (same CUDA-graph and batch defaults, same table folders).
PRE_ASYNC_RELEASE = "0.11.0"
PRE_ASYNC_BEFORE = "2026-01-01"
#: The last SGLang release that runs extend batches eagerly by default, for SGLang rows with no
#: ``backend_version`` measured before piecewise CUDA graphs became SGLang's default
#: (sgl-project/sglang#16331, merged 2026-03-02; first released in 0.5.10,
#: ``sim.catalog.engines.SGLANG_PCG_DEFAULT_FROM``). kvplan prices 0.5.0 to 0.5.9 alike.
PRE_PCG_RELEASE = "0.5.9"
PRE_PCG_BEFORE = "2026-03-02"
#: vLLM releases by the first day InferenceX's configs ran their image (``nvidia-master.yaml``'s
#: history: v0.17.0 @ a58dedd5a, v0.18.0 @ 1d5cae141, v0.19.0 @ bddbf4031, v0.20.0 @ ec4be9b3f):
#: each was out by then.
VLLM_RELEASES_OUT: tuple[tuple[str, str], ...] = (
    ("2026-03-11", "0.17.0"), ("2026-03-27", "0.18.0"), ("2026-04-03", "0.19.0"), ("2026-04-28", "0.20.0"))


def vllm_release_out(day: str) -> Optional[str]:
    """The newest vLLM release out on ``day`` (``VLLM_RELEASES_OUT``), None before the first.

    Why: a vLLM nightly image names a commit, not a date; one measured on a day runs that day's
    main branch, which the release out that day is nearest (its kernels, defaults and table
    folder), not kvplan's default release, months newer."""
    out = None
    for first, release in VLLM_RELEASES_OUT:
        if first <= day:
            out = release
    return out


#: An SGLang nightly image's tag carries the day it was built.
SGLANG_NIGHTLY_TAG = re.compile(r"nightly-dev(?:-cu\d+)?-(\d{8})")
#: The first day InferenceX's configs ran a v0.5.10 image (``nvidia-master.yaml`` @ 6cb829125,
#: 2026-04-14): 0.5.10 was out by then. It is the first release with piecewise CUDA graphs on by
#: default (#16331, merged ``PRE_PCG_BEFORE``).
SGLANG_0_5_10_OUT = "2026-04-14"


def sglang_nightly_release(built: str) -> Optional[str]:
    """The SGLang release a nightly built on ``built`` went into, where kvplan can tell: before the
    piecewise-graph default (2026-03-02) 0.5.9 (kvplan prices 0.5.0 to 0.5.9 alike: eager
    extends, the same table folders); from then until v0.5.10 was out, 0.5.10. None after that:
    which later release it became is not known here.

    Why not kvplan's default: a build of February or March 2026 runs that season's kernels, and
    the tables differ by release (the 0.5.10 MoE rows against the 0.5.14 ones); the default
    release is months newer."""
    if built < PRE_PCG_BEFORE:
        return PRE_PCG_RELEASE
    if built < SGLANG_0_5_10_OUT:
        return "0.5.10"
    return None

DEFAULT_REQUESTS_PER_CLIENT = 10
DEFAULT_WARMUP_PER_CLIENT = 2
#: ``--phases burst``: the output-length CV that stands in for whatever drifts real clients apart
#: after the first wave (the measured lengths are fixed; see ``row_to_point``).
BURST_DESYNC_CV = 0.01
PHASES = ("burst", "spread", "together")


def is_sensitivity_run(phases: str, output_cv: float) -> bool:
    """Whether ``output_cv`` spreads output lengths as a sensitivity check, not as the burst
    replay's stand-in for the clients' drift (``BURST_DESYNC_CV``)."""
    return output_cv > 0 and not (phases == "burst" and output_cv == BURST_DESYNC_CV)


class RowNotExpressible(Exception):
    """A row kvplan's config cannot say (before any simulation): ``kind`` groups the skip
    reasons, the message says what exactly."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class ReplayPoint:
    """One CSV row as a kvplan scenario: the partial config ``simulate`` takes, the number of
    warm-up requests to drop, and what the mapping assumed."""

    row_id: str
    partition: tuple[str, str, str]  # (system, model_path, precision): the report's grouping
    config: dict
    warmup: int
    silicon_ttft_ms: float
    silicon_tpot_ms: float
    notes: list[str] = field(default_factory=list)
    #: Where the CSV says the row was measured (``data_source``): the report's by-source table.
    source: str = ""
    #: ``burst``: the profiling phase alone, all clients at t=0 on an idle server, phases drifting
    #: apart after it; ``spread``: the clients start one by one over one request's lifetime
    #: (``ramp_up``), warm-up dropped; ``together``: all at t=0, in lock-step, warm-up dropped.
    phases: str = "burst"


# --- row -> kvplan config (pure) ----------------------------------------------------------------


def _num(row: Mapping, key: str, default: Optional[float] = None) -> Optional[float]:
    text = str(row.get(key) or "").strip()
    if not text or text.lower() == "nan":
        return default
    return float(text)


def _int(row: Mapping, key: str, default: int) -> int:
    v = _num(row, key)
    return default if v is None else int(round(v))


def _text(row: Mapping, key: str) -> str:
    t = str(row.get(key) or "").strip()
    return "" if t.lower() == "nan" else t


def precision_label(row: Mapping) -> str:
    """The row's ``precision`` (fp8, fp4, int4), ``bf16`` where it is empty."""
    return _text(row, "precision") or "bf16"


def partition_of(row: Mapping) -> tuple[str, str, str]:
    return (_text(row, "system"), _text(row, "model_path"), precision_label(row))


def data_source(row: Mapping) -> str:
    """The collection a row came from, from ``silicon_data_source``: the dump (``db-dump/2026-04-27``)
    or the file's name (``2026-04-06.csv``; ``aic-auto-gap-analysis`` for that project's per-run
    files). Why: the collections differ in ways the CSV does not record (client, server flags,
    harness), and their errors differ with them; the report shows each one's."""
    text = _text(row, "silicon_data_source")
    first = text.split(";")[0].strip()
    if first.startswith("db-dump/"):
        return first
    if first.startswith("source_file="):
        path = first[len("source_file="):].strip()
        if "aic-auto-gap-analysis/" in path:
            return "aic-auto-gap-analysis"
        return path.rsplit("/", 1)[-1] or "?"
    return first or "?"


#: InferenceX's (SemiAnalysis) single-node sweep: its three ISL / OSL pairs, measured with
#: ``utils/bench_serving/benchmark_serving.py`` (``benchmarks/benchmark_lib.sh``).
INFERENCEX_SHAPES = frozenset({(1024, 1024), (1024, 8192), (8192, 1024)})
#: ``--random-range-ratio`` of every InferenceX run (``RANDOM_RANGE_RATIO: 0.8`` in
#: ``.github/workflows/benchmark-tmpl.yml`` from 2025-08 on): each prompt and output length is
#: an integer uniform on ``[int(0.8 L), L]``.
INFERENCEX_RANGE_RATIO = 0.8
#: ``--client``: ``auto`` replays each row with the client that measured it (``client_of``);
#: ``fixed`` replays every row with fixed lengths (InferenceX's rows too), as kvplan did before
#: it knew their client: a 1% output spread then stands in for the drift. ``aiperf-pool`` is a
#: sensitivity reading of the ``aic-auto-gap-analysis`` rows: their client as aiperf runs with
#: AIConfigurator's generated ``bench_run.sh`` (no ``--num-dataset-entries``): every prompt one of
#: aiperf's default 100 entries (shuffle order), the ``2N`` warm-up on the same pool simulated
#: first and dropped, prefix caching on (both engines' default), so a repeat skips its prefill.
CLIENT_READINGS = ("auto", "fixed", "aiperf-pool")
#: aiperf's ``--num-dataset-entries`` default (``sim.workload.prompt_pool``).
AIPERF_POOL_ENTRIES = 100


def client_of(row: Mapping) -> str:
    """Which benchmark client measured ``row``: ``inferencex`` or ``genai-perf``.

    Why: the two draw lengths differently, and a closed loop's TTFT depends on it. Every
    collection but ``aic-auto-gap-analysis`` holds InferenceX's sweep and nothing else: its three
    ISL / OSL pairs (1k / 1k, 1k / 8k, 8k / 1k), its concurrencies (4 to 256, 512 on some) and its
    models and GPUs (``benchmarks/single_node/fixed_seq_len/<model>_<precision>_<gpu>.sh``:
    dsr1, gptoss, kimik2.5 int4 / fp4, minimaxm2.5, qwen3.5, glm5 on H100 / H200 / B200 / B300).
    Its client (``run_benchmark_serving``) sends ``10 x CONC`` prompts of random tokens with
    ``--random-range-ratio 0.8`` (lengths uniform on [0.8 L, L], mean 0.9 L), ``--ignore-eos``,
    ``--max-concurrency CONC``, after ``2 x CONC`` warm-up requests it waits for. The
    ``aic-auto-gap-analysis`` rows (other shapes, fixed lengths) are AIConfigurator's genai-perf
    runner's."""
    shape = (_int(row, "isl", 0), _int(row, "osl", 0))
    if data_source(row) != "aic-auto-gap-analysis" and shape in INFERENCEX_SHAPES:
        return "inferencex"
    return "genai-perf"


def length_spec(length: int, client: str) -> dict:
    """``workload.input_len`` / ``output_len`` for a nominal ``length`` as ``client`` draws it:
    InferenceX's integers uniform on ``[int(0.8 L), L]``, genai-perf's fixed ``L``."""
    if client == "inferencex":
        low = max(1, int(length * INFERENCEX_RANGE_RATIO))
        return {"dist": "uniform", "mean": (low + length) / 2, "min": low, "max": length}
    return {"dist": "fixed", "mean": length, "min": length, "max": length}


def measured_date(row: Mapping) -> Optional[str]:
    m = re.search(r"measured=(\d{4}-\d{2}-\d{2})", _text(row, "silicon_data_source"))
    return m.group(1) if m else None


def image_of(row: Mapping) -> Optional[str]:
    """The container image a row's collection recorded (``image=lmsysorg/sglang:v0.5.9-cu130``
    in the file collections, a bare ``lmsysorg/...`` field in the database dump), or None."""
    text = _text(row, "silicon_data_source")
    m = re.search(r"image=([^;\s]+)", text) or re.search(r"(?:^|;\s*)([\w.-]+/[\w.-]+:[^;\s]+)", text)
    return m.group(1) if m else None


def spec_decode_reason(row: Mapping) -> Optional[str]:
    """Why ``row`` was, or may have been, measured with speculative decoding
    (``inferencex_sweeps.spec_decode_run``), from its labels, date and image; None otherwise."""
    ran, _ = relabel_squared_ep(row)
    tp, ep = _int(ran, "tp_size", 1), _int(ran, "moe_ep_size", 1) or 1
    clients = client_concurrency(row, _int(row, "attention_dp_size", 1) or 1)
    return spec_decode_run(_text(row, "model_path"), precision_label(row), _text(row, "system"),
                           _text(row, "backend") or "vllm", measured_date(row), image_of(row),
                           _int(row, "isl", 0), _int(row, "osl", 0), tp, ep, clients)


#: The point's labels that make two rows one measurement point (``spec_decode_copies``).
POINT_LABELS = ("backend", "backend_version", "model_path", "system", "precision", "mode", "isl", "osl",
                "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def same_measurement(a: Mapping, b: Mapping) -> bool:
    """Whether two CSV rows are one measurement filed twice (``silicon_sample.same_means``)."""
    def means(r: Mapping) -> tuple[float, float]:
        return (_num(r, "silicon_ttft_ms") or 0.0, _num(r, "silicon_tpot_ms") or 0.0)
    return same_means(means(a), means(b))


def spec_decode_copies(rows: Sequence[Mapping]) -> dict[str, str]:
    """Row id -> reason for every row measured with speculative decoding: those
    ``spec_decode_reason`` identifies, and their copies in collections that recorded neither
    date nor image (``qwen3.5-397b-gap-analysis.csv`` re-files InferenceX's points): the same
    labels and both measured means equal to the files' rounding, so the same measurement."""
    found = {_text(r, "id"): (r, why) for r in rows if (why := spec_decode_reason(r))}
    out = {rid: why for rid, (_, why) in found.items()}
    by_point: dict[tuple, list] = {}
    for r, why in found.values():
        by_point.setdefault(tuple(_text(r, k) for k in POINT_LABELS), []).append((r, why))
    for r in rows:
        rid = _text(r, "id")
        if rid in out or measured_date(r) or image_of(r):
            continue
        for other, why in by_point.get(tuple(_text(r, k) for k in POINT_LABELS), ()):
            if same_measurement(r, other):
                out[rid] = f"{why} (the same measurement as {_text(other, 'id')}, re-filed)"
                break
    return out


#: The labels that name one point whatever release a collection wrote for it: a re-filed copy
#: says ``nightly-dev`` where the dated original says ``0.5.9`` (``dated_copies``).
COPY_LABELS = tuple(k for k in POINT_LABELS if k != "backend_version")


def _label_value(row: Mapping, key: str) -> Any:
    """A label compared across collections: a number as a number (``4`` and ``4.0`` agree),
    anything else as text."""
    text = _text(row, key)
    try:
        return float(text)
    except ValueError:
        return text


def dated_copies(rows: Sequence[Mapping]) -> dict[str, Mapping]:
    """Undated row id -> the dated row it copies. ``qwen3.5-397b-gap-analysis.csv`` re-files
    InferenceX's points with neither date nor image and the release as ``nightly-dev``; where
    such a row holds the same point as a dated row and both measured means equal it to the
    files' rounding, it is the same measurement, so the same run: the original's date, image
    and release say what ran (which script flags, which release), and the copy is replayed so
    (``adopt_dated_copy``). Not a fit: the match is on the measurement's identity, before any
    simulation; the first dated original by id where several collections hold it."""
    def labels(r: Mapping) -> tuple:  # as deployed: "tp 16 = MoE TP 4 x EP 4" is the TP 4 / EP 4 run
        ran, _ = relabel_squared_ep(r)
        return tuple(_label_value(ran, k) for k in COPY_LABELS)

    dated: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if measured_date(r):
            dated[labels(r)].append(r)
    out: dict[str, Mapping] = {}
    for r in rows:
        if measured_date(r) or image_of(r):
            continue
        for other in sorted(dated.get(labels(r), ()), key=lambda o: _text(o, "id")):
            if same_measurement(r, other):
                out[_text(r, "id")] = other
                break
    return out


def adopt_dated_copy(row: Mapping, original: Mapping) -> tuple[dict, str]:
    """``row`` with the dated original's date, image and release (its own collection kept, so
    the report still files it there), and the note that says so."""
    merged = dict(row)
    merged["backend_version"] = _text(original, "backend_version")
    extra = [f"measured={measured_date(original)}"] + ([f"image={image_of(original)}"] if image_of(original) else [])
    merged["silicon_data_source"] = "; ".join([_text(row, "silicon_data_source"), *extra])
    return merged, (f"the same measurement as {_text(original, 'id')} (re-filed without date or image, "
                    f"release {_text(row, 'backend_version') or 'unset'}): replayed as that run, measured "
                    f"{measured_date(original)}, release {_text(original, 'backend_version')}")


def engine_version(row: Mapping) -> tuple[str, Optional[str]]:
    """``engine.version`` for the row and a note when it is not the row's own release: a
    ``nightly-...`` build as the newest release out on its measured day (``vllm_release_out``),
    else kvplan's default release; a row without a version that
    was measured before 2026 as 0.11.0 (before async scheduling became vLLM's default in 0.14;
    kvplan prices 0.11-0.13 alike); one without a version or date as the default. SGLang rows:
    ``sglang_version``."""
    if _text(row, "backend") == "sglang":
        return sglang_version(row)
    text = _text(row, "backend_version")
    when = measured_date(row)
    if text.startswith("nightly"):
        release = vllm_release_out(when) if when else None
        if release:
            return release, (f"vLLM {text} (a nightly named by commit, measured {when}) priced as "
                             f"{release}, the newest release out that day")
        return DEFAULT_VLLM_VERSION, (f"vLLM {text} (measured {when or 'on an unknown date'}) "
                                      f"priced as kvplan's default release {DEFAULT_VLLM_VERSION}")
    if not text:
        if when is not None and when < PRE_ASYNC_BEFORE:
            return PRE_ASYNC_RELEASE, (f"no backend_version; measured {when}, before vLLM 0.14: "
                                       f"priced as {PRE_ASYNC_RELEASE}")
        return DEFAULT_VLLM_VERSION, (f"no backend_version (measured {when or 'on an unknown date'}): "
                                      f"priced as kvplan's default release {DEFAULT_VLLM_VERSION}")
    return _modelled_release("vllm", text), None


def nightly_build_date(row: Mapping) -> Optional[str]:
    """The build date an SGLang nightly image's tag carries (``nightly-dev-20260216-d3bae71e``,
    ``nightly-dev-cu13-20260317-1eea7448``: ``2026-02-16``), from the row's image or version;
    None when neither names one."""
    for text in (image_of(row) or "", _text(row, "backend_version")):
        m = SGLANG_NIGHTLY_TAG.search(text)
        if m:
            d = m.group(1)
            return f"{d[:4]}-{d[4:6]}-{d[6:]}"
    return None


def sglang_version(row: Mapping) -> tuple[str, Optional[str]]:
    """An SGLang row's ``engine.version``: its ``backend_version`` when kvplan models it (0.5.x);
    a nightly build whose tag carries its date as the release its code went into
    (``sglang_nightly_release``); any other nightly or a row without a version as kvplan's
    default SGLang release; a custom build name (``glm5-hopper``) is not a release."""
    text = _text(row, "backend_version")
    when = measured_date(row)
    if not text and when is not None and when < PRE_PCG_BEFORE:
        return PRE_PCG_RELEASE, (f"no backend_version; measured {when}, before SGLang made piecewise "
                                 f"CUDA graphs its default (0.5.10): priced as {PRE_PCG_RELEASE}")
    built = nightly_build_date(row) if text.startswith("nightly") else None
    release = sglang_nightly_release(built) if built else None
    if release:
        return release, (f"SGLang nightly built {built}: priced as {release}, the release its code went "
                         f"into ({'before' if release == PRE_PCG_RELEASE else 'after'} the piecewise-graph "
                         f"default of {PRE_PCG_BEFORE}, before v0.5.10 was out on {SGLANG_0_5_10_OUT})")
    if not text or text.startswith("nightly"):
        what = f"SGLang {text}" if text else "no backend_version"
        return DEFAULT_SGLANG_VERSION, (f"{what} (measured {when or 'on an unknown date'}): priced as "
                                        f"kvplan's default SGLang release {DEFAULT_SGLANG_VERSION}")
    return _modelled_release("sglang", text), None


def _modelled_release(engine: str, text: str) -> str:
    """``text`` when kvplan models that release of ``engine`` (``sim.catalog.engines.get_engine``
    decides); RowNotExpressible with its one-line reason otherwise."""
    try:
        get_engine(engine, text)
    except ConfigError as exc:
        raise RowNotExpressible("engine release not modelled", f"backend_version {text!r}: {exc}") from None
    return text


def checkpoint_quantization(model_path: str) -> Optional[dict]:
    """The ``quantization_config`` of the package's config.json for ``model_path`` (also under
    ``text_config``), or None (no config shipped, or an unquantised checkpoint). A copy of what
    ``_config_quantization`` read once per file: callers may keep or change it."""
    pkg = package_root()
    if pkg is None:
        return None
    q = _config_quantization(str(pkg / "model_configs" / f"{model_path.replace('/', '--')}_config.json"))
    return copy.deepcopy(q) if q is not None else None


@functools.lru_cache(maxsize=None)
def _config_quantization(path: str) -> Optional[dict]:
    """The ``quantization_config`` of one config.json, read once (a matrix run asks for it
    for every row of a model); shared, so ``checkpoint_quantization`` hands out copies."""
    if not Path(path).is_file():
        return None
    cfg = json.loads(Path(path).read_text())
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config")
    return q if isinstance(q, dict) else None


#: ``quantization.scope`` of the NVFP4 checkpoint a model's rows ran, where the package ships no
#: config of it: InferenceX's DeepSeek-R1 FP4 scripts run nvidia/DeepSeek-R1-0528-FP4-V2 (its
#: configs from the first, 2025-11-03 @17d5e204f, to today), which "additionally quantizes the wo
#: module in attention layers" (its model card) over nvidia/DeepSeek-R1-0528-FP4, whose
#: ``exclude_modules`` list every ``self_attn``; the package's nvidia/DeepSeek-V3.1-NVFP4 config
#: does the same (q_a, q_b, kv_a, kv_b excluded, o_proj not).
NVFP4_CHECKPOINT_SCOPES: dict[str, tuple[str, str]] = {
    path: ("mlp_and_o_proj", "nvidia/DeepSeek-R1-0528-FP4-V2 (InferenceX's FP4 checkpoint): attention "
                             "in BF16 but its output projection, MLPs and experts in NVFP4")
    for path in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")
}
#: Patterns of a checkpoint's ``exclude_modules`` / ``ignore`` (the part after ``layers.N.``) ->
#: the GEMM groups they leave 16-bit (``sim.catalog.dtypes.GEMM_GROUPS``). Routers
#: (``mlp.gate``, ``block_sparse_moe.gate``), the DSA indexer and norms are 16-bit in kvplan
#: whatever the scope; whole-layer patterns (``layers.78*``) are MTP layers, not served.
EXCLUDED_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"(self_attn|linear_attn)\*?$", ("attention_in", "attention_out")),
    (r"(self_attn|linear_attn)\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|q_proj|k_proj|v_proj"
     r"|qkv_proj|in_proj_qkvz|in_proj_ba)$", ("attention_in",)),
    (r"(self_attn|linear_attn)\.(o_proj|out_proj)$", ("attention_out",)),
    (r"shared_experts?\b", ("shared_experts",)),
)


def checkpoint_excluded_groups(patterns: Sequence[str]) -> set[str]:
    """The GEMM groups a checkpoint's exclude list keeps 16-bit (``EXCLUDED_GROUPS``)."""
    out: set[str] = set()
    for pattern in patterns:
        tail = re.sub(r"^.*?layers\.\d+\.", "", str(pattern))
        for regex, groups in EXCLUDED_GROUPS:
            if re.search(regex, tail):
                out.update(groups)
    return out


@functools.lru_cache(maxsize=None)
def package_nvfp4_scope(model_path: str) -> tuple[Optional[str], Optional[str]]:
    """``quantization.scope`` of NVIDIA's NVFP4 export of ``model_path`` (nvidia/<name>-NVFP4,
    the checkpoint InferenceX's FP4 scripts serve) from the config the package ships of it:
    the preset whose quantised groups equal what its exclude list leaves, among the groups
    kvplan's model has; (None, None) without a shipped config or a matching preset."""
    from sim.catalog.dtypes import GEMM_GROUPS, QUANT_SCOPES, scope_groups
    from sim.catalog.models import get_model

    pkg = package_root()
    if pkg is None:
        return None, None
    name = f"nvidia/{model_path.split('/')[-1]}-NVFP4"
    # Its config.json's quantization_config (``ignore``), else ModelOpt's hf_quant_config.json.
    q = checkpoint_quantization(name) or {}
    patterns = q.get("ignore") or q.get("exclude_modules")
    if patterns is None:
        hf_quant = pkg / "model_configs" / f"{name.replace('/', '--')}_hf_quant_config.json"
        if hf_quant.is_file():
            patterns = (json.loads(hf_quant.read_text()).get("quantization") or {}).get("exclude_modules")
    if patterns is None:
        return None, None
    try:
        m = get_model(CHECKPOINT_ALIASES.get(model_path, model_path))
    except KvplanError:
        return None, None
    present = {"attention_in", "attention_out"} | ({"experts"} if m.is_moe else set())
    present |= {"dense_mlp"} if m.num_dense_layers else set()
    present |= {"shared_experts"} if m.num_shared_experts else set()
    kept = checkpoint_excluded_groups(patterns) & present
    quantized = (set(GEMM_GROUPS) - kept) & present
    for scope in QUANT_SCOPES[1:]:
        if set(scope_groups(scope)) & present == quantized:
            return scope, (f"{name} (the package's config of it): exclude_modules keep "
                           f"{', '.join(sorted(kept)) or 'nothing'} 16-bit -> quantization.scope {scope}")
    return None, None


def checkpoint_scope(model_path: str, weights: str) -> tuple[Optional[str], Optional[str]]:
    """``quantization.scope`` for the row's checkpoint and a note, or (None, None): ``auto``.
    NVFP4 only: the model card's word where the package ships no config
    (``NVFP4_CHECKPOINT_SCOPES``), else NVIDIA's export as the package ships it."""
    if weights != "nvfp4":
        return None, None
    if model_path in NVFP4_CHECKPOINT_SCOPES:
        return NVFP4_CHECKPOINT_SCOPES[model_path]
    return package_nvfp4_scope(model_path)


def weights_quantization(gemm_mode: str, moe_mode: str, checkpoint: Optional[Mapping]
                         ) -> tuple[str, Optional[str]]:
    """``quantization.weights`` for the row's GEMM / MoE quant modes and the checkpoint's own
    ``quantization_config``, and a note when the row's label is not what vLLM runs.

    - An MXFP4 checkpoint (gpt-oss: ``quant_method: mxfp4``) runs as MXFP4 whatever the row
      says: AIConfigurator labels gpt-oss ``nvfp4`` on every GPU, H100/H200 included, which
      have no FP4 tensor cores; vLLM loads the checkpoint's MXFP4 experts.
    - ``fp8`` is block FP8 (``fp8_block``) when the checkpoint is block-quantised FP8
      (``weight_block_size``: MiniMax-M2.5, Qwen3-235B-A22B-FP8), else per-tensor FP8 (a bf16
      checkpoint under ``--quantization fp8``, or a ModelOpt FP8 export).
    - ``fp8`` dense GEMMs with ``fp8_block`` experts (the Qwen3.5 SGLang rows, whose
      ``model_path`` is the bf16 checkpoint) -> fp8_block: block-FP8 experts come from a
      block-FP8 checkpoint, quantised throughout.
    - ``nvfp4`` -> nvfp4; ``int4_wo`` -> int4 (weight-only, W4A16); empty -> none (bf16).
    """
    method = str((checkpoint or {}).get("quant_method") or "").lower()
    gemm_mode, moe_mode = gemm_mode.strip().lower(), moe_mode.strip().lower()
    if method == "mxfp4":
        if gemm_mode in ("", "mxfp4", "w4a16_mxfp4") and moe_mode in ("", "mxfp4", "w4a16_mxfp4"):
            return "mxfp4", None
        return "mxfp4", (f"row says gemm {gemm_mode or '-'} / moe {moe_mode or '-'}; the checkpoint "
                         f"is MXFP4 (quant_method mxfp4), priced as mxfp4")
    block_fp8 = method == "fp8" and bool(checkpoint and checkpoint.get("weight_block_size"))
    if block_fp8:  # one checkpoint format: rows label its dense GEMMs fp8 and its experts fp8_block
        gemm_mode, moe_mode = (("fp8_block" if m == "fp8" else m) for m in (gemm_mode, moe_mode))
    modes = {m for m in (gemm_mode, moe_mode) if m}
    if not modes:
        if method == "fp8" and checkpoint and checkpoint.get("weight_block_size"):
            return "fp8_block", "no quant mode in the row; the checkpoint is block FP8"
        return "none", None
    if modes == {"fp8", "fp8_block"}:
        # Block-FP8 experts come from a block-FP8 checkpoint, quantised throughout (Qwen's -FP8
        # releases, DeepSeek's): the bf16 model_path of the Qwen3.5 rows names the architecture.
        return "fp8_block", (f"row says gemm fp8 / moe fp8_block: a block-FP8 checkpoint, "
                             f"priced as fp8_block throughout")
    if len(modes) > 1:
        raise RowNotExpressible("mixed GEMM / MoE quantisation",
                                f"gemm {gemm_mode} with moe {moe_mode}: kvplan has one weight format")
    mode = modes.pop()
    if mode == "fp8":
        if method == "fp8" and checkpoint and checkpoint.get("weight_block_size"):
            return "fp8_block", None
        return "fp8", None
    simple = {"fp8_block": "fp8_block", "nvfp4": "nvfp4", "int4_wo": "int4", "int4": "int4",
              "w4a16_mxfp4": "mxfp4", "mxfp4": "mxfp4", "bfloat16": "none", "float16": "none"}
    if mode in simple:
        return simple[mode], None
    raise RowNotExpressible("quantisation mode not mapped",
                            f"quant mode {mode!r} has no kvplan quantization.weights")


#: Weight formats whose rows run an FP8 KV cache (``kv_cache_dtype``).
FP8_KV_FORMATS = ("fp8", "fp8_block", "nvfp4")


def moe_activations(row: Mapping, weights: str) -> tuple[Optional[str], Optional[str]]:
    """``quantization.moe_activations`` for a row, and a note: ``mxfp8`` for a vLLM row of MXFP4
    experts on Blackwell, else None (the engine's default). vLLM's own default there is BF16
    activations, but its gpt-oss recipe for Blackwell sets ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``,
    and the rows rule the default out: on B200 at TP 1 the 8k-prompt rows' mean TTFT at 4 clients
    (116 ms) is below what the BF16 kernel's measured rows give one 8k prefill on an idle server
    (157 ms, 108 of it the experts); with MXFP8 activations it is 78 ms. SGLang's default is
    MXFP8 already."""
    from sim.pricing.table_data import GPU_ARCH

    if (weights != "mxfp4" or (_text(row, "backend") or "vllm") != "vllm"
            or GPU_ARCH.get(_text(row, "system")) != "sm100"):
        return None, None
    return "mxfp8", ("MXFP4 experts with MXFP8 activations (vLLM's gpt-oss recipe on Blackwell: "
                     "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; vLLM's default, BF16, prices an idle 8k "
                     "prefill above these rows' measured TTFT)")


def kv_cache_dtype(weights: str) -> str:
    """``kv_cache.dtype`` for the row: ``fp8`` for FP8 and NVFP4 weights, else
    ``auto`` (the model dtype). The CSV records no KV-cache dtype; AIConfigurator's own model
    resolves an fp8, fp8_block or nvfp4 checkpoint to an FP8 KV cache (aiconfigurator-core
    ``sdk/models/helpers.py``, ``_infer_quant_modes_from_raw_config``) and its generator passes
    that as ``--kv-cache-dtype`` (``backend_config_mapping.yaml``); NVIDIA's NVFP4 exports
    declare one too, which vLLM's ``--kv-cache-dtype auto`` uses from 0.14 (vllm#30785). The
    measurements agree: rows with 8k prompts at 16-64 clients show no admission queue where a
    bf16 cache could not have held the clients (MiniMax-M2.5 FP8 on one B300 at 16 clients:
    measured TTFT 0.52 s; replayed with a bf16 cache, 10.3 s). MXFP4 (gpt-oss), INT4
    (Kimi-K2.5) and bf16 rows keep the model dtype, as AIConfigurator's model does. Said once
    in the report's assumptions, not per row. Where an InferenceX script is known
    (``--server scripts``) its flags win: one that passes no ``--kv-cache-dtype`` runs what
    vLLM's ``auto`` gives the checkpoint (``inferencex_vllm_flags.CHECKPOINT_KV_CACHE``)."""
    return "fp8" if weights in FP8_KV_FORMATS else "auto"


def parallel_layout(row: Mapping, is_moe: Optional[bool], backend: str = "vllm") -> dict:
    """``parallel.*`` for the row. AIConfigurator's agg layout: attention TP ``tp_size`` x DP
    ``attention_dp_size`` GPUs, the experts over the same GPUs as MoE TP ``moe_tp_size`` x EP
    ``moe_ep_size``. vLLM: ``--tensor-parallel-size tp --data-parallel-size dp`` and, with EP,
    ``--enable-expert-parallel`` (experts whole over all tp x dp GPUs). Without EP, vLLM shards
    each expert over the tp x dp GPUs (``parallel.data_parallel_size`` without EP). SGLang (``backend``)
    also splits experts by MoE TP within EP groups (``--ep-size`` below tp x dp):
    ``parallel.expert_parallel_size`` = moe_ep."""
    tp = _int(row, "tp_size", 1)
    dp_given = _num(row, "attention_dp_size")
    dp = int(dp_given) if dp_given else 1
    pp = _int(row, "pp_size", 1) or 1
    moe_tp = _int(row, "moe_tp_size", 0)
    moe_ep = _int(row, "moe_ep_size", 0)
    if tp < 1:
        raise RowNotExpressible("parallel layout not expressible", f"tp_size {tp}")
    out = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp, "data_parallel_size": dp,
           "enable_expert_parallel": False}
    if not is_moe or (moe_tp <= 0 and moe_ep <= 0):
        # A dense model: the MoE columns mean nothing (0 or 1 in the file). A model kvplan does
        # not know (None): plain TP; the replay then skips it as an unknown model.
        return out
    moe_tp, moe_ep = max(moe_tp, 1), max(moe_ep, 1)
    if not dp_given and moe_tp * moe_ep != tp and (moe_tp * moe_ep) % tp == 0:
        # The older rows (vLLM 0.12, Qwen3-235B) leave attention_dp_size empty and some have
        # tp_size 1 with moe_tp_size 2: the layout's invariant tp x dp = moe_tp x moe_ep says dp.
        dp = out["data_parallel_size"] = moe_tp * moe_ep // tp
    if moe_tp * moe_ep != tp * dp:
        raise RowNotExpressible("parallel layout not expressible",
                                f"moe_tp {moe_tp} x moe_ep {moe_ep} != tp {tp} x attention dp {dp}")
    if moe_ep > 1 and moe_tp > 1:
        if backend != "sglang":
            raise RowNotExpressible("parallel layout not expressible",
                                    f"MoE TP {moe_tp} x EP {moe_ep}: vLLM spreads experts over EP "
                                    f"only or splits them by TP only")
        # SGLang's --ep-size below tp x dp: experts over moe_ep groups, each split moe_tp ways.
        out["expert_parallel_size"] = moe_ep
    # moe_ep 1 with DP: every expert split over all tp x dp GPUs (vLLM without
    # --enable-expert-parallel flattens TP across DP for the MoE; SGLang's MoE TP is its --tp).
    out["enable_expert_parallel"] = moe_ep > 1
    return out


#: GPUs in one node of every system the CSV's multi-node-looking rows name (H200, B200, B300).
NODE_GPUS = 8


def relabel_squared_ep(row: Mapping) -> tuple[Mapping, Optional[str]]:
    """The row as measured, and a note, for rows whose layout labels square the EP degree e of
    an EP-e deployment on e GPUs; replayed as TP e with the experts over EP e. Any other row is
    returned unchanged. Two labellings, one per backend:

    - SGLang: ``tp_size = moe_tp x moe_ep`` with ``moe_tp = moe_ep = e`` and more GPUs than a
      node (TP 16 as MoE 4 x 4, TP 64 as 8 x 8; 160 rows of DeepSeek-V3/R1 and Qwen3.5 on B200,
      B300, H200). Where the CSV holds both, the two rows' measurements are identical (50
      rows: each TP 16 / 4 x 4 row equals its TP 4 / EP 4 row, each TP 64 / 8 x 8 its TP 8 / EP
      8), and a 64-GPU tensor-parallel attention over 8 nodes is not a serving layout.
    - vLLM: ``tp_size = attention_dp_size = e`` with ``moe_ep_size = e x e`` (TP 4 x DP 4 /
      EP 16, TP 2 x DP 2 / EP 4: all 97 vLLM rows with attention DP, MiniMax-M2.5 on H100,
      B200, B300; their ids say ``tp4_ep4``). 65 of them have a TP e / EP e row of the same
      point (GPU, model, precision, isl, osl, clients): 63 measure the same TPOT within 3%, 48
      TTFT and TPOT both. Of the 31 with a TP ``e x e`` row on as many GPUs as the label
      counts, 2 do. ``batch_size`` there is the clients / e (kept: ``silicon_concurrency``
      gives the clients)."""
    backend = _text(row, "backend")
    tp, moe_tp, moe_ep = _int(row, "tp_size", 1), _int(row, "moe_tp_size", 0), _int(row, "moe_ep_size", 0)
    dp_given = _num(row, "attention_dp_size")
    dp = int(dp_given) if dp_given else 1
    if backend == "sglang" and moe_tp == moe_ep > 1 and tp == moe_tp * moe_ep and tp > NODE_GPUS and dp == 1:
        e, label = moe_ep, f"tp {tp} = MoE TP {moe_tp} x EP {moe_ep}"
    elif backend == "vllm" and tp == dp > 1 and moe_ep == tp * dp and moe_tp <= 1:
        e, label = tp, f"tp {tp} x attention DP {dp}, EP {moe_ep}"
    else:
        return row, None
    fixed = {**row, "tp_size": str(e), "attention_dp_size": "1", "moe_tp_size": "1", "moe_ep_size": str(e)}
    return fixed, (f"labelled {label}: the EP {e} deployment on {e} GPUs (such rows' measurements "
                   f"equal the TP {e} / EP {e} rows'), replayed as TP {e} with EP {e}")


def client_concurrency(row: Mapping, dp: int) -> int:
    """The number of clients: ``silicon_concurrency`` from ``silicon_data_source`` where it is
    recorded, else ``batch_size`` x attention DP. AIConfigurator's agg ``batch_size`` is per
    attention-DP rank: in every row that records both, silicon_concurrency = batch_size x
    attention_dp_size (1,228 vLLM agg rows with DP 1 or empty, 36 with DP 2, 61 with DP 4; 3 rows
    record no concurrency)."""
    m = re.search(r"silicon_concurrency=(\d+)", _text(row, "silicon_data_source"))
    if m:
        return int(m.group(1))
    return _int(row, "batch_size", 0) * max(dp, 1)


def clients_per_rank(clients: int, dp: int) -> int:
    """The clients one DP rank's scheduler serves (ranks share them, the last one fewer)."""
    return -(-clients // max(dp, 1))


def server_seats(backend: str, version: str, hardware: str, clients: int, dp: int) -> Optional[int]:
    """``scheduler.max_num_seqs`` for a vLLM row whose clients per DP rank exceed the release's
    default on the GPU (1024 on an H100-class GPU), else None (the default stands).

    Why: the rows record no server flags, but a benchmark of N clients is run on a server sized
    for them. AIConfigurator's generator writes ``--max-num-seqs`` as twice the batch size from
    512 up (``generator/rule_plugin/vllm.rule``), and the one vLLM row beyond the default says so
    itself: B300 MiniMax-M2.5 at 2,048 clients measures a mean TTFT of 3.7 s and TPOT 66 ms, so by
    Little's law about 1,940 requests were decoding at once, not 1,024. Each DP rank runs its
    own scheduler: the seats are per rank."""
    if backend != "vllm":
        return None
    per_rank = clients_per_rank(clients, dp)
    default = get_engine("vllm", version).default_max_num_seqs(get_hardware(hardware))
    return per_rank if per_rank > default else None


#: ``--server``: which server flags a row is replayed with (the CSV records none): ``scripts``
#: (the default) InferenceX's script flags at the row's measured date for its rows, the release's
#: defaults for the rest; ``defaults`` the release's defaults for every row; ``aic-*``
#: AIConfigurator's generator rules (a what-if).
SERVERS = ("scripts", "defaults", "aic-generator", "aic-benchmark")


def generator_flags(backend: str, server: str, batch: int, isl: int, osl: int) -> dict:
    """The config sections AIConfigurator's generator writes for an aggregated worker of
    ``batch`` sequences (per DP rank) serving ``isl`` / ``osl``; {} for ``defaults`` (the
    engine release's own defaults).

    Why: the measured rows name AIConfigurator configs (``config_id=`` in the db dump) and record
    no flags; if they were deployed through its generator, their servers ran its rules
    (``generator/rule_plugin/vllm.rule`` / ``sglang.rule`` since 2025-12, and the benchmark mode's
    ``rule_plugin/benchmark/*.rule`` since 2026-01-30; ``config/backend_config_mapping.yaml`` maps
    the keys to flags):

    - vLLM: ``--max-num-seqs`` = the batch (benchmark mode) or 512 below 512 and twice the batch
      from 512 (the default rules); ``--max-num-batched-tokens`` = that + isl + 1500;
      ``--max-model-len`` = isl + osl + 1500.
    - SGLang: ``--max-running-requests`` as vLLM's seats, ``--max-prefill-tokens`` = isl + 1500,
      ``--enable-mixed-chunk``; ``--context-length`` = isl + osl + 1500.

    Chunk sizes change how a wave of prompts is split over steps, which is most of a closed
    loop's TTFT: at isl 1024 vLLM's budget is 2.5-3k tokens a step instead of 8k."""
    if server in ("scripts", "defaults"):
        return {}
    seats = batch if server == "aic-benchmark" else (512 if batch < 512 else 2 * batch)
    if backend == "sglang":
        return {"sglang": {"max_running_requests": seats, "max_prefill_tokens": isl + 1500,
                           "enable_mixed_chunk": True},
                "kv_cache": {"max_model_len": isl + osl + 1500}}
    return {"scheduler": {"max_num_seqs": seats, "max_num_batched_tokens": seats + isl + 1500},
            "kv_cache": {"max_model_len": isl + osl + 1500}}


def inferencex_script_flags(row: Mapping, clients: int, parallel: Mapping,
                            labelled: Optional[Mapping] = None) -> tuple[dict, list[str]]:
    """(config sections, notes): the server flags InferenceX's script for ``row`` passed on the
    row's measured date, as kvplan config keys; ({}, []) for a row InferenceX did not measure.

    Why: the CSV records no server flags, and InferenceX's scripts
    (``benchmarks/single_node/fixed_seq_len/<model>_<precision>_<gpu>.sh``) set many and changed
    them over the months its rows span: vLLM token budgets of 2 x ISL on some Blackwell scripts,
    SGLang's chunk sizes, ``--max-running-requests``, ``--mem-fraction-static`` and
    ``--scheduler-recv-interval``. The tables and their sources live in
    ``inferencex_vllm_flags`` / ``inferencex_sglang_flags`` (one per engine); flags kvplan cannot
    express are named in the notes. A row beyond the concurrency InferenceX's sweep reached for
    its config on that date (``inferencex_sweeps``) was measured by another harness: no flags.
    ``labelled`` is the row as labelled where ``relabel_squared_ep`` replays it on another layout."""
    if client_of(row) != "inferencex":
        return {}, []
    backend = _text(row, "backend") or "vllm"
    script_flags = {"vllm": vllm_script_flags, "sglang": sglang_script_flags}.get(backend)
    if script_flags is None:
        return {}, []
    isl, osl = _int(row, "isl", 0), _int(row, "osl", 0)
    outside = outside_sweep(_text(row, "model_path"), precision_label(row), _text(row, "system"), backend,
                            measured_date(row), isl, osl, clients)
    if outside:
        return {}, [outside]
    tp, dp = parallel["tensor_parallel_size"], parallel["data_parallel_size"]
    ep = parallel.get("expert_parallel_size") or (tp * dp if parallel.get("enable_expert_parallel") else 1)
    script, notes = script_flags(_text(row, "model_path"), precision_label(row), _text(row, "system"),
                                 measured_date(row), isl, osl, clients, tp, ep, dp)
    ranks = _int(labelled, "attention_dp_size", 1) if labelled is not None else 1
    budget = script.get("scheduler", {}).get("max_num_batched_tokens")
    if budget and ranks > 1 and labelled is not None and vllm_script_runs_dp_attention(labelled):
        # The script's DP-attention branch runs DP e x TP 1, one scheduler and one token budget
        # per rank; the relabelled replay runs one scheduler for the e ranks: theirs summed.
        script = {**script, "scheduler": {**script["scheduler"], "max_num_batched_tokens": budget * ranks}}
        notes = [*notes, f"max_num_batched_tokens {budget} per DP rank x {ranks} ranks "
                         f"(the relabelled deployment runs one scheduler for them)"]
    return script, notes


def vllm_script_runs_dp_attention(row: Mapping) -> bool:
    """Whether the InferenceX vLLM script version that measured ``row`` has a DP-attention branch
    (``--tensor-parallel-size=1 --data-parallel-size=$TP``: MiniMax-M2.5 FP4's), which a row
    labelled with attention DP then ran; the others run TP with EP whatever the label."""
    measured = measured_date(row)
    family = inferencex_vllm_flags.model_family(_text(row, "model_path"))
    if not measured or family is None:
        return False
    recipe = inferencex_vllm_flags.find_recipe(family, _text(row, "system"), precision_label(row), measured)
    return recipe is not None and recipe.parallel == "dp-attention"


def _model_error(model: str) -> Optional[tuple[str, str]]:
    """(skip kind, message) when kvplan cannot resolve ``model``, else None."""
    from sim.catalog.models import get_model

    try:
        get_model(model)
    except KvplanError as exc:
        return skip_kind(exc), _short(exc)
    return None


def _is_moe(model: str) -> Optional[bool]:
    """Whether kvplan's spec of ``model`` is a mixture of experts (None: kvplan does not know
    the model; the simulation then reports the unknown model as the skip reason)."""
    from sim.catalog.models import get_model

    try:
        return bool(get_model(model).is_moe)
    except KvplanError:
        return None


def cohorts_stay_in_step(engine: str, server: str, overrides: Sequence[str] = ()) -> bool:
    """Whether fixed-length closed-loop clients stay in lock-step on this server, so the burst
    replay keeps the measured (exact) lengths instead of ``BURST_DESYNC_CV``'s spread.

    Why it differs by engine: real clients drift apart through send and API-server jitter of a
    few milliseconds. Under vLLM's chunked prefill a request that arrives one step late is
    prefilled beside the others' decodes, starts decoding a step behind and finishes a step
    behind: each drift is kept and adds up, which the spread stands in for. SGLang (without
    ``--enable-mixed-chunk``) runs a prefill batch whenever requests wait and pauses decoding
    meanwhile (``Scheduler.get_next_batch_to_run``: a new prefill batch before the running
    decode batch), so requests that arrive over one or several prefill batches all start their
    first decode step together and, with equal output lengths, finish in the same step: the
    drift is undone every wave. The measured TTFTs agree: on the same H100 Qwen3-32B points
    SGLang's is 2-4x vLLM's (a wave's whole prefill), while its TPOT is lower."""
    if engine != "sglang":
        return False
    # The server flags this replay gives the row (the batch and lengths do not change them),
    # then any --set, the last one winning.
    mixed = generator_flags(engine, server, 1, 1, 1).get("sglang", {}).get("enable_mixed_chunk", False)
    for keys, value in map(parse_override, overrides):
        if keys == ["sglang", "enable_mixed_chunk"]:
            mixed = value is True
    return not mixed


def row_to_point(row: Mapping, *, requests_per_client: int = DEFAULT_REQUESTS_PER_CLIENT,
                 warmup_per_client: int = DEFAULT_WARMUP_PER_CLIENT, output_cv: float = 0.0,
                 phases: str = "burst", overrides: Sequence[str] = (), server: str = "scripts",
                 client: str = "auto",
                 checkpoint_quant: Optional[Callable[[str], Optional[dict]]] = None,
                 is_moe: Optional[Callable[[str], Optional[bool]]] = None,
                 spec_decode: Optional[Mapping[str, str]] = None,
                 dated: Optional[Mapping[str, Mapping]] = None) -> ReplayPoint:
    """One CSV row -> the kvplan scenario that replays it (``RowNotExpressible`` when kvplan's
    config cannot say it). Deterministic; reads nothing but the package's model configs
    (``checkpoint_quant`` and ``is_moe`` replace those look-ups in tests). ``output_cv`` > 0 is
    a sensitivity check, not the measurement: output lengths lognormal around ``osl`` with that
    CV (clipped to osl x (1 +- 6 CV)), which breaks the lock-step of N clients with identical
    lengths that a deterministic simulation otherwise keeps forever.

    ``phases`` ``burst`` (the default) replays the profiling phase as genai-perf / aiperf run it:
    the warm-up phase ends when its last response arrives ("AIPerf waits ... for all warmup
    responses before starting profiling", aiperf docs/tutorials/warmup.md), so profiling starts
    on an idle server with all N clients sending at once, and every profiled request counts (no
    warm-up is simulated or dropped). After that first wave the real clients drift apart: their
    mean TTFTs are a first wave's queue (about N x prefill / 2 for its requests) averaged over
    ten waves plus a desynchronised loop's; identical clients kept in lock-step would give 2-3
    times that. What drifts them (send and API-server jitter) is not modelled; on an engine that
    keeps the drift (vLLM, ``cohorts_stay_in_step``) a 1% output-length
    spread (``BURST_DESYNC_CV``, unless ``output_cv`` is given) stands in for it: it moves a
    request's last token by about 10 of 1024 steps, enough to break the lock-step, and changes
    TPOT by under 1%.

    ``spec_decode`` (row id -> reason, ``spec_decode_copies`` over the whole CSV) names rows that
    InferenceX measured with speculative decoding beyond those the row's own labels identify
    (``spec_decode_reason``): both are skipped, their drafts' acceptance unrecorded.

    ``dated`` (row id -> the dated row it copies, ``dated_copies`` over the whole CSV) gives an
    undated re-filed copy its original's date, image and release.

    ``overrides`` (``key=value``, as ``kvplan --set``) are merged into the mapped config last: a
    what-if over the rows (``cost_model.moe_routing=balanced``), recorded in each row's notes."""
    checkpoint_quant = checkpoint_quant or checkpoint_quantization
    is_moe = is_moe or _is_moe
    notes: list[str] = []
    note: Optional[str]  # each step's note, None where it has none
    original = (dated or {}).get(_text(row, "id"))
    if original is not None:
        row, note = adopt_dated_copy(row, original)
        notes.append(note)
    system = _text(row, "system")
    hardware = HARDWARE_OF.get(system)
    if hardware is None:
        raise RowNotExpressible("hardware not mapped", f"system {system!r} has no kvplan hardware")
    model_path = _text(row, "model_path")
    model = CHECKPOINT_ALIASES.get(model_path, model_path)
    if model != model_path:
        notes.append(f"model {model_path} simulated as {model} (same architecture)")
    moe = is_moe(model)
    if moe is None:  # kvplan cannot resolve the model: say so first, the rest means nothing
        raise RowNotExpressible(*(_model_error(model) or ("unknown model", f"model {model}")))
    weights, note = weights_quantization(_text(row, "gemm_quant_mode"), _text(row, "moe_quant_mode"),
                                         checkpoint_quant(model_path))
    if note:
        notes.append(note)
    scope, note = checkpoint_scope(model_path, weights)
    if note:
        notes.append(note)
    version, note = engine_version(row)
    if note:
        notes.append(note)
    kv_dtype = kv_cache_dtype(weights)
    activations, note = moe_activations(row, weights)
    if note:
        notes.append(note)
    labelled = row
    row, note = relabel_squared_ep(row)
    if note:
        notes.append(note)
    parallel = parallel_layout(row, moe, _text(row, "backend") or "vllm")
    if parallel["data_parallel_size"] > 1 and not _num(row, "attention_dp_size"):
        notes.append(f"attention_dp_size empty: DP {parallel['data_parallel_size']} from the layout's "
                     f"tp x dp = moe_tp x moe_ep")
    # batch_size is per attention-DP rank as labelled (a relabelled row's too)
    clients = client_concurrency(row, parallel["data_parallel_size"]) if note is None else \
        client_concurrency(labelled, _int(labelled, "attention_dp_size", 1) or 1)
    isl, osl = _int(row, "isl", 0), _int(row, "osl", 0)
    if clients < 1 or isl < 1 or osl < 2:
        raise RowNotExpressible("bad row", f"batch_size {clients}, isl {isl}, osl {osl}")
    if client_of(row) == "inferencex" and (_text(row, "backend") or "vllm") == "vllm":
        defect = inferencex_vllm_flags.client_defect(model_path, system, measured_date(row), clients)
        if defect:  # the row's label is not what ran: nothing to replay it with
            raise RowNotExpressible("client defect: label not what ran", defect)
    spec = spec_decode_reason(row) or (spec_decode or {}).get(_text(row, "id"))
    if spec and spec.startswith(EITHER_CONFIG):  # twin runs under one label: which is this?
        raise RowNotExpressible("base or speculative-decoding run, not recorded which", spec)
    if spec:  # ran with drafts whose acceptance nobody recorded: no rate to replay them at
        raise RowNotExpressible("speculative decoding run, acceptance not recorded", spec)
    if clients > 256:
        notes.append(f"N = {clients} > 256: AIConfigurator's genai-perf runner passes --max-threads 256, "
                     f"so fewer requests may have been in flight and TTFT may include time queued in the client")
    seats = server_seats(_text(row, "backend") or "vllm", version, hardware, clients,
                         parallel["data_parallel_size"])
    if seats is not None:
        notes.append(f"max_num_seqs {seats}: {clients} clients exceed vLLM's default on {hardware}; "
                     f"the server admitted them all (assumption: a benchmark server is sized for its clients)")
    if "silicon_concurrency=" not in _text(row, "silicon_data_source"):
        notes.append(f"no silicon_concurrency recorded: N = batch_size x attention DP = {clients}")
    pooled = client == "aiperf-pool" and client_of(row) == "genai-perf"
    client = client_of(row) if client in ("auto", "aiperf-pool") else "genai-perf"
    engine = _text(row, "backend") or "vllm"
    if phases == "burst":
        warmup = 0
        if output_cv <= 0 and client != "inferencex":
            if cohorts_stay_in_step(engine, server, overrides):
                lengths = ("exact, as measured: SGLang runs prefill and decode in separate batches, so "
                           "the requests a wave admits decode in step and finish together whatever "
                           "jitter staggered their arrivals")
            else:
                output_cv = BURST_DESYNC_CV
                lengths = f"spread {output_cv:.0%} (CV) to stand in for the clients' drift"
            notes.append(f"profiling phase from an idle server, all {clients} clients at t=0; output "
                         f"lengths {lengths}")
        elif client == "inferencex":
            notes.append(f"InferenceX's client: profiling from an idle server, all {clients} clients at t=0, "
                         f"prompt and output lengths uniform on [0.8 L, L] (--random-range-ratio 0.8), "
                         f"prompts decoded from runs of consecutive token ids (workload.prompt_text synthetic)")
    else:
        warmup = warmup_per_client * clients
    if pooled:  # the warm-up fills the prefix cache: simulate it (on the same pool), then drop it
        warmup = warmup_per_client * clients
        notes.append(f"sensitivity: aiperf's default pool of {AIPERF_POOL_ENTRIES} prompts (shuffle), "
                     f"{warmup} warm-up requests on it simulated first and dropped, prefix caching on")
    in_len = length_spec(isl, client)
    out_len: dict = length_spec(osl, client)
    longest = osl
    if output_cv > 0:
        longest = int(math.ceil(osl * (1 + 6 * output_cv)))
        out_len = {"dist": "lognormal", "mean": osl, "cv": output_cv,
                   "min": max(2, int(osl * (1 - 6 * output_cv))), "max": longest}
        if is_sensitivity_run(phases, output_cv):
            notes.append(f"sensitivity: output lengths lognormal, mean {osl}, CV {output_cv} (not the measurement's)")
    config: dict[str, Any] = {
        "model": model,
        "hardware": hardware,
        "dtype": "bfloat16",
        "quantization": {"weights": weights, **({"moe_activations": activations} if activations else {}),
                         **({"scope": scope} if scope else {})},
        "engine": {"name": engine, "version": version},
        "parallel": parallel,
        "kv_cache": {"max_model_len": isl + longest, "dtype": kv_dtype},
        "workload": {
            "num_requests": warmup + requests_per_client * clients,
            "arrival": {"process": "closed", "concurrency": clients, "think_time_s": 0},
            "input_len": in_len,
            "output_len": out_len,
        },
    }
    if client == "inferencex":
        # Its prompts are decoded from runs of consecutive token ids (sample_random_requests, as
        # vLLM's RandomDataset); genai-perf's are drawn from a text corpus (natural).
        config["workload"]["prompt_text"] = "synthetic"
    if pooled:
        config["workload"]["prompt_pool"] = {"entries": AIPERF_POOL_ENTRIES, "sampling": "shuffle"}
        config["kv_cache"]["prefix_caching"] = True
    if seats is not None:
        config["scheduler"] = {"max_num_seqs": seats}
    if server == "scripts":
        script, script_notes = inferencex_script_flags(row, clients, parallel,
                                                       labelled if labelled is not row else None)
        for section, values in script.items():
            values = dict(values)
            if section == "kv_cache" and "max_model_len" in values:
                # the script's context limit rejects nothing the replay sends (a longer replay:
                # --output-cv) and sizes no memory in kvplan: the larger of the two
                values["max_model_len"] = max(values["max_model_len"], config["kv_cache"]["max_model_len"])
            config.setdefault(section, {}).update(values)
        notes.extend(script_notes)
    flags = generator_flags(config["engine"]["name"], server,
                            clients_per_rank(clients, parallel["data_parallel_size"])
                            if config["engine"]["name"] == "vllm" else clients, isl, longest)
    if flags:
        for section, values in flags.items():
            config.setdefault(section, {}).update(values)
        notes.append(f"server flags of AIConfigurator's generator ({server}): "
                     + ", ".join(f"{s}.{k}={v}" for s, vs in flags.items() for k, v in vs.items()))
    for item in overrides:
        keys, value = parse_override(item)
        node = config
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item}: {k} is a value here, not a section")
        node[keys[-1]] = value
        notes.append(f"--set {item}")
    return ReplayPoint(row_id=_text(row, "id"), partition=partition_of(row), config=config,
                       warmup=warmup, silicon_ttft_ms=_num(row, "silicon_ttft_ms") or math.nan,
                       silicon_tpot_ms=_num(row, "silicon_tpot_ms") or math.nan, notes=notes, phases=phases,
                       source=data_source(row))


# --- replay -------------------------------------------------------------------------------------


def skip_kind(exc: BaseException) -> str:
    """A short reason for a skipped row, for the table of reasons."""
    if isinstance(exc, RowNotExpressible):
        return exc.kind
    msg = str(exc)
    if isinstance(exc, DoesNotFitError):
        return "does not fit in GPU memory"
    if msg.startswith("model: unknown model"):
        return "unknown model"
    if msg.startswith("model:"):
        return "model not modelled"
    if msg.startswith("quantization.weights"):
        return "unsupported quantisation on this GPU"
    if msg.startswith("engine."):
        return "engine release not modelled"
    return f"{type(exc).__name__}: {msg.split(':')[0][:60]}"


def _short(msg: object, n: int = 300) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[:n - 3] + "..."


def measured_means(requests: Sequence, warmup: int) -> tuple[Optional[float], Optional[float], int]:
    """Mean TTFT and TPOT (ms) of the finished requests after the first ``warmup`` sent."""
    order = sorted(range(len(requests)), key=lambda i: (requests[i].arrival_time, i))
    kept = [requests[i] for i in order[warmup:]]
    ttft = [r.ttft for r in kept if r.ttft is not None]
    tpot = [r.tpot for r in kept if r.tpot is not None]
    return (1000 * statistics.fmean(ttft) if ttft else None,
            1000 * statistics.fmean(tpot) if tpot else None, len(ttft))


def roofline_reason(config: dict) -> str:
    """Why ``cost_model.source: auto`` fell back to the roofline for this scenario: the
    operator-table pricer's own one-line refusal."""
    from sim.api import resolve_deployment

    strict = json.loads(json.dumps(config))
    strict["cost_model"] = {"source": "operator_tables"}
    try:
        resolve_deployment(strict)
    except KvplanError as exc:
        return _short(exc, 200)
    return "unknown (operator tables accept the scenario)"


def replay(point: ReplayPoint, seed: int = 0) -> dict:
    """Simulate one point; the result row (``status`` replayed or skipped). Only kvplan's own
    errors (``KvplanError``) skip a row: anything else is a bug and propagates."""
    from sim.api import simulate

    out: dict[str, Any] = {"id": point.row_id, "system": point.partition[0], "model": point.partition[1],
                           "precision": point.partition[2], "source": point.source, "notes": list(point.notes),
                           "config": point.config, "warmup_requests": point.warmup,
                           "silicon_ttft_ms": point.silicon_ttft_ms, "silicon_tpot_ms": point.silicon_tpot_ms}
    t0 = time.perf_counter()
    try:
        if point.phases == "spread":
            ramp = ramp_up(point.config)
            point.config["workload"]["arrival"]["ramp_up_s"] = round(ramp, 6)
            out["notes"].append(f"clients started one by one over {ramp:.3g} s (one request's lifetime on an "
                                f"idle server at this concurrency): phases spread")
        res = simulate(point.config, seed=seed)
    except KvplanError as exc:
        out.update(status="skipped", skip_reason=skip_kind(exc), error=_short(exc),
                   wall_s=time.perf_counter() - t0)
        return out
    wall = time.perf_counter() - t0
    s = res.summary
    ttft, tpot, n = measured_means(res.requests, point.warmup)
    cm = s.get("cost_model", {})
    out.update(status="replayed", wall_s=wall, sim_ttft_ms=ttft, sim_tpot_ms=tpot, measured_requests=n,
               sim_ttft_all_ms=s.get("mean_ttft_ms"), sim_tpot_all_ms=s.get("mean_tpot_ms"),
               achieved_concurrency=s.get("achieved_concurrency"), completed=s.get("completed"),
               num_steps=s.get("simulator", {}).get("num_steps"),
               pricer=cm.get("source"), pricer_description=cm.get("description"),
               warnings=s.get("warnings"))
    if cm.get("source") == "roofline":
        out["roofline_reason"] = roofline_reason(point.config)
    osl = int(point.config["workload"]["output_len"]["mean"])
    out["silicon_e2el_ms"], out["sim_e2el_ms"] = (e2el_ms(out["silicon_ttft_ms"], out["silicon_tpot_ms"], osl),
                                                  e2el_ms(ttft, tpot, osl))
    for name, real, sim in (("ttft", "silicon_ttft_ms", "sim_ttft_ms"), ("tpot", "silicon_tpot_ms", "sim_tpot_ms"),
                            ("ttft_all", "silicon_ttft_ms", "sim_ttft_all_ms"),
                            ("e2el", "silicon_e2el_ms", "sim_e2el_ms")):
        r, s_ = out[real], out[sim]
        out[f"{name}_err"] = (s_ - r) / r if s_ is not None and r and r > 0 else None
    return out


def e2el_ms(ttft_ms: Optional[float], tpot_ms: Optional[float], osl: int) -> Optional[float]:
    """A request's mean latency, TTFT + (osl - 1) x TPOT: exact for fixed output lengths, as
    genai-perf / aiperf define inter-token latency over the tokens after the first. Why report
    it: a closed loop's throughput is N / E2E, so its error is the server's speed alone, while
    how E2E splits into TTFT and TPOT also depends on how in step the clients run (a wave of N
    requests sent together waits for each other's prefills: TTFT up, TPOT down)."""
    if ttft_ms is None or tpot_ms is None:
        return None
    return ttft_ms + (osl - 1) * tpot_ms


def ramp_up(config: dict) -> float:
    """One request's lifetime, priced before any simulation: its prefill alone, then ``osl - 1``
    decode steps of the N clients at half their output. Starting client k at k/N of it spreads the
    clients' phases over a cycle, the steady state of a closed loop whose clients have drifted
    apart. Started together, N identical clients stay in step for ever in a deterministic
    simulation (their last tokens are one decode step apart, so their next prompts arrive
    together and queue behind each other's prefills), and the measured TTFTs say the real ones
    did not: at c4 with 8k prompts they are 1.0-1.3 times one prefill, where the lock-step gives
    2.5-4 (``--phases together`` shows it)."""
    from sim.api import resolve_deployment
    from sim.policies.step import StepShape

    w = config["workload"]
    isl, osl, n = int(w["input_len"]["mean"]), int(w["output_len"]["mean"]), int(w["arrival"]["concurrency"])
    price = resolve_deployment(config).cost_model.price
    prefill = price(StepShape(num_prefill_tokens=isl, num_prefill_seqs=1,
                              prefill_attention_work=isl * (isl + 1) // 2))
    decode = price(StepShape(num_decode_seqs=n, decode_context_tokens=n * (isl + osl // 2)))
    return prefill + (osl - 1) * decode


def _replay_row(args: tuple[dict, dict, int]) -> dict:
    """Worker entry: map and replay one row (mapping skips included)."""
    row, opts, seed = args
    try:
        point = row_to_point(row, **opts)
    except (RowNotExpressible, KvplanError) as exc:
        return {"id": _text(row, "id"), "system": _text(row, "system"), "model": _text(row, "model_path"),
                "precision": precision_label(row), "source": data_source(row),
                "status": "skipped", "skip_reason": skip_kind(exc),
                "error": _short(exc), "wall_s": 0.0,
                "silicon_ttft_ms": _num(row, "silicon_ttft_ms"), "silicon_tpot_ms": _num(row, "silicon_tpot_ms")}
    return replay(point, seed)


# --- selection ----------------------------------------------------------------------------------


def stratified_sample(rows: Sequence[Mapping], n: int, seed: int) -> list[Mapping]:
    """``n`` rows drawn per partition (GPU x model x precision): one from each partition while
    ``n`` allows, the rest in proportion to the partitions' sizes (largest remainders), at
    random within a partition (``seed``); in the file's order."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        groups[partition_of(r)].append(i)
    keys = sorted(groups)
    n = min(n, len(rows))
    take = {k: 0 for k in keys}
    if n >= len(keys):
        for k in keys:
            take[k] = 1
    left = n - sum(take.values())
    if left > 0:
        spare = {k: len(groups[k]) - take[k] for k in keys}
        total = sum(spare.values())
        quota = {k: left * spare[k] / total for k in keys}
        for k in keys:
            take[k] += min(spare[k], int(quota[k]))
        rest = n - sum(take.values())
        for k in sorted(keys, key=lambda k: (-(quota[k] - int(quota[k])), k)):
            if rest <= 0:
                break
            if take[k] < len(groups[k]):
                take[k] += 1
                rest -= 1
    elif n < len(keys):  # fewer rows than partitions: the largest partitions
        for k in sorted(keys, key=lambda k: (-len(groups[k]), k))[:n]:
            take[k] = 1
    rng = random.Random(seed)
    chosen: list[int] = []
    for k in keys:
        chosen += rng.sample(groups[k], take[k])
    return [rows[i] for i in sorted(chosen)]


# --- report -------------------------------------------------------------------------------------


def _stats(rows: Sequence[dict]) -> dict:
    out: dict[str, Any] = {"n": len(rows)}
    for m in ("ttft", "tpot", "ttft_all", "e2el"):
        errs = [r[f"{m}_err"] for r in rows if r.get(f"{m}_err") is not None]
        out[f"{m}_mape"] = statistics.fmean(abs(e) for e in errs) if errs else None
        out[f"{m}_bias"] = statistics.fmean(errs) if errs else None
        out[f"{m}_median_ape"] = statistics.median(abs(e) for e in errs) if errs else None
    out["pricer"] = dict(Counter(r.get("pricer") for r in rows))
    walls = [r["wall_s"] for r in rows]
    out["mean_wall_s"] = statistics.fmean(walls) if walls else None
    return out


def mapping_coverage(rows: Sequence[Mapping], opts: Mapping) -> dict:
    """Over ``rows`` (every row of the backend, not only those simulated): how many map to a
    kvplan config, and why the others do not (no simulation: the memory check and the pricer
    come with the replay)."""
    reasons: Counter = Counter()
    for r in rows:
        try:
            row_to_point(r, **opts)
        except (RowNotExpressible, KvplanError) as exc:
            reasons[skip_kind(exc)] += 1
    return {"rows": len(rows), "mapped": len(rows) - sum(reasons.values()),
            "not_mapped": dict(reasons.most_common())}


def repeat_spread(results: Sequence[dict]) -> dict:
    """How far the CSV agrees with itself: the points (GPU, model, precision, release, layout,
    lengths, clients) that two or more collections measured with different numbers, and the
    spread of their TTFTs and TPOTs (largest / smallest - 1). Identical copies of one
    measurement in several files are not repeats and are left out. Why: an error target means
    little below the data's own repeat spread."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in results:
        c = r.get("config")
        if r.get("status") != "replayed" or not c:
            continue
        p, w = c["parallel"], c["workload"]
        key = (r["system"], r["model"], r["precision"], c["engine"].get("version"),
               p.get("tensor_parallel_size"), p.get("data_parallel_size", 1), p.get("enable_expert_parallel"),
               p.get("expert_parallel_size"), w["input_len"]["mean"], w["output_len"]["mean"],
               w["arrival"]["concurrency"])
        groups[key].append((r.get("source") or "?", r["silicon_ttft_ms"], r["silicon_tpot_ms"]))
    ttft, tpot = [], []
    for measured in groups.values():  # every measurement of the point: independent of row order
        if len({m[0] for m in measured}) < 2:
            continue
        if all(same_means(m[1:], measured[0][1:]) for m in measured):
            continue  # one measurement copied into several files (to the files' rounding)
        t = [m[1] for m in measured]
        q = [m[2] for m in measured]
        ttft.append(max(t) / min(t) - 1)
        tpot.append(max(q) / min(q) - 1)
    return {"points": len(ttft),
            "ttft_spread_mean": statistics.fmean(ttft) if ttft else None,
            "ttft_spread_median": statistics.median(ttft) if ttft else None,
            "tpot_spread_mean": statistics.fmean(tpot) if tpot else None,
            "tpot_spread_median": statistics.median(tpot) if tpot else None}


def summarize(results: Sequence[dict], all_rows: Sequence[Mapping]) -> dict:
    done = [r for r in results if r["status"] == "replayed"]
    skipped = [r for r in results if r["status"] == "skipped"]
    by_gpu: dict[str, list] = defaultdict(list)
    by_part: dict[str, list] = defaultdict(list)
    by_pricer: dict[str, list] = defaultdict(list)
    by_source: dict[str, list] = defaultdict(list)
    for r in done:
        by_gpu[r["system"]].append(r)
        by_source[r.get("source") or "?"].append(r)
        by_part[f"{r['system']} | {r['model']} | {r['precision']}"].append(r)
        by_pricer[r.get("pricer") or "?"].append(r)
    reasons = Counter(r["skip_reason"] for r in skipped)
    skip_detail: dict[str, list] = defaultdict(list)
    for r in skipped:
        d = f"{r['system']} | {r['model']} | {r['precision']}: {r['error']}"
        if d not in skip_detail[r["skip_reason"]] and len(skip_detail[r["skip_reason"]]) < 5:
            skip_detail[r["skip_reason"]].append(d)
    roof = Counter(r.get("roofline_reason") for r in done if r.get("pricer") == "roofline")
    # Time: the mean seconds per attempted row of each partition times the partition's size.
    part_all = Counter(partition_of(r) for r in all_rows)
    wall_of: dict[tuple, list] = defaultdict(list)
    for r in results:
        wall_of[(r["system"], r["model"], r["precision"])].append(r["wall_s"])
    overall_mean = statistics.fmean(r["wall_s"] for r in results) if results else 0.0
    projected = sum(cnt * (statistics.fmean(wall_of[k]) if wall_of.get(k) else overall_mean)
                    for k, cnt in part_all.items())
    walls = [r["wall_s"] for r in done]
    return {
        "coverage": {"rows": len(all_rows), "attempted": len(results), "replayed": len(done),
                     "skipped": len(skipped),
                     "replayed_share": len(done) / len(results) if results else None,
                     "skip_reasons": dict(reasons.most_common()), "skip_examples": dict(skip_detail)},
        "overall": _stats(done),
        "by_gpu": {k: _stats(v) for k, v in sorted(by_gpu.items())},
        "by_partition": {k: _stats(v) for k, v in sorted(by_part.items())},
        "by_pricer": {k: _stats(v) for k, v in sorted(by_pricer.items())},
        "by_source": {k: _stats(v) for k, v in sorted(by_source.items())},
        "repeats": repeat_spread(done),
        "roofline_reasons": dict(roof.most_common()),
        "time": {"total_wall_s": sum(r["wall_s"] for r in results),
                 "mean_s_per_replayed_point": statistics.fmean(walls) if walls else None,
                 "median_s_per_replayed_point": statistics.median(walls) if walls else None,
                 "max_s_per_replayed_point": max(walls) if walls else None,
                 "projected_full_run_s_one_process": projected},
    }


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu": cpu,
            "cpus": cpus, "load_average_at_start": load}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _spct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _ms(x: Optional[float], nd: int = 0) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _pricers(d: Mapping) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))


def _client_line(a: Mapping) -> str:
    """The report's one-line summary of the client the replay assumed."""
    n, w = a["requests_per_client"], a["warmup_per_client"]
    phases, cv = a.get("phases", "spread"), a.get("output_cv") or 0
    head = "N = silicon_concurrency clients (batch_size x attention DP), no think time, "
    fixed = a.get("client_reading", "auto") == "fixed"
    lengths = ("fixed isl/osl for every row (`--client fixed`)" if fixed else
               "InferenceX's sweep (every collection but aic-auto-gap-analysis) with its client's lengths, "
               "prompt and output uniform on [0.8 L, L] (--random-range-ratio 0.8); the "
               "aic-auto-gap-analysis rows with fixed isl/osl")
    if phases == "burst":
        line = (f"{lengths}; the measured phase alone: {n}N requests, all counted, the N clients sending at "
                f"once on an idle server ({w}N warm-up requests drained before it); fixed output lengths "
                f"spread {(cv or BURST_DESYNC_CV):.0%} (CV) so those clients drift apart after the first "
                f"wave on vLLM, exact on SGLang without mixed chunking, whose prefill batches put each "
                f"wave back in step (`--phases burst`)")
    else:
        line = (f"{lengths}; {w}N warm-up requests dropped, {n}N measured, "
                + ("clients started one by one over one request's lifetime (`--phases spread`)"
                   if phases == "spread" else "**all clients started at t=0, kept in step (`--phases together`)**"))
    server = a.get("server_flags")
    if server == "scripts":
        line += "; InferenceX's rows with its scripts' server flags at their measured dates (`--server scripts`)"
    elif server == "defaults":
        line += "; every row with the release's default server flags (`--server defaults`)"
    elif server:
        line += f"; **server flags of AIConfigurator's generator (`--server {server}`)**"
    if is_sensitivity_run(phases, cv):
        line += (f". **Sensitivity run: output lengths lognormal with CV {cv:g}, not the measurement's "
                 f"fixed osl**")
    return head + line


def markdown(report: dict) -> str:
    s, cov = report["summary"], report["summary"]["coverage"]
    sel = report["selection"]
    label = (f"**A stratified SAMPLE of {cov['attempted']} of the {cov['rows']} rows** "
             f"(`--sample {sel['sample']} --seed {sel['seed']}`), not the full matrix"
             if sel["sample"] else (f"the first {cov['attempted']} rows (`--limit`)" if sel["limit"]
                                     else f"all {cov['rows']} rows"))
    lines = [f"# kvplan against AIConfigurator's silicon points ({report['backend']}, agg)", "",
             f"{label}: `{report['source_csv_name']}` of aiconfigurator-core {report['package_version']}, "
             f"{report['backend']} `mode == agg` rows replayed as closed loops. Nothing fitted.", "",
             f"- Command: `{report['command']}`",
             f"- Machine: {report['machine']['platform']}, {report['machine']['cpu']}, "
             f"{report['machine']['cpus']} CPUs (load average at start {report['machine']['load_average_at_start']}), "
             f"Python {report['machine']['python']}, {report['workers']} worker process(es)",
             "- Client assumed: " + _client_line(report["assumptions"]),
             "", "## Coverage", "",
             f"{cov['replayed']} of {cov['attempted']} rows replayed ({_pct(cov['replayed_share'])}); "
             f"{cov['skipped']} skipped:", "", "| skip reason | rows | example |", "|---|---:|---|"]
    if not cov["skip_reasons"]:
        lines.append("| (none) | 0 | |")
    for k, v in cov["skip_reasons"].items():
        ex = (cov["skip_examples"].get(k) or [""])[0].replace("|", "/")
        lines.append(f"| {k} | {v} | {ex} |")
    m = s.get("mapping_all_rows")
    if m:
        lines += ["", f"Mapping alone (no simulation) over all {m['rows']} rows: {m['mapped']} map to a kvplan "
                  f"config" + ("; not mapped: " + ", ".join(f"{k} {v}" for k, v in m["not_mapped"].items())
                               if m["not_mapped"] else "") + ". Memory (does not fit) is checked by the replay only."]
    o = s["overall"]
    head = ("| points | TTFT MAPE | TTFT median APE | TTFT bias | TPOT MAPE | TPOT median APE | TPOT bias "
            "| TTFT MAPE, all requests | E2E MAPE (bias) | pricer | s / point |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    lines += ["", "## Error (simulated vs measured means; bias = signed mean error)", "",
              "| GPU " + head[0], head[1]]

    def row(name: str, st: dict) -> str:
        return (f"| {name} | {st['n']} | {_pct(st['ttft_mape'])} | {_pct(st['ttft_median_ape'])} | "
                f"{_spct(st['ttft_bias'])} | {_pct(st['tpot_mape'])} | {_pct(st['tpot_median_ape'])} | "
                f"{_spct(st['tpot_bias'])} | {_pct(st['ttft_all_mape'])} | "
                f"{_pct(st.get('e2el_mape'))} ({_spct(st.get('e2el_bias'))}) | {_pricers(st['pricer'])} | {st['mean_wall_s']:.2f} |" if st["n"] else f"| {name} | 0 |")

    lines.append(row("**all**", o))
    for k, st in s["by_gpu"].items():
        lines.append(row(k, st))
    lines += ["", "By pricer:", "", "| pricer " + head[0], head[1]]
    for k, st in s["by_pricer"].items():
        lines.append(row(k, st))
    if s.get("by_source"):
        lines += ["", "By data source (the CSV's `silicon_data_source`: collections that differ in client, "
                  "server flags and harness, none of which the CSV records):", "", "| source " + head[0], head[1]]
        for k, st in s["by_source"].items():
            lines.append(row(k, st))
    rep = s.get("repeats") or {}
    if rep.get("points"):
        lines += ["", f"Repeat measurements: {rep['points']} points (same GPU, model, precision, release, "
                  f"layout, lengths and clients) were measured by two or more collections with different "
                  f"numbers; between collections their TTFT differs by {_pct(rep['ttft_spread_mean'])} on "
                  f"average (median {_pct(rep['ttft_spread_median'])}), their TPOT by "
                  f"{_pct(rep['tpot_spread_mean'])} (median {_pct(rep['tpot_spread_median'])}): the data's "
                  f"own spread."]
    lines += ["", "By GPU x model x precision:", "",
              "| GPU / model / precision " + head[0], head[1]]
    for k, st in s["by_partition"].items():
        lines.append(row(k.replace("|", "/"), st))
    if s["roofline_reasons"]:
        lines += ["", "Why the roofline priced (operator tables refused):", ""]
        for k, v in s["roofline_reasons"].items():
            lines.append(f"- {v} point(s): {k}")
    done = [r for r in report["rows"] if r["status"] == "replayed"]
    if done:
        lines += ["", "Largest errors (by the larger of the two):", "",
                  "| row | N | isl / osl | TTFT sim / real ms | TPOT sim / real ms | pricer |", "|---|---:|---|---:|---:|---|"]
        worst = sorted(done, key=lambda r: -max(abs(r.get("ttft_err") or 0), abs(r.get("tpot_err") or 0)))[:10]
        for r in worst:
            w = r["config"]["workload"]
            lines.append(f"| {r['id']} | {w['arrival']['concurrency']} | {w['input_len']['mean']} / "
                         f"{w['output_len']['mean']} | {_ms(r['sim_ttft_ms'])} / {_ms(r['silicon_ttft_ms'])} | "
                         f"{_ms(r['sim_tpot_ms'], 2)} / {_ms(r['silicon_tpot_ms'], 2)} | {r['pricer']} |")
    t = s["time"]
    lines += ["", "## Time", "",
              f"{t['total_wall_s']:.1f} s for {cov['attempted']} rows; per replayed point mean "
              f"{t['mean_s_per_replayed_point'] or 0:.2f} s, median {t['median_s_per_replayed_point'] or 0:.2f} s, "
              f"max {t['max_s_per_replayed_point'] or 0:.2f} s. Projected full run of all {cov['rows']} rows in one "
              f"process (each partition's mean time per row x its rows): {t['projected_full_run_s_one_process'] / 60:.1f} min.",
              "", "## Assumptions", ""]
    for k, v in report["assumptions"].items():
        lines.append(f"- `{k}`: {v}")
    lines += ["", "Per-row results (config, notes, pricer, errors) are in the JSON beside this file.", ""]
    return "\n".join(lines)


ASSUMPTIONS = {
    "client": "closed loop of N = silicon_concurrency clients (else batch_size x attention_dp_size: batch_size "
              "is per DP rank), no think time, ignore_eos, random prompts (no shared prefix), 10N requests. "
              "Every collection but aic-auto-gap-analysis is InferenceX's single-node sweep (its three ISL/OSL "
              "pairs, concurrencies, models and GPUs), measured by its benchmark_serving.py "
              "(SemiAnalysisAI/InferenceX benchmarks/benchmark_lib.sh: --num-prompts 10 x CONC, --max-concurrency "
              "CONC, --random-range-ratio 0.8 from .github/workflows/benchmark-tmpl.yml, --num-warmups 2 x CONC "
              "awaited before the run): prompt and output lengths uniform on [int(0.8 L), L]. The "
              "aic-auto-gap-analysis rows: AIConfigurator's genai-perf runner, fixed lengths",
    "phases": "burst (default): the measured phase starts on an idle server with all N clients sending at "
              "once, because both clients await every warm-up response first (benchmark_serving.py gathers "
              "its warm-up tasks; aiperf docs/tutorials/warmup.md); InferenceX's length spread drifts the clients "
              "apart after the first wave; for fixed lengths a 1% (CV) output spread stands in for the drift "
              "on vLLM (clients kept in lock-step give TTFTs 2-3 times the measured ones), while SGLang "
              "without mixed chunking keeps the exact lengths: it pauses decoding for every prefill batch, "
              "so a wave's requests decode in step and finish together (silicon_matrix.cohorts_stay_in_step). spread: clients started one "
              "by one over one request's lifetime priced on an idle server (no first wave); together: all at "
              "t=0 and kept in step",
    "warmup": "burst: the warm-up phase is not simulated (it drains before profiling; the simulator has no "
              "cold start) and all 10N profiled requests count, the drain at the end included; spread and "
              "together: the first warmup_per_client x N requests sent are dropped (AIConfigurator's own "
              "runner, aiconfigurator/eval/benchmarks/genai_perf_runner.py: genai-perf --concurrency N "
              "--request-count 10N --warmup-request-count 2N --max-threads 256, chat endpoint, ignore_eos, "
              "min_tokens = max_tokens = osl)",
    "server": "vLLM defaults of the release: chunked prefill, batch limits by GPU class (max_num_seqs raised "
              "to the clients per DP rank where they exceed it: a benchmark server is sized for its clients, "
              "and B300 MiniMax-M2.5's 2,048-client row decodes about 1,940 at once by Little's law), CUDA graphs, "
              "async scheduling from 0.14, gpu_memory_utilization 0.9, bf16 activations, KV cache in bf16 "
              "(kv_cache.dtype auto) for bf16, mxfp4 and int4 weights, fp8 for fp8, fp8_block and nvfp4 weights "
              "(AIConfigurator's model gives a quantised checkpoint an FP8 KV cache, sdk/models/helpers.py; "
              "long-prompt rows show no queue a bf16 cache would have caused), max_model_len = isl + osl; "
              "InferenceX's rows with the flags its script passed on the row's measured date "
              "(inferencex_vllm_flags: --max-num-batched-tokens 2 x ISL on MiniMax-M2.5 B200 from "
              "2026-04-03, B300 from 2026-04-17 and Kimi-K2.5 FP4 B200 from 2026-04-20, per DP rank "
              "under MiniMax FP4's DP-attention branch, --max-num-seqs CONC, "
              "--gpu-memory-utilization, --kv-cache-dtype (where a script passes none, what vLLM's auto gives "
              "the checkpoint: bf16 for MiniMax-M2.5's block-FP8 checkpoint, which declares no KV-cache scheme), "
              "--block-size, --async-scheduling, "
              "--max-cudagraph-capture-size (--cuda-graph-sizes in 2025); per row "
              "with its commit, and the flags kvplan cannot express named as not modelled; the MiniMax-M2.5 "
              "scripts that always passed --enable-expert-parallel, B200 FP8 to 2026-04-03 and H200 from "
              "2026-03-13, replayed with EP whatever the row's label, and Kimi-K2.5's, which never passed it, "
              "replayed with TP-sharded experts where a row is labelled EP without attention DP)",
    "identity": "a row whose collection recorded neither date nor image (qwen3.5-397b-gap-analysis.csv, "
                "kimi-k2.5-gap-analysis.csv re-file InferenceX's points, release labelled nightly-dev) and whose "
                "labels and both means equal a dated row's to the files' rounding is that measurement: "
                "replayed with the original's date, image and release (dated_copies); InferenceX's sweep "
                "on a day its yaml changed counts both versions, the rows carrying days, not times "
                "(inferencex_sweeps.sweep_cap)",
    "quantisation": "fp8 -> fp8_block for block-FP8 checkpoints (MiniMax-M2.5, Qwen3-235B-A22B-FP8) and for "
                    "rows with fp8_block experts (Qwen3.5: gemm fp8 / moe fp8_block), else "
                    "per-tensor fp8; nvfp4 -> nvfp4, on a MoE with attention in BF16 (quantization.scope auto: "
                    "NVIDIA's NVFP4 MoE exports list *self_attn* in exclude_modules; DeepSeek-R1/V3 rows "
                    "mlp_and_o_proj, InferenceX's nvidia/DeepSeek-R1-0528-FP4-V2, whose wo is NVFP4 too; "
                    "other models' rows the scope of nvidia/<model>-NVFP4 as the package's config of it "
                    "excludes: Qwen3.5's experts_only, its shared experts BF16: checkpoint_scope), every "
                    "linear layer on a dense model; int4_wo -> int4 (W4A16 on the routed experts only, "
                    "as Kimi-K2.5's checkpoint; Marlin MoE rows); gpt-oss (labelled nvfp4) -> mxfp4, "
                    "its checkpoint's format (experts only; FlashInfer MoE rows on Blackwell, Triton on Hopper, "
                    "Marlin (quantization.moe_kernel marlin) where InferenceX's Hopper script exported "
                    "VLLM_MXFP4_USE_MARLIN=1, from 2026-01-02: the Triton rows bounded by Marlin's measured "
                    "FLOP rate on another MXFP4 shape at equal tokens per expert); "
                    "on Blackwell with MXFP8 activations (quantization.moe_activations mxfp8: vLLM's gpt-oss "
                    "recipe sets VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 there, and vLLM's BF16 default prices an "
                    "idle 8k prefill on B200 TP 1 at 157 ms, above the 116 ms those rows measure as mean TTFT); "
                    "block-FP8 experts on Blackwell under vLLM 0.18 or later: FlashInfer's TRT-LLM MoE rows "
                    "(vLLM's FP8 oracle tries it first on SM10x, and its modular kernel takes MiniMax-M2's "
                    "router), Triton's (quantization.moe_kernel triton) where InferenceX's MiniMax-M2.5 B200 "
                    "script exported VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0 (to 2026-04-03)",
    "engine_version": f"the row's backend_version; nightly-* -> kvplan's default {DEFAULT_VLLM_VERSION}; "
                      f"missing and measured before {PRE_ASYNC_BEFORE} -> {PRE_ASYNC_RELEASE}",
    "parallel": "tensor_parallel_size = tp_size, data_parallel_size = attention_dp_size, "
                "enable_expert_parallel = moe_ep_size > 1; the operator tables price one DP rank's step "
                "(TP within it; experts from the MoE table's EP rows at the DP ranks' gathered tokens, "
                "NCCL all-gather + reduce-scatter over DP), the ranks stepping in lock-step, each padded "
                "to the group's largest batch; SGLang's MoE TP x EP (moe_tp and moe_ep both > 1) as "
                "expert_parallel_size = moe_ep. Rows whose labels square the EP degree e are the EP e "
                "deployment on e GPUs (where the CSV holds both, their measurements equal the TP e / EP e "
                "rows'), replayed as TP e, EP e: SGLang's tp = moe_tp x moe_ep = e x e beyond one node "
                "(TP 16 / 64), and vLLM's tp = attention DP = e with EP e x e (all 97 vLLM DP rows)",
    "model": "the row's model_path (HF id: catalog alias or the package's config.json); "
             + ", ".join(f"{k} simulated as {v}" for k, v in CHECKPOINT_ALIASES.items()),
    "fitting": "none: every number is kvplan's uncalibrated prediction (cost_model.source auto)",
}


#: What differs for ``--backend sglang`` rows.
SGLANG_ASSUMPTIONS = {
    "server": "SGLang defaults of the release (engine.name sglang): prefill-first extend batches, "
              "chunked_prefill_size and cuda_graph_max_bs by GPU memory, mem_fraction_static by GPU "
              "memory and TP, max_running_requests from the KV pool, radix cache with page size 1, "
              "the overlap scheduler, fcfs; KV cache fp8 for fp8, fp8_block and nvfp4 weights (as for vLLM rows), else bf16, context length = isl + osl; "
              "InferenceX's rows with the flags its script passed on the row's measured date "
              "(inferencex_sglang_flags: --max-running-requests, --chunked-prefill-size, "
              "--max-prefill-tokens, --mem-fraction-static, --kv-cache-dtype, --disable-radix-cache and, "
              "on B200 / B300, --scheduler-recv-interval: 30 at 16 clients or more, else 10, for "
              "DeepSeek-R1 and Qwen3.5, --cuda-graph-max-bs, --stream-interval (engine.stream_interval); "
              "per row with its commit, and the flags kvplan cannot express (back ends) named as not modelled)",
    "engine_version": f"the row's backend_version (0.5.x); nightly-* or missing -> kvplan's default "
                      f"SGLang {DEFAULT_SGLANG_VERSION}; custom builds (glm5-hopper) skipped",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="vllm", choices=("vllm", "sglang"),
                    help="the CSV's backend: vllm (default) or sglang (replayed with engine.name sglang)")
    ap.add_argument("--csv", type=Path, default=None, help="default: the installed package's silicon_sample.csv")
    ap.add_argument("--limit", type=int, default=None, help="only the first N rows (after --sample)")
    ap.add_argument("--sample", type=int, default=None, help="a stratified sample of N rows (GPU x model x precision)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (the simulations use seed 0)")
    ap.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--requests-per-client", type=int, default=DEFAULT_REQUESTS_PER_CLIENT)
    ap.add_argument("--warmup-per-client", type=int, default=DEFAULT_WARMUP_PER_CLIENT)
    ap.add_argument("--output-cv", type=float, default=0.0,
                    help="sensitivity check, not the measurement: output lengths lognormal with this CV "
                         "around osl (breaks the clients' lock-step); default 0 (fixed, as measured)")
    ap.add_argument("--phases", default="burst", choices=PHASES,
                    help="burst (default): the profiling phase alone, all clients at t=0 on an idle server "
                         "(the warm-up drained before it), output lengths spread 1%% so the clients drift "
                         "apart after the first wave (vLLM; SGLang keeps them exact: cohorts_stay_in_step); spread: clients started one by one over one "
                         "request's lifetime, warm-up dropped; together: all at t=0 in lock-step, warm-up dropped")
    ap.add_argument("--client", default="auto", choices=CLIENT_READINGS,
                    help="auto (default): each row replayed with the client that measured it: InferenceX's "
                         "(lengths uniform on [0.8 L, L]) for its sweep's rows, fixed lengths for the rest; "
                         "fixed: fixed lengths for every row, a 1%% output spread standing in for the drift; "
                         "aiperf-pool (a sensitivity reading): the aic-auto-gap-analysis rows' prompts drawn "
                         "from aiperf's default pool of 100, the warm-up on it simulated and dropped, "
                         "prefix caching on")
    ap.add_argument("--server", default="scripts", choices=SERVERS,
                    help="the server flags a row is replayed with: scripts (default: InferenceX's rows with "
                         "the flags its scripts passed on the measured date, the rest with the release's "
                         "defaults), defaults (the engine release's, every row), "
                         "aic-generator / aic-benchmark (AIConfigurator's generator rules, default or "
                         "benchmark mode: batch limits, vLLM's token budget = seats + isl + 1500, SGLang's "
                         "max-prefill-tokens = isl + 1500 and mixed chunking)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for every row (as kvplan --set; repeatable): a what-if, "
                         "e.g. cost_model.moe_routing=balanced")
    ap.add_argument("--match", default=None, metavar="TEXT",
                    help="only rows whose id contains TEXT (case-insensitive; ids name model, GPU, "
                         "precision and shape, e.g. gpt_oss_120b_b200)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output stem (default benchmarks/results/silicon_matrix_<backend>): .json and .md")
    args = ap.parse_args(argv)

    path = args.csv or silicon_csv()
    if path is None or not path.is_file():
        print(f"{CSV_NAME}: not found (install aiconfigurator-core: the tables extra)", file=sys.stderr)
        return 2
    all_rows = read_rows(path, args.backend)
    rows: list[Mapping] = list(all_rows)
    if args.match:
        rows = [r for r in rows if args.match.lower() in _text(r, "id").lower()]
    if args.sample:
        rows = stratified_sample(rows, args.sample, args.seed)
    if args.limit is not None:
        rows = rows[:args.limit]
    opts = {"requests_per_client": args.requests_per_client, "warmup_per_client": args.warmup_per_client,
            "output_cv": args.output_cv, "phases": args.phases, "overrides": tuple(args.overrides), "server": args.server,
            "client": args.client, "spec_decode": spec_decode_copies(all_rows), "dated": dated_copies(all_rows)}
    for item in args.overrides:
        try:
            parse_override(item)
        except KvplanError as exc:
            print(exc, file=sys.stderr)
            return 2
    jobs = [(dict(r), opts, 0) for r in rows]
    results: list[dict] = []
    t0 = time.perf_counter()
    if args.workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.workers) as pool:
            for i, res in enumerate(pool.map(_replay_row, jobs)):
                results.append(res)
                _progress(i, len(jobs), res)
    else:
        for i, job in enumerate(jobs):
            res = _replay_row(job)
            results.append(res)
            _progress(i, len(jobs), res)
    elapsed = time.perf_counter() - t0
    stem = args.out or RESULTS / (f"silicon_matrix_{args.backend}"
                                  + (f"_output_cv{args.output_cv:g}" if args.output_cv else "")
                                  + (f"_phases_{args.phases}" if args.phases != "burst" else "")
                                  + (f"_server_{args.server}" if args.server != "scripts" else "")
                                  + (f"_client_{args.client}" if args.client != "auto" else "")
                                  + (f"_match-{_slug(args.match)}" if args.match else "")
                                  + "".join(f"_set-{_slug(o)}" for o in args.overrides))
    report = {
        "benchmark": "benchmarks/silicon_matrix.py", "backend": args.backend, "mode": "agg",
        "source_csv": str(path), "source_csv_name": f"aiconfigurator_core/systems/{path.name}",
        "package_version": package_version(),
        "selection": {"sample": args.sample, "seed": args.seed if args.sample else None, "limit": args.limit,
                      "match": args.match,
                      "kind": ("stratified sample (GPU x model x precision)" if args.sample
                               else "first rows" if args.limit is not None else "all rows")},
        "command": " ".join([".venv/bin/python", "benchmarks/silicon_matrix.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine(), "workers": args.workers, "elapsed_s": elapsed,
        "assumptions": {**ASSUMPTIONS, **(SGLANG_ASSUMPTIONS if args.backend == "sglang" else {}),
                        "requests_per_client": args.requests_per_client,
                        "warmup_per_client": args.warmup_per_client, "output_cv": args.output_cv,
                        "phases": args.phases, "overrides": list(args.overrides), "server_flags": args.server,
                        "client_reading": args.client},
        "summary": {**summarize(results, all_rows), "mapping_all_rows": mapping_coverage(all_rows, opts)},
        "rows": results,
    }
    md = markdown(report)
    text = results_json(report)
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(text)
    Path(f"{stem}.md").write_text(md)
    print(md)
    return 0


def _slug(text: str) -> str:
    """``text`` safe in a file name (what-if runs write next to the measurement, not over it)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-")[:60]


def _rounded(obj: Any) -> Any:
    """``obj`` with every float at 9 significant digits (the measurements have fewer)."""
    if isinstance(obj, float):
        return float(f"{obj:.9g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def results_json(report: Mapping) -> str:
    """The report as JSON small enough to keep in the repository (the full vLLM matrix was
    2.8 MB indented, then 2.7 MB once each row named its script's flags): the header indented,
    one compact line per row, floats at 9 significant digits, and the long strings rows repeat
    stored once in the header: each row's pricer description in ``pricer_descriptions``, named by
    ``pricer_description_index``, and its notes in ``notes_table``, named by ``note_indices``
    (about 250 distinct notes over 1,328 rows)."""
    descriptions = sorted({r["pricer_description"] for r in report["rows"] if r.get("pricer_description")})
    index = {d: i for i, d in enumerate(descriptions)}
    notes_table = sorted({n for r in report["rows"] for n in r.get("notes") or ()})
    note_index = {n: i for i, n in enumerate(notes_table)}
    rows = []
    for r in report["rows"]:
        r = dict(r)
        d = r.pop("pricer_description", None)
        if d:
            r["pricer_description_index"] = index[d]
        notes = r.pop("notes", None)
        if notes is not None:
            r["note_indices"] = [note_index[n] for n in notes]
        rows.append(json.dumps(_rounded(r), separators=(",", ":"), default=str))
    head = {k: v for k, v in report.items() if k != "rows"}
    head["pricer_descriptions"] = descriptions
    head["notes_table"] = notes_table
    text = json.dumps(_rounded(head), indent=1, default=str)
    return text[:-2] + ',\n "rows": [\n' + ",\n".join(rows) + "\n ]\n}\n"


def _progress(i: int, n: int, res: dict) -> None:
    if res["status"] == "replayed":
        what = (f"TTFT {res['sim_ttft_ms']:.0f}/{res['silicon_ttft_ms']:.0f} ms "
                f"TPOT {res['sim_tpot_ms']:.2f}/{res['silicon_tpot_ms']:.2f} ms [{res['pricer']}]")
    else:
        what = f"skipped: {res['skip_reason']}"
    print(f"[{i + 1}/{n}] {res['id']}: {what} ({res['wall_s']:.2f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
