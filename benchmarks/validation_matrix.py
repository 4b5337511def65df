"""The CPU loop, scored: in-process validation (real engine against the simulator with a
calibration profile) for several scheduling policies at a light, a near-saturation and a
preempting load, with the engine's own run-to-run spread beside each error.

Why the spread: the engine's wall clock is the ground truth, and on a shared CPU two runs of the
same workload do not agree exactly. An error smaller than the spread is noise; an error well
above it is the simulator's. Each cell runs the engine ``--repeats`` times on the same requests
(same seed); the error is the simulator's prediction against the mean of the runs, and the
spread is the largest relative distance of a run from that mean.

    python benchmarks/validation_matrix.py --profile calibration/profiles/<this machine>.json
    python benchmarks/validation_matrix.py --profile P --policies chunked --loads light --repeats 1

The profile must be made on this machine (``kvplan calibrate``); a profile from another machine
prices another CPU's steps (validation.json then carries a warning, printed here).
Writes ``benchmarks/results/validation_matrix_<host>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The metrics the issue names: what a user reads first in a validation.
METRICS = ("request_throughput", "median_ttft_ms", "median_tpot_ms", "mean_e2el_ms", "median_e2el_ms")

#: name -> (rate req/s, KV pool MiB or None for the default 512 MiB). The preempting load shrinks
#: the pool until requests are preempted (352 tokens of SmolLM2 KV at 8 MiB).
LOADS = {
    "light": (1.0, None),
    "near-saturation": (2.5, None),
    "preempting": (2.5, 8.0),
}


def run_cell(profile: str, policy: str, rate: float, kv_mib: float | None, num_requests: int,
             seed: int, repeats: int, threads: int | None) -> dict:
    """One policy at one load: ``repeats`` engine runs of the same requests, one simulation."""
    from calibration.validate import run_validation

    runs = []
    warnings: list[str] = []
    t0 = time.perf_counter()
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            rec = run_validation(profile, rate, num_requests, tmp, seed=seed, policy=policy,
                                 kv_cache_bytes=None if kv_mib is None else int(kv_mib * 2**20),
                                 num_threads=threads)
        runs.append({m["name"]: m for m in rec["metrics"]})
        warnings = rec["source"].get("warnings", []) or warnings
    cell = {"policy": policy, "rate": rate, "kv_cache_mib": kv_mib, "num_requests": num_requests,
            "seed": seed, "repeats": repeats, "wall_s": time.perf_counter() - t0, "metrics": {},
            "warnings": warnings,
            "preemptions_real": [r.get("preemptions", {}).get("real") for r in runs],
            "preemptions_predicted": runs[0].get("preemptions", {}).get("predicted")}
    for name in METRICS:
        reals = [r[name]["real"] for r in runs if name in r]
        if not reals:
            continue
        real = statistics.fmean(reals)
        pred = runs[0][name]["predicted"]
        cell["metrics"][name] = {
            "real_runs": reals, "real": real, "predicted": pred,
            "error": (pred - real) / real if real else None,
            "spread": max(abs(x - real) for x in reals) / real if real and len(reals) > 1 else None,
        }
    return cell


def table(cells: list[dict]) -> str:
    head = "| policy | load | " + " | ".join(METRICS) + " |"
    lines = [head, "|---|---|" + "---:|" * len(METRICS)]
    for c in cells:
        row = [c["policy"], c["load"]]
        for name in METRICS:
            m = c["metrics"].get(name)
            if m is None or m["error"] is None:
                row.append("-")
                continue
            spread = "" if m["spread"] is None else f" (±{100 * m['spread']:.1f}%)"
            row.append(f"{100 * m['error']:+.1f}%{spread}")
        lines.append("| " + " | ".join(row) + " |")
    errs = [abs(m["error"]) for c in cells for m in c["metrics"].values() if m["error"] is not None]
    if errs:
        lines.append(f"\nmean absolute error {100 * statistics.fmean(errs):.1f}% over {len(errs)} "
                     f"metric cells; max {100 * max(errs):.1f}%")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True, help="Calibration profile made on this machine.")
    ap.add_argument("--policies", default="chunked,vllm_v0,static")
    ap.add_argument("--loads", default=",".join(LOADS), help=f"Comma-separated subset of {', '.join(LOADS)}.")
    ap.add_argument("--num-requests", type=int, default=48)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--repeats", type=int, default=2, help="Engine runs per cell (the spread needs 2+).")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None, help="Results JSON (default benchmarks/results/validation_matrix_<host>.json).")
    args = ap.parse_args()

    from sim.errors import KvplanError
    from sim.pricing.machine import machine_fingerprint

    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"validation_matrix_{platform.node() or 'host'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every cell: a long matrix interrupted keeps what it measured
        out.write_text(json.dumps({"machine": machine_fingerprint(with_gpus=False), "profile": args.profile,
                                   "cells": cells}, indent=2) + "\n")

    cells: list[dict] = []
    try:
        for policy in args.policies.split(","):
            for load in args.loads.split(","):
                if load not in LOADS:
                    raise SystemExit(f"error: --loads: unknown load {load!r} (known: {', '.join(LOADS)})")
                rate, kv = LOADS[load]
                cell = run_cell(args.profile, policy, rate, kv, args.num_requests, args.seed,
                                args.repeats, args.threads)
                cell["load"] = load
                cells.append(cell)
                save()
                print(f"{policy:8s} {load:16s} " + "  ".join(
                    f"{n} {100 * m['error']:+.1f}%" for n, m in cell["metrics"].items()
                    if m["error"] is not None) + f"  ({cell['wall_s']:.0f} s)", file=sys.stderr)
    except KvplanError as exc:
        raise SystemExit(f"error: {exc}") from None
    for w in sorted({w for c in cells for w in c["warnings"]}):
        print(f"warning: {w}", file=sys.stderr)
    print(table(cells))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
