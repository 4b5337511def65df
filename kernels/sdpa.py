"""Paged attention on a CPU by gathering through the block table, then one fused SDPA call.

The torch reference (``reference.py``) is written to be obviously right: float32 everywhere, a
loop over KV heads, explicit scores. On a CPU that costs a dozen small ops per KV head per layer,
and a small model on a CPU pays per op, not per FLOP (in bfloat16 the reference took ~70 ms of a
~100 ms SmolLM2 decode step). This backend does the same math in two gathers and one
``torch.nn.functional.scaled_dot_product_attention`` call per layer and per prefill sequence:

- Everything that depends only on the step (gather indices from block tables, padding and causal
  masks, the cache slots of new tokens) is computed once in a :class:`SDPAPlan` and reused by
  every layer, as vLLM's attention-metadata builders do.
- Decode: a GQA group's query heads are folded into SDPA's query-length axis
  (``[seqs, kv_heads, group, head_dim]``), so K/V are read once per KV head, never repeated.
- Prefill chunks: each sequence's queries are its last ``q_len`` positions; with no cached
  context the mask is plain causal (``is_causal``), otherwise an explicit offset-causal mask.

It is a third implementation of the same contract (layout, ``seq_lens`` convention, reading new
K/V from the cache), tested against the reference like the Triton kernels are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from kernels.reference import _decode_chunks, write_kv_cache_ref


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _token_slots(table: torch.Tensor, length: int, block_size: int) -> torch.Tensor:
    """Flat cache slots (``block * block_size + offset``) of tokens ``0..length`` per table row."""
    tok = torch.arange(length, device=table.device)
    return table[..., tok // block_size].long() * block_size + tok % block_size


@dataclass
class _PrefillSeq:
    q_start: int
    q_len: int
    slots: torch.Tensor  # [seq_len] int64
    mask: Optional[torch.Tensor]  # [q_len, seq_len] bool, None = causal from position 0


@dataclass
class _DecodeGroup:
    """Consecutive decodes gathered together, padded to the longest of them."""

    start: int
    stop: int
    slots: torch.Tensor  # [stop - start, max_len] int64
    mask: Optional[torch.Tensor]  # [stop - start, 1, 1, max_len] bool, None = no padding


@dataclass
class _ShortQueryGroup:
    """Prefill-group sequences with few queries (speculative verification, tiny chunks) batched
    into one padded SDPA call: queries padded to the longest, keys to the longest context."""

    rows: torch.Tensor  # [n, max_q] packed q rows (padding repeats a sequence's last row)
    valid: torch.Tensor  # [n, max_q] bool: real query rows
    slots: torch.Tensor  # [n, max_len] int64
    mask: torch.Tensor  # [n, 1, max_q, max_len] bool: causal with each sequence's offset, padding


#: Prefill-group sequences with at most this many queries (and this much context) share one
#: padded SDPA call: speculative verification and tiny chunks, where a call per sequence per
#: layer would cost more than the padding.
SHORT_QUERY = 16
SHORT_CONTEXT = 4096


@dataclass
class SDPAPlan:
    """Per-step indices shared by every layer: decodes first, then prefill chunks.

    Decodes are gathered in groups whose padded K (or V) copy stays under the reference's
    element budget, so one 32K-token context among many short ones does not pad them all."""

    block_size: int
    slot_mapping: torch.Tensor  # [num_tokens] int64, where the step's new K/V go
    num_decode_tokens: int
    decodes: list[_DecodeGroup] = field(default_factory=list)
    prefills: list[_PrefillSeq] = field(default_factory=list)
    short: Optional[_ShortQueryGroup] = None

    @classmethod
    def build(cls, block_size: int, slot_mapping: torch.Tensor, decode_block_tables: torch.Tensor,
              decode_seq_lens: list[int], prefill_block_tables: torch.Tensor, prefill_q_lens: list[int],
              prefill_seq_lens: list[int], kv_row_elems: int = 1) -> "SDPAPlan":
        """Tables are int tensors ``[seqs, max_blocks]`` (padding entries may be anything in range);
        lengths are Python lists so no device sync is needed to size the gathers.
        ``kv_row_elems`` (kv_heads * head_dim) sizes the decode groups."""
        dev = slot_mapping.device
        plan = cls(block_size, slot_mapping.long(), len(decode_seq_lens))
        for start, stop, longest in _decode_chunks(decode_seq_lens, kv_row_elems):
            table = decode_block_tables[start:stop, :_cdiv(longest, block_size)]
            mask = None
            if min(decode_seq_lens[start:stop]) < longest:
                lens = torch.tensor(decode_seq_lens[start:stop], device=dev)
                mask = (torch.arange(longest, device=dev)[None, :] < lens[:, None])[:, None, None, :]
            plan.decodes.append(_DecodeGroup(start, stop, _token_slots(table, longest, block_size), mask))
        q_start = 0
        short: list[tuple[int, int, int, int]] = []  # (table row, q_start, q_len, seq_len)
        for i, (q_len, seq_len) in enumerate(zip(prefill_q_lens, prefill_seq_lens)):
            if 0 < q_len <= SHORT_QUERY and seq_len <= SHORT_CONTEXT:
                short.append((i, q_start, q_len, seq_len))
            elif q_len > 0:
                plan.prefills.append(_prefill_seq(prefill_block_tables[i], q_start, q_len, seq_len, block_size))
            q_start += q_len
        if len(short) > 1:
            plan.short = _short_group(short, prefill_block_tables, block_size, dev)
        elif short:  # one alone gains nothing from padding
            i, q0, q_len, seq_len = short[0]
            plan.prefills.append(_prefill_seq(prefill_block_tables[i], q0, q_len, seq_len, block_size))
        return plan

    def write(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        """Store the step's new K/V (the plan's slots are all valid, so one index_copy_ each)."""
        if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
            write_kv_cache_ref(k, v, k_cache, v_cache, self.slot_mapping)
            return
        _, _, heads, dim = k_cache.shape
        k_cache.view(-1, heads, dim).index_copy_(0, self.slot_mapping, k.to(k_cache.dtype))
        v_cache.view(-1, heads, dim).index_copy_(0, self.slot_mapping, v.to(v_cache.dtype))

    def decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q ``[num_decodes, heads, dim]`` -> out, same shape."""
        _, heads, dim = q.shape
        kv_heads = k_cache.shape[2]
        outs = []
        for g in self.decodes:
            k, v = _gather(k_cache, g.slots), _gather(v_cache, g.slots)  # [rows, kv_heads, L, dim]
            qg = q[g.start:g.stop].reshape(g.stop - g.start, kv_heads, heads // kv_heads, dim)
            o = F.scaled_dot_product_attention(qg, k.to(q.dtype), v.to(q.dtype), attn_mask=g.mask, scale=scale)
            outs.append(o.reshape(g.stop - g.start, heads, dim))
        if len(outs) == 1:
            return outs[0]
        return torch.cat(outs) if outs else torch.empty_like(q)

    def prefill(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, scale: float) -> torch.Tensor:
        """q ``[num_prefill_tokens, heads, dim]`` (rows rebased to the prefill group) -> out."""
        out = torch.empty_like(q)
        gqa = q.shape[1] != k_cache.shape[2]
        for seq in self.prefills:
            rows = slice(seq.q_start, seq.q_start + seq.q_len)
            k = _gather(k_cache, seq.slots[None]).to(q.dtype)  # [1, kv_heads, seq_len, dim]
            v = _gather(v_cache, seq.slots[None]).to(q.dtype)
            qs = q[rows].transpose(0, 1)[None]  # [1, heads, q_len, dim]
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=seq.mask, is_causal=seq.mask is None,
                                               scale=scale, enable_gqa=gqa)
            out[rows] = o[0].transpose(0, 1)
        if self.short is not None:
            g = self.short
            n, max_q = g.rows.shape
            qs = q.index_select(0, g.rows.reshape(-1)).view(n, max_q, q.shape[1], q.shape[2]).transpose(1, 2)
            k, v = _gather(k_cache, g.slots).to(q.dtype), _gather(v_cache, g.slots).to(q.dtype)
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=g.mask, scale=scale, enable_gqa=gqa)
            o = o.transpose(1, 2)[g.valid]  # [real queries, heads, dim], row-major = g.rows order
            out[g.rows[g.valid]] = o
        return out


