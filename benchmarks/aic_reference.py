"""AIConfigurator's own predictions of its measured points, the reference kvplan's silicon
matrix is read against (issue #24: "aim to be inside its errors on its own data").

Two steps, because they need different environments:

``predict`` runs AIConfigurator's estimator on every ``agg`` row of one backend of
``aiconfigurator_core/systems/silicon_sample.csv``, with the call and arguments of AIConfigurator's
own ``tools/accuracy_regression_testing/predict_silicon_sample.py`` (``aiconfigurator.cli.api.
cli_estimate``: the row's model, system, backend and version, isl / osl, quant modes, batch size and
TP / PP / attention-DP / MoE-TP / MoE-EP; a version its database does not hold is retried with
the default database, as that script does). It needs the ``aiconfigurator`` package, which is not
a kvplan dependency: run it from a separate environment with the same release as the installed
``aiconfigurator-core``::

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    /tmp/aic/bin/python benchmarks/aic_reference.py predict --workers 2

``compare`` (standard library only) reads those predictions and kvplan's replay of the same rows
(``benchmarks/results/silicon_matrix_<backend>.json``) and writes the MAPE of each on the rows both
predicted, overall, per GPU and per GPU x model x precision::

    python benchmarks/aic_reference.py compare

Nothing here is fitted or fed back into kvplan: AIConfigurator's numbers are a yardstick, its
errors on its own data.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))  # silicon_sample, beside this script

from silicon_sample import package_version, read_rows, silicon_csv  # noqa: E402

#: Checkpoints the CSV names by their current Hugging Face id while the package ships their
#: config under the earlier one (Meta renamed "Meta-Llama-3.1-*" to "Llama-3.1-*"): the estimator
#: otherwise downloads the config, which a machine without Hugging Face access cannot.
#: An instruct tune has its base model's config (the estimator reads nothing else).
MODEL_ALIASES = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
                 "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
                 "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Meta-Llama-3.1-8B"}
#: Row fields passed to the estimator for an aggregated row (AIConfigurator's AGG_FIELDS).
AGG_FIELDS = ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def estimate_args(row: Mapping[str, str]) -> dict[str, Any]:
    """The estimator's keyword arguments for one row (integers from the CSV's "8" or "8.0"; a
    renamed checkpoint by the name the package ships, ``MODEL_ALIASES``)."""
    return dict(model_path=MODEL_ALIASES.get(row["model_path"], row["model_path"]), system_name=row["system"], mode="agg",
                backend_name=row["backend"], backend_version=row.get("backend_version") or None,
                isl=int(float(row["isl"])), osl=int(float(row["osl"])),
                gemm_quant_mode=row.get("gemm_quant_mode") or None,
                moe_quant_mode=row.get("moe_quant_mode") or None,
                **{f: int(float(row[f])) for f in AGG_FIELDS if row.get(f)})


def _predict_one(row: dict) -> dict:
    """Worker: one row's prediction, or the estimator's one-line refusal."""
    from aiconfigurator.cli.api import cli_estimate  # type: ignore[import-not-found]  # a separate environment's

    args = estimate_args(row)
    out: dict[str, Any] = {"id": row["id"], "requested_version": args["backend_version"]}
    if args["model_path"] != row["model_path"]:
        out["model_path_used"] = args["model_path"]
    t0 = time.perf_counter()
    sink = io.StringIO()
    try:
        try:
            with redirect_stdout(sink), redirect_stderr(sink):
                res = cli_estimate(**args)
        except ValueError:
            if args["backend_version"] is None:
                raise
            args["backend_version"] = None  # a version the database lacks: its default, as AIC does
            with redirect_stdout(sink), redirect_stderr(sink):
                res = cli_estimate(**args)
        out.update(status="predicted", aic_ttft_ms=float(res.ttft), aic_tpot_ms=float(res.tpot),
                   database_version=str(getattr(res, "backend_version", "") or ""),
                   ctx_tokens=getattr(res, "ctx_tokens", None))
    except Exception as exc:  # the estimator's own refusals (layouts, shapes): recorded, not fatal
        out.update(status="failed", error=" ".join(f"{type(exc).__name__}: {exc}".split())[:300])
    out["wall_s"] = time.perf_counter() - t0
    return out


def predict(args: argparse.Namespace) -> int:
    try:
        import aiconfigurator  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        print("aic_reference predict: the aiconfigurator package is not installed here (run it from a "
              "separate environment: pip install aiconfigurator==<the installed core's version>)",
              file=sys.stderr)
        return 2
    path = args.csv or silicon_csv()
    if path is None or not path.is_file():
        print("silicon_sample.csv: not found (install aiconfigurator-core)", file=sys.stderr)
        return 2
    rows = read_rows(path, args.backend)
    if args.limit is not None:
        rows = rows[:args.limit]
    import logging

    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    results: list[dict] = []
    if args.workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.workers) as pool:
            for i, res in enumerate(pool.map(_predict_one, rows, chunksize=4)):
                results.append(res)
                _progress(i, len(rows), res)
    else:
        for i, r in enumerate(rows):
            results.append(_predict_one(r))
            _progress(i, len(rows), results[-1])
    from importlib.metadata import version

    report = {
        "benchmark": "benchmarks/aic_reference.py predict", "backend": args.backend, "mode": "agg",
        "source_csv_name": f"aiconfigurator_core/systems/{path.name}",
        "aiconfigurator_version": version("aiconfigurator"),
        "aiconfigurator_core_version": package_version(),
        "estimator": "aiconfigurator.cli.api.cli_estimate(mode='agg'), arguments as AIConfigurator's "
                     "tools/accuracy_regression_testing/predict_silicon_sample.py; a version the "
                     "database lacks retried with its default database; renamed checkpoints by the "
                     "name the package ships their config under",
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()},
        "workers": args.workers, "elapsed_s": time.perf_counter() - t0,
        "rows": results,
    }
    out = args.out or RESULTS / f"aic_reference_{args.backend}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(_compact_json(report))
    ok = sum(r["status"] == "predicted" for r in results)
    print(f"{ok} of {len(results)} rows predicted in {report['elapsed_s']:.0f} s -> {out}")
    return 0


def _progress(i: int, n: int, res: Mapping) -> None:
    if res["status"] == "predicted":
        what = f"TTFT {res['aic_ttft_ms']:.0f} ms, TPOT {res['aic_tpot_ms']:.2f} ms"
    else:
        what = f"failed: {res['error'][:80]}"
    print(f"[{i + 1}/{n}] {res['id']}: {what} ({res['wall_s']:.1f} s)", file=sys.stderr, flush=True)


def _compact_json(report: Mapping) -> str:
    """Header indented, one line per row (the file stays small enough to track)."""
    head = {k: v for k, v in report.items() if k != "rows"}
    text = json.dumps(head, indent=1)[:-2]
    rows = ",\n".join(json.dumps(r, separators=(",", ":")) for r in report["rows"])
    return f"{text},\n \"rows\": [\n{rows}\n]}}\n"


# --- compare ------------------------------------------------------------------------------------


def _ape(pred: Optional[float], real: Optional[float]) -> Optional[float]:
    if pred is None or real is None or not real or real <= 0 or not math.isfinite(pred):
        return None
    return (pred - real) / real


def paired_rows(kvplan: Iterable[Mapping], aic: Iterable[Mapping]) -> list[dict]:
    """kvplan's replayed rows joined with AIConfigurator's predictions of the same ids: both
    predictors' signed errors against the row's measurement (a row either failed is left out)."""
    by_id = {r["id"]: r for r in aic if r.get("status") == "predicted"}
    out = []
    for k in kvplan:
        a = by_id.get(k["id"])
        if k.get("status") != "replayed" or a is None:
            continue
        row = {"id": k["id"], "system": k["system"], "model": k["model"], "precision": k["precision"]}
        for m in ("ttft", "tpot"):
            real = k.get(f"silicon_{m}_ms")
            row[f"kvplan_{m}_err"] = _ape(k.get(f"sim_{m}_ms"), real)
            row[f"aic_{m}_err"] = _ape(a.get(f"aic_{m}_ms"), real)
        if all(row[f"{p}_{m}_err"] is not None for p in ("kvplan", "aic") for m in ("ttft", "tpot")):
            out.append(row)
    return out


def error_stats(rows: Sequence[Mapping]) -> dict:
    """MAPE, median APE and bias of each predictor over ``rows``."""
    out: dict[str, Any] = {"n": len(rows)}
    for p in ("kvplan", "aic"):
        for m in ("ttft", "tpot"):
            errs = [r[f"{p}_{m}_err"] for r in rows]
            out[f"{p}_{m}_mape"] = statistics.fmean(abs(e) for e in errs) if errs else None
            out[f"{p}_{m}_median_ape"] = statistics.median(abs(e) for e in errs) if errs else None
            out[f"{p}_{m}_bias"] = statistics.fmean(errs) if errs else None
    return out


def _pct(v: Optional[float], signed: bool = False) -> str:
    return "-" if v is None else (f"{v:+.1%}" if signed else f"{v:.1%}")


def compare_markdown(pairs: Sequence[Mapping], kv_report: Mapping, aic_report: Mapping) -> str:
    groups: dict[str, dict[str, list]] = {"GPU": defaultdict(list), "GPU / model / precision": defaultdict(list)}
    for r in pairs:
        groups["GPU"][r["system"]].append(r)
        groups["GPU / model / precision"][f"{r['system']} / {r['model']} / {r['precision']}"].append(r)
    kv_rows, aic_rows = kv_report["rows"], aic_report["rows"]
    lines = [f"# kvplan and AIConfigurator against AIConfigurator's measured points ({kv_report['backend']}, agg)", "",
             f"- Rows: {len(kv_rows)} {kv_report['backend']} agg rows of "
             f"`{kv_report.get('source_csv_name', 'silicon_sample.csv')}`; kvplan replayed "
             f"{sum(r['status'] == 'replayed' for r in kv_rows)}, AIConfigurator "
             f"{aic_report.get('aiconfigurator_version')} predicted "
             f"{sum(r['status'] == 'predicted' for r in aic_rows)}; both: {len(pairs)} (the table's rows).",
             f"- kvplan: `{kv_report.get('command')}` (a discrete-event replay of the closed loop; nothing fitted).",
             f"- AIConfigurator: {aic_report.get('estimator')}.",
             "- Error = (predicted - measured) / measured of the mean TTFT and TPOT; bias is its signed mean.", ""]
    head = ("| {} | rows | kvplan TTFT MAPE | AIC TTFT MAPE | kvplan TPOT MAPE | AIC TPOT MAPE "
            "| kvplan TTFT / TPOT bias | AIC TTFT / TPOT bias |")
    for title, g in [("all", {"**all**": list(pairs)}), *groups.items()]:
        if title != "all":
            lines += [f"By {title}:", ""]
        lines += [head.format(title if title != "all" else "rows"), "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for key in sorted(g):
            s = error_stats(g[key])
            lines.append(f"| {key} | {s['n']} | {_pct(s['kvplan_ttft_mape'])} | {_pct(s['aic_ttft_mape'])} "
                         f"| {_pct(s['kvplan_tpot_mape'])} | {_pct(s['aic_tpot_mape'])} "
                         f"| {_pct(s['kvplan_ttft_bias'], True)} / {_pct(s['kvplan_tpot_bias'], True)} "
                         f"| {_pct(s['aic_ttft_bias'], True)} / {_pct(s['aic_tpot_bias'], True)} |")
        lines.append("")
    failed: defaultdict[str, int] = defaultdict(int)
    for r in aic_rows:
        if r["status"] != "predicted":
            failed[r["error"].split(":")[0] + ": " + r["error"].split(":", 1)[-1][:70].strip()] += 1
    if failed:
        lines += ["AIConfigurator's refusals:", "", "| reason | rows |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(failed.items(), key=lambda kv: -kv[1])[:12]]
        lines.append("")
    return "\n".join(lines)


def compare(args: argparse.Namespace) -> int:
    kv_path = args.kvplan or RESULTS / f"silicon_matrix_{args.backend}.json"
    aic_path = args.aic or RESULTS / f"aic_reference_{args.backend}.json"
    for p, what in ((kv_path, "kvplan's replay (benchmarks/silicon_matrix.py)"),
                    (aic_path, "AIConfigurator's predictions (aic_reference.py predict)")):
        if not p.is_file():
            print(f"{p}: not found: run {what} first", file=sys.stderr)
            return 2
    try:
        kv_report, aic_report = json.loads(kv_path.read_text()), json.loads(aic_path.read_text())
    except json.JSONDecodeError as exc:
        print(f"aic_reference compare: not JSON: {exc}", file=sys.stderr)
        return 2
    pairs = paired_rows(kv_report["rows"], aic_report["rows"])
    md = compare_markdown(pairs, kv_report, aic_report)
    out = args.out or RESULTS / f"aic_reference_{args.backend}_vs_kvplan.md"
    out.write_text(md)
    print(md)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("predict", help="AIConfigurator's estimate of each row (needs the aiconfigurator package)")
    p.add_argument("--backend", default="vllm", choices=("vllm", "sglang"))
    p.add_argument("--csv", type=Path, default=None, help="default: the installed package's silicon_sample.csv")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--out", type=Path, default=None, help="default benchmarks/results/aic_reference_<backend>.json")
    c = sub.add_parser("compare", help="kvplan's and AIConfigurator's errors on the rows both predict")
    c.add_argument("--backend", default="vllm", choices=("vllm", "sglang"))
    c.add_argument("--kvplan", type=Path, default=None, help="default benchmarks/results/silicon_matrix_<backend>.json")
    c.add_argument("--aic", type=Path, default=None, help="default benchmarks/results/aic_reference_<backend>.json")
    c.add_argument("--out", type=Path, default=None,
                   help="default benchmarks/results/aic_reference_<backend>_vs_kvplan.md")
    args = ap.parse_args(argv)
    return predict(args) if args.step == "predict" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
