"""The roofline's efficiency constants, per GPU: what fraction of a datasheet peak real kernels
reach, and the fixed latencies small kernels and collectives cannot go below.

Why per GPU: a fraction fitted on one GPU does not carry to the next generation. A100's
constants (fitted to Vidur's A100 kernel timings) priced an H100 decode step of Llama-2-7B at
12.3 ms where the measured operator tables give 8.8 ms, and H100 Llama-2-7B TPOT 70% too slow
on the shared vLLM runs. So each GPU with measured operator tables (NVIDIA AIConfigurator's,
the ``aiconfigurator-core`` package) gets the constants its own GEMM, attention and all-reduce
rows give, fitted once by ``benchmarks/roofline_vs_tables.py --fit`` and written here: the
roofline is what prices where that package is not installed, so the numbers must live in the
code. Kernels the tables do not time (norms, rotary, activations, send/recv, PCIe copies) keep
A100's fractions, as ratios of each GPU's own peaks; the CPU constants here are Vidur's vLLM V0
figures, which a roofline built without an engine release uses (a scenario's uses the release's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

from sim.catalog.hardware import HardwareSpec


@dataclass(frozen=True)
class Efficiency:
    """The fitted constants: fractions of datasheet peaks real kernels reach, and the fixed
    latencies small kernels and collectives cannot go below.

    ``A100_EFFICIENCY`` is fitted to Vidur's A100-80GB kernel timings
    (``benchmarks/cost_model_vs_vidur.py --fit``); ``GPU_EFFICIENCY`` holds the GPUs whose
    GEMM, attention and all-reduce constants are fitted to their own measured tables
    (``benchmarks/roofline_vs_tables.py --fit``). ``efficiency_for`` picks one per GPU.
    """

    gemm_compute: float          # dense GEMM FLOP/s / peak (cuBLAS, large shapes)
    memory: float                # streaming bytes/s / peak HBM bandwidth: GEMM weights,
                                 # decode attention KV, residual adds, copies
    gemm_latency_s: float        # floor of one GEMM kernel: launch, ramp-up, tail wave
    norm_memory: float           # RMSNorm/LayerNorm (row reductions) bytes/s / peak
    elementwise_memory: float    # math-heavy pointwise kernels: rope, SiLU*mul, softmax
    elementwise_latency_s: float # floor of one bandwidth-bound kernel
    attn_prefill_compute: float  # FlashAttention prefill FLOP/s / peak (causal pairs)
    attention_latency_s: float   # floor of one attention call (kernel + reshapes)
    allreduce_bandwidth: float   # NCCL ring bus bandwidth / link bandwidth per direction
    allreduce_latency_s: float   # fixed cost of one NCCL all-reduce (launch + sync)
    p2p_bandwidth: float         # NCCL send/recv bytes/s / link bandwidth per direction
    p2p_latency_s: float         # fixed cost of one NCCL send/recv
    pcie_efficiency: float       # host<->device copy bytes/s / PCIe per direction
    cpu_step_s: float            # engine CPU time per step: schedule, prepare, sample
    cpu_per_seq_s: float         # ... plus this per sequence in the batch
    # Added with the per-GPU fits; the defaults keep an Efficiency built without them as before.
    quantized_gemm_compute: float = 0.0  # GEMM FLOP/s / peak on the weight format's own tensor
                                 # cores (FP8, INT8, FP4); 0: as ``gemm_compute``
    quantized_gemm_latency_s: float = 0.0  # the kernel quantising such a GEMM's input (fixed part)
    attn_prefill_extra_keys: float = 0.0  # keys each prompt token's row computes beyond its
                                 # causal ones: FlashAttention's whole diagonal tiles, pipeline fill
    # The fused-MoE kernels (vLLM's ``fused_experts``: token sort, two grouped GEMMs, the
    # activation), fitted to the MoE tables; the defaults price experts as dense GEMMs.
    moe_compute_ratio: float = 1.0  # their FLOP rate / the same format's dense GEMM rate
    moe_memory: float = 0.0      # expert weight streaming bytes/s / peak; 0: as ``memory``
    moe_latency_s: float = 0.0   # fixed seconds of one layer's call; 0: two GEMM launches
    moe_row_columns: float = 0.0  # per routed row, extra columns of work beyond its expert's
                                 # (gather, scatter, partial tiles): what narrow shards pay
    moe_expert_latency_s: float = 0.0  # fixed seconds per expert a call touches (its weight
                                 # tiles' pipeline start), beside streaming its weights
    attn_score_s: float = 0.0    # prefill attention's seconds per query-key score and head
                                 # beyond its matmuls: the softmax's exponential (special-function
                                 # units, far slower than the tensor cores)


# Fitted to Vidur's A100 profiles (see benchmarks/cost_model_vs_vidur.py --fit, rounded).
# PCIe: Azure's ND A100 v4 benchmark measures 26.3 GB/s host-to-device on Gen4 x16 (0.82).
# CPU: Vidur's cpu_overheads.csv for vLLM on A100 with Llama-2-7B, TP1 (schedule + prepare
# inputs + sampler): ~1.0 ms per step + ~0.04 ms per sequence; output processing, which
# newer engines overlap with the GPU, is left out.
A100_EFFICIENCY = Efficiency(
    gemm_compute=0.70,
    memory=0.76,
    gemm_latency_s=8.5e-6,
    norm_memory=0.38,
    elementwise_memory=0.48,
    elementwise_latency_s=2.0e-6,
    attn_prefill_compute=0.26,
    attention_latency_s=16e-6,
    allreduce_bandwidth=0.56,
    allreduce_latency_s=47e-6,
    p2p_bandwidth=0.96,
    p2p_latency_s=14e-6,
    pcie_efficiency=0.82,
    cpu_step_s=1.0e-3,
    cpu_per_seq_s=0.04e-3,
    quantized_gemm_compute=0.70,  # A100 has no FP8 and its INT8 GEMMs are not measured:
    quantized_gemm_latency_s=0.0,  # as 16-bit, with no quantisation kernel
    attn_prefill_extra_keys=0.0,  # not fitted on Vidur's rows (their error there: docs/cost_model.md)
)


#: GPUs whose GEMM, attention and all-reduce constants are fitted to their own measured tables
#: (``benchmarks/roofline_vs_tables.py --fit``, rounded; aiconfigurator-core 0.12.0, the vLLM
#: 0.24.0 folders: bf16 ``torch.nn.functional.linear`` and per-tensor FP8 GEMMs with n, k >= 512,
#: FlashAttention decode and prefill with a bf16 KV cache and no window, vLLM's custom all-reduce
#: in its graph form up to its 8 MiB buffer and NCCL above, and vLLM's fused-MoE layer in bf16 and
#: block FP8). The other constants are A100's.
GPU_EFFICIENCY: dict[str, Efficiency] = {
    "h100-sxm": replace(
        A100_EFFICIENCY,
        gemm_compute=0.791, memory=0.854, gemm_latency_s=3.7e-06, quantized_gemm_compute=0.46,
        quantized_gemm_latency_s=4e-06, attn_prefill_compute=0.943,
        attention_latency_s=1.27e-05, attn_prefill_extra_keys=585, allreduce_bandwidth=0.615,
        allreduce_latency_s=4.7e-06, moe_compute_ratio=0.738,
        moe_row_columns=1.03e+03, moe_memory=0.877, moe_latency_s=2.93e-05,
        moe_expert_latency_s=1.8e-07, attn_score_s=2.22e-13),
    "h200": replace(
        A100_EFFICIENCY,
        gemm_compute=0.79, memory=0.813, gemm_latency_s=3.92e-06, quantized_gemm_compute=0.478,
        quantized_gemm_latency_s=4.46e-06, attn_prefill_compute=0.939,
        attention_latency_s=1.28e-05, attn_prefill_extra_keys=544, allreduce_bandwidth=0.622,
        allreduce_latency_s=4.79e-06, moe_compute_ratio=0.742,
        moe_row_columns=985, moe_memory=0.864, moe_latency_s=2.98e-05,
        moe_expert_latency_s=1.87e-07, attn_score_s=2.34e-13),
    "b200": replace(
        A100_EFFICIENCY,
        gemm_compute=0.7, memory=0.778, gemm_latency_s=3.42e-06, quantized_gemm_compute=0.41,
        quantized_gemm_latency_s=4.69e-06, attn_prefill_compute=0.841,
        attention_latency_s=7.73e-06, attn_prefill_extra_keys=501, allreduce_bandwidth=0.5,
        allreduce_latency_s=7.66e-06, moe_compute_ratio=0.507,
        moe_row_columns=483, moe_memory=0.868, moe_latency_s=1.69e-05,
        moe_expert_latency_s=1e-07, attn_score_s=1.77e-13),
    "b300": replace(
        A100_EFFICIENCY,
        gemm_compute=0.767, memory=0.775, gemm_latency_s=3.16e-06, quantized_gemm_compute=0.431,
        quantized_gemm_latency_s=4.24e-06, attn_prefill_compute=0.991,
        attention_latency_s=9.74e-06, attn_prefill_extra_keys=1.05e+03,
        allreduce_bandwidth=0.507, allreduce_latency_s=7.37e-06, moe_compute_ratio=0.503,
        moe_row_columns=496, moe_memory=0.851, moe_latency_s=1.53e-05,
        moe_expert_latency_s=1e-07, attn_score_s=9.72e-14),
    "gb200": replace(
        A100_EFFICIENCY,
        gemm_compute=0.681, memory=0.77, gemm_latency_s=3.44e-06, quantized_gemm_compute=0.403,
        quantized_gemm_latency_s=4.63e-06, attn_prefill_compute=0.854,
        attention_latency_s=1.11e-05, attn_prefill_extra_keys=898, allreduce_bandwidth=0.507,
        allreduce_latency_s=7.56e-06, moe_compute_ratio=0.505,
        moe_row_columns=503, moe_memory=0.87, moe_latency_s=1.65e-05,
        moe_expert_latency_s=1e-07, attn_score_s=1.59e-13),
    "gb300": replace(
        A100_EFFICIENCY,
        gemm_compute=0.761, memory=0.766, gemm_latency_s=3.4e-06, quantized_gemm_compute=0.432,
        quantized_gemm_latency_s=4.55e-06, attn_prefill_compute=1,
        attention_latency_s=1.06e-05, attn_prefill_extra_keys=1.09e+03,
        allreduce_bandwidth=0.516, allreduce_latency_s=7.35e-06, moe_compute_ratio=0.479,
        moe_row_columns=492, moe_memory=0.843, moe_latency_s=1.59e-05,
        moe_expert_latency_s=1e-07, attn_score_s=9.23e-14),
    "l40s": replace(
        A100_EFFICIENCY,
        gemm_compute=0.592, memory=0.788, gemm_latency_s=1.46e-06, quantized_gemm_compute=0.507,
        quantized_gemm_latency_s=3.95e-06, attn_prefill_compute=0.641,
        attention_latency_s=9.55e-06, attn_prefill_extra_keys=291, allreduce_bandwidth=0.138,
        allreduce_latency_s=1.28e-05, moe_compute_ratio=1,
        moe_row_columns=970, moe_memory=0.776, moe_latency_s=9.16e-06,
        moe_expert_latency_s=1e-07, attn_score_s=4.72e-13),
    "rtx-pro-6000": replace(
        A100_EFFICIENCY,
        gemm_compute=0.73, memory=0.82, gemm_latency_s=2.98e-06, quantized_gemm_compute=0.735,
        quantized_gemm_latency_s=3.03e-06, attn_prefill_compute=0.716,
        attention_latency_s=1.14e-05, attn_prefill_extra_keys=292, allreduce_bandwidth=0.39,
        allreduce_latency_s=1.88e-05, moe_compute_ratio=0.566,
        moe_row_columns=630, moe_memory=0.821, moe_latency_s=2.33e-05,
        moe_expert_latency_s=1e-07, attn_score_s=2.91e-13),
}

#: The roofline's MAPE (%) per operator family with these constants: against each GPU's own
#: table rows (``benchmarks/roofline_vs_tables.py``, the families it fits and FP8 GEMMs), and
#: A100's against Vidur's profiles (``benchmarks/cost_model_vs_vidur.py``; its GEMM figure is
#: the whole layer without attention). The summary's ``cost_model.known_error``.
EFFICIENCY_ERROR: dict[str, dict[str, float]] = {
    # Vidur's A100 profiles (benchmarks/cost_model_vs_vidur.py; whole layer without attention)
    "a100-80gb": {"gemm": 6.2, "attn_decode": 11.2, "attn_prefill": 20.1, "tp_allreduce": 11.4},
    "h100-sxm": {"gemm": 8.3, "gemm_fp8": 19.6,
                "attn_decode": 18.8, "attn_prefill": 14.6, "tp_allreduce": 13.9,
                "moe": 13.4, "moe_fp8": 8.9},
    "h200": {"gemm": 8.5, "gemm_fp8": 23.4,
            "attn_decode": 20.0, "attn_prefill": 14.0, "tp_allreduce": 16.2,
            "moe": 16.4, "moe_fp8": 11.2},
    "b200": {"gemm": 11.1, "gemm_fp8": 25.3, "gemm_fp4": 15.7,
            "attn_decode": 24.8, "attn_prefill": 18.5, "tp_allreduce": 18.0,
            "moe": 20.1, "moe_fp8": 14.8},
    "b300": {"gemm": 11.2, "gemm_fp8": 24.0, "gemm_fp4": 14.7,
            "attn_decode": 19.2, "attn_prefill": 21.8, "tp_allreduce": 18.6,
            "moe": 19.4, "moe_fp8": 14.3},
    "gb200": {"gemm": 12.9, "gemm_fp8": 24.2, "gemm_fp4": 14.5,
             "attn_decode": 18.6, "attn_prefill": 21.5, "tp_allreduce": 16.4,
             "moe": 19.8, "moe_fp8": 14.5},
    "gb300": {"gemm": 10.7, "gemm_fp8": 24.1, "gemm_fp4": 14.1,
             "attn_decode": 18.6, "attn_prefill": 21.3, "tp_allreduce": 16.6,
             "moe": 19.4, "moe_fp8": 14.1},
    "l40s": {"gemm": 16.6, "gemm_fp8": 22.0,
            "attn_decode": 37.0, "attn_prefill": 18.9, "tp_allreduce": 106.4,
            "moe": 8.9, "moe_fp8": 6.3},
    "rtx-pro-6000": {"gemm": 13.1, "gemm_fp8": 15.1, "gemm_fp4": 25.7,
                    "attn_decode": 26.9, "attn_prefill": 18.7, "tp_allreduce": 27.2,
                    "moe": 10.1},
}

#: GPUs with no tables of their own that take another GPU's fitted fractions, of their own
#: peaks: the same architecture and kernels (H100 PCIe and H20 are Hopper, L4 and RTX 4090 are
#: Ada like the L40S). A GPU in neither table (A10G, MI300X...) takes A100's.
EFFICIENCY_FROM: dict[str, str] = {
    "h100-pcie": "h100-sxm",
    "h20": "h100-sxm",
    "l4": "l40s",
    "rtx-4090": "l40s",
}


def _name(hardware: Union[str, HardwareSpec]) -> str:
    return hardware if isinstance(hardware, str) else hardware.name


def fitted_on(hardware: Union[str, HardwareSpec]) -> str:
    """The GPU whose measured rows gave ``hardware``'s constants: itself, its sibling
    (``EFFICIENCY_FROM``) where that has a fit, else ``a100-80gb`` (Vidur's profiles)."""
    name = _name(hardware)
    src = EFFICIENCY_FROM.get(name, name)
    return src if src in GPU_EFFICIENCY else "a100-80gb"


def efficiency_for(hardware: Union[str, HardwareSpec]) -> Efficiency:
    """The constants the roofline uses on ``hardware`` (a catalog name or a spec)."""
    return GPU_EFFICIENCY.get(fitted_on(hardware), A100_EFFICIENCY)


def efficiency_error(hardware: Union[str, HardwareSpec]) -> dict:
    """What is known of the roofline's operator error on ``hardware`` (``known_error``): the
    GPU whose rows were measured, the MAPE per family there, and whether that GPU is this one."""
    name, src = _name(hardware), fitted_on(hardware)
    out: dict = {"measured_on": src, "operator_mape_pct": dict(EFFICIENCY_ERROR[src])}
    if src != name:
        out["note"] = f"no operator timings of {name}: the error of its constants here is unknown"
    return out


def efficiency_source(hardware: Union[str, HardwareSpec]) -> str:
    """Where ``efficiency_for(hardware)``'s fitted constants come from, in a few words."""
    name, src = _name(hardware), fitted_on(hardware)
    if src not in GPU_EFFICIENCY:
        return "A100 kernel timings (Vidur)"
    return f"{src}'s measured tables" if src == name else f"{src}'s measured tables (same architecture)"
