"""Triton paged decode attention: GQA-grouped, split-K (flash-decoding), stable online softmax.

Decode is a bandwidth problem: each step reads every cached K/V byte once to produce one token
per sequence. So the kernel

* runs one program per (sequence, KV head, split), holding *all* query heads of that KV head
  (a GQA group, padded to 16 rows for ``tl.dot``) so each K/V tile is read once, not once per
  query head;
* walks the context in tiles of ``BLOCK_N`` tokens that may span several pages: each token's
  physical block comes from the block table, so pages need not be contiguous;
* keeps a running max and sum (online softmax, base 2 with the scale folded in), so nothing
  overflows whatever the scores;
* splits long contexts into ``num_splits`` pieces when there are too few (sequence, KV head)
  programs to fill the GPU, writing each piece's normalised output and log-sum-exp; a second
  small kernel merges them (flash-decoding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton.language as tl  # type: ignore[import-untyped]  # triton ships no type information

from kernels._triton_util import dot_precision, dot_upcast, jit, pow2
from kernels.triton_tiles import load_kv_tile, online_softmax_step

LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class DecodeConfig:
    """Launch parameters. Defaults are sane for Hopper/Ampere; ``kernels.bench`` sweeps them."""

    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    min_tokens_per_split: int = 256  # below this a split's fixed cost outweighs its parallelism
    max_splits: int = 128


DEFAULT_CONFIG = DecodeConfig()
FP32_CONFIG = DecodeConfig(block_n=32, num_warps=8)  # fp32 tiles at 64 x 4 warps spill on sm_80/sm_90


def default_config(dtype: torch.dtype) -> DecodeConfig:
    """Launch parameters for a storage dtype (checked spill-free by ``kernels.compile_check``)."""
    return FP32_CONFIG if dtype == torch.float32 else DEFAULT_CONFIG


@jit
def _decode_kernel(q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr,
                   out_ptr, lse_ptr,
                   stride_qs, stride_qh,
                   stride_kb, stride_ks, stride_kh,
                   stride_vb, stride_vs, stride_vh,
                   stride_bt,
                   stride_os, stride_oh, stride_osplit,
                   stride_ls, stride_lh,
                   scale_log2, group, head_dim, num_splits,
                   BLOCK_SIZE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr,
                   PRECISION: tl.constexpr):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq_len = tl.load(seq_lens_ptr + seq)
    # Equal splits rounded up to whole tiles; trailing splits of a short sequence may be empty.
    per_split = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * per_split
    end = tl.minimum(start + per_split, seq_len)

    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    g_mask = g < group
    d_mask = d < head_dim
    heads = kv_head * group + g
    q = tl.load(q_ptr + seq * stride_qs + heads[:, None] * stride_qh + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    n = tl.arange(0, BLOCK_N)
    for tile in range(start, end, BLOCK_N):
        pos = tile + n
        valid = pos < end
        k, v = load_kv_tile(k_cache_ptr, v_cache_ptr, table, pos, valid, kv_head, d, d_mask,
                            stride_kb, stride_ks, stride_kh, stride_vb, stride_vs, stride_vh, BLOCK_SIZE, UPCAST)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        s = tl.where(valid[None, :], s, float("-inf"))  # each tile has >= 1 valid token
        m_i, l_i, acc = online_softmax_step(s, v, m_i, l_i, acc, PRECISION)

    safe_l = tl.where(l_i > 0.0, l_i, 1.0)  # an empty split: output 0, log-sum-exp -inf
    out = acc / safe_l[:, None]
    out_mask = g_mask[:, None] & d_mask[None, :]
    out_offs = seq * stride_os + heads[:, None] * stride_oh + split * stride_osplit + d[None, :]
    tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=out_mask)
    if SPLIT:
        lse = tl.where(l_i > 0.0, m_i + tl.log2(safe_l), float("-inf"))
        tl.store(lse_ptr + seq * stride_ls + heads * stride_lh + split, lse, mask=g_mask)


@jit
def _merge_kernel(part_ptr, lse_ptr, out_ptr,
                  stride_ps, stride_ph, stride_psplit,
                  stride_ls, stride_lh,
                  stride_os, stride_oh,
                  head_dim, num_splits,
                  BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """Combine per-split outputs: weights 2^(lse_i - max lse), normalised (flash-decoding merge)."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    s_mask = s < num_splits
    lse = tl.load(lse_ptr + seq * stride_ls + head * stride_lh + s, mask=s_mask, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, axis=0))  # split 0 is never empty, so the max is finite
    part = tl.load(part_ptr + seq * stride_ps + head * stride_ph + s[:, None] * stride_psplit + d[None, :],
                   mask=s_mask[:, None] & (d < head_dim)[None, :], other=0.0)
    out = tl.sum(part * w[:, None], axis=0) / tl.sum(w, axis=0)
    tl.store(out_ptr + seq * stride_os + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d < head_dim)


def choose_num_splits(num_seqs: int, num_kv_heads: int, max_context: int, device: torch.device,
                      config: DecodeConfig = DEFAULT_CONFIG) -> int:
    """Split-K factor: enough programs for ~4 per SM, never splits shorter than the minimum.

    Uses the block table's capacity as the context bound, so it costs no device sync. Off-GPU
    (the interpreter) a nominal 4 SMs keeps the split path in use for small batches.
    """
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    programs = num_seqs * num_kv_heads
    wanted = math.ceil(4 * sms / programs)
    by_length = math.ceil(max_context / config.min_tokens_per_split)
    return max(1, min(wanted, by_length, config.max_splits))


def paged_decode_attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                  block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                                  num_splits: int | None = None,
                                  config: DecodeConfig | None = None) -> torch.Tensor:
    """Launch decode (and merge when split); arguments are checked by ``kernels``."""
    config = config or default_config(q.dtype)
    num_seqs, num_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, num_kv_heads, block_tables.shape[1] * block_size, q.device, config)
    out = torch.empty_like(q)
    split = num_splits > 1
    if split:
        part = torch.empty(num_seqs, num_heads, num_splits, head_dim, dtype=torch.float32, device=q.device)
        lse = torch.empty(num_seqs, num_heads, num_splits, dtype=torch.float32, device=q.device)
        target, t_strides, l_strides = part, part.stride()[:3], lse.stride()[:2]
    else:
        lse = out  # unused when SPLIT is off
        target, t_strides, l_strides = out, (*out.stride()[:2], 0), (0, 0)
    block_g = pow2(group, 16)
    block_d = pow2(head_dim)
    block_n = max(config.block_n, block_size, 16)  # whole pages per tile; tl.dot needs >= 16
    _decode_kernel[(num_seqs, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, target, lse,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        block_tables.stride(0),
        *t_strides, *l_strides,
        scale * LOG2E, group, head_dim, num_splits,
        BLOCK_SIZE=block_size, BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_N=block_n,
        SPLIT=split, UPCAST=dot_upcast(q.dtype), PRECISION=dot_precision(q.dtype),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if split:
        _merge_kernel[(num_seqs, num_heads)](
            part, lse, out,
            *part.stride()[:3], *lse.stride()[:2], *out.stride()[:2],
            head_dim, num_splits,
            BLOCK_S=pow2(num_splits), BLOCK_D=block_d,
        )
    return out
