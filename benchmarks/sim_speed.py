"""Simulator speed, in one run: CLI start-up, the default scenario at 2,000 requests (whole
process and inside ``simulate()``), the step-by-step reference path on the same run (the
speed-up of the fast path, measured here, now), 100,000 requests with peak memory, Vidur's
headline workload (Llama-2-70B TP2 on A100, Azure conversation lengths, 5,000 requests) and a
capacity search of the default scenario.

Every figure is wall time on the machine that runs it (``machine`` in the JSON says which);
the ratios (fast path against the step-by-step reference, this simulator against Vidur's
published event-loop rate) are what carries across machines. Goals from the speed issue are
printed beside each figure.

    python benchmarks/sim_speed.py                 # everything (about a minute on 2 cores)
    python benchmarks/sim_speed.py --quick         # skip the 100,000-request run and capacity
    python benchmarks/sim_speed.py --profile       # cProfile of the 2,000-request simulate()

Writes ``benchmarks/results/sim_speed_<host>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Vidur's event loop on this kind of machine: 5,000 requests in about 25 s (the speed issue).
VIDUR_REQUESTS_PER_S = 200.0
AZURE_CONV = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
VIDUR_WORKLOAD = ["model=llama-2-70b", "hardware=a100-80gb", "parallel.tensor_parallel_size=2",
                  f"workload.trace={AZURE_CONV}", "workload.num_requests=5000",
                  "workload.arrival.process=poisson", "workload.arrival.rate=4"]
KVPLAN = [sys.executable, "-m", "kvplan.cli.main"]


def _wall(cmd: list[str], repeats: int = 3) -> float:
    """Median wall seconds of a command (its output discarded; a failure stops the benchmark)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _in_process(overrides: list[str], fast_decode: bool = True, repeats: int = 3) -> tuple[float, dict]:
    """Median seconds of ``simulate()`` (config built outside the timing) and the summary."""
    from sim.api import simulate
    from sim.config import build_config

    cfg = build_config(None, overrides)
    times, summary = [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = simulate(cfg, fast_decode=fast_decode)
        times.append(time.perf_counter() - t0)
        summary = result.summary
    return statistics.median(times), summary


_CHILD = """
import json, resource, sys, tempfile, time
sys.path.insert(0, {root!r})
from sim import native
from sim.api import simulate
from sim.config import build_config
cfg = build_config(None, {overrides!r})
times = []
for _ in range({repeats}):
    folder = tempfile.mkdtemp() if {stream!r} else None
    t0 = time.perf_counter()
    s = simulate(cfg, fast_decode={fast!r}, stream_to=folder).summary
    times.append(time.perf_counter() - t0)
times.sort()
print(json.dumps({{"wall_s": times[len(times) // 2],
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "num_steps": s["simulator"]["num_steps"], "completed": s["completed"],
                  "duration_s": s["duration_s"], "compiled": native.status()["compiled"],
                  "summary": json.dumps({{k: v for k, v in s.items() if k != "simulator"}}, sort_keys=True)}}))
"""


def _in_child(overrides: list[str], *, pure: bool = False, fast: bool = True, stream: bool = False,
              repeats: int = 1) -> dict:
    """``simulate()`` in a fresh interpreter (median wall time of ``repeats``) and the process's
    peak memory; ``pure`` runs the Python source even where the compiled build exists."""
    env = {**os.environ, **({"KVPLAN_PURE_PYTHON": "1"} if pure else {})}
    code = _CHILD.format(root=str(ROOT), overrides=overrides, repeats=repeats, fast=fast, stream=stream)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                         text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the 100,000-request run and the capacity search")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the 2,000-request simulate()")
    ap.add_argument("--requests", type=int, default=100_000, help="requests of the large run")
    ap.add_argument("--million", action="store_true",
                    help="also stream 1,000,000 requests (bounded memory; a few minutes)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    if args.profile:
        import cProfile
        import pstats

        from sim.api import simulate
        from sim.config import build_config

        cfg = build_config(None, ["workload.num_requests=2000"])
        prof = cProfile.Profile()
        prof.runcall(simulate, cfg)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return

    from sim import native
    from sim.pricing.machine import machine_fingerprint

    res: dict = {"machine": machine_fingerprint(with_gpus=False), "python": platform.python_version(),
                 "native": native.stale_reason() or "compiled with mypyc"}
    print(f"simulator: {res['native']}")

    def show(name: str, value: str, goal: str = "") -> None:
        print(f"{name:44s} {value:>22s}   {goal}")

    res["cli_help_s"] = _wall(KVPLAN + ["--help"])
    show("kvplan --help", f"{res['cli_help_s']:.2f} s", "goal <= 0.5 s")
    res["cli_simulate_2000_s"] = _wall(KVPLAN + ["simulate", "--set", "workload.num_requests=2000",
                                                 "--no-progress", "--json"])
    show("kvplan simulate, 2,000 requests (process)", f"{res['cli_simulate_2000_s']:.2f} s", "goal <= 0.8 s")
    fast, summ = _in_process(["workload.num_requests=2000"])
    steps = summ["simulator"]["num_steps"]
    res["simulate_2000"] = {"wall_s": fast, "num_steps": steps, "steps_per_s": steps / fast}
    show("simulate(), 2,000 requests", f"{fast:.3f} s", f"goal <= 0.4 s ({steps:,} steps, {steps / fast:,.0f}/s)")
    slow, slow_summ = _in_process(["workload.num_requests=2000"], fast_decode=False, repeats=1)
    same = json.dumps(slow_summ, sort_keys=True) == json.dumps(summ, sort_keys=True)
    res["step_by_step_2000"] = {"wall_s": slow, "speedup": slow / fast, "same_summary": same}
    show("  step-by-step, same modules", f"{slow:.3f} s",
         f"fast path {slow / fast:.1f}x faster, summary {'identical' if same else 'DIFFERS'}")
    mine = json.dumps({k: v for k, v in summ.items() if k != "simulator"}, sort_keys=True)
    pure = _in_child(["workload.num_requests=2000"], pure=True, repeats=3)
    ref = _in_child(["workload.num_requests=2000"], pure=True, fast=False)
    res["pure_python_2000"] = {"wall_s": pure["wall_s"], "same_summary": pure["summary"] == mine}
    res["reference_2000"] = {"wall_s": ref["wall_s"], "same_summary": ref["summary"] == mine,
                             "speedup": ref["wall_s"] / fast}
    show("  Python source (KVPLAN_PURE_PYTHON=1)", f"{pure['wall_s']:.3f} s",
         f"compiled {pure['wall_s'] / fast:.1f}x faster, summary "
         f"{'identical' if pure['summary'] == mine else 'DIFFERS'}")
    show("  reference: Python, step by step", f"{ref['wall_s']:.3f} s",
         f"{ref['wall_s'] / fast:.1f}x slower than the default path, summary "
         f"{'identical' if ref['summary'] == mine else 'DIFFERS'}")
    if AZURE_CONV.is_file():
        vid, vsum = _in_process(VIDUR_WORKLOAD, repeats=1)
        rate = vsum["num_requests"] / vid
        res["vidur_workload"] = {"overrides": VIDUR_WORKLOAD, "wall_s": vid, "requests_per_s": rate,
                                 "vs_vidur": rate / VIDUR_REQUESTS_PER_S}
        show("Vidur's workload, 5,000 requests", f"{vid:.2f} s",
             f"{rate:,.0f} req/s = {rate / VIDUR_REQUESTS_PER_S:.1f}x Vidur (goal >= 10x)")
    if not args.quick:
        big = _in_child([f"workload.num_requests={args.requests}"])
        big.pop("summary")
        big["requests_per_s"] = args.requests / big["wall_s"]
        res["large_run"] = {"num_requests": args.requests, **big}
        show(f"simulate(), {args.requests:,} requests", f"{big['wall_s']:.1f} s",
             f"goal <= 15 s for 100,000 ({big['requests_per_s']:,.0f} req/s, peak {big['peak_rss_mib']:,.0f} MiB)")
        streamed = _in_child([f"workload.num_requests={args.requests}"], stream=True)
        streamed.pop("summary")
        res["large_run_streamed"] = {"num_requests": args.requests, **streamed}
        show(f"  streamed (--stream)", f"{streamed['wall_s']:.1f} s", f"peak {streamed['peak_rss_mib']:,.0f} MiB")
        if args.million:
            mil = _in_child(["workload.num_requests=1000000"], stream=True)
            mil.pop("summary")
            res["million_streamed"] = {"num_requests": 1_000_000, **mil}
            show("simulate(), 1,000,000 requests, streamed", f"{mil['wall_s']:.0f} s",
                 f"peak {mil['peak_rss_mib']:,.0f} MiB (goal: bounded)")
        # The search alone (--fleet divide), the figure issue #11 set its goal on; sizing the
        # fleet by simulation (the default since) adds its own runs, timed apart.
        cap = ["capacity", "--slo", "ttft_p99_ms=500,tpot_p99_ms=50", "--target-rate", "100", "--no-progress", "--json"]
        res["capacity_s"] = _wall(KVPLAN + cap + ["--fleet", "divide"], repeats=1)
        show("kvplan capacity (README example, --fleet divide)", f"{res['capacity_s']:.1f} s", "goal <= 5 s")
        res["capacity_fleet_s"] = _wall(KVPLAN + cap, repeats=1)
        show("kvplan capacity, fleet simulated (default)", f"{res['capacity_fleet_s']:.1f} s")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"sim_speed_{platform.node() or 'host'}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
