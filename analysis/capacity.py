"""Capacity search: the highest request rate one replica sustains inside an SLO, with its
uncertainty, and what serving a target rate then takes in replicas, GPUs and dollars.

Why a bracketed search per seed: whether a rate meets a p99 SLO is a noisy yes/no, so each seed
(one arrival pattern and one set of lengths) gets its own bracket [highest passing rate, lowest
failing rate], grown geometrically from a start rate and then bisected (in log space) until it
is narrower than ``rel_tol``. Changing only ``workload.arrival.rate`` stretches the same arrival
pattern and keeps every length (common random numbers), so within a seed the answer is close to
monotone in rate and bisection is sound. The spread of the per-seed answers is the stated
uncertainty; the rate every seed sustained is the one used for planning.

Why sized to an interval target: two seeds give a Student-t factor of 12.7, so an interval over
them is too wide to act on, and seeds that land in the same bracket give one of zero width,
which claims more than a bracket can tell. So the interval never counts the seeds' spread as
smaller than their brackets could make it, and by default (``ci_target`` 0.10) the search keeps
going until its half-width is within 10% of the estimate: it narrows every bracket when the
brackets could explain the spread, else adds seeds (at most doubling them per round, up to
``max_seeds``), and records why it stopped (``sizing_note``). Every decision reads only the
results, so the answer stays deterministic for a seed.

Why in parallel, and why the answer does not depend on it: every seed after the first starts
from the first seed's answer, so their searches are independent and run at once, one process
each (``workers``); the confirming long runs step down in pairs. The processes only prefetch:
the search itself still runs in order in this process, taking each simulation's result from
what was prefetched, so the answer, the evaluations and the simulation count are the ones a
single process gives. A prefetched run the search never asks for is dropped.

Why the fleet for a target rate is simulated, not divided: N replicas behind a router are not N
copies of one (imbalance and pooling, ``analysis.fleet``), so after the search the fleet is
simulated at the target rate with the same test, evaluator and workers; ``fleet="divide"``
keeps the old ``ceil(target / planning rate)``.
"""

from __future__ import annotations

import copy
import math
import multiprocessing
import threading
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union, cast

from sim import config as config_mod
from analysis.fleet import FLEET_MODES, MAX_REPLICAS, FleetResult, Unit, size_fleet, unit_of
from analysis.pricing import price_table, usd_per_million_output_tokens
from analysis.slo import SLO
from analysis.steady import MIN_SPANS, run_length, window_metrics
from sim.api import simulate

#: Run statistics kept for every simulation of the search (the rate-latency picture).
KEPT = ("p99_ttft_ms", "p99_tpot_ms", "median_ttft_ms", "median_tpot_ms", "p99_e2el_ms",
        "mean_e2el_ms", "slo_attainment", "completed", "rejected", "mean_output_tokens",
        "arrival_span_s", "steady", "num_requests")


@dataclass
class Evaluation:
    """One simulation of the search: a rate, a seed, and whether the run met the SLO."""

    rate: float
    seed: int
    passed: bool
    violations: list[str]
    metrics: dict
    stage: str = "search"   # or "confirm": a long run that checks the planning rate; "fleet",
    #                         "fleet-confirm": the same runs of a fleet at the target rate
    replicas: int = 1       # units simulated: 1 in the search, the fleet's size in a fleet run


@dataclass
class SeedSearch:
    """One seed's bracket: ``low`` met the SLO, ``high`` did not (None: never found)."""

    seed: int
    low: Optional[float]
    high: Optional[float]
    note: str = ""


@dataclass
class RunSizing:
    """How long each simulation of the search is (see ``analysis.steady``)."""

    duration_s: float = 60.0            # arrivals span this long: rate x duration_s requests
    num_requests: Optional[int] = None  # a fixed count instead (no automatic lengthening)
    min_requests: int = 200             # enough samples for a p99 at low rates
    max_requests: int = 20000           # a cap on one simulation's cost
    warmup_fraction: float = 0.1        # the first part of the arrival span is not judged
    confirm_s: float = 600.0            # arrivals of the confirming run (0: no confirmation)


