"""Orca: iteration-level scheduling with whole-prompt prefills.

Every step, all running requests decode one token and waiting requests whose whole prompt fits
the token budget, ``max_num_seqs`` and KV memory join the same batch (Orca's selective batching
mixes prefill and decode). Paired with a contiguous allocator this is the paper's baseline:
memory is reserved in full at admission, so it never preempts; with a paged allocator it
preempts the newest by recompute when blocks run out.
"""

from __future__ import annotations

from sim.policies.kv.base import PrefixHit
from sim.policies.schedulers.base import Scheduler
from sim.policies.step import ScheduledRequest, StepPlan


class OrcaScheduler(Scheduler):
    name = "orca"

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self.budget
        budget = self._schedule_running_decodes(plan, budget)
        if not plan.preempted and not plan.swapped_out:
            self._swap_in(plan, budget)
            budget -= sum(s.num_new_tokens for s in plan.scheduled if s.request in plan.swapped_in)
            while self.waiting and not self.swapped and len(self.running) < self.config.max_num_seqs:
                req = self.peek_waiting()
                hit = self.allocator.lookup_prefix(req) if req.num_computed_tokens == 0 else PrefixHit()
                n = req.num_tokens - req.num_computed_tokens - hit.num_tokens
                if n > budget or not self.allocator.allocate(req, n, hit):
                    break
                self._admit(req, hit, now)
                plan.scheduled.append(ScheduledRequest(req, n, 0, is_prefill=n > 1))
                budget -= n
        return self._finalize(plan)
