"""The one interface every KV allocator implements, and the memory breakdown it reports.

Slots are token-sized units of KV memory (one token's K and V across all layers). A contiguous
allocator hands out runs of slots; a paged one hands out blocks of ``block_size`` slots.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable, Optional, Sequence

from sim.policies.kv.offload import OffloadLoad
from sim.policies.request import Request


class KVUsage:
    """Where every KV slot is, at one instant (vLLM paper, Figure 2).

    - token_states: slots holding KV of computed tokens;
    - reserved: held slots the request will fill with tokens it still produces;
    - internal_fragmentation: held slots it will never fill (over-reservation, block tails);
    - external_fragmentation: free slots that cannot serve the waiting request (holes too small
      for it in a contiguous address space; always 0 for a paged pool);
    - free: the remaining free slots.
    """

    # A plain class (it was a frozen dataclass): one is made every logged step, and a compiled
    # dataclass keeps an interpreted __init__. Treat it as immutable.
    __slots__ = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation", "free")

    def __init__(self, token_states: int, reserved: int, internal_fragmentation: int,
                 external_fragmentation: int, free: int) -> None:
        self.token_states = token_states
        self.reserved = reserved
        self.internal_fragmentation = internal_fragmentation
        self.external_fragmentation = external_fragmentation
        self.free = free

    def _fields(self) -> tuple[int, int, int, int, int]:
        return (self.token_states, self.reserved, self.internal_fragmentation,
                self.external_fragmentation, self.free)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KVUsage):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return ("KVUsage(token_states={}, reserved={}, internal_fragmentation={}, "
                "external_fragmentation={}, free={})".format(*self._fields()))

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


class PrefixHit:
    """Result of a prefix-cache lookup: cached blocks to reuse and how many tokens they cover.
    A plain class, made at every admission (a compiled dataclass keeps an interpreted __init__).

    ``load``: with KV offload tiers, the blocks after ``block_ids`` found in a lower tier (CPU,
    SSD), which ``allocate`` gives fresh device blocks and the step loads back; ``num_tokens``
    covers both (every hit token is one the request does not compute)."""

    __slots__ = ("block_ids", "num_tokens", "load")

    def __init__(self, block_ids: Optional[list[int]] = None, num_tokens: int = 0,
                 load: Optional[OffloadLoad] = None) -> None:
        self.block_ids: list[int] = [] if block_ids is None else block_ids
        self.num_tokens = num_tokens
        self.load = load

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrefixHit):
            return NotImplemented
        mine = None if self.load is None else (self.load.hashes, self.load.tiers)
        theirs = None if other.load is None else (other.load.hashes, other.load.tiers)
        return (self.block_ids == other.block_ids and self.num_tokens == other.num_tokens
                and mine == theirs)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    def __repr__(self) -> str:
        if self.load is None:
            return f"PrefixHit(block_ids={self.block_ids!r}, num_tokens={self.num_tokens})"
        return (f"PrefixHit(block_ids={self.block_ids!r}, num_tokens={self.num_tokens}, "
                f"load={self.load!r})")


class KVAllocator(ABC):
    """Allocates KV slots to requests. Every method is O(blocks touched), never O(pool).

    This class is the whole interface between a scheduler and its memory manager (like vLLM
    v1's ``KVCacheManager``): a scheduler calls only what is declared here, never probes an
    allocator for optional methods. Capabilities an allocator lacks (prefix cache, host swap
    space) have declared no-op or "cannot" defaults, so a scheduler asks, gets "no", and falls
    back (recompute instead of swap, no cached prefix).

    Protocol used by schedulers:
      hit = alloc.lookup_prefix(req)            # only when req.num_computed_tokens == 0
      ok = alloc.allocate(req, n_new, hit)      # slots for computed + cached + n_new tokens
      alloc.record_prefix_query(req, hit)       # on a request's first admission
      ... step runs, req.num_computed_tokens advances ...
      alloc.cache_full_blocks(req)              # publish newly full blocks to the prefix cache
      alloc.free(req)                           # on finish, abort or recompute-preemption
      alloc.can_swap_out(req) -> alloc.swap_out(req)          # swap preemption
      alloc.can_swap_in(req, n) -> alloc.swap_in(req)         # bringing it back
    ``allocate`` either succeeds or changes nothing.
    """

    #: Slot granularity: the block size for paged, 1 for contiguous.
    block_size: int = 1
    #: Prompt tokens looked up in the prefix cache at first admissions (``record_prefix_query``);
    #: stays 0 without a prefix cache. Feeds ``summary.json``'s prefix-cache hit rate.
    num_prefix_queries: int = 0
    #: Of ``num_prefix_queries``, the tokens served from the cache.
    num_prefix_hits: int = 0

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

    def allocate_decodes(self, reqs: Sequence[Request], start: int, limit: int) -> int:
        """Give one more token's room to ``reqs[start]``, ``reqs[start + 1]``, ... in order,
        each a plain decode (exactly one uncomputed token), stopping at the first that is not
        one, the first that does not fit, or after ``limit``; returns how many got their room.

        Exactly ``allocate(req, 1)`` per request, in order: a scheduler's decode loop calls it
        once per step instead of once per running request (the simulator's hottest loop);
        allocators may inline it."""
        n = 0
        end = min(len(reqs), start + limit)
        for i in range(start, end):
            req = reqs[i]
            if req.num_uncomputed_tokens != 1 or not self.allocate(req, 1):
                break
            n += 1
        return n

    @abstractmethod
    def free(self, req: Request) -> None:
        """Release everything ``req`` holds, device slots and any host (swap) copy; cached
        blocks stay cached, evictable."""

    # --- prefix cache (no-ops without one) --------------------------------------------------
    @property
    def caches_prefixes(self) -> bool:
        """Whether ``cache_full_blocks`` can publish anything (a prefix cache is on). Lets a
        caller skip per-block publishing work entirely when it cannot matter."""
        return False

    def lookup_prefix(self, req: Request) -> PrefixHit:
        """Longest cached prefix of ``req`` in full blocks, always leaving its last prompt
        token to be computed; with offload tiers it continues below the device (``hit.load``).
        Allocators without a prefix cache return an empty hit."""
        return PrefixHit()

    def cached_prefix_blocks(self, req: Request) -> int:
        """How many of ``req``'s leading full blocks the device prefix cache holds now: a
        read-only probe for a router choosing between replicas.

        Args:
            req: a request not yet admitted here (its block hashes are computed, and memoised
                on the request, as ``lookup_prefix`` would).

        Returns:
            The length of the cached run from the first block, counted as ``lookup_prefix``
            counts the device part of its hit (the last prompt token never counts). Unlike
            ``lookup_prefix`` it changes nothing: no LRU order, ref count, statistic or offload
            tier is touched, so a router may ask every replica. 0 without a prefix cache.
        """
        return 0

    def record_prefix_query(self, req: Request, hit: PrefixHit) -> None:
        """Count a request's first admission in the prefix-cache hit-rate statistic.

        Args:
            req: the request being admitted for the first time (``req.prompt_len`` tokens
                were looked up).
            hit: what ``lookup_prefix`` found for it (``hit.num_tokens`` served from cache).

        Returns:
            None. Adds to ``num_prefix_queries`` / ``num_prefix_hits``; a no-op without a
            prefix cache.
        """

    def cache_full_blocks(self, req: Request) -> None:
        """Publish ``req``'s newly completed full blocks to the prefix cache (no-op without)."""

    def offload_stats(self) -> Optional[dict]:
        """Per-tier statistics of the KV offload tiers under the prefix cache
        (``OffloadTiers.stats``), or None without tiers."""
        return None

    # --- swap space (host memory; "cannot" without one) ---------------------------------------
    def can_swap_out(self, req: Request) -> bool:
        """Whether ``req``'s device KV fits in the free host swap space now.

        Args:
            req: a running request the scheduler wants to preempt by swapping.

        Returns:
            True if ``swap_out(req)`` would succeed; always False without swap space, so the
            scheduler preempts by recompute instead.
        """
        return False

    def swap_out(self, req: Request) -> int:
        """Move ``req``'s KV to host memory, freeing its device slots.

        Args:
            req: a request for which ``can_swap_out`` just returned True.

        Returns:
            The number of tokens whose KV was copied (what crosses PCIe).

        Raises:
            RuntimeError: without swap space (a scheduler must ask ``can_swap_out`` first).
        """
        raise RuntimeError(f"{type(self).__name__} has no swap space")

    def can_swap_in(self, req: Request, num_new_tokens: int = 1) -> bool:
        """Whether swapped-out ``req`` can come back now and compute ``num_new_tokens`` more.

        Args:
            req: a request previously passed to ``swap_out``.
            num_new_tokens: tokens it will compute in the step that brings it back.

        Returns:
            True if device memory holds its KV plus the new tokens; False without swap space.
        """
        return False

    def swap_in(self, req: Request) -> int:
        """Bring ``req``'s KV back from host memory into fresh device slots.

        Args:
            req: a swapped-out request for which ``can_swap_in`` just returned True.

        Returns:
            The number of tokens whose KV was copied back.

        Raises:
            RuntimeError: without swap space (nothing can have been swapped out).
        """
        raise RuntimeError(f"{type(self).__name__} has no swap space")

    # --- placement ------------------------------------------------------------------------------
    @abstractmethod
    def block_table(self, req: Request) -> list[int]:
        """Physical block ids ``req`` holds, in token order: token ``p`` lives in slot
        ``table[p // block_size] * block_size + p % block_size``. An executor that reads KV by
        address (the runtime) gets these through ``ScheduledRequest.block_table``.

        Args:
            req: any request (one holding nothing has an empty table).

        Returns:
            The live list of block ids (callers must not mutate it; copy to keep).
        """

    def holds(self, req: Request) -> bool:
        """Whether ``req`` currently holds device slots."""
        return self.num_held_slots(req) > 0

    @abstractmethod
    def num_held_slots(self, req: Request) -> int:
        """Device slots currently held by ``req``."""

    def min_slots_for_final(self, req: Request) -> int:
        """Slots ``req`` holds at its last step; a request needing more than the pool can
        never finish and is rejected up front."""
        return self.slots_for_tokens(req.final_kv_len)

    def slots_for_tokens(self, num_tokens: int) -> int:
        """Slots that hold ``num_tokens`` tokens (rounded up to whole blocks)."""
        b = self.block_size
        return -(-num_tokens // b) * b

    def growth_slots(self, req: Request, num_tokens: int) -> int:
        """Free slots ``req`` must newly take to hold ``num_tokens`` tokens.

        Args:
            req: a request (holding slots or not).
            num_tokens: the KV length it would grow to.

        Returns:
            0 if its current holding suffices; more than ``num_slots`` if it can never grow
            that far (a contiguous reservation). Admission watermarks and the simulator's
            bulk-decode window use it to see how far memory goes.
        """
        return max(0, self.slots_for_tokens(num_tokens) - self.num_held_slots(req))

    @abstractmethod
    def usage(self, holders: Iterable[Request], waiting: Optional[Request]) -> KVUsage:
        """Memory breakdown given the requests that hold slots and the head of the queue."""

    def check_invariants(self) -> None:
        """Raise AssertionError if internal bookkeeping is inconsistent (tests call this)."""
