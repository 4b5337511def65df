"""Capacity in clients: the most closed-loop clients one replica serves inside an SLO, with
its uncertainty, and what serving N clients then takes in replicas, GPUs and dollars.

Why a second search beside the rate search (``analysis.capacity``): most published serving
numbers are closed-loop (``vllm bench serve --max-concurrency``, GuideLLM's ``concurrent``
profile, InferenceX, AIConfigurator's points), so the question a benchmark user asks is "how
many concurrent users", not "how many requests a second". A closed loop has no request rate to
bisect: its load is the client count, a whole number, and its throughput follows from it
(Little's law: clients = throughput x mean E2E), so the search is over integers.

Why per seed and exact: as for rates, whether N clients meet a p99 SLO is a noisy yes/no, so
each seed (one set of lengths) gets its own bracket [most clients meeting the SLO, fewest
missing it], grown by doubling from a start and then bisected until the two are adjacent
integers. The seeds' spread is the stated uncertainty; the count every seed met is the one
planned with. Seeds after the first start from the first seed's answer, so they cost a few
runs each.

Why a cap (``max_clients``): a bound on TPOT or ITL alone may never be missed, because clients
past the engine's running-request limit only wait, and waiting shows in TTFT and E2E, not in
the time between tokens. The search stops at the cap and says the SLO did not bind.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union, cast

from sim import config as config_mod
from analysis.capacity import _t_quantile
from analysis.fleet import Unit, unit_of
from analysis.pricing import price_table, usd_per_million_output_tokens
from analysis.slo import SLO
from sim.errors import ConfigError

#: Requests each client sends in one run; the first tenth of the arrival span is the warm-up
#: that the judged window drops (``analysis.steady.window_metrics``).
REQUESTS_PER_CLIENT = 8
#: Fewest requests in one run, so that a p99 over few clients still has samples.
MIN_REQUESTS = 100
#: The most clients searched by default.
MAX_CLIENTS = 4096
#: How far past the planning count a fleet for ``target_clients`` is grown before giving up.
MAX_EXTRA_REPLICAS = 3
#: Run statistics kept for every run of the search.
KEPT = ("p99_ttft_ms", "p99_tpot_ms", "median_ttft_ms", "median_tpot_ms", "mean_ttft_ms",
        "mean_tpot_ms", "p99_e2el_ms", "mean_e2el_ms", "slo_attainment", "completed",
        "request_throughput", "output_throughput", "achieved_concurrency")


@dataclass
class ClientRun:
    """One closed-loop simulation: ``clients`` over ``replicas`` replicas, on one seed."""

    clients: int
    seed: int
    passed: bool
    violations: list[str]
    metrics: dict
    replicas: int = 1
    stage: str = "search"   # or "fleet": all target clients over a fleet


@dataclass
class ClientSearch:
    """One seed's bracket: ``low`` clients met the SLO (0: not even one), ``high`` did not
    (None: none missed up to the cap)."""

    seed: int
    low: int
    high: Optional[int]
    note: str = ""


def clients_run(base: dict, overrides: Sequence[str], slo: SLO, clients: int, replicas: int, seed: int,
                base_dir: Optional[Union[str, Path]] = None,
                requests_per_client: int = REQUESTS_PER_CLIENT,
                keep_scenario: bool = False) -> tuple[bool, list[str], dict]:
    """One closed-loop run: ``clients`` over ``replicas`` behind the config's router; (met,
    violations, the judged window's statistics with throughput and achieved concurrency, and
    with ``keep_scenario`` the run summary's ``scenario`` block)."""
    from analysis.steady import window_metrics
    from sim.api import simulate

    n = max(MIN_REQUESTS, requests_per_client * clients)
    sets = list(overrides) + slo.overrides() + [
        f"parallel.num_replicas={replicas}", f"workload.num_requests={n}", "workload.arrival.process=closed",
        f"workload.arrival.concurrency={clients}", f"seed={seed}"]
    res = simulate(config_mod.build_config(base, sets), base_dir=base_dir, statistics=False)
    m = window_metrics(res.requests, warmup_fraction=0.1, slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms,
                       stream_interval=res.stream_interval)
    ok, bad = slo.check(m)
    done = [r for r in res.requests if r.finish_time is not None]
    span = (max(cast(float, r.finish_time) for r in done) - min(r.arrival_time for r in res.requests)) if done else 0.0
    m["request_throughput"] = len(done) / span if span > 0 else 0.0
    m["output_throughput"] = sum(r.num_output_tokens for r in done) / span if span > 0 else 0.0
    # Time-averaged requests in flight, send to last token, over the whole run: under the
    # clients while the last requests drain.
    m["achieved_concurrency"] = (sum(cast(float, r.finish_time) - r.arrival_time for r in done) / span) if span > 0 else 0.0
    if keep_scenario:
        m["scenario"] = res.summary.get("scenario") or {}
    return ok, bad, m


