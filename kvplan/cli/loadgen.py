"""``kvplan loadgen`` and ``kvplan validate --endpoint``: drive a running OpenAI-compatible server
with a kvplan workload, save the run as ``vllm bench serve`` does, and score the simulator on it.

The client, the file formats and the comparison live in ``calibration`` (``loadgen``,
``bench_format``, ``validate_endpoint``); this module reads the flags and the workload, and prints.
Nothing heavy is imported before a command runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console

from kvplan.cli.common import CONFIG_HELP, progress_bar, require

ENDPOINT_HELP = "The server's OpenAI API base, e.g. http://127.0.0.1:8000/v1 (/v1 is added when missing)."
PROMPTS_HELP = ("auto (token ids where the server takes them, else text), token-ids (exact lengths; "
                "completions only) or text (sized with --tokenizer or the served model's tokenizer "
                "when it loads locally, else common words of about one token each).")
#: vLLM's burstiness for a constant rate is infinite; JSON has no infinity.
CONSTANT_BURSTINESS = 1e6


@dataclass
class Workload:
    """The requests to send and how the bench file describes their arrivals."""

    requests: list
    request_rate: float
    burstiness: float
    description: str
    #: A closed loop or an in-flight cap (``calibration.loadgen.Clients``); None: open loop.
    clients: Any = None


def load_workload(config: Optional[Path], overrides: List[str], seed: Optional[int],
                  num_requests: Optional[int], concurrency: Optional[int] = None) -> Workload:
    """The scenario's ``workload`` section (defaults <- ``config`` <- ``--set``) as requests in
    arrival order, at most ``num_requests`` of them, and how the client sends them:
    ``concurrency`` (``--concurrency``) closed-loop clients, else the workload's own closed loop
    (``arrival.process: closed``) or cap (``max_concurrency``), else open loop."""
    from calibration.loadgen import Clients
    from sim.config import build_config
    from sim.workload import build_requests, describe, parse_workload

    cfg = build_config(config, overrides, seed)
    work = cfg["workload"]
    reqs = list(build_requests(work, cfg["seed"], base_dir=config.parent if config else None))
    if num_requests is not None:
        reqs = reqs[:num_requests]
    if not reqs:
        from sim.errors import ConfigError

        raise ConfigError("the workload has no requests")
    arrival = work.get("arrival") or {}
    process = arrival.get("process") or ("trace" if work.get("trace") else "poisson")
    spec = parse_workload(work)
    clients = None
    if concurrency is not None or process == "closed":  # --concurrency wins over the workload's
        clients = Clients(concurrency if concurrency is not None else int(spec.arrival.concurrency or 1),
                          closed=True, think_s=spec.arrival.think_time_s)
    elif spec.max_concurrency is not None:
        clients = Clients(spec.max_concurrency, closed=False)
    rate = arrival.get("rate")
    if clients is not None and clients.closed:  # vllm bench's --request-rate inf --max-concurrency N
        rate, burst = math.inf, 1.0
    elif process == "trace" or rate is None:
        span = reqs[-1].arrival_time - reqs[0].arrival_time
        rate, burst = (len(reqs) / span if span > 0 else math.inf), 1.0
    else:
        rate = float(rate)
        burst = {"poisson": 1.0, "constant": CONSTANT_BURSTINESS}.get(
            process, 1.0 / max(float(arrival.get("cv") or 1.0), 1e-3) ** 2)
    d = describe(reqs)
    if clients is not None and clients.closed:
        sending = f"closed loop of {clients.limit} clients"
    else:
        sending = f"{process} arrivals over {d['duration_s']:.1f} s"
        if clients is not None:
            sending += f" (at most {clients.limit} in flight)"
    text = (f"{sending}, input mean {d['input_len']['mean']:.0f} / "
            f"output mean {d['output_len']['mean']:.0f} tokens")
    if d["prefix_reuse_fraction"]:
        text += f", {d['prefix_reuse_fraction']:.0%} of prompt blocks shared"
    return Workload(reqs, rate, burst, f"{len(reqs)} requests, {text}", clients)


def loadgen(
    endpoint: str = typer.Option(..., "--endpoint", help=ENDPOINT_HELP),
    out: Path = typer.Option(..., "--out", help="Folder for bench.json (vllm bench serve --save-result --save-detailed format) and trace.csv (a kvplan trace)."),
    config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP + " Its workload section is sent."),
    set_: List[str] = typer.Option([], "--set", help="Workload override, e.g. --set workload.arrival.rate=2 or --set workload.trace=t.csv (repeatable)."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="Send at most this many requests (default: the whole workload)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Closed loop: N clients, each sending its next request when its last one finished (arrival times unused; as vllm bench serve --max-concurrency N --request-rate inf). Default: the workload's own (workload.arrival.process closed, or workload.max_concurrency as a cap), else open loop."),
    duration_limit: float = typer.Option(600.0, "--duration-limit", help="Send nothing after this many seconds; requests still in flight then are cancelled and reported."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name to request (default: the server's first /v1/models entry)."),
    endpoint_type: str = typer.Option("completions", "--endpoint-type", help="completions (/v1/completions) or chat (/v1/chat/completions)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)."),
    prompts: str = typer.Option("auto", "--prompts", help=PROMPTS_HELP),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="A local tokenizer (folder or cached Hugging Face name) to size text prompts."),
    seed: Optional[int] = typer.Option(None, "--seed", help="The workload's random seed (and the prompts')."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    as_json: bool = typer.Option(False, "--json", help="Print bench.json's aggregate fields as JSON."),
) -> dict:
    """Drive an OpenAI-compatible server with a kvplan workload (open loop, or closed with
    --concurrency; streaming); save the run as vllm bench serve's JSON and as a kvplan trace."""
    check_loadgen_flags(out, num_requests, duration_limit, endpoint_type, prompts)
    require("--concurrency", concurrency, concurrency is None or concurrency >= 1, "an integer >= 1")
    work = load_workload(config, set_, seed, num_requests, concurrency)
    run = drive(endpoint, work, model=model, endpoint_type=endpoint_type, api_key=api_key,
                duration_limit=duration_limit, prompts=prompts, tokenizer=tokenizer,
                seed=seed or 0, progress=progress and not as_json, clients=work.clients)
    doc = save_run(run, work, out, tokenizer)
    if as_json:
        typer.echo(json.dumps({k: v for k, v in doc.items() if not isinstance(v, (list, dict))}, indent=2))
    else:
        print_run(run, doc)
        Console().print(f"wrote {out / 'bench.json'}, {out / 'trace.csv'}", highlight=False)
    return doc


