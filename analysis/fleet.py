"""Fleet sizing by simulation: how many replicas (or P/D groups) behind the configured router
serve a target rate inside the SLO.

Why simulate instead of dividing: ``ceil(target / per-replica rate)`` assumes that N replicas
behave like N copies of one, each handed exactly 1/N of the load. Neither holds. A router that
does not look at load (``round_robin``) hands one replica more than its share of long requests
by chance, so each replica of the fleet carries less than one replica alone (imbalance: the
division underestimates). A fleet also smooths what each replica sees: a round-robin share of a
Poisson stream arrives more regularly than the stream, and a load-aware router sends a burst to
whoever is idle, so each replica can carry more than alone (pooling: the division
overestimates). For disaggregated prefill/decode the unit is one P/D group, and k groups share
one prefill pool and one decode pool (k x the prefill and k x the decode instances), which pools
both phases further.

How, in the search's own two stages: the division is the first guess. N units are simulated at
the target rate on every seed of the search, with the search's run length and SLO test; from
the first guess the size steps up until a fleet meets the SLO, or down while one fewer still
meets it, in steps that double, and the bracket is then bisected. Then, when the search
confirmed its answer with a long run, the same long run (on the seed that set the planning
rate) checks the fleet's answer, one unit more at a time until it passes. So the answer N met
the SLO and N - 1 missed it (or N is 1), and only the answer pays for a long run. Simulations
run through the search's ``_Evaluator`` (memoised, prefetched by the same worker processes,
recorded only when asked for), so the answer does not depend on ``workers``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

from analysis.slo import SLO

#: Largest fleet simulated by default: a fleet of N costs about N single-replica runs.
MAX_REPLICAS = 32
#: The fleet modes of ``kvplan capacity --fleet``.
FLEET_MODES = ("simulate", "divide")


@dataclass
class Unit:
    """What the per-replica search sized as "one replica": a replica, or a whole P/D group
    (``disaggregation.enabled``: the search simulates both pools together)."""

    kind: str                     # "replica" or "pd_group"
    gpus: int                     # per unit: a P/D group counts prefill + decode GPUs
    hardware: str                 # as shown: one name, or "<prefill> (prefill) + <decode> (decode)"
    usd_per_gpu_hour: float       # a P/D group of mixed GPUs: the GPU-weighted mean
    description: str = "one replica"
    prefill_replicas: Optional[int] = None
    decode_replicas: Optional[int] = None
    prefill_gpus: Optional[int] = None    # the group's prefill GPUs (instances x GPUs each)
    decode_gpus: Optional[int] = None
    prefill_hardware: Optional[str] = None
    decode_hardware: Optional[str] = None

    @property
    def name(self) -> str:
        return "P/D group" if self.kind == "pd_group" else "replica"

    def plural(self, n: int) -> str:
        """'1 replica', '5 replicas', '3 P/D groups'."""
        return plural(n, self.name)


def plural(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def unit_of(base: dict, scenario: dict, table: dict) -> Unit:
    """The unit the search sized, with its GPUs and price. ``scenario`` is a run summary's
    ``scenario`` block (its GPUs per replica include tensor, pipeline and data parallelism)."""
    from analysis.pricing import usd_per_gpu_hour

    if not (base.get("disaggregation") or {}).get("enabled"):
        gpus = int(scenario.get("gpus_per_replica", 1))
        hardware = scenario.get("hardware", base["hardware"])
        return Unit("replica", gpus, hardware, usd_per_gpu_hour(hardware, table))
    return _pd_unit(base, table, usd_per_gpu_hour)


def _pd_unit(base: dict, table: dict, price_of: Callable[[str, dict], float]) -> Unit:
    """One P/D group: both pools' GPUs, each priced as its own hardware."""
    from sim import config as config_mod

    sc = config_mod.validate(base)
    d, par = sc.disaggregation, sc.parallel
    pools = []
    for n, tp, hw in ((d.prefill_replicas, d.prefill_tensor_parallel_size, d.prefill_hardware),
                      (d.decode_replicas, d.decode_tensor_parallel_size, d.decode_hardware)):
        per = (tp or par.tensor_parallel_size) * par.pipeline_parallel_size
        pools.append((n, n * per, hw or sc.hardware))
    (np_, gp, hp), (nd, gd, hd) = pools
    usd_hour = gp * price_of(hp, table) + gd * price_of(hd, table)
    hardware = hp if hp == hd else f"{hp} (prefill) + {hd} (decode)"
    text = (f"one P/D group ({np_} prefill + {nd} decode instance{'s' if nd > 1 else ''}, "
            f"{gp + gd} GPUs)")
    return Unit("pd_group", gp + gd, hardware, usd_hour / (gp + gd), text, np_, nd, gp, gd, hp, hd)


