"""Score the simulator against a benchmark run measured outside kvplan (``kvplan validate --real``).

Why: the in-process validation (``calibration.validate``) checks the simulator against kvplan's
own engine; a user deciding on GPUs needs it checked against *their* vLLM on *their* GPUs. This
module turns a run read by ``calibration.real_runs`` into a scenario (model, GPU, server
settings) and the run's own workload (``sim.workload.shared_prefix``), simulates the whole
multi-stage run once (the prefix cache stays warm across stages, as on the real server), cuts
the predicted requests by the stage they arrived in and compares per stage: mean/p90/p99 E2E
and TTFT, TPOT as ``(mean E2E - mean TTFT) / (output_len - 1)`` on both sides, request
throughput. The result is a ``validation.json`` (``calibration.validation_file``) with one row
per stage x metric, named ``stage<i>_<metric>`` (``i`` as in the run's own stage files).

Overload is a verdict, not a latency: a stage is overloaded for real when requests failed, not
all completed, or TTFT above 1 s was more than half the E2E (requests spent most of their life
queued); in the prediction when TTFT grows over the stage (mean TTFT of the last fifth of the
stage's arrivals more than 1 s and 2x above the first fifth's). A stage overloaded for real is
not scored on latency: its row ``stage<i>_overloaded`` (1 = yes) is.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence, cast

import numpy as np

from calibration.real_runs import SERVER_KEYS, MeasuredStage, RealRun, expand_run_paths, read_run
from calibration.validation_file import write_validation
from sim.catalog.models import SUPPORTED_MODEL_TYPES
from sim.errors import ConfigError, KvplanError
from sim.metrics import overload
from sim.policies.request import RequestState
from sim.workload.shared_prefix import (DEFAULT_STAGE_GAP_S, Stage, pooled_requests, shared_prefix_requests,
                                        stage_clients, stage_slices, staged_requests)

#: Folder-name fragments -> catalog hardware (checked in this order).
HARDWARE_HINTS = (("h200", "h200"), ("h100", "h100-sxm"), ("a100", "a100-80gb"), ("l40s", "l40s"))
#: The metrics scored per stage: (name, unit).
STAGE_METRICS = (
    ("mean_e2el_ms", "ms"), ("p90_e2el_ms", "ms"), ("p99_e2el_ms", "ms"),
    ("mean_ttft_ms", "ms"), ("p90_ttft_ms", "ms"), ("p99_ttft_ms", "ms"),
    ("mean_tpot_ms", "ms"), ("request_throughput", "req/s"),
)
OVERLOAD_TTFT_S = 1.0


class ModelNotModelled(KvplanError):
    """The run's model is of a kind kvplan does not simulate yet (e.g. mixture of experts)."""


@dataclass
class StageComparison:
    index: int
    stage: Stage
    real: dict[str, Optional[float]]
    predicted: dict[str, Optional[float]]
    overloaded_real: bool
    overloaded_predicted: bool

    @property
    def scored(self) -> bool:
        return not self.overloaded_real


@dataclass
class RunComparison:
    run: RealRun
    config: dict
    stages: list[StageComparison]
    sim_seconds: float
    summary: dict
    notes: list[str] = field(default_factory=list)

    def metric_rows(self) -> list[dict]:
        """validation.json rows: latency rows of the stages scored, an overload row each."""
        rows = []
        for sc in self.stages:
            p = f"stage{sc.index}_"
            rows.append({"name": p + "overloaded", "unit": "", "real": float(sc.overloaded_real),
                         "predicted": float(sc.overloaded_predicted)})
            if not sc.scored:
                continue
            for name, unit in STAGE_METRICS:
                r, q = sc.real.get(name), sc.predicted.get(name)
                if r is not None and q is not None and math.isfinite(r) and math.isfinite(q):
                    rows.append({"name": p + name, "unit": unit, "real": r, "predicted": q})
        return rows

    def source(self) -> dict:
        cm = self.summary.get("cost_model") or {}
        sc = self.summary.get("scenario", {})
        return {
            "kind": "real-run", "run": str(self.run.path), "format": self.run.format,
            "model": self.config["model"], "hardware": self.config["hardware"], "dtype": self.config["dtype"],
            "tensor_parallel_size": self.config["parallel"]["tensor_parallel_size"],
            "pricer": cm.get("source") or ("profile" if self.config["cost_model"].get("profile") else "roofline"),
            "pricer_description": cm.get("description") or sc.get("cost_model"),
            "known_error": cm.get("known_error"),
            "num_gpu_blocks": self.summary.get("num_gpu_blocks"),
            "workload": _describe(self.run),
            "stages": [{"index": s.index, "rate": s.stage.rate, "duration_s": s.stage.duration_s,
                        "num_requests": s.stage.num_requests, "process": s.stage.process,
                        "concurrency": s.stage.concurrency,
                        "overloaded": f"real {_yes(s.overloaded_real)}, predicted {_yes(s.overloaded_predicted)}",
                        "scored": s.scored} for s in self.stages],
            "sim_seconds": round(self.sim_seconds, 2),
            "notes": self.run.notes + self.notes,
        }


