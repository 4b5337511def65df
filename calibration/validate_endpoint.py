"""Score the simulator against a live server (``kvplan validate --endpoint URL``).

Why: ``calibration.validate`` runs the workload through kvplan's engine in-process; a deployment
is a server behind HTTP. Here ``kvplan loadgen`` drives the server (``calibration.loadgen``), its
run is saved in ``vllm bench serve``'s format and read back through ``validate --real``'s reader,
and the simulator replays *the same requests*: each one at the moment it was sent, with the
prompt length the server counted and the output length it generated, sharing prefixes as the
workload does. Both sides' numbers come from ``sim.metrics.summarize`` with the in-process
validation's metric names (``calibration.validate.LATENCIES``, ``STATS``, ``TOTALS``), so the two
validations' errors can be read side by side, over the requests that completed.

The simulator prices steps with a calibration profile of the server's engine (``--profile``,
the kvplan serve case) or with the GPU cost model for the served model on ``--hardware`` (a
vLLM server on a GPU; the scenario is built by ``validate_real.build_config`` as for
``validate --real``). The server's engine settings are read from it where it states them
(``/v1/models``' ``max_model_len``; ``vllm:cache_config_info``'s block size and KV blocks) and
otherwise taken from ``--set``.

The HTTP overhead (everything between the client and the engine: the round trip, JSON and SSE,
tokenisation, the API server's queue) is the client's mean TTFT minus the server's own, read
from its ``/metrics`` histograms before and after the run (``calibration.server_metrics``). The
simulator prices the engine only, so its TTFT error is expected to lie within the in-process
error plus this overhead.
"""

from __future__ import annotations

import math
import time
from array import array
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from calibration.loadgen import LoadRun, RequestResult
from calibration.server_metrics import ServerLatency, config_info, server_latency
from calibration.validation_file import load_validation, write_validation
from sim.errors import ConfigError
from sim.policies.request import Request, RequestState

#: The in-process validation's length means (``runtime.bench.SHAREGPT_MEAN_IN/OUT``), repeated
#: here so that the client needs no torch; a test checks that both draw the same lengths.
SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT = 161, 338


