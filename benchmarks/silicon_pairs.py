"""Does kvplan predict what a server setting changes? Paired points of the silicon matrix.

AIConfigurator's silicon sample measured many points (GPU, model, precision, layout, lengths,
clients) more than once, under different server settings: InferenceX's scripts changed their
flags over time (``--max-cudagraph-capture-size``, ``--max-num-batched-tokens``, the KV dtype,
the engine release). Two such rows of one point are a measured A/B of the settings that differ,
with the workload, GPU and layout held fixed. This script reads the replayed rows of
``benchmarks/silicon_matrix.py``'s JSON (no simulation of its own), pairs them, and compares
the measured effect (B / A) with kvplan's simulated effect on the same two configs: the
question ``kvplan ab`` and ``kvplan plan`` answer. Absolute errors cancel here where they are
common to both rows (a GPU the tables price low, a client the CSV does not describe).

    .venv/bin/python benchmarks/silicon_pairs.py                  # vLLM rows
    .venv/bin/python benchmarks/silicon_pairs.py --backend sglang

Writes ``benchmarks/results/silicon_pairs_<backend>.{json,md}``. Pairs are the rows of one
point whose kvplan configs differ; copies of one measurement filed in several collections (equal
numbers) count once, and one measurement mapped to two configs is listed apart (a mapping
question, not an A/B). Per kind of change (the config keys that differ): pairs, the measured and
simulated effect sizes (mean |log ratio|), the effect error (mean |log simulated - log
measured|), and how often kvplan gets the direction right where the measured change exceeds
``--min-change``. Nothing is fitted.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # silicon_sample, beside this script

from silicon_sample import same_means  # noqa: E402

METRICS = ("ttft", "tpot")


def point_key(row: Mapping) -> tuple:
    """What a pair holds fixed: the GPU, model, precision, layout, lengths and clients."""
    c = row["config"]
    p, w = c["parallel"], c["workload"]
    return (row["system"], row["model"], row["precision"], p.get("tensor_parallel_size"),
            p.get("pipeline_parallel_size", 1), p.get("data_parallel_size", 1),
            bool(p.get("enable_expert_parallel")), p.get("expert_parallel_size"),
            w["input_len"]["mean"], w["output_len"]["mean"], w["arrival"]["concurrency"])


def flatten(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """``config`` as dotted keys (``engine.version``), the workload left out: a pair's workload
    is its point's."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if key == "workload":
            continue
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def setting_diff(a: Mapping, b: Mapping) -> dict[str, tuple]:
    """The config keys whose values differ between two flattened configs: key -> (a, b); a
    key absent from one side is None there (the engine's default)."""
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def _measured(row: Mapping) -> tuple[float, float]:
    return float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])


