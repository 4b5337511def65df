"""Triton ``write_kv_cache``: scatter a step's new K/V rows into their paged slots.

One program per (token, KV head) copies ``head_dim`` contiguous values for K and V; the copy is
a pure bandwidth op, so its only job is to skip padding slots (negative) without a host sync.
"""

from __future__ import annotations

import torch
import triton.language as tl  # type: ignore[import-untyped]  # triton ships no type information

from kernels._triton_util import jit, pow2


@jit
def _write_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
                     stride_kt, stride_kh, stride_vt, stride_vh,
                     stride_cb, stride_cs, stride_ch,
                     stride_vcb, stride_vcs, stride_vch,
                     head_dim, block_size,
                     BLOCK_D: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    if slot < 0:
        return
    block = slot // block_size
    offset = slot % block_size
    d = tl.arange(0, BLOCK_D)
    mask = d < head_dim
    k = tl.load(k_ptr + token * stride_kt + head * stride_kh + d, mask=mask)
    v = tl.load(v_ptr + token * stride_vt + head * stride_vh + d, mask=mask)
    tl.store(k_cache_ptr + block * stride_cb + offset * stride_cs + head * stride_ch + d,
             k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + block * stride_vcb + offset * stride_vcs + head * stride_vch + d,
             v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def write_kv_cache_triton(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          slot_mapping: torch.Tensor) -> None:
    """Launch the scatter; arguments are assumed checked by ``kernels.write_kv_cache``."""
    num_tokens, num_kv_heads, head_dim = k.shape
    if k.stride(-1) != 1 or v.stride(-1) != 1:
        k, v = k.contiguous(), v.contiguous()
    _write_kv_kernel[(num_tokens, num_kv_heads)](
        k, v, k_cache, v_cache, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        head_dim, k_cache.shape[1],
        BLOCK_D=pow2(head_dim),
    )
