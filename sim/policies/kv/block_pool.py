"""Physical KV blocks: ref counts, the free queue in LRU order, and the prefix-cache index.

Like vLLM v1's block pool: a free block may still hold a cached prefix; it stays findable by its
hash until it is handed out again, and blocks are handed out least-recently-freed first so hot
prefixes survive longest. The free queue is an ``OrderedDict`` used as an O(1) doubly linked
list (remove from the middle when a cached block is reused, pop from the front to allocate).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from sim.policies.kv.offload import OffloadTiers


class Block:
    """One physical block. A plain class, not a dataclass: a pool makes tens of thousands at
    start, and a dataclass's generated __init__ stays interpreted even when compiled."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int, ref_cnt: int = 0, block_hash: Optional[int] = None) -> None:
        self.block_id = block_id
        self.ref_cnt = ref_cnt
        self.block_hash = block_hash

    def __repr__(self) -> str:
        return f"Block(block_id={self.block_id}, ref_cnt={self.ref_cnt}, block_hash={self.block_hash})"


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"a block pool needs at least one block, got {num_blocks}")
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # block hash -> block id
        #: Sum over blocks of max(ref_cnt - 1, 0): extra holders of shared blocks.
        self.num_shared_refs = 0
        #: Cached blocks evicted (handed out again while their hash was indexed).
        self.num_evicted = 0
        #: Where evicted hashes go (KV offload tiers); None: they are forgotten.
        self.spill: Optional[OffloadTiers] = None

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def get_cached(self, block_hash: int) -> Optional[int]:
        return self.cached.get(block_hash)

    def touch(self, block_id: int) -> None:
        """Take one more reference to a (possibly free) cached block."""
        block = self.blocks[block_id]
        if block.ref_cnt == 0:
            del self.free_queue[block_id]
        else:
            self.num_shared_refs += 1
        block.ref_cnt += 1

    def allocate(self, count: int) -> list[int]:
        """Hand out ``count`` blocks from the front of the free queue, evicting their cached
        prefixes. The caller checks ``num_free`` first."""
        if count > len(self.free_queue):
            raise RuntimeError(f"asked for {count} blocks, {len(self.free_queue)} free")
        out = []
        for _ in range(count):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            if block.block_hash is not None:
                if self.cached.get(block.block_hash) == block_id:
                    del self.cached[block.block_hash]
                    self.num_evicted += 1
                    if self.spill is not None:
                        self.spill.put(block.block_hash, block_id)
                block.block_hash = None
            block.ref_cnt = 1
            out.append(block_id)
        return out

    def release(self, block_ids: list[int]) -> None:
        """Drop one reference from each block, tail first; freed cached blocks go to the back
        of the queue (evicted last), freed uncached ones to the front (reused first)."""
        for block_id in reversed(block_ids):
            block = self.blocks[block_id]
            if block.ref_cnt <= 0:
                raise RuntimeError(f"block {block_id} freed twice")
            block.ref_cnt -= 1
            if block.ref_cnt > 0:
                self.num_shared_refs -= 1
                continue
            self.free_queue[block_id] = None
            if block.block_hash is None:
                self.free_queue.move_to_end(block_id, last=False)

    def publish(self, block_id: int, block_hash: int) -> bool:
        """Index a full block under its hash. If another block already holds that content the
        index keeps the older one and this block stays anonymous."""
        if block_hash in self.cached:
            return False
        self.blocks[block_id].block_hash = block_hash
        self.cached[block_hash] = block_id
        return True

    def check_invariants(self, held: dict[int, int]) -> None:
        """``held`` maps block id -> number of holders according to the allocator."""
        shared = 0
        for block in self.blocks:
            expect = held.get(block.block_id, 0)
            assert block.ref_cnt == expect, f"block {block.block_id}: ref {block.ref_cnt} != {expect}"
            in_free = block.block_id in self.free_queue
            assert in_free == (block.ref_cnt == 0), f"block {block.block_id}: free-queue mismatch"
            shared += max(block.ref_cnt - 1, 0)
            if block.block_hash is not None:
                assert self.cached.get(block.block_hash) == block.block_id
        assert shared == self.num_shared_refs
        for h, bid in self.cached.items():
            assert self.blocks[bid].block_hash == h
