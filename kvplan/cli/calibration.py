"""``kvplan calibrate`` and ``kvplan validate``: fit a step-cost profile of this machine, and
run one workload through the real engine and the simulator side by side.

Importing this module imports no torch (``calibrate --trace`` fits without it); profiling and
validation import the runtime when they run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from kvplan.cli.common import MODEL_HELP, check_engine_flags, check_out_file, need_runtime, progress_bar, require
from sim.errors import ConfigError

BUSY_SHARE = 0.85  # below this CPU share the machine was busy while profiling
#: A validation runs every request through the real engine: more than this is a typo.
MAX_VALIDATION_REQUESTS = 100_000
UNITS = {"intercept": ("ms", 1e3), "prefill_attention_work": ("ns / pair", 1e9),
         "gemm_table_body": ("x measured table", 1.0), "gemm_table_lm_head": ("x measured table", 1.0)}


def calibrate(
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    dtype: str = typer.Option("auto", "--dtype", help="auto (float32 on CPU; on CUDA bfloat16 where native, else float16), float32, float16, bfloat16."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    out: Optional[Path] = typer.Option(None, "--out", help="Profile file to write (default calibration/profiles/<model>_<dtype>_<device>.json)."),
    quick: bool = typer.Option(False, "--quick", help="A small grid (~40 steps plus the GEMM tables: ~40 s for SmolLM2 on an idle 2-core CPU)."),
    trace: List[Path] = typer.Option([], "--trace", help="Fit from these runtime step traces (JSONL) instead of profiling (repeatable)."),
    warmup_steps: int = typer.Option(4, "--warmup-steps", help="With --trace: steps dropped from the start of each file."),
    block_size: int = typer.Option(16, "--block-size"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads (default: torch's)."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="Hardware name to record (default: this machine's CPU or GPU)."),
    save_trace: Optional[Path] = typer.Option(None, "--save-trace", help="Also write the profiling step trace (JSONL) here, to refit later with --trace."),
    seed: int = typer.Option(0, "--seed", help="Random prompts and the held-out split."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    as_json: bool = typer.Option(False, "--json", help="Print the profile as JSON."),
    real: List[Path] = typer.Option(
        [], "--real",
        help="Fit step_scale and request_overhead_ms to benchmark runs measured outside kvplan "
             "instead (repeatable): run folders/files as validate --real reads them, or folders of "
             "them. No torch needed; the error is reported on runs left out of the fit."),
    stage_seconds: Optional[float] = typer.Option(
        0.0, "--stage-seconds",
        help="With --real: simulate at most this many seconds of each load stage (default 0: whole "
             "stages; shorter is quicker but biased: a shortened stage starts with a cold prefix "
             "cache for a larger share of its requests)."),
) -> Path:
    """Profile the real engine on a grid of batch shapes (or read traces); fit a step-cost profile.
    With --real: fit the step scale and per-request overhead to measured benchmark runs."""
    from calibration.fit import Samples, fit, read_trace, samples_from_records
    from sim.pricing.machine import cpu_name
    from sim.pricing.profile_file import Profile, software_versions

    check_out_file(out)
    if real:
        return calibrate_real_runs(real, out, hardware=hardware, seed=seed, stage_seconds=stage_seconds,
                                   progress=progress and not as_json, as_json=as_json)
    check_out_file(save_trace, "--save-trace")
    if warmup_steps < 0:
        raise ConfigError(f"--warmup-steps must be >= 0, got {warmup_steps}")
    if block_size < 1:
        raise ConfigError(f"--block-size must be >= 1, got {block_size}")
    if trace:
        samples = Samples.concat([samples_from_records(read_trace(p), warmup_steps) for p in trace])
        meta: dict[str, Any] = dict(model=model or "unknown", model_spec=model, catalog_model=None,
                                    device="cpu" if device == "auto" else device,
                                    hardware=hardware or cpu_name(), dtype=dtype, block_size=block_size,
                                    num_threads=threads)  # Profile's keyword arguments
        source = {"kind": "trace", "files": [str(p) for p in trace], "warmup_steps": warmup_steps}
        tables = None  # a trace has steps, not the model's GEMMs
    else:
        need_runtime("calibrate")
        from calibration.profiler import GRIDS, profile_engine

        grid = GRIDS["quick" if quick else "full"]
        # the warm-up, each case, the two GEMM tables, each served replay
        bar = progress_bar(len(grid.cases()) + 3 + len(grid.served_loads), "profiling", "case", progress and not as_json)
        try:
            run = profile_engine(model, grid, dtype=dtype, device=device, block_size=block_size,
                                 num_threads=threads, seed=seed,
                                 progress=(lambda name: bar.update(1)) if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()
        samples, tables = run.samples, run.gemm_tables
        meta = dict(model=run.model, model_spec=model or "smollm2", catalog_model=run.catalog_model,
                    device=run.device, hardware=hardware or run.hardware, dtype=run.dtype,
                    block_size=run.block_size, num_threads=run.num_threads, machine=run.machine)
        source = {"kind": "grid", "grid": grid.name, "num_cases": len(grid.cases()),
                  "cpu_share": run.cpu_share}
        if save_trace is not None:
            save_trace.parent.mkdir(parents=True, exist_ok=True)
            with open(save_trace, "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in run.records)
            source["trace"] = str(save_trace)
    result = fit(samples, seed=seed, tables=tables)
    prof = Profile(features=result.features, coefficients=result.coefficients, gemm_knee=result.knee,
                   fit=result.error, source=source, software=software_versions(),
                   gemm_tables=tables, **meta)
    path = prof.save(out or default_profile_path(prof))
    if as_json:
        typer.echo(json.dumps(prof.to_dict(), indent=2))
    else:
        _print_profile(prof, path)
    return path


def calibrate_real_runs(paths: List[Path], out: Optional[Path], *, hardware: Optional[str], seed: int,
                        stage_seconds: Optional[float], progress: bool, as_json: bool) -> Path:
    """``calibrate --real``: fit (step_scale, request_overhead_ms) to measured runs
    (``calibration.real_fit``), print the held-out errors, write the profile."""
    from calibration.real_fit import calibrate_real

    if stage_seconds is not None:
        require("--stage-seconds", stage_seconds, 0 <= stage_seconds < math.inf,
                "a number of seconds >= 0 (0: whole stages)")
        stage_seconds = stage_seconds or None
    say = (lambda name, scale: typer.echo(f"simulating {name} at step scale {scale:g}", err=True)) \
        if progress else None
    result = calibrate_real(paths, hardware=hardware, seed=seed, stage_seconds=stage_seconds,
                            on_skip=lambda msg: typer.echo(msg, err=True), on_simulation=say)
    prof = result.to_profile()
    path = prof.save(out or Path("calibration") / "profiles" / f"{result.hardware}_real.json")
    if as_json:
        typer.echo(json.dumps(prof.to_dict(), indent=2))
    else:
        print_real_fit(result, path)
    return path


def print_real_fit(result, path: Path) -> None:
    """The fitted constants and the held-out error per model beside the uncalibrated pricer's."""
    from calibration.real_fit import REPORT_METRICS

    con = Console()
    f = result.fit
    con.print(f"{result.base} pricer x step_scale {f.step_scale:.4g}, + {f.request_overhead_ms:.3g} ms "
              f"per request (fitted to {f.num_stages} stages of {len(result.runs)} runs on {result.hardware})")
    how = {"model": "leave-one-model-out", "run": "leave-one-run-out", "none": "in-sample (one run)"}[result.held_out_by]
    t = Table(title=f"mean |error| per stage, {how} (calibrated) vs uncalibrated", title_justify="left")
    t.add_column("model")
    t.add_column("stages", justify="right")
    for m in ("E2E mean", "TTFT mean", "TPOT"):
        t.add_column(m, justify="right")
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    for model in result.models + [None]:
        held, unc = result.mape("heldout", model), result.mape("uncalibrated", model)
        n = sum(1 for s in result.stages if model is None or s["model"] == model)
        t.add_row(model or "all", str(n), *(f"{pct(held[m])} (was {pct(unc[m])})" for m in REPORT_METRICS))
    con.print(t)
    for fold in result.folds:
        con.print(f"  without {fold.held_out}: step_scale {fold.fit.step_scale:.4g}, "
                  f"+ {fold.fit.request_overhead_ms:.3g} ms")
    for note in result.notes:
        con.print(f"note: {note}")
    con.print(f"wrote {path} (use it: --set cost_model.profile={path})")