@dataclass
class ClientCapacityResult:
    config: dict
    slo: SLO
    confidence: float
    max_clients: int
    requests_per_client: int
    searches: list[ClientSearch]
    runs: list[ClientRun]
    capacity_clients: float           # mean over seeds of each seed's most clients meeting the SLO
    ci_low: float
    ci_high: float
    planning_clients: int             # every seed met the SLO with this many
    gpus_per_replica: int
    hardware: str
    usd_per_gpu_hour: float
    at_planning_clients: dict         # run statistics averaged over seeds at planning_clients
    output_tokens_per_s_per_gpu: Optional[float]
    usd_per_million_output_tokens: Optional[float]
    target_clients: Optional[int] = None
    replicas: Optional[int] = None
    gpus: Optional[int] = None
    usd_per_hour: Optional[float] = None
    divided_replicas: Optional[int] = None   # ceil(target / planning clients)
    fleet_note: str = ""
    notes: list[str] = field(default_factory=list)
    num_simulations: int = 0
    unit: Optional[Unit] = None

    def headline(self) -> str:
        """One sentence with the uncertainty, as the CLI prints it."""
        if self.planning_clients <= 0:
            return f"{no_clients_text(self.to_dict(headline=False))}. {self.num_simulations} simulations."
        at = self.at_planning_clients
        spread = (f"{self.confidence:.0%} CI {self.ci_low:.1f}-{self.ci_high:.1f} over {len(self.searches)} seeds"
                  if len(self.searches) > 1 else "one seed: no spread estimate")
        cap = " (the search cap: the SLO did not bind)" if self.planning_clients >= self.max_clients else ""
        text = (f"One replica serves {self.planning_clients} concurrent clients{cap} inside {self.slo}, at "
                f"{at.get('request_throughput', 0.0):.2f} req/s and "
                f"{at.get('output_throughput', 0.0):,.0f} output tokens/s. Search: "
                f"{self.capacity_clients:.1f} clients ({spread}; each seed bracketed to one client). "
                f"{self.num_simulations} simulations.")
        if self.target_clients:
            text += " " + self._target_text()
        return text

    def _target_text(self) -> str:
        if not self.replicas:
            return f"For {self.target_clients} clients: {self.fleet_note}."
        return (f"For {self.target_clients} clients: {self.replicas} replica{'' if self.replicas == 1 else 's'} "
                f"({self.gpus} GPU{'' if self.gpus == 1 else 's'}, ${self.usd_per_hour:,.2f}/hour), the fleet simulated with every "
                f"client; {self.fleet_note}.")

    def to_dict(self, headline: bool = True) -> dict:
        d = asdict(self)
        d["kind"] = "capacity_clients"
        d["slo"] = self.slo.to_dict()
        d["slo_text"] = str(self.slo)
        if headline:
            d["headline"] = self.headline()
        return d


#: What the CLI and the report say when not even one client meets the SLO.
NO_CLIENTS = "not even one client meets this SLO on one replica"


def no_clients_text(rec: dict) -> str:
    """``NO_CLIENTS`` with what one client missed, from a result record."""
    one = [r for r in rec.get("runs") or [] if r.get("stage") == "search" and r.get("clients") == 1]
    missed = "; ".join(one[0].get("violations") or []) if one else ""
    return f"{NO_CLIENTS} ({rec.get('slo_text')})" + (f": one client missed {missed}" if missed else "")


OnRun = Callable[[ClientRun, int], None]


class _Runner:
    """Runs (and remembers) closed-loop simulations, within a budget."""

    def __init__(self, base: dict, slo: SLO, base_dir, budget: int, requests_per_client: int,
                 hook: Optional[OnRun]) -> None:
        self.base, self.slo, self.base_dir, self.budget = base, slo, base_dir, budget
        self.requests_per_client, self.hook = requests_per_client, hook
        self.order: list[ClientRun] = []
        self._seen: dict[tuple, ClientRun] = {}
        self.scenario: dict = {}

    @property
    def exhausted(self) -> bool:
        return len(self.order) >= self.budget

    def __call__(self, clients: int, seed: int, replicas: int = 1, stage: str = "search") -> ClientRun:
        key = (clients, seed, replicas)
        if key in self._seen:
            return self._seen[key]
        ok, bad, m = clients_run(self.base, (), self.slo, clients, replicas, seed, self.base_dir,
                                 self.requests_per_client, keep_scenario=True)
        self.scenario = m.pop("scenario") or self.scenario
        run = ClientRun(clients, seed, ok, bad, {k: m.get(k) for k in KEPT}, replicas, stage)
        self._seen[key] = run
        self.order.append(run)
        if self.hook:
            self.hook(run, len(self.order))
        return run


