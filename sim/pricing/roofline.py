"""The roofline step pricer: step latency from the hardware and model catalogs alone.

Why a roofline: it needs only public numbers (datasheet peaks, model shapes), so it prices any
GPU x model x dtype x parallelism a user asks about, and each term is a physical quantity a
serving engineer can check. What real kernels achieve is a fraction of the peaks; those
fractions and the fixed latencies are the few constants of ``Efficiency``, fitted per GPU
(``sim.pricing.efficiency``): to real A100 operator timings (Vidur's profiles;
``benchmarks/cost_model_vs_vidur.py``) and to each newer GPU's measured operator tables
(``benchmarks/roofline_vs_tables.py``); ``docs/cost_model.md`` explains every formula.

Every operator costs ``max(FLOPs / (peak x eff), bytes / (bandwidth x eff)) + latency``.
``price`` is on the simulator's hot path, so ``__init__`` folds everything that depends only
on the number of GEMM rows into one piecewise-linear function (a breakpoint where each GEMM
turns from memory- to compute-bound) and a step costs a bisect and a few float ops. The rest
of a step (attention, LM head, swap, CPU overhead) is written once, in ``_formula``, and
evaluated on Python floats (``price``) or NumPy arrays (``price_columns``) with the same
float operations, so both give the same bits.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union, cast

import numpy as np

from sim.catalog.dtypes import (DTYPE_COMPUTE, Precision, gemm_quantized, quantized_groups,
                                resolve_precision, scope_note)
from sim.catalog.engines import EngineRelease
from sim.catalog.hardware import HardwareSpec, get_hardware
from sim.catalog.models import ModelSpec, get_model
from sim.memory_plan import check_parallel, kv_bytes_per_token, kv_heads_per_gpu
from sim.policies.step import StepShape
from sim.pricing.base import Max, ShapeColumns, StepPricer, register_pricer
from sim.pricing.experts import ExpertLayer
from sim.pricing.efficiency import (A100_EFFICIENCY, Efficiency, efficiency_error,  # noqa: F401 (re-exported)
                                    efficiency_for, efficiency_source)
from sim.pricing.features import sampled_rows


#: Tokens per chunk of the chunked delta rule (FLA's ``chunk_gated_delta_rule``).
GDN_CHUNK = 64


BREAKDOWN_KEYS: tuple[str, ...] = (
    "qkv_proj", "attn_prefill", "attn_decode", "o_proj", "mlp", "norms_elementwise",
    "lm_head", "tp_allreduce", "pp_send_recv", "swap", "overhead", "ep_all_to_all",
)

LAYER_GEMMS: tuple[str, ...] = ("qkv_proj", "o_proj", "mlp_up", "mlp_down")
#: Bytes per row of the q/k variance a cross-head q/k norm all-reduces under TP: two fp32.
QK_VARIANCE_BYTES = 8
LAYER_ELEMENTWISE: tuple[str, ...] = (
    "input_norm", "post_attn_norm", "rope", "residual_add", "mlp_act", "kv_cache_write",
    "qk_norm",
)


@dataclass(frozen=True)
class _Gemm:
    """One GEMM on one GPU: seconds per row of compute, fixed weight-read seconds, seconds
    per row of activation traffic; and the kernel before it that quantises its input (a GEMM
    on FP8/INT8/FP4 tensor cores with dynamic activation scales: vLLM's ``scaled_fp8_quant``),
    seconds per row and fixed, 0 for a 16-bit GEMM."""

    compute_per_row: float
    weight_s: float
    memory_per_row: float
    quant_per_row: float = 0.0
    quant_s: float = 0.0

    def time(self, rows: float, latency: float) -> float:
        if rows <= 0:
            return 0.0
        return self.seconds(rows, latency)

    def seconds(self, rows: Any, latency: float, mx: Max = max) -> Any:
        """``time`` for rows > 0, on floats (``mx=max``) or arrays (``np.maximum``)."""
        return (mx(self.compute_per_row * rows, self.weight_s + self.memory_per_row * rows)
                + self.quant_per_row * rows + self.quant_s + latency)

    @property
    def breakpoint(self) -> float:
        """Rows at which the GEMM turns compute-bound."""
        slope = self.compute_per_row - self.memory_per_row
        return self.weight_s / slope if slope > 0 else math.inf


def gemm_terms(k: Any, n: Any, rate: float, weight_bytes: float, act_bytes: float,
               bandwidth: float, quant_s: float = 0.0) -> _Gemm:
    """A GEMM of ``k`` inputs x ``n`` outputs at ``rate`` FLOP/s and ``bandwidth`` bytes/s:
    2kn FLOPs a row, the k x n weights read once, each row's input and output read and written.
    ``quant_s`` > 0: its input is quantised to one byte an element first (a kernel of that fixed
    cost reading the 16-bit row and writing the quantised one). Floats or arrays:
    ``benchmarks/roofline_vs_tables.py`` prices table rows with it."""
    quant_per_row = k * (act_bytes + 1) / bandwidth if quant_s > 0 else 0.0
    return _Gemm(2 * k * n / rate, k * n * weight_bytes / bandwidth, (k + n) * act_bytes / bandwidth,
                 quant_per_row, quant_s)


def _own_rate(precision: Precision) -> bool:
    """Whether the weight format's GEMMs run on its own tensor cores (FP8, INT8, FP4), not
    dequantised into 16-bit ones (W4A16, FP8 on Ampere)."""
    return precision.compute != DTYPE_COMPUTE[precision.dtype]


def quantized_gemm_rate(hw: HardwareSpec, precision: Precision, e: Efficiency) -> float:
    """FLOP/s of a GEMM in the weight format: on its own tensor-core rate at
    ``quantized_gemm_compute`` of that peak (0: ``gemm_compute``), else in 16-bit at
    ``gemm_compute``."""
    own = _own_rate(precision)
    return hw.flops(precision.compute) * ((e.quantized_gemm_compute or e.gemm_compute) if own
                                          else e.gemm_compute)


def quantization_seconds(precision: Precision, e: Efficiency) -> float:
    """Fixed seconds of the activation-quantisation kernel before each GEMM that runs on the
    weight format's own tensor-core rate (``quantized_gemm_latency_s``); 0 for others."""
    return e.quantized_gemm_latency_s if _own_rate(precision) else 0.0


@register_pricer
class RooflineCostModel(StepPricer):
    """Step time of one replica (``tensor_parallel_size x pipeline_parallel_size`` GPUs).

    A step is the latency of one batch through all layers: with one batch in flight a
    pipeline's stages run one after another, so pipeline parallelism adds send/recv time and
    leaves ``(pp - 1) / pp`` of each GPU idle (the bubble) rather than speeding a step up.
    """

    kind = "roofline"

    def __init__(self, model: Union[str, ModelSpec], hw: Union[str, HardwareSpec],
                 dtype: str = "float16", tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                 weight_dtype: Optional[str] = None,
                 efficiency: Optional[Efficiency] = None,
                 expert_parallel_size: int = 1, data_parallel_size: int = 1,
                 expert_tensor_parallel_size: Optional[int] = None,
                 quant_scope: str = "auto", engine: Optional[EngineRelease] = None,
                 speculative: bool = False, async_scheduling: Optional[bool] = None) -> None:
        """``quant_scope``: which linear layers the weight format covers (``quantization.scope``).
        ``expert_parallel_size`` > 1: a MoE's experts spread whole over that many groups of
        ``expert_tensor_parallel_size`` GPUs (default ``tp x dp / ep``: 1, pure EP; more, SGLang's
        MoE TP x EP, each expert split over its group), each GPU's tokens (and those of the other
        ``data_parallel_size - 1`` attention ranks, taken as loaded alike) sent to their experts
        and back by all-to-all. ``efficiency``: the fitted constants, by default this GPU's
        (``sim.pricing.efficiency.efficiency_for``). ``engine``: the serving release, whose
        engine-core CPU time per step (``EngineRelease.cpu_step_s``, ``cpu_per_seq_s``) and
        asynchronous scheduling (``async_scheduling``, None: the release's default with or
        without ``speculative`` decoding) the step pays, as the operator-table pricer does;
        without one, ``efficiency``'s CPU constants (Vidur's, vLLM V0) add to every step."""
        self.model = m = get_model(model)
        self.hardware = h = get_hardware(hw)
        self.tensor_parallel_size = tp = tensor_parallel_size
        self.pipeline_parallel_size = pp = pipeline_parallel_size
        check_parallel(m, tp, pp)
        self.precision = p = resolve_precision(h, dtype, weight_dtype, kv_cache_dtype, quant_scope)
        self.efficiency = e = efficiency if efficiency is not None else efficiency_for(h)
        #: Whether the constants are this GPU's fitted ones (``known_error`` and ``describe``
        #: speak for those only), not a caller's.
        self._own_constants = e is efficiency_for(h)
        #: The engine core's CPU seconds per step and per sequence, and whether they overlap
        #: the GPU's work (a step then lasts the longer of the two) or add to it.
        self.engine = engine
        self._cpu_step, self._cpu_seq = ((engine.cpu_step_s, engine.cpu_per_seq_s) if engine is not None
                                         else (e.cpu_step_s, e.cpu_per_seq_s))
        if async_scheduling is None:
            async_scheduling = engine.async_default(speculative) if engine is not None else False
        self.async_scheduling = async_scheduling

        ab, hd = p.act_bytes, m.hidden_size
        peak = quantized_gemm_rate(h, p, e)
        bw = h.memory_bandwidth
        gemm_bw = bw * e.memory
        q = m.q_size // tp
        kv = kv_heads_per_gpu(m, tp) * m.head_dim
        ffn = m.intermediate_size / tp

        # The checkpoint's quantisation scope (``quantization.scope``, ``dtypes.quantized_groups``)
        # leaves some groups in the activation dtype, at its rate: gpt-oss's MXFP4 and
        # Kimi-K2.5's INT4 quantise the routed experts only, NVIDIA's NVFP4 MoE exports keep
        # attention in BF16.
        quantized = quantized_groups(p, m.is_moe)
        act_peak = h.flops(DTYPE_COMPUTE[p.dtype]) * e.gemm_compute
        expert_wb = p.weight_bytes if "experts" in quantized else float(ab)

        quant_s = quantization_seconds(p, e)

        def gemm(k: float, n: float, op: str) -> _Gemm:
            """GEMM ``op`` of (k, n) in the format where the scope quantises it, else 16-bit."""
            if gemm_quantized(op, p, m.is_moe):
                return gemm_terms(k, n, peak, p.weight_bytes, ab, gemm_bw, quant_s)
            return gemm_terms(k, n, act_peak, ab, ab, gemm_bw)

        q_out = (2 if m.attn_output_gate else 1) * q  # Qwen3.5: the output gate beside q
        self._gemms = {
            "qkv_proj": gemm(hd, q_out + 2 * kv, "qkv_proj"),
            "o_proj": gemm(q, hd, "o_proj"),
            "mlp_up": gemm(hd, m.mlp_in_size / tp, "mlp_up"),
            "mlp_down": gemm(ffn, hd, "mlp_down"),
        }
        #: Layers each GEMM runs in (all of them, but for dense-first MoEs and their experts).
        self._gemm_layers = dict.fromkeys(self._gemms, m.num_layers)
        if m.is_hybrid_linear:
            # Gated DeltaNet layers' projections (q, k, v, z; b, a; out) in place of attention's.
            self._gemms["gdn_in_proj"] = gemm(hd, m.linear_qkvz_size / tp, "gdn_in_proj")
            self._gemms["gdn_ba_proj"] = gemm(hd, 2 * m.linear_num_value_heads / tp, "gdn_ba_proj")
            self._gemms["gdn_out_proj"] = gemm(m.linear_value_size / tp, hd, "gdn_out_proj")
            for op in ("gdn_in_proj", "gdn_ba_proj", "gdn_out_proj"):
                self._gemm_layers[op] = m.linear_attention_layers
            self._gemm_layers["qkv_proj"] = self._gemm_layers["o_proj"] = m.num_attention_layers
            # The kernels: the recurrent state (value heads x key dim x value dim) read and
            # written once per decoded token, or once per 64-token chunk of a prompt (the
            # chunked delta rule), plus the convolution window; FLOPs ~ 8 dk dv per token and
            # head for the state update and readout, and the chunk's 64 x 64 intra-chunk terms.
            ssm, conv = m.recurrent_state_elements(tp)
            state = ssm * m.linear_state_bytes + conv * ab
            heads = m.linear_num_value_heads / tp
            dk, dv = m.linear_key_head_dim, m.linear_value_head_dim
            io = m.linear_qkvz_size / tp * ab  # q, k, v, z in; o out
            attn_rate = h.flops(DTYPE_COMPUTE[p.dtype]) * e.attn_prefill_compute
            self._gdn_decode_per_seq = 2 * state / gemm_bw
            self._gdn_decode_per_row = io / gemm_bw
            self._gdn_prefill_per_token = max(
                heads * (8 * dk * dv + 2 * GDN_CHUNK * (dk + dv)) / attn_rate,
                (io + 2 * state / GDN_CHUNK) / gemm_bw)
            self._gdn_prefill_per_seq = 2 * state / gemm_bw
        if m.is_mla:
            # MLA (vLLM's DeepSeek path): q down (replicated) and up (head-sharded), the latent
            # down-projection (replicated), the per-head K/V up-projection, which decode folds
            # into the query and output (the same weights and FLOPs per token), the output.
            heads = m.num_heads // tp
            del self._gemms["qkv_proj"], self._gemm_layers["qkv_proj"]
            attn = {"q_proj": gemm(hd, heads * m.head_dim, "q_proj")} if not m.q_lora_rank else {
                "q_a_proj": gemm(hd, m.q_lora_rank, "q_a_proj"),
                "q_b_proj": gemm(m.q_lora_rank, heads * m.head_dim, "q_b_proj")}
            attn["kv_a_proj"] = gemm(hd, m.kv_lora_rank + m.qk_rope_head_dim, "kv_a_proj")
            attn["kv_b_proj"] = gemm(m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim), "kv_b_proj")
            attn["o_proj"] = gemm(heads * m.v_head_dim, hd, "o_proj")
            self._gemms.update(attn)
            self._gemm_layers.update(dict.fromkeys(attn, m.num_layers))
        #: A mixture of experts prices its MLP apart (``sim.pricing.experts``): the weights read
        #: depend on how many experts the step's tokens touch, not only on the row count.
        self._experts: Optional[ExpertLayer] = None
        if m.is_moe:
            k_top, up = m.num_experts_per_tok, m.mlp_in_size / tp
            moe_layers = m.num_moe_layers
            if m.num_dense_layers:  # DeepSeek-V3's first layers: a dense MLP of their own width
                dense = m.dense_intermediate_size / tp
                self._gemms["mlp_up"] = gemm(hd, (2 if m.gated_mlp else 1) * dense, "mlp_up")
                self._gemms["mlp_down"] = gemm(dense, hd, "mlp_down")
                self._gemm_layers["mlp_up"] = self._gemm_layers["mlp_down"] = m.num_dense_layers
            else:
                del self._gemms["mlp_up"], self._gemms["mlp_down"]
                del self._gemm_layers["mlp_up"], self._gemm_layers["mlp_down"]
            if m.num_shared_experts:  # every token's shared expert(s): a dense MLP per layer
                shared = m.num_shared_experts
                self._gemms["shared_up"] = gemm(hd, shared * up, "shared_up")
                self._gemms["shared_down"] = gemm(shared * ffn, hd, "shared_down")
                self._gemm_layers["shared_up"] = self._gemm_layers["shared_down"] = moe_layers
            self._gemms["router"] = gemm(hd, m.num_experts, "router")
            if m.router_fp32 and h.supports("fp32"):
                # An fp32 gate (``ModelSpec.router_fp32``): an SGEMM on CUDA cores (TF32 is off
                # for fp32 matmuls in PyTorch by default), fp32 weights, and the hidden states
                # cast to fp32 first (read 16-bit, write and re-read fp32).
                fp32_peak = h.flops("fp32") * e.gemm_compute
                self._gemms["router"] = _Gemm(2 * hd * m.num_experts / fp32_peak,
                                              hd * m.num_experts * 4 / gemm_bw,
                                              (hd * (ab + 8) + m.num_experts * 4) / gemm_bw)
            self._gemm_layers["router"] = moe_layers
            ep, dp = expert_parallel_size, data_parallel_size
            # Up and down GEMMs, each after its quantisation kernel where the experts run on the
            # format's own rate (its fixed part: the per-row bytes are left in the experts' traffic).
            # The fused-MoE call's own constants where fitted (``Efficiency.moe_*``): its
            # grouped GEMMs reach a fraction of the dense rate, each routed row pays some columns
            # beyond its expert's (what makes narrow TP shards slow), its weights stream at their
            # own rate, each touched expert adds a fixed cost.
            moe_peak = peak * e.moe_compute_ratio
            moe_bw = bw * (e.moe_memory or e.memory)
            expert_latency = ((e.moe_latency_s or 2 * e.gemm_latency_s)
                              + 2 * (quant_s if "experts" in quantized else 0.0))
            if ep <= 1 and dp <= 1:
                self._experts = ExpertLayer(
                    compute_per_row=2 * k_top * hd * (up + ffn + e.moe_row_columns) / moe_peak,
                    weight_per_expert=hd * (up + ffn) * expert_wb / moe_bw + e.moe_expert_latency_s,
                    memory_per_row=k_top * (2 * hd + up + ffn) * ab / moe_bw,
                    latency=expert_latency, num_experts=m.num_experts, top_k=k_top)
            else:
                # Whole experts, E / ep of them in this GPU's group, each split over the etp
                # GPUs of the group (DP without EP: one group, every expert over all tp x dp
                # GPUs); the dp ranks' tokens together are routed over all E, so each GPU
                # computes 1 / etp of k x dp / ep expert rows per row of its own.
                ep = max(ep, 1)
                etp = expert_tensor_parallel_size or max(tp * dp // ep, 1)
                up_all, ffn_all, per = m.mlp_in_size / etp, m.intermediate_size / etp, dp / ep
                self._experts = ExpertLayer(
                    compute_per_row=(2 * k_top * hd * (up_all + ffn_all + e.moe_row_columns)
                                     / moe_peak * per),
                    weight_per_expert=(hd * (up_all + ffn_all) * expert_wb / moe_bw
                                       + e.moe_expert_latency_s),
                    memory_per_row=k_top * (2 * hd + up_all + ffn_all) * ab / moe_bw * per,
                    latency=expert_latency, num_experts=m.num_experts, top_k=k_top,
                    global_rows=dp, local_share=1.0 / ep)
                # Dispatch and combine: under EP each token's hidden state to its k experts
                # and back, (ep - 1) / ep of them on other GPUs; without EP the other dp - 1
                # ranks' hidden states gathered in and the partial outputs scattered back.
                group = ep if ep > 1 else tp * dp
                link = h.interconnect_bandwidth if group <= h.gpus_per_node else h.network_bandwidth
                self._a2a_fixed = 2 * e.allreduce_latency_s
                moved = k_top * (ep - 1) / ep if ep > 1 else dp - 1
                self._a2a_per_row = 2 * moved * hd * ab / (link * e.allreduce_bandwidth)
        self.expert_parallel_size = expert_parallel_size if m.is_moe else 1
        #: Whether each MoE layer exchanges tokens between GPUs (EP, or DP attention).
        self._dispatch = m.is_moe and (expert_parallel_size > 1 or data_parallel_size > 1)
        self.data_parallel_size = data_parallel_size
        # LM head: 16-bit weights, 16-bit compute, vocab-parallel over tp.
        head_peak = h.flops(DTYPE_COMPUTE[p.dtype]) * e.gemm_compute
        vocab = m.vocab_size / tp
        self._lm_head = gemm_terms(hd, vocab, head_peak, ab, ab, gemm_bw)
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
            "mlp_act": (m.mlp_in_size / tp + ffn) * ab / ew_bw * max(m.num_experts_per_tok, 1),
            "kv_cache_write": 2 * kv * (ab + p.kv_bytes) / gemm_bw,
            # A q/k RMSNorm across all heads (MiniMax-M2) is its own kernel over this GPU's q
            # and k; per-head ones (Qwen3) are left in the norms (fused with rotary in vLLM).
            "qk_norm": 2 * (q + kv) * ab / norm_bw if m.qk_norm_across_heads else None,
        }
        if m.is_mla:
            # Rotary on the rope dims of every q head and the one shared key; the cache holds
            # the latent and that key.
            self._elementwise["rope"] = 2 * (m.num_heads // tp + 1) * m.qk_rope_head_dim * ab / ew_bw
            self._elementwise["kv_cache_write"] = m.kv_cache_width * (ab + p.kv_bytes) / gemm_bw
        if m.num_dense_layers and m.is_moe:
            # Activation per row averaged over the layers (the row function multiplies by all).
            dense = m.dense_intermediate_size / tp
            sparse = (m.mlp_in_size / tp + ffn) * (m.num_experts_per_tok + m.num_shared_experts)
            dense_act = ((2 if m.gated_mlp else 1) * dense + dense)
            self._elementwise["mlp_act"] = ((m.num_dense_layers * dense_act + m.num_moe_layers * sparse)
                                            / m.num_layers * ab / ew_bw)
        self._embed_per_row = 2 * hd * ab / gemm_bw      # gather + write, once per step
        self._final_norm_per_row = 2 * hd * ab / norm_bw  # once per step

        # Attention, per layer on this GPU.
        attn_peak = h.flops(DTYPE_COMPUTE[p.dtype]) * e.attn_prefill_compute
        # Per causal (query, key) pair: both matmuls' FLOPs on the tensor cores, and the
        # softmax's exponential of every head's score (``attn_score_s``).
        self._prefill_per_work = (4 * m.head_dim * (m.num_heads // tp) / attn_peak
                                  + e.attn_score_s * (m.num_heads // tp))
        #: Keys each prompt token computes beyond its causal pairs (FlashAttention's whole tiles).
        self._prefill_extra_keys = e.attn_prefill_extra_keys
        self._prefill_mem_per_token = (2 * q * ab + 2 * kv * p.kv_bytes) / gemm_bw
        self._prefill_mem_per_ctx = 2 * kv * p.kv_bytes / gemm_bw
        self._prefill_flops_per_ctx = 0.0
        # Decode attention streams K and V of every context token once (bandwidth-bound).
        self._decode_per_ctx = 2 * kv * p.kv_bytes / gemm_bw
        self._decode_per_query = 2 * q * ab / gemm_bw
        self._decode_flops_per_ctx = 4 * m.head_dim * (m.num_heads // tp) / attn_peak
        if m.is_mla:
            heads, width = m.num_heads // tp, m.kv_cache_width
            # Prefill (vLLM's MLA: not absorbed): attention over 192-wide q/k and 128-wide v
            # heads, after up-projecting the cached latent of the context (kv_b_proj over it).
            self._prefill_per_work = (2 * (m.head_dim + m.v_head_dim) * heads / attn_peak
                                      + e.attn_score_s * heads)
            self._prefill_mem_per_token = (2 * heads * m.head_dim * ab + width * p.kv_bytes) / gemm_bw
            self._prefill_mem_per_ctx = width * p.kv_bytes / gemm_bw
            self._prefill_flops_per_ctx = (2 * m.kv_lora_rank * heads
                                           * (m.qk_nope_head_dim + m.v_head_dim) / peak)
            # Decode (absorbed, FlashMLA-style): every head's query is a latent-space vector, so
            # each context token's latent is read once for all heads and costs 2 x (576 + 512)
            # FLOPs per head (scores over latent + rope, values over the latent).
            self._decode_per_ctx = width * p.kv_bytes / gemm_bw
            self._decode_per_query = 2 * heads * width * ab / gemm_bw
            self._decode_flops_per_ctx = 2 * (width + m.kv_lora_rank) * heads / attn_peak
        # DSA's lightning indexer (DeepSeek-V3.2, GLM-5), per layer: each (query, cached key)
        # pair costs 2 x heads x dim FP8 FLOPs (its ReLU-weighted logits; heads not split over
        # TP in SGLang's and vLLM's indexer), and every cached key's FP8 value and scale are read.
        self._indexer_flops = (2 * m.index_num_heads * m.index_head_dim
                               / (h.flops("fp8" if h.supports("fp8") else DTYPE_COMPUTE[p.dtype])
                                  * e.attn_prefill_compute)) if m.is_sparse_attention else 0.0
        self._indexer_bytes = m.indexer_cache_bytes / gemm_bw

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
        """One layer's ``qkv_proj``, ``o_proj``, ``mlp_up`` or ``mlp_down`` (a mixture of experts:
        ``router``; its experts are ``ExpertLayer``) on ``num_tokens`` rows."""
        return self._gemms[op].time(num_tokens, self.efficiency.gemm_latency_s)

    def elementwise_time(self, op: str, num_tokens: float) -> float:
        """One call of a bandwidth-bound layer kernel (``LAYER_ELEMENTWISE``)."""
        per_row = self._elementwise[op]
        if per_row is None or num_tokens <= 0:
            return 0.0
        return per_row * num_tokens + self.efficiency.elementwise_latency_s

    # The terms below take ``mx`` (a max) so that ``_formula`` evaluates them on Python floats
    # (``max``) and on NumPy arrays (``np.maximum``) with the same float operations; a
    # condition is a 0/1 factor (``x * True == x``, ``x * False == 0.0``), never a branch.
    def attn_prefill_time(self, num_tokens: Any, attention_work: Any, context_tokens: Any = 0,
                          mx: Max = max) -> Any:
        """One layer's prefill attention over query-key pairs ``attention_work`` (causal
        pairs, ``StepShape.prefill_attention_work``) reading ``context_tokens`` cached KV."""
        mem = (self._prefill_mem_per_token * num_tokens
               + self._prefill_mem_per_ctx * context_tokens)
        flops = self._prefill_per_work * (attention_work + self._prefill_extra_keys * num_tokens)
        if self._prefill_flops_per_ctx:  # MLA: up-project the context's latent first
            flops = flops + self._prefill_flops_per_ctx * context_tokens
        return (num_tokens > 0) * (mx(flops, mem) + self.efficiency.attention_latency_s)

    def attn_decode_time(self, num_seqs: Any, context_tokens: Any, num_spec_tokens: Any = 0,
                         mx: Max = max) -> Any:
        """One layer's decode attention: streams ``context_tokens`` of KV (summed over
        sequences) once; each of the 1 + k query tokens per sequence does the FLOPs."""
        queries = num_seqs + num_spec_tokens
        mem = self._decode_per_ctx * context_tokens + self._decode_per_query * queries
        flops = self._decode_flops_per_ctx * context_tokens * queries / mx(num_seqs, 1)
        return (num_seqs > 0) * (mx(mem, flops) + self.efficiency.attention_latency_s)

    def linear_attention_time(self, num_prefill_tokens: Any, num_prefill_seqs: Any,
                              num_decode_rows: Any) -> Any:
        """One linear-attention layer's kernels (convolution and delta rule, projections
        apart): ``num_prefill_tokens`` of ``num_prefill_seqs`` prompts through the chunked rule,
        ``num_decode_rows`` recurrent steps, each reading and writing its sequence's state."""
        lat = self.efficiency.attention_latency_s
        prefill = (num_prefill_tokens > 0) * (self._gdn_prefill_per_token * num_prefill_tokens
                                              + self._gdn_prefill_per_seq * num_prefill_seqs + lat)
        decode = (num_decode_rows > 0) * ((self._gdn_decode_per_seq + self._gdn_decode_per_row)
                                          * num_decode_rows + lat)
        return prefill + decode

    def lm_head_time(self, num_logits: Any, mx: Max = max) -> Any:
        """The LM head GEMM (vocab-parallel, 16-bit) and sampling over the full vocabulary for
        ``num_logits`` rows (one per sequence that samples, plus verified draft tokens)."""
        g = self._lm_head
        gemm = mx(g.compute_per_row * num_logits, g.weight_s + g.memory_per_row * num_logits)
        return (num_logits > 0) * (gemm + self._sample_per_row * num_logits + self._head_latency)

    def swap_time(self, num_swap_tokens: Any) -> Any:
        """KV of ``num_swap_tokens`` tokens over the host link (one copy kernel)."""
        return (num_swap_tokens > 0) * (self._swap_per_token * num_swap_tokens
                                        + self.efficiency.elementwise_latency_s)

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
        """The engine core's CPU seconds for a step of ``batch_size`` sequences."""
        return self._cpu_step + self._cpu_seq * batch_size

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
        b = layers * (sum(ew) + cast(float, self._elementwise["residual_add"]))  # never None
        a = layers * n_ew_kernels * ew_lat
        b += self._embed_per_row + self._final_norm_per_row
        a += 2 * ew_lat
        if tp > 1:
            row_bytes = m.hidden_size * act_bytes
            a += 2 * layers * self._ar_fixed
            b += 2 * layers * self._ar_per_byte * row_bytes
            if m.qk_norm_across_heads:
                # The q/k variance (two fp32 per row) all-reduced, then a second kernel.
                a += layers * (self._ar_fixed + ew_lat)
                b += layers * self._ar_per_byte * QK_VARIANCE_BYTES
        if pp > 1:
            # Hidden state and residual cross each stage boundary.
            row_bytes = m.hidden_size * act_bytes
            a += (pp - 1) * 2 * e.p2p_latency_s
            b += (pp - 1) * 2 * self._p2p_per_byte * row_bytes
        if self._dispatch:  # all-to-all (or DP gather) dispatch and combine per MoE layer
            a += m.num_moe_layers * self._a2a_fixed
            b += m.num_moe_layers * self._a2a_per_row
        # Every GEMM runs in ``_gemm_layers[name]`` layers: all of them, but the dense and
        # sparse MLPs of a dense-first MoE. Grouped by that count so that a model whose GEMMs
        # all run in every layer sums exactly as it always has.
        counts = self._gemm_layers
        groups = sorted(set(counts.values()), reverse=True)
        for c in groups:
            a += c * sum(1 for n in counts if counts[n] == c) * e.gemm_latency_s
        # Activation quantisation before quantised GEMMs, compute- or memory-bound alike.
        a += sum(counts[n] * g.quant_s for n, g in self._gemms.items())
        b += sum(counts[n] * g.quant_per_row for n, g in self._gemms.items())

        order = sorted(self._gemms, key=lambda n: self._gemms[n].breakpoint)
        gemms = [self._gemms[n] for n in order]
        # Below every breakpoint all GEMMs stream weights.
        a_k, b_k = a, b
        for c in groups:
            a_k = a_k + c * sum(self._gemms[n].weight_s for n in order if counts[n] == c)
            b_k = b_k + c * sum(self._gemms[n].memory_per_row for n in order if counts[n] == c)
        breaks, A, B = [], [a_k], [b_k]
        for n, g in zip(order, gemms):
            if math.isinf(g.breakpoint):
                continue
            a_k -= counts[n] * g.weight_s
            b_k += counts[n] * (g.compute_per_row - g.memory_per_row)
            breaks.append(g.breakpoint)
            A.append(a_k)
            B.append(b_k)
        self._breaks, self._A, self._B = breaks, A, B
        self._np_breaks, self._np_A, self._np_B = np.array(breaks), np.array(A), np.array(B)

    def _rows_time(self, rows: Any) -> float:
        """Everything that depends only on the GEMM rows (a Python number); 0 for no rows."""
        k = bisect_right(self._breaks, rows)
        return (rows > 0) * (self._A[k] + self._B[k] * rows)

    def _rows_time_array(self, rows: np.ndarray) -> np.ndarray:
        """``_rows_time`` of an array of row counts, with the same float operations."""
        k = np.searchsorted(self._np_breaks, rows, side="right")
        return (rows > 0) * (self._np_A[k] + self._np_B[k] * rows)

    # -- the step price, written once -----------------------------------------------------
    def _formula(self, s: Any, rows_time: Callable[[Any], Any], mx: Max,
                 parts: Optional[dict] = None) -> Any:
        """Seconds of the step(s) ``s``: a ``StepShape`` (with ``rows_time=self._rows_time``,
        ``mx=max``) or a ``ShapeColumns`` (``self._rows_time_array``, ``np.maximum``). The sum
        runs in one fixed order; terms that do not apply add an exact 0.0. ``parts``, when
        given, receives the attention, LM head and swap terms (for ``breakdown``)."""
        layers = self.model.num_attention_layers
        prefill_tokens, decode, spec = s.num_prefill_tokens, s.num_decode_seqs, s.num_spec_tokens
        rows = prefill_tokens + decode + spec + s.num_padding_tokens
        ls = self.model.sliding_window_layers
        k = self.model.index_topk
        if k:
            # DeepSeek sparse attention: each query attends to at most ``index_topk`` tokens
            # (bounded as the sliding window's sums are), while the indexer scores every cached
            # token for every query (``_indexer_*``).
            prefill = layers * (
                self.attn_prefill_time(prefill_tokens, -mx(-s.prefill_attention_work, -prefill_tokens * k),
                                       -mx(-s.prefill_context_tokens, -s.num_prefill_seqs * k), mx)
                + (prefill_tokens > 0) * mx(self._indexer_flops * s.prefill_attention_work,
                                            self._indexer_bytes * (prefill_tokens + s.prefill_context_tokens)))
            attn_decode = layers * (
                self.attn_decode_time(decode, -mx(-s.decode_context_tokens, -decode * k), spec, mx)
                + (decode > 0) * mx(self._indexer_flops * s.decode_context_tokens * (decode + spec) / mx(decode, 1),
                                    self._indexer_bytes * s.decode_context_tokens))
        elif not ls:
            prefill = layers * self.attn_prefill_time(prefill_tokens, s.prefill_attention_work,
                                                      s.prefill_context_tokens, mx)
            attn_decode = layers * self.attn_decode_time(decode, s.decode_context_tokens, spec, mx)
        else:
            # A hybrid model's sliding-window layers see at most the window: each decode reads
            # min(context, window) (the summed form bounds it, exact once contexts exceed the
            # window), each prefill token attends to at most the window.
            lf, w = layers - ls, self.model.sliding_window
            prefill = (lf * self.attn_prefill_time(prefill_tokens, s.prefill_attention_work,
                                                   s.prefill_context_tokens, mx)
                       + ls * self.attn_prefill_time(
                           prefill_tokens, -mx(-s.prefill_attention_work, -prefill_tokens * w),
                           -mx(-s.prefill_context_tokens, -s.num_prefill_seqs * w), mx))
            attn_decode = (lf * self.attn_decode_time(decode, s.decode_context_tokens, spec, mx)
                           + ls * self.attn_decode_time(
                               decode, -mx(-s.decode_context_tokens, -decode * w), spec, mx))
        head = (rows > 0) * self.lm_head_time(sampled_rows(s), mx)
        swap = self.swap_time(s.num_swap_tokens)
        if parts is not None:
            parts.update(attn_prefill=prefill, attn_decode=attn_decode, lm_head=head, swap=swap)
        if self.model.is_hybrid_linear:  # folded into the prefill term (an exact 0.0 otherwise)
            linear = self.model.linear_attention_layers * self.linear_attention_time(
                prefill_tokens, s.num_prefill_seqs, decode + spec)
            prefill = prefill + linear
            if parts is not None:
                parts["linear_attention"] = linear
        busy = (rows > 0) | (s.num_swap_tokens > 0)
        experts = 0.0  # a dense model's MLP is in rows_time; an exact 0.0 changes no sum
        if self._experts is not None:
            experts = self.model.num_moe_layers * self._experts.time(rows, mx)
            if parts is not None:
                parts["experts"] = experts
        gpu = rows_time(rows) + experts + prefill + attn_decode + head + swap
        cpu = self._cpu_step + self._cpu_seq * (s.num_prefill_seqs + decode)
        if self.async_scheduling:
            return busy * mx(gpu, cpu)
        return busy * (gpu + cpu)

    def price(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape``, CPU overhead included (0 for an empty step)."""
        return self._formula(shape, self._rows_time, max)

    step_time = price

    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        """Vectorised ``price`` (see ``StepPricer.price_columns``); bit-identical to it."""
        return self._formula(ShapeColumns(columns, "step_times"), self._rows_time_array,
                             np.maximum)

    # -- explanation ------------------------------------------------------------------------
    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per operator family (``BREAKDOWN_KEYS``); sums to ``price(shape)`` up to
        rounding (the GEMM-row terms are split per family here, folded in ``price``)."""
        s, m, e = shape, self.model, self.efficiency
        L = m.num_layers
        rows = s.num_tokens
        out = dict.fromkeys(BREAKDOWN_KEYS, 0.0)
        if s.is_empty:
            return out
        parts: dict = {}
        self._formula(s, self._rows_time, max, parts)
        out.update(parts)
        if rows > 0:
            def gemms(names: tuple[str, ...]) -> float:
                return sum(self._gemm_layers[n] * self.gemm_time(n, rows) for n in names
                           if n in self._gemms)

            # Attention's input projections: q/k/v, or MLA's q and latent down/up projections.
            out["qkv_proj"] = gemms(("qkv_proj", "q_proj", "q_a_proj", "q_b_proj", "kv_a_proj",
                                     "kv_b_proj"))
            out["o_proj"] = gemms(("o_proj",))
            if m.is_hybrid_linear:  # Gated DeltaNet projections: in with q/k/v, out with o
                out["qkv_proj"] += gemms(("gdn_in_proj", "gdn_ba_proj"))
                out["o_proj"] += gemms(("gdn_out_proj",))
            out["mlp"] = (out.pop("experts", 0.0)
                          + gemms(("mlp_up", "mlp_down", "router", "shared_up", "shared_down"))
                          + L * self.elementwise_time("mlp_act", rows))
            ew = sum(self.elementwise_time(op, rows) for op in LAYER_ELEMENTWISE
                     if op != "mlp_act") + self.elementwise_time("residual_add", rows)
            out["norms_elementwise"] = (L * ew + self._embed_per_row * rows
                                        + self._final_norm_per_row * rows
                                        + 2 * e.elementwise_latency_s)
            row_bytes = m.hidden_size * self.precision.act_bytes * rows
            out["tp_allreduce"] = 2 * L * self.allreduce_time(row_bytes)
            if m.qk_norm_across_heads and self.tensor_parallel_size > 1:
                out["tp_allreduce"] += L * self.allreduce_time(QK_VARIANCE_BYTES * rows)
                out["norms_elementwise"] += L * e.elementwise_latency_s
            out["pp_send_recv"] = (self.pipeline_parallel_size - 1) * 2 * self.send_recv_time(
                row_bytes)
            if self._dispatch:
                out["ep_all_to_all"] = m.num_moe_layers * (self._a2a_fixed + self._a2a_per_row * rows)
        cpu = self.overhead_time(s.batch_size)
        # Asynchronous scheduling hides the CPU's time under the GPU's: only what is longer shows.
        out["overhead"] = max(cpu - sum(out.values()), 0.0) if self.async_scheduling else cpu
        return out

    def known_error(self) -> Optional[dict]:
        """The operator error of this GPU's constants where they are its own (``GPU_EFFICIENCY``
        or A100's), None for constants given by the caller."""
        return efficiency_error(self.hardware) if self._own_constants else None

    def describe(self) -> str:
        p = self.precision
        ep = (f", dp={self.data_parallel_size}, ep={self.expert_parallel_size}"
              if self.expert_parallel_size > 1 or self.data_parallel_size > 1 else "")
        scope = scope_note(p, self._gemms, self.model.is_moe)
        fitted = efficiency_source(self.hardware) if self._own_constants else "given"
        cpu = ""
        if self.engine is not None:
            cpu = (f", {self.engine.label}'s CPU per step "
                   f"{'overlapped' if self.async_scheduling else 'serial'}")
        return (f"roofline ({self.model.name} on {self.hardware.name}, {p.dtype}, "
                f"weights {p.weight_dtype}{f' ({scope})' if scope else ''}, kv {p.kv_cache_dtype}, "
                f"tp={self.tensor_parallel_size}, pp={self.pipeline_parallel_size}{ep}; "
                f"efficiencies: {fitted}{cpu})")

    def __repr__(self) -> str:
        p = self.precision
        return (f"RooflineCostModel({self.model.name}, {self.hardware.name}, {p.dtype}, "
                f"weights={p.weight_dtype}, kv={p.kv_cache_dtype}, "
                f"tp={self.tensor_parallel_size}, pp={self.pipeline_parallel_size})")