def default_profile_path(prof) -> Path:
    name = prof.catalog_model or re.sub(r"[^a-z0-9.]+", "-", prof.model.lower()).strip("-")
    dt = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(prof.dtype, prof.dtype)
    return Path("calibration") / "profiles" / f"{name}_{dt}_{prof.device}.json"


def _print_profile(prof, path: Path) -> None:
    con = Console()
    t = Table(title=f"step cost = sum of coefficient x feature ({prof.model}, {prof.dtype}, {prof.hardware})",
              title_justify="left")
    t.add_column("feature")
    t.add_column("coefficient", justify="right")
    t.add_column("unit")
    for f in prof.features:
        unit, mult = UNITS.get(f, ("us / unit", 1e6))
        name = f"gemm_rows_over_{prof.gemm_knee:g}" if f == "gemm_rows_over_knee" else f
        t.add_row(name, f"{prof.coefficients[f] * mult:.4g}", unit)
    con.print(t)
    if prof.gemm_tables is not None:
        g = prof.gemm_tables
        row = lambda tab, rs: ", ".join(f"{r} rows {1e3 * tab.value(r):.2f} ms" for r in rs if r <= tab.rows[-1])
        con.print(f"measured GEMM tables: decoder layers {row(g.body, (1, 2, 3, 4, 8, 64))}; "
                  f"LM head {row(g.lm_head, (1, 2, 3, 4, 8))}")
    fit = prof.fit
    con.print(f"fit error on {fit['num_heldout']} held-out steps (of {fit['num_samples']}): "
              f"MAPE {100 * fit['heldout_mape']:.1f}%, p90 {100 * fit['heldout_p90_ape']:.1f}%, "
              f"max {100 * fit['heldout_max_ape']:.1f}% (training MAPE {100 * fit['train_mape']:.1f}%)")
    share = prof.source.get("cpu_share")
    # Only a CPU engine's share says whether other jobs took its cores: an engine on a GPU
    # spends most of a step waiting for the device (one Python thread of 16 reads as 6%).
    if share is not None and share < BUSY_SHARE and prof.device == "cpu":
        con.print(f"[yellow]warning:[/yellow] the process got {100 * share:.0f}% of its "
                  f"{prof.num_threads} threads' CPU time: other jobs were running, and the timings "
                  f"include their interference; profile an idle machine for a clean fit")
    con.print(f"wrote {path}")


