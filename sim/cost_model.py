"""Step latency for the simulator: a roofline over the hardware and model catalogs, and the
memory plan that sizes the KV pool.

Why a roofline: it needs only public numbers (datasheet peaks, model shapes), so it prices any
GPU x model x dtype x parallelism a user asks about, and each term is a physical quantity a
serving engineer can check. What real kernels achieve is a fraction of the peaks; those
fractions and the fixed latencies are the few constants of ``Efficiency``, fitted once to real
A100 operator timings (Vidur's profiles; ``benchmarks/cost_model_vs_vidur.py`` refits them
and prints the error per operator family, ``docs/cost_model.md`` explains every formula).

Every operator costs ``max(FLOPs / (peak x eff), bytes / (bandwidth x eff)) + latency``.
``step_time`` is on the simulator's hot path, so ``__init__`` folds everything that depends
only on the number of GEMM rows into one piecewise-linear function (a breakpoint where each
GEMM turns from memory- to compute-bound) and a step costs a bisect and a few float ops.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import asdict, dataclass
from typing import Optional, Protocol, Union, runtime_checkable

import numpy as np

from sim.catalog.hardware import HardwareSpec, get_hardware
from sim.catalog.models import ModelSpec, get_model
from sim.errors import ConfigError, DoesNotFitError
from sim.policies.step import StepShape

GB = 1e9
GiB = 1 << 30

# ---------------------------------------------------------------------------------------
# Precision: activation dtype, weight quantisation, KV cache dtype
# ---------------------------------------------------------------------------------------

DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
_DTYPE_ALIASES = {
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
# float32 runs on plain FP32 units: PyTorch leaves TF32 matmuls off by default.
_DTYPE_COMPUTE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}

WEIGHT_DTYPES: tuple[str, ...] = ("auto", "int8", "int4", "fp8")
# int4 is AWQ/GPTQ-style: 4-bit weights plus an fp16 scale and a 4-bit zero per group of 128.
_INT4_BYTES = 0.5 + (2 + 0.5) / 128

KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")


def resolve_dtype(dtype: str) -> str:
    """Canonical activation dtype name; accepts fp16/bf16/fp32 aliases."""
    key = str(dtype).strip().lower().replace("torch.", "")
    if key not in _DTYPE_ALIASES:
        raise ConfigError(
            f"dtype: unknown value {dtype!r}; allowed: {', '.join(DTYPES)} (or fp16, bf16, fp32)"
        )
    return _DTYPE_ALIASES[key]


@dataclass(frozen=True)
class Precision:
    """Bytes per element of each tensor class, and which tensor-core peak the GEMMs use.

    - ``int8`` weights are W8A8 (SmoothQuant-style): int8 tensor cores.
    - ``int4`` weights are W4A16 (AWQ/GPTQ/Marlin): dequantised in the GEMM, 16-bit compute.
    - ``fp8`` weights are W8A8 FP8 where the GPU has FP8 tensor cores (H100, H200, L40S,
      MI300X), else weight-only FP8 with 16-bit compute (what vLLM does on Ampere).
    Embeddings and the LM head stay in the activation dtype (vLLM does not quantise them).
    """

    dtype: str
    weight_dtype: str
    kv_cache_dtype: str
    act_bytes: int
    weight_bytes: float
    kv_bytes: int
    compute: str


def resolve_precision(hw: HardwareSpec, dtype: str = "float16",
                      weight_dtype: Optional[str] = None,
                      kv_cache_dtype: str = "auto") -> Precision:
    dtype = resolve_dtype(dtype)
    act_bytes = _DTYPE_BYTES[dtype]
    act_compute = _DTYPE_COMPUTE[dtype]
    if not hw.supports(act_compute):
        raise ConfigError(f"dtype: {hw.name} has no {dtype} support")

    w = "auto" if weight_dtype in (None, "", "none") else str(weight_dtype).strip().lower()
    if w in ("auto", dtype) or _DTYPE_ALIASES.get(w) == dtype:
        w, weight_bytes, compute = "auto", float(act_bytes), act_compute
    elif w == "int8":
        weight_bytes, compute = 1.0, "int8" if hw.supports("int8") else act_compute
    elif w == "int4":
        weight_bytes, compute = _INT4_BYTES, act_compute
    elif w in ("fp8", "fp8_e4m3"):
        w, weight_bytes, compute = "fp8", 1.0, "fp8" if hw.supports("fp8") else act_compute
    else:
        raise ConfigError(
            f"weight_dtype: unknown value {weight_dtype!r}; allowed: {', '.join(WEIGHT_DTYPES)}"
        )

    kv = str(kv_cache_dtype or "auto").strip().lower()
    if kv == "auto":
        kv_bytes = act_bytes
    elif kv in KV_CACHE_DTYPES:
        kv_bytes = 1
    else:
        raise ConfigError(
            f"kv_cache_dtype: unknown value {kv_cache_dtype!r}; allowed: "
            f"{', '.join(KV_CACHE_DTYPES)}"
        )
    return Precision(dtype=dtype, weight_dtype=w, kv_cache_dtype=kv, act_bytes=act_bytes,
                     weight_bytes=weight_bytes, kv_bytes=kv_bytes, compute=compute)


# ---------------------------------------------------------------------------------------
# Parallelism checks shared by the memory plan and the cost model
# ---------------------------------------------------------------------------------------

def _check_parallel(model: ModelSpec, tp: int, pp: int) -> None:
    if not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor_parallel_size: must be a positive integer, got {tp!r}")
    if not isinstance(pp, int) or pp < 1:
        raise ConfigError(f"pipeline_parallel_size: must be a positive integer, got {pp!r}")
    if model.num_heads % tp:
        raise ConfigError(
            f"tensor_parallel_size: {tp} does not divide {model.name}'s {model.num_heads} "
            f"attention heads"
        )
    if pp > model.num_layers:
        raise ConfigError(
            f"pipeline_parallel_size: {pp} exceeds {model.name}'s {model.num_layers} layers"
        )


def _kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each rank stores: vLLM replicates KV heads when tp exceeds their number."""
    return max(1, model.num_kv_heads // tp)


# ---------------------------------------------------------------------------------------
# Memory plan
# ---------------------------------------------------------------------------------------

# What the KV pool must leave besides weights and activations, per GPU: CUDA context and
# cuBLAS/cuDNN workspaces (~0.5 GiB) plus captured CUDA graphs (~0.3-0.5 GiB in vLLM for the
# default 67 batch sizes); NCCL and custom all-reduce buffers add ~0.5 GiB once GPUs talk.
FIXED_RESERVE_BYTES = 1 * GiB
PARALLEL_RESERVE_BYTES = GiB // 2


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory split. ``kv_pool_bytes`` = memory x gpu_memory_utilization - weights -
    activation reserve, as vLLM sizes its KV cache; ``num_kv_slots`` tokens fit in it."""

    model: str
    hardware: str
    dtype: str
    weight_dtype: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    memory_bytes: int
    budget_bytes: float
    weights_bytes: float
    activation_reserve_bytes: float
    kv_pool_bytes: float
    kv_bytes_per_token: int
    num_kv_slots: int

    def num_blocks(self, block_size: int) -> int:
        """Whole KV blocks of ``block_size`` tokens the pool holds."""
        if block_size < 1:
            raise ConfigError(f"block_size: must be a positive integer, got {block_size!r}")
        return self.num_kv_slots // block_size

    def to_dict(self) -> dict:
        return asdict(self)


def weights_bytes_per_gpu(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1) -> float:
    """Weight bytes on the fullest GPU: linear layers, embeddings and LM head are sharded
    over ``tp`` (Megatron column/row and vocab parallel), norms and biases replicated;
    pipeline stages take ``ceil(layers / pp)`` layers, the first the embedding, the last the
    LM head (and the embedding again when tied)."""
    layers = math.ceil(model.num_layers / pp)
    per_layer = (model.linear_params_per_layer * prec.weight_bytes / tp
                 + model.other_params_per_layer * prec.act_bytes)
    embed = model.embedding_params * prec.act_bytes / tp
    head_params = model.vocab_size * model.hidden_size if (
        model.tie_word_embeddings and pp > 1) else model.lm_head_params
    head = head_params * prec.act_bytes / tp + model.final_norm_params * prec.act_bytes
    extra = embed + head if pp == 1 else max(embed, head)
    return layers * per_layer + extra


def activation_reserve_bytes(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1,
                             max_num_batched_tokens: int = 2048, max_num_seqs: int = 256
                             ) -> float:
    """Peak memory of the profiling forward pass vLLM runs before sizing the KV cache.

    One layer's live tensors at its peak, for ``max_num_batched_tokens`` rows: the residual
    stream and the normed hidden state (2h), plus the larger of attention's (q,k,v output and
    attention output) or the MLP's (gate+up output and activation output) shards. Logits for
    ``max_num_seqs`` sampled rows in fp32, twice (logits and probabilities). Plus the fixed
    reserve for CUDA context, workspaces and CUDA graphs (and NCCL buffers when parallel).
    """
    t = max_num_batched_tokens
    attn = (model.qkv_size + model.q_size) / tp
    mlp = (model.mlp_in_size + model.intermediate_size) / tp
    layer_peak = t * prec.act_bytes * (2 * model.hidden_size + max(attn, mlp))
    logits = min(max_num_seqs, t) * model.vocab_size * 4 * 2
    fixed = FIXED_RESERVE_BYTES + (PARALLEL_RESERVE_BYTES if tp * pp > 1 else 0)
    return layer_peak + logits + fixed


def kv_bytes_per_token(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1) -> int:
    """K and V of one token, all layers of this GPU's pipeline stage, its KV-head shard."""
    layers = math.ceil(model.num_layers / pp)
    return 2 * layers * _kv_heads_per_gpu(model, tp) * model.head_dim * prec.kv_bytes