def check_loadgen_flags(out: Path, num_requests: Optional[int], duration_limit: float,
                        endpoint_type: str, prompts: str) -> None:
    """The flags, checked before any request (each error names its flag)."""
    from calibration.loadgen import ENDPOINT_TYPES
    from sim.errors import ConfigError

    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise ConfigError("the load generator needs aiohttp: pip install 'kvplan[serve]'") from None
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, expected a folder (bench.json and trace.csv are written into it)")
    require("--num-requests", num_requests, num_requests is None or num_requests >= 1, "an integer >= 1")
    require("--duration-limit", duration_limit, 0 < duration_limit < math.inf, "a positive number of seconds")
    require("--endpoint-type", endpoint_type, endpoint_type in ENDPOINT_TYPES, "completions or chat")
    require("--prompts", prompts, prompts in ("auto", "token-ids", "text"), "auto, token-ids or text")


def drive(endpoint: str, work: Workload, *, model: Optional[str], endpoint_type: str,
          api_key: Optional[str], duration_limit: float, prompts: str, tokenizer: Optional[str],
          seed: int, progress: bool, clients: Any = None):
    """``calibration.loadgen.run_load`` with a progress bar of requests answered."""
    from calibration.loadgen import run_load

    bar = progress_bar(len(work.requests), "requests", "req", progress)
    try:
        return run_load(endpoint, work.requests, model=model, endpoint_type=endpoint_type, api_key=api_key,
                        duration_limit=duration_limit, prompt_kind=prompts, tokenizer=tokenizer, seed=seed,
                        on_done=(lambda _r: bar.update(1)) if bar is not None else None, clients=clients)
    finally:
        if bar is not None:
            bar.close()


