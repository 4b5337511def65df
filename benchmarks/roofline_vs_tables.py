"""How far is the roofline from each GPU's measured operator tables, and which efficiencies do
those tables give it? The roofline prices wherever ``aiconfigurator-core`` (the tables) is not
installed, so its constants per GPU are fitted here, once, and written into
``sim/pricing/efficiency.py`` (``GPU_EFFICIENCY``).

    .venv/bin/python benchmarks/roofline_vs_tables.py           # error table, shipped constants
    .venv/bin/python benchmarks/roofline_vs_tables.py --fit     # refit; print them as Python
    .venv/bin/python benchmarks/roofline_vs_tables.py --gpu h100-sxm --efficiency a100

Rows read per GPU (the vLLM folders ``sim.pricing.table_data`` picks for 0.15.1; 0.24.0 on every
GPU but A100):

- ``gemm``: bf16 ``torch.nn.functional.linear`` GEMMs (cuBLAS) with n, k >= 512 (a layer's
  shard; the 32-256 wide rows are launch-bound shapes no layer has). Fitted: ``gemm_compute``,
  ``memory`` (weight streaming), ``gemm_latency_s``.
- ``gemm_fp8``: per-tensor FP8 (vLLM's CUTLASS scaled-mm, its activation quantisation
  included), same shapes. Fitted: ``quantized_gemm_compute`` and ``quantized_gemm_latency_s``
  (the quantisation kernel's fixed part; its bytes and the weights' as bf16's fraction).
- ``gemm_fp4``: NVFP4 rows where the GPU has FP4 tensor cores (Blackwell): a check, not fitted
  (they take FP8's fraction of their own peak).
- ``attn_decode`` / ``attn_prefill``: FlashAttention rows (the kernel measured most, no window,
  bf16 KV cache), KV length ``step + 1`` for decode, ``isl`` new tokens from an empty cache for
  prefill. Fitted together: ``attn_prefill_compute``, ``attention_latency_s`` (decode's bytes
  stream at the GEMMs' ``memory`` fraction, as in the Vidur fit), ``attn_prefill_extra_keys``
  and ``attn_score_s`` (prefill's exponential per score and head: H100's fit, 0.22 ps or 4.5 T scores/s, is near
  the 3.9 TFLOPS of special functions FlashAttention-3's paper gives the H100 SXM5).
- ``moe`` / ``moe_fp8``: vLLM's fused-MoE layer (``fused_experts``: the token sort, both grouped
  GEMMs, the activation) in bf16 and block FP8 (DeepSeek-V3, Qwen3-FP8, MiniMax-M2's format),
  from the default release's folder (0.24.0; 0.19.0 where a GPU has no later one), balanced
  routing, experts split over TP (no EP), every measured expert shape; where a shape has rows of
  two kernels (block FP8 on Hopper: Triton and FlashInfer CUTLASS) the faster, as the table
  pricer reads them; rows faster than their experts' weights can stream left out (2-13%: the
  collector's own router, DeepSeek-V3's group-limited one, touched half the experts, or L2 held
  small shards; the table pricer raises them). Priced by the roofline's expert layer at the ``min(E, T x k)`` experts a
  balanced row touches, plus its activation kernel. Fitted together: ``moe_compute_ratio``,
  ``moe_row_columns`` (the work each routed row pays beyond its expert's columns: at 16k tokens
  on H100 a 22-wide shard of a 704-wide expert reaches 2% of the FP8-free bf16 peak, a
  4,096-wide one 69%), ``moe_memory``, ``moe_latency_s`` and ``moe_expert_latency_s`` (a fixed
  cost per touched expert).
- ``tp_allreduce``: what vLLM runs: its custom all-reduce (graph rows) up to its 8 MiB buffer,
  NCCL's all-reduce (half) above, on 2, 4 and 8 GPUs. Fitted: ``allreduce_bandwidth``,
  ``allreduce_latency_s``.

Each group is fitted as ``benchmarks/cost_model_vs_vidur.py`` fits A100's (``fit_group``: log
ratios, soft L1, groups in order). These are kernel timings, not serving runs: the end-to-end
checks (``sim_vs_real_vllm.py --source roofline``, the silicon matrix) are never fitted to.
Errors: APE = |roofline - measured| / measured per row; bias = median(roofline / measured) - 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # cost_model_vs_vidur, beside this script

from cost_model_vs_vidur import fit_group  # noqa: E402
from sim.catalog.dtypes import resolve_precision  # noqa: E402
from sim.catalog.engines import DEFAULT_VLLM_VERSION, get_engine  # noqa: E402
from sim.catalog.hardware import get_hardware  # noqa: E402
from sim.catalog.models import get_model  # noqa: E402
from sim.pricing.efficiency import A100_EFFICIENCY, GPU_EFFICIENCY, Efficiency, efficiency_for  # noqa: E402
from sim.pricing.operator_tables import (CUSTOM_ALLREDUCE_MAX_BYTES, MOE_WEIGHT_BYTES,  # noqa: E402
                                         attention_rows, moe_streaming_floor_ms, weight_streaming_rate)
from sim.pricing.roofline import (RooflineCostModel, gemm_terms, quantization_seconds,  # noqa: E402
                                  quantized_gemm_rate)  # noqa: E402
from sim.pricing.table_data import (GPU_TABLE_DIRS, TARGET_VLLM, TableError,  # noqa: E402
                                    default_tables_root, latest_file, read_columns,
                                    read_columns_present, table_file)

#: Fitted GPUs: every GPU with tables but A100, whose constants come from Vidur's profiles.
FIT_GPUS = tuple(g for g in GPU_TABLE_DIRS if g != "a100-80gb")
#: The smallest GEMM width fitted: a layer's shard (Llama-3.1-8B's k/v at TP8 is 512 wide).
MIN_GEMM_DIM = 512
#: Tensor-parallel sizes whose all-reduce rows are fitted.
TP_SIZES = (2, 4, 8)
#: A dense model whose shapes carry the attention and all-reduce rows (only the head counts and
#: widths of a row, set per row, matter to the terms priced).
CARRIER = "llama-3.1-8b"

FIT_GROUPS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("gemm_compute", "memory", "gemm_latency_s"), ("gemm",)),
    (("quantized_gemm_compute", "quantized_gemm_latency_s"), ("gemm_fp8",)),
    (("attn_prefill_compute", "attention_latency_s", "attn_prefill_extra_keys", "attn_score_s"),
     ("attn_prefill", "attn_decode")),
    (("allreduce_bandwidth", "allreduce_latency_s"), ("tp_allreduce",)),
    (("moe_compute_ratio", "moe_row_columns", "moe_memory", "moe_latency_s", "moe_expert_latency_s"),
     ("moe", "moe_fp8")),
)
FAMILIES = ("gemm", "gemm_fp8", "gemm_fp4", "attn_decode", "attn_prefill", "tp_allreduce", "moe", "moe_fp8")
#: The MoE table's ``moe_dtype`` of each MoE family, and the weight format it is priced in.
MOE_FAMILIES = {"moe": ("bfloat16", None), "moe_fp8": ("fp8_block", "fp8_block")}
#: A MoE model whose shapes carry the MoE rows (its experts' widths, count and top-k set per row).
MOE_CARRIER = "qwen3-30b-a3b"
#: The weight format each GEMM family is priced in (None: 16-bit).
GEMM_WEIGHTS = {"gemm": None, "gemm_fp8": "fp8", "gemm_fp4": "nvfp4"}


@dataclass
class Rows:
    """One family's measured rows on one GPU: the row columns it is priced from, and seconds."""

    family: str
    columns: dict[str, np.ndarray]
    seconds: np.ndarray


