"""``kvplan autoscale``: an autoscaling policy replayed over a day, against a fixed fleet sized
for the peak (library: ``analysis.autoscale``; policy: ``sim.policies.autoscaler``)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from kvplan.cli.common import CONFIG_HELP, SET_HELP, progress_bar, require

DAY_S = 86400.0


def autoscale(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP),
    config_opt: Optional[Path] = typer.Option(None, "--config", help="The scenario YAML, as the argument."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    trace: Optional[Path] = typer.Option(None, "--trace", help="A timed trace (Azure CSV, Mooncake JSONL) made into a day: its bursts and lengths under a diurnal rate (docs/cluster.md, Autoscaling). Without it, the config's workload is replayed as it is."),
    time_scale: float = typer.Option(60.0, "--time-scale", help="With --trace: the day runs this many times faster (60: 24 hours in 24 simulated minutes). Load delay, interval and cool-down stay in real seconds."),
    peak_rate: float = typer.Option(2.0, "--peak-rate", help="With --trace: arrivals per simulated second at the day's peak."),
    trough: float = typer.Option(0.2, "--trough", help="With --trace: the night's rate as a fraction of the peak's."),
    peak_hour: float = typer.Option(14.0, "--peak-hour", help="With --trace: hour of the day of the peak."),
    metric: str = typer.Option("concurrency", "--metric", help="Scaling metric per ready replica: concurrency (outstanding requests, Knative/KServe) or queue (waiting requests, KEDA)."),
    target: float = typer.Option(8.0, "--target", help="Target value of --metric per ready replica."),
    min_replicas: int = typer.Option(1, "--min-replicas", help="Fewest replicas."),
    max_replicas: int = typer.Option(8, "--max-replicas", help="Most replicas."),
    initial_replicas: Optional[int] = typer.Option(None, "--initial-replicas", help="Replicas serving at t=0 (default --min-replicas)."),
    interval: float = typer.Option(15.0, "--interval", help="Seconds between decisions (HPA's sync period)."),
    cooldown: float = typer.Option(300.0, "--cooldown", help="Scale-down stabilisation window, seconds: scale down only to the highest recommendation of this window (HPA's default 300)."),
    tolerance: float = typer.Option(0.1, "--tolerance", help="No change while metric/target is within this of 1 (HPA's 0.1)."),
    load_bandwidth: float = typer.Option(2.0, "--load-bandwidth-gbs", help="GB/s a starting replica reads its weights at (per GPU): scale-up delay = weights / this + --startup-s."),
    startup: float = typer.Option(30.0, "--startup-s", help="Seconds a replica takes to start besides reading weights."),
    scale_up_delay: Optional[float] = typer.Option(None, "--scale-up-delay", help="Seconds from a scale-up decision to serving, instead of the derived model load time."),
    fixed_replicas: Optional[int] = typer.Option(None, "--fixed-replicas", help="Size of the fixed fleet compared against (default: the autoscaled run's peak)."),
    price: Optional[float] = typer.Option(None, "--price", help="$/GPU-hour (default: the hardware catalog's)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (same seed, same result)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write autoscale.json (settings, totals, timelines) and timeline.csv here."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print autoscale.json to stdout instead of the tables."),
) -> None:
    """Replay an autoscaling policy over a day-long trace: replicas over time, SLO attainment,
    GPU-hours and dollars, against a fixed fleet sized for the peak."""
    from analysis.autoscale import by_period, compare_fleets, load_delay_s, report
    from sim.api import as_scenario, build_workload
    from sim.errors import ConfigError
    from sim.policies.autoscaler import METRICS, AutoscalerConfig

    if config is not None and config_opt is not None:
        raise ConfigError("--config: give the scenario once (as the argument or --config)")
    config = config or config_opt
    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, expected a folder (autoscale.json and "
                          f"timeline.csv are written into it)")
    _check(time_scale, peak_rate, trough, peak_hour, metric, METRICS, target, min_replicas,
           max_replicas, initial_replicas, interval, cooldown, tolerance, load_bandwidth, startup, scale_up_delay,
           fixed_replicas, price)
    sc = as_scenario(config, set_, seed)
    day_s = DAY_S / time_scale
    if trace is not None:
        from sim.workload.diurnal import diurnal_requests

        reqs = diurnal_requests(trace, peak_rate=peak_rate, day_s=day_s, trough=trough,
                                peak_hour=peak_hour, seed=sc.seed)
        horizon: Optional[float] = day_s
    else:
        reqs = list(build_workload(sc, config.parent if config else None))
        horizon = None
    delay = (scale_up_delay if scale_up_delay is not None
             else load_delay_s(sc, load_bandwidth * 1e9, startup))
    policy = AutoscalerConfig(metric=metric, target=target, min_replicas=min_replicas,
                              max_replicas=max_replicas, scale_up_delay_s=delay,
                              scale_down_stabilization_s=cooldown, tolerance=tolerance,
                              interval_s=interval)
    bar = progress_bar(2 * len(reqs), "autoscaled + fixed fleet", "req", enabled=progress and not as_json)
    try:
        runs = compare_fleets(sc, reqs, policy, fixed_replicas=fixed_replicas, horizon_s=horizon,
                              usd_gpu_hour=price, initial_replicas=initial_replicas, progress=bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    settings = {"scenario": {"model": sc.model, "hardware": sc.hardware,
                             "gpus_per_replica": sc.parallel.gpus_per_replica,
                             "router": sc.parallel.router},
                "policy": {**policy.__dict__, "initial_replicas": initial_replicas or min_replicas},
                "workload": ({"trace": str(trace), "time_scale": time_scale, "day_s": day_s,
                              "peak_rate": peak_rate, "trough": trough, "peak_hour": peak_hour,
                              "seed": sc.seed} if trace is not None else {"config": "workload"}),
                "requests": len(reqs)}
    result = report(runs, settings)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "autoscale.json").write_text(json.dumps(result, indent=2) + "\n")
        _write_timeline(out / "timeline.csv", runs)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    console = Console()
    period = day_s / 24 if trace is not None else max(policy.interval_s, runs["autoscaled"].totals["duration_s"] / 24)
    console.print(_timeline_table(by_period(runs["autoscaled"].timeline, period),
                                  by_period(runs["fixed"].timeline, period), period, trace is not None))
    console.print(totals_table(runs, delay))
    if out is not None:
        console.print(f"wrote {out}/autoscale.json, timeline.csv")


def _check(time_scale, peak_rate, trough, peak_hour, metric, metrics, target, min_replicas,
           max_replicas, initial_replicas, interval, cooldown, tolerance, load_bandwidth, startup, scale_up_delay,
           fixed_replicas, price) -> None:
    """Every option checked where it is read, so the one-line error names it."""
    def finite_pos(x) -> bool:
        return x > 0 and math.isfinite(x)

    def finite_nonneg(x) -> bool:
        return x >= 0 and math.isfinite(x)

    require("--time-scale", time_scale, finite_pos(time_scale), "a number > 0")
    require("--peak-rate", peak_rate, finite_pos(peak_rate), "a number > 0 (req/s)")
    require("--trough", trough, 0 < trough <= 1, "a fraction in (0, 1]")
    require("--peak-hour", peak_hour, 0 <= peak_hour < 24, "an hour in [0, 24)")
    require("--metric", metric, metric in metrics, f"one of {', '.join(metrics)}")
    require("--target", target, finite_pos(target), "a number > 0")
    require("--min-replicas", min_replicas, min_replicas >= 1, "an integer >= 1")
    require("--max-replicas", max_replicas, max_replicas >= min_replicas,
            f"an integer >= --min-replicas ({min_replicas})")
    require("--initial-replicas", initial_replicas, initial_replicas is None
            or min_replicas <= initial_replicas <= max_replicas,
            "an integer from --min-replicas to --max-replicas")
    require("--interval", interval, finite_pos(interval), "seconds > 0")
    require("--cooldown", cooldown, finite_nonneg(cooldown), "seconds >= 0")
    require("--tolerance", tolerance, finite_nonneg(tolerance), "a number >= 0")
    require("--load-bandwidth-gbs", load_bandwidth, finite_pos(load_bandwidth), "GB/s > 0")
    require("--startup-s", startup, finite_nonneg(startup), "seconds >= 0")
    require("--scale-up-delay", scale_up_delay, scale_up_delay is None or finite_nonneg(scale_up_delay),
            "seconds >= 0")
    require("--fixed-replicas", fixed_replicas, fixed_replicas is None or fixed_replicas >= 1,
            "an integer >= 1")
    require("--price", price, price is None or finite_nonneg(price), "$/GPU-hour >= 0")


def _write_timeline(path: Path, runs: dict) -> None:
    from analysis.autoscale import TIMELINE_COLUMNS

    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(("fleet",) + TIMELINE_COLUMNS)
        for key, run in runs.items():
            for row in run.timeline:
                w.writerow([key] + ["" if row[c] is None else row[c] for c in TIMELINE_COLUMNS])


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def _timeline_table(auto: list[dict], fixed: list[dict], period: float, hours: bool) -> Table:
    table = Table(title="Replicas over the day (autoscaled; fixed fleet for comparison)")
    for col in ("hour" if hours else "from s", "arrivals", "active (mean)", "starting (mean)",
                "peak", "SLO met", "SLO met, fixed"):
        table.add_column(col, justify="right")
    fixed_by = {round(r["start_s"], 6): r for r in fixed}
    for k, r in enumerate(auto):
        f = fixed_by.get(round(r["start_s"], 6), {})
        table.add_row(f"{k:02d}" if hours else f"{r['start_s']:.0f}", str(r["arrivals"]),
                      f"{r['active']:.1f}", f"{r['starting']:.1f}", str(r["peak"]),
                      _pct(r["slo_attainment"]), _pct(f.get("slo_attainment")))
    return table


def totals_table(runs: dict, delay: float) -> Table:
    """Autoscaled against fixed: replicas, GPU-hours, dollars, SLO attainment, latency."""
    table = Table(title=f"Autoscaled vs fixed for the peak (scale-up delay {delay:.0f} s)")
    for col in ("fleet", "replicas mean / peak", "GPU-hours", "$", "SLO attainment",
                "p99 TTFT ms", "p99 TPOT ms", "completed / rejected", "scale ups / downs"):
        table.add_column(col, justify="left" if col == "fleet" else "right")
    for run in runs.values():
        t = run.totals
        table.add_row(run.name, f"{t['mean_replicas']:.2f} / {t['peak_replicas']}",
                      f"{t['gpu_hours']:.2f}", f"{t['usd']:.2f}", _pct(t["slo_attainment"]),
                      _ms(t["p99_ttft_ms"]), _ms(t["p99_tpot_ms"]),
                      f"{t['completed']} / {t['rejected']}", f"{t['scale_ups']} / {t['scale_downs']}")
    return table


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.0f}"