#: Architectures the simulator prices, mixtures of experts among them (Mixtral, Qwen3-MoE,
#: Llama 4, DeepSeek-V3 / Kimi, gpt-oss, MiniMax-M2, Qwen3.5-MoE): every type
#: ``sim.catalog.models.load_hf_config`` reads, so a MoE is refused only when that cannot read it.
MODELLED_MOE = SUPPORTED_MODEL_TYPES

#: Checkpoint-name suffixes of quantised releases of a model (RedHatAI's ``-FP8-dynamic`` and
#: ``-quantized.w8a8``, NVIDIA's ``-FP8``, ...) -> the weights they hold; stripped to find the
#: base model in kvplan's catalog when the checkpoint itself is not there.
CHECKPOINT_SUFFIXES = (
    (re.compile(r"[-_.]fp8([-_.]dynamic|[-_.]static|[-_.]block)?$", re.I), "fp8"),
    (re.compile(r"[-_.](quantized[-_.])?w8a8([-_.]fp8)?$", re.I), "fp8"),
)


# --- scenario -----------------------------------------------------------------------------


def resolve_model(run: RealRun) -> tuple[str, Optional[dict]]:
    """The simulator's model for the run's HF id: a catalog alias, else
    ``model_configs/<name>/config.json`` in a folder above the run; returns (model, config.json
    contents or None). MoE models raise ``ModelNotModelled``."""
    from sim.catalog.models import get_model

    if not run.model:
        raise ConfigError(f"{run.path}: the run does not name its model: pass --model")
    hf_cfg = _find_model_config(run)
    if hf_cfg is not None:
        cfg, path = hf_cfg
        kind = str(cfg.get("model_type", "")).lower()
        moe = cfg.get("num_local_experts") or cfg.get("num_experts") or "moe" in kind \
            or kind in ("deepseek_v3", "deepseek_v2", "gpt_oss", "llama4")
        if moe and kind not in MODELLED_MOE:
            raise ModelNotModelled(f"{run.name}: skipped: {run.model} is a mixture-of-experts model "
                                   f"({cfg.get('model_type')}) of a kind kvplan does not model yet "
                                   f"(it models {', '.join(MODELLED_MOE)})")
    try:
        get_model(run.model)
        return run.model, hf_cfg[0] if hf_cfg else None
    except ConfigError:
        pass
    base = base_checkpoint(run.model)
    if hf_cfg is None and base is not None:
        return base[0], None
    if hf_cfg is None:
        raise ConfigError(f"{run.path}: model {run.model!r} is neither in kvplan's catalog nor "
                          f"described by a model_configs/<name>/config.json next to the runs: pass --model")
    return str(hf_cfg[1]), hf_cfg[0]


def base_checkpoint(name: str) -> Optional[tuple[str, str]]:
    """(catalog model, weights) of a quantised checkpoint whose base model kvplan knows
    (``RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic`` -> Llama 4 Scout, fp8), else None."""
    from sim.catalog.models import get_model

    bare = name.rstrip("/").split("/")[-1]
    for pattern, weights in CHECKPOINT_SUFFIXES:
        stripped = pattern.sub("", bare)
        if stripped != bare:
            try:
                return get_model(stripped).name, weights
            except ConfigError:
                return None
    return None


def _find_model_config(run: RealRun) -> Optional[tuple[dict, Path]]:
    import json

    name = cast(str, run.model).rstrip("/").split("/")[-1]  # the caller checked it is named
    for parent in list(run.path.resolve().parents)[:4]:
        f = parent / "model_configs" / name / "config.json"
        if f.is_file():
            try:
                return json.loads(f.read_text()), f
            except (OSError, ValueError):
                raise ConfigError(f"{f}: not valid JSON") from None
    return None