def plan_memory(model: Union[str, ModelSpec], hw: Union[str, HardwareSpec],
                dtype: str = "float16", gpu_memory_utilization: float = 0.9,
                tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                kv_cache_dtype: str = "auto", weight_dtype: Optional[str] = None,
                max_num_batched_tokens: int = 2048, max_num_seqs: int = 256) -> MemoryPlan:
    """Split one GPU's memory into weights, activation reserve and KV pool.

    Raises DoesNotFitError (one line, with the numbers and what would fit) when weights and
    reserve leave no room for a KV cache.
    """
    model, hw = get_model(model), get_hardware(hw)
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    _check_parallel(model, tp, pp)
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"gpu_memory_utilization: must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    if max_num_batched_tokens < 1:
        raise ConfigError("max_num_batched_tokens: must be a positive integer")
    prec = resolve_precision(hw, dtype, weight_dtype, kv_cache_dtype)

    budget = hw.memory_bytes * gpu_memory_utilization
    weights = weights_bytes_per_gpu(model, prec, tp, pp)
    reserve = activation_reserve_bytes(model, prec, tp, pp, max_num_batched_tokens,
                                       max_num_seqs)
    kv_token = kv_bytes_per_token(model, prec, tp, pp)
    pool = budget - weights - reserve
    if pool < kv_token:
        raise DoesNotFitError(_does_not_fit_message(
            model, hw, prec, gpu_memory_utilization, tp, pp, weights, reserve, budget,
            max_num_batched_tokens, max_num_seqs))
    return MemoryPlan(
        model=model.name, hardware=hw.name, dtype=prec.dtype, weight_dtype=prec.weight_dtype,
        kv_cache_dtype=prec.kv_cache_dtype, tensor_parallel_size=tp,
        pipeline_parallel_size=pp, gpu_memory_utilization=gpu_memory_utilization,
        memory_bytes=hw.memory_bytes, budget_bytes=budget, weights_bytes=weights,
        activation_reserve_bytes=reserve, kv_pool_bytes=pool, kv_bytes_per_token=kv_token,
        num_kv_slots=int(pool // kv_token),
    )


def _does_not_fit_message(model: ModelSpec, hw: HardwareSpec, prec: Precision, util: float,
                          tp: int, pp: int, weights: float, reserve: float, budget: float,
                          max_tokens: int, max_seqs: int) -> str:
    what = prec.dtype if prec.weight_dtype == "auto" else f"{prec.weight_dtype} weights"
    where = f"{hw.name} x {util:.2f} gives {budget / GB:.1f} GB"
    if weights >= budget:
        head = (f"{model.name} in {what} needs {weights / GB:.1f} GB of weights per GPU "
                f"but {where}")
    else:
        head = (f"{model.name} in {what} needs {weights / GB:.1f} GB of weights + "
                f"{reserve / GB:.1f} GB activation reserve per GPU but {where}, leaving no "
                f"KV cache")
    hint = "a quantised dtype (weight_dtype int8, int4 or fp8)"
    for cand in (2, 4, 8, 16, 32, 64):
        if cand <= tp or model.num_heads % cand:
            continue
        w = weights_bytes_per_gpu(model, prec, cand, pp)
        r = activation_reserve_bytes(model, prec, cand, pp, max_tokens, max_seqs)
        if w + r + kv_bytes_per_token(model, prec, cand, pp) <= budget:
            hint = f"tensor_parallel_size >= {cand} or {hint}"
            break
    return f"{head}; use {hint}"


# ---------------------------------------------------------------------------------------
# Cost model
# ---------------------------------------------------------------------------------------

@runtime_checkable
class CostModel(Protocol):
    """Anything that prices a step: the roofline below, or a calibrated profile fit."""

    def step_time(self, shape: StepShape) -> float:
        """Seconds the step takes, CPU overhead included."""
        ...


@dataclass(frozen=True)
class Efficiency:
    """The fitted constants: fractions of datasheet peaks real kernels reach, and the fixed
    latencies small kernels and collectives cannot go below.

    Defaults are ``A100_EFFICIENCY`` (fitted by ``benchmarks/cost_model_vs_vidur.py --fit``
    to Vidur's A100-80GB kernel timings); on other GPUs they are an assumption: the same
    fractions of that GPU's own peaks (see docs/cost_model.md).
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
)

BREAKDOWN_KEYS: tuple[str, ...] = (
    "qkv_proj", "attn_prefill", "attn_decode", "o_proj", "mlp", "norms_elementwise",
    "lm_head", "tp_allreduce", "pp_send_recv", "swap", "overhead",
)

LAYER_GEMMS: tuple[str, ...] = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")
LAYER_ELEMENTWISE: tuple[str, ...] = (
    "input_norm", "post_attn_norm", "rope", "residual_add", "mlp_act", "kv_cache_write",
)


@dataclass(frozen=True)
class _Gemm:
    """One GEMM on one GPU: seconds per row of compute, fixed weight-read seconds, seconds
    per row of activation traffic."""

    compute_per_row: float
    weight_s: float
    memory_per_row: float

    def time(self, rows: float, latency: float) -> float:
        if rows <= 0:
            return 0.0
        return max(self.compute_per_row * rows,
                   self.weight_s + self.memory_per_row * rows) + latency

    @property
    def breakpoint(self) -> float:
        """Rows at which the GEMM turns compute-bound."""
        slope = self.compute_per_row - self.memory_per_row
        return self.weight_s / slope if slope > 0 else math.inf


class RooflineCostModel:
    """Step time of one replica (``tensor_parallel_size x pipeline_parallel_size`` GPUs).

    A step is the latency of one batch through all layers: with one batch in flight a
    pipeline's stages run one after another, so pipeline parallelism adds send/recv time and
    leaves ``(pp - 1) / pp`` of each GPU idle (the bubble) rather than speeding a step up.
    """

    def __init__(self, model: Union[str, ModelSpec], hw: Union[str, HardwareSpec],
                 dtype: str = "float16", tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                 weight_dtype: Optional[str] = None,
                 efficiency: Efficiency = A100_EFFICIENCY) -> None:
        self.model = m = get_model(model)
        self.hardware = h = get_hardware(hw)
        self.tensor_parallel_size = tp = tensor_parallel_size
        self.pipeline_parallel_size = pp = pipeline_parallel_size
        _check_parallel(m, tp, pp)
        self.precision = p = resolve_precision(h, dtype, weight_dtype, kv_cache_dtype)
        self.efficiency = e = efficiency

        ab, hd = p.act_bytes, m.hidden_size
        peak = h.flops(p.compute) * e.gemm_compute
        bw = h.memory_bandwidth
        gemm_bw = bw * e.memory
        q = m.q_size // tp
        kv = _kv_heads_per_gpu(m, tp) * m.head_dim
        ffn = m.intermediate_size / tp

        def gemm(k: float, n: float, wbytes: float) -> _Gemm:
            return _Gemm(2 * k * n / peak, k * n * wbytes / gemm_bw, (k + n) * ab / gemm_bw)

        wb = p.weight_bytes
        self._gemms = {
            "qkv_proj": gemm(hd, q + 2 * kv, wb),
            "o_proj": gemm(q, hd, wb),
            "mlp_up": gemm(hd, m.mlp_in_size / tp, wb),
            "mlp_down": gemm(ffn, hd, wb),
        }
        # LM head: 16-bit weights, 16-bit compute, vocab-parallel over tp.
        head_peak = h.flops(_DTYPE_COMPUTE[p.dtype]) * e.gemm_compute
        vocab = m.vocab_size / tp
        self._lm_head = _Gemm(2 * hd * vocab / head_peak, hd * vocab * ab / gemm_bw,
                              (hd + vocab) * ab / gemm_bw)
        # Sampling reads fp32 logits of the full vocabulary and writes probabilities.
        self._sample_per_row = m.vocab_size * 4 * 2 / (bw * e.elementwise_memory)
        self._head_latency = e.gemm_latency_s + e.elementwise_latency_s

        # Bytes per row of the bandwidth-bound per-layer kernels.
        norm_bw, ew_bw = bw * e.norm_memory, bw * e.elementwise_memory
        self._elementwise = {
            "input_norm": 2 * hd * ab / norm_bw,
            "post_attn_norm": 2 * hd * ab / norm_bw,
            "rope": (2 * (q + kv) * ab / ew_bw) if m.learned_position_rows == 0 else None,
            "residual_add": 3 * hd * ab / gemm_bw,  # two per layer
            "mlp_act": (m.mlp_in_size / tp + ffn) * ab / ew_bw,
            "kv_cache_write": 2 * kv * (ab + p.kv_bytes) / gemm_bw,
        }
        self._embed_per_row = 2 * hd * ab / gemm_bw      # gather + write, once per step
        self._final_norm_per_row = 2 * hd * ab / norm_bw  # once per step

        # Attention, per layer on this GPU.
        attn_peak = h.flops(_DTYPE_COMPUTE[p.dtype]) * e.attn_prefill_compute
        self._prefill_per_work = 4 * m.head_dim * (m.num_heads // tp) / attn_peak
        self._prefill_mem_per_token = (2 * q * ab + 2 * kv * p.kv_bytes) / gemm_bw
        self._prefill_mem_per_ctx = 2 * kv * p.kv_bytes / gemm_bw
        # Decode attention streams K and V of every context token once (bandwidth-bound).
        self._decode_per_ctx = 2 * kv * p.kv_bytes / gemm_bw
        self._decode_per_query = 2 * q * ab / gemm_bw
        self._decode_flops_per_ctx = 4 * m.head_dim * (m.num_heads // tp) / attn_peak

        # Collectives. A group that does not fit in one node talks over the network.
        tp_link = h.interconnect_bandwidth if tp <= h.gpus_per_node else h.network_bandwidth
        pp_link = (h.interconnect_bandwidth if tp * pp <= h.gpus_per_node
                   else h.network_bandwidth)
        self._ar_fixed = e.allreduce_latency_s if tp > 1 else 0.0
        self._ar_per_byte = (2 * (tp - 1) / tp / (tp_link * e.allreduce_bandwidth)
                             if tp > 1 else 0.0)
        self._p2p_per_byte = 1 / (pp_link * e.p2p_bandwidth)
        self._swap_per_token = (kv_bytes_per_token(m, p, tp, pp)
                                / (h.pcie_bandwidth * e.pcie_efficiency))

        self._build_row_function()

    # -- per-operator primitives (per layer, per GPU, seconds) ------------------------------
    def gemm_time(self, op: str, num_tokens: float) -> float:
        """One layer's ``qkv_proj``, ``o_proj``, ``mlp_up`` or ``mlp_down`` on ``num_tokens``
        rows."""
        return self._gemms[op].time(num_tokens, self.efficiency.gemm_latency_s)

    def elementwise_time(self, op: str, num_tokens: float) -> float:
        """One call of a bandwidth-bound layer kernel (``LAYER_ELEMENTWISE``)."""
        per_row = self._elementwise[op]
        if per_row is None or num_tokens <= 0:
            return 0.0
        return per_row * num_tokens + self.efficiency.elementwise_latency_s

    def attn_prefill_time(self, num_tokens: float, attention_work: float,
                          context_tokens: float = 0) -> float:
        """One layer's prefill attention over query-key pairs ``attention_work`` (causal
        pairs, ``StepShape.prefill_attention_work``) reading ``context_tokens`` cached KV."""
        if num_tokens <= 0:
            return 0.0
        mem = (self._prefill_mem_per_token * num_tokens
               + self._prefill_mem_per_ctx * context_tokens)
        flops = self._prefill_per_work * attention_work
        return max(flops, mem) + self.efficiency.attention_latency_s

    def attn_decode_time(self, num_seqs: float, context_tokens: float,
                         num_spec_tokens: float = 0) -> float:
        """One layer's decode attention: streams ``context_tokens`` of KV (summed over
        sequences) once; each of the 1 + k query tokens per sequence does the FLOPs."""
        if num_seqs <= 0:
            return 0.0
        queries = num_seqs + num_spec_tokens
        mem = self._decode_per_ctx * context_tokens + self._decode_per_query * queries
        flops = self._decode_flops_per_ctx * context_tokens * queries / num_seqs
        return max(mem, flops) + self.efficiency.attention_latency_s

    def allreduce_time(self, nbytes: float) -> float:
        """One ring all-reduce over the tensor-parallel group."""
        if self.tensor_parallel_size == 1 or nbytes <= 0:
            return 0.0
        return self._ar_fixed + self._ar_per_byte * nbytes

    def send_recv_time(self, nbytes: float) -> float:
        """One point-to-point transfer between pipeline stages."""
        if nbytes <= 0:
            return 0.0
        return self.efficiency.p2p_latency_s + self._p2p_per_byte * nbytes

    def overhead_time(self, batch_size: int) -> float:
        e = self.efficiency
        return e.cpu_step_s + e.cpu_per_seq_s * batch_size

    # -- the fast path --------------------------------------------------------------------
    def _build_row_function(self) -> None:
        """Fold every cost that depends only on the GEMM rows T into ``A[k] + B[k] * T``
        on segments split at the GEMMs' memory->compute breakpoints."""
        m, e = self.model, self.efficiency
        layers, tp, pp = m.num_layers, self.tensor_parallel_size, self.pipeline_parallel_size
        act_bytes = self.precision.act_bytes
        ew_lat = e.elementwise_latency_s

        # Linear part: a + b * T.
        ew = [v for v in self._elementwise.values() if v is not None]
        n_ew_kernels = len(ew) + 1  # residual_add runs twice
        b = layers * (sum(ew) + self._elementwise["residual_add"])
        a = layers * n_ew_kernels * ew_lat
        b += self._embed_per_row + self._final_norm_per_row
        a += 2 * ew_lat
        if tp > 1:
            row_bytes = m.hidden_size * act_bytes
            a += 2 * layers * self._ar_fixed
            b += 2 * layers * self._ar_per_byte * row_bytes
        if pp > 1:
            # Hidden state and residual cross each stage boundary.
            row_bytes = m.hidden_size * act_bytes
            a += (pp - 1) * 2 * e.p2p_latency_s
            b += (pp - 1) * 2 * self._p2p_per_byte * row_bytes
        a += layers * len(self._gemms) * e.gemm_latency_s

        gemms = sorted(self._gemms.values(), key=lambda g: g.breakpoint)
        # Below every breakpoint all GEMMs stream weights.
        a_k = a + layers * sum(g.weight_s for g in gemms)
        b_k = b + layers * sum(g.memory_per_row for g in gemms)
        breaks, A, B = [], [a_k], [b_k]
        for g in gemms:
            if math.isinf(g.breakpoint):
                continue
            a_k -= layers * g.weight_s
            b_k += layers * (g.compute_per_row - g.memory_per_row)
            breaks.append(g.breakpoint)
            A.append(a_k)
            B.append(b_k)
        self._breaks, self._A, self._B = breaks, A, B
        self._np_breaks, self._np_A, self._np_B = np.array(breaks), np.array(A), np.array(B)

    def _rows_time(self, rows: float) -> float:
        k = bisect_right(self._breaks, rows)
        return self._A[k] + self._B[k] * rows

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape``, CPU overhead included."""
        s = shape
        decode = s.num_decode_seqs
        spec = s.num_spec_tokens
        rows = s.num_prefill_tokens + decode + spec + s.num_padding_tokens
        t = 0.0
        if rows > 0:
            k = bisect_right(self._breaks, rows)
            t = self._A[k] + self._B[k] * rows
            layers = self.model.num_layers
            if s.num_prefill_tokens > 0:
                c = self._prefill_per_work * s.prefill_attention_work
                mm = (self._prefill_mem_per_token * s.num_prefill_tokens
                      + self._prefill_mem_per_ctx * s.prefill_context_tokens)
                t += layers * ((c if c > mm else mm) + self.efficiency.attention_latency_s)
            if decode > 0:
                ctx = s.decode_context_tokens
                mm = self._decode_per_ctx * ctx + self._decode_per_query * (decode + spec)
                c = self._decode_flops_per_ctx * ctx * (decode + spec) / decode
                t += layers * ((c if c > mm else mm) + self.efficiency.attention_latency_s)
            logits = s.num_prefill_seqs + decode + spec
            if logits > 0:
                g = self._lm_head
                c = g.compute_per_row * logits
                mm = g.weight_s + g.memory_per_row * logits
                t += ((c if c > mm else mm) + self._sample_per_row * logits
                      + self._head_latency)
        elif s.num_swap_tokens <= 0:
            return 0.0
        if s.num_swap_tokens > 0:
            t += self._swap_per_token * s.num_swap_tokens + self.efficiency.elementwise_latency_s
        return t + self.efficiency.cpu_step_s + self.efficiency.cpu_per_seq_s * (
            s.num_prefill_seqs + decode)

    def step_times(self, num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=0,
                   num_spec_tokens=0, decode_context_tokens=0, prefill_context_tokens=0,
                   prefill_attention_work=0, num_swap_tokens=0, num_padding_tokens=0,
                   num_spec_seqs=0) -> np.ndarray:
        """Vectorised ``step_time``: each argument an array (or scalar) of the StepShape
        field of the same name; returns seconds per element. (``num_spec_seqs`` is accepted
        and not priced: the roofline prices verification by its tokens.)"""
        P = np.asarray(num_prefill_tokens, dtype=float)
        PS = np.asarray(num_prefill_seqs, dtype=float)
        D = np.asarray(num_decode_seqs, dtype=float)
        K = np.asarray(num_spec_tokens, dtype=float)
        DC = np.asarray(decode_context_tokens, dtype=float)
        PC = np.asarray(prefill_context_tokens, dtype=float)
        W = np.asarray(prefill_attention_work, dtype=float)
        S = np.asarray(num_swap_tokens, dtype=float)
        PAD = np.asarray(num_padding_tokens, dtype=float)
        P, PS, D, K, DC, PC, W, S, PAD = np.broadcast_arrays(P, PS, D, K, DC, PC, W, S, PAD)
        e, layers = self.efficiency, self.model.num_layers
        rows = P + D + K + PAD
        k = np.searchsorted(self._np_breaks, rows, side="right")
        t = np.where(rows > 0, self._np_A[k] + self._np_B[k] * rows, 0.0)
        pre = np.maximum(self._prefill_per_work * W,
                         self._prefill_mem_per_token * P + self._prefill_mem_per_ctx * PC)
        t += np.where(P > 0, layers * (pre + e.attention_latency_s), 0.0)
        q = D + K
        with np.errstate(divide="ignore", invalid="ignore"):
            dec = np.maximum(self._decode_per_ctx * DC + self._decode_per_query * q,
                             self._decode_flops_per_ctx * DC * q / np.maximum(D, 1))
        t += np.where(D > 0, layers * (dec + e.attention_latency_s), 0.0)
        logits = PS + D + K
        g = self._lm_head
        head = (np.maximum(g.compute_per_row * logits, g.weight_s + g.memory_per_row * logits)
                + self._sample_per_row * logits + self._head_latency)
        t += np.where((logits > 0) & (rows > 0), head, 0.0)
        t += np.where(S > 0, self._swap_per_token * S + e.elementwise_latency_s, 0.0)
        busy = (rows > 0) | (S > 0)
        return np.where(busy, t + e.cpu_step_s + e.cpu_per_seq_s * (PS + D), 0.0)

    def decode_window_times(self, shape: StepShape, num_steps: int,
                            context_growth: Optional[int] = None) -> np.ndarray:
        """Seconds of ``num_steps`` consecutive steps of ``shape`` whose decode context grows
        by ``context_growth`` tokens a step (default: one per decode sequence), for the
        engine's bulk-decode path. Element i equals ``step_time`` of the i-th step exactly
        (same float operations in the same order)."""
        growth = shape.num_decode_seqs if context_growth is None else context_growth
        ctx = shape.decode_context_tokens + growth * np.arange(num_steps, dtype=float)
        s = shape
        return self.step_times(s.num_prefill_tokens, s.num_prefill_seqs, s.num_decode_seqs,
                               s.num_spec_tokens, ctx, s.prefill_context_tokens,
                               s.prefill_attention_work, s.num_swap_tokens,
                               s.num_padding_tokens)

    # -- explanation ------------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per operator family (``BREAKDOWN_KEYS``); sums to ``step_time(shape)``."""
        s, m, e = shape, self.model, self.efficiency
        L = m.num_layers
        rows = s.num_tokens
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        if s.is_empty:
            return out
        if rows > 0:
            out["qkv_proj"] = L * self.gemm_time("qkv_proj", rows)
            out["o_proj"] = L * self.gemm_time("o_proj", rows)
            out["mlp"] = L * (self.gemm_time("mlp_up", rows) + self.gemm_time("mlp_down", rows)
                              + self.elementwise_time("mlp_act", rows))
            ew = sum(self.elementwise_time(op, rows) for op in LAYER_ELEMENTWISE
                     if op != "mlp_act") + self.elementwise_time("residual_add", rows)
            out["norms_elementwise"] = (L * ew + self._embed_per_row * rows
                                        + self._final_norm_per_row * rows
                                        + 2 * e.elementwise_latency_s)
            out["attn_prefill"] = L * self.attn_prefill_time(
                s.num_prefill_tokens, s.prefill_attention_work, s.prefill_context_tokens)
            out["attn_decode"] = L * self.attn_decode_time(
                s.num_decode_seqs, s.decode_context_tokens, s.num_spec_tokens)
            logits = s.num_prefill_seqs + s.num_decode_seqs + s.num_spec_tokens
            if logits > 0:
                out["lm_head"] = (self._lm_head.time(logits, e.gemm_latency_s)
                                  + self._sample_per_row * logits + e.elementwise_latency_s)
            row_bytes = m.hidden_size * self.precision.act_bytes * rows
            out["tp_allreduce"] = 2 * L * self.allreduce_time(row_bytes)
            out["pp_send_recv"] = (self.pipeline_parallel_size - 1) * 2 * self.send_recv_time(
                row_bytes)
        if s.num_swap_tokens > 0:
            out["swap"] = self._swap_per_token * s.num_swap_tokens + e.elementwise_latency_s
        out["overhead"] = self.overhead_time(s.batch_size)
        return out

    def __repr__(self) -> str:
        p = self.precision
        return (f"RooflineCostModel({self.model.name}, {self.hardware.name}, {p.dtype}, "
                f"weights={p.weight_dtype}, kv={p.kv_cache_dtype}, "
                f"tp={self.tensor_parallel_size}, pp={self.pipeline_parallel_size})")
