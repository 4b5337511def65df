"""The SDPA backend (the CPU runtime's fast path) against the float32 torch reference.

Same paged layouts as the Triton tests: shuffled physical blocks, random data in spare and stale
slots, padding table entries pointing at real but unrelated blocks, ragged lengths on and just
past block edges, GQA groups that are not powers of two, chunks after cached context.
"""

from __future__ import annotations

import pytest
import torch

import kernels
from kernels.paged_case import random_paged_kv
from kernels.reference import paged_decode_attention_ref, paged_prefill_attention_ref, write_kv_cache_ref
from kernels.sdpa import SDPAPlan

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _q(num_tokens: int, num_heads: int, head_dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_tokens, num_heads, head_dim, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,block_size,num_heads,num_kv_heads", [
    (64, 16, 9, 3), (80, 8, 8, 2), (96, 32, 6, 6), (128, 16, 8, 1), (64, 4, 12, 4),
])
def test_decode_sdpa_matches_reference(dtype, head_dim, block_size, num_heads, num_kv_heads, close):
    lens = [1, block_size, block_size + 1, 3 * block_size - 1, 37, 3 * block_size]
    case = random_paged_kv(lens, num_kv_heads, head_dim, block_size, dtype=dtype, seed=7)
    # q as a strided slice of a fused QK projection, the way the model hands it over.
    qk = _q(len(lens), num_heads + num_kv_heads, head_dim, dtype, seed=8)
    q = qk[:, :num_heads]
    scale = head_dim ** -0.5
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, scale)
    out = kernels.paged_decode_attention(*args, backend="sdpa")
    assert out.dtype == dtype and out.shape == q.shape
    close(out, paged_decode_attention_ref(*args), dtype)


def test_decode_sdpa_groups_a_long_context_apart_from_short_ones(monkeypatch, close):
    """Padded gathers stay under the element budget: a long context gets its own group."""
    from kernels import reference
    monkeypatch.setattr(reference, "_CHUNK_ELEMS", 4 * 40 * 2 * 16)
    lens = [5, 7, 3, 150, 6, 9]
    case = random_paged_kv(lens, 2, 16, 8, seed=20)
    q = _q(len(lens), 4, 16, torch.float32, seed=21)
    plan = SDPAPlan.build(8, torch.empty(0, dtype=torch.int64), case.block_tables, lens,
                          torch.empty(0, 0, dtype=torch.int32), [], [], kv_row_elems=2 * 16)
    assert len(plan.decodes) > 1 and max(g.slots.shape[1] for g in plan.decodes if 3 not in range(g.start, g.stop)) < 150
    want = paged_decode_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.25)
    close(plan.decode(q, case.k_cache, case.v_cache, 0.25), want, torch.float32)