def infer_hardware(run: RealRun) -> tuple[Optional[str], Optional[str]]:
    """(catalog hardware, note) from the run or its folder names (``..._h100/...``)."""
    if run.hardware:
        return run.hardware, None
    text = str(run.path.resolve()).lower()
    for hint, hw in HARDWARE_HINTS:
        if re.search(rf"(^|[^a-z0-9]){hint}", text):
            return hw, f"hardware {hw}: inferred from the folder name ({hint})"
    return None, None


def modelled_version(version: str, notes: list[str]) -> str:
    """The run's vLLM release if kvplan models it, else the nearest modelled one (with a note):
    a run of an older or newer vLLM is still worth comparing."""
    from sim.catalog.engines import VLLM_NEWEST, VLLM_OLDEST, get_engine, parse_version, version_text

    try:
        get_engine("vllm", version)
        notes.append(f"engine.version {version} (recorded in the run)")
        return version
    except ConfigError:
        try:
            v = parse_version(version)
        except ConfigError:
            notes.append(f"engine version {version!r} in the run is not a version: kvplan's default used")
            return version_text(VLLM_NEWEST)
        near = VLLM_OLDEST if v < VLLM_OLDEST else VLLM_NEWEST
        notes.append(f"the run used vLLM {version}, which kvplan does not model: priced as vLLM {version_text(near)}")
        return version_text(near)


def build_config(run: RealRun, hardware: Optional[str] = None, model: Optional[str] = None,
                 overrides: Sequence[str] = (), cost_source: Optional[str] = None) -> tuple[dict, list[str]]:
    """The scenario config (a checked dict) for the run, and notes on what was assumed."""
    from sim import config as config_mod
    from sim.scenario import DEFAULTS

    notes: list[str] = []
    hf_cfg = None
    if model is None:
        model, hf_cfg = resolve_model(run)
    if hardware is None:
        hardware, note = infer_hardware(run)
        if hardware is None:
            raise ConfigError(f"{run.path}: which GPU ran it is not recorded: pass --hardware (e.g. h100-sxm)")
        if note:
            notes.append(note)
    dtype = run.dtype
    if dtype is None:
        torch_dtype = (hf_cfg or {}).get("torch_dtype")
        if torch_dtype in ("float16", "bfloat16"):
            dtype = torch_dtype
        else:
            dtype = "float16" if "llama-2" in str(run.model).lower() else "bfloat16"
        notes.append(f"dtype {dtype} ({'config.json torch_dtype' if torch_dtype in ('float16', 'bfloat16') else 'fp16 for the Llama-2 family, bf16 otherwise'})")
    cfg: dict[str, Any] = {"model": model, "hardware": hardware, "dtype": dtype,
                           "kv_cache": {"prefix_caching": True},
                           "scheduler": {"policy": "chunked"}}
    weights = run.weights
    base = base_checkpoint(str(run.model)) if run.model else None
    if base is not None and model == base[0]:
        weights = weights or base[1]
        notes.append(f"{run.model}: a {base[1].upper()} checkpoint of {base[0]} (weights {base[1]})")
    if weights:
        cfg["quantization"] = {"weights": weights}
        if run.weights:
            notes.append(f"weights {weights} (the run's collection records its precision)")
    if run.kv_cache_dtype:
        cfg["kv_cache"]["dtype"] = run.kv_cache_dtype
        notes.append(f"kv cache {run.kv_cache_dtype} (vllm.log)")
    if run.prefix_caching is not None:
        cfg["kv_cache"]["prefix_caching"] = run.prefix_caching
    if run.cpu_offload_gb and run.prefix_caching is False:
        notes.append("CPU KV offload left out: it offloads cached prefix blocks, and the server "
                     "ran without prefix caching")
    elif run.cpu_offload_gb:
        cfg["kv_cache"]["cpu_offload_gb"] = round(run.cpu_offload_gb, 6)
        notes.append(f"CPU KV offload tier of {run.cpu_offload_gb:g} GiB per GPU (vllm.log cpu_bytes_to_use)")
    for key, dotted in SERVER_KEYS.items():
        if key in run.server:
            section, leaf = dotted.split(".")
            cfg.setdefault(section, {})[leaf] = run.server[key]
    if run.engine_version is not None:
        cfg.setdefault("engine", {}).update(name="vllm", version=modelled_version(run.engine_version, notes))
    if run.engine_name not in (None, "vllm"):
        from sim.catalog.engines import ENGINE_NAMES

        if run.engine_name in ENGINE_NAMES:
            cfg.setdefault("engine", {})["name"] = run.engine_name
            cfg["engine"].pop("version", None)  # a vLLM release named elsewhere is not this engine's
        else:
            notes.append(f"the run was served by {run.engine_name}, which this kvplan does not model: priced as vLLM")
    if run.prompt_text is not None:
        cfg["workload"] = {"prompt_text": run.prompt_text}
        if run.prompt_text == "synthetic":
            notes.append("prompts decoded from synthetic token ids: the API server's tokenising priced as "
                         "for such text (workload.prompt_text synthetic)")
        elif run.prompt_text == "token_ids":
            notes.append("prompts sent as token ids: nothing for the API server to tokenise "
                         "(workload.prompt_text token_ids)")
    if run.enforce_eager and cfg.get("engine", {}).get("name", "vllm") == "vllm":
        cfg.setdefault("engine", {})["enforce_eager"] = True
        notes.append("enforce_eager: the server ran without CUDA graphs (every step at the eager host time)")
    extra = list(overrides)
    if cost_source not in (None, "auto"):
        if "source" not in DEFAULTS.get("cost_model", {}):
            if cost_source != "roofline":
                raise ConfigError(f"--source {cost_source}: this kvplan has no cost_model.source "
                                  f"(only the roofline pricer)")
        else:
            extra.append(f"cost_model.source={cost_source}")
    config = config_mod.build_config(cfg, extra)
    if run.kv_cache_tokens and "kv_cache.num_gpu_blocks" not in " ".join(extra):
        config = _pin_kv_pool(config, run.kv_cache_tokens, notes)
    return config, notes


