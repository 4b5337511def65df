"""Triton paged prefill attention: packed varlen queries, causal, context read through the block table.

Covers every prefill shape of a chunked-prefill engine with one kernel: a whole prompt
(``q_len == seq_len``), a later chunk of a long prompt, or the tail left after a prefix-cache hit
(``q_len < seq_len``: the first ``seq_len - q_len`` keys are already cached). All keys, old and new,
are read from the paged cache, so ``write_kv_cache`` runs first.

* Programs are (query tile, KV head). A tile's rows are ``BLOCK_Q`` consecutive query tokens times
  the GQA group (padded to a power of two), so each K/V tile loaded feeds all query heads that
  share it.
* No host sync for the varlen layout: sequence ``i``'s tiles are numbered from
  ``cu_seqlens_q[i] // BLOCK_Q + i``, an upper bound that leaves a few idle programs, and each
  program finds its sequence by binary search over ``cu_seqlens_q`` (vLLM's trick).
* Causality: a tile stops at its last query's position; the mask is applied only to key tiles
  that cross the diagonal, the rest are fully visible.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton.language as tl  # type: ignore[import-untyped]  # triton ships no type information

from kernels._triton_util import dot_precision, dot_upcast, jit, pow2
from kernels.triton_tiles import load_kv_tile, online_softmax_step

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class PrefillConfig:
    """Launch parameters (rows per tile = query tokens x padded GQA group); ``kernels.bench`` sweeps them."""

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 2


DEFAULT_CONFIG = PrefillConfig()
FP32_CONFIG = PrefillConfig(block_m=64, block_n=32, num_warps=8)  # fp32 tiles: half the shared memory


def default_config(dtype: torch.dtype) -> PrefillConfig:
    """Tile sizes for a storage dtype: fp32 at the 16-bit sizes spills (checked by ``kernels.compile_check``)."""
    return FP32_CONFIG if dtype == torch.float32 else DEFAULT_CONFIG


@jit
def _prefill_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, cu_q_ptr, seq_lens_ptr, out_ptr,
                    stride_qt, stride_qh, stride_ot, stride_oh,
                    stride_kb, stride_ks, stride_kh,
                    stride_vb, stride_vs, stride_vh,
                    stride_bt,
                    scale_log2, group, head_dim, num_seqs,
                    BLOCK_SIZE: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_G: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, UPCAST: tl.constexpr,
                    PRECISION: tl.constexpr):
    # Last tiles first: a sequence's late tiles see the most keys, so starting them early
    # shortens the tail of the launch (longest-processing-time-first scheduling).
    tile_id = tl.num_programs(0) - 1 - tl.program_id(0)
    kv_head = tl.program_id(1)

    # Binary search: the last sequence whose first tile number is <= tile_id.
    lo: tl.int32 = 0
    hi = lo + num_seqs  # a tensor even when Triton specialises num_seqs == 1 to a constant
    while lo < hi:
        mid = (lo + hi) // 2
        first_tile = tl.load(cu_q_ptr + mid).to(tl.int32) // BLOCK_Q + mid
        if first_tile <= tile_id:
            lo = mid + 1
        else:
            hi = mid
    seq = lo - 1
    seq_q_start = tl.load(cu_q_ptr + seq).to(tl.int32)
    seq_q_end = tl.load(cu_q_ptr + seq + 1).to(tl.int32)
    q_start = seq_q_start + (tile_id - (seq_q_start // BLOCK_Q + seq)) * BLOCK_Q
    if q_start >= seq_q_end:
        return  # spare program: the tile numbering over-allocates by at most one per sequence
    seq_len = tl.load(seq_lens_ptr + seq).to(tl.int32)
    context = seq_len - (seq_q_end - seq_q_start)  # tokens cached before this chunk

    r = tl.arange(0, BLOCK_Q * BLOCK_G)
    token = q_start + r // BLOCK_G
    g = r % BLOCK_G
    row_ok = (g < group) & (token < seq_q_end)
    q_pos = context + (token - seq_q_start)
    heads = kv_head * group + g
    d = tl.arange(0, BLOCK_D)
    d_mask = d < head_dim
    q_mask = row_ok[:, None] & d_mask[None, :]
    token64 = token.to(tl.int64)
    q = tl.load(q_ptr + token64[:, None] * stride_qt + heads[:, None] * stride_qh + d[None, :], mask=q_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    # Keys up to the tile's last query are needed; those below its first query are unmasked.
    last_q = tl.minimum(q_start + BLOCK_Q, seq_q_end) - 1
    kv_end = context + (last_q - seq_q_start) + 1
    visible_end = context + (q_start - seq_q_start) + 1

    m_i = tl.full([BLOCK_Q * BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_Q * BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q * BLOCK_G, BLOCK_D], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    n = tl.arange(0, BLOCK_N)
    for tile in range(0, kv_end, BLOCK_N):
        pos = tile + n
        valid = pos < kv_end
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, table, pos, valid, kv_head, d, d_mask,
                            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, BLOCK_SIZE, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        if tile + BLOCK_N > visible_end:  # crosses the diagonal (or the end): mask
            s = tl.where((pos[None, :] <= q_pos[:, None]) & valid[None, :], s, float("-inf"))
        # Key 0 is visible to every row, so the first tile gives each row a finite max.
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc, PRECISION)

    out = acc / l_i[:, None]
    tl.store(out_ptr + token64[:, None] * stride_ot + heads[:, None] * stride_oh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_mask)


def paged_prefill_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                   block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                   seq_lens: torch.Tensor, scale: float,
                                   config: PrefillConfig | None = None) -> torch.Tensor:
    """Launch the prefill kernel; arguments are checked by ``kernels``."""
    config = config or default_config(q.dtype)
    total_q, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    num_seqs = cu_seqlens_q.shape[0] - 1
    block_g = pow2(group)
    block_q = max(1, config.block_m // block_g)
    block_q = max(block_q, pow2(16 // block_g))  # tl.dot needs >= 16 rows
    out = torch.empty_like(q)
    grid = (total_q // block_q + num_seqs, num_kv_heads)
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, out,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        scale * LOG2E, group, head_dim, num_seqs,
        BLOCK_SIZE=block_size, BLOCK_Q=block_q, BLOCK_G=block_g, BLOCK_D=pow2(head_dim),
        BLOCK_N=max(config.block_n, 16), UPCAST=dot_upcast(q.dtype), PRECISION=dot_precision(q.dtype),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return out
