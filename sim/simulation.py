"""The simpy executor: arrivals -> router -> replica step loop -> metrics.

Each replica is one simpy process that asks its scheduler for a ``StepPlan``, advances the clock
by the cost model's price of the plan's ``StepShape``, and hands a ``StepResult`` back. The
environment is the only clock; all randomness comes from seeded generators, so a run is
reproducible from the config's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Callable, Mapping, Optional, Sequence

import simpy

from sim.fast_decode import BulkDecode
from sim.policies.request import Request, RequestState
from sim.policies.router import Router
from sim.policies.schedulers.base import Scheduler
from sim.policies.speculative import AcceptanceSampler
from sim.policies.step import StepPlan, StepResult, StepShape

STEP_COLUMNS = (
    "replica", "start_s", "duration_s", "batch_size", "num_prefill_tokens", "num_decode_seqs",
    "num_spec_tokens", "decode_context_tokens", "num_running", "num_waiting", "num_preempted",
    "kv_token_states", "kv_reserved", "kv_internal_fragmentation", "kv_external_fragmentation",
    "kv_free",
)
#: Column positions in a step-log row (rows are plain tuples: cheap to append every step).
COL = {name: i for i, name in enumerate(STEP_COLUMNS)}
_REPLICA, _START = COL["replica"], COL["start_s"]
_RUNNING, _WAITING = COL["num_running"], COL["num_waiting"]
_KV_TOKENS, _KV_RESERVED = COL["kv_token_states"], COL["kv_reserved"]
_KV_INTERNAL, _KV_EXTERNAL, _KV_FREE = (COL["kv_internal_fragmentation"],
                                        COL["kv_external_fragmentation"], COL["kv_free"])


#: Rows a streamed step log holds before handing them to its sink.
FLUSH_ROWS = 1 << 16


@dataclass
class StepLog:
    """Per-step rows, stored as a list of tuples in ``STEP_COLUMNS`` order (cheap to append).
    With a ``sink`` (a streamed run, ``sim.streaming``) rows are handed over in chunks of about
    ``FLUSH_ROWS`` and not kept."""

    rows: list[tuple] = field(default_factory=list)
    sink: Optional[Callable[[list[tuple]], None]] = None

    def flush(self) -> None:
        if self.sink is not None and self.rows:
            rows, self.rows = self.rows, []
            self.sink(rows)

    def columns(self) -> dict[str, list]:
        """Columns in time order (a bulk decode window logs ahead of other replicas' steps;
        one replica's rows are in order already, and a sort of a million rows costs seconds)."""
        rows = self.rows
        if not _in_time_order(rows):
            rows = sorted(rows, key=lambda r: (r[_START], r[_REPLICA]))
        if not rows:
            return {name: [] for name in STEP_COLUMNS}
        return {name: list(col) for name, col in zip(STEP_COLUMNS, zip(*rows))}


def _in_time_order(rows: list[tuple]) -> bool:
    """Whether ``rows`` are sorted by (start, replica) already (what ``sorted`` would keep)."""
    prev_start, prev_replica = -math.inf, -1
    for row in rows:
        start, replica = row[_START], row[_REPLICA]
        if start < prev_start or (start == prev_start and replica < prev_replica):
            return False
        prev_start, prev_replica = start, replica
    return True


class Replica:
    """One serving instance (a model copy over tp x pp GPUs) executing its scheduler's steps.

    With ``fast_decode`` the replica takes predictable runs of pure-decode steps in one go
    (``sim.fast_decode.BulkDecode``); the result is identical to one step at a time."""

    def __init__(self, env: simpy.Environment, index: int, scheduler: Scheduler,
                 step_time: Callable, log: StepLog, on_finish: Callable[[Request], None],
                 spec: Optional[AcceptanceSampler] = None, draft_cost_ratio: float = 0.0,
                 fast_decode: bool = True,
                 next_arrival: Callable[[], float] = lambda: math.inf,
                 async_scheduling: bool = False,
                 decode_pricer: Optional[Callable[[StepShape], Callable[[int], float]]] = None,
                 blocked: Optional[Callable[[], bool]] = None) -> None:
        self.env = env
        self.index = index
        #: Whether the replica waits on something outside it when its scheduler can make no
        #: progress (disaggregated serving: KV held for a transfer); it then sleeps until
        #: ``wake`` instead of raising. None: never (the error below).
        self.blocked = blocked
        self.scheduler = scheduler
        self.step_time = step_time
        self.log = log
        self.on_finish = on_finish
        self.spec = spec
        self.draft_cost_ratio = draft_cost_ratio
        # Drafts drawn anew every step (draft_availability) make no two steps known to repeat.
        self.bulk: Optional[BulkDecode] = None
        if fast_decode and not (spec is not None and spec.draft_availability):
            self.bulk = BulkDecode(scheduler, step_time, decode_pricer)
        self.next_arrival = next_arrival
        self.async_scheduling = async_scheduling
        #: Arrivals during a step under async scheduling: the next step was already scheduled
        #: when they came, so they reach the scheduler only after it (vLLM V1's one-step lag).
        self._pending: list[Request] = []
        self._wakeup: Optional[simpy.Event] = None
        self.num_steps = 0
        self.num_wakeups = 0
        self.process = env.process(self.run())

    @property
    def num_unfinished(self) -> int:
        return self.scheduler.num_unfinished + len(self._pending)

    @property
    def kv_free_fraction(self) -> float:
        a = self.scheduler.allocator
        return a.num_free_slots / a.num_slots

    def cached_prefix_tokens(self, req: Request) -> int:
        """Leading prompt tokens of ``req`` in this replica's prefix cache (read-only probe)."""
        a = self.scheduler.allocator
        return a.cached_prefix_blocks(req) * a.block_size

    def submit(self, req: Request) -> None:
        idle = self._wakeup is not None
        if self.async_scheduling and not idle:
            self._pending.append(req)
            return
        self._admit(req)
        self.wake()

    def wake(self) -> None:
        """Let an idle replica schedule again (something outside it freed memory or added work)."""
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.triggered:
            wakeup.succeed()

    def _admit(self, req: Request) -> None:
        if not self.scheduler.add_request(req, self.env.now):
            self.on_finish(req)

    def _price(self, plan: StepPlan) -> float:
        dt = self.step_time(plan.shape)
        if plan.shape.num_spec_tokens and self.draft_cost_ratio:
            # The draft model runs k sequential steps of its own, each a fraction of a target step.
            k = max(s.num_spec_tokens for s in plan.scheduled)
            dt += k * self.draft_cost_ratio * dt
        return dt

    def _result(self, plan: StepPlan) -> StepResult:
        if not plan.shape.num_spec_tokens or self.spec is None:
            return StepResult()
        accepted = {s.request.request_id: self.spec.sample(s.num_spec_tokens)
                    for s in plan.scheduled if s.num_spec_tokens}
        return StepResult(num_accepted=accepted)

    def run(self):
        env, sched, bulk, log = self.env, self.scheduler, self.bulk, self.log
        while True:
            if log.sink is not None and len(log.rows) >= FLUSH_ROWS:
                log.flush()  # here, between steps: a window's rows read the row before them
            if self.spec is not None and self.spec.draft_availability:
                for req in sched.running:  # what the proposer found for each decode (n-gram lookup)
                    if req.num_uncomputed_tokens == 1:
                        req.num_draft_tokens = self.spec.sample_drafts()
            plan = sched.schedule(env.now)
            flushed = bool(self._pending)
            if flushed:  # arrivals of the last step: seen by the step after this one
                pending, self._pending = self._pending, []
                for req in pending:
                    self._admit(req)
            if plan.is_empty:
                if flushed:
                    continue
                if sched.has_unfinished() and (self.blocked is None or not self.blocked()):
                    raise RuntimeError(
                        f"replica {self.index}: scheduler {sched.name} made no progress with "
                        f"{len(sched.waiting)} waiting, {len(sched.running)} running")
                self._wakeup = env.event()
                self.num_wakeups += 1
                yield self._wakeup
                self._wakeup = None
                continue
            dt = self._price(plan)
            start = env.now
            self._record(plan, start, dt)
            # Admitted arrivals change the next step's batch: no window starts here.
            dts = (bulk.durations(plan, dt, start, self.next_arrival())
                   if bulk is not None and not flushed else [dt])
            if len(dts) > 1:
                self._record_window(bulk, plan, start, dts)  # reads step 0's holdings: before apply
                bulk.apply(plan, len(dts))
                ends = []
                t = start
                for d in dts:  # the clock as simpy advances it, one step at a time
                    t += d
                    ends.append(t)
                if start + (t - start) == t:
                    # One event for the window: nothing observes the replica between its steps
                    # (the window ends before the next arrival, the only cross-replica event),
                    # and the clock lands exactly where step-by-step timeouts would.
                    yield env.timeout(t - start)
                else:  # rounding would move the end: keep the steps' own timeouts
                    for d in dts:
                        yield env.timeout(d)
                bulk.advance(plan, ends)
                self.num_steps += len(dts)
                # The last step of the window as any step ends: someone may finish in it.
                for req in sched.update(plan, self._result(plan), env.now):
                    self.on_finish(req)
                continue
            yield env.timeout(dt)
            self.num_steps += 1
            for req in sched.update(plan, self._result(plan), env.now):
                self.on_finish(req)

    def _record(self, plan: StepPlan, start: float, dt: float) -> None:
        sched = self.scheduler
        shape = plan.shape
        waiting = len(sched.waiting) + len(sched.swapped)
        u = sched.allocator.usage(sched.holders(), sched.peek_waiting())
        self.log.rows.append((
            self.index, start, dt, shape.batch_size, shape.num_prefill_tokens,
            shape.num_decode_seqs, shape.num_spec_tokens, shape.decode_context_tokens,
            len(sched.running), waiting, len(plan.preempted) + len(plan.swapped_out),
            u.token_states, u.reserved, u.internal_fragmentation, u.external_fragmentation, u.free,
        ))

    def _record_window(self, bulk: BulkDecode, plan: StepPlan, start: float,
                       dts: list[float]) -> None:
        """Log rows for steps 1.. of a decode window, with the KV breakdown of each step derived
        from step 0's row by the batch's growth (``BulkDecode.kv_deltas``, vectorised)."""
        shape = plan.shape
        k = len(dts)
        base = self.log.rows[-1]
        d_tok, d_res, d_int, d_held = bulk.kv_deltas(plan, k)
        t = start + dts[0]
        rows = self.log.rows
        for j in range(1, k):
            rows.append((self.index, t, dts[j], shape.batch_size, 0, shape.num_decode_seqs, 0,
                         shape.decode_context_tokens + j * shape.num_decode_seqs,
                         base[_RUNNING], base[_WAITING], 0,
                         base[_KV_TOKENS] + int(d_tok[j]), base[_KV_RESERVED] + int(d_res[j]),
                         base[_KV_INTERNAL] + int(d_int[j]), base[_KV_EXTERNAL],
                         base[_KV_FREE] - int(d_held[j])))
            t += dts[j]


class Simulation:
    """Wires arrivals, a router and replicas into one simpy environment."""

    def __init__(self, requests: Sequence[Request], schedulers: Sequence[Scheduler],
                 step_time: Callable, router: Optional[Router] = None,
                 spec_samplers: Optional[Sequence[AcceptanceSampler]] = None,
                 draft_cost_ratio: float = 0.0,
                 progress: Optional[Callable[[int], None]] = None,
                 fast_decode: bool = True, async_scheduling: bool = False,
                 request_overhead: float = 0.0,
                 decode_pricer: Optional[Callable[[StepShape], Callable[[int], float]]] = None,
                 on_finish: Optional[Callable[[Request], None]] = None,
                 keep_finished: bool = True,
                 step_sink: Optional[Callable[[list[tuple]], None]] = None,
                 next_turn: Optional[Mapping[str, tuple[str, float]]] = None,
                 session_of: Optional[Mapping[str, str]] = None) -> None:
        """``requests`` is read in order and may be lazy (``sim.workload.RequestStream``).
        A streamed run passes ``on_finish`` (each finished or rejected request, once),
        ``keep_finished=False`` and a ``step_sink``, so nothing grows with the run's length.

        Conversations (``sim.workload.sessions``): ``next_turn`` maps a request id to the id of
        the turn that follows it and the user's think time in seconds. A following turn is in
        ``requests`` but not in the arrival stream: it arrives ``think`` seconds after its
        parent finishes (its ``arrival_time`` is set then; a closed loop per session), and a
        rejected parent ends the session (every later turn is rejected with it).
        ``session_of`` maps request ids to session ids, passed to the router (session affinity)."""
        self.env = simpy.Environment()
        #: Seconds between a request's arrival and its reaching the scheduler (work outside the
        #: engine: HTTP, tokenisation, IPC). TTFT and E2E still count from ``arrival_time``.
        self.request_overhead = request_overhead
        self.requests = requests
        self.router = router or Router()
        self.log = StepLog(sink=step_sink)
        self.finished: list[Request] = []
        self.num_finished = 0
        self._keep_finished = keep_finished
        self._finish_hook = on_finish
        self._progress = progress
        self._next_index = 0
        self._next_turn: Mapping[str, tuple[str, float]] = next_turn or {}
        self._session_of: Mapping[str, str] = session_of or {}
        #: The arrival stream: every request but the follow-up turns, which are held here.
        self._stream: Sequence[Request] = requests
        self._held: dict[str, Request] = {}
        #: Heaps for ``next_arrival_time``: scheduled follow-up deliveries (time, seq, id), and
        #: parents still running (think time, id); entries of delivered or finished ones are
        #: dropped lazily.
        self._releases: list[tuple[float, int, str]] = []
        self._delivered: set[str] = set()
        self._awaiting: list[tuple[float, str]] = []
        self._in_flight: set[str] = set()
        self._num_released = 0
        if self._next_turn:
            follow = {child for child, _ in self._next_turn.values()}
            self._held = {r.request_id: r for r in requests if r.request_id in follow}
            if len(self._held) != len(follow):
                missing = sorted(follow - set(self._held))[:3]
                raise ValueError(f"next_turn names requests that are not in the workload: {missing}")
            self._stream = [r for r in requests if r.request_id not in follow]
        self.replicas = [
            Replica(self.env, i, s, step_time, self.log, self._on_finish,
                    spec=(spec_samplers[i] if spec_samplers else None),
                    draft_cost_ratio=draft_cost_ratio, fast_decode=fast_decode,
                    next_arrival=self.next_arrival_time, async_scheduling=async_scheduling,
                    decode_pricer=decode_pricer)
            for i, s in enumerate(schedulers)
        ]
        self.env.process(self._arrivals())

    def _on_finish(self, req: Request) -> None:
        self._count_finished(req)
        if self._next_turn:
            self._follow_up(req)

    def _count_finished(self, req: Request) -> None:
        self.num_finished += 1
        if self._keep_finished:
            self.finished.append(req)
        if self._finish_hook is not None:
            self._finish_hook(req)
        if self._progress is not None:
            self._progress(1)

    def _follow_up(self, parent: Request) -> None:
        """Release the turn after ``parent`` (if any): ``think`` seconds after it finished, or,
        if it was rejected, reject the rest of its session now."""
        nxt = self._next_turn.get(parent.request_id)
        if nxt is None:
            return
        self._in_flight.discard(parent.request_id)
        child = self._held.pop(nxt[0])
        now = self.env.now
        if parent.state is not RequestState.FINISHED:
            while True:  # a loop, not recursion: a session may have thousands of turns
                child.arrival_time = now
                child.state = RequestState.REJECTED
                child.reject_reason = "session ended: an earlier turn was rejected"
                child.finish_time = now
                self._count_finished(child)
                nxt = self._next_turn.get(child.request_id)
                if nxt is None:
                    return
                child = self._held.pop(nxt[0])
        done = parent.finish_time if parent.finish_time is not None else now
        child.arrival_time = done + nxt[1]
        at = child.arrival_time + self.request_overhead
        self._num_released += 1
        heappush(self._releases, (at, self._num_released, child.request_id))
        self.env.process(self._deliver(child, at))

    def _deliver(self, req: Request, at: float):
        yield self.env.timeout(max(0.0, at - self.env.now))
        self._delivered.add(req.request_id)
        self._dispatch(req)

    def next_arrival_time(self) -> float:
        """When the next request not yet submitted reaches the scheduler (its arrival plus the
        request overhead; inf when none is left). With conversations, also the earliest a
        follow-up turn can: a scheduled delivery, or now + the think time of a parent that is
        still running (it may finish any moment), so a decode window never runs past one."""
        t = math.inf
        if self._next_index < len(self._stream):
            t = self._stream[self._next_index].arrival_time + self.request_overhead
        if self._next_turn:
            releases, awaiting = self._releases, self._awaiting
            while releases and releases[0][2] in self._delivered:
                self._delivered.discard(heappop(releases)[2])
            while awaiting and awaiting[0][1] not in self._in_flight:
                heappop(awaiting)
            if releases and releases[0][0] < t:
                t = releases[0][0]
            if awaiting:
                t = min(t, self.env.now + awaiting[0][0] + self.request_overhead)
        return t

    def _dispatch(self, req: Request) -> None:
        """Route ``req`` and hand it to its replica."""
        if self._next_turn and req.request_id in self._next_turn:
            heappush(self._awaiting, (self._next_turn[req.request_id][1], req.request_id))
            self._in_flight.add(req.request_id)
        session = self._session_of.get(req.request_id) if self._session_of else None
        self.replicas[self.router.route(req, self.replicas, session)].submit(req)

    def _arrivals(self):
        env = self.env
        requests = self._stream
        for index in range(len(requests)):  # by index: a lazy stream builds each request once
            req = requests[index]
            at = req.arrival_time + self.request_overhead  # when it reaches the scheduler
            if at > env.now:
                yield env.timeout(at - env.now)
            self._next_index = index + 1
            self._dispatch(req)

    @property
    def num_events(self) -> int:
        """simpy events processed: arrivals, steps and idle wake-ups."""
        return len(self.requests) + sum(r.num_steps + r.num_wakeups for r in self.replicas)

    def run(self) -> None:
        self.env.run()
        self.log.flush()
        unfinished = len(self.requests) - self.num_finished
        if unfinished:
            raise RuntimeError(f"simulation ended with {unfinished} requests unaccounted for")