def _pin_kv_pool(config: dict, logged_tokens: int, notes: list[str]) -> dict:
    """The run's KV pool as vLLM logged it (``kv_cache.num_gpu_blocks``, per engine core), with
    a note setting kvplan's own memory plan against it. Why: the pool is what the server was
    started with, a fact of its configuration like ``max_num_seqs``; replaying the log's pool
    scores the latency model alone (prefix-cache hits and preemptions depend on it), while the
    note keeps the memory plan's own error in view. ``--set kv_cache.num_gpu_blocks=N`` wins."""
    from sim import config as config_mod
    from sim.run_parts import resolve_deployment

    block = int(config["kv_cache"]["block_size"])
    planned = resolve_deployment(config).memory.num_kv_slots
    err = (planned - logged_tokens) / logged_tokens
    notes.append(f"KV pool per engine core: vLLM logged {logged_tokens:,} tokens, kvplan's memory "
                 f"plan {planned:,} ({err:+.1%}); the replay runs the logged pool")
    return config_mod.build_config(config, [f"kv_cache.num_gpu_blocks={max(1, logged_tokens // block)}"])


# --- simulate and compare -----------------------------------------------------------------


def compare_run(run: RealRun, *, hardware: Optional[str] = None, model: Optional[str] = None,
                overrides: Sequence[str] = (), seed: int = 0, stage_seconds: Optional[float] = None,
                cost_source: Optional[str] = None, gap_s: float = DEFAULT_STAGE_GAP_S) -> RunComparison:
    """Simulate the run once and compare it stage by stage."""
    from sim.api import simulate

    config, notes = build_config(run, hardware, model, overrides, cost_source)
    stages = list(run.stages)
    if stage_seconds is not None:
        if not stage_seconds > 0:
            raise ConfigError(f"--stage-seconds: expected > 0, got {stage_seconds}")
        stages = [_shorten(s, stage_seconds) for s in stages]
        if stages != list(run.stages):
            notes.append(f"stages shortened to at most {stage_seconds:g} s each (real metrics are the full stages')")
    block = int(config["kv_cache"]["block_size"])
    skip = 0  # leading simulated stages that are not scored
    if run.prompt_pool is not None:
        assert run.pool_lens is not None, "a RealRun's prompt_pool comes with its entries' lengths"
        if run.warmup is not None:  # the tool's warm-up (aiperf's) runs first, on the same pool
            stages, skip = [run.warmup] + stages, 1
            notes.append(f"{run.warmup.num_requests} warm-up requests simulated first (same prompt pool), not scored")
        reqs, stage_of, _ = pooled_requests(run.prompt_pool, stages, *run.pool_lens, seed, gap_s=gap_s)
    elif run.shared_prefix is not None:
        reqs, stage_of, _ = shared_prefix_requests(run.shared_prefix, stages, seed, gap_s=gap_s,
                                                   hash_block_size=block)
    else:
        ins, outs = _lengths_for(run, stages)
        reqs, stage_of, _ = staged_requests(stages, ins, outs, seed, gap_s=gap_s)
    max_len = int(config["kv_cache"]["max_model_len"])
    too_long = sum(r.prompt_len + r.max_output_tokens > max_len for r in reqs)
    if too_long:
        notes.append(f"{too_long} requests longer than max_model_len {max_len}: the simulator rejects them")
    t0 = time.perf_counter()
    # Closed-loop and capped stages are sent as the load tool sent them (sim.workload.clients).
    result = simulate(config, requests=reqs, seed=seed, clients=stage_clients(stages, stage_of))
    elapsed = time.perf_counter() - t0
    done = result.requests  # fresh copies, same order as reqs
    comparisons = []
    for k, idx in enumerate(stage_slices(stage_of, len(stages))[skip:]):
        stage = stages[k + skip]
        pred, grows = _stage_prediction([done[i] for i in idx], run.measured[k], stage)
        comparisons.append(StageComparison(k if run.format != "inference-perf" else run.measured[k].index,
                                           stage, _real_metrics(run.measured[k]), pred,
                                           real_overloaded(run.measured[k]), grows))
    return RunComparison(run, result.config, comparisons, elapsed, result.summary, [n for n in notes if n])


