"""Triton kernels against the torch references, run on CPU by Triton's interpreter.

Shapes are tiny (the interpreter takes a fraction of a second per launch) but chosen to hit the
edges: ragged lengths ending exactly on and just past a block boundary, shuffled physical blocks,
GQA groups that are not powers of two, head dims that need padding, empty and uneven splits.
"""

from __future__ import annotations

import random

import pytest
import torch

import kernels
from kernels import _triton_util
from kernels.paged_case import random_paged_kv
from kernels.reference import paged_decode_attention_ref, paged_prefill_attention_ref, write_kv_cache_ref
from kernels.triton_decode import DecodeConfig, paged_decode_attention_triton
from kernels.triton_prefill import PrefillConfig, paged_prefill_attention_triton

pytestmark = pytest.mark.usefixtures("interpret")

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _lengths(block_size: int, seed: int, extra: int = 3, longest: int = 130) -> list[int]:
    """Block-boundary lengths (1, bs, bs + 1, 2bs - 1) plus a few random ragged ones."""
    rng = random.Random(seed)
    return [1, block_size, block_size + 1, 2 * block_size - 1] + [rng.randint(2, longest) for _ in range(extra)]


def _randn(*shape: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_kernels_follow_the_library_mode():
    """Kernels were imported with TRITON_INTERPRET unset, yet match triton's interpreted library."""
    from triton.runtime.interpreter import InterpretedFunction
    from kernels import triton_decode
    assert _triton_util.INTERPRETED
    assert isinstance(triton_decode._decode_kernel, InterpretedFunction)


def test_dispatcher_routes_cpu_tensors_to_triton_only_when_asked(monkeypatch):
    cpu = torch.device("cpu")
    assert kernels.use_triton(cpu) and kernels.use_triton(cpu, "triton")
    assert not kernels.use_triton(cpu, "torch")
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not kernels.use_triton(cpu)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_write_kv_cache_matches_reference(dtype):
    num_blocks, block_size, heads, head_dim = 6, 8, 2, 80
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(1))[:11].to(torch.int32)
    slots[[2, 7]] = -1  # padding tokens
    # K/V as strided slices of a fused projection, the way a model produces them.
    kv = _randn(11, 2 * heads * head_dim + 16, dtype=dtype, seed=2)
    k = kv[:, :heads * head_dim].view(11, heads, head_dim)
    v = kv[:, heads * head_dim:2 * heads * head_dim].view(11, heads, head_dim)
    caches = [_randn(num_blocks, block_size, heads, head_dim, dtype=dtype, seed=3) for _ in range(4)]
    kernels.write_kv_cache(k, v, caches[0], caches[1], slots, backend="triton")
    write_kv_cache_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


DECODE_CASES = [
    # dtype, head_dim, block_size, num_heads, num_kv_heads, num_splits
    (F32, 64, 16, 4, 4, 1),
    (F32, 96, 8, 8, 1, 3),
    (F16, 80, 16, 8, 2, 1),
    (F16, 128, 32, 16, 2, 4),
    (BF16, 64, 8, 12, 4, 2),
    (BF16, 96, 32, 6, 6, 1),
    (F16, 64, 16, 6, 2, None),
]


@pytest.mark.parametrize("dtype,head_dim,block_size,num_heads,num_kv_heads,num_splits", DECODE_CASES)
def test_decode_matches_reference(dtype, head_dim, block_size, num_heads, num_kv_heads, num_splits, close):
    lens = _lengths(block_size, seed=head_dim + block_size)
    case = random_paged_kv(lens, num_kv_heads, head_dim, block_size, dtype=dtype, seed=4)
    q = _randn(len(lens), num_heads, head_dim, dtype=dtype, seed=5)
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, head_dim ** -0.5)
    out = kernels.paged_decode_attention(*args, num_splits=num_splits)  # auto: Triton under the interpreter
    close(out, paged_decode_attention_ref(*args), dtype)


def test_decode_split_count_does_not_change_the_answer(close):
    """Short tiles, many splits (some empty for the length-1 sequence) and no split agree."""
    lens = [1, 16, 17, 95]
    case = random_paged_kv(lens, 2, 64, 16, dtype=F16, seed=6)
    q = _randn(len(lens), 8, 64, dtype=F16, seed=7)
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.125)
    small = DecodeConfig(block_n=16)
    want = paged_decode_attention_ref(*args)
    for splits in (1, 2, 7):
        close(paged_decode_attention_triton(*args, num_splits=splits, config=small), want, F16)


def test_decode_extreme_scores_stay_finite(close):
    """Scores around +-1e4: the online softmax must rescale, not overflow."""
    lens = [40, 9]
    case = random_paged_kv(lens, 1, 64, 8, seed=8)
    q = _randn(2, 2, 64, dtype=F32, seed=9) * 300.0
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 1.0)
    out = paged_decode_attention_triton(*args, num_splits=3, config=DecodeConfig(block_n=16))
    assert torch.isfinite(out).all()
    close(out, paged_decode_attention_ref(*args), F32)


def _packed(shapes: list[tuple[int, int]]) -> torch.Tensor:
    return torch.tensor([0] + [sum(q for _, q in shapes[:i + 1]) for i in range(len(shapes))], dtype=torch.int32)


