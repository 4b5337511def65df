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
KVPLAN = [sys.executable, "-m", "cli.main"]


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
import json, resource, sys, time
sys.path.insert(0, {root!r})
from sim.api import simulate
from sim.config import build_config
cfg = build_config(None, {overrides!r})
t0 = time.perf_counter()
s = simulate(cfg).summary
wall = time.perf_counter() - t0
print(json.dumps({{"wall_s": wall, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "num_steps": s["simulator"]["num_steps"], "completed": s["completed"],
                  "duration_s": s["duration_s"]}}))
"""


def _in_child(overrides: list[str]) -> dict:
    """One ``simulate()`` in a fresh interpreter: its wall time and the process's peak memory."""
    out = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), overrides=overrides)],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip the 100,000-request run and the capacity search")
    ap.add_argument("--profile", action="store_true", help="print a cProfile of the 2,000-request simulate()")
    ap.add_argument("--requests", type=int, default=100_000, help="requests of the large run")
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

    from sim.pricing.machine import machine_fingerprint

    res: dict = {"machine": machine_fingerprint(with_gpus=False), "python": platform.python_version()}

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
    show("  step-by-step reference, same run", f"{slow:.3f} s",
         f"fast path {slow / fast:.1f}x faster, summary {'identical' if same else 'DIFFERS'}")
    if AZURE_CONV.is_file():
        vid, vsum = _in_process(VIDUR_WORKLOAD, repeats=1)
        rate = vsum["num_requests"] / vid
        res["vidur_workload"] = {"overrides": VIDUR_WORKLOAD, "wall_s": vid, "requests_per_s": rate,
                                 "vs_vidur": rate / VIDUR_REQUESTS_PER_S}
        show("Vidur's workload, 5,000 requests", f"{vid:.2f} s",
             f"{rate:,.0f} req/s = {rate / VIDUR_REQUESTS_PER_S:.1f}x Vidur (goal >= 10x)")
    if not args.quick:
        big = _in_child([f"workload.num_requests={args.requests}"])
        big["requests_per_s"] = args.requests / big["wall_s"]
        res["large_run"] = {"num_requests": args.requests, **big}
        show(f"simulate(), {args.requests:,} requests", f"{big['wall_s']:.1f} s",
             f"goal <= 15 s for 100,000 ({big['requests_per_s']:,.0f} req/s, peak {big['peak_rss_mib']:,.0f} MiB)")
        res["capacity_s"] = _wall(KVPLAN + ["capacity", "--slo", "ttft_p99_ms=500,tpot_p99_ms=50", "--target-rate", "100",
                                             "--no-progress", "--json"], repeats=1)
        show("kvplan capacity (README example)", f"{res['capacity_s']:.1f} s", "goal <= 5 s")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"sim_speed_{platform.node() or 'host'}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
