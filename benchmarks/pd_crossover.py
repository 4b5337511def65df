"""Disaggregated prefill/decode vs collocated serving at equal GPUs: where disaggregation starts
to pay (the DistServe / Splitwise effect) as prompts grow.

Deployment: 8 H100-SXM, Llama-3.1-8B fp16, TP 1, chunked prefill (vLLM v1 defaults:
max_num_batched_tokens 2048, max_num_seqs 256), steps priced by the measured H100 operator
tables (``cost_model.source`` auto; the roofline where ../shared/gpu_profiles is absent: the
output says which). Collocated: 8 replicas behind a least-outstanding router. Disaggregated:
prefill:decode splits 2:6, 3:5, 4:4, 5:3 (each instance one GPU), KV over InfiniBand NDR
(50 GB/s per GPU, 10 us a transfer), least-outstanding routers in both pools.

Workload: Poisson arrivals, fixed prompt length (256 ... 8192 tokens), 256 output tokens,
``30 x rate`` requests (at least 300, at most 3000). SLOs, per request: TTFT <= 100 ms +
0.1 ms per prompt token (126 ms at 256 tokens, 919 ms at 8192: about 4x an unloaded prefill at
long prompts), TPOT <= 15 ms (about twice an unloaded decode step here: tight).

Metric: **goodput per GPU = the highest request rate at which >= 90% of requests meet both
SLOs, over 8 GPUs** (DistServe's "per-GPU goodput"), found by doubling then bisecting the rate
to 3% (``capacity``). The crossover is the shortest prompt from which on the best split beats
collocated by more than 10% (at that length and every longer one: twice the search's
resolution plus noise, so that one lucky bracket does not make a crossover).

Run: python benchmarks/pd_crossover.py [--prompts 64 128 256 512 1024 2048 4096 8192] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sim.api import simulate

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NUM_GPUS = 8
OUTPUT_LEN = 256
TPOT_SLO_MS = 15.0
ATTAINMENT = 0.9
#: A split "beats" collocated only by more than twice the search's resolution (3%) plus noise:
#: two 3% brackets can differ by 6% with nothing behind it.
MARGIN = 0.10

BASE = ["model=llama-3.1-8b", "hardware=h100-sxm", "cost_model.source=auto",
        "scheduler.policy=chunked", "kv_cache.max_model_len=16384",
        "parallel.router=least_outstanding", f"slo.tpot_ms={TPOT_SLO_MS}"]

CASES = [("collocated 8", [f"parallel.num_replicas={NUM_GPUS}"])] + [
    (f"P/D {p}:{NUM_GPUS - p}", ["disaggregation.enabled=true", f"disaggregation.prefill_replicas={p}",
                                 f"disaggregation.decode_replicas={NUM_GPUS - p}",
                                 "disaggregation.link=infiniband"])
    for p in (2, 3, 4, 5)]


def ttft_slo_ms(prompt: int) -> float:
    return 100.0 + 0.1 * prompt


def run_at(prompt: int, sets: list[str], rate: float) -> dict:
    n = int(min(3000, max(300, 30 * rate)))
    s = simulate(None, overrides=BASE + sets + [
        f"workload.num_requests={n}", f"workload.arrival.rate={rate}",
        f"workload.input_len={{dist: fixed, mean: {prompt}}}",
        f"workload.output_len={{dist: fixed, mean: {OUTPUT_LEN}}}",
        f"slo.ttft_ms={ttft_slo_ms(prompt)}"]).summary
    out = {"rate": rate, "num_requests": n, "attainment": s["slo_attainment"],
           "p90_ttft_ms": s["p90_ttft_ms"], "p90_tpot_ms": s["p90_tpot_ms"],
           "cost_model": s["cost_model"]["source"]}
    d = s.get("disaggregation")
    if d:
        out.update(prefill_util=d["prefill"]["utilization"], decode_util=d["decode"]["utilization"],
                   transfer_mean_ms=d["transfer"]["mean_ms"],
                   wait_for_kv_ms=d["transfer"]["wait_for_kv_ms"]["mean"])
    return out


def capacity(prompt: int, name: str, sets: list[str]) -> dict:
    """Highest rate with attainment >= ATTAINMENT: bracket by doubling or halving from a guess,
    then bisect to 3%."""
    t0 = time.perf_counter()
    runs: list[dict] = []

    def ok(rate: float) -> bool:
        runs.append(run_at(prompt, sets, rate))
        return runs[-1]["attainment"] >= ATTAINMENT

    guess = NUM_GPUS * 15000.0 / (prompt + 1024)
    if ok(guess):
        good, bad = guess, guess * 2
        while ok(bad):
            good, bad = bad, bad * 2
    else:
        good, bad = guess / 2, guess
        while not ok(good):
            if good < 0.01:
                return {"prompt": prompt, "case": name, "max_rate": 0.0, "runs": runs,
                        "wall_s": time.perf_counter() - t0}
            good, bad = good / 2, good
    while bad - good > 0.03 * good:
        mid = (good + bad) / 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return {"prompt": prompt, "case": name, "max_rate": good, "runs": runs,
            "wall_s": time.perf_counter() - t0}


def _job(args):
    return capacity(*args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096, 8192])
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--json", default=str(RESULTS / "pd_crossover.json"))
    ap.add_argument("--md", default=str(RESULTS / "pd_crossover.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    jobs = [(p, name, sets) for p in args.prompts for name, sets in CASES]
    with ProcessPoolExecutor(args.jobs) as pool:
        found = list(pool.map(_job, jobs))
    by = {(f["prompt"], f["case"]): f for f in found}
    names = [name for name, _ in CASES]
    head = ("prompt tokens", "TTFT SLO ms", *[f"{n} goodput/GPU" for n in names], "best", "best / collocated")
    table = Table(title=f"P/D crossover: Llama-3.1-8B, {NUM_GPUS} x H100-SXM, output {OUTPUT_LEN}, "
                        f"TPOT <= {TPOT_SLO_MS:g} ms, >= {ATTAINMENT:.0%} attainment (req/s per GPU)")
    for col in head:
        table.add_column(col, justify="right")
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    crossover = None
    rows = []
    for p in args.prompts:
        per = {n: by[(p, n)]["max_rate"] / NUM_GPUS for n in names}
        pd_best = max(names[1:], key=lambda n: per[n])
        ratio = per[pd_best] / per[names[0]] if per[names[0]] else float("inf")
        if ratio > 1.0 + MARGIN:
            crossover = p if crossover is None else crossover
        else:
            crossover = None  # a longer prompt must keep the lead for the lead to count
        rows.append({"prompt": p, "ttft_slo_ms": ttft_slo_ms(p), "goodput_per_gpu": per,
                     "best_split": pd_best, "best_over_collocated": ratio})
        cells = (f"{p:,}", f"{ttft_slo_ms(p):.0f}", *[f"{per[n]:.3f}" for n in names],
                 pd_best, f"{ratio:.2f}x")
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    console = Console(width=180)
    console.print(table)
    wall = time.perf_counter() - t0
    pricers = ", ".join(sorted({r["cost_model"] for f in found for r in f["runs"]}))
    console.print(f"crossover (shortest prompt from which P/D beats collocated by > {MARGIN:.0%}): {crossover}; "
                  f"priced by {pricers}; {sum(len(f['runs']) for f in found)} simulations in {wall:.0f} s")
    machine = {"platform": platform.platform(), "python": platform.python_version(),
               "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
               "jobs": args.jobs}
    results = {"deployment": BASE, "num_gpus": NUM_GPUS, "output_len": OUTPUT_LEN,
               "tpot_slo_ms": TPOT_SLO_MS, "attainment": ATTAINMENT,
               "ttft_slo": "100 ms + 0.1 ms per prompt token", "cases": dict(CASES),
               "rows": rows, "crossover_prompt": crossover, "searches": found,
               "cost_model": pricers, "wall_s": wall, "machine": machine}
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    text = [
        "# P/D crossover (benchmarks/pd_crossover.py)",
        "",
        f"Llama-3.1-8B fp16 on {NUM_GPUS} x H100-SXM (TP 1; steps priced by: {pricers}), chunked "
        f"prefill, Poisson arrivals, fixed prompt length, {OUTPUT_LEN} output tokens. SLOs: TTFT "
        f"<= 100 ms + 0.1 ms per prompt token, TPOT <= {TPOT_SLO_MS:g} ms. Goodput per GPU: the "
        f"highest rate with >= {ATTAINMENT:.0%} of requests inside both SLOs (doubling, then "
        f"bisection to 3%), over {NUM_GPUS} GPUs. P/D p:d: p prefill and d decode instances of one "
        "GPU, KV over InfiniBand NDR (50 GB/s per GPU, 10 us). Crossover (the shortest prompt from "
        f"which on the best split beats collocated by > {MARGIN:.0%}, at it and every longer "
        f"prompt): **{crossover}**.",
        "",
        *md,
        "",
        f"Command: `python benchmarks/pd_crossover.py` ({wall:.0f} s, {args.jobs} processes, "
        f"{machine['cpus']} CPUs: {machine['processor']}, {machine['platform']}, "
        f"Python {machine['python']}).",
        "",
    ]
    Path(args.md).write_text("\n".join(text))


if __name__ == "__main__":
    main()