def find_pairs(rows: Iterable[Mapping]) -> tuple[list[dict], list[dict]]:
    """(pairs, conflicts). Pairs: every two replayed rows of one point whose configs differ and
    whose measurements differ, each once (a measurement filed twice with one config is one row
    here); A is the row whose id sorts first. Conflicts: one measurement (equal numbers) filed
    in two collections and mapped to two configs: not an A/B but a mapping question, since at
    most one of the configs is what ran."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.get("status") != "replayed" or not r.get("config"):
            continue
        groups[point_key(r)].append(r)
    pairs: list[dict] = []
    conflicts: list[dict] = []
    for point, members in groups.items():
        flat = {r["id"]: flatten(r["config"]) for r in members}
        distinct: list[Mapping] = []  # one row per (config, measurement)
        for r in sorted(members, key=lambda r: r["id"]):
            if not any(flat[d["id"]] == flat[r["id"]] and same_means(_measured(d), _measured(r)) for d in distinct):
                distinct.append(r)
        for a, b in combinations(distinct, 2):
            diff = setting_diff(flat[a["id"]], flat[b["id"]])
            if not diff:
                continue  # the same settings measured twice: the data's repeat spread, not an A/B
            pair = {"point": list(point), "a": a["id"], "b": b["id"],
                    "changed": {k: list(v) for k, v in diff.items()}}
            for m in METRICS:
                pair[f"measured_{m}_ratio"] = float(b[f"silicon_{m}_ms"]) / float(a[f"silicon_{m}_ms"])
                pair[f"simulated_{m}_ratio"] = float(b[f"sim_{m}_ms"]) / float(a[f"sim_{m}_ms"])
            (conflicts if same_means(_measured(a), _measured(b)) else pairs).append(pair)
    return pairs, conflicts


def change_kind(pair: Mapping) -> str:
    """The kind of change a pair measures: the keys that differ, joined."""
    return " + ".join(pair["changed"])


def effect_summary(pairs: Sequence[Mapping], min_change: float) -> dict:
    """Per metric: effect sizes measured and simulated (mean |log ratio|), the effect error
    (mean |log simulated - log measured|), and direction agreement over the pairs whose
    measured change is at least ``min_change`` (relative)."""
    out: dict[str, Any] = {"pairs": len(pairs)}
    for m in METRICS:
        meas = [math.log(p[f"measured_{m}_ratio"]) for p in pairs]
        sim = [math.log(p[f"simulated_{m}_ratio"]) for p in pairs]
        out[f"{m}_measured_effect"] = statistics.fmean(abs(x) for x in meas) if meas else None
        out[f"{m}_simulated_effect"] = statistics.fmean(abs(x) for x in sim) if sim else None
        out[f"{m}_effect_error"] = statistics.fmean(abs(s - x) for s, x in zip(sim, meas)) if meas else None
        big = [(s, x) for s, x in zip(sim, meas) if abs(x) >= math.log1p(min_change)]
        out[f"{m}_direction_pairs"] = len(big)
        out[f"{m}_direction_agreement"] = (sum(1 for s, x in big if s * x > 0) / len(big)) if big else None
    return out


def summarize(pairs: Sequence[Mapping], min_change: float) -> dict:
    by_kind: dict[str, list] = defaultdict(list)
    for p in pairs:
        by_kind[change_kind(p)].append(p)
    kinds = sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {"all": effect_summary(pairs, min_change),
            "by_change": {k: effect_summary(v, min_change) for k, v in kinds}}


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{(math.exp(x) - 1) * 100:.1f}%"


def _share(x: Optional[float]) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _row(name: str, s: Mapping) -> str:
    cells = [name, str(s["pairs"])]
    for m in METRICS:
        cells += [_pct(s[f"{m}_measured_effect"]), _pct(s[f"{m}_simulated_effect"]),
                  _pct(s[f"{m}_effect_error"]),
                  f"{_share(s[f'{m}_direction_agreement'])} of {s[f'{m}_direction_pairs']}"]
    return "| " + " | ".join(cells) + " |"


def _value(v: Any) -> str:
    return "default" if v is None else str(v)


def render(report: Mapping, largest: int = 12) -> str:
    s = report["summary"]
    head = ("| change | pairs | TTFT effect, measured | TTFT effect, kvplan | TTFT effect error | "
            "TTFT direction right | TPOT effect, measured | TPOT effect, kvplan | TPOT effect error | "
            "TPOT direction right |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [f"# Paired silicon points ({report['backend']}): does kvplan predict what a setting changes?", "",
             f"From `{report['matrix']}` (no simulation here). {s['all']['pairs']} pairs: rows of one point "
             "(GPU, model, precision, layout, lengths, clients) replayed under configs that differ. "
             "Effects are mean |B / A - 1| on a log scale; the effect error is mean |kvplan's B/A over "
             "the measured B/A - 1| (log scale); direction counts pairs whose measured change is at least "
             f"{report['min_change'] * 100:.0f}%. Nothing fitted.", "",
             f"- Command: `{report['command']}`", "", head, _row("**all**", s["all"])]
    lines += [_row(k.replace("|", "/"), v) for k, v in s["by_change"].items()]
    conflicts = report["conflicts"]
    if conflicts:
        gaps = [abs(math.log(c["simulated_ttft_ratio"])) for c in conflicts]
        kinds: dict[str, int] = defaultdict(int)
        for c in conflicts:
            kinds[change_kind(c)] += 1
        lines += ["", f"One measurement, two configs: {len(conflicts)} times the same numbers sit in two "
                  "collections under configs that differ (not an A/B: at most one config is what ran). "
                  f"kvplan's TTFT differs between the two by {_pct(statistics.fmean(gaps))} on average "
                  f"({sum(1 for g in gaps if g > math.log1p(report['min_change']))} of them by more than "
                  f"{report['min_change'] * 100:.0f}%). By what differs:", ""]
        lines += [f"- {n} x {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))]
    worst = sorted(report["pairs"], key=lambda p: -abs(math.log(p["simulated_ttft_ratio"])
                                                       - math.log(p["measured_ttft_ratio"])))[:largest]
    lines += ["", f"Largest TTFT effect errors ({len(worst)}):", "",
              "| point (GPU, model, precision, TP, clients, ISL/OSL) | change (A -> B) | TTFT B/A measured | "
              "kvplan | TPOT B/A measured | kvplan |", "|---|---|---:|---:|---:|---:|"]
    for p in worst:
        gpu, model, prec, tp, _, _, _, _, isl, osl, clients = p["point"]
        change = "; ".join(f"{k} {_value(a)} -> {_value(b)}" for k, (a, b) in p["changed"].items())
        lines.append(f"| {gpu} / {model} / {prec}, TP {tp}, {clients} clients, {isl:g}/{osl:g} | {change} | "
                     f"{p['measured_ttft_ratio']:.2f} | {p['simulated_ttft_ratio']:.2f} | "
                     f"{p['measured_tpot_ratio']:.2f} | {p['simulated_tpot_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("vllm", "sglang"), default="vllm")
    ap.add_argument("--matrix", type=Path, help="silicon_matrix JSON (default: the backend's in benchmarks/results)")
    ap.add_argument("--min-change", type=float, default=0.10,
                    help="measured relative change a pair needs to count for direction (default 0.10)")
    ap.add_argument("--out", type=Path, help="output stem (default benchmarks/results/silicon_pairs_<backend>)")
    args = ap.parse_args(argv)
    matrix = args.matrix or RESULTS / f"silicon_matrix_{args.backend}.json"
    try:
        rows = json.loads(matrix.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: {matrix}: not a silicon_matrix JSON ({exc})", file=sys.stderr)
        return 2
    pairs, conflicts = find_pairs(rows)
    shown = matrix.relative_to(ROOT) if matrix.is_relative_to(ROOT) else matrix
    report = {"benchmark": "silicon_pairs", "backend": args.backend, "matrix": str(shown),
              "min_change": args.min_change,
              "command": "python benchmarks/silicon_pairs.py" + (" --backend sglang" if args.backend == "sglang" else ""),
              "summary": summarize(pairs, args.min_change), "pairs": pairs, "conflicts": conflicts}
    stem = args.out or RESULTS / f"silicon_pairs_{args.backend}"
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    text = render(report)
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