@dataclass
class CapacityResult:
    config: dict
    slo: SLO
    sizing: RunSizing
    rel_tol: float
    confidence: float
    searches: list[SeedSearch]
    evaluations: list[Evaluation]
    capacity_rate: float              # mean over seeds of each seed's highest passing rate
    ci_low: float
    ci_high: float
    planning_rate: float              # every seed sustained it, and a long run confirmed it
    gpus_per_replica: int
    hardware: str
    usd_per_gpu_hour: float
    at_planning_rate: dict            # run statistics averaged over seeds at planning_rate
    goodput: Optional[float]          # req/s meeting the per-request SLO, steady state
    output_tokens_per_s_per_gpu: Optional[float]
    usd_per_million_output_tokens: Optional[float]
    target_rate: Optional[float] = None
    replicas: Optional[int] = None
    gpus: Optional[int] = None
    usd_per_hour: Optional[float] = None
    notes: list[str] = field(default_factory=list)
    num_simulations: int = 0
    confirmed: Optional[bool] = None  # None: no confirming run was asked for
    ci_target: Optional[float] = None    # the half-width asked for, relative (None: seeds fixed)
    max_seeds: Optional[int] = None      # the most seeds the target could add up to
    bracket_tol: Optional[float] = None  # every seed's final bracket width (rel_tol or narrower)
    ci_half_width: Optional[float] = None  # the interval's half-width relative to capacity_rate
    interval_met: Optional[bool] = None  # the half-width is within ci_target (None: no target)
    sizing_note: str = ""                # how the seeds were sized and why the search stopped
    # How ``replicas`` was found for ``target_rate`` (issue #15): "simulate" (a fleet behind the
    # router, simulated at the target) or "divide" (target / planning rate); None: no target.
    fleet_mode: Optional[str] = None
    divided_replicas: Optional[int] = None     # ceil(target / planning rate), in either mode
    simulated_replicas: Optional[int] = None   # the smallest simulated fleet meeting the SLO
    fleet_per_replica_rate: Optional[float] = None  # target / simulated_replicas
    fleet_note: str = ""                       # the fleet against division, or why not simulated
    fleet: Optional[FleetResult] = None        # the fleet's trials (every size tried, its runs)
    unit: Optional[Unit] = None                # what "one replica" is: a replica or a P/D group

    def headline(self) -> str:
        """One sentence with the uncertainty, as the CLI prints it."""
        if self.planning_rate <= 0:
            text = self.no_rate_text()
            return f"{text[0].upper()}{text[1:]}. {self.num_simulations} simulations."
        spread = (f"{self.confidence:.0%} CI {self.ci_low:.2f}-{self.ci_high:.2f} over "
                  f"{len(self.searches)} seeds" if len(self.searches) > 1 else "one seed: no spread estimate")
        short = f"{self.sizing.num_requests} requests" if self.sizing.num_requests else f"{self.sizing.duration_s:g} s"
        confirm = (f", confirmed by a {self.sizing.confirm_s:g} s run" if self.confirmed else
                   ", NOT confirmed by a long run (see notes)" if self.confirmed is False else "")
        sized = f" {self.sizing_note[0].upper()}{self.sizing_note[1:]}." if self.sizing_note else ""
        subject = "One replica" if not self.unit or self.unit.kind == "replica" else _sentence(self.unit.description)
        return (f"{subject} sustains {self.planning_rate:.2f} req/s inside {self.slo}{confirm}. "
                f"Search with {short} runs: {self.capacity_rate:.2f} req/s ({spread}; each seed "
                f"bracketed within {_tol_text(self.bracket_tol or self.rel_tol)}).{sized} "
                f"{self.num_simulations} simulations.{self._fleet_headline()}")

    def _fleet_headline(self) -> str:
        """The simulated fleet for the target rate, against division ('' in divide mode)."""
        if self.fleet_mode != "simulate" and not self.fleet_note:
            return ""
        unit = self.unit.name if self.unit else "replica"
        if self.fleet_mode == "simulate" and self.replicas:
            runs = self.fleet.num_simulations if self.fleet else 0
            return (f" For {self.target_rate:g} req/s: {self.replicas} {unit}"
                    f"{'' if self.replicas == 1 else 's'} ({self.gpus} GPUs) by simulating the fleet "
                    f"({runs} fleet simulations); {self.fleet_note}.")
        return f" For {self.target_rate:g} req/s: {self.fleet_note}."

    def no_rate_text(self) -> str:
        """Why there is no planning rate, in the words a planner reads: the lowest rate the
        search tried and the bounds it missed there."""
        return no_rate_text({"slo_text": str(self.slo), "evaluations": [asdict(e) for e in self.evaluations]})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kind"] = "capacity"
        d["slo"] = self.slo.to_dict()
        d["slo_text"] = str(self.slo)
        d["headline"] = self.headline()
        return d


#: What the page, the CLI and the report say when the planning rate is 0.
NO_RATE = "no rate meets this SLO on one replica"


def no_rate_text(rec: dict) -> str:
    """``NO_RATE`` with the lowest rate tried and what it missed, from a result record (a
    saved JSON result reads the same as a live one)."""
    tried = [e for e in rec.get("evaluations") or [] if e.get("stage", "search") == "search"]
    if not tried:
        return f"{NO_RATE} ({rec.get('slo_text')}): no simulation finished"
    low = min(tried, key=lambda e: e["rate"])
    if low["passed"]:  # a seed's search was cut short (budget) before it found a passing rate
        return f"{NO_RATE} on every seed ({rec.get('slo_text')}): see the notes"
    missed = "; ".join(low.get("violations") or []) or "the SLO"
    return (f"{NO_RATE} ({rec.get('slo_text')}): even the lowest rate tried, {low['rate']:.3g} req/s, "
            f"missed {missed}")


def rate_text(rate: Optional[float], missing: str = "—") -> str:
    """A rate in req/s as tables show it: two decimals (21.76), three significant digits below
    0.1 req/s, where two decimals would round the lowest rates of a search to 0.01."""
    if rate is None:
        return missing
    return f"{rate:,.2f}" if rate >= 0.1 or rate == 0 else f"{rate:.3g}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _tol_text(tol: float) -> str:
    """5%, 2.5%, 1.25%: a bracket width as narrow as it was set."""
    return f"{round(tol * 100, 4):g}%"


OnEvaluation = Callable[[Evaluation, int], None]
#: How often a passing run too short for steady state is repeated longer before it is judged
#: unstable (its latency keeps growing with the run's length).
MAX_LENGTHENINGS = 3
#: How far the confirming long run may step the planning rate down (in bracket widths).
MAX_CONFIRM_STEPS = 6
#: The interval target by default: a half-width within 10% of the estimate.
CI_TARGET = 0.10
#: Seeds the interval target may grow to by default.
MAX_SEEDS = 8
#: The narrowest bracket the interval target asks for (each halving costs a run per seed).
MIN_REL_TOL = 0.01