def _prefill_seq(table: torch.Tensor, q_start: int, q_len: int, seq_len: int, block_size: int) -> _PrefillSeq:
    """One sequence's own SDPA call: its last ``q_len`` of ``seq_len`` positions as queries."""
    slots = _token_slots(table[:_cdiv(seq_len, block_size)], seq_len, block_size)
    mask = None
    if seq_len > q_len:  # cached context: causal from each query's own position
        q_pos = torch.arange(seq_len - q_len, seq_len, device=table.device)
        mask = torch.arange(seq_len, device=table.device)[None, :] <= q_pos[:, None]
    return _PrefillSeq(q_start, q_len, slots, mask)


def _short_group(seqs: list[tuple[int, int, int, int]], tables: torch.Tensor, block_size: int,
                 dev: torch.device) -> _ShortQueryGroup:
    """Pad the short-query sequences ``(table row, q_start, q_len, seq_len)`` to one batch."""
    max_q = max(q for _, _, q, _ in seqs)
    max_len = max(n for _, _, _, n in seqs)
    idx = torch.tensor([i for i, _, _, _ in seqs], device=dev)
    table = tables.index_select(0, idx)[:, :_cdiv(max_len, block_size)]
    slots = _token_slots(table, max_len, block_size)
    j = torch.arange(max_q, device=dev)
    q0 = torch.tensor([q for _, q, _, _ in seqs], device=dev)[:, None]
    q_len = torch.tensor([q for _, _, q, _ in seqs], device=dev)[:, None]
    seq_len = torch.tensor([n for _, _, _, n in seqs], device=dev)[:, None]
    valid = j[None, :] < q_len
    rows = q0 + torch.minimum(j[None, :], q_len - 1)  # padding rows repeat the last real query
    q_pos = (seq_len - q_len + torch.minimum(j[None, :], q_len - 1))[:, :, None]  # [n, max_q, 1]
    keys = torch.arange(max_len, device=dev)[None, None, :]
    mask = (keys <= q_pos)[:, None]  # causal from each query's own position; past seq_len is masked
    return _ShortQueryGroup(rows, valid, slots, mask)


