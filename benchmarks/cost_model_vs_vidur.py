"""How far is the roofline from real silicon? Compare ``sim.pricing.roofline`` operator by operator
with Vidur's A100 kernel timings and print the error per operator family.

    .venv/bin/python benchmarks/cost_model_vs_vidur.py            # error table (README)
    .venv/bin/python benchmarks/cost_model_vs_vidur.py --ops      # ... per measured op too
    .venv/bin/python benchmarks/cost_model_vs_vidur.py --fit      # refit the constants

The profiles (``../shared/gpu_profiles`` beside the repository, or ``--profiles DIR``) are
Vidur's measurements (MIT licence) of Llama-2-7B and -70B operators on A100-80GB: medians in
ms per call per layer over num_tokens x tensor-parallel degree, FlashAttention prefill and
decode for Llama-2-70B at TP2, and NCCL all-reduce / send-recv on a DGX A100. They are read
from there and never copied into the repository. Errors are absolute percentage errors of
the roofline against each row's median: APE = |predicted - measured| / measured.

``tests/test_roofline.py`` imports this module (load_profiles, compare) so the test and the
README table come from one piece of code.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from sim.pricing.roofline import A100_EFFICIENCY, Efficiency, RooflineCostModel  # noqa: E402

DEFAULT_PROFILES = REPO_ROOT.parent / "shared" / "gpu_profiles"
# Vidur's A100 device config is the 80 GB part (vidur/config/device_sku_config.py), and the
# measured weight-streaming rate (up to 1.66 TB/s for a Llama-2-70B MLP shard) is above the
# 40 GB part's 1.555 TB/s peak, so the profiles can only be from an A100-80GB.
HARDWARE = "a100-80gb"
_VIDUR_MODELS = {"Llama-2-7b-hf": "llama-2-7b", "Llama-2-70b-hf": "llama-2-70b"}

# Measured op -> (family, how the roofline prices one call).
COMPUTE_OPS = {
    "attn_pre_proj": "qkv_proj",
    "attn_post_proj": "o_proj",
    "mlp_up_proj": "mlp",
    "mlp_act": "mlp",
    "mlp_down_proj": "mlp",
    "input_layernorm": "norms_elementwise",
    "post_attention_layernorm": "norms_elementwise",
    "attn_rope": "norms_elementwise",
    "add": "norms_elementwise",
}
LAYER_TOTAL = "layer_without_attention"
FAMILIES = ("qkv_proj", "o_proj", "mlp", "norms_elementwise", LAYER_TOTAL, "attn_prefill",
            "attn_decode", "tp_allreduce", "pp_send_recv")


@dataclass
class Measurement:
    """One measured row: which op, on which model config, at which size, how long (s)."""

    op: str
    model: str
    tp: int
    args: tuple
    seconds: float


def _read(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _ms(row: dict, op: str) -> Optional[float]:
    v = row.get(f"time_stats.{op}.median", "")
    return float(v) * 1e-3 if v not in ("", None) else None


def load_profiles(root: "str | os.PathLike[str]" = DEFAULT_PROFILES) -> list[Measurement]:
    """Every measured median the roofline can be compared with."""
    root = Path(root)
    out: list[Measurement] = []
    for vidur_name, slug in _VIDUR_MODELS.items():
        for r in _read(root / "a100" / vidur_name / "mlp.csv"):
            tp, n = int(r["num_tensor_parallel_workers"]), int(r["num_tokens"])
            for op in COMPUTE_OPS:
                t = _ms(r, op)
                if t:
                    out.append(Measurement(op, slug, tp, (n,), t))
    for r in _read(root / "a100" / "attention_llama2_70b_tp2.csv"):
        tp, b, kv = int(r["num_tensor_parallel_workers"]), int(r["batch_size"]), \
            int(r["kv_cache_size"])
        if r["is_prefill"] == "True":
            n = int(r["prefill_chunk_size"])
            t = _ms(r, "attn_prefill")
            if t:
                out.append(Measurement("attn_prefill", "llama-2-70b", tp, (n, kv), t))
        else:
            t = _ms(r, "attn_decode")
            if t:  # kv_cache_size is each sequence's context
                out.append(Measurement("attn_decode", "llama-2-70b", tp, (b, b * kv), t))
    net = root / "network" / "a100_dgx"
    for r in _read(net / "all_reduce.csv"):
        n, per_node = int(r["num_workers"]), int(r["devices_per_node"])
        if n == per_node:  # inside one NVSwitch node, as tensor parallelism runs
            out.append(Measurement("tp_allreduce", "llama-2-70b", n, (int(r["size"]),),
                                   float(r["time_stats.all_reduce.median"]) * 1e-3))
    for r in _read(net / "send_recv.csv"):
        if int(r["devices_per_node"]) == 2:  # both ends in one node
            out.append(Measurement("pp_send_recv", "llama-2-70b", 1, (int(r["size"]),),
                                   float(r["time_stats.send_recv.median"]) * 1e-3))
    return out


class _Models:
    """Roofline instances per (model, tp, pp), built once per efficiency."""

    def __init__(self, eff: Efficiency) -> None:
        self.eff = eff
        self._cache: dict[tuple[str, int, int], RooflineCostModel] = {}

    def get(self, model: str, tp: int, pp: int = 1) -> RooflineCostModel:
        key = (model, tp, pp)
        if key not in self._cache:
            self._cache[key] = RooflineCostModel(model, HARDWARE, "float16", tp, pp,
                                                 efficiency=self.eff)
        return self._cache[key]


def predict(m: Measurement, models: _Models) -> float:
    """The roofline's seconds for one measured call."""
    if m.op == "tp_allreduce":
        return models.get(m.model, m.tp).allreduce_time(m.args[0])
    if m.op == "pp_send_recv":
        return models.get(m.model, 1, 2).send_recv_time(m.args[0])
    cm = models.get(m.model, m.tp)
    if m.op == "attn_prefill":
        n, kv = m.args
        return cm.attn_prefill_time(n, n * kv + n * (n + 1) // 2, kv)
    if m.op == "attn_decode":
        b, ctx = m.args
        return cm.attn_decode_time(b, ctx)
    (n,) = m.args
    gemm = {"attn_pre_proj": "qkv_proj", "attn_post_proj": "o_proj",
            "mlp_up_proj": "mlp_up", "mlp_down_proj": "mlp_down"}
    if m.op in gemm:
        return cm.gemm_time(gemm[m.op], n)
    ew = {"mlp_act": "mlp_act", "input_layernorm": "input_norm",
          "post_attention_layernorm": "post_attn_norm", "attn_rope": "rope",
          "add": "residual_add"}
    return cm.elementwise_time(ew[m.op], n)


def family_of(op: str) -> str:
    return COMPUTE_OPS.get(op, op)


@dataclass
class ErrorRow:
    name: str
    rows: int
    mape: float
    median_ape: float
    p90_ape: float
    bias: float  # median of predicted / measured - 1 (sign: + = roofline too slow)


def _error_row(name: str, pred: np.ndarray, meas: np.ndarray) -> ErrorRow:
    ape = np.abs(pred - meas) / meas * 100
    return ErrorRow(name, len(meas), float(ape.mean()), float(np.median(ape)),
                    float(np.percentile(ape, 90)), float(np.median(pred / meas - 1) * 100))


def compare(measurements: Iterable[Measurement], efficiency: Efficiency = A100_EFFICIENCY,
            per_op: bool = False) -> list[ErrorRow]:
    """Error rows per operator family (or per measured op with ``per_op``).

    A family made of several measured ops per layer (mlp = up + act + down;
    norms_elementwise = two norms + rope + add) is compared on the per-layer sum of its ops
    at each (model, tp, num_tokens): one row per configuration, as a step would see it.
    ``layer_without_attention`` sums all nine measured per-layer ops the same way.
    Duplicate measurements of one configuration are summed on both sides (their mean).
    """
    models = _Models(efficiency)
    groups: dict[str, tuple[list[float], list[float]]] = {}
    sums: dict[tuple, list[float]] = {}
    for m in measurements:
        p = predict(m, models)
        if not per_op and m.op in COMPUTE_OPS:
            for fam in (family_of(m.op), LAYER_TOTAL):
                acc = sums.setdefault((fam, m.model, m.tp, m.args), [0.0, 0.0])
                acc[0] += p
                acc[1] += m.seconds
            continue
        name = f"{family_of(m.op)}/{m.op}" if m.op in COMPUTE_OPS else m.op
        pr, me = groups.setdefault(name, ([], []))
        pr.append(p)
        me.append(m.seconds)
    for (fam, *_), (p, s) in sums.items():
        pr, me = groups.setdefault(fam, ([], []))
        pr.append(p)
        me.append(s)
    order = {f: i for i, f in enumerate(FAMILIES)}

    def key(name: str) -> tuple:
        return (order.get(name.split("/")[0], 99), name)

    return [_error_row(name, np.array(groups[name][0]), np.array(groups[name][1]))
            for name in sorted(groups, key=key)]


def format_table(rows: list[ErrorRow], markdown: bool = True) -> str:
    head = ("operator family", "rows", "MAPE %", "median APE %", "p90 APE %", "median bias %")
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        for r in rows:
            lines.append(f"| {r.name} | {r.rows} | {r.mape:.1f} | {r.median_ape:.1f} | "
                         f"{r.p90_ape:.1f} | {r.bias:+.1f} |")
    else:
        lines.append(f"{head[0]:<42} {head[1]:>6} {head[2]:>7} {head[3]:>13} {head[4]:>10} "
                     f"{head[5]:>14}")
        for r in rows:
            lines.append(f"{r.name:<42} {r.rows:>6} {r.mape:>7.1f} {r.median_ape:>13.1f} "
                         f"{r.p90_ape:>10.1f} {r.bias:>+14.1f}")
    return "\n".join(lines)


# -- fitting ----------------------------------------------------------------------------------

# Which measured ops each group of constants is fitted on, in order (later groups keep the
# constants fitted before them fixed).
FIT_GROUPS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("gemm_compute", "memory", "gemm_latency_s"),
     ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")),
    
    (("norm_memory", "elementwise_memory", "elementwise_latency_s"),
     ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")),
    (("attn_prefill_compute", "attention_latency_s"),
     ("attn_prefill", "attn_decode")),
    (("allreduce_bandwidth", "allreduce_latency_s"), ("tp_allreduce",)),
    (("p2p_bandwidth", "p2p_latency_s"), ("pp_send_recv",)),
)


def fit_bounds(name: str) -> tuple[float, float]:
    """The range a constant is fitted in: a latency (``*_s``) 0.1 us to 1 ms, the time of one
    attention score (``*_score_s``) 10^-16 to 10^-10 s, a count of keys or columns (``*_keys``,
    ``*_columns``) 1 to 10^5, a fraction of a peak 10^-4 to 1."""
    if name.endswith("_score_s"):
        return 1e-16, 1e-10
    if name.endswith("_s"):
        return 1e-7, 1e-3
    if name.endswith(("_keys", "_columns")):
        return 1.0, 1e5
    return 1e-4, 1.0


def fit_group(eff: Efficiency, names: tuple[str, ...],
              log_ratios: Callable[[Efficiency], np.ndarray]) -> Efficiency:
    """``eff`` with the constants ``names`` refitted: least squares on ``log_ratios(trial)``
    (log of predicted / measured per row) with a robust (soft L1) loss. Logs weigh a 2 us
    kernel and a 16 ms one alike, which is what a percentage error table asks for. Shared with
    ``benchmarks/roofline_vs_tables.py``, which fits other GPUs' constants to their tables."""
    from scipy.optimize import least_squares  # type: ignore[import-untyped]  # no stubs: scipy-stubs is no dependency

    def residuals(x: np.ndarray) -> np.ndarray:
        return log_ratios(replace(eff, **{n: float(np.exp(v)) for n, v in zip(names, x)}))

    # A start at 0 (a term A100 does not have) begins at its lower bound.
    lo, hi = np.log(np.array([fit_bounds(n) for n in names])).T
    x0 = np.log(np.maximum([getattr(eff, n) for n in names], np.exp(lo)))
    sol = least_squares(residuals, np.clip(x0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi),
                        loss="soft_l1", f_scale=0.1)
    return replace(eff, **{n: float(np.exp(v)) for n, v in zip(names, sol.x)})


def fit(measurements: list[Measurement], start: Efficiency = A100_EFFICIENCY) -> Efficiency:
    """The constants fitted to Vidur's rows one group at a time (``FIT_GROUPS``; later groups
    keep the constants fitted before them fixed)."""
    eff = start
    for names, ops in FIT_GROUPS:
        rows = [m for m in measurements if m.op in ops]
        meas = np.array([m.seconds for m in rows])

        def log_ratios(trial: Efficiency, rows=rows, meas=meas) -> np.ndarray:
            models = _Models(trial)
            return np.log(np.array([predict(m, models) for m in rows]) / meas)

        eff = fit_group(eff, names, log_ratios)
    return eff


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default=str(DEFAULT_PROFILES),
                    help="directory of Vidur's gpu_profiles (default: %(default)s)")
    ap.add_argument("--ops", action="store_true", help="also one row per measured op")
    ap.add_argument("--fit", action="store_true",
                    help="refit the constants to the profiles and print them")
    ap.add_argument("--plain", action="store_true", help="plain text instead of markdown")
    args = ap.parse_args(argv)

    if not Path(args.profiles).is_dir():
        print(f"no profiles at {args.profiles}; pass --profiles DIR", file=sys.stderr)
        return 2
    data = load_profiles(args.profiles)
    eff = A100_EFFICIENCY
    if args.fit:
        eff = fit(data)
        print("Fitted constants (sim.pricing.roofline.A100_EFFICIENCY holds them rounded):")
        for f in fields(Efficiency):
            print(f"  {f.name:<22} {getattr(eff, f.name):.4g}")
        print()
    print(f"Roofline ({HARDWARE}, float16) vs Vidur A100 measurements, "
          f"{len(data)} measured medians:\n")
    print(format_table(compare(data, eff), markdown=not args.plain))
    if args.ops:
        print()
        print(format_table(compare(data, eff, per_op=True), markdown=not args.plain))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
