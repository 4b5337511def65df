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


def _gather_tokens(cache: torch.Tensor, blocks: torch.Tensor, length: int) -> torch.Tensor:
    """Float32 ``[n, length, num_kv_heads, head_dim]`` view of the first ``length`` tokens per row.

    ``index_select`` copies whole blocks (contiguous runs) and nothing else: the per-head matmuls
    below read this layout in place through strides, which BLAS accepts. (Advanced indexing
    plus einsum, which permutes into a fresh copy, was 2-3x slower on CPU.)
    """
    n, nb = blocks.shape
    _, block_size, num_kv_heads, head_dim = cache.shape
    rows = cache.index_select(0, blocks.reshape(-1)).view(n, nb * block_size, num_kv_heads, head_dim)
    return rows[:, :length].float()


def paged_decode_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                               num_splits: int | None = None) -> torch.Tensor:
    """One query token per sequence attending to its whole cached context.

    q, out: ``[num_seqs, num_heads, head_dim]``; GQA when num_heads is a multiple of
    num_kv_heads (query head ``h`` reads KV head ``h // (num_heads // num_kv_heads)``).
    ``num_splits`` is accepted for signature parity with the Triton kernel and ignored:
    splitting the context is a scheduling choice, not part of the result.

    Sequences are processed in chunks, each gathered to a padded ``[n, max_len, ...]`` tensor and
    masked, so a batch costs a few torch ops per KV head rather than per sequence.
    """
    num_seqs, num_heads, head_dim = q.shape
    num_blocks, block_size, num_kv_heads, _ = k_cache.shape
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    lens = seq_lens.tolist()
    for start, stop, max_len in _decode_chunks(lens, num_kv_heads * head_dim):
        # Entries past a sequence's last block may be stale or padding: clamp, then mask.
        table = block_tables[start:stop, :_cdiv(max_len, block_size)].long().clamp(0, num_blocks - 1)
        k = _gather_tokens(k_cache, table, max_len)
        v = _gather_tokens(v_cache, table, max_len)
        pad = torch.arange(max_len, device=q.device)[None, :] >= seq_lens[start:stop, None].to(q.device)
        qf = q[start:stop].float()
        for h in range(num_kv_heads):
            heads = slice(h * group, (h + 1) * group)
            scores = torch.bmm(qf[:, heads], k[:, :, h].transpose(1, 2)).mul_(scale)  # [n, group, max_len]
            scores.masked_fill_(pad[:, None, :], float("-inf"))
            out[start:stop, heads] = torch.bmm(torch.softmax(scores, dim=-1), v[:, :, h]).to(q.dtype)
    return out


def paged_prefill_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal attention for packed variable-length query chunks over a paged context.

    q, out: ``[total_q_tokens, num_heads, head_dim]``; sequence ``i`` owns rows
    ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` (``q_len`` tokens), which are its *last* ``q_len``
    positions out of ``seq_lens[i]``: the first ``seq_len - q_len`` were cached by an earlier
    chunk or a prefix-cache hit. Query at position ``p`` sees keys ``0..p``.
    Long chunks are split by query rows so the score matrix stays within a fixed budget, and
    each row chunk only multiplies against the keys its last query can see.
    """
    total_q, num_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    cu, lens = cu_seqlens_q.tolist(), seq_lens.tolist()
    for i, seq_len in enumerate(lens):
        q_start, q_len = cu[i], cu[i + 1] - cu[i]
        if q_len == 0:
            continue
        context = seq_len - q_len
        blocks = block_tables[i, :_cdiv(seq_len, block_size)].long()[None]
        k = _gather_tokens(k_cache, blocks, seq_len)[0]  # [seq_len, kv_heads, head_dim]
        v = _gather_tokens(v_cache, blocks, seq_len)[0]
        rows = max(1, _CHUNK_ELEMS // (num_heads * seq_len))
        for r0 in range(0, q_len, rows):
            r = min(q_len, r0 + rows) - r0
            visible = context + r0 + r  # keys the chunk's last query sees
            q_pos = torch.arange(context + r0, visible, device=q.device)
            future = torch.arange(visible, device=q.device)[None, :] > q_pos[:, None]  # [r, visible]
            qf = q[q_start + r0:q_start + r0 + r].float()
            for h in range(num_kv_heads):
                heads = slice(h * group, (h + 1) * group)
                qh = qf[:, heads].transpose(0, 1)  # [group, r, head_dim]
                scores = torch.matmul(qh, k[:visible, h].T).mul_(scale)  # [group, r, visible]
                scores.masked_fill_(future, float("-inf"))
                o = torch.matmul(torch.softmax(scores, dim=-1), v[:visible, h])  # [group, r, head_dim]
                out[q_start + r0:q_start + r0 + r, heads] = o.transpose(0, 1).to(q.dtype)
    return out
