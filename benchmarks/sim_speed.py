"""Simulator speed: ShareGPT-like requests on one replica (Llama-3.1-8B, A100-80GB, chunked
prefill, paged KV), load near capacity. Prints simulated requests per wall second, simulated
steps and simpy events per wall second.

First the same --baseline-requests are simulated step by step (one simpy event per decode
step) and with the exact bulk-decode fast path, and the speed-up is printed; then the full run.

Run: python benchmarks/sim_speed.py [--requests 100000] [--baseline-requests 10000] [--rate 10] [--profile]
"""

from __future__ import annotations

import argparse
import time

from sim.api import simulate
from sim.config import build_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=10.0)
    ap.add_argument("--policy", default="chunked")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    ap.add_argument("--baseline-requests", type=int, default=10_000,
                    help="requests for the step-by-step vs fast-path comparison (0 to skip)")
    args = ap.parse_args()
    if args.baseline_requests:
        base = build_config(None, [f"workload.num_requests={args.baseline_requests}",
                                   f"workload.arrival.rate={args.rate}",
                                   f"scheduler.policy={args.policy}"])
        walls = {}
        for fast in (False, True):
            t0 = time.perf_counter()
            simulate(base, fast_decode=fast)
            walls[fast] = time.perf_counter() - t0
        print(f"{args.baseline_requests:,} requests: step-by-step {walls[False]:.2f} s, "
              f"bulk-decode fast path {walls[True]:.2f} s -> {walls[False] / walls[True]:.1f}x faster")
    cfg = build_config(None, [f"workload.num_requests={args.requests}",
                              f"workload.arrival.rate={args.rate}",
                              f"scheduler.policy={args.policy}"])
    t0 = time.perf_counter()
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        result = prof.runcall(simulate, cfg)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    else:
        result = simulate(cfg)
    wall = time.perf_counter() - t0
    s = result.summary
    sim = s["simulator"]
    print(f"requests            {s['num_requests']:>12,}   completed {s['completed']:,}")
    print(f"simulated time      {s['duration_s']:>12,.1f} s")
    print(f"wall time           {wall:>12,.2f} s")
    print(f"requests / wall s   {s['num_requests'] / wall:>12,.0f}")
    print(f"steps / wall s      {sim['num_steps'] / wall:>12,.0f}   ({sim['num_steps']:,} steps)")
    print(f"events / wall s     {sim['num_events'] / wall:>12,.0f}   ({sim['num_events']:,} events)")
    print(f"simulated / wall    {s['duration_s'] / wall:>12,.1f}x real time")


if __name__ == "__main__":
    main()
