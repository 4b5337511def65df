"""Paged attention over one packed step: where the model meets ``kernels``.

A step's tokens are packed with no padding, single-token queries (decodes) first and multi-token
chunks (prefill, chunked prefill, recompute) after, so each group goes to the kernel built for
it: ``paged_decode_attention`` for the first ``num_decode_tokens`` rows and
``paged_prefill_attention`` (causal, varlen, reading cached context through the block table)
for the rest. ``model_runner.py`` builds the metadata; the model only passes it through.

On a CPU the runtime's default backend is ``'sdpa'`` (``kernels/sdpa.py``): the gather indices
and masks are built once per step into ``meta.sdpa`` and every layer reuses them, so a layer's
attention is two cache gathers and one fused SDPA call per group (per prefill sequence).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import kernels
from kernels import paged_decode_attention, paged_prefill_attention, write_kv_cache
from kernels.sdpa import SDPAPlan
from sim.errors import ConfigError


@dataclass
class AttentionMetadata:
    """Index tensors of one step, shared by every layer.

    ``slot_mapping`` covers all packed tokens. The decode group has one query per sequence;
    the prefill group's ``cu_seqlens_q`` is rebased to start at 0 for its own rows.
    ``seq_lens`` count cached context plus this step's tokens (the kernels' convention).
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64
    num_decode_tokens: int
    decode_block_tables: torch.Tensor  # [num_decodes, max_blocks] int32
    decode_seq_lens: torch.Tensor  # [num_decodes] int32
    prefill_block_tables: torch.Tensor  # [num_prefills, max_blocks] int32
    prefill_cu_seqlens_q: torch.Tensor  # [num_prefills + 1] int32
    prefill_seq_lens: torch.Tensor  # [num_prefills] int32
    num_prefill_tokens: int
    #: Kernel backend, resolved by ``resolve_backend`` (never "auto" here).
    backend: str = "torch"
    #: The step's precomputed gathers and masks when ``backend == "sdpa"``.
    sdpa: SDPAPlan | None = None


def resolve_backend(device: torch.device, requested: str = "auto") -> str:
    """``auto``: Triton where it runs (CUDA, or CPU under TRITON_INTERPRET=1), else ``sdpa``."""
    if requested == "auto":
        return "triton" if kernels.use_triton(device, "auto") else "sdpa"
    try:
        kernels.use_triton(device, requested)  # raises ValueError for unknown or unrunnable backends
    except ValueError as err:
        raise ConfigError(f"attention_backend {requested!r}: {err}") from None
    return requested


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                    v_cache: torch.Tensor, meta: AttentionMetadata, scale: float) -> torch.Tensor:
    """Store this step's K/V in the paged cache, then attend; q/k/v ``[tokens, heads, head_dim]``.

    Attention reads only the cache (new tokens included), so cached prefixes and earlier
    chunks are seen exactly like the tokens computed now.
    """
    if meta.sdpa is not None:
        plan = meta.sdpa
        plan.write(k, v, k_cache, v_cache)

        def decode(qd: torch.Tensor) -> torch.Tensor:
            return plan.decode(qd, k_cache, v_cache, scale)

        def prefill(qp: torch.Tensor) -> torch.Tensor:
            return plan.prefill(qp, k_cache, v_cache, scale)
    else:
        write_kv_cache(k, v, k_cache, v_cache, meta.slot_mapping, backend=meta.backend)

        def decode(qd: torch.Tensor) -> torch.Tensor:
            return paged_decode_attention(qd, k_cache, v_cache, meta.decode_block_tables,
                                          meta.decode_seq_lens, scale, backend=meta.backend)

        def prefill(qp: torch.Tensor) -> torch.Tensor:
            return paged_prefill_attention(qp, k_cache, v_cache, meta.prefill_block_tables,
                                           meta.prefill_cu_seqlens_q, meta.prefill_seq_lens, scale,
                                           backend=meta.backend)
    nd = meta.num_decode_tokens
    if meta.num_prefill_tokens == 0:
        return decode(q)
    if nd == 0:
        return prefill(q)
    out = torch.empty_like(q)
    out[:nd] = decode(q[:nd])
    out[nd:] = prefill(q[nd:])
    return out
