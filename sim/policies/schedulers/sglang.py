"""SGLang's scheduler (``python/sglang/srt/managers/scheduler.py``, ``schedule_policy.py`` and
``schedule_batch.py``, 0.5.x), as a policy both executors can drive.

What differs from vLLM V1's chunked scheduler (``sim.policies.schedulers.chunked``):

- **Prefill first, in its own batch.** Every iteration first tries to build a prefill ("extend")
  batch from the waiting queue (``get_new_batch_prefill``); only when none can be built does
  the running batch decode (``update_running_batch``). Decodes stall while prompts are
  admitted, unless ``enable_mixed_chunk`` mixes the running decodes into the extend batch
  (``ScheduleBatch.mix_with_running``), whose prompt budget then shrinks by one token per
  decode.
- **One chunked request at a time.** A prompt longer than the chunk budget left
  (``chunked_prefill_size``) is cut (``PrefillAdder.add_one_req``) and becomes the one chunked
  request; its next chunk goes first in the next extend batch (``add_chunked_req``).
- **Admission reserves future decode tokens** (``PrefillAdder``): a waiting request is
  admitted only while ``extend tokens + min(max_new_tokens, 4096)`` fits in what is free or
  evictable minus, for every running request, its remaining ``min(max_new_tokens - output,
  4096) x new_token_ratio`` (``CLIP_MAX_NEW_TOKENS``). When one does not fit
  (``AddReqResult.NO_TOKEN``) the batch is marked full and nobody is admitted until the decode
  batch shrinks (``batch_is_full``, reset in ``update_running_batch``).
- **new_token_ratio**, the estimate of how much of ``max_new_tokens`` running requests will
  still use, starts at ``0.7 x schedule_conservativeness`` (at most 1), falls by
  ``(init - min) / 600`` every decode batch down to ``init x 0.14``
  (``SGLANG_INIT_NEW_TOKEN_RATIO``, ``..._MIN_NEW_TOKEN_RATIO_FACTOR``,
  ``..._NEW_TOKEN_RATIO_DECAY_STEPS``), goes back to its start when the server is idle, and is
  reset from the running batch after a retraction.
- **Retraction instead of preemption** (``ScheduleBatch.retract_decode``): when the decode
  batch cannot get its next tokens, requests are retracted, fewest output tokens first (ties:
  longest prompt first), until the rest have room for ``retract_decode_steps`` (20) more
  tokens each; their KV is released (the prompt stays in the radix cache while nobody evicts
  it) and they go back to the end of the waiting queue to be prefilled again.
- **Queue order** (``SchedulePolicy.calc_priority``): ``fcfs`` (the default: arrival order,
  retracted requests at the end), ``lpm`` (longest cached prefix first, a request sharing an
  uncached prefix with one ahead of it held back; FCFS when more than 128 wait), ``dfs-weight`` (the waiting requests' matched tree nodes walked depth first,
  heavier subtrees first), ``lof`` (longest output first).
- **Polling for new requests** (``--scheduler-recv-interval N``, ``SchedulerRecvSkipper``):
  the loop reads the request socket only once its counter reaches N; a decode step adds 1,
  an extend or mixed batch 1000 (so the loop polls after every one), and the counter restarts
  at each poll. Under steady decoding a request that reached the server waits about N / 2
  decode steps before the scheduler sees it (``RecvSkipper``; not with DP attention, which
  SGLang refuses to combine with it).
- **Limits**: ``max_running_requests`` (``max_num_seqs`` here; SGLang's default is half the KV
  pool's tokens, at most the request-to-token pool's 2048-4096 rows,
  ``sim.catalog.engines.sglang_max_running_requests``) and ``max_prefill_tokens`` (16384
  prompt tokens per extend batch).
"""

from __future__ import annotations

from typing import ClassVar, Optional

from sim.policies.kv.base import KVAllocator, PrefixHit
from sim.policies.kv.hashing import request_block_hashes
from sim.policies.request import Request, RequestState
from sim.policies.schedulers.base import Scheduler, SchedulerConfig
from sim.policies.step import ScheduledRequest, StepPlan

#: Queue orders (SGLang's ``--schedule-policy``) kvplan models.
SGLANG_SCHEDULE_POLICIES: tuple[str, ...] = ("fcfs", "lpm", "dfs-weight", "lof")

