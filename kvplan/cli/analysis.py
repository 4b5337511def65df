"""``kvplan capacity``, ``sweep``, ``ab``, ``report`` and ``dashboard``: answers built from
many simulations. Thin shells over ``analysis``; the tables they print are the report's own
sections, so the terminal, the HTML report and the dashboard agree.

The simulator, the analysis package and streamlit are imported inside each command, so that
``kvplan --help`` imports none of them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from kvplan.cli.common import CONFIG_HELP, SET_HELP, Bar, check_out_file, finish, write_csv


def capacity(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP),
    slo: str = typer.Option(..., "--slo", help="Latency SLO, e.g. ttft_p99_ms=500,tpot_p99_ms=50 "
                            "(metric_stat_ms; metric ttft/tpot/itl/e2el, stat mean/median/p90/p99; "
                            "optional attainment=0.99)."),
    target_rate: Optional[float] = typer.Option(None, "--target-rate", help="Requests/s to serve: prints replicas, GPUs and $/hour."),
    fleet: str = typer.Option("simulate", "--fleet", help="How --target-rate is sized: simulate (N replicas behind parallel.router, or N P/D groups, simulated at the target rate under the same SLO test, from the divided estimate up or down) or divide (target / per-replica rate)."),
    max_replicas: int = typer.Option(32, "--max-replicas", help="Largest fleet --fleet simulate simulates (a fleet of N costs about N single-replica runs); above it the fleet is sized by division and the result says so."),
    seeds: int = typer.Option(3, "--seeds", help="Independent workloads searched (at least; --ci-target may add more); their spread is the stated uncertainty."),
    ci_target: float = typer.Option(0.10, "--ci-target", help="Add seeds (and narrow brackets) until the confidence interval's half-width is within this fraction of the estimate; 0 keeps --seeds fixed."),
    max_seeds: int = typer.Option(8, "--max-seeds", help="The most seeds --ci-target may grow to (never fewer than --seeds); the result says when it stopped short of the target."),
    duration: float = typer.Option(60.0, "--duration", help="Seconds of arrivals per simulation (rate x duration requests); lengthened automatically when too short to reach steady state."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="A fixed request count per simulation instead of --duration."),
    confirm: float = typer.Option(600.0, "--confirm", help="Seconds of arrivals of the long run that confirms the answer (near a hard limit a queue builds over minutes); 0 skips it."),
    rel_tol: float = typer.Option(0.05, "--rel-tol", help="Stop when each seed's bracket is narrower than this fraction."),
    start_rate: Optional[float] = typer.Option(None, "--start-rate", help="First rate tried (default: the config's arrival rate)."),
    price: List[str] = typer.Option([], "--price", help="$/GPU-hour override, e.g. --price a100-80gb=1.2, or a YAML/JSON file of them (repeatable)."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    max_simulations: int = typer.Option(200, "--max-simulations", help="Give up after this many simulations."),
    workers: int = typer.Option(0, "--workers", help="Processes that run simulations ahead of the search (0: one per CPU, at most 4; 1: none). The answer is the same for any number."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the result as JSON (input for `kvplan report`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of tables."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    clients: bool = typer.Option(False, "--clients", help="Search in closed-loop clients instead of a rate: the most concurrent clients one replica serves inside the SLO (the default when the config's workload.arrival.process is closed)."),
    target_clients: Optional[int] = typer.Option(None, "--target-clients", help="Clients to serve (implies --clients): prints replicas, GPUs and $/hour, the fleet simulated with all of them."),
    max_clients: int = typer.Option(4096, "--max-clients", help="With --clients: the most clients searched (a TPOT-only SLO may never be missed: clients past the running-request limit only wait)."),
    start_clients: Optional[int] = typer.Option(None, "--start-clients", help="With --clients: the first count tried (default: the config's workload.arrival.concurrency, else 8)."),
) -> None:
    """Highest request rate one replica sustains inside an SLO; replicas, GPUs and cost for a target rate (the fleet simulated behind the router).
    With --clients (or a closed-loop config): the most concurrent clients instead, and --target-clients sizes the fleet."""
    from analysis.capacity import RunSizing, find_capacity
    from analysis.report import capacity_section
    from analysis.slo import parse_slo

    check_out_file(out)
    spec = parse_slo(slo)
    if clients or target_clients is not None or _closed_loop(config, set_):
        if target_rate is not None or start_rate is not None:
            from sim.errors import ConfigError

            raise ConfigError("--target-rate/--start-rate: a search in clients has no request rate; "
                              "give --target-clients N (or an open-loop workload.arrival.process)")
        _client_capacity(config, spec, seeds, max_simulations, price, set_, out, as_json, progress,
                         target_clients, max_clients, start_clients)
        return
    with Bar("capacity search", "sim", enabled=progress and not as_json) as bar:
        result = find_capacity(
            config, spec, target_rate=target_rate, seeds=seeds, rel_tol=rel_tol, start_rate=start_rate,
            sizing=RunSizing(duration_s=duration, num_requests=num_requests, confirm_s=confirm),
            max_simulations=max_simulations, prices=price, overrides=set_,
            base_dir=config.parent if config else None, workers=workers,
            ci_target=ci_target, max_seeds=max_seeds, fleet=fleet, max_replicas=max_replicas,
            on_evaluation=lambda ev, n: bar.set(n, progress_text(ev)))
    finish(result.to_dict(), capacity_section, out, as_json)


def _closed_loop(config: Optional[Path], overrides: List[str]) -> bool:
    """Whether the scenario (with its overrides) is a closed loop, whose capacity is in clients."""
    from sim import config as config_mod

    cfg = config_mod.build_config(config, list(overrides))
    return (cfg.get("workload", {}).get("arrival") or {}).get("process") == "closed"


def _client_capacity(config: Optional[Path], spec, seeds: int, max_simulations: int, price: List[str],
                     overrides: List[str], out: Optional[Path], as_json: bool, progress: bool,
                     target_clients: Optional[int], max_clients: int, start_clients: Optional[int]) -> None:
    """``kvplan capacity --clients``: the search in closed-loop clients (``analysis.client_capacity``)."""
    from analysis.client_capacity import find_client_capacity
    from analysis.report import client_capacity_section

    with Bar("capacity search (clients)", "sim", enabled=progress and not as_json) as bar:
        result = find_client_capacity(
            config, spec, seeds=seeds, start_clients=start_clients, max_clients=max_clients,
            target_clients=target_clients, max_simulations=max_simulations, prices=price,
            overrides=overrides, base_dir=config.parent if config else None,
            on_run=lambda run, n: bar.set(n, f"{run.stage} {run.clients} clients x{run.replicas} seed {run.seed}: "
                                             f"{'met' if run.passed else 'missed'}"))
    finish(result.to_dict(), client_capacity_section, out, as_json)


def progress_text(ev) -> str:
    """The progress bar's postfix for one capacity simulation: a search run, or a fleet's run
    (which says its size: the fleet search is where a long wait comes from)."""
    what = f"{ev.stage} x{ev.replicas}" if ev.stage.startswith("fleet") else ev.stage
    return f"{what} {ev.rate:.3g} req/s seed {ev.seed}: {'met' if ev.passed else 'missed'}"


def sweep(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP),
    grid: List[str] = typer.Option(..., "--grid", help="key=v1,v2,... (repeatable; the cartesian product is run)."),
    seeds: int = typer.Option(1, "--seeds", help="Seeds per configuration (results are averaged)."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="Requests per simulation (default: the config's)."),
    slo: Optional[str] = typer.Option(None, "--slo", help="Only configurations meeting this SLO can be on the frontier, e.g. ttft_p99_ms=500."),
    backend: str = typer.Option("local", "--backend", help="local (process pool) or ray."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Parallel simulations (default: CPU count)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address (default: start a local Ray instance)."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the result as JSON (input for `kvplan report`)."),
    csv_out: Optional[Path] = typer.Option(None, "--csv", help="Write one row per configuration as CSV."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of tables."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Simulate a grid of configurations; Pareto frontier of tokens/s per GPU against tokens/s per user."""
    from analysis.report import sweep_section
    from analysis.slo import parse_slo
    from analysis.sweep import parse_grid, run_sweep

    check_out_file(out)
    check_out_file(csv_out, "--csv")
    spec = parse_slo(slo) if slo else None
    with Bar("sweep", "sim", enabled=progress and not as_json) as bar:
        result = run_sweep(config, parse_grid(grid), seeds=seeds, num_requests=num_requests,
                           overrides=set_, slo=spec, backend=backend, workers=workers,
                           ray_address=ray_address, base_dir=config.parent if config else None,
                           on_done=lambda done, total: bar.set(done, total=total))
    if csv_out:
        write_csv(result.rows, csv_out)
    finish(result.to_dict(), sweep_section, out, as_json)


