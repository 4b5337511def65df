"""A minimal executor for policy tests: runs a scheduler to completion on fake tokens while a
shadow KV cache records which token id sits in every physical slot, exactly as the runtime's
``write_kv_cache`` would. Like the runtime's model runner it addresses KV only through the
block tables the plan carries. Lets tests check that prefix-cache hits hold the right tokens."""

from __future__ import annotations

import random
from typing import Optional

from sim.policies import Request, RequestState, StepResult
from sim.policies.kv import PagedAllocator
from sim.policies.schedulers.base import Scheduler


def fake_next_token(req: Request, position: int) -> int:
    """Deterministic 'model': the token after ``position`` depends on the request and position."""
    return (hash((req.request_id, position)) % 50) + 1


class ShadowDriver:
    def __init__(self, scheduler: Scheduler, use_token_ids: bool = True, stop_prob: float = 0.0,
                 seed: int = 0) -> None:
        self.s = scheduler
        self.alloc = scheduler.allocator
        self.use_token_ids = use_token_ids
        self.shadow: dict[int, int] = {}  # physical slot -> token id
        self.stop_rng = random.Random(seed)
        self.stop_prob = stop_prob
        self.finished: list[Request] = []
        self.host: dict[str, list] = {}  # swapped-out request -> its tokens' contents
        self.steps = 0
        self.now = 0.0
        if self._tracks_tokens:
            scheduler.emit_block_tables = True  # as the runtime builds its scheduler

    @property
    def _tracks_tokens(self) -> bool:
        return isinstance(self.alloc, PagedAllocator) and self.use_token_ids

    def _positions(self, plan, computed: bool):
        """(request, position, physical slot, token id) for every already-computed position
        (``computed``) or every position this step computes."""
        bs = self.alloc.block_size
        for s in plan.scheduled:
            req = s.request
            table = s.block_table
            tokens = req.all_token_ids()
            start = req.num_computed_tokens
            span = range(start) if computed else range(start, start + s.num_new_tokens)
            for pos in span:
                yield req, pos, table[pos // bs] * bs + pos % bs, tokens[pos]

    def _check_hits(self, plan) -> None:
        """Every token a scheduled request already counts as computed must be in its blocks."""
        if not self._tracks_tokens:
            return
        for req, pos, slot, token in self._positions(plan, computed=True):
            assert self.shadow.get(slot) == token, (
                f"request {req.request_id} position {pos}: slot {slot} holds "
                f"{self.shadow.get(slot)}, expected {token}")

    def _swap(self, plan) -> None:
        """Copy KV out to 'host' and back in, the way a real executor must."""
        bs = self.alloc.block_size
        for rid, blocks in plan.swap_out_blocks.items():
            self.host[rid] = [self.shadow.get(b * bs + o) for b in blocks for o in range(bs)]
        for rid, blocks in plan.swap_in_blocks.items():
            data = self.host.pop(rid)
            for i, b in enumerate(blocks):
                for o in range(bs):
                    if i * bs + o < len(data):
                        self.shadow[b * bs + o] = data[i * bs + o]

    def _write(self, plan) -> None:
        if not self._tracks_tokens:
            return
        for _, _, slot, token in self._positions(plan, computed=False):
            self.shadow[slot] = token

    def step(self) -> None:
        plan = self.s.schedule(self.now)
        assert not plan.is_empty, f"no progress: {self.s.waiting} {self.s.running}"
        for s in plan.scheduled:  # a preempted request must not stay in the plan
            assert s.request.state is RequestState.RUNNING, s.request
            assert self.alloc.num_held_slots(s.request) >= s.request.num_computed_tokens + s.num_new_tokens
        if self._tracks_tokens:
            for s in plan.scheduled:  # the plan's snapshot is the allocator's table, whole
                assert s.block_table == self.alloc.block_table(s.request), s.request
            self._swap(plan)
        self._check_hits(plan)
        self._write(plan)
        self.now += 1.0
        sampled: Optional[dict] = None
        stopped = set()
        if self.use_token_ids:
            sampled = {}
            for s in plan.scheduled:
                if s.samples_token:
                    req = s.request
                    sampled[req.request_id] = [fake_next_token(req, req.num_computed_tokens + s.num_new_tokens)]
                    if self.stop_prob and self.stop_rng.random() < self.stop_prob:
                        stopped.add(req.request_id)
        self.finished += self.s.update(plan, StepResult(sampled_token_ids=sampled, stopped=stopped), self.now)
        self.alloc.check_invariants()
        self.steps += 1

    def run(self, max_steps: int = 100_000) -> None:
        while self.s.has_unfinished():
            self.step()
            assert self.steps < max_steps, "scheduler did not finish"
