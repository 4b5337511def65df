"""Plain torch paged attention: the definition of correct, and the CPU runtime's fast path.

Every Triton kernel is tested against these functions, and the CPU engine calls them for every
layer of every step, so they are vectorised over tokens and heads (loops run only over
sequences, or over chunks of them) and compute in float32 whatever the storage dtype.

Layout (vLLM's): ``k_cache``/``v_cache`` are ``[num_blocks, block_size, num_kv_heads, head_dim]``;
token ``t`` of sequence ``s`` lives at ``cache[block_tables[s, t // block_size], t % block_size]``.
Attention reads *only* the cache: a step's new K/V must be written with ``write_kv_cache`` first,
and ``seq_lens`` counts every token of a sequence, cached context plus the new ones.
"""

from __future__ import annotations

import torch

# Upper bound on float32 elements materialised by one gathered K (or score) chunk: keeps the
# reference's memory flat when a batch mixes one 32K-token context with many short ones.
_CHUNK_ELEMS = 1 << 23


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def write_kv_cache_ref(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       slot_mapping: torch.Tensor) -> None:
    """Scatter ``k``/``v`` ``[num_tokens, num_kv_heads, head_dim]`` into their slots, in place.

    ``slot = block_id * block_size + offset``; a negative slot (padding) is skipped.
    Indexes by (block, offset) rather than a flat view so a non-contiguous cache (one layer
    sliced out of a bigger tensor) works too.
    """
    block_size = k_cache.shape[1]
    slots = slot_mapping.long()
    keep = slots >= 0
    if not bool(keep.all()):
        slots, k, v = slots[keep], k[keep], v[keep]
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = k.to(k_cache.dtype)
    v_cache[blocks, offsets] = v.to(v_cache.dtype)


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Contiguous ``[seq_len, num_kv_heads, head_dim]`` copy of one sequence's cached K or V."""
    block_size = cache.shape[1]
    blocks = block_table[: _cdiv(seq_len, block_size)].long()
    return cache[blocks].flatten(0, 1)[:seq_len]


def _decode_chunks(lens: list[int], per_token: int) -> list[tuple[int, int, int]]:
    """Split sequences into runs ``(start, stop, max_len)`` whose padded gather fits the budget."""
    chunks, start, longest = [], 0, 0
    for i, n in enumerate(lens):
        grown = max(longest, n)
        if i > start and (i - start + 1) * grown * per_token > _CHUNK_ELEMS:
            chunks.append((start, i, longest))
            start, grown = i, n
        longest = grown
    if lens:
        chunks.append((start, len(lens), longest))
    return chunks


def paged_decode_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                               num_splits: int | None = None) -> torch.Tensor:
    """One query token per sequence attending to its whole cached context.

    q, out: ``[num_seqs, num_heads, head_dim]``; GQA when num_heads is a multiple of
    num_kv_heads (query head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``).
    ``num_splits`` is accepted for signature parity with the Triton kernel and ignored:
    splitting the context is a scheduling choice, not part of the result.

    Sequences are processed in chunks, each gathered to a padded ``[n, max_len, ...]`` tensor and
    masked, so a batch costs a handful of torch ops rather than a few per sequence.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    lens = seq_lens.tolist()
    for start, stop, max_len in _decode_chunks(lens, num_kv_heads * head_dim):
        n, nb = stop - start, _cdiv(max_len, block_size)
        # Entries past a sequence's last block may be stale or padding: clamp, then mask.
        table = block_tables[start:stop, :nb].long().clamp(0, num_blocks - 1)
        k = k_cache[table].reshape(n, nb * block_size, num_kv_heads, head_dim).float()
        v = v_cache[table].reshape(n, nb * block_size, num_kv_heads, head_dim).float()
        qf = q[start:stop].float().view(n, num_kv_heads, group, head_dim)
        scores = torch.einsum("nhgd,nthd->nhgt", qf, k) * scale
        pos = torch.arange(nb * block_size, device=q.device)
        pad = pos[None, :] >= seq_lens[start:stop, None].to(q.device)
        scores.masked_fill_(pad[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        o = torch.einsum("nhgt,nthd->nhgd", probs, v)
        out[start:stop] = o.reshape(n, num_heads, head_dim).to(q.dtype)
    return out


def paged_prefill_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention for packed variable-length query chunks over a paged context.

    q, out: ``[total_q_tokens, num_heads, head_dim]``; sequence ``i`` owns rows
    ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` (``q_len`` tokens), which are its *last* ``q_len``
    positions out of ``seq_lens[i]``: the first ``seq_len - q_len`` were cached by an earlier
    chunk or a prefix-cache hit. Query at position ``p`` sees keys ``0..p``.
    Long chunks are split by query rows so the score matrix stays within a fixed budget.
    """
    total_q, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for i, seq_len in enumerate(lens):
        q_start, q_end = cu[i], cu[i + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        k = gather_kv(k_cache, block_tables[i], seq_len).float()
        v = gather_kv(v_cache, block_tables[i], seq_len).float()
        key_pos = torch.arange(seq_len, device=q.device)
        rows = max(1, _CHUNK_ELEMS // (num_heads * seq_len))
        for r0 in range(0, q_len, rows):
            r1 = min(q_len, r0 + rows)
            qf = q[q_start + r0:q_start + r1].float().view(r1 - r0, num_kv_heads, group, head_dim)
            scores = torch.einsum("qhgd,khd->hgqk", qf, k) * scale
            q_pos = torch.arange(seq_len - q_len + r0, seq_len - q_len + r1, device=q.device)
            future = key_pos[None, :] > q_pos[:, None]
            scores.masked_fill_(future, float("-inf"))
            o = torch.einsum("hgqk,khd->qhgd", torch.softmax(scores, dim=-1), v)
            out[q_start + r0:q_start + r1] = o.reshape(r1 - r0, num_heads, head_dim).to(q.dtype)
    return out