GEMM_COLUMNS = ("gemm_dtype", "m", "n", "k", "latency")


def _gemm_rows(c: dict[str, np.ndarray], dtype: str, family: str) -> Optional[Rows]:
    """The GEMM table's ``dtype`` rows (columns ``GEMM_COLUMNS``) with n, k >= ``MIN_GEMM_DIM``."""
    sel = (c["gemm_dtype"] == dtype) & (c["n"] >= MIN_GEMM_DIM) & (c["k"] >= MIN_GEMM_DIM)
    if not sel.any():
        return None
    return Rows(family, {x: c[x][sel].astype(float) for x in ("m", "n", "k")},
                c["latency"][sel].astype(float) * 1e-3)


def _attention_rows(gpu_dir: Path, table: str, family: str) -> Optional[Rows]:
    path, _ = table_file(gpu_dir / "attention" / "vllm", table, TARGET_VLLM)
    c = read_columns_present(path, ("batch_size", "isl", "step", "num_heads", "num_key_value_heads",
                                    "head_dim", "kv_cache_dtype", "latency"),
                             ("window_size", "kernel_source"))
    sel = (c["kv_cache_dtype"] == "bfloat16") & attention_rows(c, 0)
    if not sel.any():
        return None
    cols = {x: c[x][sel].astype(float) for x in ("batch_size", "isl", "step", "num_heads",
                                                 "num_key_value_heads", "head_dim")}
    return Rows(family, cols, c["latency"][sel].astype(float) * 1e-3)


