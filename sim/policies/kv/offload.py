"""KV offload tiers below the GPU prefix cache: CPU DRAM, then local SSD.

Why: a GPU prefix cache forgets a prefix as soon as its free blocks are handed out again; a
host-memory or disk tier keeps it, so a later request with that prefix loads its KV back over
the host link instead of recomputing it (LMCache, vLLM's ``OffloadingConnector``).

Model (an exclusive victim cache, one LRU per tier):

- a cached GPU block (hash set, no holder) handed out to make room is *evicted*: its hash moves
  to the first tier; a full tier pushes its least recently inserted hash down to the next tier;
  the last tier drops it. A hash is in at most one place: the GPU index or one tier.
- a prefix lookup that ends in the GPU index continues in the tiers, block after block while
  the chain holds (CPU and SSD blocks may alternate); those blocks are *loaded*: they leave
  their tier, fresh GPU blocks take them and are published under their hashes.
- a block the GPU computes again (its chain broke earlier) supersedes a tier's copy: dropped.

Only hashes move here (the simulator never holds KV bytes); bytes and seconds are derived from
each tier's ``block_bytes`` and ``bandwidth``. How a load is priced in a step: ``OffloadLoad``.

The real engine moves the bytes: with ``journal`` set to a list, every movement is appended to
it in the order it happened, as ``(kind, block_hash, where)`` (``JOURNAL_KINDS``), and the
runtime replays the list before the step's forward pass (``runtime.kv_cache.HostKVOffload``).
The simulator leaves it None, which costs one comparison per movement.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Optional


#: Journal entries ``(kind, block_hash, where)``: ``out`` a device block (``where``: its id) was
#: evicted into tier 0; ``move`` a hash went down into tier ``where``; ``drop`` it left the last
#: tier; ``in`` it was loaded back into device block ``where``; ``discard`` the device computed it
#: again and the tier's copy is gone (``where`` -1 for the last two but ``in``).
JOURNAL_KINDS = ("out", "move", "drop", "in", "discard")


class OffloadTier:
    """One tier: an LRU of block hashes, ``capacity_blocks`` long.

    ``bandwidth``: bytes/s a GPU reads back from this tier (its own KV shard);
    ``block_bytes``: one block's KV bytes on one GPU; ``swap_weight``: how many tokens of a
    swap over the host link one loaded token costs (host-link bandwidth / ``bandwidth``)."""

    __slots__ = ("name", "capacity_blocks", "bandwidth", "block_bytes", "swap_weight", "lru",
                 "num_inserted", "num_evicted", "num_loaded", "num_superseded",
                 "num_hit_blocks", "num_queried_blocks")

    def __init__(self, name: str, capacity_blocks: int, bandwidth: float, block_bytes: float,
                 swap_weight: float = 1.0) -> None:
        if capacity_blocks < 1:
            raise ValueError(f"offload tier {name}: needs at least one block, got {capacity_blocks}")
        if not bandwidth > 0:
            raise ValueError(f"offload tier {name}: bandwidth must be > 0, got {bandwidth}")
        self.name = name
        self.capacity_blocks = capacity_blocks
        self.bandwidth = bandwidth
        self.block_bytes = block_bytes
        self.swap_weight = swap_weight
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.num_inserted = 0  # hashes moved in from the tier above (or the GPU)
        self.num_evicted = 0  # pushed down to the next tier (or dropped, from the last)
        self.num_loaded = 0  # loaded back into the GPU (every load, re-admissions too)
        self.num_superseded = 0  # dropped because the GPU computed the block again
        self.num_hit_blocks = 0  # prefix hits at requests' first admissions
        self.num_queried_blocks = 0  # blocks looked up here at first admissions

    def __len__(self) -> int:
        return len(self.lru)

    def load_seconds(self, num_blocks: int) -> float:
        """Seconds to read ``num_blocks`` blocks back at this tier's bandwidth."""
        return num_blocks * self.block_bytes / self.bandwidth


class OffloadLoad:
    """The lower-tier part of a prefix hit: blocks to load back, in token order.

    ``num_swap_tokens``: what the load costs, as tokens of a swap over the host link (the
    ``StepShape.num_swap_tokens`` the step pricer already prices): a block of ``block_size``
    tokens from a tier of bandwidth B counts ``block_size x host link / B`` tokens, rounded up
    once for the whole load. A CPU tier at the host link's bandwidth costs exactly a swap-in."""

    __slots__ = ("hashes", "tiers", "num_swap_tokens")

    def __init__(self, hashes: list[int], tiers: list[int], num_swap_tokens: int) -> None:
        self.hashes = hashes
        self.tiers = tiers
        self.num_swap_tokens = num_swap_tokens

    def __repr__(self) -> str:
        return (f"OffloadLoad(hashes={self.hashes!r}, tiers={self.tiers!r}, "
                f"num_swap_tokens={self.num_swap_tokens})")


