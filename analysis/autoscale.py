"""A fleet whose replica count changes over time: an autoscaling policy replayed in the simulator.

The ``Simulation`` is built with ``max_replicas`` replicas; each is ``off``, ``starting`` (loading
the model: billed, not routed to), ``active`` (routed to) or ``draining`` (no new requests; billed
until its last request finishes, then off). A controller process in the same simpy environment
wakes every ``interval_s``, observes the active replicas, asks the pure policy
(``sim.policies.autoscaler.Autoscaler``) for the desired count and starts or drains replicas.
The router is the scenario's, shown only the active replicas (``FleetRouter``). A fixed fleet is
the same run with no policy. docs/cluster.md, Autoscaling, has the model and its limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

from analysis.pricing import usd_per_gpu_hour
from sim.api import new_simulation
from sim.run_parts import (as_scenario, fresh_request, replica_engines, resolve_deployment, router_options,
                           session_links)
from sim.errors import ConfigError
from sim.metrics import meets_slo
from sim.policies.autoscaler import Autoscaler, AutoscalerConfig
from sim.policies.request import Request, RequestState
from sim.policies.router import Router
from sim.scenario import Scenario
from sim.simulation import Simulation

OFF, STARTING, ACTIVE, DRAINING = "off", "starting", "active", "draining"

TIMELINE_COLUMNS = (
    "t_s", "active", "starting", "draining", "desired", "gpus", "metric", "outstanding",
    "waiting", "arrivals", "completed", "rejected", "slo_met", "slo_attainment",
)


class FleetRouter(Router):
    """The scenario's router, shown only the active replicas (``active``: their indices, in
    order). Records which replica got each request."""

    def __init__(self, policy: str, **options) -> None:
        super().__init__(policy, **options)
        self.active: list[int] = []
        self.replica_of: dict[str, int] = {}

    def route(self, req, replicas, session=None):
        idx = self.active
        j = super().route(req, [replicas[i] for i in idx], session)
        i = idx[j]
        self.replica_of[req.request_id] = i
        return i


@dataclass
class FleetResult:
    """One fleet run: a row per interval (``TIMELINE_COLUMNS``), totals, scale events
    ``(t_s, replica, event)`` and the requests as simulated."""

    name: str
    timeline: list[dict]
    totals: dict
    events: list[tuple[float, int, str]]
    requests: list[Request] = field(repr=False, default_factory=list)
    replica_of: dict[str, int] = field(repr=False, default_factory=dict)


class _Fleet:
    """Replica states, billing and the controller process of one run."""

    def __init__(self, sim: Simulation, router: FleetRouter, policy: Optional[Autoscaler],
                 initial: int, scale_up_delay_s: float, interval_s: float, horizon_s: float,
                 gpus_per_replica: int) -> None:
        self.sim, self.env, self.router, self.policy = sim, sim.env, router, policy
        n = len(sim.replicas)
        self.state = [OFF] * n
        self.generation = [0] * n
        self.on_since = [0.0] * n
        self.billed_s = 0.0
        self.delay = scale_up_delay_s
        self.interval = interval_s
        self.horizon = horizon_s
        self.gpus_per_replica = gpus_per_replica
        self.events: list[tuple[float, int, str]] = []
        self.rows: list[dict] = []
        self.end_s = 0.0
        for i in range(initial):  # warm at t=0: no load delay
            self.state[i] = ACTIVE
            self.events.append((0.0, i, "ready"))
        self._publish()

    def _count(self, state: str) -> int:
        return sum(1 for s in self.state if s == state)

    def _publish(self) -> None:
        self.router.active = [i for i, s in enumerate(self.state) if s == ACTIVE]

    def _start(self, i: int) -> None:
        now = self.env.now
        self.state[i] = STARTING
        self.on_since[i] = now
        self.generation[i] += 1
        self.events.append((now, i, "start"))
        if self.delay <= 0:  # no load time: serves at once
            self.state[i] = ACTIVE
            self.events.append((now, i, "ready"))
        else:
            self.env.process(self._boot(i, self.generation[i]))

    def _boot(self, i: int, generation: int):
        yield self.env.timeout(self.delay)
        if self.generation[i] == generation and self.state[i] == STARTING:
            self.state[i] = ACTIVE
            self.events.append((self.env.now, i, "ready"))
            self._publish()

    def _off(self, i: int, event: str) -> None:
        now = self.env.now
        self.billed_s += now - self.on_since[i]
        self.state[i] = OFF
        self.generation[i] += 1
        self.events.append((now, i, event))

    def _drain(self, i: int) -> None:
        self.state[i] = DRAINING
        self.events.append((self.env.now, i, "drain"))
        if self.sim.replicas[i].num_unfinished == 0:
            self._off(i, "off")

    def on_finish(self, req: Request) -> None:
        """A request finished (or was rejected): a draining replica with nothing left stops."""
        i = self.router.replica_of.get(req.request_id)
        if i is not None and self.state[i] == DRAINING and self.sim.replicas[i].num_unfinished == 0:
            self._off(i, "off")

    def scale_to(self, desired: int) -> None:
        """Start off replicas (lowest index first), or cancel starting ones (newest first) and
        then drain active ones (highest index first), until active + starting = ``desired``."""
        starting = [i for i, s in enumerate(self.state) if s == STARTING]
        active = [i for i, s in enumerate(self.state) if s == ACTIVE]
        current = len(starting) + len(active)
        if desired > current:
            for i in [i for i, s in enumerate(self.state) if s == OFF][:desired - current]:
                self._start(i)
        excess = current - desired
        for i in reversed(starting):
            if excess <= 0:
                break
            self._off(i, "cancel")
            excess -= 1
        for i in reversed(active):
            if excess <= 0:
                break
            self._drain(i)
            excess -= 1
        self._publish()

    def observe(self) -> tuple[float, int, int]:
        """(the policy's metric summed over the active replicas, outstanding requests and
        waiting requests over the whole fleet)."""
        metric_queue = self.policy is not None and self.policy.config.metric == "queue"
        metric = 0
        outstanding = waiting = 0
        for i, r in enumerate(self.sim.replicas):
            sched = r.scheduler
            q = len(sched.waiting) + len(sched.swapped)
            waiting += q
            outstanding += r.num_unfinished
            if self.state[i] == ACTIVE:
                metric += q if metric_queue else r.num_unfinished
        return float(metric), outstanding, waiting

    def control(self, total: int):
        """The controller: observe, decide, act, record; every ``interval`` seconds until
        every request is accounted for and the horizon is reached."""
        env, sim = self.env, self.sim
        while True:
            metric, outstanding, waiting = self.observe()
            ready, starting = self._count(ACTIVE), self._count(STARTING)
            desired = ready + starting
            if self.policy is not None:
                desired = self.policy.decide(env.now, ready, starting, metric)
                if desired != ready + starting:
                    self.scale_to(desired)
            self.rows.append({"t_s": env.now, "active": ready, "starting": starting,
                              "draining": self._count(DRAINING), "desired": desired,
                              "metric": metric, "outstanding": outstanding, "waiting": waiting})
            if sim.num_finished >= total and env.now >= self.horizon:
                break
            yield env.timeout(self.interval)
        self.end_s = env.now
        for i, s in enumerate(self.state):  # bill what still runs up to the end
            if s != OFF:
                self.billed_s += self.end_s - self.on_since[i]


def simulate_fleet(config: Union[Scenario, dict, str, None], requests: Sequence[Request], *,
                   policy: Optional[AutoscalerConfig] = None, replicas: Optional[int] = None,
                   interval_s: Optional[float] = None, horizon_s: Optional[float] = None,
                   usd_gpu_hour: Optional[float] = None, name: str = "",
                   initial_replicas: Optional[int] = None,
                   progress: Optional[Callable[[int], None]] = None,
                   fast_decode: bool = True) -> FleetResult:
    """Simulate ``requests`` on a fleet of the scenario's replicas: autoscaled by ``policy``
    (starting with ``initial_replicas`` warm ones, ``policy.min_replicas`` by default), or
    ``replicas`` fixed ones (``policy`` None).
    ``interval_s``: the controller's period (the policy's by default; 60 s for a fixed fleet);
    ``horizon_s``: the fleet runs at least this long (default: the last arrival);
    ``usd_gpu_hour``: the price (default the hardware catalog's)."""
    sc = as_scenario(config)
    if policy is None and (replicas is None or replicas < 1):
        raise ConfigError(f"replicas: a fixed fleet needs at least 1, got {replicas!r}")
    if sc.parallel.data_parallel_size != 1:
        raise ConfigError("parallel.data_parallel_size: the fleet simulation scales whole "
                          "replicas; set it to 1")
    if session_links(requests) is not None:
        raise ConfigError("workload.sessions: conversations are not supported by the fleet "
                          "simulation yet")
    if policy is not None and initial_replicas is not None and not (
            policy.min_replicas <= initial_replicas <= policy.max_replicas):
        raise ConfigError(f"initial_replicas: {initial_replicas} is outside min_replicas.."
                          f"max_replicas ({policy.min_replicas}..{policy.max_replicas})")
    dep = resolve_deployment(sc)
    n = policy.max_replicas if policy is not None else int(replicas or 1)
    schedulers, samplers = replica_engines(sc, dep, n)
    router = FleetRouter(sc.parallel.router, **router_options(sc))
    reqs = [fresh_request(r) for r in requests]
    if not reqs:
        raise ConfigError("workload: no requests to simulate")
    interval = interval_s if interval_s is not None else (
        policy.interval_s if policy is not None else 60.0)
    if not interval > 0:
        raise ConfigError(f"interval_s: must be > 0, got {interval!r}")
    horizon = horizon_s if horizon_s is not None else max(r.arrival_time for r in reqs)
    holder: list[_Fleet] = []
    sim = new_simulation(sc, dep, reqs, schedulers, samplers, router, progress=progress,
                         fast_decode=fast_decode, on_finish=lambda r: holder[0].on_finish(r))
    fleet = _Fleet(sim, router, Autoscaler(policy) if policy is not None else None,
                   (initial_replicas or policy.min_replicas) if policy is not None else n,
                   policy.scale_up_delay_s if policy is not None else 0.0,
                   interval, horizon, dep.num_gpus_per_replica)
    holder.append(fleet)
    sim.env.process(fleet.control(len(reqs)))
    sim.run()
    price = usd_gpu_hour if usd_gpu_hour is not None else usd_per_gpu_hour(sc.hardware)
    rows = _per_interval(fleet.rows, sim.finished, interval, sc.slo.ttft_ms, sc.slo.tpot_ms,
                         dep.num_gpus_per_replica)
    totals = _totals(fleet, sim.finished, sc, price)
    for s in schedulers:
        s.allocator.check_invariants()
    # KV slots still held by a request after every request is done (0 unless a bug leaks).
    totals["kv_leaked_slots"] = sum(s.allocator.num_slots - s.allocator.num_free_slots
                                    for s in schedulers)
    return FleetResult(name, rows, totals, fleet.events, list(sim.finished), router.replica_of)


def _per_interval(rows: list[dict], finished: Sequence[Request], interval: float,
                  ttft_ms: Optional[float], tpot_ms: Optional[float], gpus: int) -> list[dict]:
    """Add each interval's arrivals and their outcome (by arrival time: the requests that came
    while the row's replicas served)."""
    k = len(rows)
    arrivals, completed, rejected, met = [0] * k, [0] * k, [0] * k, [0] * k
    for r in finished:
        b = min(int(r.arrival_time // interval), k - 1)
        arrivals[b] += 1
        if r.state is RequestState.FINISHED:
            completed[b] += 1
        else:
            rejected[b] += 1
        met[b] += meets_slo(r, ttft_ms, tpot_ms)
    out = []
    for b, row in enumerate(rows):
        out.append({**row, "gpus": (row["active"] + row["starting"] + row["draining"]) * gpus,
                    "arrivals": arrivals[b], "completed": completed[b], "rejected": rejected[b],
                    "slo_met": met[b],
                    "slo_attainment": met[b] / arrivals[b] if arrivals[b] else None})
    return [{c: row[c] for c in TIMELINE_COLUMNS} for row in out]


def _quantile(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(math.ceil(q * len(values))) - 1)]


def _totals(fleet: _Fleet, finished: Sequence[Request], sc: Scenario, price: float) -> dict:
    done = [r for r in finished if r.state is RequestState.FINISHED]
    ttft = [r.ttft * 1000 for r in done if r.ttft is not None]
    tpot = [r.tpot * 1000 for r in done if r.tpot is not None]
    met = sum(meets_slo(r, sc.slo.ttft_ms, sc.slo.tpot_ms) for r in finished)
    gpu_hours = fleet.billed_s * fleet.gpus_per_replica / 3600.0
    counts = [row["active"] + row["starting"] for row in fleet.rows]
    ev = [e for _, _, e in fleet.events]
    return {
        "requests": len(finished), "completed": len(done), "rejected": len(finished) - len(done),
        "slo": {"ttft_ms": sc.slo.ttft_ms, "tpot_ms": sc.slo.tpot_ms},
        # With no slo.* bound set, every completed request meets it.
        "slo_attainment": met / len(finished) if finished else None,
        "p50_ttft_ms": _quantile(ttft, 0.5), "p99_ttft_ms": _quantile(ttft, 0.99),
        "p50_tpot_ms": _quantile(tpot, 0.5), "p99_tpot_ms": _quantile(tpot, 0.99),
        "duration_s": fleet.end_s,
        "replica_seconds": fleet.billed_s,
        "mean_replicas": fleet.billed_s / fleet.end_s if fleet.end_s > 0 else 0.0,
        "peak_replicas": max(counts) if counts else 0,
        "gpus_per_replica": fleet.gpus_per_replica,
        "gpu_hours": gpu_hours, "usd_per_gpu_hour": price, "usd": gpu_hours * price,
        "scale_ups": ev.count("start"), "scale_downs": ev.count("drain") + ev.count("cancel"),
    }


def compare_fleets(config: Union[Scenario, dict, str, None], requests: Sequence[Request],
                   policy: AutoscalerConfig, *, fixed_replicas: Optional[int] = None,
                   horizon_s: Optional[float] = None, usd_gpu_hour: Optional[float] = None,
                   initial_replicas: Optional[int] = None,
                   progress: Optional[Callable[[int], None]] = None) -> dict[str, FleetResult]:
    """The autoscaled fleet, and a fixed one sized for the peak (``fixed_replicas``, by
    default the autoscaled run's peak of active + starting replicas), on the same requests and
    with the same controller period (so their timelines line up)."""
    auto = simulate_fleet(config, requests, policy=policy, horizon_s=horizon_s,
                          usd_gpu_hour=usd_gpu_hour, name="autoscaled",
                          initial_replicas=initial_replicas, progress=progress)
    peak = fixed_replicas or auto.totals["peak_replicas"]
    fixed = simulate_fleet(config, requests, replicas=peak, interval_s=policy.interval_s,
                           horizon_s=horizon_s, usd_gpu_hour=usd_gpu_hour,
                           name=f"fixed {peak}", progress=progress)
    return {"autoscaled": auto, "fixed": fixed}


def report(runs: dict[str, FleetResult], settings: dict) -> dict:
    """``autoscale.json``: the settings, each run's totals and timeline, and the savings."""
    out: dict = {"settings": settings, "runs": {}}
    for key, run in runs.items():
        out["runs"][key] = {"name": run.name, "totals": run.totals, "timeline": run.timeline,
                            "events": [list(e) for e in run.events]}
    if "autoscaled" in runs and "fixed" in runs:
        a, f = runs["autoscaled"].totals, runs["fixed"].totals
        out["savings"] = {
            "gpu_hours": f["gpu_hours"] - a["gpu_hours"],
            "usd": f["usd"] - a["usd"],
            "fraction": 1 - a["gpu_hours"] / f["gpu_hours"] if f["gpu_hours"] else None,
        }
    return out


def load_delay_s(config: Union[Scenario, dict, str, None], bandwidth: float, startup_s: float) -> float:
    """The scenario's model load time: one GPU's share of the weights (the memory plan's, so
    quantisation and tensor parallelism count) over ``bandwidth`` bytes/s, plus ``startup_s``."""
    from sim.policies.autoscaler import model_load_time_s

    return model_load_time_s(resolve_deployment(as_scenario(config)).memory.weights_bytes,
                             bandwidth, startup_s)


def by_period(timeline: list[dict], period_s: float) -> list[dict]:
    """The timeline summed into periods of ``period_s`` (e.g. an hour of the simulated day):
    mean active and starting replicas, peak active + starting, arrivals and SLO attainment."""
    groups: dict[int, list[dict]] = {}
    for row in timeline:
        groups.setdefault(int(row["t_s"] // period_s), []).append(row)
    out = []
    for k in sorted(groups):
        rows = groups[k]
        arrivals = sum(r["arrivals"] for r in rows)
        met = sum(r["slo_met"] for r in rows)
        out.append({"start_s": k * period_s,
                    "active": sum(r["active"] for r in rows) / len(rows),
                    "starting": sum(r["starting"] for r in rows) / len(rows),
                    "peak": max(r["active"] + r["starting"] for r in rows),
                    "arrivals": arrivals,
                    "slo_attainment": met / arrivals if arrivals else None})
    return out
