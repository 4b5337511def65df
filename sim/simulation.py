"""The simpy executor: arrivals -> router -> replica step loop -> metrics.

Each replica is one simpy process that asks its scheduler for a ``StepPlan``, advances the clock
by the cost model's price of the plan's ``StepShape``, and hands a ``StepResult`` back. The
environment is the only clock; all randomness comes from seeded generators, so a run is
reproducible from the config's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from heapq import heappop, heappush, heapreplace
from typing import Callable, Mapping, Optional, Protocol, Sequence

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
                 blocked: Optional[Callable[[], bool]] = None, lockstep: bool = False) -> None:
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
        #: A rank of a data-parallel group stepping in lock-step (``LockstepGroup``): the group
        #: drives its steps, one at a time (a window would need every rank's to coincide).
        self.lockstep = lockstep
        if fast_decode and not lockstep and not (spec is not None and spec.draft_availability):
            self.bulk = BulkDecode(scheduler, step_time, decode_pricer)
        self.next_arrival = next_arrival
        self.async_scheduling = async_scheduling
        #: SGLang's ``--scheduler-recv-interval`` (``sim.policies.schedulers.sglang.RecvSkipper``):
        #: requests that reached a busy replica wait in ``_unreceived`` until its loop polls.
        #: Not with DP attention's lock-step ranks (SGLang refuses the combination).
        self.recv_skipper = None if lockstep else getattr(scheduler, "recv_skipper", None)
        self._unreceived: list[Request] = []
        #: Arrivals during a step under async scheduling: the next step was already scheduled
        #: when they came, so they reach the scheduler only after it (vLLM V1's one-step lag).
        self._pending: list[Request] = []
        self._wakeup: Optional[simpy.Event] = None
        #: The earliest a request on this replica can finish: the end of the step (or decode
        #: window) under way, ``now`` when work was just handed to it idle, inf when idle. What
        #: other replicas' windows read (``Simulation.next_arrival_time``): a finish here may
        #: release a held request (a client's next, a conversation's next turn).
        self.busy_until = math.inf
        self.num_steps = 0
        self.num_wakeups = 0
        #: Times the scheduler was asked for a step: fewer than ``num_steps`` when decode
        #: windows were taken (one plan for a whole window).
        self.num_plans = 0
        if not lockstep:
            env.process(self.run())

    @property
    def num_unfinished(self) -> int:
        return self.scheduler.num_unfinished + len(self._pending) + len(self._unreceived)

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
        if self.recv_skipper is not None and not idle:
            self._unreceived.append(req)  # read when the loop next polls (``_polled``)
            return
        if self.async_scheduling and not idle:
            self._pending.append(req)
            return
        if idle:
            self.busy_until = self.env.now
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

    def _price(self, plan: StepPlan, shape: Optional[StepShape] = None) -> float:
        """Seconds of ``plan`` (priced as ``shape`` where given: a lock-step rank's padded
        batch), with the draft model's steps under speculative decoding."""
        dt = self.step_time(plan.shape if shape is None else shape)
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

    def plan_step(self) -> tuple[StepPlan, bool]:
        """The scheduler's next step, and whether arrivals held back during the last step
        (async scheduling) were admitted after it was planned (they join the step after)."""
        sched = self.scheduler
        log = self.log
        if log.sink is not None and len(log.rows) >= FLUSH_ROWS:
            log.flush()  # here, between steps: a window's rows read the row before them
        if self.spec is not None and self.spec.draft_availability:
            for req in sched.running:  # what the proposer found for each decode (n-gram lookup)
                if req.num_uncomputed_tokens == 1:
                    req.num_draft_tokens = self.spec.sample_drafts()
        plan = sched.schedule(self.env.now)
        self.num_plans += 1
        flushed = bool(self._pending)
        if flushed:  # arrivals of the last step: seen by the step after this one
            pending, self._pending = self._pending, []
            for req in pending:
                self._admit(req)
        return plan, flushed

    def check_progress(self) -> None:
        """Raise when the scheduler holds work it cannot schedule and nothing outside can
        unblock it (a bug: a request too large for the pool is rejected, not held)."""
        sched = self.scheduler
        if sched.has_unfinished() and (self.blocked is None or not self.blocked()):
            raise RuntimeError(
                f"replica {self.index}: scheduler {sched.name} made no progress with "
                f"{len(sched.waiting)} waiting, {len(sched.running)} running")

    def finish_step(self, plan: StepPlan, steps: int = 1) -> None:
        """The step of ``plan`` (the last of ``steps`` decode steps of a window) has ended
        now: hand its result to the scheduler, and let a polling loop read what arrived."""
        self.num_steps += 1
        for req in self.scheduler.update(plan, self._result(plan), self.env.now):
            self.on_finish(req)
        skipper = self.recv_skipper
        if skipper is not None and skipper.handle(steps, plan.shape.num_prefill_tokens > 0):
            self._polled()

    def _polled(self) -> None:
        """The loop read its socket: what arrived since is the scheduler's now (the next plan
        sees it, as SGLang's next iteration schedules what ``recv_requests`` returned)."""
        held, self._unreceived = self._unreceived, []
        for req in held:
            self._admit(req)

    def run(self):
        env, bulk = self.env, self.bulk
        while True:
            plan, flushed = self.plan_step()
            if plan.is_empty:
                if self._unreceived:  # an idle loop polls at once (SGLang's idle iterations)
                    self._polled()
                    continue
                if flushed:
                    continue
                self.check_progress()
                self._wakeup = env.event()
                self.num_wakeups += 1
                self.busy_until = math.inf
                yield self._wakeup
                self._wakeup = None
                continue
            dt = self._price(plan)
            start = env.now
            self._record(plan, start, dt)
            # Admitted arrivals change the next step's batch: no window starts here.
            # Requests waiting for a poll end windows: the poll's step is where they join.
            dts = (bulk.durations(plan, dt, start, self.next_arrival())
                   if bulk is not None and not flushed and not self._unreceived else [dt])
            if len(dts) > 1:
                self._record_window(bulk, plan, start, dts)  # reads step 0's holdings: before apply
                bulk.apply(plan, len(dts))
                ends = []
                t = start
                for d in dts:  # the clock as simpy advances it, one step at a time
                    t += d
                    ends.append(t)
                self.busy_until = t  # nobody here finishes before the window's last step
                if start + (t - start) == t:
                    # One event for the window: nothing observes the replica between its steps
                    # (the window ends before the next arrival, the only cross-replica event),
                    # and the clock lands exactly where step-by-step timeouts would.
                    yield env.timeout(t - start)
                else:  # rounding would move the end: keep the steps' own timeouts
                    for d in dts:
                        yield env.timeout(d)
                bulk.advance(plan, ends)
                self.num_steps += len(dts) - 1
                # The last step of the window as any step ends: someone may finish in it.
                self.finish_step(plan, len(dts))
                continue
            self.busy_until = start + dt
            yield env.timeout(dt)
            self.finish_step(plan)

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