def real_overloaded(m: MeasuredStage) -> bool:
    """Failures, unfinished requests, or ``queued_by_means``."""
    if m.failures > 0 or (m.sent is not None and m.completed < m.sent):
        return True
    return queued_by_means(m.ttft_ms.get("mean"), m.e2el_ms.get("mean"))


def queued_by_means(mean_ttft_ms: Optional[float], mean_e2el_ms: Optional[float]) -> bool:
    """A stage whose mean TTFT (> 1 s) is more than half its mean E2E waited in a queue: the
    test where only the means are known (published per-stage means, no failure counts)."""
    return (mean_ttft_ms is not None and mean_e2el_ms is not None
            and mean_ttft_ms > 1000 * OVERLOAD_TTFT_S and mean_ttft_ms > 0.5 * mean_e2el_ms)


def _real_metrics(m: MeasuredStage) -> dict[str, Optional[float]]:
    out: dict[str, Optional[float]] = {}
    for s in ("mean", "p90", "p99"):
        out[f"{s}_e2el_ms"] = m.e2el_ms.get(s)
        out[f"{s}_ttft_ms"] = m.ttft_ms.get(s)
    out["mean_tpot_ms"] = m.tpot_ms
    out["request_throughput"] = m.request_throughput
    return out


def _stage_prediction(reqs: list, measured: MeasuredStage, stage: Stage) -> tuple[dict, bool]:
    fin = [r for r in reqs if r.state is RequestState.FINISHED and r.token_times]
    out: dict[str, Optional[float]] = {name: None for name, _ in STAGE_METRICS}
    if not fin:
        return out, bool(reqs)
    ttft = np.array([r.token_times[0] - r.arrival_time for r in fin]) * 1000
    e2e = np.array([r.finish_time - r.arrival_time for r in fin]) * 1000
    for s, f in (("mean", np.mean), ("p90", lambda a: np.percentile(a, 90)), ("p99", lambda a: np.percentile(a, 99))):
        out[f"{s}_e2el_ms"] = float(f(e2e))
        out[f"{s}_ttft_ms"] = float(f(ttft))
    n_out = float(np.mean([r.num_output_tokens for r in fin]))
    if n_out > 1:
        # both set in the loop above
        out["mean_tpot_ms"] = (cast(float, out["mean_e2el_ms"]) - cast(float, out["mean_ttft_ms"])) / (n_out - 1)
    start = min(r.arrival_time for r in reqs)
    end = max(r.finish_time for r in fin)
    out["request_throughput"] = len(fin) / max(end - start, 1e-9)
    # Overload: TTFT grows over the stage (queue building up; the simulator's own test, as
    # summary.json reports it), or requests were rejected.
    grows = overload(reqs)["overloaded"] or len(fin) < len(reqs)
    return out, bool(grows)


