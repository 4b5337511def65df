"""The operator-table step pricer: a step priced from kernel timings measured under vLLM.

Why: the roofline's efficiencies were fitted on A100 operator timings and do not carry over to
whole serving steps on other GPUs and TP degrees. NVIDIA AIConfigurator measured, under vLLM,
every GEMM by (m, n, k), FlashAttention decode by (batch, KV length, heads) and prefill by
(batch, new tokens, heads), and vLLM's custom all-reduce / NCCL by message size, on A100, H100,
H200 and L40S (``sim.pricing.table_data`` reads them). This pricer composes those measurements
into one step, and models from vLLM's code what the tables do not show (docs/cost_model.md):

- **Measured** (interpolated between measured points): the four GEMMs of a layer at the step's
  token count (n, k per TP shard), the LM head on the rows that are sampled, decode attention
  at (decoding sequences, mean KV length), prefill attention at (prefilling sequences, mean
  new tokens) plus its cross term over cached tokens, and two all-reduces per layer under TP
  (vLLM's custom all-reduce up to its 8 MiB buffer, in graph or eager form, NCCL above).
- **Modelled**: norms, rotary, SiLU*mul, residual adds, KV-cache writes, embedding, final
  norm and sampling (bandwidth-bound kernels: the roofline's formulas, whose efficiencies come
  from A100 operator timings, not from serving runs); CUDA graphs (vLLM V1's default
  ``FULL_AND_PIECEWISE``: a decode-only batch of at most ``max_cudagraph_capture_size`` tokens
  replays one full graph, a mixed batch that size or smaller runs piecewise graphs with
  attention launched eagerly between them, a bigger batch runs eagerly; a graphed batch is
  padded to the next capture size); kernel launch gaps (a step's GPU time is at least its CPU
  launch time); V1's async scheduling (on by default since vLLM 0.14: the CPU schedules step
  N+1 while the GPU runs step N, so a step lasts ``max(GPU time, CPU time)``).

Fast path: ``__init__`` folds every cost that depends only on the GEMM row count into one
piecewise-linear curve (eager) and one value per capture size (graphs), and each attention
table into bilinear cells, so a step costs a few bisects and float ops. ``_formula`` is written
once over ``+ - * /``, a ``max`` and index lookups, and runs on Python floats (``price``) and on
NumPy arrays (``price_columns``) with the same float operations: the two agree bit for bit.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left, bisect_right
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Union, cast

import numpy as np

from sim.catalog.dtypes import (FP8_BLOCK_BYTES, INT4_BYTES, MXFP4_BYTES, NVFP4_BYTES, gemm_quantized,
                                quantized_groups, scope_note)
from sim.catalog.engines import (EngineRelease, get_engine, sglang_extend_graph_tokens,
                                 sglang_pcg_capture_sizes, version_text)
from sim.catalog.hardware import HardwareSpec, get_hardware
from sim.catalog.models import ModelSpec, get_model
from sim.errors import ConfigError
from sim.memory_plan import check_parallel, kv_heads_per_gpu
from sim.policies.step import StepShape
from sim.pricing.base import Max, ShapeColumns, StepPricer, register_pricer
from sim.pricing.experts import uniform_over_balanced
from sim.pricing.features import sampled_rows
from sim.pricing.efficiency import A100_EFFICIENCY
from sim.pricing.roofline import QK_VARIANCE_BYTES, RooflineCostModel
from sim.pricing.table_data import (
    GPU_ARCH, GPU_TABLE_DIRS, MISSING_TABLES_NOTE, TableError, default_tables_root, gpu_dir,
    collector_pair, legacy_collector_overhead, recollected, recollected_file,
    latest_file, package_tables_root, package_version, read_columns, read_columns_present,
    table_file, table_files,
)

#: vLLM's custom all-reduce buffer (``CustomAllreduce`` ``max_size``, 8 MiB; SGLang's, derived
#: from it, the same): bigger messages go to NCCL.
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024
#: GPU counts vLLM's (and SGLang's) custom all-reduce supports.
CUSTOM_ALLREDUCE_GPUS = (2, 4, 6, 8)

# Host-side costs the kernel tables do not include. Sources, not fits: a CUDA kernel launch
# through PyTorch's dispatcher costs a few microseconds of CPU (cudaLaunchKernel alone ~2-3 us,
# NVIDIA's CUDA C++ Best Practices; PyTorch op dispatch adds a few more); one cudaGraphLaunch
# of a captured piece costs about the same, and vLLM's piecewise backend adds a Python call
# per piece.
KERNEL_LAUNCH_S = 5e-6
GRAPH_LAUNCH_S = 10e-6
#: Host time per layer of a forward that runs outside CUDA graphs (vLLM's steps above its largest
#: capture size, or all of them under ``enforce_eager``; SGLang's extends outside its piecewise
#: graphs): Python, the dispatcher and every launch of one layer's ops, which the GPU cannot run
#: ahead of. Measured, not fitted: vLLM 0.29 decoding Qwen2.5-Omni-7B's thinker (28 Qwen2.5
#: layers, one GPU) took 22-23 ms a token with ``enforce_eager`` against 13 ms with CUDA graphs
#: on A800s (vllm-project/vllm-omni#7960, 2026-09-22): a host-bound eager step of about 0.8 ms a
#: layer (its talker, 19-20 against 5.4-6 ms, agrees). AIConfigurator's vLLM model adds the same
#: 0.8 ms a layer to a prefill (``_prefill_dispatch_overhead_ms``, fitted there on its silicon
#: points, the check set here: it corroborates, it is not the source).
EAGER_HOST_S_PER_LAYER = 0.8e-3
#: Ops the host issues for that measured dense layer: its attention block (fused add + RMSNorm,
#: QKV GEMM, rotary, KV-cache write, attention, O GEMM) and its MLP (fused add + RMSNorm, gate_up
#: GEMM, SiLU x mul, down GEMM). Other layers cost ``EAGER_HOST_S_PER_LAYER / DENSE_LAYER_OPS``
#: per op they issue (``eager_host_seconds``).
DENSE_ATTENTION_OPS, DENSE_MLP_OPS = 6, 4
DENSE_LAYER_OPS = DENSE_ATTENTION_OPS + DENSE_MLP_OPS
#: Ops of the other blocks, counted the same way from vLLM's and SGLang's module code.
#: MLA (DeepSeek-V3): add + norm, fused q_a / kv_a GEMM, q_a and kv_a norms, q_b GEMM, kv_b GEMM
#: (the prefill path expands keys and values), rotary, k concat, KV-cache write, attention, O.
MLA_ATTENTION_OPS = 11
#: A Gated DeltaNet layer (Qwen3.5, Qwen3-Next): add + norm, qkvz and ba GEMMs, causal conv,
#: gating, the chunked delta rule (2), gated norm, out GEMM.
LINEAR_ATTENTION_OPS = 9
#: A routed MoE block: add + norm, router GEMM, top-k, activation quantise / permute, the fused
#: experts (2), combine; shared experts add gate_up, activation and down.
MOE_OPS, SHARED_EXPERT_OPS = 7, 3
#: Under tensor parallelism each layer all-reduces twice (attention and MLP outputs).
TP_ALLREDUCE_OPS = 2


def eager_host_seconds(model: ModelSpec, tensor_parallel_size: int = 1) -> float:
    """The host's time to issue one forward of ``model`` outside CUDA graphs: ops per layer
    (attention block by kind, MLP block dense or MoE, two all-reduces under TP) at the measured
    dense layer's time per op.

    Why by ops: a DeepSeek-V3 layer (MLA and a MoE with a shared expert) issues about twice a
    dense layer's ops, and its eager prefill shows it: SGLang without piecewise graphs took
    115 ms mean TTFT for one 1k-token prompt of DeepSeek-R1 on 8 GPUs (sgl-project/sglang#14918,
    W8A8 INT8, "before" at concurrency 1), which this prices at 111 ms of host time; Llama-3.1-8B
    FP8 on 8 GPUs, 30.0 ms eager against 19.7 ms in piecewise graphs (#13094), 30.7 ms."""
    m = model
    lin = m.linear_attention_layers
    attn_ops = (lin * LINEAR_ATTENTION_OPS
                + (m.num_layers - lin) * (MLA_ATTENTION_OPS if m.is_mla
                                          else DENSE_ATTENTION_OPS + (1 if m.qk_norm else 0)))
    moe_layers = m.num_layers - m.first_dense_layers if m.is_moe else 0
    moe = MOE_OPS + (SHARED_EXPERT_OPS if m.num_shared_experts else 0)
    mlp_ops = moe_layers * moe + (m.num_layers - moe_layers) * DENSE_MLP_OPS
    tp_ops = m.num_layers * TP_ALLREDUCE_OPS if tensor_parallel_size > 1 else 0
    return (attn_ops + mlp_ops + tp_ops) * EAGER_HOST_S_PER_LAYER / DENSE_LAYER_OPS

#: Known whole-step error against real runs, written by the lead's benchmark when measured.
STEP_ERROR_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / \
    "operator_tables_step_error.json"


class TablesNotCovering(ConfigError):
    """The tables exist but do not cover this deployment (GPU, dtype, parallelism): ``auto``
    falls back to the roofline, an explicit ``operator_tables`` says so in one line."""


def capture_sizes(max_num_seqs: int, engine: Optional[EngineRelease] = None,
                  hw: Optional[Any] = None, tensor_parallel_size: int = 1,
                  max_capture: Optional[int] = None) -> list[int]:
    """The engine release's CUDA-graph capture sizes (``EngineRelease.capture_sizes``: vLLM's
    ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``, ``max = min(2 * max_num_seqs,
    512)`` or ``engine.max_cudagraph_capture_size``; SGLang's up to ``sglang.cuda_graph_max_bs``,
    or its default for the GPU and TP)."""
    return (engine or get_engine()).capture_sizes(max_num_seqs, hw, tensor_parallel_size, max_capture)


#: ``quantization.weights`` -> the GEMM table's ``gemm_dtype`` measured for it (vLLM's kernels:
#: CUTLASS FP8 per-tensor W8A8, DeepSeek-style 128x128 block FP8, NVFP4 W4A4 on Blackwell).
#: MXFP4 and INT4 (AWQ/GPTQ) dense GEMMs have no rows under vLLM: the roofline prices them.
GEMM_DTYPES: dict[str, str] = {"fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
#: The MLA projections inside AIConfigurator's MLA module rows (``_build_attention``).
MLA_MODULE_GEMMS = ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj", "kv_b_proj", "o_proj")
#: ``quantization.weights`` -> the fused-MoE table's ``moe_dtype`` (MXFP4 as W4A16, what vLLM
#: runs gpt-oss with on Hopper and the default on Blackwell; INT4 as weight-only).
MOE_DTYPES: dict[str, str] = {"fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4",
                              "mxfp4": "w4a16_mxfp4", "int4": "int4_wo"}
#: Bytes a fused-MoE table row's expert weights take per parameter, by its ``moe_dtype``: the
#: catalog's per-format bytes, scales included (``sim.catalog.dtypes``), so the streaming floor
#: reads the same weights the roofline prices.
MOE_WEIGHT_BYTES: dict[str, float] = {"bfloat16": 2.0, "fp8": 1.0, "fp8_block": FP8_BLOCK_BYTES,
                                      "nvfp4": NVFP4_BYTES, "w4a16_mxfp4": MXFP4_BYTES,
                                      "w4a8_mxfp4_mxfp8": MXFP4_BYTES, "int4_wo": INT4_BYTES}
#: Weight matrices at least this large stream from HBM in a GEMM row (no L2 holds them): the
#: rows that give a GPU's streaming rate (``weight_streaming_rate``).
STREAMING_MIN_BYTES = 64 * 2**20


#: The fused-MoE kernel vLLM runs by default for a weight format, by GPU architecture
#: (``table_data.GPU_ARCH``; ``"*"``: any), as the tables' ``kernel_source`` names it: the
#: substrings every matching label holds. The 0.24 tables spell ``vllm_<method>_<backend>_<experts
#: class>``; older folders' labels name no backend (``vllm_mxfp4_moe``, ``vllm_marlin_int4_moe``)
#: and their collector ran other kernels: AIConfigurator's pre-0.24 vLLM collector measured
#: ``int4_wo`` through ``fused_experts`` with ``int4_w4a16_moe_quant_config`` (Triton WNA16,
#: group 128; 2-5x slower than Marlin on Kimi-K2.5's experts on H200 at 32-8,192 tokens), and its
#: B200 MXFP4 rows are 3.6x slower than FlashInfer's at every token count. These rows are read
#: from any version folder, nearest the engine first, before the version-nearest rule.
#:
#: - ``mxfp4`` (gpt-oss): ``Mxfp4MoEMethod``, backend by ``get_mxfp4_backend``
#:   (vllm/model_executor/layers/quantization/mxfp4.py, unchanged in this respect from 0.10.1,
#:   gpt-oss's release, to 0.24): SM10x with FlashInfer (vLLM's images ship it) ->
#:   ``SM100_FI_MXFP4_BF16``, FlashInfer's TRT-LLM MXFP4 x BF16 MoE; SM90 -> OpenAI's Triton
#:   kernels (``triton_kernels``; FlashInfer only under ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16``);
#:   other GPUs -> Marlin.
#: - ``int4`` (W4A16: compressed-tensors WNA16 as Kimi-K2.5's checkpoint, AWQ, GPTQ): the
#:   Marlin MoE (``CompressedTensorsWNA16MarlinMoEMethod``, ``AWQMarlinMoEMethod``,
#:   ``GPTQMarlinMoEMethod``) on every CUDA GPU vLLM serves them on.
DEFAULT_MOE_KERNELS: dict[str, dict[str, tuple[str, ...]]] = {
    "mxfp4": {"sm100": ("mxfp4_bf16", "trtllmmxfp4experts"), "sm90": ("oaitritonmxfp4experts",),
              "*": ("marlinexperts",)},
    "int4": {"*": ("marlinexperts",)},
}
#: Block-FP8 experts under vLLM on Blackwell: FlashInfer's TRT-LLM FP8 block-scale MoE. vLLM's
#: FP8 MoE oracle (``fused_moe/oracle/fp8.py``, #32414, January 2026) tries FLASHINFER_TRTLLM
#: first on SM10x unless ``VLLM_USE_FLASHINFER_MOE_FP8=0``; its monolithic kernel took only
#: DeepSeek-style and renormalising routers until #39141 (after 0.19.0), and the modular one
#: (#36307, fixed by #37346, March 2026: vLLM routes, FlashInfer's routed MoE runs the experts)
#: takes any router, MiniMax-M2's sigmoid-with-bias among them. From 0.18, then, every block-FP8
#: MoE runs it; the 0.24 tables time the monolithic kernel, the experts' GEMMs either way.
#: Earlier releases keep the version-nearest rows (AIConfigurator's pre-0.24 collector timed
#: Triton's ``fused_experts`` there). SGLang's FP8 MoE runner resolves ``auto`` to Triton for a
#: TP-only deployment, so this is vLLM's alone.
VLLM_BLOCK_FP8_TRTLLM: tuple[tuple[int, int, int], tuple[str, ...]] = ((0, 18, 0), ("flashinfer_trtllm",
                                                                                   "trtllmfp8experts"))
#: ``quantization.moe_kernel: triton`` (``VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0``
#: leave vLLM's oracle only Triton for block FP8): the tables' Triton labels, the 0.24
#: collector's ``...tritonexperts`` and the older ``vllm_fused_moe``.
TRITON_MOE_KERNELS: tuple[tuple[str, ...], ...] = (("tritonexperts",), ("vllm_fused_moe",))


#: The fused-MoE table's ``moe_dtype`` of MXFP4 experts fed MXFP8 activations.
MXFP8_MOE_DTYPE = "w4a8_mxfp4_mxfp8"
#: ``quantization.moe_activations: auto`` for MXFP4 experts on Blackwell, by engine: vLLM's
#: ``get_mxfp4_backend`` picks FlashInfer's TRT-LLM BF16 x MXFP4 MoE on SM10x unless told
#: otherwise (0.10.1 to 0.24); SGLang's ``--flashinfer-mxfp4-moe-precision default`` quantises
#: the activations to MXFP8. Other GPUs run BF16 activations (Triton, Marlin) under both.
MXFP4_ACTIVATIONS_DEFAULT: dict[str, str] = {"vllm": "bf16", "sglang": "mxfp8"}


def mxfp4_moe_activations(setting: str, engine: str, gpu: str, weight_dtype: str) -> Optional[str]:
    """``quantization.moe_activations`` for this deployment: None unless the experts are MXFP4;
    ``auto`` resolved by engine on Blackwell, ``bf16`` elsewhere. ``mxfp8`` on a GPU without
    FP8 x FP4 tensor cores (before Blackwell) is a ``ConfigError``."""
    if weight_dtype != "mxfp4":
        return None
    blackwell = GPU_ARCH.get(GPU_TABLE_DIRS.get(gpu, ""), "") == "sm100"
    if setting == "auto":
        return MXFP4_ACTIVATIONS_DEFAULT.get(engine, "bf16") if blackwell else "bf16"
    if setting == "mxfp8" and not blackwell:
        raise ConfigError(f"quantization.moe_activations: mxfp8 needs Blackwell's FP8 x FP4 MoE "
                          f"kernels (FlashInfer TRT-LLM); {gpu} runs MXFP4 experts with bf16 "
                          f"activations")
    return setting


def default_moe_kernel(weight_dtype: str, gpu_folder: str,
                       engine: Optional[EngineRelease] = None) -> Optional[tuple[str, ...]]:
    """``DEFAULT_MOE_KERNELS``'s label substrings for this format on this system folder (and,
    for block FP8, ``VLLM_BLOCK_FP8_TRTLLM`` under the vLLM release ``engine``), or None (any
    kernel: the fastest measured)."""
    if weight_dtype == "fp8_block":
        since, labels = VLLM_BLOCK_FP8_TRTLLM
        blackwell = GPU_ARCH.get(gpu_folder, "") == "sm100"
        vllm = engine is not None and engine.name == "vllm" and engine.version >= since
        return labels if blackwell and vllm else None
    by_arch = DEFAULT_MOE_KERNELS.get(weight_dtype)
    if not by_arch:
        return None
    return by_arch.get(GPU_ARCH.get(gpu_folder, ""), by_arch.get("*"))


def weight_streaming_rate(gemm: Mapping[str, np.ndarray]) -> Optional[float]:
    """Bytes per second: the fastest this GPU's GEMM table streams a weight matrix too large for
    L2 (bf16 rows of at most 16 rows and ``STREAMING_MIN_BYTES`` of weights: the weights are
    what they read). None where the table has no such row.

    Why: it is what a kernel reading weights once can reach on this GPU, measured by the same
    collector as the fused-MoE rows (``_floor_moe_rows``), not a fitted fraction."""
    sel = (gemm["gemm_dtype"] == "bfloat16") & (gemm["m"] <= 16)
    nbytes = gemm["n"][sel].astype(float) * gemm["k"][sel].astype(float) * 2.0
    big = nbytes >= STREAMING_MIN_BYTES
    if not big.any():
        return None
    return float(np.max(nbytes[big] / (gemm["latency"][sel][big].astype(float) * 1e-3)))


def moe_streaming_floor_ms(tokens: np.ndarray, hidden: Any, inter_per_gpu: Any, num_experts: Any,
                           top_k: Any, bytes_per_param: Any, rate: float) -> np.ndarray:
    """Milliseconds a balanced fused-MoE row of ``tokens`` cannot beat: the ``min(E, T x k)``
    experts it routes to, each ``3 x hidden x inter_per_gpu`` weights of ``bytes_per_param``,
    streamed at ``rate`` bytes per second (``weight_streaming_rate``). Shared by the table pricer
    (``_floor_moe_rows``) and the roofline's MoE fit, which leaves rows below it out."""
    touched = np.minimum(np.asarray(num_experts, dtype=float), np.asarray(tokens, dtype=float) * top_k)
    return touched * 3.0 * np.asarray(hidden, dtype=float) * inter_per_gpu * bytes_per_param / rate * 1e3


# --- interpolation primitives ----------------------------------------------------------------

_FAR = 1024.0  # a far knot appended past the last measured point: proportional extrapolation


def _same(rows: Any) -> Any:
    """No padding (vLLM, and SGLang without piecewise graphs)."""
    return rows


class _Lookups(NamedTuple):
    """The table look-ups one evaluation of the step formula calls, all scalar (``price``) or
    all vectorised (``price_columns``), so that one formula serves both bit for bit. The
    linear-attention pair is None for a model without such layers."""

    rows_eager: Callable
    graph_at: Callable
    dec: Callable
    #: Decode attention of a sliding-window layer (``dec`` where no rows time the window).
    dec_win: Callable
    pre: Callable
    #: Prefill attention of a sliding-window layer (``pre`` where no rows time the window).
    pre_win: Callable
    head: Callable
    gdn_pre: Optional[Callable]
    gdn_dec: Optional[Callable]
    #: An SGLang extend's rows padded to the piecewise graph that runs it (identity elsewhere).
    pad: Callable


class _Curve:
    """Piecewise-linear y(x) through measured knots (exact there), extrapolated in proportion
    to x past the last knot. ``at`` (floats) and ``at_array`` give the same bits."""

    def __init__(self, xs: Union[Sequence[float], np.ndarray],
                 ys: Union[Sequence[float], np.ndarray]) -> None:
        x = [float(v) for v in xs] + [float(xs[-1]) * _FAR]
        y = [float(v) for v in ys] + [float(ys[-1]) * _FAR]
        self.x, self.y = x, y
        self.s = [(y[i + 1] - y[i]) / (x[i + 1] - x[i]) for i in range(len(x) - 1)] + [
            y[-1] / x[-1]]
        self.nx, self.ny, self.ns = np.array(x), np.array(y), np.array(self.s)
        self.last = len(x) - 1

    def at(self, v: float) -> float:
        k = bisect_right(self.x, v) - 1
        k = 0 if k < 0 else (self.last - 1 if k >= self.last else k)
        return self.y[k] + self.s[k] * (v - self.x[k])

    def at_array(self, v: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(self.nx, v, side="right") - 1, 0, self.last - 1)
        return self.ny[k] + self.ns[k] * (v - self.nx[k])


class _Grid:
    """Bilinear z(x, y) over a measured grid (exact at grid points), extrapolated in proportion
    past the last row/column. Cells hold ``A + B dx + C dy + D dx dy``."""

    def __init__(self, xs: Union[Sequence[float], np.ndarray],
                 ys: Union[Sequence[float], np.ndarray], z: np.ndarray) -> None:
        xs = list(map(float, xs)) + [float(xs[-1]) * _FAR]
        ys = list(map(float, ys)) + [float(ys[-1]) * _FAR]
        z = np.asarray(z, dtype=float)
        z = np.vstack([z, z[-1:] * _FAR])
        z = np.hstack([z, z[:, -1:] * _FAR])
        hx, hy = np.diff(xs), np.diff(ys)
        z00, z10, z01, z11 = z[:-1, :-1], z[1:, :-1], z[:-1, 1:], z[1:, 1:]
        self.A = z00
        self.B = (z10 - z00) / hx[:, None]
        self.C = (z01 - z00) / hy[None, :]
        self.D = (z11 - z10 - z01 + z00) / (hx[:, None] * hy[None, :])
        self.xs, self.ys = xs, ys
        self.nxs, self.nys = np.array(xs), np.array(ys)
        self.lA, self.lB, self.lC, self.lD = (a.tolist() for a in (self.A, self.B, self.C, self.D))
        self.ix, self.iy = len(xs) - 2, len(ys) - 2

    def at(self, x: float, y: float) -> float:
        i = bisect_right(self.xs, x) - 1
        i = 0 if i < 0 else (self.ix if i > self.ix else i)
        j = bisect_right(self.ys, y) - 1
        j = 0 if j < 0 else (self.iy if j > self.iy else j)
        dx, dy = x - self.xs[i], y - self.ys[j]
        return (self.lA[i][j] + self.lB[i][j] * dx + self.lC[i][j] * dy
                + self.lD[i][j] * dx * dy)

    def at_array(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(self.nxs, x, side="right") - 1, 0, self.ix)
        j = np.clip(np.searchsorted(self.nys, y, side="right") - 1, 0, self.iy)
        dx, dy = x - self.nxs[i], y - self.nys[j]
        return self.A[i, j] + self.B[i, j] * dx + self.C[i, j] * dy + self.D[i, j] * dx * dy


def _lower_envelope(y: np.ndarray) -> np.ndarray:
    """Each point's latency replaced by the least at its size or above (the running minimum
    from the largest message down): the collective tables' smoothing (all-reduce, and the
    all-gather / reduce-scatter of DP + EP). Why not ``_isotonic``:
    a collective's noise is one-sided (contention and jitter only slow it; nothing runs it
    faster than it can go), so the faster of two readings is the one to trust, and a message
    can always be sent as a larger one would be. The tables need it: 84 of the package's custom
    all-reduce curves (folder x backend x GPU count) have a reading 1.15-11x a larger
    message's (B200 TP 8 vLLM graph: 26 us at 128-256k values, 16.7 us at 512k), which priced
    Llama-3.1-70B NVFP4's decode step at TP 8 2.7 ms slower at 16 sequences than at 8; the
    envelope gives 1.2 ms, the silicon rows' TPOT 0.5-1.2 ms."""
    y = np.asarray(y, dtype=float)
    return np.minimum.accumulate(y[::-1])[::-1] if y.size else y.copy()


def _collective_curve(cols: dict, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(message sizes, latencies)`` of a collective table's selected ``rows``, in size order
    and through their lower envelope: the one way every collective curve is read."""
    o = np.argsort(cols["message_size"][rows])
    return (cols["message_size"][rows][o].astype(float),
            _lower_envelope(cols["latency"][rows][o].astype(float)))


def _isotonic(y: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit of ``y`` (pool adjacent violators). Why not a
    running maximum: one slow sample (a measurement hiccup: H100's 12288x4096 GEMM reads
    0.041 ms at m = 16 and 0.037 ms at m = 64) would lift every larger m to it; the fit
    averages a violation with its neighbours instead, treating slow and fast noise alike."""
    y = np.asarray(y, dtype=float)
    if y.size < 2 or np.all(np.diff(y) >= 0):
        return y.copy()
    vals: list[float] = []
    counts: list[int] = []
    for v in y.tolist():
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            n = counts[-2] + counts[-1]
            merged = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / n
            vals[-2:], counts[-2:] = [merged], [n]
    return np.repeat(vals, counts)


def _kernel_per_length(kernels: np.ndarray, lengths: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """The rows of one kernel at each length: at every length (``isl`` or ``step``) the kernel
    with the most rows there, then the most rows overall, FlashMLA on a tie. The MLA module
    tables measure different kernels over disjoint lengths, as vLLM dispatches them: on Hopper
    ``FLASH_ATTN_MLA`` for chunks of 1-512 tokens and ``FLASH_ATTN`` (the prefill path) from
    1,024 up, on Blackwell ``FLASHINFER_MLA`` at 1 and ``FLASH_ATTN`` from 16. One kernel for
    every length extrapolated the short-chunk one to 8k prompts (H200: 2.45 ms a layer where the
    prefill rows measure 1.06)."""
    ks, ls = kernels[sel].astype(str), lengths[sel].astype(float)
    total = {k: int(n) for k, n in zip(*np.unique(ks, return_counts=True))}
    keep = np.zeros(kernels.shape, dtype=bool)
    idx = np.flatnonzero(sel)
    for length in np.unique(ls):
        here = ls == length
        names, counts = np.unique(ks[here], return_counts=True)
        rank = {k: (int(n), total[k], k in ("vllm_flashmla", "FLASHMLA"))
                for k, n in zip(names.tolist(), counts.tolist())}
        best = max(sorted(rank), key=lambda k: rank[k])
        keep[idx[here & (ks == best)]] = True
    return keep


def _fill_monotone(z: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """Fill a grid's unmeasured cells (NaN) in proportion to x from the last measured cell of
    their column, then make it non-decreasing along both axes (more work never costs less: a
    measured dip is noise or a kernel heuristic's choice)."""
    z = np.array(z, dtype=float)
    for j in range(z.shape[1]):
        col = z[:, j]
        ok = np.flatnonzero(~np.isnan(col))
        if ok.size == 0:
            continue
        last = ok[-1]
        for i in range(last + 1, len(col)):
            col[i] = col[last] * xs[i] / xs[last]
        for i in range(ok[0]):
            col[i] = col[ok[0]]
    for i in range(z.shape[0]):  # columns with nothing measured: from the left neighbour
        row = z[i]
        for j in range(1, len(row)):
            if np.isnan(row[j]):
                row[j] = row[j - 1]
    z = np.apply_along_axis(_isotonic, 0, z)
    z = np.apply_along_axis(_isotonic, 1, z)
    # Each pass keeps the other's order only approximately: a last running maximum makes the
    # grid non-decreasing along both axes exactly (it moves cells by rounding error).
    return np.maximum.accumulate(np.maximum.accumulate(z, axis=0), axis=1)


def _median_cells(x: np.ndarray, y: np.ndarray, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (x, y, latency) on their (sorted unique x) x (sorted unique y) grid: the median of a
    cell's repeated rows, NaN where nothing was measured."""
    xs, ys = np.unique(x), np.unique(y)
    acc: dict = {}
    for xi, yi, v in zip(np.searchsorted(xs, x), np.searchsorted(ys, y), lat):
        acc.setdefault((xi, yi), []).append(v)
    z = np.full((xs.size, ys.size), np.nan)
    for (xi, yi), vals in acc.items():
        z[xi, yi] = float(np.median(vals))
    return xs, ys, z


def _loglog(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """Interpolate y(x) in log-log between sorted measured points (construction time only);
    proportional past the ends' last point, flat below the first."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1] * x / xs[-1])
    return float(np.exp(np.interp(np.log(x), np.log(xs), np.log(ys))))


# --- the pricer --------------------------------------------------------------------------------


@register_pricer
class OperatorTableCostModel(StepPricer):
    """Step time of one replica on a GPU with measured vLLM operator tables.

    ``tables``: an AIConfigurator systems folder (default ``table_data.default_tables_root``).
    ``max_num_seqs`` sets vLLM's CUDA-graph capture sizes; ``cuda_graphs=False`` is
    ``enforce_eager``; ``async_scheduling`` overlaps the CPU's per-step work with the GPU.
    """

    kind = "operator_tables"

    def __init__(self, model: Union[str, ModelSpec], hw: Union[str, HardwareSpec],
                 dtype: str = "float16", tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                 weight_dtype: Optional[str] = None, tables: Optional[Union[str, Path]] = None,
                 max_num_seqs: int = 256, cuda_graphs: bool = True,
                 async_scheduling: Optional[bool] = None, moe_routing: str = "uniform",
                 engine: Optional[EngineRelease] = None, speculative: bool = False,
                 expert_parallel_size: int = 1, data_parallel_size: int = 1,
                 table_engine: Optional[EngineRelease] = None,
                 expert_tensor_parallel_size: Optional[int] = None,
                 moe_activations: str = "auto", moe_kernel: str = "auto",
                 max_capture_size: Optional[int] = None,
                 cudagraph_mode: Optional[str] = None,
                 extend_graph_tokens: Optional[int] = None,
                 extend_graph_reason: Optional[str] = None,
                 quant_scope: str = "auto") -> None:
        self.model = m = get_model(model)
        #: The engine release priced: its backend folder, the version folder nearest it, its
        #: capture sizes and (``async_scheduling`` None) its async-scheduling default.
        self.engine = engine = engine or get_engine()
        #: Whose kernels the tables hold: the engine's own, or (``table_engine``) another
        #: engine's, when the engine's tables do not cover the deployment (SGLang's MLA rows
        #: lack some head counts vLLM's have): the engine's scheduling, the other's kernels.
        self.table_engine = table_engine or engine
        self.backend = self.table_engine.name
        if async_scheduling is None:
            async_scheduling = engine.async_default(speculative)
        #: The router modelled (``cost_model.moe_routing``), and whose MoE table rows priced it
        #: (``balanced`` for ``uniform``, scaled; set with the MoE curve).
        self.moe_routing = moe_routing
        self.moe_rows_routing: Optional[str] = None
        self.hardware = h = get_hardware(hw)
        tp, pp = tensor_parallel_size, pipeline_parallel_size
        self.tensor_parallel_size, self.pipeline_parallel_size = tp, pp
        #: Data-parallel attention (vLLM's ``--data-parallel-size``): this pricer prices one DP
        #: rank's step (attention and dense layers over its own tokens, TP within the rank); the
        #: other ``dp - 1`` ranks are taken as loaded alike (each padded to the same rows: the
        #: simulation steps them in lock-step). A MoE's experts spread whole over
        #: ``expert_parallel_size`` groups (``parallel.expert_shards``: tp x dp under EP, else 1).
        self.data_parallel_size = dp = data_parallel_size
        self.expert_parallel_size = ep = expert_parallel_size if m.is_moe else 1
        #: GPUs each expert is split over within its group, the MoE table's ``moe_tp_size``:
        #: ``tp x dp / ep`` (SGLang's MoE TP x EP; 1 for pure EP; every GPU of a DP
        #: deployment without EP; ``tp`` without either).
        self.expert_tensor_parallel_size = etp = expert_tensor_parallel_size or (tp * dp // ep)
        if m.is_moe and ep * etp != tp * dp:
            raise TablesNotCovering(f"cost_model.source operator_tables: experts over {ep} groups "
                                    f"of {etp} GPUs with tp {tp} x dp {dp}: the tables price "
                                    f"MoE TP x EP = tp x dp")
        check_parallel(m, tp, pp)
        #: A hybrid model's sliding-window layers (gpt-oss: every other layer, window 128) read
        #: the tables' rows measured at this window where they exist, else the full-attention
        #: rows (``_build_window_attention``).
        self._win_layers = m.sliding_window_layers
        self._window = m.sliding_window or 0
        #: Layers with softmax attention, and a hybrid model's linear-attention (Gated
        #: DeltaNet) layers, priced from the ``linear_attention`` tables (``_build_gdn``).
        self._attn_layers = m.num_attention_layers
        self._lin_layers = m.linear_attention_layers
        root = Path(tables) if tables is not None else default_tables_root()
        if root is None:
            raise TablesNotCovering(f"cost_model.tables: {MISSING_TABLES_NOTE}")
        if not Path(root).is_dir():
            raise TablesNotCovering(f"cost_model.tables: {root}: operator-table folder not found")
        self.tables = Path(root)
        gdir = gpu_dir(self.tables, h.name)
        if gdir is None:
            raise TablesNotCovering(
                f"cost_model.tables: no operator tables for {h.name} under {self.tables} "
                f"(tables exist for {', '.join(GPU_TABLE_DIRS)})")
        self.gpu_dir = gdir
        if pp > 1:
            raise TablesNotCovering("cost_model.source operator_tables: pipeline parallelism "
                                    "is not measured in the tables (use the roofline)")
        # Datasheet-side terms (norms, rotary, sampling...) and precision come from the roofline,
        # with A100's constants: the per-GPU fits (``GPU_EFFICIENCY``) come from the kernels
        # these tables time, not from the ones the roofline prices here.
        self._roof = RooflineCostModel(m, h, dtype=dtype, tensor_parallel_size=tp,
                                       kv_cache_dtype=kv_cache_dtype, weight_dtype=weight_dtype,
                                       quant_scope=quant_scope, efficiency=A100_EFFICIENCY)
        self.precision = p = self._roof.precision
        if p.dtype == "float32":
            raise TablesNotCovering("cost_model.source operator_tables: tables are measured "
                                    "in 16-bit and FP8 only, not float32")
        #: The router gate priced as an fp32 SGEMM (``ModelSpec.router_fp32``, on a GPU with an
        #: fp32 rate; ``_fp32_router_ms``), for the GEMM curves and ``describe``.
        self.router_fp32 = m.router_fp32 and h.supports("fp32")
        #: What an MXFP4 MoE's experts take as activations (``quantization.moe_activations``,
        #: ``auto`` resolved for this engine and GPU): ``mxfp8`` or ``bf16``; None for any
        #: other MoE (its table dtype says it all).
        #: ``quantization.moe_kernel``: ``marlin`` runs MXFP4 experts in Marlin's W4A16 MoE
        #: (``VLLM_MXFP4_USE_MARLIN=1``), always with BF16 activations (``_marlin_bound``).
        #: ``triton`` runs FP8 experts in Triton's fused MoE (``VLLM_USE_FLASHINFER_MOE_FP8=0`` with
        #: ``VLLM_MOE_USE_DEEP_GEMM=0``), whatever the oracle would pick.
        applies = {"marlin": ("mxfp4",), "triton": ("fp8", "fp8_block")}.get(moe_kernel, ())
        self.moe_kernel_setting = moe_kernel if m.is_moe and p.weight_dtype in applies else "auto"
        self.moe_activations = mxfp4_moe_activations(
            "bf16" if self.moe_kernel_setting == "marlin" else moe_activations, engine.name, h.name,
            p.weight_dtype if m.is_moe else "")
        #: How the Marlin bound was priced (``_marlin_bound``), for ``describe``; None without it.
        self.marlin_reference: Optional[str] = None
        #: Seconds the legacy MLA collector adds to a decode row, by batch (``_legacy_decode_extra``);
        #: None where the decode rows are re-collected or no GPU measured both collectors.
        self._mla_decode_extra: Optional[tuple[np.ndarray, np.ndarray]] = None
        self._warnings: list[str] = []
        self.max_num_seqs = max_num_seqs
        self.cuda_graphs, self.async_scheduling = cuda_graphs, async_scheduling
        #: vLLM's ``cudagraph_mode`` (``engine.cudagraph_mode``; None: the release's): which
        #: steps up to the capture size replay graphs, and whether full or piecewise.
        self.cudagraph_mode = mode = cudagraph_mode or engine.cudagraph_mode
        self.capture_sizes = (capture_sizes(max_num_seqs, engine, h, tp, max_capture_size)
                              if cuda_graphs and mode != "NONE" else [])
        #: SGLang captures full graphs of decode batches only; an extend (prefill) batch runs in
        #: piecewise graphs up to ``extend_graph_tokens`` tokens (0: eagerly; None: the
        #: release's default for this model and layout, ``sglang_extend_graph_tokens``).
        self._graphs_decode_only = mode == "DECODE_ONLY"
        #: 1 where that kind of step replays one full graph (else piecewise, if it is in graphs
        #: at all); ``_mixed_graphs`` 0: mixed and prefill steps run outside graphs.
        self._decode_full = 0 if mode == "PIECEWISE" else 1
        self._mixed_full = 1 if mode == "FULL" else 0
        self._mixed_graphs = 0 if mode in ("DECODE_ONLY", "FULL_DECODE_ONLY") else 1
        self.max_capture = self.capture_sizes[-1] if self.capture_sizes else 0
        if self._graphs_decode_only and extend_graph_tokens is None:
            extend_graph_tokens, extend_graph_reason = sglang_extend_graph_tokens(
                engine, chunked_prefill_size=engine.default_max_num_batched_tokens(h), mla=m.is_mla,
                multimodal=m.multimodal, data_parallel_size=dp, pipeline_parallel_size=pp)
        #: The extend sizes captured: an extend runs (and its GEMMs cost) the smallest that
        #: holds it, padded (``sglang_pcg_capture_sizes``). The largest captured size is the
        #: limit: SGLang captures only its listed sizes (a limit between two of them is not
        #: added) and runs a larger extend eagerly, so ``extend_graph_tokens`` is that size.
        asked = (extend_graph_tokens or 0) if cuda_graphs or self._graphs_decode_only else 0
        sizes = sglang_pcg_capture_sizes(asked) if asked else []
        self.extend_graph_tokens = sizes[-1] if sizes else 0
        self._pcg_sizes = sizes
        self._np_pcg_sizes = np.array(sizes + [np.inf], dtype=float)
        #: Why extends run eagerly (``sglang_extend_graph_tokens``'s words), for ``describe``.
        self.extend_graph_reason = extend_graph_reason
        #: Every table read, ``op/table -> version folder`` (the summary's provenance).
        self.tables_read: dict[str, str] = {}
        #: Whether the attention rows include the rotary embedding (MLA module rows).
        self._rope_in_attention = False

        gemm_path, self.version = self._table("gemm", "gemm_perf")
        self._build_gemms(gemm_path)
        self._build_attention()
        self._build_gdn()
        self._build_allreduce()
        self._build_rows()

    # -- construction -------------------------------------------------------------------------
    def _table(self, op: str, table: str) -> tuple[Path, str]:
        """``table`` of operation ``op`` under this engine's backend folder, the version
        nearest the engine release (``table_data.table_file``); recorded in ``tables_read``."""
        path, version = table_file(self.gpu_dir / op / self.backend, table, self.table_engine.version)
        self.tables_read[f"{op}/{table}"] = version
        return path, version

    def _mla_module_table(self, table: str) -> Path:
        """An MLA module table of vLLM's: the version nearest the engine, unless its rows
        predate AIConfigurator's fused-op collector and a re-collected one exists for this GPU
        or its same-die twin (``table_data.recollected_file``): the old rows timed eager norm
        kernels serving never runs, about twice the re-collected rows at small batches (B300,
        GB200 and GB300's 0.24 folders against B200's and GB300's 0.27)."""
        path, version = self._table("mla", table)
        if self.backend != "vllm" or recollected(path.parent, table):
            return path
        found = recollected_file(self.gpu_dir, "mla", self.backend, table, self.table_engine.version)
        if found is None:
            if table == "mla_generation_module_perf":
                self._legacy_decode_extra(version, table)
            return path
        self.tables_read[f"mla/{table}"] = found[1]
        self._warnings.append(f"operator tables: {self.gpu_dir.name}'s vLLM {version} MLA module rows "
                              f"predate AIConfigurator's fused-op collector (eager norm kernels serving "
                              f"does not run); read from the re-collected {found[1]} rows")
        return found[0]

    def _legacy_decode_extra(self, version: str, table: str) -> None:
        """Where this GPU's MLA decode rows are the legacy collector's and neither it nor a
        same-die twin has re-collected rows (H100, H200, L40S, RTX Pro 6000), take off what that
        collector adds: the legacy-minus-re-collected latency by batch of a GPU that has both
        (``collector_pair``, ``legacy_collector_overhead``: GB300, 39 us at batch 1 to 78 at
        1,024). The rows stay at least half their measured time. Prefill rows keep theirs: their
        two collections also differ by release (GB300's 0.24 against 0.27), by 25-45%, which is
        not the norm chain alone."""
        pair = collector_pair(self.gpu_dir.parent, "mla", self.backend, table)
        if pair is None:
            return
        self._mla_decode_extra = legacy_collector_overhead(pair)
        self.tables_read["mla/legacy_collector_overhead"] = pair[2]
        self._warnings.append(f"operator tables: {self.gpu_dir.name}'s vLLM {version} MLA decode rows are "
                              f"the legacy collector's (eager norm kernels serving does not run) and no "
                              f"re-collected rows exist for this GPU; the collector's overhead measured on "
                              f"{pair[2]} is taken off")

    def _gemm_dtype(self, available: set) -> str:
        """The GEMM table's dtype for this deployment's weights: the quantised kernel where
        this GPU's table measured it (and the GPU computes in it), else bfloat16 with a
        warning that says the quantisation's GEMMs are priced as 16-bit."""
        wd = self.precision.weight_dtype
        want = GEMM_DTYPES.get(wd)
        native = self.precision.compute in ("fp8", "fp4")
        if want is not None and want in available and native:
            return want
        # Only the routed experts quantised (gpt-oss, Kimi-K2.5 int4): the GEMMs are 16-bit.
        dense_16bit = not (quantized_groups(self.precision, self.model.is_moe) - {"experts"})
        if wd not in (None, "auto", self.precision.dtype, "float16", "bfloat16") and not dense_16bit:
            self._warnings.append(f"operator tables: no {wd} GEMM rows measured on "
                                  f"{self.hardware.name} under {self.backend}; dense GEMMs priced "
                                  f"at bfloat16")
        if "bfloat16" not in available:
            raise TablesNotCovering(f"cost_model.tables: no bfloat16 GEMM rows for "
                                    f"{self.hardware.name}")
        return "bfloat16"

    def _build_gemms(self, path: Path) -> None:
        c = read_columns(path, ("gemm_dtype", "m", "n", "k", "latency"))
        dt = self._gemm_dtype(set(c["gemm_dtype"].tolist()))
        self.gemm_dtype = dt
        #: The GPU's weight-streaming rate in its GEMM table (``weight_streaming_rate``): the
        #: floor of a fused-MoE row that reads its experts' weights (``_floor_moe_rows``).
        self.streaming_bytes_per_s = weight_streaming_rate(c)
        cube, ms, ns, ks = self._gemm_cube(c, dt)
        bf_grid = (cube, ms, ns, ks) if dt == "bfloat16" else self._gemm_cube(c, "bfloat16")
        bf = bf_grid[0]
        self._gemm_m = ms
        m, tp = self.model, self.tensor_parallel_size
        q = m.q_size // tp
        kv = kv_heads_per_gpu(m, tp) * m.head_dim
        q_out = (2 if m.attn_output_gate else 1) * q  # Qwen3.5: the output gate beside q
        shapes = {  # (n, k) per TP shard, as vLLM's column/row-parallel linears split them
            "qkv_proj": (q_out + 2 * kv, m.hidden_size),
            "o_proj": (m.hidden_size, q),
            "mlp_up": (m.mlp_in_size // tp, m.hidden_size),
            "mlp_down": (m.hidden_size, m.intermediate_size // tp),
        }
        #: Layers an op runs in, where not all of them (dense-first MoEs: DeepSeek-V3; a
        #: hybrid model's attention and linear-attention layers).
        layers: dict[str, int] = {}
        if m.is_hybrid_linear:
            # Gated DeltaNet projections (SGLang's and vLLM's Qwen3-Next / Qwen3.5 layers): the
            # fused q, k, v, z projection, the b, a projection (two scalars per value head: a
            # GEMM below the tables' n grid, read at its nearest n and scaled), and out_proj.
            shapes["gdn_in_proj"] = (m.linear_qkvz_size // tp, m.hidden_size)
            shapes["gdn_ba_proj"] = (2 * m.linear_num_value_heads // tp, m.hidden_size)
            shapes["gdn_out_proj"] = (m.hidden_size, m.linear_value_size // tp)
            for op in ("gdn_in_proj", "gdn_ba_proj", "gdn_out_proj"):
                layers[op] = m.linear_attention_layers
            layers["qkv_proj"] = layers["o_proj"] = m.num_attention_layers
        if m.is_mla:  # vLLM's MLA projections (the down-projections replicated over TP)
            heads = m.num_heads // tp
            del shapes["qkv_proj"], shapes["o_proj"]
            if m.q_lora_rank:
                shapes["q_a_proj"] = (m.q_lora_rank, m.hidden_size)
                shapes["q_b_proj"] = (heads * m.head_dim, m.q_lora_rank)
            else:
                shapes["q_proj"] = (heads * m.head_dim, m.hidden_size)
            shapes["kv_a_proj"] = (m.kv_lora_rank + m.qk_rope_head_dim, m.hidden_size)
            shapes["kv_b_proj"] = (heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank)
            shapes["o_proj"] = (m.hidden_size, heads * m.v_head_dim)
        if m.is_moe:  # the experts come from the measured fused-MoE table; the router is a GEMM
            del shapes["mlp_up"], shapes["mlp_down"]
            if m.num_dense_layers:
                dense = m.dense_intermediate_size
                shapes["mlp_up"] = ((2 if m.gated_mlp else 1) * dense // tp, m.hidden_size)
                shapes["mlp_down"] = (m.hidden_size, dense // tp)
                layers["mlp_up"] = layers["mlp_down"] = m.num_dense_layers
            if m.num_shared_experts:
                shared = m.num_shared_experts * m.intermediate_size
                shapes["shared_up"] = ((2 if m.gated_mlp else 1) * shared // tp, m.hidden_size)
                shapes["shared_down"] = (m.hidden_size, shared // tp)
                layers["shared_up"] = layers["shared_down"] = m.num_moe_layers
            shapes["router"] = (m.num_experts, m.hidden_size)
            if m.num_dense_layers:
                layers["router"] = layers["experts"] = m.num_moe_layers
        self.gemm_shapes = shapes
        #: What the checkpoint's quantisation scope leaves 16-bit, for ``describe`` (None: all).
        self.scope_note = scope_note(self.precision, shapes, m.is_moe)
        def bf16_curve(n: float, k: float) -> np.ndarray:
            """The 16-bit GEMM of (n, k) at this table's row counts."""
            bc, bms, bns, bks = bf_grid
            return np.interp(ms, bms, self._gemm_curve(bc, bms, bns, bks, n, k))

        def curve(op: str, n: float, k: float) -> np.ndarray:
            if op == "router" and self.router_fp32:
                return self._fp32_router_ms(bf16_curve(n, k), ms, n, k)
            # vLLM keeps a MoE's router gate in 16 bits (an unquantised ReplicatedLinear), and
            # a checkpoint's excluded layers too (``quantization.scope``: NVIDIA's NVFP4 MoE
            # exports keep attention in BF16).
            if dt == "bfloat16" or not gemm_quantized(op, self.precision, m.is_moe):
                return self._gemm_curve(cube, ms, ns, ks, n, k) if dt == "bfloat16" else bf16_curve(n, k)
            # A quantised GEMM is not priced above the 16-bit one of its shape: block-FP8 rows
            # measured at small m (B200's DeepGEMM: 0.26 ms for any 7168-wide GEMM at m=1,
            # bf16 0.01 ms) carry the kernels' per-call host work, which CUDA graphs remove.
            return np.minimum(self._gemm_curve(cube, ms, ns, ks, n, k), bf16_curve(n, k))

        # A row is the time of vLLM's whole linear layer, not of the GEMM kernel alone:
        # AIConfigurator's collector (collector/vllm/collect_gemm.py) times
        # ``RowParallelLinear.forward`` under ``Fp8Config(activation_scheme="dynamic")``, whose
        # per-tensor FP8 path computes the activation scale and casts the input before the
        # CUTLASS GEMM. AIConfigurator's own model prices per-tensor FP8 as the row alone and
        # derives static FP8 by subtracting the ``quantize/`` tables from it (aic-core
        # operators/gemm.rs, ``fp8_static``), so those tables are not added here.
        self._gemm_ms = {op: curve(op, n, k) for op, (n, k) in shapes.items()}
        if m.is_moe:
            self._gemm_ms["experts"] = self._moe_curve(ms)
            if self.data_parallel_size > 1:  # the DP ranks' tokens gathered for the experts
                self._gemm_ms["ep_dispatch"] = self._dispatch_curve(ms)
                if m.num_dense_layers:
                    layers["ep_dispatch"] = m.num_moe_layers
        # ``_rows_part`` multiplies a layer's ops by every layer: an op in fewer layers counts
        # for its share of them.
        for op, count in layers.items():
            self._gemm_ms[op] = self._gemm_ms[op] * (count / m.num_layers)
        # LM head: vocab-parallel over TP, 16-bit (vLLM does not quantise it).
        self._head_ms = self._gemm_curve(bf, ms, ns, ks, -(-m.vocab_size // tp), m.hidden_size)

    def _fp32_router_ms(self, bf16_ms: np.ndarray, ms: np.ndarray, n: float, k: float) -> np.ndarray:
        """Milliseconds of an fp32 router gate (``ModelSpec.router_fp32``) at row counts ``ms``:
        the cast of the hidden states to fp32 (a pointwise kernel: 16-bit in, fp32 out), then
        cuBLAS's SGEMM. PyTorch leaves TF32 off for fp32 matmuls by default
        (``torch.backends.cuda.matmul.allow_tf32``), so the GEMM runs on CUDA cores at the
        GPU's fp32 peak times the roofline's GEMM efficiency. No table measures an fp32 GEMM;
        the 16-bit row of the shape stays its floor (launch, weight read at small m). A GPU
        spec without an fp32 rate keeps the 16-bit row."""
        r = self._roof
        e, h = r.efficiency, r.hardware
        sgemm_ms = 2.0 * ms * n * k / (h.flops("fp32") * e.gemm_compute) * 1e3
        cast_ms = (ms * k * (r.precision.act_bytes + 4) / (h.memory_bandwidth * e.elementwise_memory)
                   + e.elementwise_latency_s) * 1e3
        return np.maximum(bf16_ms, sgemm_ms) + cast_ms

    def _moe_curve(self, ms: np.ndarray) -> np.ndarray:
        """Milliseconds of one layer's experts (vLLM's fused MoE kernels: the experts' grouped
        GEMMs and activation, for routing already decided) at each row count ``ms``, from the
        measured MoE table for this model's experts (hidden, intermediate, E, top-k) at this TP
        degree, experts sharded by TP (no expert parallelism), at the routing ``moe_routing``:
        ``uniform`` (the default) reads the ``balanced`` rows and scales them to the experts a
        random router touches (``experts.uniform_over_balanced``: a balanced row spreads a
        few tokens over as many experts as they can reach); the others read their own rows (on
        Mixtral's shapes at TP 2 AIConfigurator's ``power_law_1.01`` rows are up to 24% slower
        than balanced between 32 and 4,096 tokens). Log-log between measured token counts,
        proportional past the largest, made non-decreasing in rows."""
        m = self.model
        # The MoE table's rows at this layout's MoE TP x EP (whole experts over EP groups, each
        # split over MoE TP GPUs), each GPU's layer fed the tokens of every DP rank (gathered:
        # ``_dispatch_curve``).
        dp = self.data_parallel_size
        moe_tp, moe_ep = self.expert_tensor_parallel_size, self.expert_parallel_size
        want = MOE_DTYPES.get(self.precision.weight_dtype, "bfloat16")
        files = table_files(self.gpu_dir / "moe" / self.backend, "moe_perf", self.table_engine.version)
        kernel = default_moe_kernel(self.precision.weight_dtype, self.gpu_dir.name, self.table_engine)
        marlin = self.moe_kernel_setting == "marlin"
        if marlin:
            # Marlin's rows for this very shape where measured (L40S, RTX Pro 6000), else the
            # engine's default kernel's, bounded below by Marlin's FLOP rate (``_marlin_bound``).
            kernel = ("marlinexperts",) if self._marlin_rows_for_shape(files, want) else kernel
            marlin = kernel != ("marlinexperts",)
        if self.moe_activations == "mxfp8":
            # FlashInfer's TRT-LLM MXFP4 x MXFP8 MoE: vLLM's 0.24 tables hold it for other
            # shapes only; AIConfigurator's SGLang collector timed the same kernel on gpt-oss's
            # (its BF16-activation rows of that kernel read vLLM's to 1-3% at 1-8,192 tokens).
            want, kernel = MXFP8_MOE_DTYPE, ("trtllm",)
            other = self.gpu_dir / "moe" / "sglang"
            if self.backend != "sglang" and other.is_dir():
                files = files + [(f, f"sglang/{v}") for f, v in table_files(other, "moe_perf")]
        # This model's experts are measured in some version folders and dtypes only (on H200,
        # DeepSeek-V3's in bf16 under 0.19 and block FP8 under 0.24): the wanted format in the
        # version nearest the engine first, then bf16. A per-tensor FP8 checkpoint reads the
        # FP8 family: per-tensor rows are ModelOpt checkpoints' kernels (FlashInfer CUTLASS on
        # H200, 3x slower than bf16 for Qwen3-235B's experts), block rows vLLM's own
        # Fp8MoEMethod (Triton, FlashInfer, TRT-LLM), which also runs per-tensor FP8. A block-FP8
        # checkpoint (DeepSeek-V3, MiniMax-M2.5, Qwen3-235B-A22B-FP8) runs block-scaled kernels
        # only: its 128x128 weight scales and per-token-group activation quantisation are not
        # the per-tensor kernels' (vllm fused_moe/oracle/fp8.py selects among block-capable
        # backends by ``kFp8Static128BlockSym``). Its per-tensor rows, up to 33% faster in
        # prefill (MiniMax-M2.5's experts at TP 4 on H200, 8,192 tokens, vLLM 0.19 tables), are
        # read only where no block rows exist.
        family = {"fp8": ("fp8", "fp8_block"), "fp8_block": ("fp8_block",)}.get(want, (want,))
        found = None
        # vLLM's default kernel for the format (any version folder), then the version-nearest
        # rows of the format, then bf16; for a uniform router whose shape has no balanced rows
        # (A100 and B60 hold power-law rows only), the mildest power law's, as measured.
        fallbacks = [family] + ([("fp8", "fp8_block")] if want == "fp8_block" else []) + [("bfloat16",)]
        kernels = TRITON_MOE_KERNELS if self.moe_kernel_setting == "triton" else (kernel,) if kernel else ()
        attempts = [(family, k) for k in kernels] + [(d, None) for d in dict.fromkeys(fallbacks)]
        routings = ["balanced", "power_law_1.01"] if self.moe_routing == "uniform" else [self.moe_routing]
        for (dtypes, labels), rows_routing in ((a, r) for r in routings for a in attempts):
            for path, version in files:
                c = read_columns_present(path, ("moe_dtype", "num_tokens", "hidden_size",
                                                "inter_size", "topk", "num_experts", "moe_tp_size",
                                                "moe_ep_size", "distribution", "latency"),
                                         ("kernel_source",))
                sel = (np.isin(c["moe_dtype"], dtypes) & (c["hidden_size"] == m.hidden_size)
                       & (c["inter_size"] == m.intermediate_size)
                       & (c["topk"] == m.num_experts_per_tok) & (c["num_experts"] == m.num_experts)
                       & (c["moe_tp_size"] == moe_tp) & (c["moe_ep_size"] == moe_ep)
                       & (c["distribution"] == rows_routing))
                if labels is not None:
                    if "kernel_source" not in c:
                        continue
                    sel &= np.array([all(x in str(k) for x in labels) for k in c["kernel_source"]])
                if sel.any():
                    found = (version, c, sel)
                    break
            if found:
                break
        if found is None:
            raise TablesNotCovering(
                f"cost_model.tables: no MoE rows ({' or '.join(routings)} routing) measured for {m.name}'s experts "
                f"({m.num_experts} x {m.hidden_size}x{m.intermediate_size}, top-{m.num_experts_per_tok}) "
                f"at MoE TP {moe_tp} x EP {moe_ep} on {self.hardware.name}")
        version, c, sel = found
        if self.moe_kernel_setting == "triton" and labels is None:
            self._warnings.append(f"operator tables: quantization.moe_kernel triton, but no Triton MoE rows "
                                  f"for {m.name}'s experts on {self.hardware.name}; priced from the "
                                  f"{version} folder's rows")
        scale_to_uniform = self.moe_routing == "uniform" and rows_routing == "balanced"
        self.moe_rows_routing = rows_routing
        if self.moe_routing == "uniform" and not scale_to_uniform:
            self._warnings.append(f"operator tables: no balanced MoE rows for {m.name} on {self.hardware.name}; "
                                  f"experts priced from the {rows_routing} rows as measured, not a uniform router")
        # One shape, several kernels (gpt-oss's MXFP4 experts: Marlin and OpenAI's Triton;
        # block FP8: Triton and FlashInfer): the fastest at each token count, as for GEMMs.
        tokens, lat = c["num_tokens"][sel].astype(float), c["latency"][sel].astype(float)
        if rows_routing == "balanced":
            lat = self._floor_moe_rows(tokens, lat, c["moe_dtype"][sel], moe_tp, moe_ep)
        xs = np.unique(tokens)
        ys = np.full(xs.size, np.inf)
        np.minimum.at(ys, np.searchsorted(xs, tokens), lat)
        fastest = {str(d) for d in c["moe_dtype"][sel][np.isin(lat, ys)]}
        self.moe_dtype = dt = "/".join(sorted(fastest))
        if "kernel_source" in c:
            self.moe_kernel = "/".join(sorted({str(k) for k in c["kernel_source"][sel][np.isin(lat, ys)]}))
        self.tables_read["moe/moe_perf"] = version
        if not set(fastest) & set(family):
            self._warnings.append(f"operator tables: no {want} MoE rows for {m.name} on "
                                  f"{self.hardware.name}; experts priced from the {dt} rows")
        routed = np.array([float(x) * dp for x in ms])  # tokens the router sees
        curve = np.array([_loglog(xs, ys, t) for t in routed])
        if marlin:
            curve = np.maximum(curve, self._marlin_bound(routed))
        if scale_to_uniform:
            curve = curve * uniform_over_balanced(m.num_experts, m.num_experts_per_tok, routed)
        return _isotonic(curve)

    def _floor_moe_rows(self, tokens: np.ndarray, ms: np.ndarray, dtypes: np.ndarray,
                        moe_tp: int, moe_ep: int) -> np.ndarray:
        """Balanced fused-MoE rows (milliseconds at ``tokens``), each raised to the time of
        streaming, at this GPU's measured rate (``streaming_bytes_per_s``), the weights of the
        ``min(E, T x top-k)`` experts a balanced row routes its tokens to.

        Why: some rows are faster than the weights they must read allow, which no serving step
        can be. AIConfigurator's collector feeds its balanced logits (token ``i`` to experts
        ``i + j x E / k``: one per group of 32 on DeepSeek-V3) through the model's own router
        (collector/vllm/collect_moe.py; SGLang's FlashInfer TRT-LLM rows too), and DeepSeek's
        group-limited top-k keeps 4 of 8 groups, every token the same 4 on these tied logits: 128
        of the 256 experts. The vLLM 0.24 rows of DeepSeek-V3's experts on H200 at 32-256 tokens
        take 0.58-0.68 of the time their 256 experts' weights need (TP 1), and a 1-layer replay
        keeps small shards in L2 (L40S's 96 MB: rows at 0.27 of the HBM time), which a serving
        step, reading every layer's weights, does not. Rows at or above the floor, every row of
        most shapes, are unchanged. Under expert parallelism the rows' local routing is not
        known, nor a power law's touched experts: those rows are left as measured."""
        rate = self.streaming_bytes_per_s
        if rate is None or moe_ep != 1:
            return ms
        m = self.model
        per_param = np.array([MOE_WEIGHT_BYTES.get(str(d), 0.0) for d in dtypes])
        floor_ms = moe_streaming_floor_ms(tokens, m.hidden_size, m.intermediate_size / moe_tp,
                                          m.num_experts, m.num_experts_per_tok, per_param, rate)
        raised = ms < floor_ms
        if raised.any():
            worst = float(np.max(floor_ms[raised] / ms[raised]))
            self._warnings.append(
                f"operator tables: {int(raised.sum())} of {ms.size} fused-MoE rows for {m.name}'s experts "
                f"are faster than streaming the weights of the experts they route to at this GPU's "
                f"measured {rate / 1e12:.2f} TB/s (the collector's own router touched fewer, or L2 held "
                f"them); raised to that floor (up to {worst:.2f}x)")
        return np.maximum(ms, floor_ms)

    def _marlin_rows_for_shape(self, files: list, want: str) -> bool:
        """Whether any version folder holds Marlin MoE rows for this model's experts at this
        layout (MoE TP x EP)."""
        m = self.model
        for path, _ in files:
            c = read_columns_present(path, ("moe_dtype", "hidden_size", "inter_size", "topk",
                                            "num_experts", "moe_tp_size", "moe_ep_size"),
                                     ("kernel_source",))
            if "kernel_source" not in c:
                continue
            sel = ((c["moe_dtype"] == want) & (c["hidden_size"] == m.hidden_size)
                   & (c["inter_size"] == m.intermediate_size) & (c["topk"] == m.num_experts_per_tok)
                   & (c["num_experts"] == m.num_experts)
                   & (c["moe_tp_size"] == self.expert_tensor_parallel_size)
                   & (c["moe_ep_size"] == self.expert_parallel_size))
            if sel.any() and any("marlinexperts" in str(k) for k in c["kernel_source"][sel]):
                return True
        return False

    def _marlin_bound(self, routed: np.ndarray) -> np.ndarray:
        """Milliseconds per layer below which Marlin's MoE cannot run this model's experts at
        each routed token count (balanced routing, as the rows it is compared with), where the
        tables time Marlin on other expert shapes only (H100 and H200: Kimi-K2.5's INT4 and an
        MXFP4 checkpoint's 896 x 3584 x 3072 experts, not gpt-oss's).

        Why this transfer: a grouped GEMM's FLOP rate is set by the tokens each expert gets
        (``T x top-k / E``) and by each GPU's slice of an expert: few tokens, and it streams each
        touched expert's weights (the rate grows with the tokens per expert at a fixed
        bandwidth), many, and the tensor cores bind. At equal tokens per expert and the same MoE
        TP split two shapes run at nearly the same rate, so this GPU's measured Marlin rate there
        times this layer's FLOPs per GPU (``6 x hidden x inter / moe_tp x top-k x T / EP``) is
        Marlin's time here. The split matters: the reference's narrower slices run slower (on
        H200 its MXFP4 rows reach 195 TFLOPS a GPU at 8,192 tokens unsplit, 151 at MoE TP 8),
        so the rows at this layout's MoE TP are read (the nearest measured split otherwise);
        under EP each GPU runs whole experts, the unsplit rows. It binds on long prefills: on
        H200, Marlin's W4A16 MXFP4 MoE reaches ~230 TFLOPS at 16k tokens, OpenAI's Triton
        kernel ~560 on gpt-oss-120b's experts. The measured curve of the default kernel stays the
        floor (small batches: both kernels read the same 4-bit weights). Marlin rows in the
        weight format first (W4A16 MXFP4), then INT4's, at EP 1, the version nearest the engine
        first; balanced rows."""
        m = self.model
        moe_tp = self.expert_tensor_parallel_size
        files = table_files(self.gpu_dir / "moe" / self.backend, "moe_perf", self.table_engine.version)
        for dtype in ("w4a16_mxfp4", "int4_wo"):
            for path, version in files:
                c = read_columns_present(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size",
                                                "topk", "num_experts", "moe_tp_size", "moe_ep_size",
                                                "distribution", "latency"), ("kernel_source",))
                if "kernel_source" not in c:
                    continue
                sel = ((c["moe_dtype"] == dtype) & (c["moe_ep_size"] == 1)
                       & (c["distribution"] == "balanced")
                       & np.array(["marlin" in str(k) for k in c["kernel_source"]]))
                # One reference shape: the one with the most experts x top-k (the widest range of
                # tokens per expert) measured unsplit, as measured.
                unsplit = sel & (c["moe_tp_size"] == 1)
                shapes = sorted({(int(h), int(i), int(e), int(k)) for h, i, e, k in
                                 zip(c["hidden_size"][unsplit], c["inter_size"][unsplit],
                                     c["num_experts"][unsplit], c["topk"][unsplit])},
                                key=lambda s: (s[2] * s[3], s))
                if not shapes:
                    continue
                h, i, e, k = shapes[-1]
                shape = (sel & (c["hidden_size"] == h) & (c["inter_size"] == i)
                         & (c["num_experts"] == e) & (c["topk"] == k))
                splits = sorted({int(t) for t in c["moe_tp_size"][shape]})
                ref_tp = min(splits, key=lambda t: (abs(np.log2(t) - np.log2(moe_tp)), t))
                one = shape & (c["moe_tp_size"] == ref_tp)
                tokens = c["num_tokens"][one].astype(float)
                lat = c["latency"][one].astype(float)
                counts = np.unique(tokens)
                med = np.array([np.median(lat[tokens == t]) for t in counts])
                per_expert = counts * k / e
                rate = 6.0 * h * (i / ref_tp) * k * counts / med  # FLOPs per ms per GPU
                want_tpe = routed * m.num_experts_per_tok / m.num_experts
                target_rate = np.exp(np.interp(np.log(np.maximum(want_tpe, 1e-9)),
                                               np.log(per_expert), np.log(rate)))
                flops = (6.0 * m.hidden_size * (m.intermediate_size / moe_tp)
                         * m.num_experts_per_tok * routed / self.expert_parallel_size)
                kernel = str(c["kernel_source"][one][0])
                self.marlin_reference = (f"Marlin bound from {kernel} ({version}, {e} x {h}x{i} "
                                         f"top-{k}, MoE TP {ref_tp}) at equal tokens per expert")
                self.tables_read["moe/marlin_reference"] = version
                return flops / target_rate
        self._warnings.append(f"operator tables: quantization.moe_kernel marlin, but no Marlin MoE rows "
                              f"on {self.hardware.name}; experts priced from the default kernel's rows")
        return np.zeros_like(routed, dtype=float)

    def _dispatch_curve(self, ms: np.ndarray) -> np.ndarray:
        """Milliseconds per MoE layer of moving the DP ranks' tokens to the experts and back at
        each row count ``ms`` of this rank: vLLM's default all2all backend under DP + EP
        (``allgather_reducescatter``; ``naive`` before it broadcasts the same bytes) gathers
        every DP rank's hidden states on each GPU before the experts and reduce-scatters their
        outputs after, over the DP group: the NCCL tables' ``all_gather`` and ``reduce_scatter``
        of ``dp x rows x hidden`` 16-bit elements (``message_size`` is the gathered tensor, as
        nccl-tests count it) on ``dp`` GPUs, log-log between measured sizes. The TP all-reduce
        after the MoE is the layer's second all-reduce, priced already."""
        dp, hidden = self.data_parallel_size, self.model.hidden_size
        nc = read_columns(latest_file(self.gpu_dir / "comm" / "nccl", "nccl_perf"),
                          ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
        total = np.zeros_like(ms, dtype=float)
        for op in ("all_gather", "reduce_scatter"):
            s = (nc["op_name"] == op) & (nc["nccl_dtype"] == "half") & (nc["num_gpus"] == dp)
            if not s.any():
                raise TablesNotCovering(f"cost_model.tables: no NCCL {op} measured on {dp} GPUs "
                                        f"of {self.hardware.name} (DP attention + EP)")
            xs, ys = _collective_curve(nc, s)
            total += np.array([_loglog(xs, ys, max(float(x) * dp * hidden, 1.0)) for x in ms])
        return total

    @staticmethod
    def _gemm_cube(c: dict, dt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        sel = c["gemm_dtype"] == dt
        m, n, k, lat = (c[x][sel].astype(float) for x in ("m", "n", "k", "latency"))
        if m.size == 0:
            raise TablesNotCovering(f"cost_model.tables: no {dt} GEMM rows")
        ms, ns, ks = np.unique(m), np.unique(n), np.unique(k)
        # One shape measured with several kernels (block FP8: DeepGEMM, CUTLASS, FlashInfer):
        # the fastest, the one vLLM's kernel selection is there to find.
        cube = np.full((ms.size, ns.size, ks.size), np.inf)
        np.minimum.at(cube, (np.searchsorted(ms, m), np.searchsorted(ns, n), np.searchsorted(ks, k)), lat)
        cube[np.isinf(cube)] = np.nan
        # Unmeasured (n, k) cells: in proportion to k from the nearest measured k below.
        for a in range(ms.size):
            for b in range(ns.size):
                row = cube[a, b]
                ok = np.flatnonzero(~np.isnan(row))
                for i in np.flatnonzero(np.isnan(row)):
                    if ok.size:
                        j = ok[np.argmin(np.abs(ok - i))]
                        row[i] = row[j] * ks[i] / ks[j]
        return cube, ms, ns, ks

    @staticmethod
    def _gemm_curve(cube: np.ndarray, ms: np.ndarray, ns: np.ndarray, ks: np.ndarray,
                    n: float, k: float) -> np.ndarray:
        """Milliseconds at each measured m for one (n, k): bilinear in (log n, log k) of
        log latency between the four nearest measured shapes (exact on a measured shape),
        proportional past the largest measured n or k; non-decreasing in m."""
        def bracket(vals: np.ndarray, v: float) -> tuple[int, int, float, float]:
            if v <= vals[0]:
                return 0, 0, 0.0, 1.0
            if v >= vals[-1]:
                return len(vals) - 1, len(vals) - 1, 0.0, v / vals[-1]
            i = int(np.searchsorted(vals, v, side="right") - 1)
            if vals[i] == v:
                return i, i, 0.0, 1.0
            t = (math.log(v) - math.log(vals[i])) / (math.log(vals[i + 1]) - math.log(vals[i]))
            return i, i + 1, t, 1.0

        n0, n1, tn, sn = bracket(ns, n)
        k0, k1, tk, sk = bracket(ks, k)
        lg = np.log(cube)
        out = ((1 - tn) * (1 - tk) * lg[:, n0, k0] + tn * (1 - tk) * lg[:, n1, k0]
               + (1 - tn) * tk * lg[:, n0, k1] + tn * tk * lg[:, n1, k1])
        y = np.exp(out) * sn * sk
        exact = (tn == 0.0) and (tk == 0.0) and sn == 1.0 and sk == 1.0
        if exact:
            y = cube[:, n0, k0].copy()
        return _isotonic(y)

    def _head_config(self, combos: set, h: int, kv: int) -> tuple[int, int, float, float]:
        """The measured (heads, kv heads) to price a shard's (h, kv) with: itself if measured;
        else the same group size with fewer kv heads, the batch scaled by the ratio (each kv
        head with its query group is independent work); else the nearest and time scaled by
        query heads. Returns (heads, kv heads, batch factor, time factor)."""
        if (h, kv) in combos:
            return h, kv, 1.0, 1.0
        group = h // kv
        same = sorted(k for (hh, k) in combos if hh == group * k)
        if same:
            below = [k for k in same if k <= kv and kv % k == 0]
            k = below[-1] if below else same[0]
            return group * k, k, kv / k, 1.0
        hh, k = min(combos, key=lambda c: (abs(c[1] - kv), abs(c[0] - h)))
        return hh, k, 1.0, h / hh

    def _attention_grid(self, path: Path, x_col: str, y_col: str, y_offset: float,
                        kv_dtype: str, window: int = 0) -> tuple[_Grid, float, float, np.ndarray, np.ndarray]:
        c = read_columns_present(path, ("batch_size", y_col, "num_heads", "num_key_value_heads",
                                        "head_dim", "kv_cache_dtype", "latency"),
                                 ("window_size", "kernel_source"))
        m, tp = self.model, self.tensor_parallel_size
        h, kv = m.num_heads // tp, kv_heads_per_gpu(m, tp)
        dtypes = set(c["kv_cache_dtype"].tolist())
        kd = kv_dtype if kv_dtype in dtypes else "bfloat16"
        sel = c["kv_cache_dtype"] == kd
        sel &= attention_rows(c, window)
        hd = c["head_dim"][sel]
        if hd.size == 0:
            raise TablesNotCovering(f"{path}: no {kd} rows" + (f" at window {window}" if window else ""))
        # The model's head width where the table measured it (newer tables hold 64-512), else
        # the 128-wide rows scaled in proportion.
        measured = set(hd.tolist())
        row_hd = m.head_dim if m.head_dim in measured else 128
        head_scale = m.head_dim / 128.0 if row_hd == 128 and 128 in measured else 1.0
        if row_hd != m.head_dim:
            self._warnings.append(f"operator tables: attention measured at head_dim 128; "
                                  f"{m.head_dim} scaled in proportion")
        sel &= c["head_dim"] == row_hd
        if not sel.any():
            raise TablesNotCovering(f"{path}: no {kd} rows at head_dim {row_hd}"
                                    + (f", window {window}" if window else ""))
        combos = set(zip(c["num_heads"][sel].tolist(), c["num_key_value_heads"][sel].tolist()))
        hh, kk, bf, tf = self._head_config(combos, h, kv)
        sel &= (c["num_heads"] == hh) & (c["num_key_value_heads"] == kk)
        b = c["batch_size"][sel].astype(float)
        y = c[y_col][sel].astype(float) + y_offset
        lat = c["latency"][sel].astype(float)
        bs, ys = np.unique(b), np.unique(y)
        z = np.full((bs.size, ys.size), np.nan)
        z[np.searchsorted(bs, b), np.searchsorted(ys, y)] = lat
        z = _fill_monotone(z, bs) * 1e-3 * tf * head_scale  # seconds per layer
        return _Grid(bs, ys, z), bf, tf * head_scale, bs, ys

    def _mla_grid(self, path: Path, y_col: str, y_offset: float, kv_dtype: str,
                  sparse: bool = False) -> tuple[_Grid, np.ndarray, np.ndarray]:
        """One layer's MLA attention (vLLM's MLA module) from AIConfigurator's ``mla`` table at
        this rank's head count: seconds over (batch, ``y_col`` + ``y_offset``), the median of
        repeated rows, FlashMLA's rows where measured at this head count. ``sparse``: the DSA
        module table (``sparse_attention/dsa_*_module_perf``), which holds several models: this
        model's rows (``_dsa_rows``), prompts from an empty cache (``step`` 0) for prefill."""
        module = "module" in path.name
        cols = ("batch_size", y_col, "num_heads", "tp_size", "kv_cache_dtype", "kernel_source",
                "latency") + (("gemm_type",) if module else ()) + (("model", "step") if sparse else ())
        c = read_columns(path, tuple(dict.fromkeys(cols)))
        m, tp = self.model, self.tensor_parallel_size
        heads = m.num_heads // tp
        kd = kv_dtype if kv_dtype in set(c["kv_cache_dtype"].tolist()) else "bfloat16"
        # Rows are per rank, at this rank's heads. The module tables measure one rank
        # (``tp_size`` 1) at each head count, with the module's GEMMs in ``gemm_type``.
        sel = (c["kv_cache_dtype"] == kd) & (c["num_heads"] == heads)
        if sparse:
            sel &= self._dsa_rows(path, c["model"])
            if y_col == "isl":
                sel &= c["step"] == 0
        if module:
            gts = set(c["gemm_type"][sel].tolist()) if sparse else set(c["gemm_type"].tolist())
            # The module's projections in the checkpoint's dtype for them: 16-bit where its
            # scope leaves attention unquantised (NVIDIA's NVFP4 MoE exports; a V2-style
            # checkpoint's quantised o_proj is priced 16-bit with the rest of the module).
            quantized = "attention_in" in quantized_groups(self.precision, m.is_moe)
            gt = self.gemm_dtype if self.gemm_dtype in gts else "bfloat16"
            if not quantized and gt != "bfloat16":
                if "bfloat16" in gts:
                    gt = "bfloat16"
                else:
                    self._warnings.append(f"operator tables: {path.name} has no bfloat16 rows for "
                                          f"the checkpoint's 16-bit attention; its {gt} rows price it")
            sel &= c["gemm_type"] == gt
        else:
            # An op-level row times the MLA kernel alone on one rank's heads (its projections are
            # GEMM rows), so its shape is the head count and MLA's dimensions, which every MLA
            # model kvplan serves shares; ``tp_size`` names the collector's model split, not the
            # kernel: SGLang 0.5.14's tables hold 16 heads at ``tp_size`` 4 (a 64-head model),
            # where DeepSeek at TP 8 runs 16 heads too. AIConfigurator keys these tables by head
            # count alone (aic-core ``perf_database/mla.rs``: axes num_heads, batch, seq_len).
            # This TP's own rows where measured, else the head count's.
            same_tp = sel & (c["tp_size"] == tp)
            if same_tp.any():
                sel = same_tp
        sources = set(c["kernel_source"][sel].tolist())
        if not sources:
            raise TablesNotCovering(f"{path}: no {kd} MLA rows at {heads} heads")
        sel &= _kernel_per_length(c["kernel_source"], c[y_col], sel)
        batch, lat = c["batch_size"][sel].astype(float), c["latency"][sel].astype(float)
        extra = self._mla_decode_extra
        if module and not sparse and y_col == "step" and extra is not None:
            # The legacy collector's norm chain, off (``_legacy_decode_extra``): ms here.
            off = np.interp(np.log(batch), np.log(extra[0]), extra[1]) * 1e3
            lat = np.maximum(lat - off, 0.5 * lat)
        bs, ys, z = _median_cells(batch, c[y_col][sel].astype(float) + y_offset, lat)
        # Made non-decreasing from above (a lone slow sample, 0.69 ms amid 0.16 ms neighbours
        # in this table, must not lift every larger batch), then filled as the others.
        z = np.fmin.accumulate(z[::-1, ::-1], axis=0)[::-1, ::-1]
        z = np.fmin.accumulate(z[:, ::-1], axis=1)[:, ::-1]
        z = _fill_monotone(z, bs) * 1e-3  # seconds per layer
        return _Grid(bs, ys, z), bs, ys

    def _dsa_rows(self, path: Path, models: np.ndarray) -> np.ndarray:
        """The DSA table's rows of this model: its own checkpoint's, or those of a checkpoint of
        the same model in another format (``zai-org/GLM-5`` -> ``zai-org/GLM-5-FP8``: the name
        without org and format suffix). Raises ``TablesNotCovering`` when the table has none."""
        def base(name: str) -> str:
            tail = str(name).split("/")[-1].lower()
            return re.sub(r"-(fp8|nvfp4|fp4|int4|bf16)$", "", tail)

        want = {base(n) for n in (self.model.name, self.model.hf_id) if n}
        names = sorted(set(models.tolist()))
        exact = [n for n in names if str(n).lower() in {str(x).lower() for x in (self.model.name, self.model.hf_id) if x}]
        same = exact or [n for n in names if base(n) in want]
        if not same:
            raise TablesNotCovering(f"{path}: no sparse-attention rows for {self.model.name} "
                                    f"(measured: {', '.join(map(str, names))})")
        self.dsa_table_model = str(same[0])
        return models == same[0]

    def _build_attention(self) -> None:
        kvd = "fp8" if self.precision.kv_bytes == 1 else "bfloat16"
        self.window_prefill: Optional[str] = None  # how the sliding-window layers' prefill is priced
        if self.model.is_sparse_attention:
            # DeepSeek sparse attention (GLM-5, DeepSeek-V3.2): AIConfigurator's DSA module rows,
            # the whole attention block (q/kv projections, the lightning indexer and its top-k,
            # sparse MLA over the chosen tokens, o_proj) as SGLang / vLLM run it; decode over the
            # KV length (``step``), prefill over prompts from an empty cache.
            try:
                gen, _ = self._table("sparse_attention", "dsa_generation_module_perf")
                ctx, _ = self._table("sparse_attention", "dsa_context_module_perf")
            except TableError as exc:
                raise TablesNotCovering(f"cost_model.tables: no sparse-attention (DSA) tables: {exc}") from None
            self._dec, _, dys = self._mla_grid(gen, "step", 0.0, kvd, sparse=True)
            self._pre, _, pys = self._mla_grid(ctx, "isl", 0.0, kvd, sparse=True)
            self._dec_bf = self._pre_bf = 1.0
            for op in MLA_MODULE_GEMMS:
                self._gemm_ms.pop(op, None)
            self._rope_in_attention = True
        elif self.model.is_mla:
            # vLLM 0.19+ tables name the MLA module's rows ``mla_*_module_perf`` (decode
            # ``step`` = KV length), 0.14's ``*_mla_perf`` (``step`` = tokens cached before).
            try:
                gen = self._mla_module_table("mla_generation_module_perf")
                ctx = self._mla_module_table("mla_context_module_perf")
                step_offset = 0.0
            except TableError:
                gen, _ = self._table("mla", "generation_mla_perf")
                ctx, _ = self._table("mla", "context_mla_perf")
                step_offset = 1.0
            self._dec, _, dys = self._mla_grid(gen, "step", step_offset, kvd)
            self._pre, _, pys = self._mla_grid(ctx, "isl", 0.0, kvd)
            self._dec_bf = self._pre_bf = 1.0
            if "module" in gen.name:
                # A module row is the whole attention block: AIConfigurator's
                # collector/vllm/collect_mla_module.py times ``DeepseekV2MLAAttention.forward``
                # ("projections + attention + output": the q/kv down- and up-projections,
                # their norms, rotary, the MLA kernel, o_proj). Its GEMMs and rotary are not
                # priced again beside it.
                for op in MLA_MODULE_GEMMS:
                    self._gemm_ms.pop(op, None)
                self._rope_in_attention = True
        else:
            gen, _ = self._table("attention", "generation_attention_perf")
            ctx, _ = self._table("attention", "context_attention_perf")
            # Decode: x = batch, y = KV length (``step`` tokens cached + the new one).
            self._dec, self._dec_bf, _, _, dys = self._attention_grid(gen, "batch_size", "step", 1.0, kvd)
            # Prefill (no cached tokens measured): x = batch, y = new tokens per sequence.
            self._pre, self._pre_bf, _, _, pys = self._attention_grid(ctx, "batch_size", "isl", 0.0, kvd)
        # Sliding-window layers read the full-attention grids unless rows at their window exist.
        self._pre_win, self._pre_win_bf = self._pre, self._pre_bf
        self._dec_win, self._dec_win_bf, self._dec_win_measured = self._dec, self._dec_bf, False
        if self._win_layers and not (self.model.is_mla or self.model.is_sparse_attention):
            self._build_window_attention(gen, ctx, kvd)
        # Cross term of a chunk over cached tokens (not measured): per query-key pair as the
        # longest measured single-sequence prefill, or streaming the cached KV as decode does
        # (slope of single-sequence decode over its longest lengths), whichever is longer.
        L = float(pys[-1])
        self._pair_s = self._pre.at(self._pre_bf, L) / (L * (L + 1) / 2)
        s1, s0 = float(dys[-1]), float(dys[-2])
        self._ctx_token_s = (self._dec.at(self._dec_bf, s1) - self._dec.at(self._dec_bf, s0)) / (s1 - s0)

    def _build_window_attention(self, gen: Path, ctx: Path, kvd: str) -> None:
        """Attention of the sliding-window layers. A windowed kernel (FlashAttention 3 on
        Hopper, FlashInfer TRT-LLM on Blackwell, both given vLLM's ``window_size``) skips the
        key blocks outside the window, so a long prefill chunk costs far less than full causal
        attention: vLLM 0.24's H200 table times gpt-oss's 64 x 8 heads over 8,192 tokens at
        1.16 ms full and 0.18 ms with window 128. Newer tables measure windows
        (``window_size`` 128, 1,024, 8,192); this model's window is read where they time it.
        Else prefill keeps the full-attention rows (an upper bound, said in a warning) and
        decode reads the full-attention rows at contexts bounded by the window (close: on H200
        a window-128 decode of 4 sequences is 14 us at any length, full attention at 128
        tokens 10 us)."""
        self.window_prefill = "full-attention rows"
        try:
            self._pre_win, self._pre_win_bf, _, _, _ = self._attention_grid(
                ctx, "batch_size", "isl", 0.0, kvd, window=self._window)
            self.window_prefill = f"window-{self._window} rows"
        except TablesNotCovering:
            self._warnings.append(f"operator tables: no context-attention rows at window {self._window} "
                                  f"on {self.hardware.name}; the sliding-window layers' prefill is "
                                  f"priced as full attention (an upper bound)")
        try:
            self._dec_win, self._dec_win_bf, _, _, ys = self._attention_grid(
                gen, "batch_size", "step", 1.0, kvd, window=self._window)
            # Past the longest measured KV length the window kernel still reads one window:
            # the length is held there, not extrapolated in proportion as full attention is.
            self._dec_win_max_len = float(ys[-1])
            self._dec_win_measured = True
        except TablesNotCovering:
            pass

    def _build_gdn(self) -> None:
        """A hybrid model's linear-attention kernels per layer, from AIConfigurator's
        ``linear_attention/<backend>/<version>/gdn_perf`` table (measured for Qwen3.5's GDN head
        shapes): prefill, the causal convolution (``causal_conv1d_fn``) plus the chunked delta
        rule (``chunk_gated_delta_rule``) over (batch, tokens per sequence); decode, the
        convolution update plus the recurrent step, over batch. Rows at this rank's key and value
        heads (heads split over TP); of several models measured at those heads, the one of this
        hidden size, else the median. Projections are GEMMs (``_build_gemms``)."""
        self._gdn_pre: Optional[_Grid] = None
        self._gdn_dec: Optional[_Curve] = None
        m, tp = self.model, self.tensor_parallel_size
        if not m.is_hybrid_linear:
            return
        try:
            path, _ = self._table("linear_attention", "gdn_perf")
        except TableError as exc:
            raise TablesNotCovering(f"cost_model.tables: no linear-attention (GDN) tables: {exc}") from None
        c = read_columns(path, ("kernel_source", "phase", "batch_size", "seq_len", "d_model",
                                "num_k_heads", "head_k_dim", "num_v_heads", "head_v_dim", "latency"))
        sel = ((c["num_k_heads"] == m.linear_num_key_heads // tp)
               & (c["num_v_heads"] == m.linear_num_value_heads // tp)
               & (c["head_k_dim"] == m.linear_key_head_dim) & (c["head_v_dim"] == m.linear_value_head_dim))
        if not sel.any():
            raise TablesNotCovering(
                f"{path}: no GDN rows at {m.linear_num_key_heads // tp} key / "
                f"{m.linear_num_value_heads // tp} value heads of {m.linear_key_head_dim} x "
                f"{m.linear_value_head_dim}")
        if (sel & (c["d_model"] == m.hidden_size)).any():
            sel &= c["d_model"] == m.hidden_size

        def cells(kernel_sel: np.ndarray, x_col: str, y_col: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return _median_cells(c[x_col][kernel_sel].astype(float), c[y_col][kernel_sel].astype(float),
                                 c["latency"][kernel_sel].astype(float))

        ctx = sel & (c["phase"] == "context")
        sources = np.array([str(k) for k in c["kernel_source"]])
        # The convolution, and the chunked delta rule under whichever name the release's backend
        # runs it (SGLang's ``chunk_gated_delta_rule``, vLLM's ``..._flashinfer`` on Blackwell):
        # per cell the fastest, as the backend's kernel selection is there to find.
        grids = []
        for name, match in (("causal_conv1d_fn", sources == "causal_conv1d_fn"),
                            ("chunk_gated_delta_rule", np.char.startswith(sources, "chunk_gated_delta_rule"))):
            ks = ctx & match
            if not ks.any():
                raise TablesNotCovering(f"{path}: no {name} rows for {m.name}'s GDN heads")
            xs, ys, zs = [], [], []
            for k in sorted(set(sources[ks].tolist())):
                bs, ls, z = cells(ks & (sources == k), "batch_size", "seq_len")
                xs.append(bs)
                ys.append(ls)
                zs.append(z)
            if any(x.tolist() != xs[0].tolist() for x in xs) or any(y.tolist() != ys[0].tolist() for y in ys):
                raise TablesNotCovering(f"{path}: the {name} kernels are measured on different grids")
            grids.append((xs[0], ys[0], _fill_monotone(np.fmin.reduce(zs), xs[0]) * 1e-3))  # s per layer
        (grid_b, grid_l, conv_fn), (scan_b, scan_l, scan) = grids
        if grid_b.tolist() != scan_b.tolist() or grid_l.tolist() != scan_l.tolist():
            raise TablesNotCovering(f"{path}: the GDN context kernels are measured on different grids")
        total = conv_fn + scan
        scan_kernels = sorted(set(sources[ctx & np.char.startswith(sources, "chunk_gated_delta_rule")].tolist()))
        self._gdn_pre = _Grid(grid_b, grid_l, total)
        gen = sel & (c["phase"] == "generation")
        kernels = sorted(set(c["kernel_source"][gen].tolist()))
        if "causal_conv1d_update" not in kernels or len(kernels) < 2:
            raise TablesNotCovering(f"{path}: no GDN decode rows (convolution update and "
                                    f"recurrent step) for {m.name}'s heads")
        curves = []
        for kernel in kernels:
            bs, _, z = cells(gen & (c["kernel_source"] == kernel), "batch_size", "seq_len")
            curves.append((kernel, bs, _isotonic(np.nanmin(z, axis=1)) * 1e-3))
        conv = next(cv for cv in curves if cv[0] == "causal_conv1d_update")
        # The recurrent step: where a release measured several kernels, the fastest at each
        # batch (the one its backend selection picks), on the convolution's batch grid.
        steps = [cv for cv in curves if cv[0] != "causal_conv1d_update"]
        step = np.min([[_loglog(b, y, float(x)) for x in conv[1]] for _, b, y in steps], axis=0)
        self._gdn_dec = _Curve(conv[1], conv[2] + step)
        self.gdn_kernels = ", ".join(scan_kernels + [k for k, _, _ in steps])

    def _allreduce_ms(self, elements: np.ndarray, graph: bool) -> np.ndarray:
        """Milliseconds of one all-reduce of ``elements`` 16-bit values over the TP group: the
        engine's custom all-reduce (its graph or eager rows; vLLM's and SGLang's both serve 2,
        4, 6 or 8 GPUs up to an 8 MiB buffer) where it applies, NCCL's otherwise."""
        tp = self.tensor_parallel_size
        if tp == 1:
            return np.zeros_like(elements, dtype=float)
        if not hasattr(self, "_ar_tables"):
            cdir = self.gpu_dir / "comm"
            custom_file, _ = self._table("comm", "custom_allreduce_perf")
            cc = read_columns(custom_file, ("backend", "num_gpus", "message_size", "latency"))
            nc = read_columns(latest_file(cdir / "nccl", "nccl_perf"),
                              ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
            tabs = {}
            for mode in ("graph", "eager"):
                # The engine's own custom all-reduce: ``vllm_graph`` / ``sglang_eager`` ...
                tabs[mode] = _collective_curve(cc, (cc["backend"] == f"{self.backend}_{mode}")
                                               & (cc["num_gpus"] == tp))
            tabs["nccl"] = _collective_curve(nc, (nc["op_name"] == "all_reduce") & (nc["nccl_dtype"] == "half")
                                             & (nc["num_gpus"] == tp))
            if tabs["nccl"][0].size == 0:
                raise TablesNotCovering(f"cost_model.tables: no NCCL all-reduce measured for "
                                        f"{tp} GPUs on {self.hardware.name}")
            self._ar_tables = tabs
        tabs = self._ar_tables
        custom = tabs["graph" if graph else "eager"]
        out = []
        for e in np.asarray(elements, dtype=float):
            use_custom = (custom[0].size and tp in CUSTOM_ALLREDUCE_GPUS
                          and e * 2 <= CUSTOM_ALLREDUCE_MAX_BYTES)
            xs, ys = custom if use_custom else tabs["nccl"]
            out.append(_loglog(xs, ys, max(e, 1.0)))
        return np.array(out)

    def _build_allreduce(self) -> None:
        self._ar_eager = self._allreduce_ms(self._gemm_m * self.model.hidden_size, graph=False)

    def _rows_part(self, rows: np.ndarray, gemm_ms: np.ndarray, ar_ms: np.ndarray,
                   graph: bool = False) -> np.ndarray:
        """Seconds of everything that depends only on the row count: L x (GEMMs + bandwidth-
        bound layer kernels + 2 all-reduces) + embedding + final norm. No KV-cache write: the
        attention rows include it (AIConfigurator's collector/vllm/collect_attn.py times
        ``impl.forward``, which wrote the cache itself before vLLM 0.16, after
        ``impl.do_kv_cache_update`` where the backend splits it off)."""
        r, L = self._roof, self.model.num_layers
        kernels = ("input_norm", "post_attn_norm", "mlp_act", "qk_norm") + (
            () if self._rope_in_attention else ("rope",))
        ew = np.array([sum(r.elementwise_time(op, float(x)) for op in kernels)
                       + cast(float, r._elementwise["residual_add"]) * float(x) for x in rows])
        per_layer = gemm_ms * 1e-3 + ew + 2 * ar_ms * 1e-3
        if self.model.qk_norm_across_heads and self.tensor_parallel_size > 1:
            # MiniMax-M2's q/k norm: the per-token variance all-reduced over TP (two fp32 per
            # row, four 16-bit elements), then the normalising kernel (vLLM's forward_qk).
            qk_ar = self._allreduce_ms(rows * QK_VARIANCE_BYTES / 2, graph=graph)
            per_layer = per_layer + qk_ar * 1e-3 + r.efficiency.elementwise_latency_s
        return L * per_layer + (r._embed_per_row + r._final_norm_per_row) * rows

    def _build_rows(self) -> None:
        ms = self._gemm_m
        # Never empty (every model has GEMMs), so an array, not ``sum``'s start value 0.
        gemm = cast(np.ndarray, sum(self._gemm_ms.values()))
        self._eager = _Curve(ms, self._rows_part(ms, gemm, self._ar_eager))
        # Graph replays at each capture size (GEMM curve interpolated in m there).
        gcurve = _Curve(ms, gemm)
        if self.capture_sizes:
            caps = np.array(self.capture_sizes, dtype=float)
            g = np.array([gcurve.at(float(c)) for c in caps])
            ar = self._allreduce_ms(caps * self.model.hidden_size, graph=True)
            self._graph_vals = self._rows_part(caps, g, ar, graph=True).tolist()
        else:
            self._graph_vals = []
        self._np_caps = np.array(self.capture_sizes, dtype=float)
        self._np_graph = np.array(self._graph_vals + [0.0])
        self._head = _Curve(ms, self._head_ms * 1e-3)
        r = self._roof
        self._sample_per_row = r._sample_per_row
        L = self.model.num_layers
        # Any forward outside CUDA graphs waits for the host to issue it. An eager PyTorch
        # forward (SGLang's extends outside its piecewise graphs; vLLM under enforce_eager)
        # issues every module's ops: counted (``eager_host_seconds``). vLLM's steps above its
        # capture sizes run its torch.compile'd code instead, whose Inductor wrapper issues
        # fused kernels with less Python per op: no measurement prices that by op, so it keeps
        # the measured dense layer's time for every layer.
        compiled = self.cuda_graphs and not self._graphs_decode_only
        self._eager_launch = (L * EAGER_HOST_S_PER_LAYER if compiled
                              else eager_host_seconds(self.model, self.tensor_parallel_size))
        self._piece_launch = (L + 1) * GRAPH_LAUNCH_S + L * KERNEL_LAUNCH_S
        # The engine core's CPU per step is the release's (V1), not the roofline's V0 figure.
        self._cpu_step, self._cpu_seq = self.engine.cpu_step_s, self.engine.cpu_per_seq_s
        gp, gd = self._gdn_pre, self._gdn_dec
        gdn_at: tuple[Optional[Callable], Optional[Callable]] = (None, None)
        gdn_at_array: tuple[Optional[Callable], Optional[Callable]] = (None, None)
        if gp is not None and gd is not None:
            gdn_at, gdn_at_array = (gp.at, gd.at), (gp.at_array, gd.at_array)
        padded = bool(self._pcg_sizes)
        self._scalar = _Lookups(self._eager_scalar, self._graph_scalar, self._dec.at, self._dec_win.at,
                                self._pre.at, self._pre_win.at, self._head.at, *gdn_at,
                                self._pad_scalar if padded else _same)
        self._vector = _Lookups(self._eager_array, self._graph_array, self._dec.at_array,
                                self._dec_win.at_array, self._pre.at_array, self._pre_win.at_array,
                                self._head.at_array, *gdn_at_array,
                                self._pad_array if padded else _same)

    # -- the step price, written once -----------------------------------------------------------
    # Split in two so that a decode window re-evaluates only what its growing context changes
    # (``decode_context_pricer``); ``_formula`` is the two parts in sequence.
    def _formula(self, s: Any, mx: Max, look: "_Lookups", parts: Optional[dict] = None) -> Any:
        fixed = self._context_free(s, mx, look)
        t_dec = self._decode_attention(s.num_decode_seqs, s.decode_context_tokens, mx, look.dec, look.dec_win)
        return self._with_decode_attention(fixed, t_dec, mx, parts)

    def _decode_attention(self, D: Any, decode_context_tokens: Any, mx: Max, dec: Callable,
                          dec_win: Callable) -> Any:
        """Decode attention of one layer at (batch, mean KV length); for a hybrid model the
        mean over its layers, the sliding-window ones from the rows measured at the window
        (at the mean KV length: the kernel reads at most the window of it), else from the
        full-attention rows at contexts bounded by the window."""
        b = mx(D, 1)
        full = (D > 0) * dec(D * self._dec_bf, decode_context_tokens / b)
        if not self._win_layers:
            return full
        L, ls = self._attn_layers, self._win_layers
        if self._dec_win_measured:
            windowed = (D > 0) * dec_win(D * self._dec_win_bf,
                                         -mx(-decode_context_tokens / b, -self._dec_win_max_len))
        else:
            windowed = (D > 0) * dec(D * self._dec_bf, -mx(-decode_context_tokens, -D * self._window) / b)
        return ((L - ls) * full + ls * windowed) / L

    def _context_free(self, s: Any, mx: Max, look: "_Lookups") -> tuple:
        """Every term of the price that the decode context does not change."""
        pre, head = look.pre, look.head
        L = self._attn_layers
        P, N, D = s.num_prefill_seqs, s.num_prefill_tokens, s.num_decode_seqs
        spec = s.num_spec_tokens
        rows = N + D + spec + s.num_padding_tokens
        graphable = (rows <= self.max_capture) * (rows > 0)
        decode_only = (N == 0)
        # SGLang: full graphs for decode batches; an extend batch in piecewise graphs up to
        # ``extend_graph_tokens``: its GEMMs as eager at the rows of the captured size that runs
        # it (the batch padded to it; attention, outside the graphs, on the real tokens).
        pcg = 0
        if not self._mixed_graphs:
            graphable = graphable * decode_only
        if self._graphs_decode_only:
            pcg = (1 - decode_only) * (rows <= self.extend_graph_tokens)
        rows_run = rows + pcg * (look.pad(rows) - rows)
        rows_cost = look.graph_at(rows) * graphable + look.rows_eager(rows_run) * (1 - graphable) * (rows > 0)
        # Attention: decode at (batch, mean KV length, ``_decode_attention``); prefill at
        # (batch, mean chunk) plus the cross term over cached tokens.
        p = mx(P, 1)
        isl = N / p
        causal = P * isl * (isl + 1) / 2
        cross = mx(s.prefill_attention_work - causal, 0)
        t_pre = (N > 0) * (pre(P * self._pre_bf, isl)
                           + mx(cross * self._pair_s, s.prefill_context_tokens * self._ctx_token_s))
        if self._win_layers:  # window layers: each token attends to at most the window
            w, ls = self._window, self._win_layers
            cross_w = mx(-mx(-s.prefill_attention_work, -N * w) - causal, 0)
            ctx_w = -mx(-s.prefill_context_tokens, -P * w)
            t_win = (N > 0) * (look.pre_win(P * self._pre_win_bf, isl)
                               + mx(cross_w * self._pair_s, ctx_w * self._ctx_token_s))
            t_pre = ((L - ls) * t_pre + ls * t_win) / L
        # Linear-attention layers: their kernels depend on the batch and chunk only (the
        # recurrent state is the same size at any context).
        t_lin = 0.0
        if look.gdn_pre is not None and look.gdn_dec is not None:
            t_lin = self._lin_layers * ((N > 0) * look.gdn_pre(mx(P, 1), isl)
                                        + (D > 0) * look.gdn_dec(mx(D, 1)))
        # Launch: a full graph is one replay; piecewise graphs launch L + 1 pieces and L
        # eager attention calls; eager launches every kernel. The GPU cannot run ahead of it.
        full = graphable * (decode_only * self._decode_full + (1 - decode_only) * self._mixed_full)
        piece = graphable * (decode_only * (1 - self._decode_full) + (1 - decode_only) * (1 - self._mixed_full)) + pcg
        eager = (1 - graphable) * (1 - pcg) * (rows > 0)
        logits = (rows > 0) * sampled_rows(s)
        lm = (logits > 0) * (head(logits) + self._sample_per_row * logits + 2 * KERNEL_LAUNCH_S)
        swap = self._roof.swap_time(s.num_swap_tokens)
        cpu = self._cpu_step + self._cpu_seq * (P + D)
        busy = (rows > 0) | (s.num_swap_tokens > 0)
        return L, rows_cost, t_pre, full, piece, eager, lm, swap, cpu, busy, t_lin

    def _with_decode_attention(self, fixed: tuple, t_dec: Any, mx: Max,
                               parts: Optional[dict] = None) -> Any:
        """The price from the context-free terms and one layer's decode attention."""
        L, rows_cost, t_pre, full, piece, eager, lm, swap, cpu, busy, t_lin = fixed
        attn = L * (t_dec + t_pre)
        kernels = rows_cost + attn + t_lin
        gpu = (full * (kernels + GRAPH_LAUNCH_S) + piece * mx(kernels, self._piece_launch)
               + eager * mx(kernels, self._eager_launch))
        if parts is not None:
            parts.update(rows=rows_cost, attn_decode=L * t_dec, attn_prefill=L * t_pre,
                         lm_head=lm, swap=swap, gpu=gpu, cpu=cpu)
            if self._lin_layers:
                parts["linear_attention"] = t_lin
        if self.async_scheduling:
            return busy * mx(gpu + lm + swap, cpu)
        return busy * (gpu + lm + swap + cpu)

    def _graph_scalar(self, rows: float) -> float:
        if rows <= 0 or rows > self.max_capture:
            return 0.0
        return self._graph_vals[bisect_left(self.capture_sizes, rows)]

    def _graph_array(self, rows: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self._np_caps, rows, side="left")
        return self._np_graph[np.minimum(k, len(self._graph_vals))]

    def _pad_scalar(self, rows: float) -> float:
        k = bisect_left(self._pcg_sizes, rows)
        return float(self._pcg_sizes[k]) if k < len(self._pcg_sizes) else rows

    def _pad_array(self, rows: np.ndarray) -> np.ndarray:
        padded = self._np_pcg_sizes[np.searchsorted(self._np_pcg_sizes, rows, side="left")]
        return np.where(np.isfinite(padded), padded, rows)

    def _eager_scalar(self, rows: float) -> float:
        return self._eager.at(rows) if rows > 0 else 0.0

    def _eager_array(self, rows: np.ndarray) -> np.ndarray:
        return self._eager.at_array(rows)

    def price(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape`` (0 for an empty step)."""
        return float(self._formula(shape, max, self._scalar))

    step_time = price

    def decode_context_pricer(self, shape: StepShape) -> Callable[[int], float]:
        """Bit for bit ``price(shape.with_decode_context(c))``, evaluating only the decode
        attention and what depends on it: the context-free terms are computed once."""
        fixed = self._context_free(shape, max, self._scalar)
        D, dec, dec_win = shape.num_decode_seqs, self._scalar.dec, self._scalar.dec_win
        attention, total = self._decode_attention, self._with_decode_attention
        return lambda c: float(total(fixed, attention(D, c, max, dec, dec_win), max))

    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        """Vectorised ``price``; bit-identical to it."""
        s = ShapeColumns(columns, "price_columns")
        return np.asarray(self._formula(s, np.maximum, self._vector), dtype=float)

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per term: ``rows`` (GEMMs, norms, all-reduces: graph or eager), attention,
        LM head + sampling, swap, and the GPU-vs-CPU split; ``total`` is ``price``."""
        parts: dict = {}
        total = self._formula(shape, max, self._scalar, parts)
        out = {k: float(v) for k, v in parts.items()}
        out["total"] = float(total)
        return out

    def describe(self) -> str:
        p = self.precision
        mode = self.cudagraph_mode
        if self.cuda_graphs and mode == "NONE":
            graphs = ", no cuda graphs (cudagraph_mode NONE: compiled steps at the host's time per layer)"
        elif self.cuda_graphs:
            graphs = (f", cuda graphs up to {self.max_capture} tokens"
                      + ("" if mode in ("FULL_AND_PIECEWISE", "DECODE_ONLY") else f" ({mode})"))
        elif self._graphs_decode_only:
            graphs = ", decode batches eager (--disable-cuda-graph)"
        else:
            graphs = ", no cuda graphs (enforce_eager: every forward issued op by op)"
        return (f"operator tables (AIConfigurator, {self.backend} {self.version} tables for "
                f"{self.engine.label}, {self.gpu_dir.name}; "
                f"{self.model.name}, {p.dtype} GEMMs as {self.gemm_dtype}"
                + (f" ({self.scope_note})" if self.scope_note else "")
                + f", kv {p.kv_cache_dtype}, "
                f"tp={self.tensor_parallel_size}"
                + (f", dp={self.data_parallel_size}" if self.data_parallel_size > 1 else "")
                + (f", ep={self.expert_parallel_size}" if self.expert_parallel_size > 1 else "")
                + (f", moe_tp={self.expert_tensor_parallel_size}"
                   if self.model.is_moe and self.expert_tensor_parallel_size not in (1, self.tensor_parallel_size)
                   else "")
                + graphs
                + ((f" ({'decode; ' if self.cuda_graphs else ''}extends in piecewise graphs up to "
                    f"{self.extend_graph_tokens} tokens)"
                    if self.extend_graph_tokens else f" ({'decode; ' if self.cuda_graphs else ''}extends eager"
                    + (f": {self.extend_graph_reason.removeprefix('off: ')}" if self.extend_graph_reason else "")
                    + ")")
                   if self._graphs_decode_only else "")
                + ", "
                f"async scheduling {'on' if self.async_scheduling else 'off'}"
                + (f", MoE experts from the fused-MoE table"
                   + (f" (MXFP4 x {self.moe_activations.upper()})" if self.moe_activations else "")
                   + (f", {self.marlin_reference}" if self.marlin_reference else "")
                   + f", {self.moe_routing} routing"
                   + (" (balanced rows scaled to the experts touched)"
                      if self.moe_routing == "uniform" and self.moe_rows_routing == "balanced"
                      else f" ({self.moe_rows_routing} rows as measured)"
                      if self.moe_rows_routing not in (None, self.moe_routing) else "")
                   + (", router gate in fp32 (an SGEMM at the fp32 rate, not in the tables)"
                      if self.router_fp32 else "")
                   if self.model.is_moe else "")
                + (f", {self._win_layers} sliding-window layers' prefill from the {self.window_prefill}"
                   + (f", decode from the window-{self._window} rows" if self._dec_win_measured
                      else ", decode from full-attention rows at contexts bounded by the window")
                   if self.window_prefill else "")
                + (f", {self._lin_layers} linear-attention layers from the GDN table "
                   f"({self.gdn_kernels})" if self._gdn_dec is not None else "") + ")")

    def warnings(self) -> list[str]:
        return list(dict.fromkeys(self._warnings))

    def warn_first(self, text: str) -> None:
        """Put ``text`` before the pricer's own warnings (what its caller chose for it, such
        as another engine's tables)."""
        self._warnings.insert(0, text)

    def known_error(self) -> dict:
        """This pricer's known error on this GPU: leave-one-point-out interpolation error on
        the GPU's own GEMM and decode-attention tables, and the whole-step error against real
        runs where ``benchmarks/results/operator_tables_step_error.json`` has it."""
        out = {"gpu": self.gpu_dir.name,
               **interpolation_error(str(self.tables), self.gpu_dir.name, self.backend,
                                     self.table_engine.version, self.gemm_dtype)}
        step = _step_error(self.gpu_dir.name)
        out["step_vs_real"] = step
        return out

    @property
    def provenance(self) -> dict:
        """What ``kvplan report`` prints as the cost model's origin."""
        src = self.table_source()
        return {"operator tables": f"{src['system']}/{src['backend']} {src['version']} ({src['from']})",
                "engine": src["engine"], "GEMMs": src["gemm_dtype"]}

    def table_source(self) -> dict:
        """Which tables priced the steps: the system folder, backend, the version folder of
        each table read, and where the folder came from (the summary's ``cost_model.tables``)."""
        pkg = package_tables_root()
        from_package = pkg is not None and self.tables.resolve() == pkg.resolve()
        return {"system": self.gpu_dir.name, "backend": self.backend, "version": self.version,
                "engine": self.engine.label, "tables_read": dict(self.tables_read),
                "gemm_dtype": self.gemm_dtype,
                **({"moe_dtype": self.moe_dtype} if hasattr(self, "moe_dtype") else {}),
                **({"moe_kernel": self.moe_kernel} if hasattr(self, "moe_kernel") else {}),
                "root": str(self.tables),
                "from": (f"aiconfigurator-core {package_version()}" if from_package
                         else "cost_model.tables or $KVPLAN_GPU_TABLES")}

    def __repr__(self) -> str:
        return (f"OperatorTableCostModel({self.model.name}, {self.hardware.name}, "
                f"{self.precision.dtype}, tp={self.tensor_parallel_size}, {self.engine.label}, "
                f"{self.backend} {self.version} tables)")


def full_attention_rows(c: dict) -> np.ndarray:
    """Rows of an attention table measuring full attention with one kernel (``attention_rows``
    at window 0)."""
    return attention_rows(c, 0)


def attention_rows(c: dict, window: int = 0) -> np.ndarray:
    """Rows of an attention table measuring one attention window with one kernel:
    ``window_size`` ``window`` (0: full attention; tables without the column measure full
    attention only) and the kernel measured most (FlashAttention 3 on Hopper; a few
    FlashAttention 4 rows sit beside it), so no cell mixes two kernels."""
    n = len(c["latency"])
    sel = np.ones(n, dtype=bool)
    if "window_size" in c:
        sel &= c["window_size"] == window
    elif window:
        sel[:] = False
    if "kernel_source" in c and sel.any():
        kernels, counts = np.unique(c["kernel_source"][sel], return_counts=True)
        sel &= c["kernel_source"] == kernels[np.argmax(counts)]
    return sel


def _step_error(gpu: str) -> Optional[dict]:
    try:
        data = json.loads(STEP_ERROR_FILE.read_text())
    except (OSError, ValueError):
        return None
    v = data.get(gpu) if isinstance(data, dict) else None
    return v if isinstance(v, dict) else None


@lru_cache(maxsize=64)
def interpolation_error(root: str, gpu: str, backend: str = "vllm",
                        target: tuple[int, ...] = (0, 15, 1), gemm_dtype: str = "bfloat16") -> dict:
    """Leave-one-point-out error of the interpolation on ``gpu``'s own tables: each interior
    measured point predicted from its neighbours along m (GEMMs, linear in m, as priced) and
    along KV length (decode attention); mean and p90 absolute relative error. Computed once per
    process (a fraction of a second)."""
    d = Path(root) / gpu
    path, _ = table_file(d / "gemm" / backend, "gemm_perf", target)
    c = read_columns(path, ("gemm_dtype", "m", "n", "k", "latency"))
    sel = c["gemm_dtype"] == gemm_dtype
    m, n, k, lat = (c[x][sel].astype(float) for x in ("m", "n", "k", "latency"))
    order = np.lexsort((m, k, n))
    m, n, k, lat = m[order], n[order], k[order], lat[order]
    same = (n[:-2] == n[2:]) & (k[:-2] == k[2:]) & (m[2:] > m[:-2])
    x0, x1, x2 = m[:-2], m[1:-1], m[2:]
    y0, y1, y2 = lat[:-2], lat[1:-1], lat[2:]
    pred = y0 + (y2 - y0) * (x1 - x0) / np.where(x2 > x0, x2 - x0, 1.0)
    g = np.abs(pred - y1)[same] / y1[same]
    gen, _ = table_file(d / "attention" / backend, "generation_attention_perf", target)
    a = read_columns_present(gen, ("batch_size", "step", "num_heads", "num_key_value_heads",
                                   "head_dim", "kv_cache_dtype", "latency"),
                             ("window_size", "kernel_source"))
    s = (a["kv_cache_dtype"] == "bfloat16") & full_attention_rows(a)
    keys = [a[x][s].astype(float) for x in ("batch_size", "num_heads", "num_key_value_heads", "head_dim")]
    st, al = a["step"][s].astype(float) + 1, a["latency"][s].astype(float)
    o = np.lexsort((st, keys[3], keys[2], keys[1], keys[0]))
    st, al = st[o], al[o]
    keys = [kk[o] for kk in keys]
    # Repeated rows (one shape measured twice) are not a neighbour to interpolate from.
    same = np.logical_and.reduce([kk[:-2] == kk[2:] for kk in keys]) & (st[2:] > st[:-2])
    span = np.where(st[2:] > st[:-2], st[2:] - st[:-2], 1.0)
    pa = al[:-2] + (al[2:] - al[:-2]) * (st[1:-1] - st[:-2]) / span
    ga = np.abs(pa - al[1:-1])[same] / al[1:-1][same]
    errs = {"gemm": g, "decode_attention": ga}
    return {
        "method": "leave-one-point-out interpolation on the GPU's own tables",
        "tables": f"{gpu}/{backend} {path.parent.name}, {gemm_dtype} GEMMs",
        **{f"{name}_mean_abs_pct": round(float(np.mean(v)) * 100, 2) for name, v in errs.items()},
        **{f"{name}_p90_abs_pct": round(float(np.quantile(v, 0.9)) * 100, 2)
           for name, v in errs.items()},
    }
