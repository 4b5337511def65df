"""The memory plan: how one GPU's memory splits into weights, activation reserve and the KV
pool, and so how many KV tokens (slots) a replica holds.

Why its own module: the simulator sizes its KV pool from it whatever prices the steps (the
roofline or a calibration profile), and capacity search reads it to rule out deployments
that do not fit. Sized as vLLM sizes its KV cache (``docs/cost_model.md`` has the formulas).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Optional, Union

from sim.catalog.dtypes import Precision, quantized_groups, resolve_precision
from sim.catalog.hardware import HardwareSpec, get_hardware
from sim.catalog.models import ModelSpec, get_model
from sim.errors import ConfigError, DoesNotFitError

GB = 1e9
GiB = 1 << 30

def check_parallel(model: ModelSpec, tp: int, pp: int) -> None:
    """Reject a tensor/pipeline split the model cannot take (shared with the roofline)."""
    if not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor_parallel_size: must be a positive integer, got {tp!r}")
    if not isinstance(pp, int) or pp < 1:
        raise ConfigError(f"pipeline_parallel_size: must be a positive integer, got {pp!r}")
    if model.num_heads % tp:
        raise ConfigError(
            f"tensor_parallel_size: {tp} does not divide {model.name}'s {model.num_heads} "
            f"attention heads"
        )
    if model.is_hybrid_linear and (model.linear_num_key_heads % tp or model.linear_num_value_heads % tp):
        raise ConfigError(
            f"tensor_parallel_size: {tp} does not divide {model.name}'s linear-attention heads "
            f"({model.linear_num_key_heads} key, {model.linear_num_value_heads} value)"
        )
    if pp > model.num_layers:
        raise ConfigError(
            f"pipeline_parallel_size: {pp} exceeds {model.name}'s {model.num_layers} layers"
        )


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads each rank stores: vLLM replicates KV heads when tp exceeds their number."""
    return max(1, model.num_kv_heads // tp)


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
    #: A hybrid linear-attention model's constant state per request on one GPU (the
    #: linear-attention layers' recurrent state and convolution window): 0 for other models.
    state_bytes_per_request: float = 0.0
    #: Requests a separate state pool holds (SGLang's mamba pool, ``split_state_pool``); None
    #: when there is none (vLLM pages each request's state from the KV pool).
    max_state_requests: Optional[int] = None

    def num_blocks(self, block_size: int) -> int:
        """Whole KV blocks of ``block_size`` tokens the pool holds."""
        if block_size < 1:
            raise ConfigError(f"block_size: must be a positive integer, got {block_size!r}")
        return self.num_kv_slots // block_size

    def to_dict(self) -> dict:
        return asdict(self)


def weights_bytes_per_gpu(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1,
                          ep: int = 1, etp: Optional[int] = None) -> float:
    """Weight bytes on the fullest GPU: linear layers, embeddings and LM head are sharded
    over ``tp`` (Megatron column/row and vocab parallel), norms and biases replicated;
    pipeline stages take ``ceil(layers / pp)`` layers, the first the embedding, the last the
    LM head (and the embedding again when tied). A MoE's routed experts spread whole over
    ``ep`` groups, each split over the ``etp`` GPUs of its group (MoE TP x EP; 1 for pure
    EP; None: ``tp`` without EP, 1 with it); without EP but with DP attention ``etp`` is every
    GPU of the replica (tp x dp)."""
    if etp is None:
        etp = tp if ep <= 1 else 1
    layers = math.ceil(model.num_layers / pp)
    replicated = model.replicated_attention_params  # MLA's down-projections: whole on every rank
    per_layer = ((model.linear_params_per_layer - replicated) * prec.weight_bytes / tp
                 + replicated * prec.weight_bytes
                 + model.other_params_per_layer * prec.act_bytes)
    split = model.is_moe and (ep > 1 or etp != tp)  # routed experts not split as the rest
    if split:
        # The routed experts over ``ep`` groups of ``etp`` GPUs (expert parallelism, or every
        # GPU of a DP deployment without it), the rest as before (attention, router and shared
        # experts split by tensor parallelism).
        routed = model.expert_params * model.num_experts
        per_layer = ((model.linear_params_per_layer - replicated - routed) * prec.weight_bytes / tp
                     + routed * prec.weight_bytes / (ep * etp) + replicated * prec.weight_bytes
                     + model.other_params_per_layer * prec.act_bytes)
    if model.num_dense_layers and model.is_moe:
        # Dense-first MoE (DeepSeek-V3): the fullest stage holds as many sparse layers as fit.
        routed = model.expert_params * model.num_experts
        lighter = ((model.moe_mlp_params - model.dense_mlp_params) * prec.weight_bytes / tp
                   if not split else
                   (model.moe_mlp_params - routed - model.dense_mlp_params) * prec.weight_bytes / tp
                   + routed * prec.weight_bytes / (ep * etp))
        per_layer_total = layers * per_layer - max(0, layers - model.num_moe_layers) * lighter
        layers, per_layer = 1, per_layer_total
    embed = model.embedding_params * prec.act_bytes / tp
    head_params = model.vocab_size * model.hidden_size if (
        model.tie_word_embeddings and pp > 1) else model.lm_head_params
    head = head_params * prec.act_bytes / tp + model.final_norm_params * prec.act_bytes
    extra = embed + head if pp == 1 else max(embed, head)
    return layers * per_layer + unquantized_extra_bytes(model, prec, tp, pp) + extra


def unquantized_extra_bytes(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1) -> float:
    """Bytes the layers a quantised checkpoint leaves in the activation dtype
    (``quantization.scope``: ``dtypes.quantized_groups``) add on the fullest GPU over the same
    layers in the weight format: attention projections (MLA's down-projections whole on every
    rank, the rest split over ``tp``), dense MLPs and shared experts split over ``tp``, the
    router whole on every rank (never quantised). The fullest pipeline stage holds
    ``ceil(layers / pp)`` of the layers, taken as an even share of each kind."""
    groups = quantized_groups(prec, model.is_moe)
    per_param = prec.act_bytes - prec.weight_bytes
    if not groups or per_param <= 0:
        return 0.0
    h = model.hidden_size
    replicated = model.replicated_attention_params
    out_params = model.attention_output_params
    in_params = model.attention_params - out_params
    params = 0.0
    if "attention_in" not in groups:
        params += model.num_attention_layers * ((in_params - replicated) / tp + replicated)
        params += model.linear_attention_layers * h * model.linear_in_proj_size / tp
    if "attention_out" not in groups:
        params += model.num_attention_layers * out_params / tp
        params += model.linear_attention_layers * h * model.linear_value_size / tp
    if "dense_mlp" not in groups:
        params += model.num_dense_layers * model.dense_mlp_params / tp
    if "shared_experts" not in groups:  # 0 shared experts for a dense model
        params += model.num_moe_layers * model.num_shared_experts * model.expert_params / tp
    router = model.num_moe_layers * model.router_params * (prec.act_bytes - prec.weight_bytes / tp)
    share = math.ceil(model.num_layers / pp) / model.num_layers
    return (params * per_param + router) * share


def activation_reserve_bytes(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1,
                             max_num_batched_tokens: int = 2048, max_num_seqs: int = 256
                             ) -> float:
    """Peak memory of the profiling forward pass vLLM runs before sizing the KV cache.

    One layer's live tensors at its peak, for ``max_num_batched_tokens`` rows: the residual
    stream and the normed hidden state (2h), plus the larger of attention's (q,k,v output and
    attention output) or the MLP's (gate+up output and activation output) shards, top-k of
    them for a mixture of experts. Logits for
    ``max_num_seqs`` sampled rows in fp32, twice (logits and probabilities). Plus the fixed
    reserve for CUDA context, workspaces and CUDA graphs (and NCCL buffers when parallel).
    """
    t = max_num_batched_tokens
    attn = (model.qkv_size + model.q_size) / tp
    if model.is_mla:  # q, per-head K and V up-projected, attention output
        attn = model.num_heads * (model.head_dim + model.qk_nope_head_dim + 2 * model.v_head_dim) / tp
    mlp = (model.mlp_in_size + model.intermediate_size) / tp
    if model.is_moe:
        # vLLM's fused MoE keeps each row's top-k expert outputs (gate+up, activation) at once.
        mlp *= model.num_experts_per_tok
    layer_peak = t * prec.act_bytes * (2 * model.hidden_size + max(attn, mlp))
    logits = min(max_num_seqs, t) * model.vocab_size * 4 * 2
    fixed = FIXED_RESERVE_BYTES + (PARALLEL_RESERVE_BYTES if tp * pp > 1 else 0)
    return layer_peak + logits + fixed


def kv_bytes_per_token(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1) -> int:
    """K and V of one token, all layers of this GPU's pipeline stage, its KV-head shard. MLA
    (DeepSeek-V3): the latent and rotary key, ``kv_lora_rank + qk_rope_head_dim`` values per
    layer, whole on every tensor-parallel rank (all heads read it; vLLM does not split it);
    with sparse attention also the indexer's key (``ModelSpec.indexer_cache_bytes``)."""
    layers = math.ceil(model.num_full_attention_layers / pp)
    if model.is_mla:  # DSA (DeepSeek-V3.2, GLM-5): the indexer's FP8 key and scale beside it
        return layers * (model.kv_cache_width * prec.kv_bytes + model.indexer_cache_bytes)
    return 2 * layers * kv_heads_per_gpu(model, tp) * model.head_dim * prec.kv_bytes


def recurrent_state_bytes(model: ModelSpec, prec: Precision, tp: int = 1, pp: int = 1) -> float:
    """One request's constant state on the fullest GPU of a hybrid linear-attention model: in
    each of its stage's linear-attention layers, the recurrent state in the model's state dtype
    (``linear_state_bytes``, float32 for Qwen3.5) and the convolution window in the activation
    dtype, heads split over TP (SGLang's ``mamba2_cache_params``, vLLM's ``MambaSpec``). 0 for
    a model without such layers."""
    if not model.is_hybrid_linear:
        return 0.0
    ssm, conv = model.recurrent_state_elements(tp)
    layers = math.ceil(model.linear_attention_layers / pp)
    return float(layers * (ssm * model.linear_state_bytes + conv * prec.act_bytes))


# SGLang's ``--mamba-full-memory-ratio`` default: the state pool's bytes over the KV pool's.
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
# SGLang's MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO: state slots per running request
# (radix cache on, no extra buffer), so finished requests' states can stay cached.
SGLANG_MAMBA_SLOTS_PER_REQUEST = 3


def split_state_pool(plan: MemoryPlan, ratio: float = SGLANG_MAMBA_FULL_MEMORY_RATIO,
                     states: Optional[int] = None) -> MemoryPlan:
    """SGLang's memory split for a hybrid linear-attention model (``ModelRunnerKVCacheMixin.
    handle_max_mamba_cache``): ``states`` whole request states when the server fixes their number
    (``--max-mamba-cache-size``, or ``--max-running-requests`` with the radix cache off), else the
    ratio branch: of the memory left after the weights, ``ratio / (1 + ratio)`` holds states.
    The full-attention layers' KV tokens get the rest. Unchanged for a model without state."""
    per_req = plan.state_bytes_per_request
    if per_req <= 0:
        return plan
    if states is None:
        states = int(plan.kv_pool_bytes * ratio / (1 + ratio) // per_req)
        if states < 1:
            raise DoesNotFitError(
                f"{plan.model}: SGLang's state pool ({ratio:g} of the KV pool's bytes) holds "
                f"{states} request states of {per_req / 2**20:.1f} MiB; raise "
                f"sglang.mem_fraction_static or use more GPUs")
    elif states * per_req >= plan.kv_pool_bytes:
        raise DoesNotFitError(
            f"{plan.model}: SGLang's state pool of {states} request states of "
            f"{per_req / 2**20:.1f} MiB needs {states * per_req / GB:.1f} GB but "
            f"{plan.kv_pool_bytes / GB:.1f} GB is left after the weights, leaving no KV cache; "
            f"lower sglang.max_mamba_cache_size (or max_running_requests) or raise "
            f"sglang.mem_fraction_static")
    kv_pool = plan.kv_pool_bytes - states * per_req
    return replace(plan, kv_pool_bytes=kv_pool, num_kv_slots=int(kv_pool // plan.kv_bytes_per_token),
                   max_state_requests=states)


def sliding_window_kv(model: ModelSpec, block_size: int) -> tuple[int, float]:
    """A hybrid model's sliding-window layers, as the paged allocator holds them: (most tokens a
    request keeps there: vLLM keeps ``ceil((window - 1) / block) + 1`` blocks; pool slots a
    token, their KV bytes over the full-attention layers'). (0, 0.0) for other models."""
    ls, lf, window = model.sliding_window_layers, model.num_full_attention_layers, model.sliding_window
    if not ls or window is None:  # ModelSpec gives every windowed model its window
        return 0, 0.0
    blocks = -(-(window - 1) // block_size) + 1
    return blocks * block_size, ls / lf


def plan_memory(model: Union[str, ModelSpec], hw: Union[str, HardwareSpec],
                dtype: str = "float16", gpu_memory_utilization: float = 0.9,
                tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                kv_cache_dtype: str = "auto", weight_dtype: Optional[str] = None,
                max_num_batched_tokens: int = 2048, max_num_seqs: int = 256,
                expert_parallel_size: int = 1,
                activation_reserve: Optional[float] = None,
                expert_tensor_parallel_size: Optional[int] = None,
                quant_scope: str = "auto") -> MemoryPlan:
    """Split one GPU's memory into weights, activation reserve and KV pool
    (``expert_parallel_size``: groups a MoE's routed experts are spread over whole,
    ``expert_tensor_parallel_size``: GPUs of a group each expert is split over,
    ``quant_scope``: the layers the weight format covers, ``quantization.scope``).
    ``activation_reserve``: bytes kept for activations, in place of vLLM's profiled peak
    (``activation_reserve_bytes``); SGLang passes 0, its ``mem_fraction_static`` (the
    ``gpu_memory_utilization`` here) already leaves the rest of the GPU to activations and
    CUDA graphs.

    Raises DoesNotFitError (one line, with the numbers and what would fit) when weights and
    reserve leave no room for a KV cache.
    """
    model, hw = get_model(model), get_hardware(hw)
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    check_parallel(model, tp, pp)
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(
            f"gpu_memory_utilization: must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    if max_num_batched_tokens < 1:
        raise ConfigError("max_num_batched_tokens: must be a positive integer")
    prec = resolve_precision(hw, dtype, weight_dtype, kv_cache_dtype, quant_scope)

    budget = hw.usable_memory_bytes * gpu_memory_utilization  # a fraction of what the driver reports
    ep = expert_parallel_size
    if ep > 1 and model.is_moe and model.num_experts % ep:
        raise ConfigError(f"parallel: {model.name}'s {model.num_experts} experts do not spread "
                          f"evenly over {ep} expert-parallel groups (parallel.expert_parallel_size, "
                          f"else data_parallel_size x tensor_parallel_size)")
    weights = weights_bytes_per_gpu(model, prec, tp, pp, ep, expert_tensor_parallel_size)
    reserve = (activation_reserve_bytes(model, prec, tp, pp, max_num_batched_tokens, max_num_seqs)
               if activation_reserve is None else float(activation_reserve))
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
        memory_bytes=hw.usable_memory_bytes, budget_bytes=budget, weights_bytes=weights,
        activation_reserve_bytes=reserve, kv_pool_bytes=pool, kv_bytes_per_token=kv_token,
        num_kv_slots=int(pool // kv_token),
        state_bytes_per_request=recurrent_state_bytes(model, prec, tp, pp),
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
    # Only formats smaller than the weights' own are advice (an FP8 checkpoint is told of 4-bit ones).
    smaller = {"auto": "int8, int4 or fp8", "fp8": "int4 or nvfp4", "fp8_block": "int4 or nvfp4",
               "int8": "int4 or nvfp4"}.get(prec.weight_dtype)
    hint = f"a quantised dtype (quantization.weights {smaller})" if smaller else "more GPUs"
    for cand in (2, 4, 8, 16, 32, 64):
        if cand <= tp or model.num_heads % cand:
            continue
        w = weights_bytes_per_gpu(model, prec, cand, pp)
        r = activation_reserve_bytes(model, prec, cand, pp, max_tokens, max_seqs)
        if w + r + kv_bytes_per_token(model, prec, cand, pp) <= budget:
            hint = f"tensor_parallel_size >= {cand}" + (f" or {hint}" if smaller else "")
            break
    return f"{head}; use {hint}"
