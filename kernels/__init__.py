"""Paged-attention kernels: Triton on CUDA, torch references on CPU, one call signature.

Layout (vLLM's): ``k_cache``/``v_cache`` ``[num_blocks, block_size, num_kv_heads, head_dim]``,
``block_tables`` int32 ``[num_seqs, max_blocks_per_seq]``, ``seq_lens`` int32 ``[num_seqs]``
counting every token of a sequence (cached context plus this step's new tokens, whose K/V
``write_kv_cache`` must have stored first).

``backend``: ``'auto'`` (default) runs Triton for CUDA tensors, the torch reference for CPU
tensors, and the Triton code path on CPU when ``TRITON_INTERPRET=1`` is set (that is how the CPU
tests exercise the kernels); ``'triton'`` and ``'torch'`` force one, and ``'sdpa'`` gathers
through the block table into one fused torch SDPA call (``sdpa.py``: the CPU runtime's fast
path). Triton is imported lazily, so ``import kernels`` works where Triton is not installed.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from kernels import _checks
from kernels.interpreter import interpreter_ready
from kernels.reference import paged_decode_attention_ref, paged_prefill_attention_ref, write_kv_cache_ref
from kernels.sdpa import paged_decode_attention_sdpa, paged_prefill_attention_sdpa

__all__ = ["write_kv_cache", "paged_decode_attention", "paged_prefill_attention", "triton_available", "use_triton"]

BACKENDS = ("auto", "triton", "torch", "sdpa")


def triton_available() -> bool:
    """True when the triton package can be imported (it is absent on macOS/Windows)."""
    return importlib.util.find_spec("triton") is not None


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def use_triton(device: torch.device, backend: str = "auto") -> bool:
    """Decide the backend for tensors on ``device``; raise ValueError if ``backend`` can't run."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend in ("torch", "sdpa"):
        return False
    runnable = device.type == "cuda" or (device.type == "cpu" and _interpreting())
    if backend == "auto":
        if not (runnable and triton_available()):
            return False
        backend = "triton"  # then fail loudly below if the interpreter was enabled too late
    if not triton_available():
        raise ValueError("backend='triton' needs the triton package (pip install triton)")
    if not runnable:
        raise ValueError(f"backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 for CPU tensors; got {device}")
    if device.type == "cpu" and not interpreter_ready():
        raise ValueError("TRITON_INTERPRET=1 was set after triton was imported; set it before importing triton "
                         "(or call kernels.interpreter.import_triton_interpreted() first)")
    return True


def write_kv_cache(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   slot_mapping: torch.Tensor, *, backend: str = "auto") -> None:
    """Store new tokens' K/V ``[num_tokens, num_kv_heads, head_dim]`` in the cache, in place.

    ``slot_mapping[i] = block_id * block_size + offset`` for token ``i``; negative means skip
    (padding tokens of a CUDA-graph-sized batch).
    """
    _checks.check_write(k, v, k_cache, v_cache, slot_mapping)
    if k.shape[0] == 0:
        return
    if use_triton(k_cache.device, backend):
        from kernels.triton_cache import write_kv_cache_triton
        write_kv_cache_triton(k, v, k_cache, v_cache, slot_mapping)
    else:
        write_kv_cache_ref(k, v, k_cache, v_cache, slot_mapping)


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: float,
                           num_splits: int | None = None, *, backend: str = "auto") -> torch.Tensor:
    """Decode attention, one query token per sequence: q and out ``[num_seqs, num_heads, head_dim]``.

    ``num_splits`` sets the split-K (flash-decoding) factor of the Triton kernel: each
    sequence's context is cut into that many pieces processed in parallel and merged. None picks
    one from the batch and the device (more splits when few sequences would leave SMs idle).
    """
    _checks.check_decode(q, k_cache, v_cache, block_tables, seq_lens, num_splits)
    if q.shape[0] == 0:
        return torch.empty_like(q)
    if use_triton(q.device, backend):
        from kernels.triton_decode import paged_decode_attention_triton
        return paged_decode_attention_triton(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits)
    if backend == "sdpa":
        return paged_decode_attention_sdpa(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return paged_decode_attention_ref(q, k_cache, v_cache, block_tables, seq_lens, scale, num_splits)


def paged_prefill_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_tables: torch.Tensor, cu_seqlens_q: torch.Tensor, seq_lens: torch.Tensor,
                            scale: float, *, backend: str = "auto") -> torch.Tensor:
    """Causal prefill attention over packed varlen queries ``[total_q_tokens, num_heads, head_dim]``.

    Sequence ``i``'s queries are rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]`` and are its last
    ``q_len`` positions; the first ``seq_lens[i] - q_len`` tokens come from the cache (an earlier
    chunk of a chunked prefill, or a prefix-cache hit), read through ``block_tables``.
    """
    _checks.check_prefill(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens)
    if q.shape[0] == 0:
        return torch.empty_like(q)
    if use_triton(q.device, backend):
        from kernels.triton_prefill import paged_prefill_attention_triton
        return paged_prefill_attention_triton(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale)
    if backend == "sdpa":
        return paged_prefill_attention_sdpa(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale)
    return paged_prefill_attention_ref(q, k_cache, v_cache, block_tables, cu_seqlens_q, seq_lens, scale)