def _shorten(s: Stage, seconds: float) -> Stage:
    if s.process == "burst" or s.duration_s <= seconds:
        return s
    n = int(s.rate * seconds) if s.process == "rescaled_poisson" else max(1, int(round(s.num_requests * seconds / s.duration_s)))
    return replace(s, duration_s=seconds, num_requests=n)


def _lengths_for(run: RealRun, stages: list[Stage]) -> tuple[list[int], list[int]]:
    """Per-request lengths of the (possibly shortened) stages, from the run's lists."""
    ins: list[int] = []
    outs: list[int] = []
    pos = 0
    # Without a prompt pool or shared prefix, a RealRun carries per-request lengths.
    prompt_lens, output_lens = cast(list[int], run.prompt_lens), cast(list[int], run.output_lens)
    for full, st in zip(run.stages, stages):
        ins += prompt_lens[pos:pos + st.num_requests]
        outs += output_lens[pos:pos + st.num_requests]
        pos += full.num_requests
    return ins, outs


def _describe(run: RealRun) -> str:
    parts = []
    if run.shared_prefix is not None:
        sp = run.shared_prefix
        parts.append(f"shared prefix: {sp.num_groups} groups x {sp.prompts_per_group} prompts, "
                     f"{sp.system_prompt_len} + {sp.question_len} in, {sp.output_len} out")
    parts.append(f"stages: {', '.join(_describe_stage(s) for s in run.stages)}")
    return "; ".join(parts)


def _describe_stage(s: Stage) -> str:
    if s.process == "closed":
        return f"{s.num_requests} requests from {s.concurrency} clients (closed loop)"
    text = f"{s.rate:g} req/s x {s.duration_s:g} s" if s.process != "burst" else f"{s.num_requests} at once"
    return text if s.concurrency is None else f"{text}, at most {s.concurrency} in flight"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --- the command's work -------------------------------------------------------------------


def validate_real(paths: Sequence[Path], out: Path, *, hardware: Optional[str] = None,
                  model: Optional[str] = None, overrides: Sequence[str] = (), seed: int = 0,
                  stage_seconds: Optional[float] = None, cost_source: Optional[str] = None,
                  on_skip=None) -> list[tuple[RunComparison, Path]]:
    """Validate each run; one run writes ``out/validation.json``, several write
    ``out/<run name>/validation.json``. Models kvplan cannot simulate yet are reported through
    ``on_skip(message)`` and skipped; if every run is skipped that is an error."""
    # A collection's folder stands for its runs; every file is checked before anything runs.
    runs = [read_run(p) for p in expand_run_paths(list(paths))]
    results = []
    skipped = []
    for run in runs:
        try:
            cmp = compare_run(run, hardware=hardware, model=model, overrides=overrides, seed=seed,
                              stage_seconds=stage_seconds, cost_source=cost_source)
        except ModelNotModelled as exc:
            skipped.append(str(exc))
            continue
        folder = out if len(runs) == 1 else out / _safe(run.name)
        folder.mkdir(parents=True, exist_ok=True)
        path = write_validation(folder / "validation.json", cmp.metric_rows(), cmp.source())
        results.append((cmp, path))
    if results and on_skip is not None:
        for msg in skipped:
            on_skip(msg)
    if not results:
        raise ModelNotModelled(skipped[0] if len(skipped) == 1 else f"all {len(skipped)} runs skipped: {skipped[0]}")
    return results


def across_runs(records: Sequence[dict]) -> dict:
    """Mean |error| of each stage metric (``mean_ttft_ms``, ``p90_e2el_ms``, ...) over every
    scored stage of every run, with the signed mean (bias) and the count: what a collection of
    runs says about the simulator as a whole (``validate --real`` on several runs writes it to
    ``summary.json`` beside the runs' folders)."""
    errors: dict[str, list[float]] = {}
    runs = 0
    for record in records:
        counted = False
        for m in record.get("metrics", []):
            name, err = str(m.get("name", "")), m.get("error")
            if err is None or not name.startswith("stage") or "_" not in name or name.endswith("_overloaded"):
                continue  # the overload flag is an agreement, not an error to average
            errors.setdefault(name.split("_", 1)[1], []).append(float(err))
            counted = True
        runs += counted
    return {"runs": runs,
            "metrics": {k: {"stages": len(v), "mape": sum(map(abs, v)) / len(v), "bias": sum(v) / len(v)}
                        for k, v in sorted(errors.items())}}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "run"
