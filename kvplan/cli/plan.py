"""``kvplan plan``: the cheapest deployment that serves a workload inside an SLO at a target rate
(``analysis.plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kvplan.cli.common import CONFIG_HELP, SET_HELP, Bar, check_out_file, finish


def plan(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP),
    slo: str = typer.Option(..., "--slo", help="Latency SLO, e.g. ttft_p99_ms=500,tpot_p99_ms=50 (as kvplan capacity)."),
    target_rate: Optional[float] = typer.Option(None, "--target-rate", help="Requests/s the deployment must serve inside the SLO (open-loop arrivals)."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Instead of --target-rate: N clients in a closed loop (each sends its next request when its last finishes), as `vllm bench serve --max-concurrency` or genai-perf --concurrency."),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="GPUs to consider, comma-separated (default: every catalog GPU with measured operator tables installed)."),
    max_gpus: Optional[int] = typer.Option(None, "--max-gpus", help="The most GPUs one replica may use (TP x PP)."),
    price: List[str] = typer.Option([], "--price", help="$/GPU-hour override, e.g. --price h100-sxm=2.5 (repeatable, or a YAML/JSON file)."),
    engines: Optional[str] = typer.Option(None, "--engines", help="Serving engines to put against each other, comma-separated: vllm,sglang (the same as --search engine=vllm,sglang; default: the config's engine.name)."),
    search: List[str] = typer.Option([], "--search", help="Bound a knob: engine=vllm,sglang tp=1,2 pp=1,2 dp=1,2 (attention data parallelism, MoE with EP) ep=false,true weights=none,fp8,nvfp4 kv_dtype=auto,fp8 max_num_batched_tokens=default,2048,8192 max_num_seqs=default,256 prefix_caching=true,false speculative=0,3 pd=off,1:1,1:2 (P/D groups); or `full` (batch limits too). Repeatable."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    workers: int = typer.Option(0, "--workers", help="Processes for the screening runs and each full search (0: one per CPU, at most 4). The plan is the same for any number."),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or ray (the screening runs as Ray tasks)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the plan as JSON (input for `kvplan report`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON instead of tables."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress: candidates left, best so far."),
) -> None:
    """The cheapest deployment that serves --target-rate (or --concurrency clients) inside --slo.

    It searches GPU, serving engine (--engines vllm,sglang), TP/PP/DP/EP, weight and KV
    quantisation, batch limits, prefix caching, speculation and P/D groups, and prints a ranked list ($/hour, GPUs, goodput per GPU, p99
    latencies, capacity interval, what priced it), why the runners-up lost, and the Pareto
    frontier."""
    from analysis.plan import parse_search
    from analysis.plan import plan as run_plan
    from analysis.plan_report import plan_section
    from analysis.slo import parse_slo

    check_out_file(out)
    spec = parse_slo(slo)
    knobs = parse_search(list(search) + ([f"engine={engines}"] if engines else []))
    gpus = [h.strip() for h in hardware.split(",") if h.strip()] if hardware else None
    with Bar("plan", "step", enabled=progress and not as_json) as bar:
        def on_progress(stage: str, done: int, total: int, best: Optional[dict]) -> None:
            best_text = f"best {best['label']}" if best else "no estimate yet"
            bar.set(done, f"{stage}: {total - done} left, {best_text}", total=total)

        result = run_plan(config, spec, target_rate, concurrency=concurrency, hardware=gpus, max_gpus=max_gpus, prices=price,
                          search=knobs, overrides=set_, base_dir=config.parent if config else None,
                          workers=workers, backend=backend, on_progress=on_progress)
    finish(result.to_dict(), plan_section, out, as_json)