def fleet_config(base: dict, unit: Unit, n: int) -> dict:
    """``base`` with ``n`` units: ``parallel.num_replicas`` = n, or for P/D both pools n times
    as large (one shared prefill pool and one shared decode pool behind the router)."""
    out = copy.deepcopy(base)
    if unit.kind == "pd_group":
        out["disaggregation"]["prefill_replicas"] = n * int(unit.prefill_replicas or 1)
        out["disaggregation"]["decode_replicas"] = n * int(unit.decode_replicas or 1)
    else:
        out.setdefault("parallel", {})["num_replicas"] = n
    return out


def fleet_sizing(sizing: Any, n: int) -> Any:
    """The search's run sizing for a fleet of ``n``: arrivals span the same seconds, so the
    request cap (and a fixed count) grow n-fold; each unit still sees as many requests as in
    the search."""
    from sim.workload.config import MAX_REQUESTS

    fixed = None if sizing.num_requests is None else min(sizing.num_requests * n, MAX_REQUESTS)
    return replace(sizing, max_requests=min(sizing.max_requests * n, MAX_REQUESTS), num_requests=fixed)


@dataclass
class FleetTrial:
    """One fleet size tried at the target rate: its runs (each seed, then the long run)."""

    replicas: int
    passed: Optional[bool]   # None: cut short by the simulation budget
    evaluations: list = field(default_factory=list)   # capacity.Evaluation, stage "fleet" / "fleet-confirm"


@dataclass
class FleetResult:
    """The fleet simulated for ``target_rate``. ``replicas`` is the smallest size that met the
    SLO (None: none up to ``max_replicas``, or the budget ran out first); ``per_replica_rate``
    is what each unit carries there, and ``per_replica_rate_missed`` what each carried in the
    largest size that missed (target / (replicas - 1)): the fleet's per-unit capacity lies
    between them, to compare with ``single_replica_rate`` (the search's planning rate)."""

    target_rate: float
    router: str
    unit: str                                  # "replica" or "P/D group"
    divided_replicas: int
    replicas: Optional[int]
    max_replicas: int
    single_replica_rate: float
    per_replica_rate: Optional[float] = None
    per_replica_rate_missed: Optional[float] = None
    effect: str = ""                           # "pooling", "imbalance", "as divided" or "" (no answer)
    minimal: bool = False                      # N - 1 was simulated and missed (or N is 1)
    confirmed: Optional[bool] = None           # the long run met it at N (None: none asked for)
    note: str = ""
    trials: list[FleetTrial] = field(default_factory=list)
    num_simulations: int = 0


@dataclass
class _Bracket:
    """The fleet sizes known so far: ``ok`` the smallest that met the SLO (None: none yet) and
    ``fail`` the largest that missed it (0: none yet, as no replicas serve nothing)."""

    ok: Optional[int] = None
    fail: int = 0
    tried: int = 0

    def after(self, n: int, passed: bool) -> "_Bracket":
        ok = n if passed and (self.ok is None or n < self.ok) else self.ok
        return _Bracket(ok, self.fail if passed else max(self.fail, n), self.tried + 1)

    def next(self, most: int) -> Optional[int]:
        """The next size to try: up from the largest miss while nothing met the SLO, down from
        the smallest pass while nothing missed (steps 1, 2, 4, ...), then bisection; None when
        done (a pass next to a miss) or out of room."""
        step = 2 ** max(self.tried - 1, 0)
        if self.ok is not None and self.ok - self.fail <= 1:
            return None
        if self.ok is None:
            return None if self.fail >= most else min(self.fail + step, most)
        if self.fail == 0:
            return max(self.ok - step, 1)
        return (self.ok + self.fail) // 2