def find_capacity(config: Union[dict, str, Path, None], slo: SLO, *,
                  target_rate: Optional[float] = None, seeds: int = 3,
                  sizing: Optional[RunSizing] = None, rel_tol: float = 0.05, start_rate: Optional[float] = None,
                  confidence: float = 0.95, max_simulations: int = 200,
                  prices: Union[None, dict, Sequence[str], str, Path] = None,
                  overrides: Sequence[str] = (), base_dir: Optional[Union[str, Path]] = None,
                  on_evaluation: Optional[OnEvaluation] = None, workers: int = 0,
                  ci_target: Optional[float] = CI_TARGET, max_seeds: int = MAX_SEEDS,
                  fleet: str = "simulate", max_replicas: int = MAX_REPLICAS) -> CapacityResult:
    """Search the per-replica capacity of ``config`` under ``slo``.

    Every simulation is sized by ``sizing`` (default: arrivals spanning 60 s, lengthened when
    that is under four mean end-to-end latencies). The config is run as one replica
    (``parallel.num_replicas`` is set to 1) with the SLO's bounds as its per-request SLO.
    ``seeds`` are searched at least; with ``ci_target`` (a relative half-width; 0 or None: off)
    brackets are narrowed and seeds added, up to ``max_seeds`` (never fewer than ``seeds``),
    until the interval is that narrow. ``workers`` processes prefetch simulations (0: one per
    CPU, at most 4; 1: none); the result is the same for any number.

    With ``target_rate``, ``fleet="simulate"`` (the default) then sizes the fleet by simulating
    it (``analysis.fleet``): N replicas behind ``parallel.router`` (for P/D, N groups) at the
    target rate, under the search's SLO test, from the divided estimate up to ``max_replicas``,
    with what is left of ``max_simulations``; ``fleet="divide"`` divides the rate, as before.
    """
    sizing = sizing or RunSizing()
    _check_args(seeds, rel_tol, target_rate, start_rate, max_simulations, sizing, workers)
    _check_fleet(fleet, max_replicas)
    target = _check_target(ci_target, max_seeds)
    extra = list(overrides) + slo.overrides() + ["parallel.num_replicas=1"]
    base = config_mod.build_config(config, extra)
    if base["workload"].get("arrival", {}).get("process") == "closed":
        from sim.errors import ConfigError

        raise ConfigError("workload.arrival.process: find_capacity searches over the request "
                          "rate, which a closed loop does not have; search it in clients "
                          "(analysis.client_capacity.find_client_capacity, kvplan capacity --clients)")
    table = price_table(prices)
    evaluator = _Evaluator(base, slo, sizing, base_dir, max_simulations, on_evaluation)
    start = start_rate or _configured_rate(base)
    first = _search(evaluator, base["seed"], start, 2.0, rel_tol, start)
    # The other seeds start from the first seed's answer, one bracket width at a time: being
    # independent of each other, they are searched side by side.
    plan_ = _SeedPlan(base["seed"], start, max(seeds, max_seeds) if target else seeds)
    with worker_pool(workers, plan_.most - 1) as pool:
        evaluator.pool = pool
        searches = [first] + plan_.add(evaluator, seeds - 1, rel_tol, [first])
        sized = _size(evaluator, plan_, searches, rel_tol, confidence, target)
        result = _assemble(base, slo, evaluator, sized.searches, rel_tol, confidence, target_rate,
                           table, sizing)
        if target_rate is not None and fleet == "simulate" and result.planning_rate > 0:
            _simulate_fleet(result, target_rate, evaluator, base_dir, max_replicas, on_evaluation)
    result.ci_target, result.max_seeds = target, plan_.most if target else None
    result.bracket_tol, result.ci_half_width = sized.tol, sized.half
    result.interval_met, result.sizing_note = sized.met, sized.note
    return result


def _simulate_fleet(result: CapacityResult, target_rate: float, ev: "_Evaluator", base_dir,
                    max_replicas: int, hook: Optional[OnEvaluation]) -> None:
    """Size the fleet for ``target_rate`` by simulation and re-plan with it. The fleet is
    judged on the search's seeds, its long run on the seed that set the planning rate."""
    binding = min(result.searches, key=lambda s: s.low or 0.0).seed
    unit = result.unit or Unit("replica", result.gpus_per_replica, result.hardware, result.usd_per_gpu_hour)
    result.fleet = size_fleet(
        ev.base, ev.slo, ev.sizing, base_dir, unit, target_rate, result.planning_rate,
        [s.seed for s in result.searches], binding, max_replicas=max_replicas,
        budget=int(ev.budget - ev.runs), hook=hook, offset=ev.runs, pool=ev.pool,
        max_confirm_steps=MAX_CONFIRM_STEPS)
    plan(result, target_rate)


_Key = tuple  # (rate as recorded, seed, arrival seconds)
_Outcome = tuple  # (Evaluation, simulations it took, the scenario summary)