def validate(
    profile: Optional[Path] = typer.Option(None, "--profile", help="Profile file from kvplan calibrate (required without --real)."),
    out: Path = typer.Option(..., "--out", help="Folder for validation.json, runtime_steps.jsonl and sim/."),
    real: List[Path] = typer.Option(
        [], "--real",
        help="Score the simulator against a run measured outside kvplan instead (repeatable): an "
             "inference-perf run folder, a vllm bench serve --save-result JSON or a GuideLLM report "
             "JSON. No runtime needed; server settings come from the run, the rest from --set."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="With --real: the GPU (default: from the run or its folder name). With --endpoint: the GPU the server runs on (prices steps with the GPU cost model)."),
    set_: List[str] = typer.Option([], "--set", help="With --real or --endpoint: scenario overrides key=value (repeatable; with --endpoint, workload.* keys shape the requests sent)."),
    stage_seconds: Optional[float] = typer.Option(None, "--stage-seconds", help="With --real: simulate at most this many seconds of each load stage (quick check)."),
    source: Optional[str] = typer.Option(None, "--source", help="With --real or --endpoint --hardware: step pricer (cost_model.source): auto, roofline, operator_tables or profile."),
    rate: float = typer.Option(2.0, "--rate", help="Poisson arrival rate (req/s)."),
    num_requests: int = typer.Option(64, "--num-requests"),
    scale: float = typer.Option(0.125, "--scale", help="Multiplies ShareGPT lengths (161 in / 338 out)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Default: the profile's model."),
    sim_model: Optional[str] = typer.Option(None, "--sim-model", help="Simulator catalog model (default: matched by shape)."),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens"),
    kv_cache_mib: Optional[float] = typer.Option(None, "--kv-cache-mib", help="KV pool (default 512 MiB on CPU)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Default: the profile's."),
    seed: int = typer.Option(0, "--seed"),
    policy: str = typer.Option("chunked", "--policy", help="Scheduler both executors run: chunked, vllm_v0, orca or static."),
    num_speculative_tokens: int = typer.Option(
        0, "--num-speculative-tokens", "-k",
        help="Speculative decoding by n-gram lookup in the engine; the simulator gets the acceptance "
             "table and draft availability the engine measured."),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    as_json: bool = typer.Option(False, "--json", help="Print validation.json's metrics as JSON."),
    endpoint: Optional[str] = typer.Option(
        None, "--endpoint",
        help="Score the simulator against a running OpenAI-compatible server instead (e.g. "
             "http://127.0.0.1:8000/v1): kvplan loadgen sends the workload (--rate, --num-requests, "
             "--scale, or --config/--set workload.*), the simulator replays the same requests with "
             "--profile (kvplan serve) or the GPU cost model on --hardware (vLLM); the HTTP overhead "
             "is measured from the server's /metrics. --model: the served model to request."),
    config: Optional[Path] = typer.Option(None, "--config", help="With --endpoint: a scenario YAML whose workload section is sent."),
    duration_limit: float = typer.Option(600.0, "--duration-limit", help="With --endpoint: send nothing after this many seconds."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="OPENAI_API_KEY", help="With --endpoint: sent as a Bearer token (default: $OPENAI_API_KEY)."),
    endpoint_type: str = typer.Option("completions", "--endpoint-type", help="With --endpoint: completions or chat."),
    server_trace: Optional[Path] = typer.Option(
        None, "--server-trace",
        help="With --endpoint --profile: the step trace kvplan serve --trace wrote during this run; the "
             "profile is scored on the server's own steps (how fast the engine ran inside the server)."),
) -> dict:
    """One workload through the real engine and the simulator; errors side by side in validation.json.
    With --real: the simulator against measured benchmark runs, stage by stage. With --endpoint:
    against a live server, the same requests on both sides."""
    if real:
        return validate_real_runs(real, out, hardware=hardware, model=model, overrides=set_, seed=seed,
                                  stage_seconds=stage_seconds, source=source, as_json=as_json)
    if endpoint is not None:
        from kvplan.cli.loadgen import validate_endpoint

        require("--num-requests", num_requests, 1 <= num_requests <= MAX_VALIDATION_REQUESTS,
                f"an integer from 1 to {MAX_VALIDATION_REQUESTS:,}")
        return validate_endpoint(
            endpoint, out, profile=profile, hardware=hardware, config=config, overrides=set_, source=source,
            sim_model=sim_model, model=model, rate=rate, num_requests=num_requests, scale=scale, seed=seed,
            duration_limit=duration_limit, api_key=api_key, endpoint_type=endpoint_type, policy=policy,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            progress=progress, as_json=as_json, server_trace=server_trace)
    if server_trace is not None:
        raise ConfigError("--server-trace: only with --endpoint (the in-process validation records its own steps)")
    if profile is None:
        raise ConfigError("--profile: required (a profile file from kvplan calibrate), unless --real is given")
    from sim.pricing.profile_file import load_profile
    from calibration.validate import run_validation

    require("--rate", rate, 0 < rate < math.inf, "a positive number of requests/s")
    require("--num-requests", num_requests, 1 <= num_requests <= MAX_VALIDATION_REQUESTS,
            f"an integer from 1 to {MAX_VALIDATION_REQUESTS:,}")
    require("--scale", scale, 0 < scale < math.inf, "a positive finite number")
    from sim.config import POLICIES

    require("--policy", policy, policy in POLICIES, f"one of {', '.join(POLICIES)}")
    check_engine_flags(kv_cache_mib, max_num_seqs, max_num_batched_tokens, threads,
                       num_speculative_tokens)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, expected a folder (validation.json, "
                          f"runtime_steps.jsonl and sim/ are written into it)")
    load_profile(profile)  # a bad profile fails before the model loads
    need_runtime("validate")
    record = run_validation(
        profile, rate, num_requests, out, model=model, scale=scale, seed=seed,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        kv_cache_bytes=None if kv_cache_mib is None else int(kv_cache_mib * 2**20),
        num_threads=threads, sim_model=sim_model, progress=progress and not as_json,
        num_speculative_tokens=num_speculative_tokens, policy=policy)
    for warning in record["source"].get("warnings", []):
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(record["metrics"], indent=2))
    else:
        print_validation(record)
        Console().print(f"wrote {out}/validation.json, runtime_steps.jsonl, sim/")
    return record