def find_client_capacity(config: Union[dict, str, Path, None], slo: SLO, *, seeds: int = 3,
                         start_clients: Optional[int] = None, max_clients: int = MAX_CLIENTS,
                         target_clients: Optional[int] = None, confidence: float = 0.95,
                         max_simulations: int = 200, requests_per_client: int = REQUESTS_PER_CLIENT,
                         prices: Any = None, overrides: Sequence[str] = (),
                         base_dir: Optional[Union[str, Path]] = None,
                         on_run: Optional[OnRun] = None) -> ClientCapacityResult:
    """Search the most closed-loop clients one replica of ``config`` serves inside ``slo``.

    Each seed's search starts at ``start_clients`` (default: the config's
    ``workload.arrival.concurrency``, else 8), doubles or halves until the SLO flips, then
    bisects to adjacent whole numbers; a run sends ``requests_per_client`` requests per client
    (at least 100) and is judged after its first tenth. With ``target_clients``, the fleet is
    then simulated with all of them: from ceil(target / planning clients) replicas up, until
    every seed meets the SLO.
    """
    _check(seeds, start_clients, max_clients, target_clients, max_simulations, requests_per_client)
    extra = list(overrides) + slo.overrides() + ["parallel.num_replicas=1"]
    base = config_mod.build_config(config, extra)
    if (base.get("disaggregation") or {}).get("enabled"):
        raise ConfigError("disaggregation.enabled: kvplan capacity in clients sizes one replica; "
                          "search a P/D deployment by rate (an open-loop arrival process)")
    if base["workload"].get("trace"):
        raise ConfigError("workload.trace: a trace sets its own arrival times; kvplan capacity in "
                          "clients needs a synthetic workload (workload.arrival.process: closed)")
    arrival = base["workload"].get("arrival") or {}
    start = start_clients or (int(arrival["concurrency"]) if arrival.get("process") == "closed"
                              and arrival.get("concurrency") else 8)
    start = min(start, max_clients)
    runner = _Runner(base, slo, base_dir, max_simulations, requests_per_client, on_run)
    first = _search(runner, base["seed"], start, max_clients, grow=2.0)
    searches = [first]
    for i in range(1, seeds):
        if runner.exhausted:
            break
        searches.append(_search(runner, base["seed"] + i, max(1, first.low or 1), max_clients, grow=1.25))
    result = _assemble(base, slo, runner, searches, confidence, max_clients, requests_per_client,
                       price_table(prices))
    if len(searches) < seeds:
        result.notes.append(f"the simulation budget ({max_simulations}) ran out after {len(searches)} of "
                            f"{seeds} seeds")
    if target_clients is not None:
        _size_fleet(result, runner, target_clients)
    result.num_simulations = len(runner.order)
    result.runs = list(runner.order)
    return result


def _search(runner: _Runner, seed: int, start: int, cap: int, grow: float) -> ClientSearch:
    """One seed: grow (or shrink) from ``start`` by ``grow`` until the SLO flips, then bisect."""
    low, high = 0, None
    n = start
    while not runner.exhausted:
        if runner(n, seed).passed:
            low = n
            if n >= cap:
                return ClientSearch(seed, low, None, f"every count up to the cap ({cap}) met the SLO: it "
                                                     f"does not bind (raise --max-clients)")
            if high is not None:
                break
            n = min(cap, max(n + 1, int(math.ceil(n * grow))))
        else:
            high = n
            if n == 1 or low:
                break
            n = max(1, int(n / grow))
    while high is not None and high - low > 1 and not runner.exhausted:
        mid = (low + high) // 2
        if runner(mid, seed).passed:
            low = mid
        else:
            high = mid
    note = ""
    if high is None:
        note = f"the simulation budget ran out while growing past {low} clients"
    elif high - low > 1:
        note = f"bracket {low}-{high}: the simulation budget ran out"
    return ClientSearch(seed, low, high, note)