class _FleetSearch:
    """Trials of fleet sizes at the target rate, each through an ``_Evaluator`` of its own
    (the fleet's config and sizing), sharing the search's worker pool and budget."""

    def __init__(self, base: dict, slo: SLO, sizing: Any, base_dir: Any, unit: Unit,
                 target: float, seeds: Sequence[int], binding: int, budget: int,
                 hook: Optional[Callable], offset: int, pool: Any) -> None:
        self.base, self.slo, self.sizing, self.base_dir = base, slo, sizing, base_dir
        self.unit, self.target, self.seeds, self.binding = unit, target, list(seeds), binding
        self.budget, self.hook, self.offset, self.pool = budget, hook, offset, pool
        self.evaluators: dict[int, Any] = {}
        self.trials: list[FleetTrial] = []

    @property
    def runs(self) -> int:
        return sum(e.runs for e in self.evaluators.values())

    @property
    def exhausted(self) -> bool:
        return self.runs >= self.budget

    def evaluator(self, n: int) -> Any:
        """The memoising evaluator of size ``n`` (made on first use)."""
        from analysis.capacity import _Evaluator  # capacity imports this module

        if n not in self.evaluators:
            outer = self.hook
            hook = None if outer is None else (lambda ev, _: outer(ev, self.offset + self.runs))
            ev = _Evaluator(fleet_config(self.base, self.unit, n), self.slo, fleet_sizing(self.sizing, n),
                            self.base_dir, math.inf, hook, fleet=n)
            ev.pool = self.pool
            self.evaluators[n] = ev
        return self.evaluators[n]

    def prefetch(self, n: int, seeds: Sequence[int]) -> None:
        """Start these seeds' runs of size ``n`` in the worker processes (once each)."""
        if self.pool is None:
            return
        ev = self.evaluator(n)
        for seed in seeds:
            ev.prefetch(self.target, seed)

    def trial(self, n: int) -> Optional[bool]:
        """Whether ``n`` units meet the SLO at the target on every seed's run of the search's
        length, in seed order, stopping at the first miss (None: the budget ran out first).
        Only as many seeds run ahead as there are workers: a size that misses usually misses on
        its first seed, and a run nobody will read would hold a worker from the next size."""
        ev = self.evaluator(n)
        ahead = int(getattr(self.pool, "_processes", 1) or 1)
        runs: list = []
        for i, seed in enumerate(self.seeds):
            self.prefetch(n, self.seeds[i:i + ahead])
            if self.exhausted:
                if runs:
                    self.trials.append(FleetTrial(n, None, runs))
                return None
            runs.append(ev(self.target, seed))
            if not runs[-1].passed:
                break
        self.trials.append(FleetTrial(n, runs[-1].passed, runs))
        return runs[-1].passed

    def confirm(self, n: int) -> Optional[bool]:
        """Whether ``n`` units meet the SLO in the long run on the binding seed (None: budget
        spent). Run here, not ahead: the short runs already passed this size, so the next size's
        long run is rarely needed and would cost as much as this one."""
        if self.exhausted:
            return None
        run = self.evaluator(n)(self.target, self.binding, confirm=True)
        self.trials.append(FleetTrial(n, run.passed, [run]))
        return run.passed


def size_fleet(base: dict, slo: SLO, sizing: Any, base_dir: Any, unit: Unit,
               target: float, planning: float, seeds: Sequence[int], binding: int, *,
               max_replicas: int = MAX_REPLICAS, budget: int, hook: Optional[Callable] = None,
               offset: int = 0, pool: Any = None, max_confirm_steps: int = 6) -> FleetResult:
    """Simulate fleets at ``target`` req/s from the divided estimate until the smallest that
    meets the SLO is bracketed (it met it, one fewer missed it). ``base`` and ``sizing`` are the
    search's (one unit); ``budget`` is the simulations left to spend; ``hook`` is told of every
    run with the running total, counted from ``offset`` (the search's runs).

    Like the search: sizes are bracketed with runs of the search's length on every seed, then
    the answer is checked by the long run (``sizing.confirm_s``) on the ``binding`` seed, one
    more unit at a time (at most ``max_confirm_steps``) until a long run meets the SLO. A long
    run is made only for a size that is the answer so far, never for every size tried."""
    divided = max(1, math.ceil(target / planning - 1e-9))
    router = str((base.get("parallel") or {}).get("router", "round_robin"))
    out = FleetResult(target, router, unit.name, divided, None, max_replicas, planning)
    if divided > max_replicas:
        out.note = (f"fleet not simulated: the divided estimate, {unit.plural(divided)}, is over "
                    f"--max-replicas {max_replicas} (a fleet of N costs about N single-replica runs); "
                    f"sized by division")
        return out
    search = _FleetSearch(base, slo, sizing, base_dir, unit, target, seeds, binding, budget,
                          hook, offset, pool)
    state, spent = _Bracket(), False
    n: Optional[int] = divided
    while n is not None:
        passed = search.trial(n)
        if passed is None:
            spent = True
            break
        state = state.after(n, passed)
        n = state.next(max_replicas)
    ok, fail, why = state.ok, state.fail, ""
    if ok is not None and sizing.confirm_s > 0:
        out.confirmed = False
        if not spent:
            ok, fail, spent, why = _confirm(search, ok, fail, max_replicas, max_confirm_steps, sizing.confirm_s)
            out.confirmed = ok is not None
    out.trials, out.num_simulations = search.trials, search.runs
    _conclude(out, ok, fail, unit, spent, why)
    return out