#: ``CLIP_MAX_NEW_TOKENS``: the reservation counts at most this many future tokens per request.
CLIP_MAX_NEW_TOKENS = 4096
#: ``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` (``sglang/srt/environ.py``).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``retract_decode_steps``: a retraction leaves every remaining request room for this many tokens.
RETRACT_DECODE_STEPS = 20
#: ``lpm`` falls back to FCFS above this many waiting requests (``_determine_active_policy``).
LPM_MAX_QUEUE = 128
#: ``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD`` and ``..._DEPRIORITIZE_THRESHOLD`` (both 32).
IN_BATCH_THRESHOLD = 32
#: ``max_prefill_tokens``' default: prompt tokens per extend batch.
DEFAULT_MAX_PREFILL_TOKENS = 16384


class RecvSkipper:
    """``--scheduler-recv-interval`` as SGLang runs it (``SchedulerRecvSkipper.handle``,
    ``python/sglang/srt/managers/scheduler_recv_skipper.py``): whether the scheduler loop reads
    new requests before planning its next batch. A decode step weighs 1 (``ForwardMode.DECODE``,
    ``TARGET_VERIFY``), anything else 1000 (``_DEFAULT_WEIGHT``: an extend or mixed batch makes
    the next iteration poll); at ``interval`` the loop polls and the counter restarts.

    Why it matters: benchmark configurations set it to 10-30 (InferenceX's SGLang scripts on
    B200 / B300) to save the poll's CPU time between decode steps, and each new request then
    waits half that many decode steps on average before it can be prefilled: tens to hundreds
    of milliseconds of TTFT that no step price shows."""

    def __init__(self, interval: int) -> None:
        if interval < 1:
            raise ValueError("sglang.scheduler_recv_interval must be >= 1")
        self.interval = interval
        self.counter = 0

    def handle(self, decode_steps: int, extend: bool) -> bool:
        """After ``decode_steps`` decode steps (a decode window's) or one extend / mixed
        batch (``extend``): whether the loop polled at the last of them. A window polls at
        every ``interval``-th step; only its phase carries over."""
        if extend:
            self.counter = 0
            return True
        total = self.counter + decode_steps
        if total >= self.interval:
            self.counter = total % self.interval
            return True
        self.counter = total
        return False


def _future_tokens(req: Request) -> int:
    """The output tokens ``req`` may still produce, as admission counts them: at most
    ``CLIP_MAX_NEW_TOKENS``."""
    return min(req.max_output_tokens - req.num_output_tokens, CLIP_MAX_NEW_TOKENS)


