"""KV offload tiers: what a CPU DRAM tier, and an SSD tier under it, add to a GPU prefix cache.

Workload: the Mooncake synthetic trace (../shared/traces/mooncake_synthetic_trace.jsonl, 512-token
prefix hash ids), its last 993 rows (3000-3992, about 4 minutes of the trace), arrivals rebased
to 0 and replayed ``--time-scale`` times slower. That slice is where the trace's reuse is: 68% of
its prompt blocks repeat a prefix seen earlier in the slice (mean prompt 20k tokens; the whole
trace's first thousand rows reuse only 17%). A subset, so that six runs finish in well under a
minute on a 2-core machine.

Deployment: Llama-3.1-8B on one H100-SXM, chunked prefill, prefix caching, vLLM's defaults,
steps priced by the measured H100 operator tables (``cost_model.source`` auto; the roofline
where ../shared/gpu_profiles is absent: the output says which); the
GPU KV pool holds about 455k tokens (28k blocks of 16): some 22 prompts, while the slice's
distinct prefix blocks are 6.5M tokens. Tiers (per GPU): CPU DRAM 256 GiB at the H100's PCIe
(64 GB/s), local SSD 2 TB (2000 GiB) at 6 GB/s. A load back is priced into the step that admits
the request (``docs/cluster.md``, KV offload tiers).

Run: python benchmarks/offload_tiers.py [--time-scale 3 2] [--json PATH] [--md PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.api import simulate
from sim.policies.request import Request
from sim.workload import build_requests

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
RESULTS = ROOT / "benchmarks" / "results"
FIRST_ROW, END_ROW = 3000, 3993

BASE = ["model=llama-3.1-8b", "hardware=h100-sxm", "cost_model.source=auto",
        "scheduler.policy=chunked", "kv_cache.prefix_caching=true", "kv_cache.max_model_len=131072"]

CASES = [
    ("GPU only", []),
    ("+ CPU 256 GiB", ["kv_cache.cpu_offload_gb=256"]),
    ("+ CPU 256 GiB + SSD 2 TB", ["kv_cache.cpu_offload_gb=256", "kv_cache.ssd_offload_gb=2000"]),
]


def workload(time_scale: float) -> list[Request]:
    """Rows FIRST_ROW..END_ROW-1 of the Mooncake trace, rebased to t=0, ``time_scale`` slower."""
    rows = build_requests({"trace": str(TRACE)}, 0)[FIRST_ROW:END_ROW]
    t0 = rows[0].arrival_time
    return [Request(r.request_id, (r.arrival_time - t0) * time_scale, r.prompt_len,
                    r.max_output_tokens, block_hashes=r.block_hashes,
                    hash_block_size=r.hash_block_size) for r in rows]


def run_case(sets: list[str], reqs: list[Request]) -> dict:
    t = time.perf_counter()
    s = simulate(None, overrides=BASE + sets, requests=reqs).summary
    wall = time.perf_counter() - t
    kv = s["kv_cache"]
    off = kv.get("offload", {})
    tiers = off.get("tiers", [])
    row = {
        "completed": s["completed"], "rejected": s["rejected"],
        "prefix_cache_hit_rate": kv["prefix_cache_hit_rate"],
        "hit_rate": {"gpu": off["gpu"]["hit_rate"] if off else kv["prefix_cache_hit_rate"],
                     **{t: off[t]["hit_rate"] for t in tiers}},
        "mean_ttft_ms": s["mean_ttft_ms"], "p99_ttft_ms": s["p99_ttft_ms"],
        "mean_tpot_ms": s["mean_tpot_ms"],
        "output_throughput": s["output_throughput"],
        "total_token_throughput": s["total_token_throughput"],
        "duration_s": s["duration_s"], "preemptions": kv["preemptions"],
        "loaded_gb": {t: off[t]["loaded_gb"] for t in tiers},
        "load_s": {t: off[t]["load_s"] for t in tiers},
        "num_gpu_blocks": s["num_gpu_blocks"], "cost_model": s["cost_model"]["source"],
        "sim_wall_s": wall,
    }
    if off:
        row["offload"] = off
    return row


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-scale", type=float, nargs="+", default=[3.0, 2.0],
                    help="replay the trace slice this many times slower (one table row group each)")
    ap.add_argument("--json", default=str(RESULTS / "offload_tiers.json"))
    ap.add_argument("--md", default=str(RESULTS / "offload_tiers.md"))
    args = ap.parse_args()
    console = Console(width=160)
    results: dict = {"trace": "mooncake_synthetic_trace.jsonl", "rows": [FIRST_ROW, END_ROW - 1],
                     "deployment": BASE, "cases": {}}
    head = ("trace replay", "tiers", "hit rate", "gpu / cpu / ssd hits", "mean TTFT s",
            "p99 TTFT s", "output tok/s", "total tok/s", "loaded GB cpu / ssd",
            "load s cpu / ssd", "sim s")
    table = Table(title=f"KV offload tiers: Mooncake rows {FIRST_ROW}-{END_ROW - 1}, "
                        "Llama-3.1-8B on one H100-SXM, chunked prefill + prefix caching")
    for col in head:
        table.add_column(col, justify="left" if col in ("trace replay", "tiers") else "right")
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for scale in args.time_scale:
        reqs = workload(scale)
        for name, sets in CASES:
            r = run_case(sets, reqs)
            results["cases"][f"{scale:g}x slower / {name}"] = {"time_scale": scale, "sets": sets, **r}
            hr = r["hit_rate"]
            cells = (
                f"{scale:g}x slower", name, _pct(r["prefix_cache_hit_rate"]),
                " / ".join(_pct(hr.get(t)) for t in ("gpu", "cpu", "ssd")),
                f"{r['mean_ttft_ms'] / 1000:.2f}", f"{r['p99_ttft_ms'] / 1000:.2f}",
                f"{r['output_throughput']:.0f}", f"{r['total_token_throughput']:,.0f}",
                " / ".join(f"{r['loaded_gb'][t]:.0f}" if t in r["loaded_gb"] else "-"
                           for t in ("cpu", "ssd")),
                " / ".join(f"{r['load_s'][t]:.1f}" if t in r["load_s"] else "-"
                           for t in ("cpu", "ssd")),
                f"{r['sim_wall_s']:.1f}",
            )
            table.add_row(*cells)
            md.append("| " + " | ".join(cells) + " |")
    console.print(table)
    pricers = ", ".join(sorted({c["cost_model"] for c in results["cases"].values()}))
    done = ", ".join(sorted({f"{c['completed']} / {c['rejected']}" for c in results["cases"].values()}))
    console.print(f"steps priced by: {pricers}")
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    text = [
        "# KV offload tiers (benchmarks/offload_tiers.py)",
        "",
        f"Mooncake synthetic trace, rows {FIRST_ROW}-{END_ROW - 1} ({END_ROW - FIRST_ROW} requests, "
        "68% of prompt blocks reuse a prefix seen earlier in the slice), arrivals replayed "
        f"slower as shown; Llama-3.1-8B fp16 on one H100-SXM (steps priced by: {pricers}), chunked "
        "prefill, prefix caching, block 16. Tiers per GPU: CPU DRAM 256 GiB at 64 GB/s (PCIe), "
        "SSD 2 TB at 6 GB/s. Hit rates are of prompt tokens at first admission and add up per "
        "tier; loaded GB counts every load back (re-admissions too); load s is loaded bytes "
        "over the tier's bandwidth (the step pricer also applies its PCIe efficiency). "
        f"Completed / rejected in every run: {done} (rejected: prompts of 191k tokens, over "
        "max_model_len 131072).",
        "",
        *md,
        "",
        "Command: `python benchmarks/offload_tiers.py` (defaults: `--time-scale 3 2`).",
        "",
    ]
    Path(args.md).write_text("\n".join(text))


if __name__ == "__main__":
    main()