def _confirm(search: _FleetSearch, ok: int, fail: int, most: int, steps: int,
             confirm_s: float) -> tuple[Optional[int], int, bool, str]:
    """The long run on the answer, one unit more while it misses: (answer, largest size that
    missed, budget spent, why there is no answer)."""
    n = ok
    for _ in range(steps):
        passed = search.confirm(n)
        if passed is None:
            return None, fail, True, ""
        if passed:
            return n, fail, False, ""
        fail = n
        if n >= most:
            break
        n += 1
    return None, fail, False, f"no {confirm_s:g} s run met it up to {search.unit.plural(fail)}"


def _conclude(out: FleetResult, ok: Optional[int], fail: int, unit: Unit, spent: bool, why: str) -> None:
    """The answer, the rates per unit on both sides of it, and what they say about division."""
    out.replicas = ok
    if ok is None:
        why = why or ("the simulation budget ran out" if spent else f"--max-replicas {out.max_replicas} reached")
        out.note = (f"no fleet of up to {unit.plural(max(fail, 1))} behind {out.router} met the "
                    f"SLO at {out.target_rate:g} req/s ({why}; division says {out.divided_replicas})")
        return
    out.minimal = ok - fail <= 1
    out.per_replica_rate = out.target_rate / ok
    if fail > 0:
        out.per_replica_rate_missed = out.target_rate / fail
    out.effect = "pooling" if ok < out.divided_replicas else "imbalance" if ok > out.divided_replicas else "as divided"
    out.note = fleet_text(out, unit.name)
    if not out.minimal:
        out.note += (f"; the simulation budget ran out before {unit.plural(ok - 1)} could be tried, "
                     f"so fewer may do")
    if out.confirmed is False:
        out.note += "; not confirmed by a long run (the simulation budget ran out)"


def fleet_text(f: FleetResult, unit: str = "replica") -> str:
    """The fleet against division, in one sentence (``f.replicas`` must be set): the sizes on
    both sides of the answer give the fleet's per-unit capacity a bracket, compared with what
    one unit sustains alone."""
    n, div = int(f.replicas or 0), f.divided_replicas
    each = f"each carrying {f.per_replica_rate:.2f} req/s"
    missed = (f" ({plural(n - 1, unit)}, {f.per_replica_rate_missed:.2f} req/s each, missed)"
              if f.per_replica_rate_missed and f.minimal else "")
    alone = f"one {unit} alone sustains {f.single_replica_rate:.2f}"
    units = plural(n, unit)
    meet = "meets" if n == 1 else "meet"
    if f.effect == "pooling":
        return (f"pooling: {units} behind {f.router} {meet} the SLO at {f.target_rate:g} req/s, "
                f"{div - n} fewer than dividing the rate gives ({div}), {each}{missed}, more than "
                f"{alone}: a fleet smooths the load one {unit} must absorb alone")
    if f.effect == "imbalance":
        return (f"routing imbalance: {plural(div, unit)} (the divided estimate) missed the SLO at "
                f"{f.target_rate:g} req/s behind {f.router}; {units} {meet} it, {each}, less than "
                f"{alone}: the router spreads the load less evenly than division assumes")
    return f"as divided: {units} behind {f.router} {meet} the SLO at {f.target_rate:g} req/s, {each}{missed}; {alone}"
