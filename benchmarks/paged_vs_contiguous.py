"""The PagedAttention claim, reproduced in simulation (vLLM paper, Figure 2 and Section 6).

OPT-13B on one A100-40GB, max_model_len 2048, ShareGPT-like lengths (lognormal, means 161 in /
338 out), arrivals faster than any configuration can serve so requests always wait. Prints

1. the KV memory breakdown (token states, reserved, internal and external fragmentation, free)
   for contiguous reservation by max / pow2 / oracle and for paged blocks of 16, all under the
   same iteration-level (Orca) scheduler so only the allocator differs;
2. throughput of static batching, Orca, vLLM v0 and chunked prefill, as ratios to static.

Run: python benchmarks/paged_vs_contiguous.py [--requests N] [--rate R] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time

from rich.console import Console
from rich.table import Table

from sim.api import simulate

BASE = {
    "model": "opt-13b",
    "hardware": "a100-40gb",
    "dtype": "float16",
    "kv_cache": {"max_model_len": 2048, "block_size": 16, "gpu_memory_utilization": 0.9},
    "scheduler": {"max_num_seqs": 256},
    "workload": {
        "arrival": {"process": "poisson"},
        "input_len": {"dist": "lognormal", "mean": 161, "cv": 0.9, "max": 1024},
        "output_len": {"dist": "lognormal", "mean": 338, "cv": 0.6, "max": 1024},
    },
}

MEMORY_CASES = [
    ("Orca (Max)", {"kv_cache.allocator": "contiguous", "kv_cache.reserve": "max"}),
    ("Orca (Pow2)", {"kv_cache.allocator": "contiguous", "kv_cache.reserve": "pow2"}),
    ("Orca (Oracle)", {"kv_cache.allocator": "contiguous", "kv_cache.reserve": "oracle"}),
    ("vLLM (paged, block 16)", {"kv_cache.allocator": "paged"}),
]

THROUGHPUT_CASES = [
    ("static + contiguous(max)", {"scheduler.policy": "static", "kv_cache.allocator": "contiguous"}),
    ("orca + contiguous(max)", {"scheduler.policy": "orca", "kv_cache.allocator": "contiguous"}),
    ("orca + contiguous(oracle)", {"scheduler.policy": "orca", "kv_cache.allocator": "contiguous",
                                   "kv_cache.reserve": "oracle"}),
    ("vllm_v0 + paged", {"scheduler.policy": "vllm_v0", "kv_cache.allocator": "paged"}),
    ("chunked + paged", {"scheduler.policy": "chunked", "kv_cache.allocator": "paged"}),
]


def run(overrides: dict, n: int, rate: float, seed: int) -> dict:
    sets = [f"{k}={v}" for k, v in overrides.items()]
    sets += [f"workload.num_requests={n}", f"workload.arrival.rate={rate}"]
    return simulate(BASE, overrides=sets, seed=seed).summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=50.0, help="req/s; above capacity so requests wait")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()
    console = Console(width=140)
    results: dict = {"memory": {}, "throughput": {}}

    t = Table(title="KV memory while requests wait (OPT-13B, A100-40GB, ShareGPT-like; Orca scheduler)")
    for col in ("allocator", "token states", "reserved", "internal frag", "external frag", "free", "paper"):
        t.add_column(col, justify="right" if col != "allocator" else "left")
    paper = {"Orca (Max)": "20.4%", "Orca (Pow2)": "26.8%", "Orca (Oracle)": "38.2%", "vLLM (paged, block 16)": "96.3%"}
    for name, ov in MEMORY_CASES:
        s = run({"scheduler.policy": "orca", **ov}, args.requests, args.rate, args.seed)
        kv = s["kv_cache"]
        results["memory"][name] = kv
        t.add_row(name, *(f"{kv[k]:.1%}" for k in ("token_states", "reserved", "internal_fragmentation",
                                                   "external_fragmentation", "free")), paper[name])
    console.print(t)

    t = Table(title="Throughput against static batching (same requests, same GPU)")
    for col in ("scheduler + allocator", "req/s", "output tok/s", "x static", "mean batch", "preemptions", "sim wall s"):
        t.add_column(col, justify="right" if col != "scheduler + allocator" else "left")
    base = None
    for name, ov in THROUGHPUT_CASES:
        t0 = time.perf_counter()
        res = simulate(BASE, overrides=[f"{k}={v}" for k, v in ov.items()] + [
            f"workload.num_requests={args.requests}", f"workload.arrival.rate={args.rate}"], seed=args.seed)
        wall = time.perf_counter() - t0
        s = res.summary
        steps = res.steps
        dur = sum(steps["duration_s"]) or 1.0
        mean_batch = sum(b * d for b, d in zip(steps["batch_size"], steps["duration_s"])) / dur
        base = base or s["output_throughput"]
        results["throughput"][name] = {"request_throughput": s["request_throughput"],
                                       "output_throughput": s["output_throughput"],
                                       "ratio_to_static": s["output_throughput"] / base,
                                       "mean_batch_size": mean_batch}
        t.add_row(name, f"{s['request_throughput']:.2f}", f"{s['output_throughput']:.0f}",
                  f"{s['output_throughput'] / base:.1f}x", f"{mean_batch:.1f}",
                  str(s["kv_cache"]["preemptions"]), f"{wall:.1f}")
    console.print(t)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
