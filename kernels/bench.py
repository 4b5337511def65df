"""GPU benchmark of the paged-attention kernels: ``python -m kernels.bench``.

Decode is judged by bandwidth (bytes of K/V read per second, against the device's peak HBM
bandwidth) and against SDPA over a contiguous copy of the same K/V; prefill by time against
SDPA's causal kernel. Every timed case is also checked against the torch reference on the GPU,
so a fast wrong kernel cannot pass. Results go to ``benchmarks/results/kernels_<device>.json``.

``--cpu-smoke`` runs tiny shapes through Triton's CPU interpreter to check the code paths
(timings then mean nothing); without a GPU and without it, the command exits with one line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch

# Peak HBM bandwidth, bytes/s, by a substring of torch.cuda.get_device_name() (first match wins,
# so specific names come before generic ones). Vendor datasheet figures.
PEAK_BANDWIDTH = [
    ("H200", 4.8e12),
    ("H100 NVL", 3.9e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),  # SXM5 (reported as "H100 80GB HBM3")
    ("A100 80GB PCIe", 1.935e12),
    ("A100-SXM4-80GB", 2.039e12),
    ("A100-SXM4-40GB", 1.555e12),
    ("A100-PCIE-40GB", 1.555e12),
    ("A100", 2.039e12),
    ("L40S", 0.864e12),
    ("L4", 0.3e12),
    ("A10G", 0.6e12),
    ("RTX 4090", 1.008e12),
]

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
RESULTS_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def peak_bandwidth(device_name: str) -> float | None:
    """Peak HBM bytes/s for a CUDA device name, or None when the table doesn't know it."""
    for key, peak in PEAK_BANDWIDTH:
        if key.lower() in device_name.lower():
            return peak
    return None


@dataclass
class Shape:
    """Attention shape of the model being served (default: Llama-3-8B)."""

    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    block_size: int = 16
    dtype: str = "bf16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def scale(self) -> float:
        return self.head_dim ** -0.5


@dataclass
class Plan:
    """What to run: batch sizes x contexts for decode, prompt lengths for prefill."""

    decode_batches: list[int] = field(default_factory=lambda: [1, 8, 32, 64, 128])
    decode_contexts: list[int] = field(default_factory=lambda: [1024, 4096, 16384, 32768])
    prefill_lens: list[int] = field(default_factory=lambda: [512, 2048, 8192])
    prefill_tokens: int = 16384  # sequences per prefill case = this // prompt length
    chunk: int = 512  # chunked-prefill case: last chunk of this many tokens after cached context
    sweep: bool = False
    memory_fraction: float = 0.6  # skip cases whose paged + contiguous K/V exceed this of free memory


def timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    """Median milliseconds of a call: triton's do_bench (flushes L2) on CUDA, wall clock on CPU."""
    if device.type == "cuda":
        from triton.testing import do_bench  # type: ignore[import-untyped]  # no stubs
        return lambda fn: float(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def wall(fn: Callable[[], object]) -> float:  # one call: the interpreter is slow and not the point
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return wall


def sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal SDPA with fewer K/V heads than query heads (``enable_gqa``; expanded on torch < 2.5)."""
    try:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    except TypeError:
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def contiguous_kv(case, num_seqs: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense ``[num_seqs, num_kv_heads, length, head_dim]`` K and V copies, one sequence at a time."""
    k0 = case.k_cache
    k = torch.empty(num_seqs, k0.shape[2], length, k0.shape[3], dtype=k0.dtype, device=k0.device)
    v = torch.empty_like(k)
    for i in range(num_seqs):
        ki, vi = case.dense(i)
        k[i].copy_(ki.transpose(0, 1))
        v[i].copy_(vi.transpose(0, 1))
    return k, v


def fits(device: torch.device, nbytes: int, fraction: float) -> bool:
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return nbytes < fraction * free


def max_error(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> tuple[float, bool]:
    from kernels.paged_case import TOLERANCE
    atol, rtol = TOLERANCE[dtype]
    diff = (out.float() - ref.float()).abs()
    ok = bool((diff <= atol + rtol * ref.float().abs()).all())
    return float(diff.max()), ok


_Config = TypeVar("_Config")


def fastest(measure: Callable, launch: Callable[[_Config], Callable[[], object]],
            configs: list[_Config]) -> tuple[float, _Config]:
    """(ms, config) of the fastest config; configs that fail to compile (e.g. out of shared
    memory during a sweep) are skipped, unless none is left."""
    timed, errors = [], []
    for config in configs:
        try:
            timed.append((measure(launch(config)), config))
        except Exception as err:  # noqa: BLE001 - a sweep point that can't run is not a result
            errors.append(f"{config}: {type(err).__name__}: {err}")
    if not timed:
        raise RuntimeError("no launch configuration ran:\n" + "\n".join(errors))
    return min(timed, key=lambda r: r[0])


def bench_decode(shape: Shape, batch: int, context: int, device: torch.device, peak: float | None,
                 measure: Callable, configs: list | None = None) -> dict:
    """One decode case: Triton (best of ``configs``) vs SDPA on contiguous K/V, checked vs reference."""
    from kernels.paged_case import random_paged_kv
    from kernels.reference import paged_decode_attention_ref
    from kernels.triton_decode import choose_num_splits, default_config, paged_decode_attention_triton

    dtype = shape.torch_dtype
    case = random_paged_kv([context] * batch, shape.num_kv_heads, shape.head_dim, shape.block_size,
                           dtype=dtype, device=device, seed=batch * 7 + context, spare_blocks=0)
    gen = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(batch, shape.num_heads, shape.head_dim, generator=gen, device=device, dtype=dtype)
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, shape.scale)

    max_context = case.block_tables.shape[1] * shape.block_size

    def launch(config):
        splits = choose_num_splits(batch, shape.num_kv_heads, max_context, device, config)
        return lambda: paged_decode_attention_triton(*args, num_splits=splits, config=config)

    ms, config = fastest(measure, launch, configs or [default_config(dtype)])
    splits = choose_num_splits(batch, shape.num_kv_heads, max_context, device, config)
    out = launch(config)()
    err, ok = max_error(out, paged_decode_attention_ref(*args), dtype)

    # SDPA baseline: the GQA group folded into the query-length axis (exact for one query token),
    # so the fastest dense kernel runs with no K/V expansion.
    k, v = contiguous_kv(case, batch, context)
    group = shape.num_heads // shape.num_kv_heads
    q_fold = q.view(batch, shape.num_kv_heads, group, shape.head_dim)
    sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q_fold, k, v, scale=shape.scale)  # noqa: E731
    sdpa_ms = measure(sdpa)
    sdpa_err, _ = max_error(sdpa().reshape(q.shape), out, dtype)
    del k, v

    nbytes = case.kv_bytes()
    bandwidth = nbytes / (ms * 1e-3)
    return {
        "batch": batch, "context": context, "num_splits": splits, "config": asdict(config),
        "triton_ms": ms, "sdpa_ms": sdpa_ms, "speedup_vs_sdpa": sdpa_ms / ms,
        "kv_bytes": nbytes, "bandwidth_TBps": bandwidth / 1e12,
        "fraction_of_peak": bandwidth / peak if peak else None,
        "max_abs_err_vs_reference": err, "max_abs_diff_vs_sdpa": sdpa_err, "correct": ok,
    }