class OffloadTiers:
    """The chain of tiers under one GPU prefix cache (``PagedAllocator(offload=...)``)."""

    def __init__(self, tiers: list[OffloadTier], block_size: int) -> None:
        if not tiers:
            raise ValueError("offload needs at least one tier")
        self.tiers = tiers
        self.block_size = block_size
        self.num_dropped = 0  # evicted from the last tier
        self.num_gpu_hit_blocks = 0  # first-admission hits served by the GPU itself
        self.num_load_swap_tokens = 0  # sum of loads' num_swap_tokens (what was priced)
        #: Movements for a runtime that holds the bytes (see the module docstring); None: off.
        self.journal: Optional[list[tuple[str, int, int]]] = None

    # --- where a hash is -------------------------------------------------------------------
    def tier_of(self, block_hash: int) -> int:
        """Index of the tier holding ``block_hash``, or -1."""
        for i, t in enumerate(self.tiers):
            if block_hash in t.lru:
                return i
        return -1

    def lookup(self, hashes: list[int], start: int) -> Optional[OffloadLoad]:
        """The run of ``hashes[start:]`` held in the tiers, stopping at the first that is not
        (a prefix must be contiguous). None when ``hashes[start]`` is in no tier. Read-only."""
        found: list[int] = []
        where: list[int] = []
        weight = 0.0
        for i in range(start, len(hashes)):
            t = self.tier_of(hashes[i])
            if t < 0:
                break
            found.append(hashes[i])
            where.append(t)
            weight += self.tiers[t].swap_weight
        if not found:
            return None
        return OffloadLoad(found, where, int(math.ceil(weight * self.block_size - 1e-9)))

    # --- movements ---------------------------------------------------------------------------
    def put(self, block_hash: int, block_id: int = -1) -> None:
        """A cached block (device block ``block_id``) evicted from the GPU: into the first
        tier, pushing each full tier's least recently inserted hash one tier down (the last
        tier's is dropped)."""
        journal = self.journal
        if journal is not None:
            journal.append(("out", block_hash, block_id))
        h = block_hash
        for i, t in enumerate(self.tiers):
            if i and journal is not None:
                journal.append(("move", h, i))
            t.lru[h] = None
            t.num_inserted += 1
            if len(t.lru) <= t.capacity_blocks:
                return
            h, _ = t.lru.popitem(last=False)
            t.num_evicted += 1
        self.num_dropped += 1
        if journal is not None:
            journal.append(("drop", h, -1))

    def loaded_into(self, block_hash: int, block_id: int) -> None:
        """A load's block took device block ``block_id`` (journal only: ``take`` counted it)."""
        if self.journal is not None:
            self.journal.append(("in", block_hash, block_id))

    def take(self, load: OffloadLoad) -> None:
        """Remove a load's blocks from their tiers (they go back to the GPU)."""
        for h, i in zip(load.hashes, load.tiers):
            t = self.tiers[i]
            if h not in t.lru:
                raise RuntimeError(f"offload: block hash {h} left tier {t.name} before its load")
            del t.lru[h]
            t.num_loaded += 1
        self.num_load_swap_tokens += load.num_swap_tokens

    def discard(self, block_hash: int) -> None:
        """The GPU holds this content again: drop a tier's copy, if any."""
        for t in self.tiers:
            if block_hash in t.lru:
                del t.lru[block_hash]
                t.num_superseded += 1
                if self.journal is not None:
                    self.journal.append(("discard", block_hash, -1))
                return

    def record_query(self, num_gpu_hit_blocks: int, load: Optional[OffloadLoad],
                     num_lower_queried: int) -> None:
        """Hit statistics of one first admission: GPU hits, the load's blocks per tier, and
        how many blocks past the GPU hits the tiers were asked for."""
        self.num_gpu_hit_blocks += num_gpu_hit_blocks
        for t in self.tiers:
            t.num_queried_blocks += num_lower_queried
        if load is not None:
            for i in load.tiers:
                self.tiers[i].num_hit_blocks += 1

    # --- statistics and checks -----------------------------------------------------------------
    def stats(self) -> dict:
        """Plain numbers per tier (``sim.metrics.offload_summary`` aggregates engines)."""
        bs = self.block_size
        out: dict = {"block_size": bs, "gpu_hit_tokens": self.num_gpu_hit_blocks * bs,
                     "dropped_blocks": self.num_dropped,
                     "load_swap_tokens": self.num_load_swap_tokens, "tiers": {}}
        for t in self.tiers:
            out["tiers"][t.name] = {
                "capacity_blocks": t.capacity_blocks,
                "block_bytes": t.block_bytes,
                "bandwidth": t.bandwidth,
                "resident_blocks": len(t.lru),
                "inserted_blocks": t.num_inserted,
                "evicted_blocks": t.num_evicted,
                "loaded_blocks": t.num_loaded,
                "superseded_blocks": t.num_superseded,
                "hit_tokens": t.num_hit_blocks * bs,
                "queried_tokens": t.num_queried_blocks * bs,
                "loaded_bytes": t.num_loaded * t.block_bytes,
                "load_s": t.load_seconds(t.num_loaded),
            }
        return out

    def check_invariants(self, gpu_hashes: set[int], num_gpu_evicted: int) -> None:
        """Every hash in at most one place (the GPU index or one tier), no tier over capacity,
        and counts conserved: GPU evictions = first tier's insertions, each tier's evictions =
        the next one's insertions (the last one's = dropped), and each tier's insertions =
        resident + evicted + loaded + superseded."""
        seen: set[int] = set(gpu_hashes)
        inflow = num_gpu_evicted
        for t in self.tiers:
            assert len(t.lru) <= t.capacity_blocks, f"tier {t.name}: {len(t.lru)} > {t.capacity_blocks}"
            for h in t.lru:
                assert h not in seen, f"block hash {h} in tier {t.name} and above it"
                seen.add(h)
            assert t.num_inserted == inflow, f"tier {t.name}: inserted {t.num_inserted} != {inflow} moved down"
            out = len(t.lru) + t.num_evicted + t.num_loaded + t.num_superseded
            assert t.num_inserted == out, f"tier {t.name}: inserted {t.num_inserted} != {out} accounted"
            inflow = t.num_evicted
        assert self.num_dropped == inflow, f"dropped {self.num_dropped} != {inflow} evicted from the last tier"