def test_decode_sdpa_equal_lengths_need_no_mask(close):
    """All sequences the same length: the plan drops the mask; results must not change."""
    case = random_paged_kv([24, 24, 24], 2, 64, 8, seed=9)
    plan = SDPAPlan.build(8, torch.empty(0, dtype=torch.int64), case.block_tables, [24, 24, 24],
                          torch.empty(0, 0, dtype=torch.int32), [], [])
    assert len(plan.decodes) == 1 and plan.decodes[0].mask is None
    q = _q(3, 4, 64, torch.float32, seed=10)
    want = paged_decode_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.125)
    close(plan.decode(q, case.k_cache, case.v_cache, 0.125), want, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,block_size,num_heads,num_kv_heads", [(64, 8, 4, 2), (80, 16, 9, 3), (96, 32, 4, 1)])
def test_prefill_sdpa_matches_reference(dtype, head_dim, block_size, num_heads, num_kv_heads, close):
    # (seq_len, q_len): whole prompt (causal), chunk after cached context, one token after a
    # prefix hit, block-edge chunks, an empty entry.
    shapes = [(19, 19), (40, 7), (block_size, 1), (2 * block_size + 1, block_size + 1), (5, 0), (3, 3)]
    case = random_paged_kv([s for s, _ in shapes], num_kv_heads, head_dim, block_size, dtype=dtype, seed=11)
    cu = torch.tensor([0] + [sum(ql for _, ql in shapes[:i + 1]) for i in range(len(shapes))], dtype=torch.int32)
    q = _q(int(cu[-1]), num_heads, head_dim, dtype, seed=12)
    args = (q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.3)
    out = kernels.paged_prefill_attention(*args, backend="sdpa")
    close(out, paged_prefill_attention_ref(*args), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_plan_write_equals_reference_write(dtype):
    num_blocks, block_size, heads, dim = 6, 8, 3, 16
    slots = torch.randperm(num_blocks * block_size, generator=torch.Generator().manual_seed(15))[:13]
    kv = _q(13, 2 * heads, dim, torch.float32, seed=16).to(dtype)
    k, v = kv[:, :heads], kv[:, heads:]  # strided, as the model's split leaves them
    k_cache, v_cache = (_q(num_blocks * block_size, heads, dim, torch.float32, seed=17 + i).to(dtype).view(
        num_blocks, block_size, heads, dim) for i in range(2))
    caches = [k_cache, v_cache, k_cache.clone(), v_cache.clone()]
    plan = SDPAPlan.build(block_size, slots, torch.empty(0, 0, dtype=torch.int32), [],
                          torch.empty(0, 0, dtype=torch.int32), [], [])
    plan.write(k, v, caches[0], caches[1])
    write_kv_cache_ref(k, v, caches[2], caches[3], slots)
    assert torch.equal(caches[0], caches[2]) and torch.equal(caches[1], caches[3])


def test_one_plan_serves_a_mixed_step_like_the_runtime(close):
    """Decodes and prefill chunks of one step share a plan; each group matches the reference."""
    block_size, kv_heads, heads, dim = 4, 2, 6, 16
    decode_lens, prefill = [5, 9, 1], [(11, 4), (6, 6)]  # (seq_len, q_len)
    case = random_paged_kv(decode_lens + [s for s, _ in prefill], kv_heads, dim, block_size, seed=18)
    nd = len(decode_lens)
    plan = SDPAPlan.build(block_size, torch.empty(0, dtype=torch.int64), case.block_tables[:nd], decode_lens,
                          case.block_tables[nd:], [ql for _, ql in prefill], [s for s, _ in prefill])
    q = _q(nd + 10, heads, dim, torch.float32, seed=19)
    want_d = paged_decode_attention_ref(q[:nd], case.k_cache, case.v_cache, case.block_tables[:nd],
                                        case.seq_lens[:nd], 0.25)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    want_p = paged_prefill_attention_ref(q[nd:], case.k_cache, case.v_cache, case.block_tables[nd:], cu,
                                         case.seq_lens[nd:], 0.25)
    close(plan.decode(q[:nd], case.k_cache, case.v_cache, 0.25), want_d, torch.float32)
    close(plan.prefill(q[nd:], case.k_cache, case.v_cache, 0.25), want_p, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_short_queries_share_one_padded_call(dtype, close):
    """Speculative verification (a few queries over a long context) and tiny chunks are batched
    into one SDPA call with per-sequence causal offsets; a long chunk keeps its own call."""
    # (seq_len, q_len): verifications of 5, 3 and 2 tokens, a 1-token chunk, a whole 4-token
    # prompt, and a 20-token chunk (over SHORT_QUERY: its own call).
    shapes = [(37, 5), (12, 3), (64, 2), (9, 1), (4, 4), (50, 20)]
    case = random_paged_kv([n for n, _ in shapes], 2, 32, 8, dtype=dtype, seed=22)
    cu = torch.tensor([0] + [sum(q for _, q in shapes[:i + 1]) for i in range(len(shapes))], dtype=torch.int32)
    q = _q(int(cu[-1]), 6, 32, dtype, seed=23)
    plan = SDPAPlan.build(8, torch.empty(0, dtype=torch.int64), torch.empty(0, 0, dtype=torch.int32), [],
                          case.block_tables, [q for _, q in shapes], [n for n, _ in shapes])
    assert plan.short is not None and plan.short.rows.shape == (5, 5) and len(plan.prefills) == 1
    want = paged_prefill_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.2)
    close(plan.prefill(q, case.k_cache, case.v_cache, 0.2), want, dtype)
