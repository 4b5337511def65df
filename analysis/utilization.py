"""How hard each simulated step works the GPU: model FLOPs utilisation (MFU) and memory
bandwidth utilisation (MBU), from the step log and the catalog's model and hardware.

Why a planner wants them: a decode-bound replica at 2% MFU and 80% MBU is limited by memory
bandwidth (more batch, FP8 weights or KV help; more FLOPs do not), a prefill-heavy one at 60%
MFU by compute. vLLM, SGLang and AIConfigurator report the same two ratios.

What is counted (per GPU of one replica; tensor and pipeline parallel ranks split the work
evenly):

- FLOPs: ``2 x active linear parameters`` per token computed (prefill, decode and speculative
  verification tokens) plus decode attention, ``2 x layers x heads x (qk dim + v dim)`` per
  token of context read. Prefill attention is left out: the step log does not carry each
  chunk's context, and below 4k-token prompts it is a few percent of a prefill's FLOPs.
- Bytes: every weight this step reads once (a MoE reads only the experts its tokens touch,
  expected under uniform routing), the KV of every decode context token, and the KV written
  for every token computed.

Both are lower bounds on what the GPU executes (no recompute, no padding, no activation
traffic), which is how MFU is conventionally defined: useful model work over peak.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from sim.catalog.dtypes import resolve_precision
from sim.catalog.hardware import HardwareSpec, get_hardware
from sim.catalog.models import ModelSpec, get_model
from sim.errors import KvplanError


@dataclass(frozen=True)
class UtilizationModel:
    """Per-GPU work coefficients of one deployment (everything the step log does not hold)."""

    #: FLOPs per token through the linear layers (all experts a token is routed to).
    flops_per_token: float
    #: FLOPs per (query token, context token) pair of decode attention.
    flops_per_context_token: float
    #: Bytes of weights every step reads whatever its batch (attention, dense MLPs, shared
    #: experts, embeddings and head).
    fixed_weight_bytes: float
    #: Bytes of one routed expert's weights on this GPU, and experts per MoE layer and top-k.
    expert_bytes: float
    num_experts: int
    top_k: int
    #: KV bytes per token on this GPU (read per context token, written per token computed).
    kv_bytes_per_token: float
    peak_flops: float
    bandwidth: float

    def step_flops(self, tokens: np.ndarray, context: np.ndarray) -> np.ndarray:
        return self.flops_per_token * tokens + self.flops_per_context_token * context

    def step_bytes(self, tokens: np.ndarray, context: np.ndarray) -> np.ndarray:
        weights = np.full(tokens.shape, self.fixed_weight_bytes)
        if self.num_experts:
            miss = 1.0 - self.top_k / self.num_experts
            touched = self.num_experts * (1.0 - np.power(miss, tokens))
            weights = weights + self.expert_bytes * touched
        return weights + self.kv_bytes_per_token * (context + tokens)


def utilization_model(model: "str | ModelSpec", hardware: "str | HardwareSpec", *, dtype: str = "float16",
                      weight_dtype: Optional[str] = None, kv_cache_dtype: str = "auto",
                      gpus_per_replica: int = 1,
                      kv_bytes_per_token: Optional[float] = None) -> UtilizationModel:
    """Coefficients for ``model`` on ``hardware`` split over ``gpus_per_replica`` GPUs.
    ``kv_bytes_per_token``: the memory plan's per-GPU figure when known (it accounts for MLA,
    sliding windows and KV heads replicated under tensor parallelism)."""
    m, hw = get_model(model), get_hardware(hardware)
    prec = resolve_precision(hw, dtype, weight_dtype, kv_cache_dtype)
    g = max(int(gpus_per_replica), 1)
    routed_idle = m.num_moe_layers * max(m.num_experts - m.num_experts_per_tok, 0) * m.expert_params
    linear_active = m.linear_params - routed_idle + m.lm_head_params + (
        m.embedding_params if m.tie_word_embeddings else 0)
    if m.is_mla:
        qk, v = m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank  # vLLM's absorbed decode
    else:
        qk = v = m.head_dim
    attn = 2.0 * m.num_full_attention_layers * m.num_heads * (qk + v)
    routed_all = m.num_moe_layers * m.num_experts * m.expert_params
    fixed = (m.linear_params - routed_all + m.lm_head_params + m.embedding_params) * prec.weight_bytes
    if kv_bytes_per_token is None:
        kv_bytes_per_token = (m.num_layers * m.kv_cache_width * prec.kv_bytes) / g
    return UtilizationModel(
        flops_per_token=2.0 * linear_active / g, flops_per_context_token=attn / g,
        fixed_weight_bytes=fixed / g,
        expert_bytes=m.num_moe_layers * m.expert_params * prec.weight_bytes / g,
        num_experts=m.num_experts if m.is_moe else 0, top_k=m.num_experts_per_tok,
        kv_bytes_per_token=float(kv_bytes_per_token), peak_flops=hw.flops(prec.compute),
        bandwidth=hw.memory_bandwidth)


def model_for_run(scenario: Mapping, config: Optional[Mapping] = None) -> Optional[UtilizationModel]:
    """The coefficients for a summary's ``scenario`` block (and the run's config, for weight
    and KV dtypes); None when it names no catalog model and hardware (nothing to compare
    against)."""
    try:
        weight_dtype, kv_dtype = None, "auto"
        if config is not None:
            from sim.api import as_scenario

            sc = as_scenario(dict(config))
            weight_dtype, kv_dtype = sc.quantization.weight_dtype, sc.kv_cache.dtype
        slots, pool = scenario.get("kv_slots_per_replica"), scenario.get("kv_pool_gb")
        return utilization_model(scenario["model"], scenario["hardware"], dtype=scenario.get("dtype", "float16"),
                                 weight_dtype=weight_dtype, kv_cache_dtype=kv_dtype,
                                 gpus_per_replica=scenario.get("gpus_per_replica", 1),
                                 kv_bytes_per_token=pool * 1e9 / slots if slots and pool else None)
    except (KeyError, TypeError, ValueError, LookupError, KvplanError):
        return None


def step_work(steps: Mapping[str, Union[Sequence, np.ndarray]], um: UtilizationModel) -> tuple[np.ndarray, np.ndarray]:
    """Per step: (FLOPs, bytes) on one GPU."""
    tokens = (np.asarray(steps["num_prefill_tokens"], dtype=float)
              + np.asarray(steps["num_decode_seqs"], dtype=float)
              + np.asarray(steps["num_spec_tokens"], dtype=float))
    context = np.asarray(steps["decode_context_tokens"], dtype=float)
    return um.step_flops(tokens, context), um.step_bytes(tokens, context)


def overall(steps: Mapping[str, Sequence], um: UtilizationModel) -> dict:
    """Busy-time utilisation over the whole run: total work over total step time x peak."""
    dur = np.asarray(steps.get("duration_s", []), dtype=float)
    busy = float(dur.sum())
    if busy <= 0:
        return {"mfu": None, "mbu": None, "busy_s": 0.0}
    flops, nbytes = step_work(steps, um)
    return {"mfu": float(flops.sum() / (busy * um.peak_flops)),
            "mbu": float(nbytes.sum() / (busy * um.bandwidth)), "busy_s": busy}
