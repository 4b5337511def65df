"""What every scheduler shares: queues, admission checks, preemption, and the ``update`` that
turns an executed step into emitted tokens and finished requests.

Subclasses only decide *who computes how many tokens this step* (``schedule``); the token
bookkeeping in ``update`` is the same for all of them and for both executors.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import ClassVar, Optional

from sim.policies.kv.base import KVAllocator, PrefixHit
from sim.policies.request import Request, RequestState
from sim.policies.step import ScheduledRequest, StepPlan, StepResult, shape_of

PREEMPTION_MODES = ("recompute", "swap")
QUEUE_POLICIES = ("fcfs", "priority")


@dataclass
class SchedulerConfig:
    """Knobs named as vLLM users know them."""

    max_model_len: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: Optional[int] = None  # None: policy default (see resolved_budget)
    preemption: str = "recompute"
    queue_policy: str = "fcfs"
    num_speculative_tokens: int = 0

    def __post_init__(self) -> None:
        if self.preemption not in PREEMPTION_MODES:
            raise ValueError(f"preemption must be one of {', '.join(PREEMPTION_MODES)}, got {self.preemption!r}")
        if self.queue_policy not in QUEUE_POLICIES:
            raise ValueError(f"queue_policy must be one of {', '.join(QUEUE_POLICIES)}, got {self.queue_policy!r}")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ValueError("max_num_batched_tokens must be >= 1")
        if self.num_speculative_tokens < 0:
            raise ValueError("num_speculative_tokens must be >= 0")


def step_token_budget(chunked_prefill: bool, max_num_batched_tokens: Optional[int],
                      max_model_len: int) -> int:
    """Token budget per step. Without chunking a whole prompt must fit in one step, so the
    budget is at least max_model_len (vLLM v0's rule); chunked prefill defaults to 2048. The
    memory plan sizes its activation reserve from the same number."""
    if chunked_prefill:
        return max_num_batched_tokens if max_num_batched_tokens is not None else 2048
    return max(max_num_batched_tokens or 0, max_model_len)


class Scheduler(ABC):
    """Base scheduler. Public surface: ``add_request``, ``schedule``, ``update``, ``abort``,
    ``has_unfinished``; queues ``waiting``, ``running``, ``swapped`` are readable.

    Both executors drive it the same way, one step at a time. The simulator's bulk decode
    (``sim/fast_decode.py``) is the simulator's own code on top of this surface, not a mode of
    the scheduler."""

    name: ClassVar[str] = "base"
    #: Whether prompts may be split into chunks (only the chunked scheduler does).
    chunked_prefill: ClassVar[bool] = False

    def __init__(self, allocator: KVAllocator, config: SchedulerConfig,
                 emit_block_tables: bool = False) -> None:
        self.allocator = allocator
        self.config = config
        #: Whether every ``ScheduledRequest`` of a plan carries its ``block_table``. An
        #: executor that addresses KV memory (the runtime's model runner) sets it, so it never
        #: holds the allocator; the simulator leaves it off (it only prices a step's shape).
        self.emit_block_tables = emit_block_tables
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.swapped: deque[Request] = deque()
        self._admit_counter = itertools.count()
        self.num_preemptions = 0
        self.num_swapped_tokens = 0
        #: Host-link tokens of prefix loads from KV offload tiers admitted this step (priced
        #: with the step's swap tokens by ``_finalize``, then reset).
        self.num_load_swap_tokens = 0
        self.budget = self.resolved_budget()

    def resolved_budget(self) -> int:
        return step_token_budget(self.chunked_prefill, self.config.max_num_batched_tokens,
                                 self.config.max_model_len)

    # --- intake ---------------------------------------------------------------------------
    def validate(self, req: Request) -> Optional[str]:
        """Why ``req`` can never be served, or None."""
        limit = self.config.max_model_len
        if req.max_total_tokens > limit:
            return (f"prompt ({req.prompt_len}) + max output tokens ({req.max_output_tokens}) = "
                    f"{req.max_total_tokens} exceeds max_model_len {limit}")
        need = self.allocator.min_slots_for_final(req)
        if need > self.allocator.num_slots:
            return f"needs {need} KV slots but the whole KV pool has {self.allocator.num_slots}"
        return None

    def add_request(self, req: Request, now: float) -> bool:
        """Queue ``req``; returns False (and marks it rejected with a reason) if it can never fit."""
        reason = self.validate(req)
        if reason is not None:
            req.state = RequestState.REJECTED
            req.reject_reason = reason
            req.finish_time = now
            return False
        req.state = RequestState.WAITING
        self.waiting.append(req)
        return True

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running or self.swapped)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    def peek_waiting(self) -> Optional[Request]:
        if self.swapped:
            return self.swapped[0]
        if not self.waiting:
            return None
        if self.config.queue_policy == "priority":
            return min(self.waiting, key=lambda r: (r.priority, r.arrival_time))
        return self.waiting[0]

    # --- shared mechanics -----------------------------------------------------------------
    def _admit(self, req: Request, hit: PrefixHit, now: float) -> None:
        """Move a waiting request into the running set after its allocation succeeded."""
        if self.waiting and self.waiting[0] is req:
            self.waiting.popleft()
        else:
            self.waiting.remove(req)
        if req.first_scheduled_time is None:
            req.first_scheduled_time = now
            req.num_cached_tokens = hit.num_tokens
            self.allocator.record_prefix_query(req, hit)
        req.num_computed_tokens += hit.num_tokens
        req.state = RequestState.RUNNING
        req.admit_seq = next(self._admit_counter)
        self.running.append(req)

    def _pick_victim(self) -> Request:
        """Newest admission, or under the priority policy the least important then newest."""
        if self.config.queue_policy == "priority":
            return max(self.running, key=lambda r: (r.priority, r.admit_seq))
        return self.running[-1]

    def _allocate_or_preempt(self, req: Request, num_tokens: int, plan: StepPlan,
                             pick=None) -> tuple[bool, int]:
        """Allocate ``num_tokens`` more for running ``req``, preempting victims (the newest, or
        under the priority policy the least important) until it fits. A victim already scheduled
        this step is taken back out of the plan. Returns (whether ``req`` got its slots, tokens
        refunded to the step's budget)."""
        refund = 0
        pick = pick or self._pick_victim
        while not self.allocator.allocate(req, num_tokens):
            victim = pick()
            for k, s in enumerate(plan.scheduled):
                if s.request is victim:
                    refund += s.num_new_tokens + s.num_spec_tokens
                    del plan.scheduled[k]
                    break
            self._preempt(victim, plan)
            if victim is req:
                return False, refund
        return True, refund

    def _schedule_running_decodes(self, plan: StepPlan, budget: int) -> int:
        """Give every running request its decode (or rest of a recompute) in admission order,
        preempting when memory runs out; returns the budget left. Invariant: the scheduled
        requests are exactly ``running[:len(plan.scheduled)]``."""
        while len(plan.scheduled) < len(self.running):
            req = self.running[len(plan.scheduled)]
            n, spec = self._decode_tokens(req)
            ok, refund = self._allocate_or_preempt(req, n + spec, plan)
            budget += refund
            if ok:
                plan.scheduled.append(ScheduledRequest(req, n, spec, is_prefill=n > 1))
                budget -= n + spec
        return budget

    def _preempt(self, victim: Request, plan: StepPlan) -> None:
        self.running.remove(victim)
        self.num_preemptions += 1
        victim.num_preemptions += 1
        if self.config.preemption == "swap" and self.allocator.can_swap_out(victim):
            plan.swap_out_blocks[victim.request_id] = list(self.allocator.block_table(victim))
            self.num_swapped_tokens += self.allocator.swap_out(victim)
            victim.state = RequestState.SWAPPED
            self.swapped.append(victim)
            plan.swapped_out.append(victim)
            return
        # Recompute: drop the KV, re-prefill prompt + outputs so far when readmitted.
        self.allocator.free(victim)
        victim.num_computed_tokens = 0
        victim.state = RequestState.PREEMPTED
        self.waiting.appendleft(victim)
        plan.preempted.append(victim)

    def _resume(self, req: Request) -> None:
        req.state = RequestState.RUNNING
        req.admit_seq = next(self._admit_counter)
        self.running.append(req)

    def _swap_in(self, plan: StepPlan, budget: int) -> int:
        """Bring swapped requests back (oldest first) while blocks and budget allow; they
        compute their next token in this same step. Returns the budget left."""
        tokens = 0
        while self.swapped and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.swapped[0]
            n = min(req.num_uncomputed_tokens, budget)
            if not self.allocator.can_swap_in(req, n):
                break
            self.swapped.popleft()
            tokens += self.allocator.swap_in(req)
            plan.swap_in_blocks[req.request_id] = list(self.allocator.block_table(req))
            if not self.allocator.allocate(req, n):
                raise RuntimeError("swap-in allocation failed after can_swap_in")
            self._resume(req)
            plan.swapped_in.append(req)
            plan.scheduled.append(ScheduledRequest(req, n, 0, is_prefill=n > 1))
            budget -= n
        self.num_swapped_tokens += tokens
        return budget

    #: Whether an admitted prompt is always priced as prefill (vLLM v0's prefill-only steps),
    #: rather than by its length (a one-token remainder computes like a decode).
    admission_is_prefill: ClassVar[bool] = False

    def _may_admit(self, req: Request, num_new_tokens: int, hit: PrefixHit) -> bool:
        """Extra admission rule of a policy (vLLM v0's watermark); memory is checked after."""
        return True

    def _admit_waiting(self, plan: StepPlan, budget: int, now: float) -> int:
        """Admit waiting requests in queue order while the token budget, ``max_num_seqs`` and
        KV memory allow; prompts are chunked to the budget only under chunked prefill. Nobody
        new is admitted while swapped requests wait to come back. Returns the budget left."""
        if self.swapped:
            return budget
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.peek_waiting()
            assert req is not None  # the loop runs while someone waits
            hit = self.allocator.lookup_prefix(req) if req.num_computed_tokens == 0 else PrefixHit()
            n = req.num_tokens - req.num_computed_tokens - hit.num_tokens
            if self.chunked_prefill:
                n = min(n, budget)
            elif n > budget:
                break
            if not self._may_admit(req, n, hit) or not self.allocator.allocate(req, n, hit):
                break
            self._admit(req, hit, now)
            prefill = self.admission_is_prefill or n > 1 or req.is_prefill
            if hit.load is not None:
                # Its prefix's KV is loaded back from an offload tier before this step computes
                # (LMCache's synchronous retrieve): the copy is priced into this step, like a
                # swap-in, and the step counts as a prefill (it is not a repeatable decode).
                self.num_load_swap_tokens += hit.load.num_swap_tokens
                prefill = True
            plan.scheduled.append(ScheduledRequest(req, n, 0, is_prefill=prefill))
            budget -= n
        return budget

    def _decode_tokens(self, req: Request) -> tuple[int, int]:
        """(tokens, speculative tokens) a running request computes if it gets a full turn."""
        n = req.num_uncomputed_tokens
        spec = 0
        if n == 1 and self.config.num_speculative_tokens:
            remaining = req.max_output_tokens - req.num_output_tokens
            k = self.config.num_speculative_tokens
            if req.num_draft_tokens is not None:
                k = min(k, req.num_draft_tokens)
            spec = max(0, min(k, remaining - 1))
        return n, spec

    def _finalize(self, plan: StepPlan, padding: int = 0) -> StepPlan:
        # Swapped-in requests' computed tokens are what was copied back (read before the step).
        swap = sum(r.num_computed_tokens for r in plan.swapped_in)
        swap += sum(r.num_computed_tokens for r in plan.swapped_out)
        if self.num_load_swap_tokens:  # prefix loads from offload tiers admitted this step
            swap += self.num_load_swap_tokens
            self.num_load_swap_tokens = 0
        plan.shape = shape_of(plan.scheduled, num_swap_tokens=swap, num_padding_tokens=padding)
        if self.emit_block_tables:
            table = self.allocator.block_table
            for s in plan.scheduled:
                s.block_table = list(table(s.request))
        return plan

    @abstractmethod
    def schedule(self, now: float) -> StepPlan:
        """Decide this step. Allocations for every scheduled token are done before returning."""

    # --- after the step -------------------------------------------------------------------
    def update(self, plan: StepPlan, result: StepResult, now: float) -> list[Request]:
        """Advance every scheduled request by what the step computed; return those finished."""
        finished: list[Request] = []
        sampled = result.sampled_token_ids
        accepted = result.num_accepted
        running = RequestState.RUNNING
        # Without a prefix cache, publishing full blocks is a no-op: skip the call.
        publish = self.allocator.cache_full_blocks if self.allocator.caches_prefixes else None
        for s in plan.scheduled:
            req = s.request
            if req.state is not running:
                continue  # aborted while the step ran
            if (sampled is None and s.num_new_tokens == 1 and not s.num_spec_tokens
                    and req.num_computed_tokens + 1 == req.prompt_len + req.num_output_tokens):
                # Hot path: a simulated plain decode emits exactly one token.
                req.num_computed_tokens += 1
                req.num_output_tokens += 1
                req.token_times.append(now)
                if publish is not None:
                    publish(req)
                if req.num_output_tokens >= req.max_output_tokens:
                    self._on_finished(req, "length", now, finished)
                continue
            samples = s.samples_token
            req.num_computed_tokens += s.num_new_tokens
            if not samples:
                self.allocator.cache_full_blocks(req)
                continue
            rid = req.request_id
            if sampled is not None:
                new_ids = sampled.get(rid, [])
                n_emit = len(new_ids)
                if n_emit < 1:
                    raise ValueError(f"executor returned no token for request {rid}")
            else:
                new_ids = None
                n_emit = 1 + (accepted.get(rid, 0) if accepted else 0)
            n_acc = n_emit - 1
            if s.num_spec_tokens:
                if n_acc > s.num_spec_tokens:
                    raise ValueError(f"request {rid}: {n_acc} accepted of {s.num_spec_tokens} proposed")
                req.num_spec_proposed += s.num_spec_tokens
                req.num_spec_steps += 1
                req.num_spec_accepted += n_acc
                # Accepted draft tokens' KV was computed by the verification pass.
                req.num_computed_tokens += n_acc
            remaining = req.max_output_tokens - req.num_output_tokens
            n_emit = min(n_emit, remaining)
            if new_ids is not None:
                req.output_token_ids.extend(new_ids[:n_emit])
            req.num_output_tokens += n_emit
            req.token_times.extend([now] * n_emit)
            self.allocator.cache_full_blocks(req)
            # A stop condition on the last allowed token is still a stop (as vLLM reports it).
            if rid in result.stopped:
                self._on_finished(req, "stop", now, finished)
            elif req.num_output_tokens >= req.max_output_tokens:
                self._on_finished(req, "length", now, finished)
        return finished

    def _on_finished(self, req: Request, reason: str, now: float, out: list[Request]) -> None:
        req.finish_reason = reason
        req.state = RequestState.FINISHED
        req.finish_time = now
        self.running.remove(req)
        self.allocator.free(req)
        out.append(req)

    def abort(self, request_id: str, now: float) -> Optional[Request]:
        """Stop a request wherever it is and free its memory."""
        for queue in (self.running, self.waiting, self.swapped):
            for req in queue:
                if req.request_id == request_id:
                    queue.remove(req)
                    self.allocator.free(req)  # a swapped request's host copy too
                    req.state = RequestState.FINISHED
                    req.finish_reason = "abort"
                    req.finish_time = now
                    return req
        return None

    def decode_window_limit(self) -> int:
        """How many decode steps in a row the simulator's fast path may take between calls of
        ``schedule`` as far as this policy's own state goes (memory and arrivals are the fast
        path's to check). Unbounded here: a policy whose admissions change with every decode
        step (SGLang's falling ``new_token_ratio``) says less."""
        return 1 << 30

    def skip_decode_schedules(self, num_steps: int) -> None:
        """Apply to the policy's own state what ``num_steps`` decode-batch ``schedule`` calls,
        skipped by the fast path, would have done (nothing here)."""

    def holders(self) -> list[Request]:
        """Requests holding device KV (for memory accounting)."""
        return self.running