class LockstepGroup:
    """The data-parallel attention ranks of one MoE replica, stepping together.

    vLLM (``--data-parallel-size`` with a MoE: ``vllm/v1/worker/dp_utils.py``,
    ``coordinate_batch_across_dp``) and SGLang (``--enable-dp-attention``: its MLP-sync batch
    preparation) give each rank its own scheduler and KV pool, but every forward pass spans
    all of them: the experts' all-gather / all-to-all runs inside each MoE layer, so no rank
    can start its next step before every rank has finished this one. A rank with no work runs
    a dummy batch, and each rank pads its batch to the largest token count of the group (one
    CUDA graph size for all; the gathered MoE input is ``dp x`` that count). So a step lasts
    as long as its slowest rank, padded, and a prefill chunk on one rank stalls every rank's
    decodes: something independent ranks, each priced as if the others were loaded alike,
    miss.

    The group takes one step at a time (no decode windows); each rank logs its own step with
    the group's duration."""

    def __init__(self, env: simpy.Environment, ranks: Sequence[Replica], step_time: Callable) -> None:
        self.env = env
        self.ranks = list(ranks)
        self.step_time = step_time
        env.process(self.run())

    def run(self):
        env, ranks = self.env, self.ranks
        while True:
            planned = [r.plan_step() for r in ranks]
            busy = [(r, plan) for r, (plan, _) in zip(ranks, planned) if not plan.is_empty]
            if not busy:
                if any(flushed for _, flushed in planned):
                    continue
                for r in ranks:
                    r.check_progress()
                wakeup = env.event()  # any rank's arrival (``Replica.submit`` / ``wake``) ends it
                for r in ranks:
                    r._wakeup = wakeup
                    r.busy_until = math.inf
                ranks[0].num_wakeups += 1
                yield wakeup
                for r in ranks:
                    r._wakeup = None
                continue
            rows = max(plan.shape.num_tokens for _, plan in busy)
            dt = max(r._price(plan, padded(plan.shape, rows)) for r, plan in busy)
            if len(busy) < len(ranks):  # idle ranks' dummy batches: padding rows only
                dt = max(dt, self.step_time(StepShape(num_padding_tokens=rows)))
            start = env.now
            for r in ranks:
                r.busy_until = start + dt
            for r, plan in busy:
                r._record(plan, start, dt)
            yield env.timeout(dt)
            for r, plan in busy:
                r.finish_step(plan)