def validation_workload(num_requests: int, rate: float, scale: float, seed: int,
                        max_model_len: int = 4096) -> list[Request]:
    """``kvplan validate``'s own workload (Poisson arrivals at ``rate``, ShareGPT-like lengths
    x ``scale``): the same random draws as ``calibration.validate``, so ``validate --endpoint``
    and ``validate`` with the same flags send the same requests."""
    from sim.workload.arrivals import poisson_arrivals
    from sim.workload.lengths import Lognormal

    rng = np.random.default_rng(seed)
    cap = max(2, max_model_len // 2)
    ins = Lognormal(mean=SHAREGPT_MEAN_IN * scale, cv=1.0, min=2, max=cap).sample(num_requests, rng)
    outs = Lognormal(mean=SHAREGPT_MEAN_OUT * scale, cv=0.8, min=2, max=cap).sample(num_requests, rng)
    times = poisson_arrivals(num_requests, rate, np.random.default_rng(seed + 1))
    return [Request(str(i), float(t), int(a), int(b)) for i, (t, a, b) in enumerate(zip(times, ins, outs))]


# --- the simulator's scenario -------------------------------------------------------------


def server_facts(run: LoadRun) -> dict[str, Any]:
    """Engine settings the server states, as scenario keys."""
    facts: dict[str, Any] = {}
    if run.target.max_model_len:
        facts["kv_cache.max_model_len"] = run.target.max_model_len
    info = config_info(run.metrics_after or run.metrics_before)
    for label, key in (("block_size", "kv_cache.block_size"), ("num_gpu_blocks", "kv_cache.num_gpu_blocks")):
        value = info.get(label, "")
        if value.isdigit() and int(value) > 0:
            facts[key] = int(value)
    return facts


def profile_config(profile: Path, run: LoadRun, overrides: Sequence[str], sim_model: Optional[str]) -> tuple[dict, list[str]]:
    """The scenario for a server whose engine a calibration profile describes (``kvplan serve``):
    the profile's model, dtype, block size and pricing, the server's stated settings, then
    ``--set``."""
    from sim.catalog.dtypes import DTYPES
    from sim.config import build_config
    from sim.pricing.profile_file import load_profile

    prof = load_profile(profile)
    model = sim_model or prof.catalog_model
    if model is None:
        raise ConfigError(f"--sim-model: the profile {profile} names no catalog model; name the simulator's model")
    facts = {"model": model, "dtype": prof.dtype if prof.dtype in DTYPES else "float16",
             "kv_cache.block_size": prof.block_size, "kv_cache.prefix_caching": True,
             "cost_model.profile": str(profile)}
    facts.update(server_facts(run))
    notes = []
    set_keys = {o.split("=", 1)[0].strip() for o in overrides}
    if "kv_cache.num_gpu_blocks" not in facts and "kv_cache.num_gpu_blocks" not in set_keys:
        notes.append("the server does not state its KV pool: the simulator sizes its own (pass "
                     "--set kv_cache.num_gpu_blocks=N when the pool limits the batch)")
    return build_config(_nest(facts), list(overrides)), notes


def hardware_config(bench: Path, run: LoadRun, hardware: str, overrides: Sequence[str],
                    sim_model: Optional[str], cost_source: Optional[str]) -> tuple[dict, list[str]]:
    """The scenario for a GPU server, as ``validate --real`` builds it from the saved run (the
    served model resolved in the catalog, server settings from the run's metadata), with the
    KV pool and block size the server states, then ``--set``."""
    from calibration.real_runs import read_vllm_bench
    from calibration.validate_real import build_config

    named = {o.split("=", 1)[0].strip() for o in overrides}
    stated = [f"{k}={v}" for k, v in server_facts(run).items() if k not in named]
    config, notes = build_config(read_vllm_bench(bench), hardware, sim_model, stated + list(overrides), cost_source)
    return config, [n for n in notes if n]


# --- the same requests, measured and simulated ----------------------------------------------


def measured_request(r: RequestResult) -> Request:
    """A completed HTTP request as a finished policy ``Request`` (what ``summarize`` reads):
    arrival at the send time, each token at the arrival of the chunk that carried it (when the
    chunks say how many tokens they carry, or carry one each; else spread evenly between the
    first and the last chunk), finish at the end of the stream."""
    assert r.start_s is not None and r.success
    n = max(1, r.output_len)
    req = Request(f"r{r.index}", r.start_s, max(1, r.input_len), n)
    first = r.start_s + r.ttft_s
    chunk_times = first + np.concatenate([[0.0], np.cumsum(r.itl_s)])
    if len(r.chunk_tokens) == r.num_chunks and sum(r.chunk_tokens) == n:
        times = np.repeat(chunk_times, r.chunk_tokens)
    elif r.num_chunks == n:
        times = chunk_times
    else:
        times = np.linspace(first, chunk_times[-1], n)
    req.state = RequestState.FINISHED
    req.num_output_tokens = n
    req.token_times = array("d", times.tolist())
    req.finish_time = r.start_s + r.e2el_s
    return req


def replay_requests(run: LoadRun, workload: Sequence[Request]) -> list[Request]:
    """The sent requests for the simulator: sent at the same moments, as long as the server
    counted them, as many output tokens as it generated (asked, for a failed request), the
    workload's prefix hashes fitted to the length."""
    from sim.workload.prefix import resize_hashes

    out = []
    for r in run.results:
        w = workload[r.index]
        n_in = max(1, r.input_len)
        hashes = w.block_hashes
        if hashes is not None and n_in != w.prompt_len:
            hashes = resize_hashes([hashes], np.array([n_in]), w.hash_block_size)[0]
        out.append(Request(f"r{r.index}", float(r.start_s or 0.0), n_in,
                           max(1, r.output_len if r.success else r.max_tokens),
                           block_hashes=hashes, hash_block_size=w.hash_block_size))
    return out


def as_delivered(req: Request, stream_interval: int) -> Request:
    """``req`` as the client would have recorded it: each token at its chunk's arrival under
    ``--stream-interval`` (``sim.metrics.delivered_times``), the view ``measured_request`` gives
    the real side, so both sides' ITL statistics count the same gaps. ``req`` itself when every
    token is its own chunk."""
    from sim.metrics import delivered_times

    if stream_interval <= 1 or len(req.token_times) <= 2:
        return req
    out = Request(req.request_id, req.arrival_time, req.prompt_len, req.max_output_tokens)
    out.state = req.state
    out.num_output_tokens = req.num_output_tokens
    out.token_times = array("d", delivered_times(req.token_times, stream_interval))
    out.finish_time = req.finish_time
    return out


def numbers(requests: Sequence[Request]) -> dict[str, Optional[float]]:
    """The in-process validation's metrics (same names) through ``sim.metrics.summarize``."""
    from calibration.validate import LATENCIES, STATS, TOTALS
    from sim.metrics import summarize

    s = summarize(list(requests), {"duration_s": [], "num_spec_tokens": []})
    out: dict[str, Optional[float]] = {f"{stat}_{m}_ms": s[f"{stat}_{m}_ms"] for m in LATENCIES for stat in STATS}
    out.update({k: s[k] for k in TOTALS})
    return out


def samples_of(requests: Sequence[Request]) -> dict[str, list[float]]:
    return {"ttft_ms": [1000 * r.ttft for r in requests if r.ttft is not None],
            "tpot_ms": [1000 * r.tpot for r in requests if r.tpot is not None],
            "e2el_ms": [1000 * r.e2el for r in requests if r.e2el is not None]}


# --- the HTTP overhead ---------------------------------------------------------------------


def http_overhead(run: LoadRun) -> dict[str, Any]:
    """Client-side minus server-side mean TTFT and E2E over the run (``method`` says how, or
    why it could not be measured)."""
    done = run.completed
    client_ttft = 1000 * float(np.mean([r.ttft_s for r in done])) if done else None
    client_e2e = 1000 * float(np.mean([r.e2el_s for r in done])) if done else None
    server: Optional[ServerLatency] = server_latency(run.metrics_before, run.metrics_after)
    out: dict[str, Any] = {"client_mean_ttft_ms": client_ttft, "client_mean_e2el_ms": client_e2e}
    if server is None or client_ttft is None:
        why = "the server has no /metrics page" if run.metrics_before is None else \
            "the server's /metrics has no TTFT histogram (vllm:time_to_first_token_seconds)"
        out.update({"method": f"not measured: {why}", "ttft_ms": None, "e2el_ms": None})
        return out
    out["method"] = (f"client mean minus the server's own mean (/metrics histograms, "
                     f"{server.num_requests} requests finished during the run)")
    out["server_requests"] = server.num_requests
    out["server_mean_ttft_ms"] = None if server.mean_ttft_s is None else 1000 * server.mean_ttft_s
    out["server_mean_e2el_ms"] = None if server.mean_e2el_s is None else 1000 * server.mean_e2el_s
    out["ttft_ms"] = None if server.mean_ttft_s is None else client_ttft - 1000 * server.mean_ttft_s
    out["e2el_ms"] = None if server.mean_e2el_s is None or client_e2e is None else client_e2e - 1000 * server.mean_e2el_s
    if server.num_requests != len(done):
        out["caution"] = (f"the server counted {server.num_requests} finished requests and the client "
                          f"{len(done)}: other traffic, or requests still finishing at the scrape")
    return out


def modelled_front_end(config: dict, requests: Sequence[Request]) -> dict[str, Any]:
    """What the simulator put in place of the HTTP path (``engine.frontend``;
    ``sim.catalog.frontends``): its terms and their mean over these requests' prompts, to set
    beside the measured overhead. The queueing at the API server under load comes on top."""
    from sim.scenario import Scenario

    fe = Scenario.from_dict(config).front_end
    mean_prompt = float(np.mean([r.prompt_len for r in requests])) if requests else 0.0
    return {"modelled": fe.summary(), "modelled_ttft_ms": 1000 * fe.ingress_s(0) + 1000 * fe.tokenize_s_per_token * mean_prompt,
            "modelled_mean_prompt": mean_prompt}


#: ``workload.prompt_text`` for each form of prompt ``kvplan loadgen`` sends
#: (``calibration.loadgen_prompts``): token ids are not tokenised; text made from ids with the
#: server's tokenizer is synthetic text; common English words tokenise as prose does.
LOADGEN_PROMPT_TEXT = {"token-ids": "token_ids", "text-tokenizer": "synthetic", "text-words": "natural"}


def with_prompt_text(config: dict, prompt_kind: str) -> tuple[dict, str]:
    """``config`` (a built one) with the workload's prompt text set to what the load generator
    sent (the server's tokenising cost follows it), and a note saying so."""
    text = LOADGEN_PROMPT_TEXT.get(prompt_kind, "natural")
    out = {**config, "workload": {**config["workload"], "prompt_text": text}}
    return out, f"prompts sent as {prompt_kind}: the front end tokenises them as workload.prompt_text {text}"


# --- the command's work --------------------------------------------------------------------


def validate_endpoint(run: LoadRun, workload: Sequence[Request], bench: Path, out: Path, *,
                      config: dict, notes: Sequence[str] = (), workload_description: str = "",
                      seed: int = 0, server_trace: Optional[Path] = None) -> dict:
    """Simulate ``run``'s requests under ``config`` and write ``out/validation.json`` (and the
    simulation in ``out/sim``); returns the record as ``load_validation`` reads it.

    ``server_trace``: the step trace the server (kvplan serve --trace) wrote during the run; the
    profile is then scored on the server's own steps (``source.step_error`` and
    ``source.server_steps``), as the in-process validation scores it on the engine's. That
    separates the two reasons the simulator can be off over HTTP: the engine running at another
    speed inside the server than the profile says (sharing the CPU with the HTTP stack and the
    client), and the HTTP path itself (``http_overhead``)."""
    from calibration.real_runs import read_vllm_bench
    from calibration.validate_real import real_overloaded
    from sim.api import simulate

    done = [r for r in run.results if r.success]
    if not done:
        raise ConfigError(f"validate --endpoint: no request completed ({_first_error(run)}): nothing to compare")
    real_run = read_vllm_bench(bench)  # the saved run, read back as validate --real reads it
    replay = replay_requests(run, workload)
    config, note = with_prompt_text(config, run.prompt_kind)
    notes = list(notes) + [note]
    t0 = time.perf_counter()
    result = simulate(config, requests=replay, seed=seed)
    sim_seconds = time.perf_counter() - t0
    predicted = {r.request_id: r for r in result.requests}
    measured = [measured_request(r) for r in done]
    twins = [as_delivered(predicted[m.request_id], result.stream_interval) for m in measured]
    real, pred = numbers(measured), numbers(twins)
    metrics = [{"name": k, "real": real[k], "predicted": pred[k]} for k in real
               if _finite(real[k]) and _finite(pred.get(k))]
    overhead = http_overhead(run)
    overhead.update(modelled_front_end(result.config, twins))
    s = result.summary
    cm = s.get("cost_model") or {}
    hardware, dtype = result.config["hardware"], result.config["dtype"]
    if result.config["cost_model"].get("profile"):  # the profile's machine, not the planner's GPU
        from sim.pricing.profile_file import load_profile

        prof = load_profile(result.config["cost_model"]["profile"])
        hardware, dtype = prof.hardware, prof.dtype
    source = {
        "kind": "endpoint", "endpoint": run.target.base_url, "endpoint_type": run.target.endpoint_type,
        "served_model": run.target.model, "model": result.config["model"],
        "hardware": hardware, "dtype": dtype,
        "pricer": cm.get("source") or ("profile" if result.config["cost_model"].get("profile") else "roofline"),
        "profile": result.config["cost_model"].get("profile"),
        "bench": str(bench), "workload": workload_description,
        "requests": {"planned": run.num_planned, "sent": len(run.results), "completed": len(done),
                     "failed": len(run.results) - len(done)},
        "prompts": run.prompt_kind, "extensions": list(run.target.extensions),
        "overloaded": f"real {'yes' if real_overloaded(real_run.measured[0]) else 'no'}, "
                      f"predicted {'yes' if (s.get('overload') or {}).get('overloaded') else 'no'}",
        "http_overhead": overhead,
        "max_send_lag_ms": 1000 * run.max_send_lag_s,
        "num_gpu_blocks": s.get("num_gpu_blocks"),
        "sim_seconds": round(sim_seconds, 2),
        "notes": list(run.notes) + list(notes),
    }
    if s.get("warnings"):
        source["warnings"] = s["warnings"]
    if server_trace is not None and result.config["cost_model"].get("profile"):
        source.update(server_step_error(server_trace, prof))
    out.mkdir(parents=True, exist_ok=True)
    result.write(out / "sim")
    samples = {k: {"real": v, "predicted": samples_of(twins)[k]} for k, v in samples_of(measured).items()}
    path = write_validation(out / "validation.json", metrics, source, samples)
    return load_validation(path)


def server_step_error(trace: Path, prof: Any) -> dict[str, Any]:
    """The profile on the steps the server's engine ran (``kvplan serve --trace``): the line
    the in-process validation prints (``step_error``) and its numbers (``server_steps``)."""
    from calibration.fit import read_trace
    from calibration.validate import profile_error_numbers, profile_error_text

    steps = read_trace(trace)
    numbers_ = profile_error_numbers(steps, prof)
    text = profile_error_text(numbers_).replace("the replay's own", "the server's own")
    return {"step_error": text, "server_steps": {"trace": str(trace), **numbers_}}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _first_error(run: LoadRun) -> str:
    errors = [r.error for r in run.results if r.error]
    return errors[0] if errors else "none was sent"


def _nest(flat: dict[str, Any]) -> dict:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out