def _evaluate(base: dict, slo: SLO, sizing: RunSizing, base_dir, key: _Key, confirm: bool) -> _Outcome:
    """Simulate one (rate, seed), lengthening a passing run that is too short to be steady;
    every run, including one repeated longer, counts as a simulation."""
    rate, seed, duration = key
    for attempt in range(MAX_LENGTHENINGS + 1):
        fixed = None if confirm else sizing.num_requests
        n = fixed or run_length(rate, duration, sizing.min_requests, sizing.max_requests)
        result = simulate(with_rate(base, rate, seed, n), base_dir=base_dir, statistics=False)
        m = window_metrics(result.requests, warmup_fraction=sizing.warmup_fraction,
                           slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms,
                           stream_interval=result.stream_interval)
        m["num_requests"] = len(result.requests)
        ok, bad = slo.check(m)
        # A failing run only gets worse when longer; a passing one must have been steady.
        if not ok or m["steady"] or fixed or n >= sizing.max_requests or len(result.requests) < n:
            break
        if attempt == MAX_LENGTHENINGS:
            # Latency still grows with run length: the queue grows, the rate is too high.
            ok, bad = False, [f"no steady state: mean E2EL {m['mean_e2el_ms']:.0f} ms keeps "
                              f"growing as the run lengthens (queue growing)"]
            break
        duration = max(duration * 2, 1.5 * MIN_SPANS * m["mean_e2el_ms"] / 1000.0)
    ev = Evaluation(rate, seed, ok, bad, {k: m.get(k) for k in KEPT}, "confirm" if confirm else "search")
    return ev, attempt + 1, result.summary["scenario"]


class _Evaluator:
    """Runs (and memoises) the simulation of one (rate, seed), in order. With a process pool,
    simulations the search will (probably) ask for are started ahead (``prefetch``,
    ``prefetch_searches``); a result is only recorded, counted and reported when the search asks
    for it, so what is recorded does not depend on the pool."""

    def __init__(self, base: dict, slo: SLO, sizing: RunSizing, base_dir, budget: float,
                 hook: Optional[OnEvaluation], fleet: Optional[int] = None):
        self.base, self.slo, self.sizing, self.base_dir = base, slo, sizing, base_dir
        self.budget, self.hook = budget, hook
        self.fleet = fleet   # a fleet of this many units: its runs are labelled as such
        self.cache: dict[_Key, Evaluation] = {}
        self.order: list[Evaluation] = []
        self.runs = 0
        self.scenario: dict = {}
        self.pool: Any = None
        self.outcomes: dict[_Key, _Outcome] = {}   # everything simulated here, by key
        self._ahead: dict[_Key, Any] = {}           # prefetched single simulations
        self._chains: dict[int, Any] = {}           # prefetched searches, by seed

    @property
    def exhausted(self) -> bool:
        return self.runs >= self.budget

    def key(self, rate: float, seed: int, confirm: bool = False) -> _Key:
        sz = self.sizing
        return (float(f"{rate:.6g}"), seed, sz.confirm_s if confirm else sz.duration_s)

    def __call__(self, rate: float, seed: int, confirm: bool = False) -> Evaluation:
        key = self.key(rate, seed, confirm)
        if key in self.cache:
            return self.cache[key]
        outcome = self._prefetched(key)
        if outcome is None:
            outcome = _evaluate(self.base, self.slo, self.sizing, self.base_dir, key, confirm)
        self.outcomes[key] = outcome
        ev, runs, self.scenario = outcome
        if self.fleet is not None:
            ev = replace(ev, stage=f"fleet-{ev.stage}" if ev.stage == "confirm" else "fleet",
                         replicas=self.fleet)
        self.runs += runs
        self.cache[key] = ev
        self.order.append(ev)
        if self.hook:
            self.hook(ev, self.runs)
        return ev

    def _prefetched(self, key: _Key) -> Optional[_Outcome]:
        if key in self._ahead:
            return _wait(self._ahead.pop(key))
        chain = self._chains.pop(key[1], None)
        if chain is not None:  # the seed's whole search ran ahead: keep all of it
            for k, outcome in (_wait(chain) or {}).items():
                self._ahead.setdefault(k, _Ready(outcome))
            if key in self._ahead:
                return _wait(self._ahead.pop(key))
        return None

    def prefetch(self, rate: float, seed: int, confirm: bool = False) -> None:
        """Start a simulation the search may ask for next."""
        key = self.key(rate, seed, confirm)
        if self.pool is None or key in self.cache or key in self._ahead:
            return
        self._ahead[key] = self.pool.apply_async(
            _evaluate, (self.base, self.slo, self.sizing, self.base_dir, key, confirm))

    def prefetch_searches(self, seeds: Sequence[int], guess: float, grow: float, rel_tol: float,
                          start: float) -> None:
        """Start each seed's whole bracket search in a process of its own."""
        if self.pool is None or len(seeds) < 2:
            return
        for seed in seeds:
            self._chains[seed] = self.pool.apply_async(
                _search_alone, (self.base, self.slo, self.sizing, self.base_dir,
                                self.budget - self.runs, seed, guess, grow, rel_tol, start))


class _Ready:
    """A result already at hand, read like a pending one."""

    def __init__(self, outcome: _Outcome) -> None:
        self.outcome = outcome

    def get(self, timeout: Optional[float] = None) -> _Outcome:
        return self.outcome


#: Seconds the search waits for one prefetched result before running it itself. A worker that
#: died (killed, out of memory) leaves its ``multiprocessing.Pool`` task pending for ever; a
#: prefetch is only a head start, so the search then simulates the key in this process: the
#: same result, since every simulation is deterministic for its key.
PREFETCH_TIMEOUT_S = 300.0


