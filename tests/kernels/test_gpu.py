"""Compiled kernels against the references on a CUDA device, at serving-sized shapes.

Excluded by default (``-m gpu`` selects them). They cover what CPU tests can't: the compiled
code path, bf16 tensor-core dots, long contexts with automatic split-K, and large ragged batches.
"""

from __future__ import annotations

import random

import pytest
import torch

import kernels
from kernels.paged_case import TOLERANCE, random_paged_kv
from kernels.reference import paged_decode_attention_ref, paged_prefill_attention_ref, write_kv_cache_ref

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Every dtype x head_dim, with block sizes and GQA groups (1, 2, 4, 8, 6) rotated through them:
# a covering set rather than the full product, since each variant costs a compile (~1 s).
_HEADS = [(8, 8), (16, 8), (32, 8), (32, 4), (12, 2)]
CASES = [(dt, hd, (8, 16, 32)[i % 3], *_HEADS[i % 5])
         for i, (dt, hd) in enumerate((dt, hd) for dt in DTYPES for hd in (64, 80, 96, 128))]


def _close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype,head_dim,block_size,num_heads,num_kv_heads", CASES)
def test_decode_on_gpu(dtype, head_dim, block_size, num_heads, num_kv_heads):
    rng = random.Random(head_dim * block_size + num_heads)
    lens = [1, block_size, block_size + 1, 4096, 6000] + [rng.randint(1, 3000) for _ in range(11)]
    case = random_paged_kv(lens, num_kv_heads, head_dim, block_size, dtype=dtype, device="cuda", seed=1)
    q = torch.randn(len(lens), num_heads, head_dim, device="cuda", dtype=dtype)
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, head_dim ** -0.5)
    ref = paged_decode_attention_ref(*args)
    for splits in (None, 1, 5):
        _close(kernels.paged_decode_attention(*args, num_splits=splits), ref, dtype)


@pytest.mark.parametrize("dtype,head_dim,block_size,num_heads,num_kv_heads", CASES)
def test_prefill_on_gpu(dtype, head_dim, block_size, num_heads, num_kv_heads):
    rng = random.Random(head_dim + block_size)
    shapes = [(2048, 2048), (3000, 512), (block_size + 1, 1), (700, 699), (5, 0)]
    shapes += [(s, rng.randint(1, s)) for s in (rng.randint(1, 2500) for _ in range(6))]
    case = random_paged_kv([s for s, _ in shapes], num_kv_heads, head_dim, block_size, dtype=dtype, device="cuda", seed=2)
    cu = torch.tensor([0] + [sum(q for _, q in shapes[:i + 1]) for i in range(len(shapes))], dtype=torch.int32, device="cuda")
    q = torch.randn(int(cu[-1]), num_heads, head_dim, device="cuda", dtype=dtype)
    args = (q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, head_dim ** -0.5)
    _close(kernels.paged_prefill_attention(*args), paged_prefill_attention_ref(*args), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_cache_on_gpu(dtype):
    num_blocks, block_size, heads, head_dim = 64, 16, 8, 128
    slots = torch.randperm(num_blocks * block_size, device="cuda")[:300].to(torch.int32)
    slots[::7] = -1
    k = torch.randn(300, heads, head_dim, device="cuda", dtype=dtype)
    v = torch.randn(300, heads, head_dim, device="cuda", dtype=dtype)
    caches = [torch.zeros(num_blocks, block_size, heads, head_dim, device="cuda", dtype=dtype) for _ in range(4)]
    kernels.write_kv_cache(k, v, caches[0], caches[1], slots)
    write_kv_cache_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])
