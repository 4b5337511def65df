"""Validate the simulator against the real engine: one workload through both, errors side by side.

The workload: Poisson arrivals at ``rate``, ShareGPT-like lengths scaled down for a CPU
(``runtime.bench.sharegpt_like``), random prompt token ids, fixed output lengths (greedy, EOS
ignored). The runtime replays it online (``LLM.replay``: requests arrive over wall-clock time);
the simulator runs the same requests with the profile's cost model and the engine's own
scheduler policy, limits, block size and KV pool (``kv_cache.num_gpu_blocks``). Both sides'
metrics come from ``sim.metrics.summarize``, so every number has one definition.

``validation.json`` (``calibration.validation_file``) gets the metrics, per-request samples for CDFs
and the provenance; beside it ``runtime_steps.jsonl`` (the replay's step trace) and ``sim/``
(the simulator's summary, requests and steps).
"""

from __future__ import annotations

import os

import json
from array import array
import sys
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from calibration.fit import samples_from_records
from calibration.validation_file import load_validation, write_validation
from sim.catalog.dtypes import DTYPES
from sim.config import build_scenario
from sim.errors import ConfigError
from sim.policies.request import Request, RequestState
from sim.pricing.profile import ProfileCostModel
from sim.pricing.profile_file import load_profile, software_versions

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p99")
TOTALS = ("request_throughput", "output_throughput", "total_token_throughput", "duration_s")