def _wait(pending: Any) -> Any:
    """A prefetched result, or None when its worker failed or did not answer in time (the
    caller then simulates it here, where a real error is raised where it can be read)."""
    try:
        return pending.get(PREFETCH_TIMEOUT_S)
    except Exception:
        return None


def _search_alone(base: dict, slo: SLO, sizing: RunSizing, base_dir, budget: int, seed: int,
                  guess: float, grow: float, rel_tol: float, start: float) -> dict:
    """One seed's search in a worker process: every simulation it made, by key."""
    ev = _Evaluator(base, slo, sizing, base_dir, budget, None)
    _search(ev, seed, guess, grow, rel_tol, start)
    return ev.outcomes


class _Prefetcher:
    """``apply_async(fn, args).get(timeout)`` over a ``ProcessPoolExecutor``.

    Why not ``multiprocessing.Pool``: its ``terminate()`` kills workers that may be writing a
    result, and a worker killed while it holds the result queue's lock leaves ``terminate``
    waiting on that lock for ever (seen once in the test suite, under load). The executor's
    manager thread notices a killed worker and marks the pool broken instead of hanging."""

    def __init__(self, n: int) -> None:
        from concurrent.futures import ProcessPoolExecutor

        self.executor = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context(_start_method()))

    def apply_async(self, fn: Callable, args: tuple) -> "_Future":
        return _Future(self.executor.submit(fn, *args))

    def close(self) -> None:
        """Drop what has not started and stop the workers now: a prefetched run nobody needs
        must not hold up the answer."""
        ex = self.executor
        procs = list((getattr(ex, "_processes", None) or {}).values())
        ex.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        ex.shutdown(wait=True)


class _Future:
    def __init__(self, future: Any) -> None:
        self.future = future

    def get(self, timeout: Optional[float] = None) -> Any:
        return self.future.result(timeout)


@contextmanager
def worker_pool(workers: int, tasks: int) -> Iterator[Any]:
    """Worker processes for prefetching (None when one process is asked for or all there is;
    ``analysis.plan`` screens its candidates on them too).
    Forked where the platform can (workers start at once, with everything imported); stopped on
    exit, so a prefetched run nobody needs does not hold up the answer."""
    n = min(os.cpu_count() or 1, 4) if workers <= 0 else workers
    n = min(n, max(tasks, 2))
    if n <= 1:
        yield None
        return
    pool = _Prefetcher(n)
    try:
        yield pool
    finally:
        pool.close()


def _start_method() -> str:
    """``fork`` from a single-threaded process (the CLI): workers start at once with
    everything imported. From a process with other threads (the dashboard's server, a web
    app) a forked child can inherit a lock another thread held and hang for ever, so the
    workers are started clean (``forkserver``, else ``spawn``)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def with_rate(cfg: dict, rate: float, seed: Optional[int] = None,
              num_requests: Optional[int] = None) -> dict:
    """A copy of a built config at another arrival rate (and seed, and run length). A trace's
    ``time_scale`` is dropped, because ``rate`` rescales a trace instead."""
    out = copy.deepcopy(cfg)
    arrival = out["workload"].setdefault("arrival", {})
    arrival.pop("time_scale", None)
    arrival["rate"] = float(rate)
    if seed is not None:
        out["seed"] = int(seed)
    if num_requests is not None:
        out["workload"]["num_requests"] = int(num_requests)
    return out


def _search(ev: _Evaluator, seed: int, guess: float, grow: float, rel_tol: float,
            start: float) -> SeedSearch:
    min_rate, max_rate = start / 1e3, start * 1e4
    lo: Optional[float] = None
    hi: Optional[float] = None
    rate = guess
    while lo is None or hi is None:
        if ev.exhausted:
            return SeedSearch(seed, lo, hi, "simulation budget spent before a bracket was found")
        run = ev(rate, seed)
        if run.passed:
            lo = rate = run.rate
            if hi is None:
                if rate >= max_rate:
                    return SeedSearch(seed, lo, None, f"SLO met even at {rate:.4g} req/s (search limit)")
                rate = min(rate * grow, max_rate)
        else:
            hi = rate = run.rate
            if lo is None:
                if rate <= min_rate:
                    worst = "; ".join(ev(rate, seed).violations)
                    return SeedSearch(seed, None, hi, f"SLO missed even at {rate:.4g} req/s ({worst})")
                rate = max(rate / grow, min_rate)
    return _narrow(ev, seed, lo, hi, rel_tol)


def _narrow(ev: _Evaluator, seed: int, lo: float, hi: float, rel_tol: float) -> SeedSearch:
    """Bisect one seed's bracket in log space until it is narrower than ``rel_tol``."""
    while hi / lo > 1.0 + rel_tol:
        if ev.exhausted:
            return SeedSearch(seed, lo, hi, "simulation budget spent before the bracket was narrow enough")
        run = ev(math.sqrt(lo * hi), seed)
        if run.rate in (lo, hi):  # the bracket is as narrow as rates are recorded
            break
        if run.passed:
            lo = run.rate
        else:
            hi = run.rate
    return SeedSearch(seed, lo, hi)


# ---------------------------------------------------------------- sizing the interval

