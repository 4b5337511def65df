"""Routing across replicas: prefix-aware vs load-only routers, on Mooncake and on conversations.

Part 1, the Mooncake synthetic trace (../shared/traces/mooncake_synthetic_trace.jsonl, all 3,993
requests over about 17 minutes, 512-token prefix hash ids; 64% of its prompt blocks repeat a
prefix seen before), replayed at its own timing and ``--time-scale`` times that (0.75 = a third
more traffic). The trace has no session ids, so session affinity has nothing to keep there.

Part 2, conversations (``workload.sessions``): chats starting as a Poisson process at
``--session-rate`` per second for ``--session-window`` seconds (20/s: 1,000 sessions, a light
load; 40/s: 2,000, past what the pool holds), ShareGPT-like first turns, 2-10 turns each, every
turn re-sending the conversation so far plus a new message (lognormal, mean 300 tokens), 10 s
mean think time. Here the load-only and prefix-aware routers also run with session affinity.

Deployment: 4 replicas of Llama-3.1-8B, one H100-SXM each, chunked prefill, prefix caching,
vLLM's defaults, steps priced by the measured H100 operator tables (``cost_model.source`` auto;
the roofline where ../shared/gpu_profiles is absent: the output says which). Routers
(docs/cluster.md, Routing across replicas): round_robin, least_outstanding, least_kv and
prefix_aware (llm-d's scorer weights 3 / 2 / 2).

Run: python benchmarks/routing_mooncake.py [--time-scale 1 0.75] [--session-rate 20 40]
     [--session-window 50]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
NUM_REPLICAS = 4

BASE = ["model=llama-3.1-8b", "hardware=h100-sxm", "cost_model.source=auto",
        "scheduler.policy=chunked", "kv_cache.prefix_caching=true",
        f"parallel.num_replicas={NUM_REPLICAS}"]
MOONCAKE = BASE + ["kv_cache.max_model_len=131072"]
CHAT = BASE + ["kv_cache.max_model_len=32768"]
SESSIONS = ("{num_turns: {dist: uniform, min: 2, max: 10}, think_time_s: {dist: exponential, "
            "mean: 10}, new_message_len: {dist: lognormal, mean: 300, cv: 1}}")

ROUTERS = ["round_robin", "least_outstanding", "least_kv", "prefix_aware"]
#: (label, router, session affinity)
MOONCAKE_CASES = [(r, r, False) for r in ROUTERS]
CHAT_CASES = MOONCAKE_CASES + [(f"{r} + affinity", r, True)
                               for r in ("least_outstanding", "prefix_aware")]


def mooncake(time_scale: float) -> list[Request]:
    """Every row of the Mooncake trace, arrival times multiplied by ``time_scale``."""
    rows = build_requests({"trace": str(TRACE)}, 0)
    return [Request(r.request_id, r.arrival_time * time_scale, r.prompt_len, r.max_output_tokens,
                    block_hashes=r.block_hashes, hash_block_size=r.hash_block_size) for r in rows]


def run_case(sets: list[str], requests=None) -> dict:
    t = time.perf_counter()
    s = simulate(None, overrides=sets, requests=requests).summary
    wall = time.perf_counter() - t
    row = {
        "completed": s["completed"], "rejected": s["rejected"],
        "prefix_cache_hit_rate": s["kv_cache"]["prefix_cache_hit_rate"],
        "mean_ttft_ms": s["mean_ttft_ms"], "p99_ttft_ms": s["p99_ttft_ms"],
        "mean_tpot_ms": s["mean_tpot_ms"], "request_throughput": s["request_throughput"],
        "output_throughput": s["output_throughput"],
        "total_token_throughput": s["total_token_throughput"],
        "duration_s": s["duration_s"], "preemptions": s["kv_cache"]["preemptions"],
        "cost_model": s["cost_model"]["source"], "sim_wall_s": wall,
    }
    if "sessions" in s:
        row["sessions"] = s["sessions"]
    return row


def machine() -> dict:
    """Where the benchmark ran (simulated results do not depend on it; its wall times do)."""
    return {"node": platform.node(), "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform()}


def _cells(group: str, label: str, r: dict) -> tuple[str, ...]:
    return (group, label, f"{r['prefix_cache_hit_rate']:.1%}", f"{r['mean_ttft_ms']:,.0f}",
            f"{r['p99_ttft_ms']:,.0f}", f"{r['mean_tpot_ms']:.1f}", f"{r['output_throughput']:,.0f}",
            f"{r['total_token_throughput']:,.0f}", f"{r['completed']} / {r['rejected']}",
            f"{r['sim_wall_s']:.1f}")


HEAD = ("workload", "router", "hit rate", "mean TTFT ms", "p99 TTFT ms", "mean TPOT ms",
        "output tok/s", "total tok/s", "done / rejected", "sim s")


def _table(title: str, rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=title)
    for col in HEAD:
        table.add_column(col, justify="left" if col in ("workload", "router") else "right")
    for cells in rows:
        table.add_row(*cells)
    return table


def _md(rows: list[tuple[str, ...]]) -> list[str]:
    return ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD),
            *("| " + " | ".join(cells) + " |" for cells in rows)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-scale", type=float, nargs="+", default=[1.0, 0.75],
                    help="multiply the Mooncake trace's arrival times (one row group each)")
    ap.add_argument("--session-rate", type=float, nargs="+", default=[20.0, 40.0],
                    help="conversations started per second (one row group each)")
    ap.add_argument("--session-window", type=float, default=50.0,
                    help="seconds over which conversations start (rate x window sessions)")
    ap.add_argument("--json", default=str(RESULTS / "routing_mooncake.json"))
    ap.add_argument("--md", default=str(RESULTS / "routing_mooncake.md"))
    args = ap.parse_args()
    console = Console(width=170)
    started = time.perf_counter()
    results: dict = {"machine": machine(), "num_replicas": NUM_REPLICAS,
                     "mooncake": {"trace": TRACE.name, "deployment": MOONCAKE, "cases": {}},
                     "conversations": {"deployment": CHAT, "sessions": SESSIONS,
                                       "session_window_s": args.session_window, "cases": {}}}
    moon_rows: list[tuple[str, ...]] = []
    for scale in args.time_scale:
        reqs = mooncake(scale)
        group = f"Mooncake x{scale:g} time"
        for label, router, affinity in MOONCAKE_CASES:
            r = run_case(MOONCAKE + [f"parallel.router={router}"], reqs)
            results["mooncake"]["cases"][f"{group} / {label}"] = {
                "time_scale": scale, "router": router, "session_affinity": affinity, **r}
            moon_rows.append(_cells(group, label, r))
            console.print(" | ".join(moon_rows[-1]))
    chat_rows: list[tuple[str, ...]] = []
    for rate in args.session_rate:
        num_sessions = max(1, round(rate * args.session_window))
        work = [f"workload.num_requests={num_sessions}", f"workload.arrival.rate={rate:g}",
                f"workload.sessions={SESSIONS}"]
        group = f"chat {rate:g}/s, {num_sessions} sessions"
        for label, router, affinity in CHAT_CASES:
            r = run_case(CHAT + work + [f"parallel.router={router}",
                                        f"parallel.session_affinity={str(affinity).lower()}"])
            results["conversations"]["cases"][f"{group} / {label}"] = {
                "session_rate": rate, "num_sessions": num_sessions, "router": router,
                "session_affinity": affinity, **r}
            chat_rows.append(_cells(group, label, r))
            console.print(" | ".join(chat_rows[-1]))
    console.print(_table(f"Mooncake trace, {NUM_REPLICAS} x Llama-3.1-8B on H100-SXM", moon_rows))
    console.print(_table(f"Conversations, {NUM_REPLICAS} x Llama-3.1-8B on H100-SXM", chat_rows))
    every = [*results["mooncake"]["cases"].values(), *results["conversations"]["cases"].values()]
    pricers = ", ".join(sorted({c["cost_model"] for c in every}))
    results["wall_s"] = time.perf_counter() - started
    console.print(f"steps priced by: {pricers}; {results['wall_s']:.0f} s on "
                  f"{results['machine']['cpus']} CPUs")
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    m = results["machine"]
    text = [
        "# Routing across replicas (benchmarks/routing_mooncake.py)",
        "",
        f"{NUM_REPLICAS} replicas of Llama-3.1-8B fp16, one H100-SXM each (steps priced by: "
        f"{pricers}), chunked prefill, prefix caching (block 16, about 455k KV tokens per "
        "replica), vLLM's defaults. Hit rate: prompt tokens found in the chosen replica's prefix "
        "cache at first admission. prefix_aware: llm-d's weighted scorers, 3 x cached prompt "
        "fraction + 2 x min-max normalised queue + 2 x free KV (docs/cluster.md).",
        "",
        f"## Mooncake synthetic trace (all {len(mooncake(1.0))} requests, about 17 minutes)",
        "",
        "Arrival times multiplied by the factor shown (x0.75: a third more traffic). The trace "
        "has no session ids, so session affinity changes nothing there and is not shown.",
        "",
        *_md(moon_rows),
        "",
        "## Conversations",
        "",
        "`workload.sessions` " + SESSIONS + "; ShareGPT-like first turns, sessions starting as a "
        f"Poisson process at the rate shown for {args.session_window:g} s; max_model_len 32768. "
        "`+ affinity`: "
        "`parallel.session_affinity=true` (SGLang's imbalance thresholds 64 / 1.5).",
        "",
        *_md(chat_rows),
        "",
        f"Ran on {m['node']} ({m['processor']}, {m['cpus']} CPUs, Python {m['python']}) in "
        f"{results['wall_s']:.0f} s; the simulated numbers do not depend on the machine.",
        "",
        "Command: `python benchmarks/routing_mooncake.py` (defaults: `--time-scale 1 0.75 "
        "--session-rate 20 40 --session-window 50`).",
        "",
    ]
    Path(args.md).write_text("\n".join(text))


if __name__ == "__main__":
    main()
