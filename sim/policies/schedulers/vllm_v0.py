"""vLLM v0's default scheduler: prefill-prioritising, prefill and decode never mixed.

If waiting prompts fit (blocks, ``max_num_seqs``, token budget >= a whole prompt), the step is a
prefill-only batch of them; otherwise every running request decodes one token. When a decode
cannot get a block the newest request is preempted, by recompute (KV dropped, re-prefilled
later) or swap (KV copied to host memory over PCIe, copied back when blocks free up). Swapped
requests come back before any new prompt is admitted.
"""

from __future__ import annotations

from typing import ClassVar

from sim.policies.kv.base import PrefixHit
from sim.policies.schedulers.base import Scheduler
from sim.policies.step import StepPlan


class VllmV0Scheduler(Scheduler):
    name: ClassVar[str] = "vllm_v0"
    #: vLLM v0 keeps 1% of KV blocks free at admission so new prompts do not force an
    #: immediate preemption of running decodes (BlockSpaceManager's watermark).
    watermark: ClassVar[float] = 0.01
    admission_is_prefill: ClassVar[bool] = True

    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        self._admit_waiting(plan, self.budget, now)  # prefill-only step when anyone fits
        if plan.scheduled:
            return self._finalize(plan)
        self._schedule_running_decodes(plan, self.budget)
        if not plan.preempted and not plan.swapped_out:
            self._swap_in(plan, self.budget)
        return self._finalize(plan)

    def _may_admit(self, req, n: int, hit: PrefixHit) -> bool:
        """Whether admitting ``req`` leaves the watermark free. With nothing running the
        watermark is waived, or a request just under the pool size could never start."""
        if not self.running:
            return True
        alloc = self.allocator
        need = alloc.growth_slots(req, req.num_computed_tokens + hit.num_tokens + n)
        # Device hit blocks are reused, not taken (approximation for free ones); blocks loaded
        # from an offload tier (``hit.load``) take fresh ones.
        need -= len(hit.block_ids) * alloc.block_size
        return alloc.num_free_slots - max(need, 0) >= self.watermark * alloc.num_slots