@dataclass
class _SeedPlan:
    """Which seeds come next and where their searches start: from the first seed's answer,
    one bracket width at a time (from the start rate, doubling, when it found none)."""

    first_seed: int
    start: float
    most: int   # seeds the search may grow to

    def add(self, ev: _Evaluator, count: int, tol: float, searches: list[SeedSearch]) -> list[SeedSearch]:
        """Up to ``count`` more seeds, numbered after ``searches`` and searched side by side."""
        n = len(searches)
        seeds = [self.first_seed + i for i in range(n, min(n + count, self.most))]
        first = searches[0].low
        guess, grow = (first, 1.0 + 2.0 * tol) if first else (self.start, 2.0)
        ev.prefetch_searches(seeds, guess, grow, tol, self.start)
        return [_search(ev, seed, guess, grow, tol, self.start) for seed in seeds]


@dataclass
class _Sized:
    """The seeds the interval target settled on, the brackets' final width, and why it stopped."""

    searches: list[SeedSearch]
    tol: float
    half: Optional[float]   # the interval's half-width relative to the estimate (None: no estimate)
    met: Optional[bool]     # None: no target
    note: str


def _size(ev: _Evaluator, plan_: _SeedPlan, searches: list[SeedSearch], rel_tol: float,
          confidence: float, target: Optional[float]) -> _Sized:
    """Narrow the brackets or add seeds until the interval's half-width is within ``target``
    of the estimate, the seeds run out (``plan_.most``) or the budget does. Narrowing comes
    first when the brackets alone could explain the seeds' spread: a run per seed is cheaper
    than a new seed's search, and more seeds would only average bracket error."""
    tol = rel_tol
    while True:
        mean, lo, hi = seed_interval(searches, confidence)
        half = relative_half_width(mean, lo, hi, len(searches))
        met = half is not None and target is not None and half <= target
        no_rate = not all(s.low for s in searches)  # the planning rate is 0 whatever comes next
        if not target or no_rate or met or ev.exhausted:
            break
        sd, bracket = _spreads(searches)
        if 0 < bracket >= sd and tol > MIN_REL_TOL:
            tol = max(tol / 2, MIN_REL_TOL)
            searches = _narrow_all(ev, searches, tol)
            continue
        if len(searches) >= plan_.most:
            break
        more = _more_seeds(len(searches), max(sd, bracket), mean, target, confidence, plan_.most)
        searches = searches + plan_.add(ev, more, tol, searches)
    note = _sizing_note(len(searches), half, target, no_rate, tol, rel_tol, ev.exhausted)
    return _Sized(searches, tol, half, None if not target or no_rate else met, note)


def _narrow_all(ev: _Evaluator, searches: list[SeedSearch], tol: float) -> list[SeedSearch]:
    """Every complete bracket narrowed to ``tol``; each seed's first bisection starts at once."""
    open_ = [s for s in searches if s.low and s.high and not s.note]  # both bounds set
    for s in open_:
        ev.prefetch(math.sqrt(cast(float, s.low) * cast(float, s.high)), s.seed)
    return [_narrow(ev, s.seed, cast(float, s.low), cast(float, s.high), tol) if s in open_ else s for s in searches]


def _more_seeds(n: int, spread: float, mean: float, target: float, confidence: float, most: int) -> int:
    """Seeds to add: as many as the present spread says the target needs, at most doubling
    (a spread from few seeds is itself a rough estimate) and at least one."""
    need = most
    for m in range(n + 1, most + 1):
        if _t_quantile(m - 1, confidence) * spread / math.sqrt(m) <= target * mean:
            need = m
            break
    return max(1, min(need, 2 * n, most) - n)


def seed_interval(searches: Sequence[SeedSearch], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high) of the seeds' highest passing rates: a Student-t interval whose spread
    is never taken as smaller than the brackets alone could make it, so seeds that land in the
    same bracket do not claim a zero-width interval. One seed: zero width (no estimate)."""
    lows = [s.low or 0.0 for s in searches]
    mean = sum(lows) / len(lows)
    spread = max(_spreads(searches))
    if len(lows) < 2 or spread == 0:
        return mean, mean, mean
    half = _t_quantile(len(lows) - 1, confidence) * spread / math.sqrt(len(lows))
    return mean, mean - half, mean + half


def relative_half_width(mean: float, lo: float, hi: float, n: int) -> Optional[float]:
    """The interval's half-width as a fraction of the estimate (None: one seed, or no rate)."""
    if n < 2 or mean <= 0:
        return None
    return (hi - lo) / 2 / mean


def _spreads(searches: Sequence[SeedSearch]) -> tuple[float, float]:
    """(the sample standard deviation of the seeds' highest passing rates, the largest one their
    brackets alone could give: half the mean bracket width, corrected for n - 1)."""
    n = len(searches)
    if n < 2:
        return 0.0, 0.0
    lows = [s.low or 0.0 for s in searches]
    mean = sum(lows) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in lows) / (n - 1))
    widths = [s.high - s.low for s in searches if s.low and s.high]
    bracket = sum(widths) / len(widths) / 2 * math.sqrt(n / (n - 1)) if widths else 0.0
    return sd, bracket


def _t_quantile(df: int, confidence: float) -> float:
    # scipy.special's Student-t inverse is what scipy.stats.t.ppf calls (scipy.stats costs 0.4 s
    # to import, most of a capacity search's start-up).
    from scipy.special import stdtrit  # type: ignore[import-untyped]  # no stubs: scipy-stubs is no dependency

    return float(stdtrit(df, 0.5 + confidence / 2))