def padded(shape: StepShape, rows: int) -> StepShape:
    """``shape`` padded with idle rows up to ``rows`` GEMM rows (a lock-step rank's batch)."""
    extra = rows - shape.num_tokens
    if extra <= 0:
        return shape
    return StepShape(
        num_prefill_tokens=shape.num_prefill_tokens, num_prefill_seqs=shape.num_prefill_seqs,
        num_decode_seqs=shape.num_decode_seqs, num_spec_tokens=shape.num_spec_tokens,
        decode_context_tokens=shape.decode_context_tokens,
        prefill_context_tokens=shape.prefill_context_tokens,
        prefill_attention_work=shape.prefill_attention_work,
        num_swap_tokens=shape.num_swap_tokens,
        num_padding_tokens=shape.num_padding_tokens + extra, num_spec_seqs=shape.num_spec_seqs)


class ClientGroupLike(Protocol):
    """What the simulator reads of a ``sim.workload.clients.ClientGroup`` (a protocol, so the
    compiled simulator imports nothing of ``sim.workload``, which mypyc does not compile)."""

    @property
    def first(self) -> int: ...
    @property
    def last(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def think_s(self) -> float: ...
    @property
    def closed(self) -> bool: ...
    @property
    def ramp_s(self) -> float: ...


class _Gate:
    """One client group while it runs: its requests ``first .. last - 1`` of the arrival
    stream, at most ``limit`` of them in flight; the next to send, how many are ready (their
    arrival time has come), and how many slots are taken (sent and not finished, or a
    closed-loop client thinking before its next)."""

    def __init__(self, group: ClientGroupLike) -> None:
        self.first: int = group.first
        self.last: int = group.last
        self.limit: int = group.limit
        self.think_s: float = group.think_s
        self.closed: bool = group.closed
        #: A closed loop's clients start one by one over this many seconds (client k at
        #: k x ramp_s / limit), not all at once.
        self.ramp_s: float = group.ramp_s
        self.next = group.first
        self.ready = group.first
        self.taken = 0

    @property
    def waiting(self) -> bool:
        """Whether a ready request waits for a slot."""
        return self.next < self.ready


class ApiServerQueue:
    """The API servers in front of the engines, as both simulators see them: ``servers``
    identical servers (one per replica: each ``vllm serve`` has its own), each spending
    ``ingress(prompt_len)`` seconds on a request, then ``overhead`` seconds more, unqueued
    (``sim.catalog.frontends``; None: no front end). Requests take the first server free in
    the order they are sent: the router's spread over the replicas' API servers is taken as
    even at the ingress, and routing to an engine happens after. Why not one server for the
    whole fleet: a fleet of N replicas would then be capped at one API server's rate.

    ``take`` gives a request its place (once per request, in send order) and says when it
    reaches the scheduler; ``reach_bound`` and ``earliest`` are lower bounds that change
    nothing, for the decode windows (a server's next free time only moves later)."""

    def __init__(self, ingress: Optional[Callable[[int], float]], overhead: float, servers: int = 1) -> None:
        self.ingress = ingress
        self.overhead = overhead
        #: When each server is next free (a heap: the first is the earliest).
        self._free: list[float] = [-math.inf] * max(1, servers)

    @property
    def free(self) -> float:
        """When the first server is next free."""
        return self._free[0]

    def take(self, req: Request, sent: float) -> float:
        if self.ingress is None:
            return sent + self.overhead
        done = self._done(req, sent)
        heapreplace(self._free, done)
        return done + self.overhead

    def reach_bound(self, req: Request, sent: float) -> float:
        """When ``req`` will reach the scheduler unless another request is queued before it."""
        if self.ingress is None:
            return sent + self.overhead
        return self._done(req, sent) + self.overhead

    def earliest(self, after: float) -> float:
        """The earliest any request sent at ``after`` or later can reach the scheduler."""
        if self.ingress is None:
            return after + self.overhead
        return max(after, self._free[0]) + self.ingress(0) + self.overhead

    def _done(self, req: Request, sent: float) -> float:
        assert self.ingress is not None
        return max(sent, self._free[0]) + self.ingress(req.prompt_len)


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
                 session_of: Optional[Mapping[str, str]] = None,
                 clients: Optional[Sequence[ClientGroupLike]] = None,
                 ingress: Optional[Callable[[int], float]] = None,
                 lockstep: int = 1, api_servers: int = 1) -> None:
        """``requests`` is read in order and may be lazy (``sim.workload.RequestStream``).
        A streamed run passes ``on_finish`` (each finished or rejected request, once),
        ``keep_finished=False`` and a ``step_sink``, so nothing grows with the run's length.

        Conversations (``sim.workload.sessions``): ``next_turn`` maps a request id to the id of
        the turn that follows it and the user's think time in seconds. A following turn is in
        ``requests`` but not in the arrival stream: it arrives ``think`` seconds after its
        parent finishes (its ``arrival_time`` is set then; a closed loop per session), and a
        rejected parent ends the session (every later turn is rejected with it).
        ``session_of`` maps request ids to session ids, passed to the router (session affinity).

        Clients (``sim.workload.clients``): each ``ClientGroup`` names a range of the arrival
        stream of which at most ``limit`` requests are in flight; one that finds them all taken
        is held on the client side and released, like a conversation's next turn, when a request
        of its group finishes (plus a closed loop's think time). A request's ``arrival_time``
        is then its send time.

        The API servers (``api_servers`` of them, one per replica; ``ingress``: seconds on a
        request of a given prompt length, ``sim.catalog.frontends.FrontEnd.ingress_s``; None: no
        front end) each serve requests one at a time, in the order they are sent: a request
        reaches the scheduler when a server has finished it, plus ``request_overhead``. So a
        burst of sends (a closed loop's clients all finishing in one step) queues there and
        reaches the engine spread out, as on a real server.

        ``lockstep`` > 1: every run of that many consecutive schedulers is one replica's
        data-parallel attention ranks of a MoE, stepping together (``LockstepGroup``)."""
        self.env = simpy.Environment()
        #: Seconds between a request's arrival and its reaching the scheduler (work outside the
        #: engine: HTTP, tokenisation, IPC). TTFT and E2E still count from ``arrival_time``.
        self.request_overhead = request_overhead
        self._front = ApiServerQueue(ingress, request_overhead, api_servers)
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
        #: Heaps for ``next_arrival_time``: scheduled deliveries of held requests (time, seq,
        #: id), and parents still running (think time, id); entries of delivered or finished
        #: ones are dropped lazily.
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
        self._gates: list[_Gate] = self._make_gates(clients or ())
        #: The gate of each request sent through one, until it finishes.
        self._gate_of: dict[str, _Gate] = {}
        self.replicas = [
            Replica(self.env, i, s, step_time, self.log, self._on_finish,
                    spec=(spec_samplers[i] if spec_samplers else None),
                    draft_cost_ratio=draft_cost_ratio, fast_decode=fast_decode,
                    next_arrival=self._next_arrival_for(i), async_scheduling=async_scheduling,
                    decode_pricer=decode_pricer, lockstep=lockstep > 1)
            for i, s in enumerate(schedulers)
        ]
        self.groups: list[LockstepGroup] = []
        if lockstep > 1:
            if len(self.replicas) % lockstep:
                raise ValueError(f"{len(self.replicas)} schedulers do not split into lock-step "
                                 f"groups of {lockstep}")
            self.groups = [LockstepGroup(self.env, self.replicas[i:i + lockstep], step_time)
                           for i in range(0, len(self.replicas), lockstep)]
        self.env.process(self._arrivals() if not self._gates else self._gated_arrivals())

    def _make_gates(self, clients: Sequence[ClientGroupLike]) -> list[_Gate]:
        if clients and self._next_turn:
            raise ValueError("client groups and conversations (next_turn) cannot be combined yet")
        groups = sorted(clients, key=lambda g: g.first)
        end = 0
        for g in groups:
            if g.first < end or g.last > len(self._stream):
                raise ValueError(f"client groups overlap or run past the {len(self._stream)} "
                                 f"requests: {g.first}..{g.last}")
            end = g.last
        return [_Gate(g) for g in groups if g.last > g.first]

    def _next_arrival_for(self, replica: int) -> Callable[[], float]:
        return lambda: self.next_arrival_time(replica)

    def _on_finish(self, req: Request) -> None:
        self._count_finished(req)
        if self._next_turn:
            self._follow_up(req)
        elif self._gates:
            gate = self._gate_of.pop(req.request_id, None)
            if gate is not None:
                self._freed(gate, req)

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
        self._release(child, done + nxt[1])

    def _freed(self, gate: _Gate, req: Request) -> None:
        """``req`` of ``gate``'s group finished (or was rejected): its client sends the next
        ready request at once, or, in a closed loop, after its think time (keeping the slot)."""
        gate.taken -= 1
        if gate.waiting:
            done = req.finish_time if req.finish_time is not None else self.env.now
            self._send(gate, done + gate.think_s)

    def _send(self, gate: _Gate, at: Optional[float] = None) -> None:
        """Send ``gate``'s next ready request: at ``at`` (a finished request freed its slot),
        or, when None, at its own arrival time (it found a slot free when it became ready)."""
        req = self._stream[gate.next]
        gate.next += 1
        gate.taken += 1
        self._gate_of[req.request_id] = gate
        # Never before it is offered (a clock that rounded a hair below its arrival time).
        self._release(req, req.arrival_time if at is None else max(at, req.arrival_time))

    def _release(self, req: Request, sent: float) -> None:
        """Deliver a held request: the client sends it at ``sent`` (its ``arrival_time`` from
        now on: TTFT and E2E count from it); it reaches the scheduler ``request_overhead``
        later. Conversations' next turns and gated clients' requests both come this way."""
        req.arrival_time = sent
        self._num_released += 1
        if self._front.ingress is None or sent <= self.env.now:
            at = self._front.take(req, sent)
            heappush(self._releases, (at, self._num_released, req.request_id))
            self.env.process(self._deliver(req, at))
            return
        # Sent later (a think time, a ramp-up): it joins the API server's queue when it is sent,
        # behind whatever was sent before it, however late that was released. Until then the
        # windows see a lower bound (the queue only grows).
        heappush(self._releases, (self._front.reach_bound(req, sent), self._num_released, req.request_id))
        self.env.process(self._send_later(req, sent))

    def _send_later(self, req: Request, sent: float):
        yield self.env.timeout(sent - self.env.now)
        yield from self._deliver(req, self._front.take(req, sent))

    def _deliver(self, req: Request, at: float):
        yield self.env.timeout(max(0.0, at - self.env.now))
        self._delivered.add(req.request_id)
        self._dispatch(req)

    def _finish_bound(self, replica: int) -> float:
        """The earliest any request can finish, as seen by ``replica`` planning a decode window:
        the end of another replica's step or window under way (``Replica.busy_until``); its own
        requests finish no earlier than the window's last step, where the window ends anyway."""
        t = math.inf
        for r in self.replicas:
            if r.index != replica and r.busy_until < t:
                t = r.busy_until
        return t

    def next_arrival_time(self, replica: int = -1) -> float:
        """When the next request not yet submitted can reach the scheduler, as seen by
        ``replica`` planning a decode window (-1: by nobody in particular): the next of the
        arrival stream (its arrival plus the request overhead; inf when none is left), a
        scheduled delivery of a held request, and the earliest a held request can be released:
        a finish (``_finish_bound``) plus the think time before it is sent, plus the overhead.
        A window never runs past any of them, so fast and step-by-step runs are identical."""
        t = math.inf
        if self._next_index < len(self._stream):
            nxt = self._stream[self._next_index]
            t = self._front.reach_bound(nxt, nxt.arrival_time)
        if not self._next_turn and not self._gates:
            return t
        releases = self._releases
        while releases and releases[0][2] in self._delivered:
            self._delivered.discard(heappop(releases)[2])
        if releases and releases[0][0] < t:
            t = releases[0][0]
        think = math.inf  # the shortest think time before a release a finish may trigger
        if self._next_turn:
            awaiting = self._awaiting
            while awaiting and awaiting[0][1] not in self._in_flight:
                heappop(awaiting)
            if awaiting:
                think = awaiting[0][0]
        for gate in self._gates:
            if gate.waiting:
                if gate.taken < gate.limit:  # a free slot about to be taken: now
                    return min(t, self._front.earliest(self.env.now))
                think = min(think, gate.think_s)
        if think < math.inf:
            t = min(t, self._front.earliest(self._finish_bound(replica) + think))
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
        queued = bool(self._next_turn) and self._front.ingress is not None
        for index in range(len(requests)):  # by index: a lazy stream builds each request once
            req = requests[index]
            if queued:  # next turns share the API server's queue: each takes its place when sent
                if req.arrival_time > env.now:
                    yield env.timeout(req.arrival_time - env.now)
                self._next_index = index + 1
                self._release(req, req.arrival_time)
                continue
            # Alone in the API server's queue: its place is known ahead, so wait for the arrival
            # at the scheduler itself (one event per request).
            at = self._front.reach_bound(req, req.arrival_time)
            if at > env.now:
                yield env.timeout(at - env.now)
            self._front.take(req, req.arrival_time)
            self._next_index = index + 1
            self._dispatch(req)

    def _gated_arrivals(self):
        """``_arrivals`` with client groups: a request of a group becomes ready at its arrival
        time (every request of a closed group at the group's start) and is sent through its
        gate; the others go as ``_arrivals`` sends them."""
        env = self.env
        requests = self._stream
        n = len(requests)
        gates = self._gates
        g = 0
        index = 0
        while index < n:
            while g < len(gates) and gates[g].last <= index:
                g += 1
            gate = gates[g] if g < len(gates) and gates[g].first <= index else None
            req = requests[index]
            if gate is None:
                if self._front.ingress is not None:  # shares the API server's queue with the gated
                    if req.arrival_time > env.now:
                        yield env.timeout(req.arrival_time - env.now)
                    index += 1
                    self._next_index = index
                    self._release(req, req.arrival_time)
                    continue
                at = req.arrival_time + self.request_overhead
                if at > env.now:
                    yield env.timeout(at - env.now)
                index += 1
                self._next_index = index
                self._dispatch(req)
                continue
            if req.arrival_time > env.now:  # client time: when it is ready to be sent
                yield env.timeout(req.arrival_time - env.now)
            index = gate.last if gate.closed else index + 1
            gate.ready = index
            self._next_index = index
            start, k = env.now, 0
            while gate.waiting and gate.taken < gate.limit:
                if gate.closed and gate.ramp_s > 0:  # client k's first request, k/N into the ramp
                    self._send(gate, start + k * gate.ramp_s / gate.limit)
                else:
                    self._send(gate)
                k += 1

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