def validate_real_runs(paths: List[Path], out: Path, *, hardware: Optional[str], model: Optional[str],
                       overrides: List[str], seed: int, stage_seconds: Optional[float],
                       source: Optional[str], as_json: bool) -> dict:
    """``validate --real``: each run simulated once, compared per load stage (calibration.validate_real)."""
    from calibration.validate_real import across_runs, validate_real
    from calibration.validation_file import load_validation

    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, expected a folder (validation.json is written into it)")
    if stage_seconds is not None:
        require("--stage-seconds", stage_seconds, 0 < stage_seconds < math.inf, "a positive number of seconds")
    results = validate_real(paths, out, hardware=hardware, model=model, overrides=overrides, seed=seed,
                            stage_seconds=stage_seconds, cost_source=source,
                            on_skip=lambda msg: typer.echo(msg, err=True))
    records = {}
    for cmp, path in results:
        record = load_validation(path)
        records[str(cmp.run.path)] = record
        if not as_json:
            print_validation(record)
            for st in record["source"]["stages"]:
                typer.echo(f"stage {st['index']} ({st['rate']:g} req/s, {st['num_requests']} requests): "
                           f"overloaded: {st['overloaded']}" + ("" if st["scored"] else " (not scored on latency)"))
            for note in record["source"].get("notes", []):
                typer.echo(f"note: {note}")
            typer.echo(f"simulated in {cmp.sim_seconds:.1f} s; wrote {path}")
    if len(records) > 1:
        summary = across_runs(list(records.values()))
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if not as_json:
            typer.echo(f"over {summary['runs']} runs (stages scored on latency):")
            for name, m in summary["metrics"].items():
                typer.echo(f"  {name:<20} MAPE {100 * m['mape']:5.1f}%  bias {100 * m['bias']:+6.1f}%  "
                           f"({m['stages']} stages)")
            typer.echo(f"wrote {out / 'summary.json'}")
    if as_json:
        typer.echo(json.dumps({k: r["metrics"] for k, r in records.items()}, indent=2))
    return records


def print_validation(record: dict) -> None:
    """The side-by-side table: real, predicted, signed relative error per metric."""
    src = record["source"]
    t = Table(title=f"validation: {src.get('model')} on {src.get('hardware')} ({src.get('dtype')})",
              title_justify="left", caption=src.get("workload"), caption_justify="left")
    t.add_column("metric")
    t.add_column("real", justify="right")
    t.add_column("predicted", justify="right")
    t.add_column("error", justify="right")
    for m in record["metrics"]:
        err = m["error"]
        style = "" if err is None else ("green" if abs(err) <= 0.1 else "yellow" if abs(err) <= 0.25 else "red")
        t.add_row(m["name"], f"{m['real']:,.2f}", f"{m['predicted']:,.2f}",
                  "-" if err is None else f"[{style}]{100 * err:+.1f}%[/{style}]")
    con = Console()
    con.print(t)
    if src.get("step_error"):
        con.print(src["step_error"])
    con.print(f"mean |error| over {len(record['metrics'])} metrics: {100 * (record['mape'] or 0):.1f}%")