def save_run(run: Any, work: Workload, out: Path, tokenizer: Optional[str] = None) -> dict:
    """``out/bench.json`` and ``out/trace.csv``; returns the bench document."""
    from calibration.bench_format import bench_result, write_bench, write_trace

    meta: dict[str, Any] = {}
    if run.target.max_model_len:
        meta["max_model_len"] = run.target.max_model_len
    meta["kvplan"] = {"workload": work.description, "prompts": run.prompt_kind,
                      "extensions": list(run.target.extensions), "notes": run.notes}
    doc = bench_result(run, request_rate=work.request_rate, burstiness=work.burstiness, metadata=meta,
                       tokenizer_id=tokenizer)
    write_bench(out / "bench.json", doc)
    write_trace(out / "trace.csv", run)
    return doc


def print_run(run: Any, doc: dict) -> None:
    """vllm bench serve's summary, then the notes and the first errors."""
    from calibration.bench_format import print_summary

    con = Console()
    con.print(f"{run.target.model} at {run.target.url}: {len(run.results)} requests sent "
              f"({run.prompt_kind} prompts), latest send {1000 * run.max_send_lag_s:.1f} ms after its arrival time",
              highlight=False)
    print_summary(doc, lambda line: con.print(line, highlight=False, markup=False))
    for note in run.notes:
        con.print(f"note: {note}", highlight=False, markup=False)
    errors = [r for r in run.results if r.error]
    if errors:
        kinds: dict[str, int] = {}
        for r in errors:
            kinds[r.error] = kinds.get(r.error, 0) + 1
        for text, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:3]:
            con.print(f"failed: {n} request{'s' if n > 1 else ''}: {text}", highlight=False, markup=False)


# --- validate --endpoint --------------------------------------------------------------------


