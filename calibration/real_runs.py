"""Readers of benchmark results measured outside kvplan: what the server was, what load it got,
and what the load tool measured per load stage.

Why: ``kvplan validate --real`` scores the simulator against a user's own runs, so it must
understand the files the common load tools write, without the tools installed:

- **inference-perf** (kubernetes-sigs/inference-perf), a folder: ``exp-config.yaml`` (server
  settings, optional), ``profile.yaml`` (what the user asked for), ``results/config.yaml`` (what
  the tool resolved and ran), ``results/stage_<i>_lifecycle_metrics.json`` per load stage and
  ``results/summary_lifecycle_metrics.json``. Latencies in **seconds**. Layout as in
  ../shared/real_runs/README.md.
- **vllm bench serve --save-result** JSON (``vllm/benchmarks/serve.py``): one load stage;
  ``request_rate`` (a number or "inf"), ``burstiness``, ``max_concurrency``, ``num_prompts``,
  ``duration``, ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
  ``request_throughput``, ``{mean,median,std,p<P>}_{ttft,tpot,itl,e2el}_ms`` (ms); with
  ``--save-detailed`` also per request ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls``
  (s), ``errors``. ``--metadata KEY=VALUE`` pairs land at the top level: kvplan reads
  ``tensor_parallel_size``, ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
  ``hardware`` and ``dtype`` from there when present.
- **GuideLLM** report JSON (vllm-project/guidellm ``benchmark/schemas/report.py``, default file
  ``benchmarks.json``): ``benchmarks[]``, each one load stage with its strategy (``config.strategy``
  in 0.7+, ``args.strategy`` in 0.3) and ``metrics.<name>.{successful,errored,...}.{mean,
  percentiles.p90,...}`` for ``request_latency`` (s), ``time_to_first_token_ms``,
  ``time_per_output_token_ms``, ``prompt_token_count``, ``output_token_count``; request counts
  in ``metrics.request_totals`` (0.7+) or ``run_stats.requests_made`` (0.3).

Closed-loop load is replayed in its mode (``sim.workload.clients``): vllm bench's
``max_concurrency`` caps what is in flight (with ``request_rate`` inf: a closed loop of that many
clients); GuideLLM's ``synchronous`` (1 client) and ``concurrent`` (``config.strategy.streams``
clients) strategies are closed loops, and a ``max_concurrency`` on its ``throughput`` (a closed
loop), ``constant`` or ``poisson`` strategies a cap; inference-perf's ``load.type: concurrent``
(stages of ``concurrency_level`` and ``num_requests``) is a closed loop per stage.

Every malformed input is a ``RealRunError`` (a ``KvplanError``) naming the file and field.
TPOT is always ``(mean E2E - mean TTFT) / (output_len - 1)`` on the real side (the load tools'
own inter-token figures are about half the real step time under streaming; see the shared
README), and validate computes the prediction the same way.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

from calibration.run_manifest import ServerFacts, perf_dir, server_facts
from sim.errors import KvplanError
from sim.workload.prompt_pool import PromptPool
from sim.workload.shared_prefix import SharedPrefix, Stage

FORMATS = ("inference-perf", "vllm-bench", "guidellm", "sglang-bench", "aiperf", "genai-perf")
#: Server settings a run can state (vLLM's names) and kvplan's config keys for them.
SERVER_KEYS = {
    "tensor_parallel_size": "parallel.tensor_parallel_size",
    "max_num_seqs": "scheduler.max_num_seqs",
    "max_num_batched_tokens": "scheduler.max_num_batched_tokens",
    "max_model_len": "kv_cache.max_model_len",
    "gpu_memory_utilization": "kv_cache.gpu_memory_utilization",
    "block_size": "kv_cache.block_size",
    "data_parallel_size": "parallel.data_parallel_size",
    "num_replicas": "parallel.num_replicas",
    "stream_interval": "engine.stream_interval",
}
#: What the shared inference-perf runs' README says the server ran with when exp-config.yaml
#: does not say (vLLM V1 defaults there: chunked prefill, prefix caching on, block 16, 0.9).
INFERENCE_PERF_DEFAULTS = {"max_model_len": 4096, "max_num_batched_tokens": 2048, "max_num_seqs": 128,
                           "gpu_memory_utilization": 0.9, "block_size": 16, "tensor_parallel_size": 1}
LATENCY_STATS = ("mean", "p90", "p99")


class RealRunError(KvplanError):
    """A benchmark result kvplan cannot read (names the file and field)."""


@dataclass
class MeasuredStage:
    """What the load tool measured in one load stage (latencies in ms)."""

    index: int
    sent: Optional[int]          # requests sent in the stage (None: not recorded)
    completed: int
    failures: int
    e2el_ms: dict[str, Optional[float]]
    ttft_ms: dict[str, Optional[float]]
    tpot_ms: Optional[float]     # (mean E2E - mean TTFT) / (output_len - 1)
    request_throughput: Optional[float]  # completed req/s as the tool reports it
    output_len: Optional[float]  # tokens per request the server generated (mean)
    prompt_len: Optional[float]  # the tool's own count (mean)


@dataclass
class RealRun:
    """One measured run: server, workload and measurements, format-independent."""

    path: Path
    format: str
    name: str
    model: Optional[str]                   # the served model (HF id or path), None if unknown
    server: dict[str, Any]                 # vLLM-named settings the run states or implies
    stages: list[Stage]                    # the load, stage by stage
    measured: list[MeasuredStage]
    shared_prefix: Optional[SharedPrefix] = None
    prompt_lens: Optional[list[int]] = None  # per request, in stage order (when known)
    output_lens: Optional[list[int]] = None
    dtype: Optional[str] = None
    hardware: Optional[str] = None         # a catalog name when the run says (or its folder does)
    notes: list[str] = field(default_factory=list)
    #: The vLLM release that served the run ("0.15.1"), where the run records it
    #: (``engine_version_of``); None: not recorded.
    engine_version: Optional[str] = None
    #: The serving engine ("sglang", "vllm", ...) where the run names it (SGLang's bench_serving
    #: ``backend``); None: not stated (vLLM assumed).
    engine_name: Optional[str] = None
    #: ``quantization.weights`` where the run's collection says the weights were not 16-bit
    #: (``calibration.run_manifest``: a manifest's ``precision: FP8``, ``--quantization fp8``).
    weights: Optional[str] = None
    #: GiB of CPU DRAM the server's KV offload connector used (0: off; None: not recorded).
    cpu_offload_gb: Optional[float] = None
    #: The GPU KV pool vLLM reported per engine core (``vllm.log``), for the memory-plan check.
    kv_cache_tokens: Optional[int] = None
    #: ``--kv-cache-dtype`` / ``--[no-]enable-prefix-caching`` as the server log shows them.
    kv_cache_dtype: Optional[str] = None
    prefix_caching: Optional[bool] = None
    #: ``--enforce-eager`` where the run's experiment file or server log says (None: not said).
    enforce_eager: Optional[bool] = None
    #: The load tool's pool of distinct prompts (aiperf / genai-perf ``--num-dataset-entries``),
    #: with each entry's prompt and output length: the requests are drawn from it, and repeats
    #: hit the prefix cache (``sim.workload.prompt_pool``). None: every prompt new.
    prompt_pool: Optional[PromptPool] = None
    pool_lens: Optional[tuple[list[int], list[int]]] = None
    #: Requests the tool sent before measuring (aiperf's ``--warmup-request-count``): simulated
    #: first (they warm the prefix cache), never scored. Only with ``prompt_pool``.
    warmup: Optional[Stage] = None
    #: What the prompts' text was (``workload.prompt_text``): ``synthetic`` where the load tool
    #: decoded made-up token ids (inference-perf's shared-prefix data, a random dataset),
    #: ``natural`` where it sent prose; None: not recorded (natural assumed).
    prompt_text: Optional[str] = None


#: Fields that name the serving engine's release: ``vllm bench serve --metadata
#: vllm_version=...``, LLMServingSim-style ``meta.json``, a container image tag.
_VERSION_KEYS = ("vllm_version", "engine_version", "server_version")
_IMAGE_KEYS = ("image", "container_image", "docker_image", "vllm_image")
_VLLM_TAG = re.compile(r"vllm[^:/\s]*[:_-]v?(\d+\.\d+(?:\.\d+)?)", re.IGNORECASE)


def engine_version_of(*sources: Any) -> Optional[str]:
    """The vLLM release named by the first of ``sources`` that names one: a mapping's
    ``vllm_version`` / ``engine_version`` (also under ``server`` / ``metadata``), an image tag
    (``vllm/vllm-openai:v0.15.1``), or a path whose folder says it (``vllm_0.15.1_h100``)."""
    for src in sources:
        if isinstance(src, dict):
            for nested in (src, src.get("server"), src.get("metadata"), src.get("engine")):
                if not isinstance(nested, dict):
                    continue
                for k in _VERSION_KEYS:
                    v = nested.get(k)
                    if isinstance(v, str) and re.match(r"v?\d+\.\d+", v.strip()):
                        return v.strip().lstrip("v")
                if nested.get("name") == "vllm" and isinstance(nested.get("version"), str):
                    return nested["version"].lstrip("v")
                for k in _IMAGE_KEYS:
                    m = _VLLM_TAG.search(str(nested.get(k) or ""))
                    if m:
                        return m.group(1)
        elif isinstance(src, Path):
            for part in reversed(src.resolve().parts):
                m = _VLLM_TAG.search(part)
                if m:
                    return m.group(1)
    return None


# --- entry point ---------------------------------------------------------------------------


def is_run_folder(p: Path) -> bool:
    """An inference-perf run folder (what ``read_inference_perf`` reads)."""
    return p.is_dir() and any((p / n).exists() for n in ("profile.yaml", "exp-config.yaml", "results"))


#: The summary file of an aiperf / genai-perf artifact folder (``calibration.aiperf_export``).
PROFILE_EXPORTS = ("profile_export_aiperf.json", "profile_export_genai_perf.json")


def is_profile_export_folder(p: Path) -> bool:
    """An aiperf / genai-perf artifact folder: one profile run (one concurrency or rate)."""
    return p.is_dir() and any((p / n).is_file() for n in PROFILE_EXPORTS)


def expand_run_paths(paths: "list[Path] | tuple[Path, ...]") -> list[Path]:
    """Each path as given, except a folder of run folders (a collection, ``experiments.json``
    beside its runs, or any folder of them), which stands for its runs in id / name order, and
    a sweep's folder of aiperf / genai-perf artifact folders (``concurrency_1``,
    ``concurrency_8``, ...: each its own run, with its own warm-up), in the order of the number
    in their names."""
    from calibration.run_manifest import run_id

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir() and not is_run_folder(p) and not is_profile_export_folder(p):
            runs = [c for c in p.iterdir() if is_run_folder(c)]
            if runs:
                out += sorted(runs, key=lambda c: (run_id(c) is None, run_id(c) or 0, c.name))
                continue
            sweep = [c for c in p.iterdir() if is_profile_export_folder(c)]
            if sweep:
                out += sorted(sweep, key=_numbered)
                continue
        out.append(p)
    return out


def _numbered(p: Path) -> tuple[int, str]:
    """Sort key: the last number in the name (``concurrency_16`` after ``concurrency_8``)."""
    nums = re.findall(r"\d+", p.name)
    return (int(nums[-1]) if nums else -1, p.name)


def read_run(path: Union[str, Path]) -> RealRun:
    """Read one run: an inference-perf folder, a vllm bench JSON, a GuideLLM JSON or an aiperf /
    genai-perf profile export (or a folder holding exactly one such JSON, or an artifact folder
    with ``profile_export_aiperf.json`` / ``profile_export_genai_perf.json``)."""
    p = Path(path)
    if not p.exists():
        raise RealRunError(f"{p}: no such file or folder")
    if p.is_dir():
        if is_run_folder(p):
            return read_inference_perf(p)
        jsons = sorted(p.glob("*.json"))
        if len(jsons) == 1:
            return read_json_run(jsons[0])
        for name in ("benchmarks.json", *PROFILE_EXPORTS):
            if (p / name).is_file():  # GuideLLM's report; an aiperf / genai-perf artifact folder
                return read_json_run(p / name)
        jsonls = sorted(p.glob("*.jsonl"))
        if not jsons and len(jsonls) == 1:  # SGLang bench_serving --output-file
            return read_run(jsonls[0])
        what = f"{len(jsons)} JSON files" if jsons else "nothing kvplan reads"
        raise RealRunError(f"{p}: {what}; expected an inference-perf run folder (profile.yaml, "
                           f"results/stage_<i>_lifecycle_metrics.json), a vllm bench serve "
                           f"--save-result JSON, a GuideLLM report JSON or an SGLang bench_serving JSONL")
    from calibration.sglang_bench import is_sglang_bench, read_sglang_bench

    if is_sglang_bench(p):
        return read_sglang_bench(p)
    return read_json_run(p)


def read_json_run(path: Path) -> RealRun:
    data = _load_json(path)
    fmt = detect_format(data)
    if fmt == "vllm-bench":
        return read_vllm_bench(path, data)
    if fmt == "guidellm":
        return read_guidellm(path, data)
    if fmt == "aiperf":
        from calibration.aiperf_export import read_aiperf_export

        return read_aiperf_export(path, data)
    raise RealRunError(f"{path}: unknown format (neither a vllm bench serve --save-result JSON: "
                       f"request_rate, completed, mean_e2el_ms; nor a GuideLLM report: benchmarks[]; "
                       f"nor an aiperf / genai-perf profile export: input_config, time_to_first_token; nor an "
                       f"SGLang bench_serving result: backend, mean_e2e_latency_ms)")


def detect_format(data: Any) -> Optional[str]:
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("benchmarks"), list):
        return "guidellm"
    if "completed" in data and ("mean_e2el_ms" in data or "mean_ttft_ms" in data):
        return "vllm-bench"
    if isinstance(data.get("input_config"), dict) and isinstance(data.get("request_latency"), dict):
        return "aiperf"  # aiperf's profile_export_aiperf.json or genai-perf's profile_export_genai_perf.json
    return None


# --- inference-perf -----------------------------------------------------------------------


def read_inference_perf(folder: Path) -> RealRun:
    notes: list[str] = []
    exp = _load_yaml(folder / "exp-config.yaml", required=False) or {}
    profile = _load_yaml(folder / "profile.yaml", required=False) or {}
    resolved = _load_yaml(folder / "results" / "config.yaml", required=False) or {}
    if not profile and not resolved:
        raise RealRunError(f"{folder}: neither profile.yaml nor results/config.yaml (the load "
                           f"tool's settings) is there")
    cfg = resolved or profile
    src = folder / "results" / "config.yaml" if resolved else folder / "profile.yaml"
    data = _get(cfg, "data", src, dict)
    dtype_ = data.get("type")
    if dtype_ != "shared_prefix":
        raise RealRunError(f"{src}: data.type {dtype_!r} is not supported (kvplan rebuilds "
                           f"inference-perf's shared_prefix workload)")
    sp = _get(data, "shared_prefix", src, dict, "data.shared_prefix")
    asked = (profile.get("data") or {}).get("shared_prefix") or {}
    groups = _int(sp.get("num_groups", sp.get("num_unique_system_prompts")), src, "data.shared_prefix.num_groups")
    per_group = _int(sp.get("num_prompts_per_group", sp.get("num_users_per_system_prompt")), src,
                     "data.shared_prefix.num_prompts_per_group")
    if resolved and asked:
        a_groups = asked.get("num_unique_system_prompts", asked.get("num_groups"))
        a_users = asked.get("num_users_per_system_prompt", asked.get("num_prompts_per_group"))
        if (a_groups, a_users) != (groups, per_group):
            notes.append(f"profile.yaml asks {a_groups} x {a_users} prompts but results/config.yaml "
                         f"(what inference-perf ran) has {groups} groups x {per_group}: replaying the latter")
        if asked.get("enable_multi_turn_chat") and "enable_multi_turn_chat" not in sp:
            notes.append("enable_multi_turn_chat was asked but this inference-perf version had no "
                         "multi-turn mode: single-turn prompts")
    system_len = _int(sp.get("system_prompt_len"), src, "data.shared_prefix.system_prompt_len", minimum=0)
    question_len = _int(sp.get("question_len"), src, "data.shared_prefix.question_len")
    output_len = _int(sp.get("output_len"), src, "data.shared_prefix.output_len")
    load = _get(cfg, "load", src, dict)
    load_type = load.get("type", "constant")
    if load_type not in ("constant", "poisson", "concurrent"):
        raise RealRunError(f"{src}: load.type {load_type!r} is not supported (constant: rate x "
                           f"duration requests per stage; poisson: Poisson arrivals at rate for "
                           f"duration; concurrent: num_requests per stage from concurrency_level "
                           f"clients)")
    what = "{concurrency_level, num_requests}" if load_type == "concurrent" else "{rate, duration}"
    raw_stages = load.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise RealRunError(f"{src}: load.stages: expected a non-empty list of {what}")
    stages = []
    for i, st in enumerate(raw_stages):
        if not isinstance(st, dict):
            raise RealRunError(f"{src}: load.stages[{i}]: expected {what}")
        if load_type == "concurrent":
            clients = _int(st.get("concurrency_level"), src, f"load.stages[{i}].concurrency_level")
            n = _int(st.get("num_requests"), src, f"load.stages[{i}].num_requests")
            # How long it ran is measured (below); inference-perf queues the stage's requests
            # over its first second and its workers take them as slots free: a closed loop.
            stages.append(Stage(rate=0.0, duration_s=0.0, num_requests=n, process="closed",
                                concurrency=clients))
            continue
        rate = _num(st.get("rate"), src, f"load.stages[{i}].rate", positive=True)
        duration = _num(st.get("duration"), src, f"load.stages[{i}].duration", positive=True)
        # inference-perf's poisson load: exponential gaps, not rescaled to the stage (gamma
        # renewal with cv 1); its count is what was sent (below), not int(rate x duration).
        stages.append(Stage.of_rate(rate, duration, "poisson" if load_type == "poisson" else "rescaled_poisson"))

    results = perf_dir(folder)
    measured = []
    for i in range(len(stages)):
        f = results / f"stage_{i}_lifecycle_metrics.json"
        if not f.is_file():
            raise RealRunError(f"{f}: missing (load.stages has {len(stages)} stages)")
        measured.append(_inference_perf_stage(f, i, output_len))
        if stages[i].process == "closed":
            stages[i] = _measured_span(stages[i], measured[-1])
        elif load_type == "poisson" and measured[-1].sent:
            stages[i] = replace(stages[i], num_requests=measured[-1].sent)
    summary = results / "summary_lifecycle_metrics.json"
    prompt_mean = None
    if summary.is_file():
        prompt_mean = _opt_num(_dig(_load_json(summary), "successes", "prompt_len", "mean"))
    # The server tokenises the same text the client re-tokenises: its count is the real length
    # (random ids decoded then re-encoded come out a few % longer than asked).
    if prompt_mean is not None and prompt_mean > system_len + 1:
        eff_question = int(round(prompt_mean)) - system_len
        if eff_question != question_len:
            notes.append(f"prompt length {system_len} + {eff_question} tokens (the client's "
                         f"re-tokenised mean {prompt_mean:.0f}; asked {system_len} + {question_len})")
        question_len = eff_question

    model = exp.get("model") or _dig(cfg, "server", "model_name") or _dig(cfg, "tokenizer", "pretrained_model_name_or_path")
    server = dict(INFERENCE_PERF_DEFAULTS)
    for key in SERVER_KEYS:
        if key in exp:
            server[key] = exp[key]
    # exp-config.yaml's own spellings (llm-d / BLIS experiment files): "<x>_parallelism".
    for alias, key in (("tensor_parallelism", "tensor_parallel_size"),
                       ("data_parallelism", "data_parallel_size")):
        if alias in exp:
            server[key] = exp[alias]
            exp = {**exp, key: exp[alias]}
    facts = server_facts(folder)
    _merge_facts(server, exp, facts, folder, notes)
    quant = str(exp.get("quantization") or exp.get("precision") or "").lower()
    if quant.startswith("fp8"):
        facts.weights = "fp8"
    eager = exp.get("enforce_eager", facts.enforce_eager)
    if eager is not None and not isinstance(eager, bool):
        raise RealRunError(f"{folder / 'exp-config.yaml'}: enforce_eager: expected true or false, got {eager!r}")
    for key, value in server.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise RealRunError(f"{folder / 'exp-config.yaml'}: {key}: expected a number, got {value!r}")
    return RealRun(path=folder, format="inference-perf", name=folder.name, model=model, server=server,
                   stages=stages, measured=measured,
                   shared_prefix=SharedPrefix(groups, per_group, system_len, question_len, output_len),
                   # inference-perf's shared-prefix data decodes random token ids into the prompts
                   prompt_text="synthetic",
                   dtype=exp.get("dtype"), hardware=exp.get("hardware") or facts.hardware, notes=notes,
                   engine_version=(engine_version_of(exp, _load_json_opt(folder / "meta.json"))
                                   or facts.engine_version or engine_version_of(folder)),
                   weights=facts.weights, cpu_offload_gb=facts.cpu_offload_gb,
                   kv_cache_tokens=facts.kv_cache_tokens, kv_cache_dtype=facts.kv_cache_dtype,
                   prefix_caching=facts.prefix_caching, enforce_eager=eager)


def _merge_facts(server: dict, exp: dict, facts: ServerFacts, folder: Path, notes: list[str]) -> None:
    """The manifest's and server log's settings into ``server`` where exp-config.yaml is silent
    (exp-config.yaml is the run's own record: it wins, with a note where they disagree)."""
    said = {"data_parallel_size": facts.data_parallel_size, "num_replicas": facts.replicas,
            "gpu_memory_utilization": facts.gpu_memory_utilization,
            "max_num_batched_tokens": facts.max_num_batched_tokens,
            "stream_interval": facts.stream_interval}
    for key, value in said.items():
        if value is None:
            continue
        if key in exp and exp[key] != value:
            notes.append(f"{folder.name}: exp-config.yaml {key} {exp[key]} kept over the "
                         f"collection's {value}")
            continue
        server[key] = value
    notes.extend(facts.notes)
    if facts.cpu_offload and facts.cpu_offload_gb is None:
        notes.append("CPU KV offload on, but its size is not recorded (no cpu_bytes_to_use in "
                     "vllm.log): simulated without the CPU tier")


def _inference_perf_stage(f: Path, index: int, output_len: int) -> MeasuredStage:
    d = _load_json(f)
    succ = _get(d, "successes", f, dict)
    lat = _get(succ, "latency", f, dict, "successes.latency")
    e2e = _stats_s(lat, "request_latency", f)
    ttft = _stats_s(lat, "time_to_first_token", f)
    fail = d.get("failures") or {}
    failures = _int(fail.get("count", 0), f, "failures.count", minimum=0) if isinstance(fail, dict) else 0
    completed = _int(succ.get("count"), f, "successes.count", minimum=0)
    sent = _dig(d, "load_summary", "count")
    return MeasuredStage(
        index=index, sent=int(sent) if isinstance(sent, (int, float)) else None, completed=completed,
        failures=failures, e2el_ms=e2e, ttft_ms=ttft, tpot_ms=_tpot(e2e, ttft, output_len),
        request_throughput=_opt_num(_dig(succ, "throughput", "requests_per_sec")),
        output_len=float(output_len), prompt_len=_opt_num(_dig(succ, "prompt_len", "mean")))


def _measured_span(stage: Stage, m: MeasuredStage) -> Stage:
    """A closed-loop stage with the rate and duration it ran at (completed / measured req/s;
    0 when the file does not say: the next stage then starts after the usual gap only)."""
    rps = m.request_throughput
    if not rps or rps <= 0:
        return stage
    return replace(stage, rate=rps, duration_s=m.completed / rps)


def _stats_s(lat: dict, name: str, f: Path) -> dict[str, Optional[float]]:
    s = lat.get(name)
    if not isinstance(s, dict):
        if s is None and name in lat:  # no successes: the tool writes null
            return {k: None for k in LATENCY_STATS}
        raise RealRunError(f"{f}: successes.latency.{name}: missing (expected mean, p90, p99 in seconds)")
    return {k: (None if s.get(k) is None else 1000.0 * _num(s.get(k), f, f"successes.latency.{name}.{k}"))
            for k in LATENCY_STATS}


def _load_json_opt(path: Path) -> Optional[dict]:
    """A small side file (LLMServingSim-style ``meta.json``) when present and readable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- vllm bench serve ----------------------------------------------------------------------


def read_vllm_bench(path: Path, data: Optional[dict] = None) -> RealRun:
    d = _load_json(path) if data is None else data
    notes: list[str] = []
    completed = _int(d.get("completed"), path, "completed", minimum=0)
    failed = d.get("failed")
    num_prompts = d.get("num_prompts")
    if failed is None and isinstance(num_prompts, int):
        failed = max(0, num_prompts - completed)
    failed = _int(failed if failed is not None else 0, path, "failed", minimum=0)
    n = completed + failed
    rate_raw = d.get("request_rate", "inf")
    rate = math.inf if rate_raw in ("inf", None) else _num(rate_raw, path, "request_rate", positive=True)
    duration = _num(d.get("duration"), path, "duration", positive=True)
    burst = d.get("burstiness", 1.0)
    burst = 1.0 if burst is None else _num(burst, path, "burstiness", positive=True)
    cap = _max_concurrency(d.get("max_concurrency"), path, "max_concurrency")
    if d.get("ramp_up_strategy"):
        notes.append(f"ramp_up_strategy {d['ramp_up_strategy']}: replayed at the constant request_rate")
    if math.isinf(rate) and cap is not None:  # the semaphore alone paces it: a closed loop
        stage = Stage(rate=n / duration, duration_s=duration, num_requests=n, process="closed",
                      concurrency=cap)
        notes.append(f"max_concurrency {cap} at request_rate inf: replayed as a closed loop of {cap} clients")
    elif math.isinf(rate):
        stage = Stage(rate=math.inf, duration_s=0.0, num_requests=n, process="burst")
    else:
        stage = Stage(rate=rate, duration_s=n / rate, num_requests=n, process="poisson",
                      cv=1.0 / math.sqrt(burst), concurrency=cap)
        if cap is not None:
            notes.append(f"max_concurrency {cap}: replayed with at most {cap} requests in flight "
                         f"(a request that finds them all taken waits on the client; TTFT from its send)")
    e2e = {s: _ms(d, f"{s}_e2el_ms", path) for s in LATENCY_STATS}
    ttft = {s: _ms(d, f"{s}_ttft_ms", path) for s in LATENCY_STATS}
    prompt_lens = output_lens = None
    ins, outs = d.get("input_lens"), d.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs) == n:
        prompt_lens = [_int(v, path, f"input_lens[{i}]") for i, v in enumerate(ins)]
        # A failed request reports 0 outputs; replay it with the mean (it was asked for some).
        good = [v for v in outs if isinstance(v, int) and v > 0]
        fill = int(round(sum(good) / len(good))) if good else 1
        output_lens = [v if isinstance(v, int) and v > 0 else fill for v in outs]
    else:
        if completed == 0:
            raise RealRunError(f"{path}: completed is 0: nothing to compare")
        mean_in = _num(d.get("total_input_tokens"), path, "total_input_tokens", positive=True) / completed
        mean_out = _num(d.get("total_output_tokens"), path, "total_output_tokens", positive=True) / completed
        prompt_lens = [max(1, int(round(mean_in)))] * n
        output_lens = [max(1, int(round(mean_out)))] * n
        notes.append(f"no per-request lengths (--save-detailed): every request {prompt_lens[0]} in, "
                     f"{output_lens[0]} out (the run's means)")
    mean_output = sum(output_lens) / len(output_lens) if output_lens else None
    tpot = _ms(d, "mean_tpot_ms", path)
    measured = MeasuredStage(index=0, sent=n, completed=completed, failures=failed, e2el_ms=e2e, ttft_ms=ttft,
                             tpot_ms=tpot if tpot is not None else _tpot(e2e, ttft, mean_output),
                             request_throughput=_opt_num(d.get("request_throughput")),
                             output_len=mean_output,
                             prompt_len=sum(prompt_lens) / len(prompt_lens) if prompt_lens else None)
    server = {k: d[k] for k in SERVER_KEYS if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool)}
    for k in SERVER_KEYS:
        if isinstance(d.get(k), str) and re.fullmatch(r"[0-9.]+", d[k]):  # --metadata values are strings
            server[k] = float(d[k]) if "." in d[k] else int(d[k])
    if "tensor_parallel_size" not in server:
        notes.append("the server's settings are not in the file: kvplan's defaults unless --set or "
                     "--metadata (tensor_parallel_size=..., max_num_seqs=...) say otherwise")
    return RealRun(path=path, format="vllm-bench", name=path.stem, model=d.get("model_id"), server=server,
                   stages=[stage], measured=[measured], prompt_lens=prompt_lens, output_lens=output_lens,
                   prompt_text=dataset_prompt_text(d.get("dataset_name")),
                   dtype=d.get("dtype") if isinstance(d.get("dtype"), str) else None,
                   hardware=d.get("hardware") if isinstance(d.get("hardware"), str) else None, notes=notes,
                   engine_version=engine_version_of(d, _load_json_opt(path.parent / "meta.json"), path))


#: Benchmark datasets whose prompts are decoded from made-up token ids (``vllm bench serve`` and
#: SGLang's ``bench_serving``: ``random`` draws them, vLLM's ``prefix_repetition`` and
#: ``random-mm`` too); ShareGPT, sonnet, HF datasets and custom files send prose.
SYNTHETIC_DATASETS = ("random", "random-mm", "random-rerank", "prefix_repetition", "generated-shared-prefix")
#: Datasets whose prompts are sent as token-id lists (SGLang's ``random-ids``): nothing to tokenise.
TOKEN_ID_DATASETS = ("random-ids",)


def dataset_prompt_text(name: Any) -> Optional[str]:
    """``workload.prompt_text`` for a benchmark's ``dataset_name`` (None when not recorded)."""
    if not isinstance(name, str) or not name:
        return None
    key = name.lower()
    if key in TOKEN_ID_DATASETS:
        return "token_ids"
    return "synthetic" if key in SYNTHETIC_DATASETS else "natural"


def _max_concurrency(v: Any, path: Path, name: str) -> Optional[int]:
    """A load tool's cap on requests in flight: None when unset (``null``, or vllm bench's
    ``"None"``), else an integer >= 1 (a digit string, as ``--metadata`` writes, is accepted)."""
    if v in (None, "None"):
        return None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    return _int(v, path, name)


def _ms(d: dict, key: str, path: Path) -> Optional[float]:
    v = d.get(key)
    return None if v is None else _num(v, path, key)


# --- GuideLLM -----------------------------------------------------------------------------

_OPEN_LOOP = {"constant": "constant", "poisson": "poisson", "throughput": "burst"}
#: Closed-loop strategies: a fixed number of clients, each sending when its last request ends.
_CLOSED_LOOP = ("synchronous", "concurrent")


def _guidellm_clients(strategy: dict, kind: str, path: Path, where: str) -> Optional[int]:
    """The clients of a closed-loop strategy (synchronous: 1; concurrent: ``streams``), or the
    in-flight cap of an open one (``max_concurrency``, GuideLLM's base strategy field; None
    when unset)."""
    if kind == "synchronous":
        return 1
    if kind == "concurrent":
        return _int(strategy.get("streams"), path, f"{where}.streams")
    return _max_concurrency(strategy.get("max_concurrency"), path, f"{where}.max_concurrency")


def read_guidellm(path: Path, data: Optional[dict] = None) -> RealRun:
    d = _load_json(path) if data is None else data
    benches = d.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise RealRunError(f"{path}: benchmarks: expected a non-empty list")
    notes: list[str] = []
    stages, prompt_lens, output_lens = [], [], []
    measured: list[MeasuredStage] = []
    for i, b in enumerate(benches):
        where = f"benchmarks[{i}]"
        if not isinstance(b, dict):
            raise RealRunError(f"{path}: {where}: expected an object")
        strategy = _dig(b, "config", "strategy") or _dig(b, "args", "strategy")
        if not isinstance(strategy, dict):
            raise RealRunError(f"{path}: {where}.config.strategy: missing (or args.strategy in GuideLLM 0.3)")
        kind = strategy.get("type_")
        if kind not in _OPEN_LOOP and kind not in _CLOSED_LOOP:
            notes.append(f"{where}: strategy {kind!r} is not one kvplan replays "
                         f"({', '.join(list(_OPEN_LOOP) + list(_CLOSED_LOOP))}): skipped")
            continue
        clients = _guidellm_clients(strategy, kind, path, f"{where}.config.strategy")
        if strategy.get("rampup_duration"):
            notes.append(f"{where}: rampup_duration {strategy['rampup_duration']} s: replayed without the ramp")
        metrics = _get(b, "metrics", path, dict, f"{where}.metrics")
        totals = metrics.get("request_totals") or _dig(b, "run_stats", "requests_made") or {}
        ok = _int(totals.get("successful"), path, f"{where}.metrics.request_totals.successful", minimum=0)
        errored = _int(totals.get("errored") or 0, path, f"{where}.metrics.request_totals.errored", minimum=0)
        incomplete = _int(totals.get("incomplete") or 0, path, f"{where}.metrics.request_totals.incomplete", minimum=0)
        n = ok + errored + incomplete
        duration = b.get("duration")
        if duration is None:
            start = b.get("start_time", _dig(b, "run_stats", "start_time"))
            end = b.get("end_time", _dig(b, "run_stats", "end_time"))
            if start is None:
                start, end = _dig(b, "scheduler_metrics", "measure_start_time"), _dig(b, "scheduler_metrics", "measure_end_time")
            duration = (end - start) if isinstance(start, (int, float)) and isinstance(end, (int, float)) else None
        duration = _num(duration, path, f"{where}.duration", positive=True)
        if kind in _CLOSED_LOOP or (kind == "throughput" and clients is not None):
            # Every request ready at the stage start, sent as a client frees: a closed loop.
            stages.append(Stage(rate=n / duration, duration_s=duration, num_requests=n,
                                process="closed", concurrency=clients))
        elif kind == "throughput":
            stages.append(Stage(rate=math.inf, duration_s=0.0, num_requests=n, process="burst"))
        else:
            rate = _num(strategy.get("rate"), path, f"{where}.config.strategy.rate", positive=True)
            stages.append(Stage(rate=rate, duration_s=n / rate, num_requests=n, process=_OPEN_LOOP[kind],
                                concurrency=clients))
        e2e = {s: _g_stat(metrics, "request_latency", s, path, where, 1000.0) for s in LATENCY_STATS}
        ttft = {s: _g_stat(metrics, "time_to_first_token_ms", s, path, where) for s in LATENCY_STATS}
        p_mean = _g_stat(metrics, "prompt_token_count", "mean", path, where)
        o_mean = _g_stat(metrics, "output_token_count", "mean", path, where)
        if p_mean is None or o_mean is None:
            raise RealRunError(f"{path}: {where}.metrics.prompt_token_count/output_token_count: "
                               f"missing successful.mean (the replayed lengths)")
        prompt_lens += [max(1, int(round(p_mean)))] * n
        output_lens += [max(1, int(round(o_mean)))] * n
        rps = _g_stat(metrics, "requests_per_second", "mean", path, where)
        measured.append(MeasuredStage(index=len(measured), sent=n, completed=ok, failures=errored + incomplete,
                                      e2el_ms=e2e, ttft_ms=ttft, tpot_ms=_tpot(e2e, ttft, o_mean),
                                      request_throughput=rps if rps is not None else ok / duration,
                                      output_len=o_mean, prompt_len=p_mean))
    if not stages:
        raise RealRunError(f"{path}: no benchmark kvplan replays (strategies "
                           f"{', '.join(list(_OPEN_LOOP) + list(_CLOSED_LOOP))})")
    notes.append("GuideLLM reports mean lengths: every request of a stage replayed with them")
    return RealRun(path=path, format="guidellm", name=path.stem, model=_find_model(d), server={},
                   stages=stages, measured=measured, prompt_lens=prompt_lens, output_lens=output_lens,
                   notes=notes,
                   engine_version=engine_version_of(d.get("metadata") or {}, _load_json_opt(path.parent / "meta.json"), path))


def _g_stat(metrics: dict, name: str, stat: str, path: Path, where: str, scale: float = 1.0) -> Optional[float]:
    m = metrics.get(name)
    if m is None:
        return None
    if not isinstance(m, dict):
        raise RealRunError(f"{path}: {where}.metrics.{name}: expected {{successful: {{mean, percentiles}}}}")
    s = m.get("successful", m)
    if not isinstance(s, dict):
        raise RealRunError(f"{path}: {where}.metrics.{name}.successful: expected an object")
    v = s.get(stat) if stat in ("mean", "median") else (s.get("percentiles") or {}).get(stat)
    return None if v is None else scale * _num(v, path, f"{where}.metrics.{name}.successful.{stat}")


def _find_model(d: Any, depth: int = 0) -> Optional[str]:
    """The first ``model`` / ``backend_model`` string in the report (where GuideLLM puts it moved
    between versions)."""
    if depth > 5:
        return None
    if isinstance(d, dict):
        for key in ("model", "backend_model"):
            if isinstance(d.get(key), str) and d[key]:
                return d[key]
        items = [v for k, v in d.items() if k not in ("requests", "metrics")]
    elif isinstance(d, list):
        items = d[:3]
    else:
        return None
    for v in items:
        found = _find_model(v, depth + 1)
        if found:
            return found
    return None


# --- small helpers ------------------------------------------------------------------------


def _tpot(e2e: dict, ttft: dict, output_len: Optional[float]) -> Optional[float]:
    if e2e.get("mean") is None or ttft.get("mean") is None or not output_len or output_len <= 1:
        return None
    return (e2e["mean"] - ttft["mean"]) / (output_len - 1)


def read_bytes(path: Path) -> bytes:
    """``path``'s bytes; a one-line ``RealRunError`` naming it when it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise RealRunError(f"{path}: file not found") from None
    except OSError as exc:
        raise RealRunError(f"{path}: {exc.strerror or exc}") from None


def _load_json(path: Path) -> Any:
    text = read_bytes(path)
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise RealRunError(f"{path}: not valid JSON{where}") from None


def _load_yaml(path: Path, required: bool = True) -> Any:
    if not path.is_file():
        if required:
            raise RealRunError(f"{path}: file not found")
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise RealRunError(f"{path}: not valid YAML{'' if line is None else f' (line {line + 1})'}") from None
    except OSError as exc:
        raise RealRunError(f"{path}: {exc.strerror or exc}") from None
    if data is not None and not isinstance(data, dict):
        raise RealRunError(f"{path}: expected a mapping at the top level")
    return data


def _get(d: Any, key: str, f: Path, kind: type, name: Optional[str] = None) -> Any:
    v = d.get(key) if isinstance(d, dict) else None
    if not isinstance(v, kind):
        raise RealRunError(f"{f}: {name or key}: missing or not {'an object' if kind is dict else kind.__name__}")
    return v


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _num(v: Any, f: Path, name: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise RealRunError(f"{f}: {name}: expected a {'positive ' if positive else ''}finite number, got {v!r}")
    return float(v)


def _opt_num(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _int(v: Any, f: Path, name: str, minimum: int = 1) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise RealRunError(f"{f}: {name}: expected an integer >= {minimum}, got {v!r}")
    return v
