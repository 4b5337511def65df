"""An autoscaling day against a fixed fleet sized for the peak.

Workload: the Azure LLM inference conversation trace (../shared/traces/
AzureLLMInferenceTrace_conv_2023.csv, 19,366 requests over about an hour) made into a day by
``sim.workload.diurnal.diurnal_requests``: a cosine daily profile (peak at 14:00, night at 20% of
the peak), the trace's own inter-arrival gaps and prompt / output lengths in order (so its
bursts are kept), time-changed onto the profile. The day is compressed ``--time-scale`` times
(30: 24 hours in 48 simulated minutes), which keeps it to about 4,000 requests; the load delay,
decision interval and cool-down stay in real seconds, so the ramps are 30x steeper against them
than in a real day (a harder test for the autoscaler, not an easier one).

Deployment: Llama-3.1-8B fp16 on one NVIDIA L4 (24 GB) per replica, chunked prefill, the
least-outstanding router, roofline pricing (no operator tables for the L4), $0.85/GPU-hour (the
catalog's). SLO per request: TTFT <= 2 s and TPOT <= 100 ms.

Policies (``sim.policies.autoscaler``, HPA's rule): a concurrency or queue target per ready
replica, 15 s decisions, 300 s scale-down stabilisation, 1-12 replicas; the scale-up delay is
the model load time, 16 GB of weights over 2 GB/s plus 30 s of start-up = 38 s (a slow 0.25 GB/s
network volume: 94 s). Each policy's fixed fleet is its own peak replica count, held all day.

Run: python benchmarks/autoscale_day.py [--time-scale 30] [--peak-rate 3] [--json PATH] [--md PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from analysis.autoscale import by_period, compare_fleets, load_delay_s
from sim.api import as_scenario
from sim.policies.autoscaler import AutoscalerConfig
from sim.pricing.machine import machine_fingerprint
from sim.workload.diurnal import diurnal_requests

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
RESULTS = ROOT / "benchmarks" / "results"

BASE = ["model=llama-3.1-8b", "hardware=l4", "scheduler.policy=chunked",
        "kv_cache.max_model_len=8192", "parallel.router=least_outstanding",
        "slo.ttft_ms=2000", "slo.tpot_ms=100"]
STARTUP_S = 30.0
#: Replicas serving at midnight: about what the night's load holds (a day starting from one
#: replica would first pay for a fleet that had shrunk below the night's need).
INITIAL = 2

#: (name, metric, target, load bandwidth GB/s)
CASES = [
    ("concurrency 8", "concurrency", 8.0, 2.0),
    ("concurrency 16", "concurrency", 16.0, 2.0),
    ("queue 1", "queue", 1.0, 2.0),
    ("concurrency 8, slow load", "concurrency", 8.0, 0.25),
]


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-scale", type=float, default=30.0, help="the day runs this many times faster")
    ap.add_argument("--peak-rate", type=float, default=3.0, help="req/s (simulated) at the peak")
    ap.add_argument("--json", default=str(RESULTS / "autoscale_day.json"))
    ap.add_argument("--md", default=str(RESULTS / "autoscale_day.md"))
    args = ap.parse_args()
    console = Console(width=160)
    sc = as_scenario(None, BASE)
    day_s = 86400.0 / args.time_scale
    reqs = diurnal_requests(TRACE, peak_rate=args.peak_rate, day_s=day_s, trough=0.2, peak_hour=14.0)
    results: dict = {
        "machine": {**machine_fingerprint(with_gpus=False), "python": platform.python_version()},
        "trace": TRACE.name, "deployment": BASE, "requests": len(reqs),
        "workload": {"time_scale": args.time_scale, "day_s": day_s, "peak_rate": args.peak_rate,
                     "trough": 0.2, "peak_hour": 14.0, "seed": 0},
        "cases": {},
    }
    head = ("policy", "load delay s", "replicas mean / peak", "GPU-hours", "$", "SLO met",
            "p99 TTFT s", "fixed for peak: GPU-hours", "$", "SLO met", "saved", "sim s")
    table = Table(title=f"An autoscaling day: Azure conv trace x diurnal profile ({len(reqs)} requests, "
                        f"{args.time_scale:g}x compressed), Llama-3.1-8B on L4 replicas")
    for col in head:
        table.add_column(col, justify="left" if col == "policy" else "right")
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    hourly: dict = {}
    for name, metric, target, gbs in CASES:
        delay = load_delay_s(sc, gbs * 1e9, STARTUP_S)
        policy = AutoscalerConfig(metric=metric, target=target, min_replicas=1, max_replicas=12,
                                  scale_up_delay_s=delay, interval_s=15.0,
                                  scale_down_stabilization_s=300.0)
        t = time.perf_counter()
        runs = compare_fleets(sc, reqs, policy, horizon_s=day_s, initial_replicas=INITIAL)
        wall = time.perf_counter() - t
        a, f = runs["autoscaled"].totals, runs["fixed"].totals
        results["cases"][name] = {
            "policy": {**policy.__dict__, "initial_replicas": INITIAL}, "sim_wall_s": wall,
            "autoscaled": {"totals": a, "timeline": runs["autoscaled"].timeline,
                           "events": [list(e) for e in runs["autoscaled"].events]},
            "fixed": {"totals": f, "timeline": runs["fixed"].timeline},
        }
        hourly[name] = (by_period(runs["autoscaled"].timeline, day_s / 24),
                        by_period(runs["fixed"].timeline, day_s / 24))
        cells: tuple[str, ...] = (name, f"{delay:.0f}", f"{a['mean_replicas']:.2f} / {a['peak_replicas']}",
                 f"{a['gpu_hours']:.2f}", f"{a['usd']:.2f}", _pct(a["slo_attainment"]),
                 f"{a['p99_ttft_ms'] / 1000:.2f}", f"{f['gpu_hours']:.2f}", f"{f['usd']:.2f}",
                 _pct(f["slo_attainment"]), _pct(1 - a["gpu_hours"] / f["gpu_hours"]), f"{wall:.1f}")
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    console.print(table)
    first = CASES[0][0]
    auto_h, fixed_h = hourly[first]
    hour_head = ("hour", "arrivals", "active (mean)", "starting (mean)", "peak", "SLO met",
                 f"SLO met, fixed {results['cases'][first]['fixed']['totals']['peak_replicas']}")
    htable = Table(title=f"Replicas over the day: {first}")
    for col in hour_head:
        htable.add_column(col, justify="right")
    hmd = ["| " + " | ".join(hour_head) + " |", "|" + "---|" * len(hour_head)]
    for k, (r, fr) in enumerate(zip(auto_h, fixed_h)):
        if k >= 24:
            break
        cells = (f"{k:02d}", str(r["arrivals"]), f"{r['active']:.1f}", f"{r['starting']:.1f}",
                 str(r["peak"]), _pct(r["slo_attainment"]), _pct(fr["slo_attainment"]))
        htable.add_row(*cells)
        hmd.append("| " + " | ".join(cells) + " |")
    console.print(htable)
    results["hourly"] = {name: {"autoscaled": h[0], "fixed": h[1]} for name, h in hourly.items()}
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    m = results["machine"]
    text = [
        "# An autoscaling day against a fixed fleet (benchmarks/autoscale_day.py)",
        "",
        f"Azure LLM inference conversation trace made into a day (cosine profile, peak "
        f"{args.peak_rate:g} req/s at 14:00, night at 20% of it, the trace's own gaps and lengths), "
        f"compressed {args.time_scale:g}x ({day_s:.0f} simulated seconds, {len(reqs)} requests). "
        "Llama-3.1-8B fp16, one L4 per replica ($0.85/GPU-hour), chunked prefill, "
        "least-outstanding router, roofline pricing. SLO: TTFT <= 2 s and TPOT <= 100 ms per "
        "request. Policy: HPA's rule on a per-ready-replica target, 15 s interval, 300 s "
        "scale-down stabilisation, 1-12 replicas, scale-up delay = weights / load bandwidth + "
        "30 s. Fixed fleet: the policy's own peak replica count all day. GPU-hours count "
        "starting and draining replicas.",
        "",
        *md,
        "",
        *hmd,
        "",
        f"Machine: {m['cpu']}, {m['logical_cores']} logical cores, Python {m['python']}.",
        "",
        "Command: `python benchmarks/autoscale_day.py` (defaults: `--time-scale 30 --peak-rate 3`).",
        "",
    ]
    Path(args.md).write_text("\n".join(text))


if __name__ == "__main__":
    main()