def validate_endpoint(endpoint: str, out: Path, *, profile: Optional[Path], hardware: Optional[str],
                      config: Optional[Path], overrides: List[str], source: Optional[str], sim_model: Optional[str],
                      model: Optional[str], rate: float, num_requests: int, scale: float, seed: int,
                      duration_limit: float, api_key: Optional[str], endpoint_type: str, policy: str,
                      max_num_seqs: int, max_num_batched_tokens: Optional[int], progress: bool,
                      as_json: bool, server_trace: Optional[Path] = None) -> dict:
    """``validate --endpoint``: loadgen, then the simulator on the same requests (``--profile``:
    kvplan's engine; ``--hardware``: the GPU cost model), then validation.json."""
    from calibration import validate_endpoint as ve
    from kvplan.cli.calibration import print_validation
    from sim.errors import ConfigError

    if (profile is None) == (hardware is None):
        raise ConfigError("--endpoint: pass --profile (a kvplan calibrate profile of the server's engine, "
                          "for kvplan serve) or --hardware (the GPU cost model, for a vLLM server), not both")
    check_loadgen_flags(out, num_requests, duration_limit, endpoint_type, "auto")
    require("--rate", rate, 0 < rate < math.inf, "a positive number of requests/s")
    require("--scale", scale, 0 < scale < math.inf, "a positive finite number")
    workload_sets = [o for o in overrides if o.strip().startswith("workload.")]
    sim_sets = [o for o in overrides if o not in workload_sets] + _engine_sets(policy, max_num_seqs, max_num_batched_tokens, overrides)
    if config is not None or workload_sets:
        work = load_workload(config, workload_sets, seed, num_requests)
        if work.clients is not None:  # its replay sends the measured requests at their send times
            raise ConfigError("--endpoint: a closed-loop or capped workload (workload.arrival.process "
                              "closed, workload.max_concurrency) is not validated here yet: run kvplan "
                              "loadgen, then kvplan validate --real on its bench.json")
    else:
        reqs = ve.validation_workload(num_requests, rate, scale, seed)
        work = Workload(reqs, rate, 1.0, f"{num_requests} requests, Poisson {rate:g} req/s, ShareGPT-like "
                                         f"lengths x {scale:g} (kvplan validate's workload), seed {seed}")
    if server_trace is not None and profile is None:
        raise ConfigError("--server-trace: needs --profile (the trace's steps are priced with it)")
    if server_trace is not None and not server_trace.is_file():
        raise ConfigError(f"--server-trace {server_trace}: no such file (start kvplan serve with --trace {server_trace})")
    if profile is not None:
        from sim.pricing.profile_file import load_profile

        load_profile(profile)  # a bad profile fails before any request is sent
    run = drive(endpoint, work, model=model, endpoint_type=endpoint_type, api_key=api_key,
                duration_limit=duration_limit, prompts="auto", tokenizer=None, seed=seed,
                progress=progress and not as_json)
    save_run(run, work, out)
    bench = out / "bench.json"
    if profile is not None:
        cfg, notes = ve.profile_config(profile, run, sim_sets, sim_model)
    else:
        cfg, notes = ve.hardware_config(bench, run, hardware, sim_sets, sim_model, source)  # type: ignore[arg-type]
    record = ve.validate_endpoint(run, work.requests, bench, out, config=cfg, notes=notes,
                                  workload_description=work.description, seed=seed,
                                  server_trace=server_trace)
    for warning in record["source"].get("warnings", []):
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps({"metrics": record["metrics"], "http_overhead": record["source"]["http_overhead"]},
                              indent=2))
        return record
    print_validation(record)
    print_overhead(record["source"]["http_overhead"])
    for note in record["source"].get("notes", []):
        typer.echo(f"note: {note}")
    Console().print(f"wrote {out / 'validation.json'}, bench.json, trace.csv, sim/", highlight=False)
    return record


def _engine_sets(policy: str, max_num_seqs: int, max_num_batched_tokens: Optional[int],
                 overrides: List[str]) -> List[str]:
    """validate's engine flags as scenario overrides, where they differ from the defaults and
    ``--set`` does not name the key."""
    named = {o.split("=", 1)[0].strip() for o in overrides}
    sets = []
    for key, value, default in (("scheduler.policy", policy, "chunked"), ("scheduler.max_num_seqs", max_num_seqs, 256),
                                ("scheduler.max_num_batched_tokens", max_num_batched_tokens, None)):
        if value != default and key not in named:
            sets.append(f"{key}={value}")
    return sets


def print_overhead(overhead: dict) -> None:
    """How much of the client's TTFT the server did not see, and what the simulator put in its
    place (the front-end model's terms)."""
    if overhead.get("ttft_ms") is None:
        typer.echo(f"HTTP overhead: {overhead['method']}")
    else:
        e2e = overhead.get("e2el_ms")
        typer.echo(f"HTTP overhead: {overhead['ttft_ms']:.1f} ms of TTFT (client mean {overhead['client_mean_ttft_ms']:.1f} ms, "
                   f"server {overhead['server_mean_ttft_ms']:.1f} ms)"
                   + ("" if e2e is None else f", {e2e:.1f} ms of E2E") + f"; {overhead['method']}")
    fe = overhead.get("modelled")
    if fe is not None:
        typer.echo(f"Front end simulated ({fe['name']}): {overhead['modelled_ttft_ms']:.2f} ms of TTFT before queueing "
                   f"(request {fe['request_ms']:g} ms + tokenise {fe['tokenize_us_per_token']:g} us x "
                   f"{overhead['modelled_mean_prompt']:.0f} prompt tokens), stream {fe['stream_us_per_chunk']:g} us "
                   f"per chunk; engine.frontend_* keys change them")
    if overhead.get("caution"):
        typer.echo(f"caution: {overhead['caution']}")
