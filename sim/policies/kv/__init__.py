"""KV-cache allocators: contiguous reservation baselines and the paged allocator with an
optional prefix cache (and KV offload tiers under it, ``offload.py``). ``make_allocator`` builds
one from config values."""

from __future__ import annotations

from typing import Optional

from sim.policies.kv.base import KVAllocator, KVUsage, PrefixHit
from sim.policies.kv.contiguous import RESERVE_POLICIES, ContiguousAllocator
from sim.policies.kv.offload import OffloadLoad, OffloadTier, OffloadTiers
from sim.policies.kv.paged import PagedAllocator
from sim.policies.kv.radix import RadixAllocator

#: ``radix`` is SGLang's token pool with its radix prefix cache (``engine.name: sglang``).
ALLOCATORS = ("paged", "contiguous", "radix")


def make_allocator(kind: str = "paged", num_slots: int = 0, block_size: int = 16,
                   prefix_caching: bool = False, reserve: str = "max",
                   max_model_len: int = 2048, swap_slots: int = 0,
                   window: tuple[int, float] = (0, 0.0),
                   offload: Optional[OffloadTiers] = None, state_slots: int = 0) -> KVAllocator:
    """Build an allocator over ``num_slots`` token slots of KV memory (``window``: a hybrid
    model's sliding-window layers, (tokens held, pool slots a token), see ``PagedAllocator``;
    ``offload``: KV offload tiers under the prefix cache; ``state_slots``: a linear-attention
    model's per-request state paged from the same pool, vLLM's way)."""
    if kind == "paged":
        return PagedAllocator(num_slots, block_size=block_size, prefix_caching=prefix_caching,
                              swap_slots=swap_slots, window_tokens=window[0], window_ratio=window[1],
                              offload=offload, state_slots=state_slots)
    if state_slots:
        raise ValueError("a linear-attention model's state paged from the KV pool (vLLM's way) "
                         "needs the paged allocator")
    if offload is not None:
        raise ValueError("KV offload tiers need the paged allocator with prefix caching")
    if kind == "radix":
        if window[0]:
            raise ValueError("sliding-window layers (a hybrid model) are modelled for vLLM's paged allocator only")
        return RadixAllocator(num_slots, block_size=block_size, prefix_caching=prefix_caching)
    if window[0]:
        raise ValueError("sliding-window layers (a hybrid model) need the paged allocator")
    if kind == "contiguous":
        if prefix_caching:
            raise ValueError("prefix caching needs the paged allocator")
        return ContiguousAllocator(num_slots, reserve=reserve, max_model_len=max_model_len)
    raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}, got {kind!r}")


__all__ = [
    "ALLOCATORS",
    "RESERVE_POLICIES",
    "ContiguousAllocator",
    "KVAllocator",
    "KVUsage",
    "OffloadLoad",
    "OffloadTier",
    "OffloadTiers",
    "PagedAllocator",
    "PrefixHit",
    "RadixAllocator",
    "make_allocator",
]