def client_interval(searches: Sequence[ClientSearch], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high) of the seeds' answers: a Student-t interval (one seed: zero width)."""
    lows = [float(s.low) for s in searches]
    mean = sum(lows) / len(lows)
    if len(lows) < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((x - mean) ** 2 for x in lows) / (len(lows) - 1))
    # Whole-number answers: a spread under one client is what the brackets alone could give.
    sd = max(sd, 0.5 * math.sqrt(len(lows) / (len(lows) - 1)))
    half = _t_quantile(len(lows) - 1, confidence) * sd / math.sqrt(len(lows))
    return mean, max(0.0, mean - half), mean + half


def _assemble(base: dict, slo: SLO, runner: _Runner, searches: list[ClientSearch], confidence: float,
              max_clients: int, requests_per_client: int, table: dict) -> ClientCapacityResult:
    mean, lo, hi = client_interval(searches, confidence)
    planning = min(s.low for s in searches)
    notes = [f"seed {s.seed}: {s.note}" for s in searches if s.note]
    at: dict = {}
    if planning > 0:
        runs = [runner(planning, s.seed) for s in searches]
        if not all(r.passed for r in runs):
            notes.append(f"not every seed meets the SLO with {planning} clients although each met it at its "
                         f"own bracket: pass/fail is noisy there; use more requests per client or seeds")
        at = _average([r.metrics for r in runs])
    unit = unit_of(base, runner.scenario, table)
    tok_gpu = cost = None
    if at.get("output_throughput"):
        tok_gpu = at["output_throughput"] / unit.gpus
        cost = usd_per_million_output_tokens(tok_gpu, unit.usd_per_gpu_hour)
    return ClientCapacityResult(
        config=base, slo=slo, confidence=confidence, max_clients=max_clients,
        requests_per_client=requests_per_client, searches=searches, runs=[], capacity_clients=mean,
        ci_low=lo, ci_high=hi, planning_clients=planning, gpus_per_replica=unit.gpus,
        hardware=unit.hardware, usd_per_gpu_hour=unit.usd_per_gpu_hour, at_planning_clients=at,
        output_tokens_per_s_per_gpu=tok_gpu, usd_per_million_output_tokens=cost, notes=notes, unit=unit)


def _size_fleet(result: ClientCapacityResult, runner: _Runner, target: int) -> None:
    """Replicas for ``target`` clients: divided, then the fleet simulated with every client on
    each searched seed, growing one replica at a time until all seeds meet the SLO. Why
    simulate: the router's spread of clients over replicas is not perfectly even."""
    result.target_clients = target
    if result.planning_clients <= 0:
        result.fleet_note = f"none: {NO_CLIENTS}"
        return
    divided = math.ceil(target / result.planning_clients)
    result.divided_replicas = divided
    seeds = [s.seed for s in result.searches]
    for n in range(divided, divided + MAX_EXTRA_REPLICAS + 1):
        if runner.exhausted:
            result.fleet_note = f"the simulation budget ran out before a fleet of {n} replicas was judged"
            return
        runs = [runner(target, seed, replicas=n, stage="fleet") for seed in seeds]
        if all(r.passed for r in runs):
            result.replicas, result.gpus = n, n * result.gpus_per_replica
            result.usd_per_hour = result.gpus * result.usd_per_gpu_hour
            result.fleet_note = (f"the same as division (ceil({target} / {result.planning_clients}))"
                                 if n == divided else
                                 f"division gives {divided}: the router spreads clients unevenly")
            return
    result.fleet_note = (f"no fleet of {divided}-{divided + MAX_EXTRA_REPLICAS} replicas met the SLO with all "
                         f"{target} clients")


def _average(rows: list[dict]) -> dict:
    keys = [k for k in rows[0] if all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                                      for r in rows)]
    return {k: sum(float(r[k]) for r in rows) / len(rows) for k in keys}


def _check(seeds: int, start: Optional[int], cap: int, target: Optional[int], budget: int, per_client: int) -> None:
    for name, value, least in (("--seeds", seeds, 1), ("--max-clients", cap, 1), ("--max-simulations", budget, 1),
                               ("requests_per_client", per_client, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ConfigError(f"{name}: expected a whole number >= {least}, got {value!r}")
    for name, clients in (("--start-clients", start), ("--target-clients", target)):
        if clients is not None and (not isinstance(clients, int) or isinstance(clients, bool) or clients < 1):
            raise ConfigError(f"{name}: expected a whole number of clients >= 1, got {clients!r}")