def run_validation(profile_path: Union[str, Path], rate: float, num_requests: int,
                   out_dir: Union[str, Path], *, model: Optional[str] = None, scale: float = 0.125,
                   seed: int = 0, max_num_seqs: int = 256,
                   max_num_batched_tokens: Optional[int] = None,
                   kv_cache_bytes: Optional[int] = None, num_threads: Optional[int] = None,
                   sim_model: Optional[str] = None, progress: bool = False,
                   num_speculative_tokens: int = 0, policy: str = "chunked") -> dict:
    """Run the validation and write ``out_dir/validation.json``; returns it as
    ``load_validation`` reads it.

    With ``num_speculative_tokens`` the engine speculates by n-gram lookup, and the simulator is
    given what the engine measured in this run: the per-position acceptance table and how often
    the proposer found 0..k drafts (no draft model cost). The comparison then tests scheduling
    and step pricing under speculation, not a prediction of the acceptance rate itself.

    ``policy`` is the scheduler both executors run (chunked, vllm_v0, orca, static): the same
    policy object decides in both, so a policy's error is the step pricing under its step shapes."""
    if rate <= 0:
        raise ConfigError(f"--rate must be positive, got {rate}")
    if num_requests < 1:
        raise ConfigError(f"--num-requests must be >= 1, got {num_requests}")
    if scale <= 0:
        raise ConfigError(f"--scale must be positive, got {scale}")
    prof = load_profile(profile_path)
    from runtime import LLM, SamplingParams, TimedRequest
    from runtime.bench import sharegpt_like

    from calibration.profiler import catalog_model_of
    from sim.workload.arrivals import poisson_arrivals

    from runtime import EngineArgs, LLMEngine

    # One scenario for both executors. The engine gets it through EngineArgs.from_scenario; what
    # only the engine can decide (its pool from the byte budget, its max_model_len from the
    # model, its token budget, the measured speculation) is written back into the scenario the
    # simulator runs. With a profile and an explicit pool, hardware and dtype only feed the
    # simulator's memory-plan fit check; the default stands in when the profile's dtype is not
    # a simulator one.
    scenario = build_scenario({
        "dtype": prof.dtype if prof.dtype in DTYPES else "float16", "seed": seed,
        "kv_cache": {"block_size": prof.block_size, "prefix_caching": True},
        "scheduler": {"policy": policy, "max_num_seqs": max_num_seqs,
                      "max_num_batched_tokens": max_num_batched_tokens},
        "speculative": {"num_tokens": num_speculative_tokens},
        "cost_model": {"profile": str(profile_path)},
        "workload": {"num_requests": num_requests},
        # The replay is in-process (LLM.replay): no API server between the requests and the engine.
        "engine": {"frontend": "none"},
    })
    args = EngineArgs.from_scenario(scenario, model or prof.model_spec, dtype=prof.dtype,
                                    device=prof.device, max_model_len=None,
                                    kv_cache_bytes=kv_cache_bytes,
                                    num_threads=num_threads or prof.num_threads)
    llm = LLM.from_engine(LLMEngine.from_args(args))
    engine = llm.engine
    slug = (sim_model or prof.catalog_model or catalog_model_of(engine.config)
            or _config_path_of(model or prof.model_spec))
    if slug is None:
        raise ConfigError("--sim-model: the model is not in the simulator's catalog by shape; "
                          "name a catalog model with the same shapes")
    pool = engine.kv_cache.num_blocks * engine.args.block_size
    work = sharegpt_like(num_requests, scale, engine.config.vocab_size, min(engine.max_model_len, pool), seed)
    arrivals = poisson_arrivals(num_requests, rate, np.random.default_rng(seed + 1))
    # Warm-up (not measured): the first steps of a fresh process pay one-time costs.
    llm.generate(prompt_token_ids=[p[:32] for p in work.prompts[:4]],
                 sampling_params=SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    engine.reset_spec_stats()
    first, preempt0 = len(engine.tracer.records), engine.scheduler.num_preemptions
    timed = [TimedRequest(float(t), p, SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True), f"r{i}")
             for i, (t, p, o) in enumerate(zip(arrivals, work.prompts, work.output_lens))]
    outs = llm.replay(timed, use_tqdm=progress and sys.stderr.isatty())
    steps = engine.tracer.records[first:]
    engine.close()
    real, real_samples = _summarize([_as_request(o) for o in outs],
                      engine.scheduler.num_preemptions - preempt0, len(steps))

    from sim.api import simulate

    facts: dict[str, Any] = {
        "model": slug, "kv_cache.num_gpu_blocks": engine.kv_cache.num_blocks,
        "kv_cache.max_model_len": engine.max_model_len,
        "scheduler.max_num_batched_tokens": engine.scheduler.budget,
    }
    if num_speculative_tokens:
        avail = engine.draft_availability()
        if not sum(avail):  # the proposer was never asked: nothing to speculate with
            avail = [1.0] + [0.0] * num_speculative_tokens
        facts.update({"speculative.acceptance": "table",
                      "speculative.acceptance_table": engine.acceptance_table(),
                      "speculative.draft_cost_ratio": 0.0, "speculative.draft_availability": avail})
    scenario = scenario.override(facts)
    reqs = [Request(f"r{i}", float(t), len(p), o, prompt_token_ids=p)
            for i, (t, p, o) in enumerate(zip(arrivals, work.prompts, work.output_lens))]
    result = simulate(scenario, requests=reqs)
    s = result.summary
    pred, pred_samples = _summarize(result.requests, s["kv_cache"]["preemptions"],
                                    s["simulator"]["num_steps"])

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runtime_steps.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in steps)
    result.write(out / "sim")
    step_err = _profile_error_on(steps, prof)
    source = {
        "profile": str(profile_path), "hardware": prof.hardware, "device": prof.device,
        "model": prof.model, "dtype": prof.dtype, "simulator_model": slug,
        "runtime": ", ".join(f"{k} {v}" for k, v in software_versions().items()),
        "workload": (f"{num_requests} requests, Poisson {rate:g} req/s, ShareGPT-like lengths x {scale:g} "
                     f"({work.describe()}), random prompt ids, fixed output lengths, seed {seed}"),
        "engine": (f"{engine.args.policy()} scheduler, block_size {engine.args.block_size}, "
                   f"{engine.kv_cache.num_blocks} KV blocks, max_num_seqs {max_num_seqs}, "
                   f"max_num_batched_tokens {engine.scheduler.budget}, prefix caching "
                   f"{'on' if engine.args.enable_prefix_caching else 'off'}"
                   + (f", n-gram speculation k={num_speculative_tokens} (acceptance table "
                      f"{[round(a, 3) for a in engine.acceptance_table()]}, draft availability "
                      f"{[round(a, 3) for a in engine.draft_availability()]}, measured in this run)"
                      if num_speculative_tokens else "")),
        "step_error": step_err,
    }
    if s.get("warnings"):  # e.g. the profile was measured on another machine
        source["warnings"] = s["warnings"]
    metrics = [{"name": k, "real": real[k], "predicted": pred[k]} for k in real
               if real[k] is not None and pred.get(k) is not None]
    samples = {name: {"real": real_samples[name], "predicted": pred_samples[name]} for name in real_samples}
    path = write_validation(out / "validation.json", metrics, source, samples)
    return load_validation(path)


