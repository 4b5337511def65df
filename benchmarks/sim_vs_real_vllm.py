"""kvplan against real vLLM 0.15.1 runs on H100 (../shared/real_runs): every run, every load stage.

Per stage: real, predicted and signed error for mean/p90/p99 E2E, mean/p90 TTFT and TPOT
(``(mean E2E - mean TTFT) / (output_len - 1)`` on both sides); overall mean absolute percentage
error over the stages not overloaded for real (E2E mean, TTFT mean, TPOT); the overloaded stages
checked for a predicted overload instead; seconds per simulation. Nothing here is fitted: the
runs are a check. MoE runs (Mixtral) are listed as skipped until MoE is modelled.

    .venv/bin/python benchmarks/sim_vs_real_vllm.py [--source roofline|operator_tables|auto]
        [--runs DIR] [--stage-seconds S] [--out benchmarks/results/sim_vs_real_vllm.json]

Writes the JSON and prints a markdown table for the README.

With ``--lomo``: the same runs calibrated as ``kvplan calibrate --real`` does
(``calibration.real_fit``: step_scale and request_overhead_ms), each model's stages predicted
by a fit on the OTHER models' runs only (leave-one-model-out), beside the uncalibrated pricer;
JSON into benchmarks/results/sim_vs_real_vllm_lomo.json, and with ``--profile-out`` the profile
fitted on all runs (calibration/profiles/vllm-0.15.1_h100_real.json):

    .venv/bin/python benchmarks/sim_vs_real_vllm.py --lomo \
        --profile-out calibration/profiles/vllm-0.15.1_h100_real.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.real_runs import read_run  # noqa: E402
from calibration.validate_real import ModelNotModelled, compare_run  # noqa: E402
from sim.errors import KvplanError  # noqa: E402

DEFAULT_RUNS = ROOT.parent / "shared" / "real_runs" / "vllm_0.15.1_h100"
SHOWN = ("mean_e2el_ms", "p90_e2el_ms", "p99_e2el_ms", "mean_ttft_ms", "p90_ttft_ms", "mean_tpot_ms")
MAPE_OF = ("mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    ap.add_argument("--source", default="auto", choices=("auto", "roofline", "operator_tables"))
    ap.add_argument("--stage-seconds", type=float, default=None,
                    help="simulate at most this much of each stage (default: whole stages)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None,
                    help="default benchmarks/results/sim_vs_real_vllm.json (auto) or _<source>.json")
    ap.add_argument("--lomo", action="store_true",
                    help="calibrate leave-one-model-out and print the held-out errors beside the uncalibrated ones")
    ap.add_argument("--profile-out", type=Path, default=None,
                    help="with --lomo: also write the profile fitted on all runs here")
    ap.add_argument("--fit-frontend", action="store_true",
                    help="fit the API server's per-request term (engine.frontend_request_ms) leave-one-model-out "
                         "and print each model's held-out TTFT/E2E error (sim.catalog.frontends)")
    args = ap.parse_args(argv)
    if not args.runs.is_dir():
        print(f"{args.runs}: not found (the shared runs)", file=sys.stderr)
        return 2
    if args.lomo:
        return lomo(args)
    if args.fit_frontend:
        return fit_frontend(args)
    out = args.out or ROOT / "benchmarks" / "results" / (
        "sim_vs_real_vllm.json" if args.source == "auto" else f"sim_vs_real_vllm_{args.source}.json")
    rows, skipped, runs_out = [], [], []
    for folder in sorted(p for p in args.runs.iterdir() if p.is_dir()):
        run = read_run(folder)
        try:
            t0 = time.perf_counter()
            cmp = compare_run(run, seed=args.seed, stage_seconds=args.stage_seconds, cost_source=args.source)
            wall = time.perf_counter() - t0
        except ModelNotModelled as exc:
            skipped.append({"run": folder.name, "reason": str(exc)})
            continue
        except KvplanError as exc:
            skipped.append({"run": folder.name, "reason": f"error: {exc}"})
            continue
        src = cmp.source()
        runs_out.append({"run": folder.name, "pricer": src["pricer"], "pricer_description": src["pricer_description"],
                         "known_error": src["known_error"], "num_gpu_blocks": src["num_gpu_blocks"],
                         "sim_seconds": cmp.sim_seconds, "wall_seconds": wall,
                         "num_requests": sum(s.stage.num_requests for s in cmp.stages), "notes": src["notes"]})
        for sc in cmp.stages:
            row = {"run": folder.name, "stage": sc.index, "rate": sc.stage.rate,
                   "num_requests": sc.stage.num_requests, "overloaded_real": sc.overloaded_real,
                   "overloaded_predicted": sc.overloaded_predicted, "scored": sc.scored,
                   "pricer": src["pricer"], "sim_seconds": cmp.sim_seconds}
            for name in SHOWN + ("request_throughput",):
                r, p = sc.real.get(name), sc.predicted.get(name)
                row[name] = {"real": r, "predicted": p,
                             "error": None if r in (None, 0) or p is None else (p - r) / r}
            rows.append(row)
    scored = [r for r in rows if r["scored"]]
    mape = {m: _mape([r[m]["error"] for r in scored]) for m in MAPE_OF}
    over = [r for r in rows if r["overloaded_real"]]
    result = {
        "source": args.source, "runs_dir": str(args.runs), "stage_seconds": args.stage_seconds,
        "seed": args.seed, "num_stages_scored": len(scored),
        "mape": mape,
        "overloaded_stages": [{"run": r["run"], "stage": r["stage"], "predicted_overloaded": r["overloaded_predicted"]}
                              for r in over],
        "overload_detected": f"{sum(r['overloaded_predicted'] for r in over)}/{len(over)}",
        "false_overload": [f"{r['run']} stage {r['stage']}" for r in scored if r["overloaded_predicted"]],
        "runs": runs_out, "stages": rows, "skipped": skipped,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if args.out is None and args.stage_seconds is None:
        record_step_error(result)
    print(markdown(result))
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


def record_step_error(result: dict) -> None:
    """The operator-table pricer's measured whole-run error per GPU, for ``summary.json``'s
    ``cost_model.known_error.step_vs_real`` (read by ``sim.pricing.operator_tables``): written
    only by a full run of this benchmark, from the stages it scored."""
    from sim.pricing.operator_tables import STEP_ERROR_FILE

    gpus = {r["known_error"].get("gpu") for r in result["runs"] if r["pricer"] == "operator_tables"
            and isinstance(r.get("known_error"), dict)}
    gpus.discard(None)
    if not gpus or any(r["pricer"] != "operator_tables" for r in result["runs"]):
        return
    entry = {"runs": f"{len(result['runs'])} vLLM 0.15.1 runs, {result['num_stages_scored']} load stages "
                     f"(../shared/real_runs), whole stages, seed {result['seed']}",
             "mean_e2el_mape": result["mape"]["mean_e2el_ms"],
             "mean_ttft_mape": result["mape"]["mean_ttft_ms"],
             "mean_tpot_mape": result["mape"]["mean_tpot_ms"],
             "overload_detected": result["overload_detected"],
             "measured_by": "benchmarks/sim_vs_real_vllm.py"}
    try:
        data = json.loads(STEP_ERROR_FILE.read_text())
    except (OSError, ValueError):
        data = {}
    for gpu in gpus:
        data[gpu] = entry
    STEP_ERROR_FILE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _mape(errors) -> float | None:
    vals = [abs(e) for e in errors if e is not None]
    return sum(vals) / len(vals) if vals else None


def _short(run: str) -> str:
    return "-".join(run.split("-")[2:])


def markdown(res: dict) -> str:
    head = ("| run | stage | req/s | E2E mean real / pred | p90 | p99 | TTFT mean real / pred | p90 | "
            "TPOT real / pred | overloaded real / pred | sim s |")
    lines = [head, "|---" * 11 + "|"]
    for r in res["stages"]:
        def cell(m, digits=0):
            v = r[m]
            if v["real"] is None or v["predicted"] is None:
                return "-"
            err = "" if v["error"] is None else f" ({100 * v['error']:+.0f}%)"
            return f"{v['real']:,.{digits}f} / {v['predicted']:,.{digits}f}{err}" if r["scored"] else \
                f"{v['real']:,.{digits}f} / {v['predicted']:,.{digits}f}"
        lines.append(f"| {_short(r['run'])} | {r['stage']} | {r['rate']:g} | {cell('mean_e2el_ms')} | "
                     f"{cell('p90_e2el_ms')} | {cell('p99_e2el_ms')} | {cell('mean_ttft_ms', 1)} | "
                     f"{cell('p90_ttft_ms', 1)} | {cell('mean_tpot_ms', 1)} | "
                     f"{'yes' if r['overloaded_real'] else 'no'} / {'yes' if r['overloaded_predicted'] else 'no'} | "
                     f"{r['sim_seconds']:.1f} |")
    m = res["mape"]
    fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    lines.append("")
    lines.append(f"Pricer `{res['source']}`; MAPE over {res['num_stages_scored']} stages not overloaded for real: "
                 f"E2E mean {fmt(m['mean_e2el_ms'])}, TTFT mean {fmt(m['mean_ttft_ms'])}, TPOT {fmt(m['mean_tpot_ms'])}. "
                 f"Overloaded stages predicted overloaded: {res['overload_detected']}."
                 + (f" Predicted overloaded but real was not: {', '.join(res['false_overload'])}." if res["false_overload"] else ""))
    for s in res["skipped"]:
        lines.append(f"Skipped {_short(s['run'])}: {s['reason'].split(': ', 1)[-1]}")
    return "\n".join(lines)


def lomo(args) -> int:
    """Leave-one-model-out calibration over the runs (``calibration.real_fit``)."""
    from calibration.real_fit import REPORT_METRICS, calibrate_real

    t0 = time.perf_counter()
    res = calibrate_real([args.runs], seed=args.seed, stage_seconds=args.stage_seconds,
                         cost_source=args.source,
                         on_simulation=lambda name, scale: print(f"  {time.perf_counter() - t0:6.0f} s: "
                                                                 f"{_short(name)} x{scale:g}", file=sys.stderr))
    for info in res.runs:  # paths relative to the repository, as the docs cite them
        info["run"] = _repo_relative(info["run"])
    summary = res.summary()
    result = {
        "source": args.source, "base": res.base, "runs_dir": _repo_relative(str(args.runs)),
        "stage_seconds": args.stage_seconds,
        "seed": args.seed, "held_out_by": res.held_out_by,
        "fitted_on_all": {"step_scale": res.fit.step_scale, "request_overhead_ms": res.fit.request_overhead_ms},
        "num_stages_scored": len(res.stages),
        "mape": {"lomo": res.mape("heldout"), "uncalibrated": res.mape("uncalibrated"),
                 "fitted_in_sample": res.mape("fitted")},
        "per_model": summary["per_model"], "folds": summary["folds"], "stages": res.stages,
        "skipped": res.skipped, "num_simulations": res.num_simulations,
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    out = args.out or ROOT / "benchmarks" / "results" / "sim_vs_real_vllm_lomo.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if args.profile_out is not None:
        res.to_profile().save(args.profile_out)
        print(f"wrote {args.profile_out}", file=sys.stderr)
    print(lomo_markdown(result, REPORT_METRICS))
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


def fit_frontend(args) -> int:
    """The API server's per-request term, fitted leave-one-model-out.

    Each run is simulated once with the front end's per-request term at 0 (its measured per-token
    terms kept). The term shifts each request's arrival at the scheduler by a constant, so at
    these loads it adds itself to mean TTFT and E2E; the value minimising the squared relative TTFT
    error over a set of stages is then closed-form: sum((real - pred) / real^2) / sum(1 / real^2).
    Each model's stages are predicted with the value fitted on the other models' stages; the value
    fitted on all of them is what ``sim.catalog.frontends`` ships (rerun the plain benchmark to
    check it through the simulator)."""
    t0 = time.perf_counter()
    stages = []
    for folder in sorted(p for p in args.runs.iterdir() if p.is_dir()):
        run = read_run(folder)
        try:
            cmp = compare_run(run, seed=args.seed, stage_seconds=args.stage_seconds, cost_source=args.source,
                              overrides=["engine.frontend_request_ms=0"])
        except (ModelNotModelled, KvplanError) as exc:
            print(f"skipped {folder.name}: {exc}", file=sys.stderr)
            continue
        print(f"  {time.perf_counter() - t0:6.0f} s: {_short(folder.name)}", file=sys.stderr)
        for sc in cmp.stages:
            if not sc.scored:
                continue
            stages.append({"run": folder.name, "model": str(run.model), "stage": sc.index, "rate": sc.stage.rate,
                           **{m: {"real": sc.real.get(m), "predicted": sc.predicted.get(m)}
                              for m in ("mean_ttft_ms", "mean_e2el_ms")}})

    def fit(rows) -> float:
        real = [r["mean_ttft_ms"]["real"] for r in rows]
        pred = [r["mean_ttft_ms"]["predicted"] for r in rows]
        return max(0.0, sum((a - b) / a ** 2 for a, b in zip(real, pred)) / sum(1 / a ** 2 for a in real))

    def err(r, m, c):
        return (r[m]["predicted"] + c - r[m]["real"]) / r[m]["real"]

    models = sorted({r["model"] for r in stages})
    folds, heldout = [], {}
    for model in models:
        c = fit([r for r in stages if r["model"] != model])
        mine = [r for r in stages if r["model"] == model]
        folds.append({"held_out": model, "request_ms": c, "stages": len(mine),
                      "ttft_mape": _mape([err(r, "mean_ttft_ms", c) for r in mine]),
                      "e2el_mape": _mape([err(r, "mean_e2el_ms", c) for r in mine]),
                      "ttft_mape_without": _mape([err(r, "mean_ttft_ms", 0.0) for r in mine])})
        for r in mine:
            heldout[(r["run"], r["stage"])] = c
    c_all = fit(stages)
    result = {
        "what": "engine.frontend_request_ms fitted leave-one-model-out on the runs' mean TTFT",
        "runs_dir": _repo_relative(str(args.runs)), "seed": args.seed, "stage_seconds": args.stage_seconds,
        "request_ms_fitted_on_all": c_all, "folds": folds, "num_stages": len(stages),
        "mape": {"lomo": {"mean_ttft_ms": _mape([err(r, "mean_ttft_ms", heldout[(r["run"], r["stage"])]) for r in stages]),
                          "mean_e2el_ms": _mape([err(r, "mean_e2el_ms", heldout[(r["run"], r["stage"])]) for r in stages])},
                 "without_request_term": {"mean_ttft_ms": _mape([err(r, "mean_ttft_ms", 0.0) for r in stages]),
                                          "mean_e2el_ms": _mape([err(r, "mean_e2el_ms", 0.0) for r in stages])}},
        "stages": stages, "wall_seconds": round(time.perf_counter() - t0, 1),
    }
    out = args.out or ROOT / "benchmarks" / "results" / "sim_vs_real_vllm_frontend_fit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    print("| held-out model | request_ms fitted on the others | TTFT mean MAPE held out (without the term) | E2E mean MAPE |")
    print("|---|---:|---:|---:|")
    for f in folds:
        print(f"| {f['held_out']} | {f['request_ms']:.2f} | {fmt(f['ttft_mape'])} ({fmt(f['ttft_mape_without'])}) | "
              f"{fmt(f['e2el_mape'])} |")
    m = result["mape"]
    print(f"| **all {len(stages)} stages** | on all: {c_all:.2f} | **{fmt(m['lomo']['mean_ttft_ms'])}** "
          f"({fmt(m['without_request_term']['mean_ttft_ms'])}) | {fmt(m['lomo']['mean_e2el_ms'])} |")
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


def _repo_relative(path: str) -> str:
    """``<repo>/../shared/...`` as ``../shared/...`` (other paths unchanged)."""
    import os

    p = os.path.normpath(path)
    parent = os.path.normpath(str(ROOT.parent))
    return os.path.relpath(p, ROOT) if p.startswith(parent + os.sep) else path


def lomo_markdown(res: dict, metrics) -> str:
    """Per stage: real, uncalibrated and leave-one-model-out predictions; MAPE per model and overall."""
    lines = ["| run | stage | req/s | E2E mean real / uncal / LOMO | TTFT mean real / uncal / LOMO | "
             "TPOT real / uncal / LOMO |", "|---" * 6 + "|"]
    for s in res["stages"]:
        def cell(m, digits):
            r, u, h = s["real"][m], s["uncalibrated"][m], s["heldout"][m]
            f = lambda v: "-" if v is None else f"{v:,.{digits}f}"  # noqa: E731
            e = lambda v: "" if v["error"] is None else f" ({100 * v['error']:+.0f}%)"  # noqa: E731
            return f"{f(r)} / {f(u['predicted'])}{e(u)} / {f(h['predicted'])}{e(h)}"
        lines.append(f"| {_short(s['run'])} | {s['stage']} | {s['rate']:g} | {cell('mean_e2el_ms', 0)} | "
                     f"{cell('mean_ttft_ms', 1)} | {cell('mean_tpot_ms', 1)} |")
    fmt = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    lines += ["", "| held-out model | fit on the others: step_scale, overhead | E2E mean LOMO (uncal) | "
              "TTFT mean LOMO (uncal) | TPOT LOMO (uncal) |", "|---" * 5 + "|"]
    for f in res["folds"]:
        pm = res["per_model"].get(f["held_out"], {})
        h, u = pm.get("heldout", {}), pm.get("uncalibrated", {})
        lines.append(f"| {f['held_out']} | x{f['step_scale']:g}, +{f['request_overhead_ms']:.1f} ms | "
                     + " | ".join(f"{fmt(h.get(m))} ({fmt(u.get(m))})" for m in metrics) + " |")
    h, u = res["mape"]["lomo"], res["mape"]["uncalibrated"]
    lines.append(f"| **all {res['num_stages_scored']} stages** | on all: x{res['fitted_on_all']['step_scale']:g}, "
                 f"+{res['fitted_on_all']['request_overhead_ms']:.1f} ms | "
                 + " | ".join(f"**{fmt(h[m])}** ({fmt(u[m])})" for m in metrics) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