def _gather(cache: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``[rows, kv_heads, length, dim]`` strided view of the tokens at ``slots`` ``[rows, length]``."""
    _, _, heads, dim = cache.shape
    rows, length = slots.shape
    flat = cache.reshape(-1, heads, dim)  # a view for the contiguous per-layer caches
    return flat.index_select(0, slots.reshape(-1)).view(rows, length, heads, dim).transpose(1, 2)


# --- the kernels' functional signatures (one plan per call) ----------------------------------

def paged_decode_attention_sdpa(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float) -> torch.Tensor:
    empty = torch.empty(0, 0, dtype=torch.int32, device=q.device)
    plan = SDPAPlan.build(k_cache.shape[1], torch.empty(0, dtype=torch.int64, device=q.device), block_tables,
                          seq_lens.tolist(), empty, [], [], kv_row_elems=k_cache.shape[2] * k_cache.shape[3])
    return plan.decode(q, k_cache, v_cache, scale)


def paged_prefill_attention_sdpa(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                                 scale: float) -> torch.Tensor:
    cu = cu_seqlens_q.tolist()
    q_lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    plan = SDPAPlan.build(k_cache.shape[1], torch.empty(0, dtype=torch.int64, device=q.device),
                          torch.empty(0, 0, dtype=torch.int32, device=q.device), [], block_tables, q_lens,
                          seq_lens.tolist())
    return plan.prefill(q, k_cache, v_cache, scale)
