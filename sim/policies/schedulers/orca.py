"""Orca: iteration-level scheduling with whole-prompt prefills.

Every step, all running requests decode one token and waiting requests whose whole prompt fits
the token budget, ``max_num_seqs`` and KV memory join the same batch (Orca's selective batching
mixes prefill and decode). Paired with a contiguous allocator this is the paper's baseline:
memory is reserved in full at admission, so it never preempts; with a paged allocator it
preempts the newest by recompute when blocks run out.
"""

from __future__ import annotations

from typing import ClassVar

from sim.policies.schedulers.base import Scheduler
from sim.policies.step import StepPlan


class OrcaScheduler(Scheduler):
    name: ClassVar[str] = "orca"

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self.budget
        budget = self._schedule_running_decodes(plan, budget)
        if not plan.preempted and not plan.swapped_out:
            budget = self._swap_in(plan, budget)
            self._admit_waiting(plan, budget, now)
        return self._finalize(plan)