def _allreduce_rows(gpu_dir: Path) -> Optional[Rows]:
    """vLLM's all-reduce as it runs: custom (graph) up to 8 MiB, NCCL above (bf16 elements)."""
    comm = gpu_dir / "comm"
    try:
        custom, _ = table_file(comm / "vllm", "custom_allreduce_perf", TARGET_VLLM)
        nccl = latest_file(comm / "nccl", "nccl_perf")
    except TableError:  # a GPU without one of the two tables keeps A100's constants
        return None
    cc = read_columns(custom, ("backend", "num_gpus", "message_size", "latency"))
    nc = read_columns(nccl, ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
    tp, nbytes, sec = [], [], []
    for n in TP_SIZES:
        s = (cc["backend"] == "vllm_graph") & (cc["num_gpus"] == n) & (cc["message_size"] * 2 <= CUSTOM_ALLREDUCE_MAX_BYTES)
        t = ((nc["op_name"] == "all_reduce") & (nc["nccl_dtype"] == "half") & (nc["num_gpus"] == n)
             & (nc["message_size"] * 2 > CUSTOM_ALLREDUCE_MAX_BYTES))
        for c, sel in ((cc, s), (nc, t)):
            tp += [n] * int(sel.sum())
            nbytes += list(c["message_size"][sel].astype(float) * 2)
            sec += list(c["latency"][sel].astype(float) * 1e-3)
    if not sec:
        return None
    return Rows("tp_allreduce", {"tp": np.array(tp, float), "bytes": np.array(nbytes)}, np.array(sec))


MOE_KEY = ("num_tokens", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size")
MOE_COLUMNS = ("moe_dtype", "distribution", "moe_ep_size", "latency") + MOE_KEY


def _moe_rows(c: dict[str, np.ndarray], rate: Optional[float], dtype: str, family: str) -> Optional[Rows]:
    """The fused-MoE table's (columns ``MOE_COLUMNS``) rows of ``dtype``, balanced routing, no EP;
    of two kernels timing one point, the faster; none faster than streaming the weights of the
    experts it routes to at the GPU's measured ``rate`` (``operator_tables.weight_streaming_rate``):
    those touched fewer experts than balanced routing says (DeepSeek-V3's group-limited router in
    the collector) or read them from L2, and the table pricer raises them to that floor."""
    cols = MOE_KEY
    sel = (c["moe_dtype"] == dtype) & (c["distribution"] == "balanced") & (c["moe_ep_size"] == 1)
    if rate is not None:
        sel &= c["latency"].astype(float) >= moe_streaming_floor_ms(
            c["num_tokens"], c["hidden_size"], c["inter_size"] / c["moe_tp_size"], c["num_experts"],
            c["topk"], MOE_WEIGHT_BYTES[dtype], rate)
    if not sel.any():
        return None
    fastest: dict[tuple, float] = {}
    for key, lat in zip(zip(*(c[x][sel].astype(float) for x in cols)), c["latency"][sel].astype(float)):
        fastest[key] = min(lat, fastest.get(key, np.inf))
    keys = np.array(sorted(fastest))
    return Rows(family, {x: keys[:, i] for i, x in enumerate(cols)},
                np.array([fastest[tuple(k)] for k in keys]) * 1e-3)


def load_rows(hardware: str, root: Optional[Path] = None) -> dict[str, Rows]:
    """Every family's rows on ``hardware`` (a catalog name with tables)."""
    root = root or default_tables_root()
    if root is None:
        raise SystemExit("no operator tables: pip install aiconfigurator-core (make install does)")
    gpu_dir = root / GPU_TABLE_DIRS[hardware]
    gemm_path, _ = table_file(gpu_dir / "gemm" / "vllm", "gemm_perf", TARGET_VLLM)
    gemm = read_columns(gemm_path, GEMM_COLUMNS)
    found = {
        "gemm": _gemm_rows(gemm, "bfloat16", "gemm"),
        "gemm_fp8": _gemm_rows(gemm, "fp8", "gemm_fp8"),
        "gemm_fp4": _gemm_rows(gemm, "nvfp4", "gemm_fp4"),
        "attn_decode": _attention_rows(gpu_dir, "generation_attention_perf", "attn_decode"),
        "attn_prefill": _attention_rows(gpu_dir, "context_attention_perf", "attn_prefill"),
        "tp_allreduce": _allreduce_rows(gpu_dir),
    }
    # The MoE rows of the default release's folder, floored at the streaming rate of its GEMM
    # table; one read of each table for both MoE families.
    version = get_engine("vllm", DEFAULT_VLLM_VERSION).version
    try:
        moe_path, _ = table_file(gpu_dir / "moe" / "vllm", "moe_perf", version)
        release_gemm, _ = table_file(gpu_dir / "gemm" / "vllm", "gemm_perf", version)
    except TableError:
        pass
    else:
        same = release_gemm == gemm_path  # one folder on every fitted GPU today
        rate = weight_streaming_rate(gemm if same else read_columns(release_gemm, GEMM_COLUMNS))
        moe = read_columns(moe_path, MOE_COLUMNS)
        for fam, (dtype, _) in MOE_FAMILIES.items():
            found[fam] = _moe_rows(moe, rate, dtype, fam)
    return {k: v for k, v in found.items() if v is not None}


def _carrier(hardware: str, eff: Efficiency, heads: float, kv_heads: float, head_dim: float,
             tp: int = 1) -> RooflineCostModel:
    model = dataclasses.replace(get_model(CARRIER), num_heads=int(heads), num_kv_heads=int(kv_heads),
                                head_dim=int(head_dim), name=f"{CARRIER}-h{heads:g}-kv{kv_heads:g}-d{head_dim:g}")
    return RooflineCostModel(model, hardware, "bf16", tensor_parallel_size=tp, efficiency=eff)


def predict(hardware: str, rows: Rows, eff: Efficiency) -> np.ndarray:
    """The roofline's seconds for each row (the pricer's own terms: ``gemm_terms``,
    ``attn_decode_time``, ``attn_prefill_time``, ``allreduce_time``)."""
    c, out = rows.columns, np.zeros_like(rows.seconds)
    if rows.family in GEMM_WEIGHTS:
        h = get_hardware(hardware)
        p = resolve_precision(h, "bf16", GEMM_WEIGHTS[rows.family])
        g = gemm_terms(c["k"], c["n"], quantized_gemm_rate(h, p, eff), p.weight_bytes,
                       p.act_bytes, h.memory_bandwidth * eff.memory, quantization_seconds(p, eff))
        return g.seconds(c["m"], eff.gemm_latency_s, np.maximum)
    if rows.family in MOE_FAMILIES:
        return _predict_moe(hardware, rows, eff)
    if rows.family == "tp_allreduce":
        for n in np.unique(c["tp"]):
            sel = c["tp"] == n
            r = _carrier(hardware, eff, 32, 8, 128, int(n))
            out[sel] = [r.allreduce_time(b) for b in c["bytes"][sel]]
        return out
    keys = np.stack([c["num_heads"], c["num_key_value_heads"], c["head_dim"]], axis=1)
    for key in np.unique(keys, axis=0):
        sel = np.all(keys == key, axis=1)
        r = _carrier(hardware, eff, *key)
        b = c["batch_size"][sel]
        if rows.family == "attn_decode":
            out[sel] = r.attn_decode_time(b, b * (c["step"][sel] + 1), 0, np.maximum)
        else:
            s = c["isl"][sel]
            out[sel] = r.attn_prefill_time(b * s, b * s * (s + 1) / 2, 0, np.maximum)
    return out


def _predict_moe(hardware: str, rows: Rows, eff: Efficiency) -> np.ndarray:
    """One MoE layer per row: the roofline's expert layer (``ExpertLayer``) at the experts a
    balanced row touches, ``min(E, T x k)`` (``experts.uniform_over_balanced``), plus the
    activation kernel the roofline prices beside it (``mlp_act``), both in the row's format."""
    c, out = rows.columns, np.zeros_like(rows.seconds)
    weights = MOE_FAMILIES[rows.family][1]
    shape_cols = ("hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size")
    keys = np.stack([c[x] for x in shape_cols], axis=1)
    base = get_model(MOE_CARRIER)
    for key in np.unique(keys, axis=0):
        sel = np.all(keys == key, axis=1)
        hd, inter, experts, k, tp = (int(v) for v in key)
        model = dataclasses.replace(base, hidden_size=hd, intermediate_size=inter, num_experts=experts,
                                    num_experts_per_tok=k, num_heads=256, num_kv_heads=32,
                                    name=f"{MOE_CARRIER}-{hd}x{inter}-e{experts}-k{k}")
        r = RooflineCostModel(model, hardware, "bf16", tensor_parallel_size=tp, weight_dtype=weights,
                              efficiency=eff)
        x = r._experts
        assert x is not None
        t = c["num_tokens"][sel]
        touched = np.minimum(float(experts), t * k)
        layer = x.time_touching(t, touched, np.maximum)
        out[sel] = layer + np.array([r.elementwise_time("mlp_act", v) for v in t])
    return out


def fit(hardware: str, data: dict[str, Rows], start: Efficiency = A100_EFFICIENCY) -> Efficiency:
    """``start`` with each group of ``FIT_GROUPS`` refitted to ``hardware``'s rows, in order; a
    group without rows keeps ``start``'s constants."""
    eff = start
    for names, families in FIT_GROUPS:
        parts = [data[f] for f in families if f in data]
        if not parts:
            continue

        def log_ratios(trial: Efficiency, parts: list[Rows] = parts) -> np.ndarray:
            return np.concatenate([np.log(predict(hardware, r, trial) / r.seconds) for r in parts])

        eff = fit_group(eff, names, log_ratios)
    return eff


def errors(hardware: str, data: dict[str, Rows], eff: Efficiency) -> list[dict]:
    """One row per family: rows, MAPE, median and p90 APE, median bias (%)."""
    out = []
    for fam in FAMILIES:
        if fam not in data:
            continue
        r = data[fam]
        ratio = predict(hardware, r, eff) / r.seconds
        ape = np.abs(ratio - 1) * 100
        out.append({"gpu": hardware, "family": fam, "rows": int(ratio.size),
                    "mape": round(float(ape.mean()), 1), "median_ape": round(float(np.median(ape)), 1),
                    "p90_ape": round(float(np.percentile(ape, 90)), 1),
                    "bias": round(float(np.median(ratio - 1) * 100), 1)})
    return out


FITTED = tuple(n for names, _ in FIT_GROUPS for n in names)
#: Significant figures the constants are written with.
DIGITS = 3


def rounded(eff: Efficiency) -> Efficiency:
    return dataclasses.replace(eff, **{n: float(f"{getattr(eff, n):.{DIGITS}g}") for n in FITTED})


def as_python(hardware: str, eff: Efficiency) -> str:
    args = ", ".join(f"{n}={getattr(eff, n):.{DIGITS}g}" for n in FITTED)
    return f'    "{hardware}": replace(A100_EFFICIENCY, {args}),'


def _table(rows: list[dict]) -> str:
    lines = ["| GPU | family | rows | MAPE % | median APE % | p90 APE % | median bias % | A100 constants: MAPE % / bias % |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['gpu']} | {r['family']} | {r['rows']} | {r['mape']:.1f} | {r['median_ape']:.1f} | "
                     f"{r['p90_ape']:.1f} | {r['bias']:+.1f} | {r['a100_mape']:.1f} / {r['a100_bias']:+.1f} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="append", choices=FIT_GPUS, help="GPU(s) to compare (default: all)")
    ap.add_argument("--fit", action="store_true", help="refit the constants and print them as Python")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "roofline_vs_tables.json",
                    help="JSON written (and a .md beside it) unless --fit (default: %(default)s)")
    args = ap.parse_args(argv)
    gpus = args.gpu or list(FIT_GPUS)
    table: list[dict] = []
    lines = []
    for gpu in gpus:
        data = load_rows(gpu)
        eff = rounded(fit(gpu, data)) if args.fit else efficiency_for(gpu)
        if args.fit:
            lines.append(as_python(gpu, eff))
        base = {r["family"]: r for r in errors(gpu, data, A100_EFFICIENCY)}
        for r in errors(gpu, data, eff):
            r["a100_mape"], r["a100_bias"] = base[r["family"]]["mape"], base[r["family"]]["bias"]
            table.append(r)
        print(f"{gpu}: {sum(r.seconds.size for r in data.values())} rows", file=sys.stderr)
    print(_table(table))
    if args.fit:
        print("\nGPU_EFFICIENCY entries (sim/pricing/efficiency.py):")
        print("\n".join(lines))
        return 0
    shipped = {g: {f.name: getattr(efficiency_for(g), f.name) for f in fields(Efficiency)
                   if f.name in FITTED} for g in gpus if g in GPU_EFFICIENCY}
    args.out.write_text(json.dumps({"constants": shipped, "errors": table}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(
        "Roofline against the measured operator tables (aiconfigurator-core), per GPU and "
        "operator family, with the shipped constants (`sim/pricing/efficiency.py`) and, in the "
        "last column, with A100's. `.venv/bin/python benchmarks/roofline_vs_tables.py`\n\n"
        + _table(table) + "\n")
    print(f"\nwrote {args.out} and {args.out.with_suffix('.md').name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