class SglangScheduler(Scheduler):
    name: ClassVar[str] = "sglang"
    chunked_prefill: ClassVar[bool] = True

    def __init__(self, allocator: KVAllocator, config: SchedulerConfig,
                 emit_block_tables: bool = False, schedule_policy: str = "fcfs",
                 schedule_conservativeness: float = 1.0, enable_mixed_chunk: bool = False,
                 max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS,
                 scheduler_recv_interval: int = 1) -> None:
        super().__init__(allocator, config, emit_block_tables=emit_block_tables)
        if schedule_policy not in SGLANG_SCHEDULE_POLICIES:
            raise ValueError(f"sglang.schedule_policy must be one of "
                             f"{', '.join(SGLANG_SCHEDULE_POLICIES)}, got {schedule_policy!r}")
        if schedule_conservativeness <= 0:
            raise ValueError("sglang.schedule_conservativeness must be > 0")
        if max_prefill_tokens < 1:
            raise ValueError("sglang.max_prefill_tokens must be >= 1")
        # Cache-aware orders need a prefix cache to look in; SGLang falls back to FCFS without
        # one (``SchedulePolicy._validate_and_adjust_policy``).
        if schedule_policy in ("lpm", "dfs-weight") and not allocator.caches_prefixes:
            schedule_policy = "fcfs"
        self.schedule_policy = schedule_policy
        self.enable_mixed_chunk = enable_mixed_chunk
        #: ``--scheduler-recv-interval`` above 1: the loop that drives this scheduler polls
        #: for new requests through it (None: every iteration, SGLang's default).
        self.recv_skipper: Optional[RecvSkipper] = (RecvSkipper(scheduler_recv_interval)
                                                   if scheduler_recv_interval != 1 else None)
        self.max_prefill_tokens = max_prefill_tokens
        self.init_new_token_ratio = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.new_token_ratio_decay = ((self.init_new_token_ratio - self.min_new_token_ratio)
                                      / NEW_TOKEN_RATIO_DECAY_STEPS)
        self.new_token_ratio = self.init_new_token_ratio
        #: The one request whose prompt is being prefilled in chunks (it is in ``running``, but
        #: not in the decode batch).
        self.chunked_req: Optional[Request] = None
        #: ``running_batch.batch_is_full``: no admission until the decode batch shrinks.
        self.batch_is_full = False
        #: A running request finished since the last decode batch (the batch will be smaller).
        self._shrunk = False
        #: Whether the last plan was an extend batch (a one-token prompt's looks like a decode).
        self._extend = False
        self.num_retractions = 0

    def validate(self, req: Request) -> Optional[str]:
        """The base rules, and SGLang's admission rule on an empty server: the prompt plus
        ``min(max_new_tokens, 4096)`` must be under the whole pool, or the request would wait
        for ever (``PrefillAdder`` refuses it however idle the server is)."""
        reason = super().validate(req)
        if reason is not None:
            return reason
        new = _future_tokens(req)  # a request at intake has produced nothing
        need = req.prompt_len + new
        if need >= self.allocator.num_slots:
            return (f"prompt ({req.prompt_len}) + max new tokens ({new}) "
                    f"= {need} does not fit under the KV pool's {self.allocator.num_slots} slots "
                    f"(SGLang's admission rule)")
        return None

    # --- one iteration ----------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        plan = StepPlan()
        if not self.running and not self.waiting:
            self.new_token_ratio = self.init_new_token_ratio  # idle: the estimate starts over
            self.batch_is_full = False
            return self._finalize(plan)
        if self.chunked_req is None and len(self.running) == 0:
            self.batch_is_full = False  # ``update_running_batch`` on an empty batch
        self._extend = self._build_extend_batch(plan, now)
        if not self._extend:
            self._build_decode_batch(plan)
            if not plan.scheduled and plan.preempted:
                # Everyone was retracted (kvplan's rule where SGLang would run out of memory):
                # the freed pool takes an extend batch in this same iteration.
                self._extend = self._build_extend_batch(plan, now)
        return self._finalize(plan)

    def _decode_batch(self) -> list[Request]:
        """The running batch: every running request but the chunked one."""
        chunked = self.chunked_req
        return [r for r in self.running if r is not chunked]

    # --- prefill (extend) batch -------------------------------------------------------------
    def _reserved_by_running(self, batch: list[Request]) -> float:
        """Future tokens the running batch is expected to need (``PrefillAdder.__init__``)."""
        ratio = self.new_token_ratio
        total = 0.0
        for r in batch:
            left = _future_tokens(r)
            if left > 0:
                total += left * ratio
        return total

    def _build_extend_batch(self, plan: StepPlan, now: float) -> bool:
        """``get_new_batch_prefill``: the chunked request's next chunk, then waiting requests in
        queue order while the budgets allow. Returns whether an extend batch was built."""
        if self.chunked_req is None and (self.batch_is_full or not self.waiting):
            return False
        batch = self._decode_batch()
        running_bs = len(batch)
        max_running = self.config.max_num_seqs
        if self.chunked_req is None and running_bs >= max_running:
            self.batch_is_full = True
            return False
        alloc = self.allocator
        mixed = self.enable_mixed_chunk and running_bs > 0
        rem_chunk = self.budget - (running_bs if mixed else 0)
        rem_input = self.max_prefill_tokens
        rem_total = alloc.num_free_slots - self._reserved_by_running(batch)
        scheduled = plan.scheduled

        chunked = self.chunked_req
        if chunked is not None:
            left = chunked.num_tokens - chunked.num_computed_tokens
            n = min(left, max(rem_chunk, 0))
            if n > 0 and alloc.allocate(chunked, n):
                scheduled.append(ScheduledRequest(chunked, n, 0, is_prefill=True))
                rem_chunk -= n
                rem_input -= n
                if n == left:
                    self.chunked_req = None
                    rem_total -= n + _future_tokens(chunked)
                else:
                    rem_total -= n
        admitted = 0
        for req in self._ordered_waiting():
            if rem_chunk <= 0 or rem_input <= 0:
                break
            if running_bs + admitted + (1 if self.chunked_req is not None else 0) >= max_running:
                self.batch_is_full = True
                break
            hit = alloc.lookup_prefix(req) if req.num_computed_tokens == 0 else PrefixHit()
            extend = req.num_tokens - req.num_computed_tokens - hit.num_tokens
            max_new = _future_tokens(req)
            if extend + max_new >= rem_total:
                self.batch_is_full = True  # AddReqResult.NO_TOKEN
                break
            if extend <= rem_chunk:
                n = extend
            elif self.chunked_req is not None:
                break  # only one chunked request at a time
            else:
                n = rem_chunk
            if not alloc.allocate(req, n, hit):
                self.batch_is_full = True
                break
            self._admit(req, hit, now)
            scheduled.append(ScheduledRequest(req, n, 0, is_prefill=n > 1 or req.is_prefill))
            admitted += 1
            rem_chunk -= n
            rem_input -= n
            if n < extend:
                self.chunked_req = req
                rem_total -= n
            else:
                rem_total -= n + max_new
            if rem_total <= 0:
                self.batch_is_full = True
                break
        if not scheduled:
            return False
        if mixed:
            self._add_decodes(plan, batch)
        return True

    def _ordered_waiting(self) -> list[Request]:
        """The waiting queue in ``schedule_policy``'s order (``calc_priority``)."""
        queue = list(self.waiting)
        policy = self.schedule_policy
        if policy == "fcfs" or len(queue) < 2:
            return queue
        if policy == "lof":
            return sorted(queue, key=lambda r: -r.max_output_tokens)
        if policy == "lpm":
            if len(queue) > LPM_MAX_QUEUE:
                return queue
            return self._lpm_order(queue)
        return self._dfs_weight_order(queue)

    def _lpm_order(self, queue: list[Request]) -> list[Request]:
        """``_sort_by_longest_prefix`` after ``_compute_prefix_matches``: longest cached prefix
        first, except the in-batch rule. A request whose cached match is at most 32 tokens
        (``IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD``) is matched against the waiting requests
        before it (a radix tree of their prompts); if it shares at least 32 tokens with one
        (``..._DEPRIORITIZE_THRESHOLD``) it goes last for now, so that one of them is prefilled
        first and the others then hit the cache; otherwise its prompt joins that tree."""
        alloc = self.allocator
        page = alloc.slots_for_tokens(1)
        cached = {id(r): alloc.cached_prefix_blocks(r) for r in queue}
        units = IN_BATCH_THRESHOLD // page + 1  # enough units to see a match of 32 tokens
        seen: set[int] = set()
        held_back: set[int] = set()
        for r in queue:
            if cached[id(r)] * page > IN_BATCH_THRESHOLD:
                continue
            chain = request_block_hashes(r, units, page)
            shared = 0
            for h in chain:  # a chain hash names the whole prefix up to it
                if h not in seen:
                    break
                shared += 1
            if shared * page >= IN_BATCH_THRESHOLD:
                held_back.add(id(r))
            else:
                seen.update(chain)
        return sorted(queue, key=lambda r: (id(r) in held_back, -cached[id(r)]))

    def _dfs_weight_order(self, queue: list[Request]) -> list[Request]:
        """``_sort_by_dfs_weight``: group the waiting requests by the cached prefix they match,
        weigh each prefix by the requests below it, and walk the prefixes depth first, heavier
        first. A request's matched prefix is named by its length in the cache's units; prefixes
        nest when one request's matched blocks are a prefix of another's."""
        cached = self.allocator.cached_prefix_blocks
        depth = {id(r): cached(r) for r in queue}
        # Requests that match nothing form the root's own group and come last (the root has the
        # whole queue's weight; its children are the matched prefixes).
        matched = [r for r in queue if depth[id(r)] > 0]
        if not matched:
            return queue
        keys = {id(r): self._prefix_key(r, depth[id(r)]) for r in matched}
        weight: dict[tuple, int] = {}
        for r in matched:
            key = keys[id(r)]
            for k in range(1, len(key) + 1):
                weight[key[:k]] = weight.get(key[:k], 0) + 1
        def path_key(r: Request) -> tuple:
            key = keys[id(r)]
            # Heavier subtree first at every level; the unit's id keeps a subtree contiguous.
            return tuple((-weight[key[:k]], key[k - 1]) for k in range(1, len(key) + 1))

        order = sorted(matched, key=path_key)
        return order + [r for r in queue if depth[id(r)] == 0]

    def _prefix_key(self, req: Request, units: int) -> tuple:
        """The first ``units`` cache units (pages) of ``req`` as a path of content hashes."""
        return tuple(request_block_hashes(req, units, self.allocator.slots_for_tokens(1)))

    # --- decode batch -----------------------------------------------------------------------
    def _build_decode_batch(self, plan: StepPlan) -> None:
        """``update_running_batch``: retract when the batch cannot get its next tokens, move
        ``new_token_ratio``, then one decode step for the whole batch."""
        batch = self._decode_batch()
        if not batch:
            return
        if self._shrunk:
            self.batch_is_full = False
            self._shrunk = False
        if self._slots_needed(batch) > self.allocator.num_free_slots:
            batch = self._retract(batch, plan)
        else:
            self._decay_ratio()
        self._add_decodes(plan, batch)

    def _decay_ratio(self) -> None:
        """One decode batch's fall of ``new_token_ratio``, down to its floor."""
        self.new_token_ratio = max(self.new_token_ratio - self.new_token_ratio_decay,
                                   self.min_new_token_ratio)

    def _spec_of(self, req: Request) -> int:
        return self._decode_tokens(req)[1]

    def _add_decodes(self, plan: StepPlan, batch: list[Request]) -> None:
        for req in batch:
            n, spec = self._decode_tokens(req)
            if not self.allocator.allocate(req, n + spec):
                raise RuntimeError(f"request {req.request_id}: no KV slot for its next token "
                                   f"after retraction")
            plan.scheduled.append(ScheduledRequest(req, n, spec, is_prefill=n > 1))

    def _retract(self, batch: list[Request], plan: StepPlan) -> list[Request]:
        """``retract_decode``: retract the requests with the fewest output tokens (ties: the
        longest prompt) until the rest have room for ``RETRACT_DECODE_STEPS`` tokens each;
        at least one request stays. Resets ``new_token_ratio`` from what is left."""
        alloc = self.allocator
        keep = sorted(batch, key=lambda r: (r.num_output_tokens, -r.prompt_len), reverse=True)
        first = True
        while len(keep) > 1:
            if not first and alloc.num_free_slots >= self._slots_needed(keep, RETRACT_DECODE_STEPS):
                break
            first = False
            victim = keep.pop()
            self._retract_one(victim, plan)
        # Where SGLang would stop with an out-of-memory error (the last request still cannot
        # get its next tokens, typically because the chunked request holds the pool), kvplan
        # retracts the chunked request, then the last ones, so the run goes on.
        if self._slots_needed(keep) > alloc.num_free_slots and self.chunked_req is not None:
            chunked = self.chunked_req
            self.chunked_req = None
            self._retract_one(chunked, plan)
        while keep and self._slots_needed(keep) > alloc.num_free_slots:
            self._retract_one(keep.pop(), plan)
        decoded = sum(r.num_output_tokens for r in keep)
        max_new = sum(r.max_output_tokens for r in keep)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep)) / max(max_new, 1))
        self.batch_is_full = False
        keep_ids = {id(r) for r in keep}
        return [r for r in batch if id(r) in keep_ids]

    def _slots_needed(self, batch: list[Request], ahead: int = 0) -> int:
        """Slots the batch takes for ``ahead`` more tokens each, or (0) for its next decode
        step, speculative tokens included."""
        alloc = self.allocator
        need = 0
        for r in batch:
            need += alloc.growth_slots(r, r.num_computed_tokens + (ahead or 1 + self._spec_of(r)))
        return need

    def _retract_one(self, victim: Request, plan: StepPlan) -> None:
        self.running.remove(victim)
        self.num_preemptions += 1
        self.num_retractions += 1
        victim.num_preemptions += 1
        self.allocator.free(victim)
        victim.num_computed_tokens = 0
        victim.state = RequestState.PREEMPTED
        self.waiting.append(victim)  # the end of the queue (``_add_request_to_queue``)
        plan.preempted.append(victim)

    # --- bookkeeping ------------------------------------------------------------------------
    def _on_finished(self, req: Request, reason: str, now: float, out: list[Request]) -> None:
        super()._on_finished(req, reason, now, out)
        self._shrunk = True

    def abort(self, request_id: str, now: float) -> Optional[Request]:
        req = super().abort(request_id, now)
        if req is not None and req is self.chunked_req:
            self.chunked_req = None
        if req is not None:
            self._shrunk = True
        return req

    def decode_window_limit(self) -> int:
        """Decode steps in a row the simulator's fast path may take without calling
        ``schedule``: any number when nobody waits (nothing to admit; the ratio only matters for
        admission), else one (``new_token_ratio`` falls every decode batch, so a waiting
        request may be admitted without anybody finishing). An extend batch never repeats,
        even one of one-token prompts that prices like a decode."""
        if self._extend or self.waiting or self.swapped or self.chunked_req is not None:
            return 1
        return 1 << 30

    def skip_decode_schedules(self, num_steps: int) -> None:
        """What ``num_steps`` decode iterations skipped by the fast path would have done to the
        scheduler's own state: the ratio's decay, once per decode batch."""
        for _ in range(num_steps):
            self._decay_ratio()