def _summarize(requests: list[Request], preemptions: int, num_steps: int) -> tuple[dict, dict]:
    """The compared numbers, through the simulator's own ``summarize``, and per-request samples
    (in request order) for the CDFs."""
    from sim.metrics import summarize

    s = summarize(requests, {"duration_s": [], "num_spec_tokens": []}, num_preemptions=preemptions)
    numbers: dict[str, Any] = {f"{stat}_{m}_ms": s[f"{stat}_{m}_ms"] for m in LATENCIES for stat in STATS}
    numbers.update({k: s[k] for k in TOTALS})
    numbers["preemptions"] = preemptions
    numbers["num_steps"] = num_steps
    if "spec_decode" in s:  # speculative decoding: what a verifying step emits
        numbers["spec_acceptance_rate"] = s["spec_decode"]["acceptance_rate"]
        numbers["spec_tokens_per_step"] = s["spec_decode"]["mean_tokens_per_step"]
    samples = {
        "ttft_ms": [1000 * r.ttft for r in requests if r.ttft is not None],
        "tpot_ms": [1000 * r.tpot for r in requests if r.tpot is not None],
        "e2el_ms": [1000 * r.e2el for r in requests if r.e2el is not None],
    }
    return numbers, samples


def _as_request(out: Any) -> Request:
    """A runtime ``RequestOutput`` as a finished policy ``Request`` (what ``summarize`` reads)."""
    m = out.metrics
    n = len(out.token_ids)
    req = Request(out.request_id, m.arrival_time, len(out.prompt_token_ids), max(n, 1))
    if out.finish_reason != "rejected":
        req.state = RequestState.FINISHED
        req.num_output_tokens = n
        req.token_times = array("d", out.outputs[0].token_times)
        req.finish_time = m.finish_time
        req.num_spec_proposed = m.num_spec_proposed
        req.num_spec_accepted = m.num_spec_accepted
        req.num_spec_steps = m.num_spec_steps
    else:
        req.state = RequestState.REJECTED
    return req


def _profile_error_on(steps: list[dict], prof: Any) -> str:
    """How well the profile prices the replay's own steps: the cost model's share of the error,
    apart from any difference in what the two schedulers did."""
    return profile_error_text(profile_error_numbers(steps, prof))


def profile_error_numbers(steps: list[dict], prof: Any) -> dict[str, Any]:
    """The profile's error on measured engine steps: ``num_steps``, ``mape`` and ``bias``
    (fractions, predicted against measured per step), ``busy_s_real`` / ``busy_s_predicted``."""
    s = samples_from_records(steps)
    if not s.n:
        return {"num_steps": 0}
    pred = ProfileCostModel(prof).step_times(**s.cols)
    rel = (pred - s.seconds) / s.seconds
    return {"num_steps": int(s.n), "mape": float(np.mean(np.abs(rel))), "bias": float(np.mean(rel)),
            "busy_s_real": float(s.seconds.sum()), "busy_s_predicted": float(pred.sum())}


def profile_error_text(n: dict[str, Any]) -> str:
    """``profile_error_numbers`` as the line validate prints."""
    if not n.get("num_steps"):
        return "no steps"
    return (f"profile on the replay's own {n['num_steps']} steps: MAPE {100 * n['mape']:.1f}%, "
            f"bias {100 * n['bias']:+.1f}% (busy {n['busy_s_real']:.1f} s real, "
            f"{n['busy_s_predicted']:.1f} s predicted)")


def _config_path_of(spec: Optional[str]) -> Optional[str]:
    """A ``random:<config.json>`` model (a shape no catalog entry has, e.g.
    ``calibration/models/mixtral-tiny``): the simulator reads the same config.json."""
    if spec and str(spec).startswith("random:"):
        path = str(spec)[len("random:"):]
        if os.path.exists(path):
            return path
    return None