def _sizing_note(n: int, half: Optional[float], target: Optional[float], no_rate: bool, tol: float,
                 rel_tol: float, exhausted: bool) -> str:
    """How the seeds were sized, in one sentence: the number, the interval, why it stopped."""
    if no_rate:
        return f"no interval: {NO_RATE}"
    width = "no spread estimate" if half is None else f"interval ±{half:.1%}"
    seeds = f"{n} seed{'s' if n > 1 else ''}"
    if not target:
        return f"{seeds} as asked, {width} (no interval target)"
    narrowed = (f"; brackets narrowed from {_tol_text(rel_tol)} to {_tol_text(tol)}, as the seeds "
                f"agreed within their bracket width" if tol < rel_tol else "")
    if half is not None and half <= target:
        return f"interval within ±{_tol_text(target)} (±{half:.1%} over {n} seeds){narrowed}"
    why = "the simulation budget ran out" if exhausted else "more seeds or longer runs narrow it"
    return f"stopped at {seeds}: {width}, wider than the ±{_tol_text(target)} target ({why}){narrowed}"


def _assemble(base: dict, slo: SLO, ev: _Evaluator, searches: list[SeedSearch], rel_tol: float,
              confidence: float, target_rate: Optional[float], table: dict,
              sizing: RunSizing) -> CapacityResult:
    lows = [s.low or 0.0 for s in searches]
    mean, lo, hi = seed_interval(searches, confidence)
    planning = min(lows)
    notes = [f"seed {s.seed}: {s.note}" for s in searches if s.note]
    short = [e for e in ev.order if e.passed and not e.metrics.get("steady")]
    if short:
        notes.append(f"{len(short)} passing run(s) spanned fewer than {MIN_SPANS:g} mean end-to-end "
                     f"latencies (not steady state): raise --duration or lift --num-requests")
    at: dict = {}
    confirmed = None
    if planning > 0:
        for s in searches:
            ev.prefetch(planning, s.seed)
        if sizing.confirm_s > 0:  # the long run at the planning rate is next, and likely needed
            ev.prefetch(planning, min(searches, key=lambda s: s.low or 0.0).seed, confirm=True)
        runs = [ev(planning, s.seed) for s in searches]
        if not all(r.passed for r in runs):
            notes.append(f"not every seed meets the SLO at {planning:.3g} req/s although each met it "
                         f"at its own bracket: pass/fail is noisy there; use more requests or seeds")
        at = _average([r.metrics for r in runs])
    if planning > 0 and sizing.confirm_s > 0:
        binding = min(searches, key=lambda s: s.low or 0.0).seed
        rate, run = _confirm(ev, binding, planning, rel_tol)
        confirmed = run is not None
        if run is None:
            notes.append(f"no long run ({sizing.confirm_s:g} s) met the SLO down to {rate:.3g} req/s; "
                         f"the short-run answer is not confirmed")
        else:
            if rate < planning:
                notes.append(f"the search runs overstated capacity: a {sizing.confirm_s:g} s run missed "
                             f"the SLO at {planning:.3g} req/s (near a hard limit a queue builds over "
                             f"minutes); a {sizing.confirm_s:g} s run met it at {rate:.3g} req/s")
            planning, at = rate, dict(run.metrics)
    unit = unit_of(base, ev.scenario, table)
    gpus_per_replica, hardware, price = unit.gpus, unit.hardware, unit.usd_per_gpu_hour
    if unit.kind == "pd_group":
        notes.append(f"disaggregated prefill/decode: the search sized {unit.description} as its "
                     f"'replica' (parallel.num_replicas does not apply); GPUs and $ count both pools")
    goodput = tok_gpu = cost = None
    if planning > 0 and at:
        # Steady state: what arrives is served, so throughput is the rate times the tokens a
        # request emits (a finite run's tokens / duration also counts the final drain).
        goodput = planning * (at.get("slo_attainment") or 0.0)
        tok_gpu = planning * (at.get("mean_output_tokens") or 0.0) / gpus_per_replica
        cost = usd_per_million_output_tokens(tok_gpu, price)
    result = CapacityResult(
        config=base, slo=slo, sizing=sizing, rel_tol=rel_tol, num_simulations=ev.runs,
        confidence=confidence, searches=searches, evaluations=list(ev.order),
        capacity_rate=mean, ci_low=lo, ci_high=hi, planning_rate=planning,
        gpus_per_replica=gpus_per_replica, hardware=hardware, usd_per_gpu_hour=price,
        at_planning_rate=at, goodput=goodput, output_tokens_per_s_per_gpu=tok_gpu,
        usd_per_million_output_tokens=cost, notes=notes, confirmed=confirmed, unit=unit)
    return plan(result, target_rate)


def _confirm(ev: _Evaluator, seed: int, rate: float, rel_tol: float) -> tuple[float, Optional[Evaluation]]:
    """One long run at the planning rate; step down by the bracket width until one passes.
    Why: near a hard limit (max_num_seqs, the KV pool) a queue builds over minutes, not
    seconds, so short runs pass rates that a deployment cannot sustain."""
    for _ in range(MAX_CONFIRM_STEPS):
        if ev.exhausted:
            break
        # The step below starts now, beside this one: it is the next run if this one fails.
        ev.prefetch(rate, seed, confirm=True)
        ev.prefetch(ev.key(rate, seed)[0] / (1.0 + rel_tol), seed, confirm=True)
        run = ev(rate, seed, confirm=True)
        if run.passed:
            return run.rate, run
        rate = run.rate / (1.0 + rel_tol)
    return rate, None