def ab(
    config_a: Path = typer.Argument(..., help="Config A (the baseline)."),
    config_b: Path = typer.Argument(..., help="Config B (the candidate); it runs A's request streams."),
    seeds: int = typer.Option(3, "--seeds", help="Request streams (seeds); both arms see each one."),
    num_requests: Optional[int] = typer.Option(None, "--num-requests", help="Requests per stream (default: A's)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Confidence level of the intervals."),
    bootstrap: int = typer.Option(1000, "--bootstrap", help="Bootstrap resamples."),
    set_: List[str] = typer.Option([], "--set", help="Override a key in both configs (repeatable)."),
    set_a: List[str] = typer.Option([], "--set-a", help="Override a key in config A only (repeatable), after --set."),
    set_b: List[str] = typer.Option([], "--set-b", help="Override a key in config B only (repeatable), after --set: e.g. `kvplan ab c.yaml c.yaml --set-b engine.name=sglang`."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the result as JSON (input for `kvplan report`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON instead of tables."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Compare two configs on identical request streams: per-metric B - A with bootstrap intervals.
    One config against itself with --set-b changes one thing (the engine, a knob)."""
    from analysis.ab import run_ab
    from analysis.report import ab_section

    check_out_file(out)
    with Bar("A/B", "sim", enabled=progress and not as_json) as bar:
        result = run_ab(config_a, config_b, seeds=seeds, num_requests=num_requests, overrides=set_,
                        overrides_a=set_a, overrides_b=set_b,
                        confidence=confidence, num_bootstrap=bootstrap,
                        labels=(_arm_label(config_a, set_a), _arm_label(config_b, set_b)),
                        base_dirs=(config_a.parent, config_b.parent),
                        on_run=lambda done, total: bar.set(done, total=total))
    finish(result.to_dict(), ab_section, out, as_json)


def _arm_label(config: Path, overrides: List[str]) -> str:
    """An A/B arm's name: its config's stem, with its own overrides when it has any."""
    return f"{config.stem} ({', '.join(overrides)})" if overrides else config.stem


def report(
    inputs: List[Path] = typer.Argument(..., help="Saved results: --out JSON of capacity/ab/sweep, a validation.json, or a `kvplan simulate --out` folder."),
    out: Path = typer.Option(..., "--out", help="report.html (plots embedded as JSON) or report.md."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write the report as Markdown here."),
    title: str = typer.Option("kvplan report", "--title", help="Report title."),
    plotly: str = typer.Option("local", "--plotly", help="Where the HTML's plotly.js lives: local (written once beside the report as plotly-<version>.min.js, 4.8 MB, shared by every report in the folder; the HTML stays about 0.1 MB) or inline (embedded gzipped: one self-contained file of about 2.1 MB). Both open offline."),
) -> None:
    """One HTML (or Markdown) report: scenario, results, calibration provenance, assumptions. Opens offline."""
    from analysis.report import load_record, write_report

    check_out_file(out)
    check_out_file(markdown, "--markdown")
    records = [load_record(p) for p in inputs]
    for path in write_report(records, out, title=title, markdown=markdown, plotly=plotly):
        Console().print(f"wrote {path}")


def dashboard(
    port: int = typer.Option(8501, "--port", help="Port to serve on."),
    address: str = typer.Option("localhost", "--address", help="Address to bind (0.0.0.0 to share on a network)."),
    open_browser: bool = typer.Option(True, "--browser/--no-browser", help="Open a browser tab."),
) -> None:
    """Start the dashboard (streamlit run): Plan, What-if, A/B, Capacity, Sweep/Pareto, Cluster, Validation."""
    import subprocess

    from sim.errors import ConfigError

    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise ConfigError("dashboard: streamlit is not installed (pip install 'kvplan[dashboard]')") from None
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_path()),
           "--server.port", str(port), "--server.address", address,
           "--server.headless", "false" if open_browser else "true",
           "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal"]
    try:
        code = subprocess.call(cmd)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def app_path() -> Path:
    """The dashboard's entry script (dashboards/app.py)."""
    import dashboards

    return Path(dashboards.__file__).resolve().parent / "app.py"
