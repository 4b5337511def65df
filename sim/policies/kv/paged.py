"""PagedAttention allocator: KV in fixed-size blocks handed out on demand, with an optional
prefix cache (and KV offload tiers under it) and a host swap space (vLLM v0's swap preemption).

Waste is bounded by one partly filled block per request, which is why paging keeps well over 90%
of KV memory holding token states where contiguous reservation keeps under 40%.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence

from sim.policies.kv.base import KVAllocator, KVUsage, PrefixHit
from sim.policies.kv.block_pool import BlockPool
from sim.policies.kv.hashing import has_block_content, request_block_hashes
from sim.policies.kv.offload import OffloadLoad, OffloadTiers
from sim.policies.request import Request


class PagedAllocator(KVAllocator):
    """``window_tokens`` / ``window_ratio``: a hybrid model's sliding-window layers (gpt-oss:
    half its layers keep 128 tokens; Llama 4: 3 of 4 keep an 8192-token chunk), which vLLM's
    hybrid allocator pages from the same pool and trims to the window. A request holds there
    ``min(its final length, window_tokens)`` tokens of those layers, ``window_ratio`` pool slots
    a token (their bytes over the full-attention layers'): taken as whole blocks at its first
    allocation (its final length is what the simulator knows; vLLM grows to it), given back when
    it is freed or swapped out; counted as token states; never in ``num_held_slots``, which is
    the full-attention layers'.

    ``state_slots``: a hybrid linear-attention model's constant state per request (Qwen3.5's
    Gated DeltaNet layers), in pool slots: vLLM's hybrid allocator pages it from the same pool
    (``MambaSpec``: one page per request in each group of state layers). Held like the window:
    whole blocks taken at the request's first allocation, given back when it is freed or
    swapped out, counted as token states, never in ``num_held_slots``. (vLLM also raises the
    attention block size until one attention page is as large as one layer's state page: the
    caller passes that ``block_size``, ``sim.run_parts.vllm_hybrid_pages``.)

    ``offload``: KV offload tiers under the prefix cache (``sim.policies.kv.offload``): cached
    blocks evicted from the pool move down to them, and a lookup continues in them."""

    def __init__(self, num_slots: int, block_size: int = 16, prefix_caching: bool = False,
                 swap_slots: int = 0, window_tokens: int = 0, window_ratio: float = 0.0,
                 offload: Optional[OffloadTiers] = None, state_slots: int = 0) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if window_tokens < 0 or window_ratio < 0 or state_slots < 0:
            raise ValueError(f"window_tokens, window_ratio and state_slots must be >= 0")
        self.block_size = block_size
        self.state_blocks = -(-state_slots // block_size)
        self.window_tokens = window_tokens
        self.window_ratio = window_ratio
        self.window_blocks: dict[str, list[int]] = {}
        self.num_window_blocks = 0
        self.pool = BlockPool(num_slots // block_size)
        self.prefix_caching = prefix_caching
        self.req_blocks: dict[str, list[int]] = {}
        self.num_published: dict[str, int] = {}
        self.host_blocks_total = swap_slots // block_size
        self.host_blocks: dict[str, int] = {}
        self.num_prefix_queries = 0  # prompt tokens looked up
        self.num_prefix_hits = 0  # of which served from cache
        if offload is not None:
            if not prefix_caching:
                raise ValueError("KV offload tiers need prefix caching (only cached prefix "
                                 "blocks are offloaded)")
            if offload.block_size != block_size:
                raise ValueError(f"offload tiers count blocks of {offload.block_size} tokens, "
                                 f"the pool {block_size}")
            self.pool.spill = offload
        self.offload = offload

    # --- sizes ----------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.pool.num_blocks * self.block_size

    @property
    def num_free_slots(self) -> int:
        return self.pool.num_free * self.block_size

    def num_held_slots(self, req: Request) -> int:
        return len(self.req_blocks.get(req.request_id, ())) * self.block_size

    def block_table(self, req: Request) -> list[int]:
        return self.req_blocks.get(req.request_id, [])

    # --- prefix cache ---------------------------------------------------------------------
    @property
    def caches_prefixes(self) -> bool:
        return self.prefix_caching

    def lookup_prefix(self, req: Request) -> PrefixHit:
        if (not self.prefix_caching or req.num_computed_tokens or req.request_id in self.req_blocks
                or not has_block_content(req)):
            return PrefixHit()
        # Leave at least the last known token to compute: its logits produce the next token.
        max_blocks = (req.num_tokens - 1) // self.block_size
        hit = PrefixHit()
        hashes = request_block_hashes(req, max_blocks, self.block_size)
        for h in hashes:
            block_id = self.pool.get_cached(h)
            if block_id is None:
                break
            hit.block_ids.append(block_id)
        num_blocks = len(hit.block_ids)
        if self.offload is not None and num_blocks < len(hashes):
            # The chain goes on below the device (vLLM asks its offloading connector for the
            # tokens after the GPU hit): a contiguous run of CPU / SSD blocks, loaded back.
            hit.load = self.offload.lookup(hashes, num_blocks)
            if hit.load is not None:
                num_blocks += len(hit.load.hashes)
        hit.num_tokens = num_blocks * self.block_size
        return hit

    def cached_prefix_blocks(self, req: Request) -> int:
        # Read-only: dict membership on the hash index, no touch, no stats (see the base class).
        if not self.prefix_caching or not has_block_content(req):
            return 0
        cached = self.pool.cached
        n = 0
        for h in request_block_hashes(req, (req.num_tokens - 1) // self.block_size, self.block_size):
            if h not in cached:
                break
            n += 1
        return n

    def record_prefix_query(self, req: Request, hit: PrefixHit) -> None:
        self.num_prefix_queries += req.prompt_len
        self.num_prefix_hits += hit.num_tokens
        if self.offload is not None:
            gpu = len(hit.block_ids)
            lower = 0 if hit.load is None else len(hit.load.hashes)
            known = len(request_block_hashes(req, (req.num_tokens - 1) // self.block_size,
                                             self.block_size))
            # Blocks past the GPU hits the tiers were asked for: the run found, plus the miss
            # that ended it (if the request had known blocks left).
            queried = lower + (1 if gpu + lower < known else 0)
            self.offload.record_query(gpu, hit.load, queried)

    def cache_full_blocks(self, req: Request) -> None:
        if not self.prefix_caching or not has_block_content(req):
            return
        blocks = self.req_blocks.get(req.request_id)
        if not blocks:
            return
        num_full = min(req.num_computed_tokens // self.block_size, len(blocks))
        done = self.num_published.get(req.request_id, 0)
        if num_full <= done:
            return
        hashes = request_block_hashes(req, num_full, self.block_size)
        for i in range(done, len(hashes)):
            block = self.pool.blocks[blocks[i]]
            if block.block_hash is None:
                if self.pool.publish(blocks[i], hashes[i]) and self.offload is not None:
                    self.offload.discard(hashes[i])  # the device copy supersedes a tier's
        self.num_published[req.request_id] = max(done, len(hashes))

    # --- allocation -----------------------------------------------------------------------
    def _blocks_needed(self, req: Request, num_new_tokens: int, prefix: Optional[PrefixHit]) -> tuple[int, int]:
        """(new blocks to take from the free queue, free blocks consumed by touching hits)."""
        held = len(self.req_blocks.get(req.request_id, ()))
        hit_blocks = len(prefix.block_ids) if prefix else 0
        hit_tokens = prefix.num_tokens if prefix else 0
        total = req.num_computed_tokens + hit_tokens + num_new_tokens
        need = -(-total // self.block_size) - held - hit_blocks
        touched_free = 0
        if prefix:
            touched_free = sum(1 for b in prefix.block_ids if self.pool.blocks[b].ref_cnt == 0)
        return max(need, 0), touched_free

    def window_blocks_for(self, req: Request) -> int:
        """Blocks of this pool the request's sliding-window layers and linear-attention state
        hold (0 for a model with neither)."""
        if not self.window_tokens:
            return self.state_blocks
        bs = self.block_size
        tokens = min(-(-req.final_kv_len // bs) * bs, self.window_tokens)
        return -(-int(math.ceil(tokens * self.window_ratio)) // bs) + self.state_blocks

    def _window_needed(self, req: Request) -> int:
        """Window and state blocks a request still has to take (all of them before its first
        allocation)."""
        if (self.window_tokens or self.state_blocks) and req.request_id not in self.window_blocks:
            return self.window_blocks_for(req)
        return 0

    def can_allocate(self, req: Request, num_new_tokens: int,
                     prefix: Optional[PrefixHit] = None) -> bool:
        need, touched_free = self._blocks_needed(req, num_new_tokens, prefix)
        return need + touched_free + self._window_needed(req) <= self.pool.num_free

    def allocate(self, req: Request, num_new_tokens: int,
                 prefix: Optional[PrefixHit] = None) -> bool:
        window = self._window_needed(req)
        load = prefix.load if prefix is not None and self.offload is not None else None
        if window:  # a request's first allocation under a sliding window: its window first
            if not self.can_allocate(req, num_new_tokens, prefix):
                return False
            if load is not None:  # out of the tiers before the window's blocks evict into them
                self._take_load(load)
            self.window_blocks[req.request_id] = self.pool.allocate(window)
            self.num_window_blocks += window
        if not prefix or not prefix.num_tokens:
            # Hot path (every decode of every step): room already held, or plain growth.
            blocks = self.req_blocks.get(req.request_id)
            total = req.num_computed_tokens + num_new_tokens
            held = len(blocks) if blocks else 0
            need = -(-total // self.block_size) - held
            if need <= 0:
                return True
            if need > len(self.pool.free_queue):
                return False
            if blocks is None:
                blocks = self.req_blocks[req.request_id] = []
            blocks.extend(self.pool.allocate(need))
            return True
        need, touched_free = self._blocks_needed(req, num_new_tokens, prefix)
        if need + touched_free > self.pool.num_free:
            return False
        blocks = self.req_blocks.setdefault(req.request_id, [])
        if prefix and prefix.block_ids:
            for b in prefix.block_ids:
                self.pool.touch(b)
            blocks.extend(prefix.block_ids)
            self.num_published[req.request_id] = len(blocks)
        if load is not None:
            # Out of the tiers first, so that evictions the new blocks cause cannot push the
            # blocks being loaded further down; then fresh blocks take their content.
            if not window:
                self._take_load(load)
            new = self.pool.allocate(need)
            offload = self.offload
            for j in range(len(load.hashes)):
                self.pool.publish(new[j], load.hashes[j])
                if offload is not None:
                    offload.loaded_into(load.hashes[j], new[j])
            blocks.extend(new)
            self.num_published[req.request_id] = len(blocks) - len(new) + len(load.hashes)
        elif need:
            blocks.extend(self.pool.allocate(need))
        return True

    def _take_load(self, load: OffloadLoad) -> None:
        if self.offload is None:
            raise RuntimeError("a prefix hit with a load, but no offload tiers")
        self.offload.take(load)

    def allocate_decodes(self, reqs: Sequence[Request], start: int, limit: int) -> int:
        # ``allocate(req, 1)`` per request (its hot path), inlined: one call per step.
        bs = self.block_size
        get = self.req_blocks.get
        free_queue = self.pool.free_queue
        end = min(len(reqs), start + limit)
        i = start
        while i < end:
            req = reqs[i]
            computed = req.num_computed_tokens
            if req.prompt_len + req.num_output_tokens - computed != 1:
                break
            blocks = get(req.request_id)
            held = len(blocks) if blocks else 0
            need = -(-(computed + 1) // bs) - held
            if need > 0:
                if need > len(free_queue):
                    break
                if blocks is None:
                    blocks = self.req_blocks[req.request_id] = []
                blocks.extend(self.pool.allocate(need))
            i += 1
        return i - start

    def free(self, req: Request) -> None:
        blocks = self.req_blocks.pop(req.request_id, None)
        self.num_published.pop(req.request_id, None)
        self.host_blocks.pop(req.request_id, None)  # an aborted swapped request's host copy
        if blocks:
            self.pool.release(blocks)
        window = self.window_blocks.pop(req.request_id, None)
        if window:
            self.num_window_blocks -= len(window)
            self.pool.release(window)

    # --- swap (host memory) ---------------------------------------------------------------
    @property
    def host_blocks_free(self) -> int:
        return self.host_blocks_total - sum(self.host_blocks.values())

    def can_swap_out(self, req: Request) -> bool:
        n = len(self.req_blocks.get(req.request_id, ())) + len(self.window_blocks.get(req.request_id, ()))
        return n <= self.host_blocks_free

    def swap_out(self, req: Request) -> int:
        n = len(self.req_blocks.get(req.request_id, ())) + len(self.window_blocks.get(req.request_id, ()))
        if n > self.host_blocks_free:
            raise RuntimeError("swap space exhausted")
        self.free(req)
        self.host_blocks[req.request_id] = n
        return req.num_computed_tokens

    def can_swap_in(self, req: Request, num_new_tokens: int = 1) -> bool:
        need = -(-(req.num_computed_tokens + num_new_tokens) // self.block_size)
        return need + self.window_blocks_for(req) <= self.pool.num_free

    def swap_in(self, req: Request) -> int:
        self.host_blocks.pop(req.request_id)
        need = -(-req.num_computed_tokens // self.block_size)
        self.req_blocks[req.request_id] = self.pool.allocate(need)
        window = self.window_blocks_for(req)
        if window:
            self.window_blocks[req.request_id] = self.pool.allocate(window)
            self.num_window_blocks += window
        return req.num_computed_tokens

    # --- accounting -----------------------------------------------------------------------
    def usage(self, holders: Iterable[Request], waiting: Optional[Request]) -> KVUsage:
        # Called for every logged step: locals and inlined properties (``final_kv_len`` is
        # prompt + max outputs - 1) keep it to a few arithmetic operations per holder.
        bs = self.block_size
        tokens = reserved = internal = 0
        get = self.req_blocks.get
        for req in holders:
            blocks = get(req.request_id)
            if not blocks:
                continue
            held = len(blocks) * bs
            final = req.prompt_len + req.max_output_tokens - 1
            will_use = held if held < final else final
            computed = req.num_computed_tokens
            if computed > will_use:
                computed = will_use
            tokens += computed
            reserved += will_use - computed
            internal += held - will_use
        # A block shared through the prefix cache is counted once, as token states.
        tokens -= self.pool.num_shared_refs * bs
        # Sliding-window layers' KV: token states (held only up to the window).
        tokens += self.num_window_blocks * bs
        return KVUsage(tokens, reserved, internal, 0, self.pool.num_free * bs)

    def growth_slots(self, req: Request, num_tokens: int) -> int:
        # The base class's definition, inlined: the bulk-decode window asks it per request.
        bs = self.block_size
        blocks = self.req_blocks.get(req.request_id)
        need = -(-num_tokens // bs) - (len(blocks) if blocks else 0)
        return need * bs if need > 0 else 0

    def offload_stats(self) -> Optional[dict]:
        if self.offload is None:
            return None
        out = self.offload.stats()
        out["gpu_evicted_blocks"] = self.pool.num_evicted
        return out

    def check_invariants(self) -> None:
        held: dict[int, int] = {}
        for blocks in list(self.req_blocks.values()) + list(self.window_blocks.values()):
            for b in blocks:
                held[b] = held.get(b, 0) + 1
        self.pool.check_invariants(held)
        if self.offload is not None:
            self.offload.check_invariants(set(self.pool.cached), self.pool.num_evicted)