PREFILL_CASES = [
    # dtype, head_dim, block_size, num_heads, num_kv_heads, config
    (F32, 64, 16, 4, 4, PrefillConfig()),
    (F32, 80, 8, 6, 2, PrefillConfig(block_m=16, block_n=16)),
    (F16, 96, 32, 8, 1, PrefillConfig(block_m=32, block_n=16)),
    (F16, 128, 16, 4, 2, PrefillConfig()),
    (BF16, 64, 8, 12, 4, PrefillConfig(block_m=32, block_n=32)),
    (BF16, 80, 16, 2, 2, PrefillConfig(block_m=16, block_n=16)),
]


@pytest.mark.parametrize("dtype,head_dim,block_size,num_heads,num_kv_heads,config", PREFILL_CASES)
def test_prefill_matches_reference(dtype, head_dim, block_size, num_heads, num_kv_heads, config, close):
    rng = random.Random(head_dim * block_size)
    # (seq_len, q_len): whole prompts, chunks after cached context (chunked prefill / prefix
    # hits), block-boundary ends, an empty query range, and random ragged chunks.
    shapes = [(23, 23), (block_size, block_size), (block_size + 1, 1), (2 * block_size, block_size + 1), (9, 0)]
    shapes += [(s, rng.randint(1, s)) for s in (rng.randint(2, 80) for _ in range(2))]
    rng.shuffle(shapes)
    case = random_paged_kv([s for s, _ in shapes], num_kv_heads, head_dim, block_size, dtype=dtype, seed=10)
    cu = _packed(shapes)
    q = _randn(int(cu[-1]), num_heads, head_dim, dtype=dtype, seed=11)
    args = (q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.7 * head_dim ** -0.5)
    close(paged_prefill_attention_triton(*args, config=config), paged_prefill_attention_ref(*args), dtype)


def test_prefill_diagonal_at_every_offset(close):
    """Cached context of every length mod the key tile: the unmasked/masked tile boundary moves
    through every position, so a tile that needs the causal mask can't slip through unmasked."""
    tile = 16
    shapes = [(c + 5, 5) for c in range(tile)] + [(c + 2 * tile, 2 * tile) for c in (0, 7, tile - 1)]
    case = random_paged_kv([s for s, _ in shapes], 1, 64, 8, dtype=F32, seed=19)
    cu = _packed(shapes)
    q = _randn(int(cu[-1]), 2, 64, dtype=F32, seed=20)
    args = (q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.125)
    out = paged_prefill_attention_triton(*args, config=PrefillConfig(block_m=tile, block_n=tile))
    close(out, paged_prefill_attention_ref(*args), F32)


def test_prefill_with_one_query_equals_decode(close):
    lens = [3, 16, 33]
    case = random_paged_kv(lens, 2, 64, 16, dtype=F16, seed=12)
    q = _randn(3, 4, 64, dtype=F16, seed=13)
    cu = torch.arange(4, dtype=torch.int32)
    pre = kernels.paged_prefill_attention(q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.125)
    dec = kernels.paged_decode_attention(q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.125)
    close(pre, dec, F16)


def test_kernels_accept_strided_cache_and_queries(close):
    """One layer's K and V sliced from a fused [num_blocks, 2, ...] buffer; q sliced from qkv."""
    lens, heads, kv_heads, dim, bs = [12, 17], 4, 2, 64, 8
    case = random_paged_kv(lens, kv_heads, dim, bs, seed=14)
    fused = torch.stack([case.k_cache, case.v_cache], dim=1)
    k_cache, v_cache = fused[:, 0], fused[:, 1]
    assert not k_cache.is_contiguous()
    qkv = _randn(sum(lens), (heads + 2 * kv_heads) * dim, dtype=F32, seed=15)
    q = qkv[:, :heads * dim].view(-1, heads, dim)
    cu = _packed([(n, n) for n in lens])
    args = (q, k_cache, v_cache, case.block_tables, cu, case.seq_lens, 0.125)
    close(kernels.paged_prefill_attention(*args), paged_prefill_attention_ref(*args), F32)
    q_dec = q[cu[1:].long() - 1]
    dargs = (q_dec, k_cache, v_cache, case.block_tables, case.seq_lens, 0.125)
    close(kernels.paged_decode_attention(*dargs, num_splits=2), paged_decode_attention_ref(*dargs), F32)


def test_write_then_attend_round_trip(close):
    """A prompt written by the Triton scatter then read by Triton prefill equals dense attention."""
    from kernels.paged_case import sdpa_dense
    seq_len, heads, kv_heads, dim, bs = 21, 4, 1, 64, 8
    k, v = _randn(seq_len, kv_heads, dim, dtype=F32, seed=16), _randn(seq_len, kv_heads, dim, dtype=F32, seed=17)
    q = _randn(seq_len, heads, dim, dtype=F32, seed=18)
    table = torch.tensor([[4, 0, 2, 5]], dtype=torch.int32)
    slots = torch.tensor([int(table[0, t // bs]) * bs + t % bs for t in range(seq_len)], dtype=torch.int32)
    k_cache, v_cache = torch.zeros(6, bs, kv_heads, dim), torch.zeros(6, bs, kv_heads, dim)
    kernels.write_kv_cache(k, v, k_cache, v_cache, slots)
    cu, lens = torch.tensor([0, seq_len], dtype=torch.int32), torch.tensor([seq_len], dtype=torch.int32)
    out = kernels.paged_prefill_attention(q, k_cache, v_cache, table, cu, lens, 0.125)
    close(out, sdpa_dense(q, k, v, 0.125), F32)
