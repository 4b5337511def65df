"""The torch references against dense SDPA on gathered contiguous K/V, plus the public boundary."""

from __future__ import annotations

import random

import pytest
import torch

import kernels
from kernels import reference
from kernels.paged_case import random_paged_kv, sdpa_dense
from kernels.reference import paged_decode_attention_ref, paged_prefill_attention_ref, write_kv_cache_ref

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _q(num_tokens: int, num_heads: int, head_dim: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(num_tokens, num_heads, head_dim, generator=gen).to(dtype)


def test_write_kv_cache_ref_scatters_and_skips_negative_slots():
    k_cache = torch.zeros(4, 8, 2, 16)
    v_cache = torch.zeros(4, 8, 2, 16)
    k, v = torch.randn(5, 2, 16), torch.randn(5, 2, 16)
    slots = torch.tensor([3, 8 * 2 + 7, -1, 8 * 3, 9], dtype=torch.int32)
    write_kv_cache_ref(k, v, k_cache, v_cache, slots)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            assert torch.equal(k_cache[s // 8, s % 8], k[i])
            assert torch.equal(v_cache[s // 8, s % 8], v[i])
    written = sum(1 for s in slots.tolist() if s >= 0)
    assert int((k_cache.abs().sum(-1).sum(-1) > 0).sum()) == written  # the skipped row went nowhere


def test_gather_matches_written_tokens():
    """A sequence written token by token through its slots reads back in order."""
    case = random_paged_kv([13], num_kv_heads=2, head_dim=8, block_size=4, seed=1)
    fresh = torch.randn(13, 2, 8)
    table = case.block_tables[0].long()
    slots = torch.tensor([int(table[t // 4]) * 4 + t % 4 for t in range(13)])
    write_kv_cache_ref(fresh, fresh, case.k_cache, case.v_cache, slots)
    k, v = case.dense(0)
    assert torch.equal(k, fresh) and torch.equal(v, fresh)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,block_size,num_heads,num_kv_heads", [
    (64, 16, 4, 4), (80, 8, 8, 2), (96, 32, 6, 3), (128, 16, 8, 1),
])
def test_decode_ref_matches_sdpa(dtype, head_dim, block_size, num_heads, num_kv_heads, close):
    lens = [1, block_size, block_size + 1, 3 * block_size, 37]
    case = random_paged_kv(lens, num_kv_heads, head_dim, block_size, dtype=dtype, seed=2)
    q = _q(len(lens), num_heads, head_dim, dtype, seed=3)
    scale = head_dim ** -0.5
    out = paged_decode_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, scale)
    assert out.dtype == dtype and out.shape == q.shape
    for i in range(len(lens)):
        k, v = case.dense(i)
        want = sdpa_dense(q[i:i + 1], k, v, scale)[0]
        close(out[i], want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,block_size,num_heads,num_kv_heads", [(64, 8, 4, 2), (80, 16, 8, 8), (96, 32, 4, 1)])
def test_prefill_ref_matches_sdpa(dtype, head_dim, block_size, num_heads, num_kv_heads, close):
    # (seq_len, q_len): whole prompt, chunk after cached context, single token, block-edge cases.
    shapes = [(19, 19), (40, 7), (block_size, 1), (2 * block_size + 1, block_size + 1), (5, 0)]
    case = random_paged_kv([s for s, _ in shapes], num_kv_heads, head_dim, block_size, dtype=dtype, seed=4)
    cu = torch.tensor([0] + [sum(ql for _, ql in shapes[:i + 1]) for i in range(len(shapes))], dtype=torch.int32)
    q = _q(int(cu[-1]), num_heads, head_dim, dtype, seed=5)
    scale = 0.3
    out = paged_prefill_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, scale)
    for i in range(len(shapes)):
        k, v = case.dense(i)
        rows = slice(int(cu[i]), int(cu[i + 1]))
        close(out[rows], sdpa_dense(q[rows], k, v, scale), dtype)


def test_decode_ref_equals_prefill_ref_with_one_query():
    lens = [5, 16, 17, 33]
    case = random_paged_kv(lens, 2, 16, 8, seed=6)
    q = _q(len(lens), 4, 16, torch.float32, seed=7)
    cu = torch.arange(len(lens) + 1, dtype=torch.int32)
    dec = paged_decode_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.25)
    pre = paged_prefill_attention_ref(q, case.k_cache, case.v_cache, case.block_tables, cu, case.seq_lens, 0.25)
    torch.testing.assert_close(dec, pre, atol=1e-6, rtol=0)


def test_reference_chunking_does_not_change_results(monkeypatch):
    """Force tiny memory chunks: sequences and query rows split across chunks give the same answer."""
    rng = random.Random(8)
    lens = [rng.randint(1, 60) for _ in range(9)]
    case = random_paged_kv(lens, 2, 16, 8, seed=8)
    q = _q(len(lens), 4, 16, torch.float32, seed=9)
    qp = _q(sum(lens), 4, 16, torch.float32, seed=10)
    cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32)
    args = (case.k_cache, case.v_cache, case.block_tables)
    dec = paged_decode_attention_ref(q, *args, case.seq_lens, 0.25)
    pre = paged_prefill_attention_ref(qp, *args, cu, case.seq_lens, 0.25)
    monkeypatch.setattr(reference, "_CHUNK_ELEMS", 2000)
    assert len(reference._decode_chunks(lens, 32)) > 3
    torch.testing.assert_close(paged_decode_attention_ref(q, *args, case.seq_lens, 0.25), dec, atol=1e-6, rtol=0)
    torch.testing.assert_close(paged_prefill_attention_ref(qp, *args, cu, case.seq_lens, 0.25), pre, atol=1e-6, rtol=0)


def test_dispatcher_uses_reference_on_cpu(no_interpret):
    case = random_paged_kv([9, 3], 1, 8, 8, seed=11)
    q = _q(2, 2, 8, torch.float32, seed=12)
    args = (q, case.k_cache, case.v_cache, case.block_tables, case.seq_lens, 0.5)
    assert not kernels.use_triton(q.device)
    torch.testing.assert_close(kernels.paged_decode_attention(*args), paged_decode_attention_ref(*args), atol=0, rtol=0)
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        kernels.paged_decode_attention(*args, backend="triton")
    with pytest.raises(ValueError, match="backend"):
        kernels.paged_decode_attention(*args, backend="cuda")


def test_public_boundary_rejects_bad_shapes():
    case = random_paged_kv([9, 3], 2, 8, 8, seed=13)
    kc, vc, bt, sl = case.k_cache, case.v_cache, case.block_tables, case.seq_lens
    q = torch.randn(2, 4, 8)
    bad_calls = {
        "head_dim": lambda: kernels.paged_decode_attention(torch.randn(2, 4, 16), kc, vc, bt, sl, 1.0),
        "multiple": lambda: kernels.paged_decode_attention(torch.randn(2, 3, 8), kc, vc, bt, sl, 1.0),
        "dtype": lambda: kernels.paged_decode_attention(q.half(), kc, vc, bt, sl, 1.0),
        "num_seqs": lambda: kernels.paged_decode_attention(q, kc, vc, bt[:1], sl, 1.0),
        "capacity": lambda: kernels.paged_decode_attention(q, kc, vc, bt, torch.tensor([9, 99], dtype=torch.int32), 1.0),
        ">= 1": lambda: kernels.paged_decode_attention(q, kc, vc, bt, torch.tensor([9, 0], dtype=torch.int32), 1.0),
        "num_splits": lambda: kernels.paged_decode_attention(q, kc, vc, bt, sl, 1.0, num_splits=0),
        "k_cache": lambda: kernels.paged_decode_attention(q, kc[0], vc[0], bt, sl, 1.0),
        "q_len": lambda: kernels.paged_prefill_attention(torch.randn(12, 4, 8), kc, vc, bt,
                                                         torch.tensor([0, 2, 12], dtype=torch.int32), sl, 1.0),
        "total_q_tokens": lambda: kernels.paged_prefill_attention(q, kc, vc, bt, torch.tensor([0, 1, 3], dtype=torch.int32), sl, 1.0),
        "slot_mapping": lambda: kernels.write_kv_cache(torch.randn(3, 2, 8), torch.randn(3, 2, 8), kc, vc,
                                                       torch.tensor([0, 1], dtype=torch.int32)),
        "num_blocks": lambda: kernels.write_kv_cache(torch.randn(1, 2, 8), torch.randn(1, 2, 8), kc, vc,
                                                     torch.tensor([10_000], dtype=torch.int32)),
    }
    for needle, call in bad_calls.items():
        with pytest.raises(ValueError) as err:
            call()
        assert needle in str(err.value), (needle, str(err.value))
