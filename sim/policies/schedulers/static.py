"""Static batching, like Hugging Face ``generate`` behind a simple server.

A batch is formed from whatever is waiting (up to ``max_num_seqs`` that fit in KV memory), its
prompts are prefilled together padded to the longest, and the batch decodes until its *longest*
member finishes: members that finish early keep computing padding tokens and keep their memory,
and nobody joins until the whole batch returns. This is the baseline continuous batching beats.
"""

from __future__ import annotations

from typing import ClassVar

from sim.policies.kv.base import PrefixHit
from sim.policies.request import Request, RequestState
from sim.policies.kv.base import KVAllocator
from sim.policies.schedulers.base import Scheduler, SchedulerConfig
from sim.policies.step import ScheduledRequest, StepPlan, StepResult


class StaticScheduler(Scheduler):
    name: ClassVar[str] = "static"

    def __init__(self, allocator: KVAllocator, config: SchedulerConfig,
                 emit_block_tables: bool = False) -> None:
        super().__init__(allocator, config, emit_block_tables)
        if self.config.preemption != "recompute":
            raise ValueError("static batching preempts only by recompute (it never swaps back in)")
        self._done: set[str] = set()

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        if not self.running:
            while self.waiting and len(self.running) < self.config.max_num_seqs:
                req = self.peek_waiting()
                assert req is not None  # the loop runs while someone waits
                n = req.num_tokens - req.num_computed_tokens
                if not self.allocator.allocate(req, n):
                    break
                self._admit(req, PrefixHit(), now)
                plan.scheduled.append(ScheduledRequest(req, n, 0, is_prefill=True))
            if not plan.scheduled:
                return self._finalize(plan)
            longest = max(s.num_new_tokens for s in plan.scheduled)
            padding = longest * len(plan.scheduled) - sum(s.num_new_tokens for s in plan.scheduled)
            return self._finalize(plan, padding)
        active = [r for r in self.running if r.request_id not in self._done]
        for req in active:
            if req.state is not RequestState.RUNNING:
                continue
            n, spec = self._decode_tokens(req)
            ok, _ = self._allocate_or_preempt(req, n + spec, plan, pick=self._pick_active_victim)
            if ok:
                plan.scheduled.append(ScheduledRequest(req, n, spec, is_prefill=n > 1))
        return self._finalize(plan, padding=len(self._done))

    def _pick_active_victim(self) -> Request:
        active = [r for r in self.running if r.request_id not in self._done]
        return active[-1]

    def update(self, plan: StepPlan, result: StepResult, now: float) -> list[Request]:
        super().update(plan, result, now)
        if self.running and all(r.request_id in self._done for r in self.running):
            # The whole batch returns together: that is when its members are answered.
            finished = list(self.running)
            for req in finished:
                req.state = RequestState.FINISHED
                req.finish_time = now
                self.allocator.free(req)
            self.running.clear()
            self._done.clear()
            return finished
        return []

    def _on_finished(self, req: Request, reason: str, now: float, out: list[Request]) -> None:
        req.finish_reason = reason
        self._done.add(req.request_id)

    def abort(self, request_id: str, now: float):
        self._done.discard(request_id)
        return super().abort(request_id, now)