def plan(result: CapacityResult, target_rate: Optional[float],
         usd_gpu_hour: Optional[float] = None) -> CapacityResult:
    """Replicas, GPUs and cost for ``target_rate`` (and a new price), without simulating again:
    the dashboard re-plans instantly when only the target or the price changes. The fleet
    simulated for this very target gives the replicas; any other target is divided."""
    if usd_gpu_hour is not None:
        result.usd_per_gpu_hour = usd_gpu_hour
        result.usd_per_million_output_tokens = usd_per_million_output_tokens(
            result.output_tokens_per_s_per_gpu or 0.0, usd_gpu_hour)
    result.target_rate = target_rate
    result.replicas = result.gpus = result.usd_per_hour = None
    result.fleet_mode = result.divided_replicas = result.simulated_replicas = None
    result.fleet_per_replica_rate, result.fleet_note = None, ""
    if target_rate is not None and result.planning_rate > 0:
        result.divided_replicas = max(1, math.ceil(target_rate / result.planning_rate - 1e-9))
        result.replicas, result.fleet_mode = result.divided_replicas, "divide"
        _plan_fleet(result, target_rate)
        if result.replicas is not None:
            result.gpus = result.replicas * result.gpus_per_replica
            result.usd_per_hour = result.gpus * result.usd_per_gpu_hour
    return result


def _plan_fleet(result: CapacityResult, target_rate: float) -> None:
    """Take the replicas from the simulated fleet when it was simulated for ``target_rate``
    (None when no fleet size up to the limit met the SLO); say why not otherwise."""
    f = result.fleet
    if f is None:
        return
    if f.target_rate != target_rate:
        result.fleet_note = (f"the fleet was simulated for {f.target_rate:g} req/s; "
                             f"{target_rate:g} req/s is sized by division")
        return
    result.fleet_note = f.note
    if not f.trials:   # not simulated (over --max-replicas): division stands
        return
    result.fleet_mode, result.replicas = "simulate", f.replicas
    result.simulated_replicas, result.fleet_per_replica_rate = f.replicas, f.per_replica_rate


def _average(rows: list[dict]) -> dict:
    out = {}
    for k in rows[0]:
        vals = [r[k] for r in rows if r.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    return out


def _configured_rate(cfg: dict) -> float:
    rate = cfg["workload"].get("arrival", {}).get("rate")
    if isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
        return float(rate)
    return 1.0


def _check_fleet(fleet: str, max_replicas: int) -> None:
    from sim.errors import ConfigError

    if fleet not in FLEET_MODES:
        raise ConfigError(f"--fleet: expected {' or '.join(FLEET_MODES)}, got {fleet!r}")
    if not (isinstance(max_replicas, int) and 1 <= max_replicas <= 4096):
        raise ConfigError(f"--max-replicas: expected 1 to 4096, got {max_replicas}")


def _check_target(ci_target: Optional[float], max_seeds: int) -> Optional[float]:
    """The interval target as a fraction (None: off, for 0 or None), or a one-line error."""
    from sim.errors import ConfigError

    if ci_target is not None and not (0 <= ci_target < 1):
        raise ConfigError(f"--ci-target: expected a fraction in [0, 1) (0: seeds fixed), got {ci_target}")
    if not 1 <= max_seeds <= 64:
        raise ConfigError(f"--max-seeds: expected 1 to 64, got {max_seeds}")
    return ci_target or None


def _check_args(seeds: int, rel_tol: float, target_rate, start_rate, budget: int,
                sizing: RunSizing, workers: int = 0) -> None:
    from sim.errors import ConfigError

    from sim.workload.config import MAX_REQUESTS

    if seeds < 1:
        raise ConfigError(f"--seeds: expected at least 1, got {seeds}")
    if not 0 <= workers <= 256:
        raise ConfigError(f"--workers: expected 0 (one per CPU) to 256, got {workers}")
    if seeds > budget:
        raise ConfigError(f"--seeds: {seeds} seeds need more than --max-simulations {budget}")
    if not 0 < rel_tol < 1:
        raise ConfigError(f"--rel-tol: expected a fraction in (0, 1), got {rel_tol}")
    if target_rate is not None and not (target_rate > 0 and math.isfinite(target_rate)):
        raise ConfigError(f"--target-rate: expected a rate > 0 req/s, got {target_rate}")
    if start_rate is not None and not (start_rate > 0 and math.isfinite(start_rate)):
        raise ConfigError(f"--start-rate: expected a rate > 0 req/s, got {start_rate}")
    if budget < 2:
        raise ConfigError(f"--max-simulations: expected at least 2, got {budget}")
    if not 0 < sizing.duration_s < math.inf:
        raise ConfigError(f"--duration: expected seconds > 0, got {sizing.duration_s}")
    if sizing.num_requests is not None and not 2 <= sizing.num_requests <= MAX_REQUESTS:
        raise ConfigError(f"--num-requests: expected 2 to {MAX_REQUESTS:,}, got {sizing.num_requests}")
    if not 0 <= sizing.confirm_s < math.inf:
        raise ConfigError(f"--confirm: expected seconds >= 0 (0: no confirmation), got {sizing.confirm_s}")
    if not 0 <= sizing.warmup_fraction < 1:
        raise ConfigError(f"--warmup: expected a fraction in [0, 1), got {sizing.warmup_fraction}")
