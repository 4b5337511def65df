"""Chunked-prefill scheduling (Sarathi-Serve, vLLM v1's default).

Every step has a token budget (``max_num_batched_tokens``). Running requests go first, in
admission order: decodes take one token (plus speculative tokens), unfinished prefills take the
next chunk. Whatever budget is left admits waiting requests, their prompts chunked to fit. When
KV blocks run out the newest running request is preempted (recompute, or swap). Because decodes
are never stalled behind a long prompt, inter-token latency stays flat under load.
"""

from __future__ import annotations

from typing import ClassVar

from sim.policies.schedulers.base import Scheduler
from sim.policies.step import ScheduledRequest, StepPlan


class ChunkedScheduler(Scheduler):
    name: ClassVar[str] = "chunked"
    chunked_prefill: ClassVar[bool] = True

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self.budget
        running = self.running
        allocate_decodes = self.allocator.allocate_decodes
        plain = not self.config.num_speculative_tokens
        scheduled = plan.scheduled
        # Invariant: the scheduled requests are exactly running[:len(scheduled)].
        while len(scheduled) < len(running) and budget > 0:
            start = len(scheduled)
            if plain:
                # Plain decodes with room to grow, the overwhelmingly common case: as many as
                # run in a row, allocated by one call.
                k = allocate_decodes(running, start, budget)
                if k:
                    scheduled.extend([ScheduledRequest(r, 1) for r in running[start:start + k]])
                    budget -= k
                    continue
            req = running[start]
            n, spec = self._decode_tokens(req)
            n = min(n, budget)
            spec = min(spec, budget - n)
            ok, refund = self._allocate_or_preempt(req, n + spec, plan)
            budget += refund
            if ok:
                scheduled.append(ScheduledRequest(req, n, spec, is_prefill=n > 1 or req.is_prefill))
                budget -= n + spec
        if not plan.preempted and not plan.swapped_out:
            budget = self._swap_in(plan, budget)
            self._admit_waiting(plan, budget, now)
        return self._finalize(plan)