def bench_prefill(shape: Shape, prompt_len: int, num_seqs: int, q_len: int, device: torch.device,
                  measure: Callable, configs: list | None = None) -> dict:
    """One prefill case: ``num_seqs`` sequences of ``prompt_len`` tokens, the last ``q_len`` computed now."""
    from kernels.paged_case import random_paged_kv
    from kernels.reference import paged_prefill_attention_ref
    from kernels.triton_prefill import default_config, paged_prefill_attention_triton

    dtype = shape.torch_dtype
    case = random_paged_kv([prompt_len] * num_seqs, shape.num_kv_heads, shape.head_dim, shape.block_size,
                           dtype=dtype, device=device, seed=prompt_len + q_len, spare_blocks=0)
    gen = torch.Generator(device=device).manual_seed(2)
    q = torch.randn(num_seqs * q_len, shape.num_heads, shape.head_dim, generator=gen, device=device, dtype=dtype)
    cu = torch.arange(0, num_seqs + 1, device=device, dtype=torch.int32) * q_len
    args = (q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, shape.scale)

    ms, config = fastest(measure, lambda c: lambda: paged_prefill_attention_triton(*args, config=c),
                         configs or [default_config(dtype)])
    out = paged_prefill_attention_triton(*args, config=config)
    err, ok = max_error(out, paged_prefill_attention_ref(*args), dtype)

    # Causal work: query j of a chunk after `context` cached tokens sees context + j + 1 keys.
    context = prompt_len - q_len
    pairs = num_seqs * (q_len * context + q_len * (q_len + 1) // 2)
    flops = 4 * pairs * shape.num_heads * shape.head_dim
    row: dict[str, Any] = {  # a JSON report row: values of several types
        "prompt_len": prompt_len, "q_len": q_len, "num_seqs": num_seqs, "config": asdict(config),
        "triton_ms": ms, "tflops": flops / (ms * 1e-3) / 1e12,
        "max_abs_err_vs_reference": err, "correct": ok, "sdpa_ms": None, "ratio_vs_sdpa": None,
    }
    if q_len == prompt_len:  # SDPA's is_causal is top-left aligned: comparable only without context
        k, v = contiguous_kv(case, num_seqs, prompt_len)
        qd = q.view(num_seqs, prompt_len, shape.num_heads, shape.head_dim).transpose(1, 2)
        row["sdpa_ms"] = measure(lambda: sdpa_causal(qd, k, v, shape.scale))
        row["ratio_vs_sdpa"] = ms / row["sdpa_ms"]
    return row


def sweep_configs(kind: str, sweep: bool) -> list | None:
    """Launch configurations to try (None: the defaults only)."""
    if not sweep:
        return None
    if kind == "decode":
        from kernels.triton_decode import DecodeConfig
        return [DecodeConfig(block_n=n, num_warps=w, num_stages=s)
                for n in (32, 64, 128) for w in (4, 8) for s in (2, 3)]
    from kernels.triton_prefill import PrefillConfig
    return [PrefillConfig(block_m=m, block_n=n, num_warps=w, num_stages=s)
            for m in (64, 128) for n in (32, 64) for w in (4, 8) for s in (2, 3)]


def run(shape: Shape, plan: Plan, device: torch.device, log: Callable[[str], None] = print) -> dict:
    """Run every case that fits in memory; return the report (also printed line by line)."""
    import triton  # type: ignore[import-untyped]  # no stubs

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (Triton interpreter; timings meaningless)"
    peak = peak_bandwidth(name) if device.type == "cuda" else None
    measure = timer(device)
    elem = torch.tensor([], dtype=shape.torch_dtype).element_size()
    report = {
        "device": name, "peak_bandwidth_TBps": peak / 1e12 if peak else None,
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "shape": asdict(shape), "decode": [], "prefill": [],
    }
    log(f"{name}: peak {report['peak_bandwidth_TBps'] or '?'} TB/s; {shape}")
    log(f"{'batch':>6} {'context':>8} {'splits':>6} {'triton ms':>10} {'sdpa ms':>9} {'TB/s':>6} {'of peak':>7} {'x sdpa':>6} {'ok':>3}")
    for context in plan.decode_contexts:
        for batch in plan.decode_batches:
            nbytes = 2 * batch * context * 2 * shape.num_kv_heads * shape.head_dim * elem
            if not fits(device, nbytes, plan.memory_fraction):
                log(f"{batch:>6} {context:>8}  skipped: {nbytes / 1e9:.1f} GB of K/V does not fit")
                continue
            long_context = context == max(plan.decode_contexts)
            r = bench_decode(shape, batch, context, device, peak, measure,
                             sweep_configs("decode", plan.sweep and long_context))
            report["decode"].append(r)
            frac = f"{r['fraction_of_peak']:.0%}" if r["fraction_of_peak"] is not None else "?"
            log(f"{batch:>6} {context:>8} {r['num_splits']:>6} {r['triton_ms']:>10.4f} {r['sdpa_ms']:>9.4f} "
                f"{r['bandwidth_TBps']:>6.2f} {frac:>7} {r['speedup_vs_sdpa']:>6.2f} {'yes' if r['correct'] else 'NO':>3}")
            empty_cache(device)
    log(f"{'prompt':>6} {'q_len':>6} {'seqs':>5} {'triton ms':>10} {'sdpa ms':>9} {'TFLOP/s':>8} {'/ sdpa':>6} {'ok':>3}")
    for prompt_len in plan.prefill_lens:
        num_seqs = max(1, plan.prefill_tokens // prompt_len)
        for q_len in sorted({prompt_len, min(plan.chunk, prompt_len)}, reverse=True):
            r = bench_prefill(shape, prompt_len, num_seqs, q_len, device, measure,
                              sweep_configs("prefill", plan.sweep and q_len == prompt_len))
            report["prefill"].append(r)
            sdpa = f"{r['sdpa_ms']:>9.4f} " if r["sdpa_ms"] else f"{'-':>9} "
            ratio = f"{r['ratio_vs_sdpa']:>6.2f}" if r["ratio_vs_sdpa"] else f"{'-':>6}"
            log(f"{prompt_len:>6} {q_len:>6} {num_seqs:>5} {r['triton_ms']:>10.4f} {sdpa}{r['tflops']:>8.1f} {ratio} "
                f"{'yes' if r['correct'] else 'NO':>3}")
            empty_cache(device)
    report["goals"] = goals(report, plan)
    log("goals: " + json.dumps(report["goals"]))
    return report


def empty_cache(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def goals(report: dict, plan: Plan) -> dict:
    """The issue's targets: long-context decode >= 70% of peak and no slower than SDPA; prefill <= 1.5x SDPA."""
    longest = max(plan.decode_contexts)
    long_rows = [r for r in report["decode"] if r["context"] == longest]
    fracs = [r["fraction_of_peak"] for r in long_rows if r["fraction_of_peak"] is not None]
    ratios = [r["ratio_vs_sdpa"] for r in report["prefill"] if r["ratio_vs_sdpa"] is not None]
    return {
        "all_correct": all(r["correct"] for r in report["decode"] + report["prefill"]),
        "decode_long_context_best_fraction_of_peak": max(fracs) if fracs else None,
        "decode_long_context_reaches_70pct_peak": (max(fracs) >= 0.7) if fracs else None,
        "decode_long_context_not_slower_than_sdpa": all(r["speedup_vs_sdpa"] >= 1.0 for r in long_rows) if long_rows else None,
        "prefill_worst_ratio_vs_sdpa": max(ratios) if ratios else None,
        "prefill_within_1_5x_sdpa": (max(ratios) <= 1.5) if ratios else None,
    }


def result_path(device_name: str, out_dir: Path) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "_", device_name.lower().replace("nvidia", "")).strip("_")
    return out_dir / f"kernels_{slug or 'unknown'}.json"


def smoke_plan() -> tuple[Shape, Plan]:
    """Tiny shapes that exercise every code path (split and unsplit decode, chunked prefill) in seconds."""
    return (Shape(num_heads=4, num_kv_heads=2, head_dim=64, block_size=16, dtype="fp16"),
            Plan(decode_batches=[1, 3], decode_contexts=[40, 300], prefill_lens=[48], prefill_tokens=96, chunk=16))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kernels.bench", description=__doc__.split("\n\n")[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--heads", type=int, default=32, help="query heads")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--batches", type=ints, default=Plan().decode_batches, help="decode batch sizes, e.g. 1,8,64")
    p.add_argument("--contexts", type=ints, default=Plan().decode_contexts, help="decode context lengths")
    p.add_argument("--prefill-lens", type=ints, default=Plan().prefill_lens, help="prefill prompt lengths")
    p.add_argument("--sweep", action="store_true", help="also try launch configs on the longest cases")
    p.add_argument("--out", type=Path, default=None, help=f"output directory (default {RESULTS_DIR})")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton CPU interpreter")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere (kernels.interpreter)
        from kernels.interpreter import interpreter_ready
        if not interpreter_ready():
            print("kernels.bench --cpu-smoke: triton is missing or was imported before TRITON_INTERPRET=1", file=sys.stderr)
            return 2
        shape, plan = smoke_plan()
        plan.sweep = args.sweep
        device = torch.device("cpu")
    else:
        if not torch.cuda.is_available():
            print("kernels.bench needs a CUDA GPU (none found); `python -m kernels.bench --cpu-smoke` "
                  "checks the code paths on CPU", file=sys.stderr)
            return 2
        shape = Shape(args.heads, args.kv_heads, args.head_dim, args.block_size, args.dtype)
        plan = Plan(args.batches, args.contexts, args.prefill_lens, sweep=args.sweep)
        device = torch.device("cuda")
    report = run(shape, plan, device)
    if args.out is not None or not args.cpu_smoke:
        path = result_path(report["device"] if device.type == "cuda" else "cpu_smoke", args.out or RESULTS_DIR)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")
    return 0 if report["goals"]["all_correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
