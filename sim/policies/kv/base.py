"""The one interface every KV allocator implements, and the memory breakdown it reports.

Slots are token-sized units of KV memory (one token's K and V across all layers). A contiguous
allocator hands out runs of slots; a paged one hands out blocks of ``block_size`` slots.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Optional

from sim.policies.request import Request


@dataclass(frozen=True)
class KVUsage:
    """Where every KV slot is, at one instant (vLLM paper, Figure 2).

    - token_states: slots holding KV of computed tokens;
    - reserved: held slots the request will fill with tokens it still produces;
    - internal_fragmentation: held slots it will never fill (over-reservation, block tails);
    - external_fragmentation: free slots that cannot serve the waiting request (holes too small
      for it in a contiguous address space; always 0 for a paged pool);
    - free: the remaining free slots.
    """

    token_states: int
    reserved: int
    internal_fragmentation: int
    external_fragmentation: int
    free: int

    @property
    def total(self) -> int:
        return (
            self.token_states
            + self.reserved
            + self.internal_fragmentation
            + self.external_fragmentation
            + self.free
        )

    def fractions(self) -> dict[str, float]:
        t = max(self.total, 1)
        return {
            "token_states": self.token_states / t,
            "reserved": self.reserved / t,
            "internal_fragmentation": self.internal_fragmentation / t,
            "external_fragmentation": self.external_fragmentation / t,
            "free": self.free / t,
        }


@dataclass
class PrefixHit:
    """Result of a prefix-cache lookup: cached blocks to reuse and how many tokens they cover."""

    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0


class KVAllocator(ABC):
    """Allocates KV slots to requests. Every method is O(blocks touched), never O(pool).

    Protocol used by schedulers:
      hit = alloc.lookup_prefix(req)            # only when req.num_computed_tokens == 0
      ok = alloc.allocate(req, n_new, hit)      # slots for computed + cached + n_new tokens
      ... step runs, req.num_computed_tokens advances ...
      alloc.cache_full_blocks(req)              # publish newly full blocks to the prefix cache
      alloc.free(req)                           # on finish, abort or recompute-preemption
    ``allocate`` either succeeds or changes nothing.
    """

    #: Slot granularity: the block size for paged, 1 for contiguous.
    block_size: int = 1
    #: True when memory is reserved up front for the whole request (no growth, no preemption).
    reserves_upfront: bool = False

    @property
    @abstractmethod
    def num_slots(self) -> int:
        """Total KV slots on the device."""

    @property
    @abstractmethod
    def num_free_slots(self) -> int:
        """Slots not held by any request (cached-but-free prefix blocks count as free)."""

    @abstractmethod
    def can_allocate(self, req: Request, num_new_tokens: int,
                     prefix: Optional[PrefixHit] = None) -> bool:
        """Whether ``allocate`` would succeed now."""

    @abstractmethod
    def allocate(self, req: Request, num_new_tokens: int,
                 prefix: Optional[PrefixHit] = None) -> bool:
        """Make room for ``req.num_computed_tokens + prefix tokens + num_new_tokens`` tokens."""

    @abstractmethod
    def free(self, req: Request) -> None:
        """Release everything ``req`` holds (cached blocks stay cached, evictable)."""

    def lookup_prefix(self, req: Request) -> PrefixHit:
        """Longest cached prefix of ``req`` in full blocks, always leaving its last prompt
        token to be computed. Allocators without a prefix cache return an empty hit."""
        return PrefixHit()

    def cache_full_blocks(self, req: Request) -> None:
        """Publish ``req``'s newly completed full blocks to the prefix cache (no-op without)."""

    def block_table(self, req: Request) -> list[int]:
        """Physical block ids of ``req`` in order (paged allocators only)."""
        raise NotImplementedError(f"{type(self).__name__} has no block table")

    def holds(self, req: Request) -> bool:
        """Whether ``req`` currently holds device slots."""
        return self.num_held_slots(req) > 0

    @abstractmethod
    def num_held_slots(self, req: Request) -> int:
        """Device slots currently held by ``req``."""

    def min_slots_for(self, req: Request) -> int:
        """Slots the request would need to be admitted now (for external fragmentation)."""
        return self.slots_for_tokens(req.num_tokens)

    def min_slots_for_final(self, req: Request) -> int:
        """Slots ``req`` holds at its last step; a request needing more than the pool can
        never finish and is rejected up front."""
        return self.slots_for_tokens(req.final_kv_len)

    def slots_for_tokens(self, num_tokens: int) -> int:
        b = self.block_size
        return -(-num_tokens // b) * b

    def growth_slots(self, req: Request, num_tokens: int) -> int:
        """Free slots ``req`` must newly take to hold ``num_tokens`` tokens (0 if it already
        can). Used to see how many pure-decode steps fit before memory runs out."""
        return max(0, self.slots_for_tokens(num_tokens) - self.num_held_slots(req))

    @abstractmethod
    def usage(self, holders: Iterable[Request], waiting: Optional[Request]) -> KVUsage:
        """Memory breakdown given the requests that hold slots and the head of the queue."""

    def check_invariants(self) -> None:
        """Raise AssertionError if internal bookkeeping is inconsistent (tests call this)."""
