"""Shape checks shared by every backend, so a bad call fails the same way on CPU and GPU.

Shape and dtype errors raise ``ValueError`` here, at the public boundary, instead of surfacing
as an index error deep in a kernel. Value checks (lengths against the block table) need the
data, which on a GPU means a host sync per layer, so they run only for CPU tensors.
"""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int, int, int]:
    """Check the paged K/V pair; return (num_blocks, block_size, num_kv_heads, head_dim)."""
    _need(k_cache.dim() == 4, f"k_cache must be [num_blocks, block_size, num_kv_heads, head_dim], got {tuple(k_cache.shape)}")
    _need(v_cache.shape == k_cache.shape, f"v_cache shape {tuple(v_cache.shape)} != k_cache shape {tuple(k_cache.shape)}")
    _need(k_cache.dtype in FLOAT_DTYPES, f"cache dtype must be one of {FLOAT_DTYPES}, got {k_cache.dtype}")
    _need(v_cache.dtype == k_cache.dtype, f"v_cache dtype {v_cache.dtype} != k_cache dtype {k_cache.dtype}")
    _need(v_cache.device == k_cache.device, "k_cache and v_cache must be on the same device")
    _need(k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1, "k_cache/v_cache must be contiguous in head_dim")
    return tuple(k_cache.shape)  # type: ignore[return-value]


def check_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                slot_mapping: torch.Tensor) -> None:
    """Check write_kv_cache arguments."""
    num_blocks, block_size, num_kv_heads, head_dim = check_cache(k_cache, v_cache)
    want = (num_kv_heads, head_dim)
    _need(k.dim() == 3 and tuple(k.shape[1:]) == want, f"k must be [num_tokens, {num_kv_heads}, {head_dim}], got {tuple(k.shape)}")
    _need(v.shape == k.shape, f"v shape {tuple(v.shape)} != k shape {tuple(k.shape)}")
    _need(slot_mapping.dim() == 1 and slot_mapping.shape[0] == k.shape[0],
          f"slot_mapping must be [num_tokens={k.shape[0]}], got {tuple(slot_mapping.shape)}")
    _need(slot_mapping.dtype in INDEX_DTYPES, f"slot_mapping must be int32 or int64, got {slot_mapping.dtype}")
    for name, t in (("k", k), ("v", v), ("slot_mapping", slot_mapping)):
        _need(t.device == k_cache.device, f"{name} is on {t.device}, cache on {k_cache.device}")
    if slot_mapping.device.type == "cpu" and slot_mapping.numel():
        _need(int(slot_mapping.max()) < num_blocks * block_size,
              f"slot_mapping has slot {int(slot_mapping.max())} >= num_blocks*block_size={num_blocks * block_size}")


def _check_tables(block_tables: torch.Tensor, seq_lens: torch.Tensor, num_seqs: int,
                  block_size: int, device: torch.device) -> None:
    _need(block_tables.dim() == 2 and block_tables.shape[0] == num_seqs,
          f"block_tables must be [num_seqs={num_seqs}, max_blocks_per_seq], got {tuple(block_tables.shape)}")
    _need(block_tables.dtype in INDEX_DTYPES, f"block_tables must be int32 or int64, got {block_tables.dtype}")
    _need(seq_lens.dim() == 1 and seq_lens.shape[0] == num_seqs,
          f"seq_lens must be [num_seqs={num_seqs}], got {tuple(seq_lens.shape)}")
    _need(seq_lens.dtype in INDEX_DTYPES, f"seq_lens must be int32 or int64, got {seq_lens.dtype}")
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        _need(t.device == device, f"{name} is on {t.device}, q on {device}")
    if seq_lens.device.type == "cpu" and num_seqs:
        capacity = block_tables.shape[1] * block_size
        _need(int(seq_lens.min()) >= 1, "every seq_len must be >= 1")
        _need(int(seq_lens.max()) <= capacity,
              f"seq_len {int(seq_lens.max())} exceeds block_tables capacity {capacity}")


def _check_q(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[int, int]:
    """Check q against the cache; return (num_heads, num_kv_heads)."""
    _, _, num_kv_heads, head_dim = check_cache(k_cache, v_cache)
    _need(q.dim() == 3, f"q must be 3-D [tokens, num_heads, head_dim], got {tuple(q.shape)}")
    _need(q.shape[2] == head_dim, f"q head_dim {q.shape[2]} != cache head_dim {head_dim}")
    _need(q.shape[1] % num_kv_heads == 0, f"num_heads {q.shape[1]} is not a multiple of num_kv_heads {num_kv_heads}")
    _need(q.dtype == k_cache.dtype, f"q dtype {q.dtype} != cache dtype {k_cache.dtype}")
    _need(q.device == k_cache.device, f"q is on {q.device}, cache on {k_cache.device}")
    _need(q.stride(-1) == 1, "q must be contiguous in head_dim")
    return q.shape[1], num_kv_heads


def check_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, seq_lens: torch.Tensor, num_splits: int | None) -> None:
    """Check paged_decode_attention arguments."""
    _check_q(q, k_cache, v_cache)
    _check_tables(block_tables, seq_lens, q.shape[0], k_cache.shape[1], q.device)
    _need(num_splits is None or (isinstance(num_splits, int) and num_splits >= 1),
          f"num_splits must be None or an int >= 1, got {num_splits!r}")


def check_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                  cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor) -> None:
    """Check paged_prefill_attention arguments (including q_len <= seq_len on CPU)."""
    _check_q(q, k_cache, v_cache)
    _need(cu_seqlens_q.dim() == 1 and cu_seqlens_q.shape[0] >= 1,
          f"cu_seqlens_q must be [num_seqs + 1], got {tuple(cu_seqlens_q.shape)}")
    _need(cu_seqlens_q.dtype in INDEX_DTYPES, f"cu_seqlens_q must be int32 or int64, got {cu_seqlens_q.dtype}")
    _need(cu_seqlens_q.device == q.device, f"cu_seqlens_q is on {cu_seqlens_q.device}, q on {q.device}")
    num_seqs = cu_seqlens_q.shape[0] - 1
    _check_tables(block_tables, seq_lens, num_seqs, k_cache.shape[1], q.device)
    if cu_seqlens_q.device.type == "cpu":
        _need(int(cu_seqlens_q[0]) == 0 and int(cu_seqlens_q[-1]) == q.shape[0],
              f"cu_seqlens_q must run from 0 to total_q_tokens={q.shape[0]}, got {cu_seqlens_q.tolist()}")
        q_lens = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
        _need(bool((q_lens >= 0).all()), "cu_seqlens_q must be non-decreasing")
        _need(bool((q_lens <= seq_lens.to(q_lens.dtype)).all()),
              "each sequence's q_len must be <= its seq_len (seq_len counts cached context plus the new tokens)")
