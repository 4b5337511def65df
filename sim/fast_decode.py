"""The simulator's bulk-decode fast path: between events that change a batch (an arrival, a
finish, memory running out) decode steps are predictable, so the simulator takes them in one go.

This is the simulator's own code on the executor side of the seam. It drives a scheduler only
through its public queues and the allocator's declared interface (``num_free_slots``,
``growth_slots``, ``allocate``, ``caches_prefixes``, ``cache_full_blocks``), and applies ``k``
pure-decode steps exactly as ``k`` calls of ``Scheduler.update`` would, so results are
bit-identical to the step-by-step path (``tests/test_simulation.py`` checks it on random scenarios).

The simulator opts in (``sim.simulation.Replica(fast_decode=True)``). The runtime never can: its
tokens come from a model one step at a time (sampled ids, stop conditions), and ``BulkDecode``
refuses a scheduler built for an executor that addresses KV memory (``emit_block_tables``).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from sim.policies.schedulers.base import Scheduler
from sim.policies.step import StepPlan, StepShape


class BulkDecode:
    """Plans, reserves and applies windows of pure-decode steps for one replica's scheduler."""

    def __init__(self, scheduler: Scheduler, step_time: Callable[[StepShape], float],
                 decode_pricer: Optional[Callable[[StepShape], Callable[[int], float]]] = None) -> None:
        """``decode_pricer(shape)`` gives ``f(c)`` == ``step_time(shape.with_decode_context(c))``
        bit for bit, cheaper (``StepPricer.decode_context_pricer``); without one each step's
        shape is built and priced."""
        if scheduler.emit_block_tables:
            raise RuntimeError("bulk decode is the simulator's fast path; a scheduler that emits "
                             "block tables serves a real executor, which runs every step")
        self.scheduler = scheduler
        self.step_time = step_time
        self.decode_pricer = decode_pricer

    def limit(self, plan: StepPlan) -> int:
        """How many consecutive steps, starting with ``plan``, are certain to repeat ``plan``'s
        batch as pure decode: nobody finishes before the last of them (the last may be where
        someone finishes: the caller runs it through ``Scheduler.update``), memory suffices for
        all of them, and (because free memory only shrinks while nobody finishes, and simulated
        output tokens carry no content a waiting prompt could hit in the prefix cache) no
        waiting or swapped request can be admitted meanwhile. Arrivals are the caller's
        business (``durations``). Returns 1 when the plan is not a plain decode step."""
        if (plan.preempted or plan.swapped_out or plan.swapped_in or not plan.scheduled
                or plan.shape.num_prefill_tokens or plan.shape.num_spec_tokens):
            return 1
        if self.scheduler.config.num_speculative_tokens:
            # A decode without drafts under speculative decoding (one just admitted, or short of
            # budget) gets drafts in the next step: its batch does not repeat.
            return 1
        limit = self.scheduler.decode_window_limit()
        if limit < 2:
            return 1
        for s in plan.scheduled:
            if s.num_new_tokens != 1 or s.is_prefill:
                # A prompt's last token computed as a one-token step prices like a decode, but
                # the step ends its prompt: publishing it may change what the request holds
                # (the radix cache gives back a slot the tree already holds).
                return 1
            req = s.request
            left = req.max_output_tokens - req.num_output_tokens  # steps to its last token
            limit = left if left < limit else limit
        if limit < 2:
            return 1
        alloc = self.scheduler.allocator
        free = alloc.num_free_slots

        def fits(k: int) -> bool:
            need = 0
            for s in plan.scheduled:
                r = s.request
                need += alloc.growth_slots(r, r.num_computed_tokens + k)
                if need > free:
                    return False
            return True

        if fits(limit):
            return limit
        lo, hi = 1, limit  # fits(lo) holds (step 0 is allocated), fits(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def durations(self, plan: StepPlan, dt0: float, now: float, next_arrival: float) -> list[float]:
        """Durations of the steps, starting with ``plan`` (priced ``dt0``, starting at ``now``),
        that repeat its batch as pure decode before anything can change it: at most ``limit``
        steps, and none starting at or after ``next_arrival``. Each step is priced on its own
        shape and the clock is summed step by step, the same float arithmetic as the slow path."""
        limit = self.limit(plan)
        if limit < 2:
            return [dt0]
        shape = plan.shape
        batch = shape.num_decode_seqs
        dts = [dt0]
        t = now + dt0
        if t >= next_arrival:
            return dts
        if self.decode_pricer is not None:
            price = self.decode_pricer(shape)
        else:
            step_time = self.step_time
            price = lambda c: step_time(shape.with_decode_context(c))  # noqa: E731
        context = shape.decode_context_tokens
        for i in range(1, limit):
            if t >= next_arrival:
                break
            dt = price(context + i * batch)
            dts.append(dt)
            t += dt
        return dts

    def apply(self, plan: StepPlan, num_steps: int) -> None:
        """Apply a window of ``num_steps`` pure-decode steps of ``plan``'s batch to the
        scheduler's state exactly as step-by-step ``schedule``/``update`` rounds would: the KV
        allocations of all of them, and the tokens and prefix-cache publications of all but the
        last. The last step's results are the caller's, through ``Scheduler.update`` (it is the
        step where a request may finish); token times are ``advance``'s.

        Without a prefix cache, the window's KV is allocated at once. With one, allocations and
        publications interleave as they do step by step (a block taken from the free queue may
        evict a cached block whose hash a block filled earlier in the window would otherwise
        have found registered), but only where something happens: a request takes a block at
        the step its next token starts one, and publishes at the step it fills one. At every
        other step both calls are no-ops (the blocks held already cover the token, and the
        number of full blocks has not changed), so skipping them changes nothing, and the work
        per window is O(batch + steps x batch / block_size) instead of O(steps x batch)."""
        # Steps 1..num_steps-1 of the window are schedule calls the policy never sees.
        self.scheduler.skip_decode_schedules(num_steps - 1)
        alloc = self.scheduler.allocator
        reqs = [s.request for s in plan.scheduled]
        k = num_steps
        done = k - 1  # steps whose tokens are applied here
        if not alloc.caches_prefixes:
            for req in reqs:
                if not alloc.allocate(req, k):
                    raise RuntimeError("decode window allocation failed after BulkDecode.limit")
            for req in reqs:
                req.num_computed_tokens += done
                req.num_output_tokens += done
            return
        bs = alloc.block_size
        c0 = [r.num_computed_tokens for r in reqs]
        o0 = [r.num_output_tokens for r in reqs]
        # Step 0 (allocated by ``schedule``): every request takes its token and publishes.
        for req in reqs:
            req.num_computed_tokens += 1
            req.num_output_tokens += 1
            alloc.cache_full_blocks(req)
        # (step, phase, batch position); phase 0 allocates before step 1..k-1 runs, phase 1
        # publishes after step 1..k-2. Sorted, they run in the step-by-step order.
        events: list[tuple[int, int, int]] = []
        for j, c in enumerate(c0):
            first_alloc = (-c) % bs or bs  # smallest i >= 1 with (c + i) % bs == 0
            events.extend((i, 0, j) for i in range(first_alloc, k, bs))
            first_full = (-(c + 1)) % bs or bs  # smallest i >= 1 with (c + i + 1) % bs == 0
            events.extend((i, 1, j) for i in range(first_full, done, bs))
        events.sort()
        for i, phase, j in events:
            req = reqs[j]
            req.num_computed_tokens = c0[j] + i + phase
            req.num_output_tokens = o0[j] + i + phase
            if phase == 0:
                if not alloc.allocate(req, 1):
                    raise RuntimeError("decode window allocation failed after BulkDecode.limit")
            else:
                alloc.cache_full_blocks(req)
        for j, req in enumerate(reqs):
            req.num_computed_tokens = c0[j] + done
            req.num_output_tokens = o0[j] + done

    def advance(self, plan: StepPlan, step_end_times: list[float]) -> None:
        """Record the token times of the window's steps but the last (``apply`` made every
        other change; the last step's token is ``Scheduler.update``'s)."""
        for s in plan.scheduled:
            s.request.token_times.extend(step_end_times[:-1])

    def kv_deltas(self, plan: StepPlan, num_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per step 0..num_steps-1 of a window, how the KV breakdown differs from step 0's:
        (token states, reserved, internal fragmentation, held slots), each summed over the batch.
        Derived from step 0's holdings by each request's growth, vectorised; call it before
        ``apply``. External fragmentation does not change (nobody new asks for memory)."""
        alloc = self.scheduler.allocator
        reqs = [s.request for s in plan.scheduled]
        n = len(reqs)
        bs = alloc.block_size
        c = np.fromiter((r.num_computed_tokens for r in reqs), np.int64, n)[:, None]
        held0 = np.fromiter((alloc.num_held_slots(r) for r in reqs), np.int64, n)[:, None]
        final = np.fromiter((r.final_kv_len for r in reqs), np.int64, n)[:, None]
        i = np.arange(num_steps, dtype=np.int64)[None, :]
        held = np.maximum(held0, -(-(c + i + 1) // bs) * bs)
        wu = np.minimum(held, final)
        tok = np.minimum(c + i, wu)
        d_tok = (tok - tok[:, :1]).sum(axis=0)
        d_res = ((wu - tok) - (wu - tok)[:, :1]).sum(axis=0)
        d_int = ((held - wu) - (held - wu)[:, :1]).sum(axis=0)
        d_held = (held - held[:, :1]).sum(axis=0)
        return d_tok, d_res, d_int, d_held


__all__ = ["BulkDecode"]
