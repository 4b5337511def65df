"""Device functions shared by the decode and prefill kernels: one K/V tile through the block
table, and one online-softmax step. Keeping them in one place keeps the two kernels' numerics
identical (prefill with one query per sequence *is* decode).
"""

from __future__ import annotations

import triton.language as tl  # type: ignore[import-untyped]  # triton ships no type information

from kernels._triton_util import jit


@jit
def load_kv_tile(k_cache_ptr, v_cache_ptr, table_ptr, pos, valid, kv_head, d, d_mask,
                 stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh,
                 BLOCK_SIZE: tl.constexpr, UPCAST: tl.constexpr):
    """K and V ``[BLOCK_N, BLOCK_D]`` for logical positions ``pos`` of one sequence and KV head.

    A tile may span several pages: each token's physical block is looked up in the sequence's
    block table, so pages can sit anywhere in the pool. Masked rows read as zeros.
    """
    block = tl.load(table_ptr + pos // BLOCK_SIZE, mask=valid, other=0).to(tl.int64)
    slot = pos % BLOCK_SIZE
    mask = valid[:, None] & d_mask[None, :]
    k = tl.load(k_cache_ptr + block[:, None] * stride_kb + slot[:, None] * stride_ks
                + kv_head * stride_kh + d[None, :], mask=mask, other=0.0)
    v = tl.load(v_cache_ptr + block[:, None] * stride_vb + slot[:, None] * stride_vs
                + kv_head * stride_vh + d[None, :], mask=mask, other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return k, v


@jit
def online_softmax_step(s, v, m_i, l_i, acc, PRECISION: tl.constexpr):
    """Fold a tile of base-2 scores ``s`` (masked entries -inf) and its V into (max, sum, acc).

    Callers guarantee every row has seen one finite score by its first tile, so the running
    max is finite from then on and ``exp2`` never meets ``inf - inf``.
    """
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc
