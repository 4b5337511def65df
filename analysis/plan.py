"""``kvplan plan``: the README's question in one command. Which deployment (GPU, TP/PP/EP, weight
and KV quantisation, batch limits, prefix caching, speculative decoding) serves this workload
inside this SLO at the target load, and at what cost?

Why a search of its own and not a sweep: the space is a product of a dozen knobs over several
GPUs, and a full capacity search (``analysis.capacity``) costs tens of simulations per
point. The planner spends simulations where the answer can be:

1. **Candidates** (``candidates``): the product of the knobs each GPU supports, in a fixed order.
2. **Memory** (no simulation): ``resolve_deployment`` runs the memory plan; a candidate whose
   weights and activations do not fit is dropped, with the plan's reason.
3. **Analytic bound** (no simulation, ``bound``): from the step pricer alone, the most requests
   per second one replica could serve (its prefill and decode tokens at the best per-token price
   the batch limits allow) and whether the SLO is reachable at all (a lone decode step over the
   TPOT bound, a lone prefill over the TTFT bound). That gives each candidate a cost floor at the
   target: replicas >= target / bound.
4. **Screen** (rung 1 of successive halving): a short single-seed capacity search of each
   candidate in order of cost floor, in batches of a fixed size; a candidate whose floor is
   already dearer than the cheapest screened estimate is pruned without a simulation.
5. **Plan** (rung 2): the full capacity search, as ``kvplan capacity --target-rate`` runs it
   (seeds and interval, a long confirming run, the fleet simulated at the target), on the
   cheapest screened candidate, then on the next ones while their estimate is below the best
   planned cost (the full search can need more replicas than the screen's division said).
6. **Reopen**: a candidate pruned in 4 against an estimate that the full search then priced
   higher, whose floor is under the best planned cost, is screened after all (and planned if
   its estimate can still win), until none is left: a floor is a bound, an estimate a guess.

The ranking is by $/hour at the target, then $ per million output tokens. The same config,
SLO, target and seed give the same plan for any number of workers (batches have a fixed size
and results are taken in candidate order). Every row says what priced its steps (measured
operator tables, roofline or a profile) and that source's known error on the GPU.
"""

from __future__ import annotations

import itertools
import math
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union, cast

from sim import config as config_mod
from analysis.capacity import RunSizing, find_capacity, worker_pool
from analysis.client_capacity import clients_run
from analysis.pareto import pareto_mask
from analysis.pricing import price_table, usd_per_gpu_hour
from analysis.slo import SLO
from sim.errors import ConfigError, DoesNotFitError, KvplanError

#: Candidates screened side by side, whatever the number of workers (the plan must not depend
#: on it): after each batch the cheapest estimate so far prunes the next.
SCREEN_BATCH = 4
#: The knobs ``--search`` may bound, with what each takes (``name=v1,v2``).
KNOBS = ("tp", "pp", "dp", "ep", "weights", "kv_dtype", "max_num_batched_tokens", "max_num_seqs",
         "prefix_caching", "speculative", "pd", "engine")
#: ``--search full``: every knob over its usual values.
FULL = {"max_num_batched_tokens": ["default", 2048, 8192, 16384], "max_num_seqs": ["default", 256, 1024]}

OnProgress = Callable[[str, int, int, Optional[dict]], None]


@dataclass(frozen=True)
class Candidate:
    """One deployment: a GPU and the config keys (dotted, ``--set`` style) that make it."""

    hardware: str
    keys: tuple[tuple[str, Any], ...]

    @property
    def overrides(self) -> list[str]:
        return [f"hardware={self.hardware}"] + [f"{k}={_yaml(v)}" for k, v in self.keys]

    def label(self) -> str:
        short = {"parallel.tensor_parallel_size": "tp", "parallel.pipeline_parallel_size": "pp",
                 "parallel.enable_expert_parallel": "ep", "parallel.data_parallel_size": "dp",
                 "parallel.expert_parallel_size": "ep_size",
                 "quantization.weights": "w",
                 "kv_cache.dtype": "kv", "scheduler.max_num_batched_tokens": "mnbt",
                 "scheduler.max_num_seqs": "seqs", "kv_cache.prefix_caching": "prefix",
                 "speculative.num_tokens": "spec", "disaggregation.prefill_replicas": "prefill",
                 "disaggregation.decode_replicas": "decode", "engine.name": "engine"}
        keys = [(k, v) for k, v in self.keys if k not in ("disaggregation.enabled", "engine.version")]
        pd = "P/D " if dict(self.keys).get("disaggregation.enabled") else ""
        return pd + " ".join([self.hardware] + [f"{short.get(k, k)}={v}" for k, v in keys])

    def as_dict(self) -> dict:
        return {"hardware": self.hardware, **{k: v for k, v in self.keys}}


@dataclass
class Row:
    """What the plan knows of one candidate, and how far it got."""

    candidate: Candidate
    status: str = "candidate"   # does_not_fit | infeasible | pruned | screened | planned
    reason: str = ""
    gpus_per_replica: Optional[int] = None
    usd_per_gpu_hour: Optional[float] = None
    pricing: Optional[dict] = None
    bound_rate: Optional[float] = None          # the analytic per-replica ceiling, req/s
    cost_floor: Optional[float] = None          # $/hour at the target from the ceiling
    estimate_rate: Optional[float] = None       # the screen's per-replica rate
    estimate_usd_per_hour: Optional[float] = None
    planning_rate: Optional[float] = None       # the full search's per-replica rate
    ci: Optional[tuple[float, float]] = None
    replicas: Optional[int] = None
    gpus: Optional[int] = None
    usd_per_hour: Optional[float] = None
    usd_per_million_output_tokens: Optional[float] = None
    goodput_per_gpu: Optional[float] = None
    output_tokens_per_s_per_gpu: Optional[float] = None
    tokens_per_s_per_user: Optional[float] = None
    p99_ttft_ms: Optional[float] = None
    p99_tpot_ms: Optional[float] = None
    max_clients: Optional[int] = None           # --concurrency: the bound's clients per replica
    clients_per_replica: Optional[int] = None   # --concurrency: the screen's
    meets_slo: Optional[bool] = None
    misses: list[str] = field(default_factory=list)
    simulations: int = 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("candidate")
        return {"label": self.candidate.label(), "config": self.candidate.as_dict(),
                "overrides": self.candidate.overrides, **d}


# --- the space ---------------------------------------------------------------------------------


def default_hardware() -> list[str]:
    """Every catalog GPU the installed measured tables cover (the roofline GPUs are opt-in)."""
    from sim.pricing.table_data import GPU_TABLE_DIRS, default_tables_root

    root = default_tables_root()
    return [hw for hw, sub in GPU_TABLE_DIRS.items() if root is not None and (root / sub).is_dir()]


def parse_search(items: Sequence[str]) -> dict[str, list]:
    """``--search tp=1,2,4 --search weights=none,fp8`` (or ``full``) -> knob values."""
    out: dict[str, list] = {}
    for item in items:
        for part in [p for p in item.split(";") if p.strip()]:
            part = part.strip()
            if part == "full":
                out.update({k: list(v) for k, v in FULL.items() if k not in out})
                continue
            if "=" not in part:
                raise ConfigError(f"--search {part!r}: expected knob=v1,v2 (knobs: {', '.join(KNOBS)}) or full")
            name, _, values = part.partition("=")
            name = name.strip()
            if name not in KNOBS:
                raise ConfigError(f"--search {name}: unknown knob; one of {', '.join(KNOBS)}")
            vals = [_parse_value(v.strip()) if name != "pd" else _pd_text(v) for v in values.split(",") if v.strip()]
            if not vals:
                raise ConfigError(f"--search {name}: give at least one value")
            if name in out and set(map(str, out[name])) != set(map(str, vals)):
                raise ConfigError(f"--search {name}: given twice with different values "
                                  f"({_join(out[name])} and {_join(vals)})")
            out[name] = vals
    for name in ("tp", "pp", "dp"):
        for v in out.get(name, []):
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"--search {name}={v}: expected whole numbers >= 1")
    for v in out.get("ep", []):
        if not isinstance(v, bool) and not (isinstance(v, int) and v >= 2):
            raise ConfigError(f"--search ep={v}: expected on, off or a number of expert groups >= 2 "
                              f"(SGLang's MoE TP x EP)")
    for v in out.get("pd", []):
        if v != "off" and v is not False and not _pd_split(v):
            raise ConfigError(f"--search pd={v}: expected off or prefill:decode instances per group, e.g. 1:2")
    from sim.catalog.engines import ENGINE_NAMES

    for v in out.get("engine", []):
        if v not in ENGINE_NAMES:
            raise ConfigError(f"--search engine={v}: expected one of {', '.join(ENGINE_NAMES)}")
    return out


def candidates(base: dict, hardware: Sequence[str], search: Mapping[str, list], max_gpus: Optional[int]
               ) -> Iterator[Candidate]:
    """The product of the knobs each GPU supports, in a fixed order. Unset knobs take what the
    base config says (batch limits: the engine's defaults), except: TP over 1..8 (to the node),
    weights over none / fp8 / nvfp4 where the GPU has the tensor cores (the base's own format
    instead if it is quantised), the KV cache over auto / fp8 where FP8 is supported, expert
    parallelism on and off for a mixture of experts (``ep`` may also give numbers of expert
    groups: SGLang's MoE TP x EP, where they divide the GPUs), prefix caching on and off when the workload
    shares prefixes (``workload.prefix`` here; ``plan`` adds the knob for a trace's hash ids or
    conversations, ``shares_prefixes``), and speculative decoding on and off when the config gives an acceptance
    model."""
    from sim.catalog.engines import DEFAULT_VERSIONS
    from sim.catalog.hardware import get_hardware
    from sim.catalog.models import get_model

    model = get_model(base["model"])
    w = base.get("workload") or {}
    base_weights = (base.get("quantization") or {}).get("weights", "none")
    spec_k = (base.get("speculative") or {}).get("num_tokens", 0) or 0
    base_engine = (base.get("engine") or {}).get("name", "vllm")
    for hw_name in hardware:
        hw = get_hardware(hw_name)
        tps = search.get("tp") or [t for t in (1, 2, 4, 8) if t <= hw.gpus_per_node]
        pps = search.get("pp") or [1]
        dps = search.get("dp") or [1]
        if "weights" in search:
            weights = search["weights"]
        elif base_weights != "none":
            weights = [base_weights]
        else:
            weights = ["none"] + (["fp8"] if hw.supports("fp8") else []) + (["nvfp4"] if hw.supports("fp4") else [])
        kv = search.get("kv_dtype") or (["auto", "fp8"] if hw.supports("fp8") else ["auto"])
        eps = search.get("ep") or ([False, True] if model.is_moe else [False])
        mnbts = search.get("max_num_batched_tokens") or ["default"]
        seqs = search.get("max_num_seqs") or ["default"]
        prefixes = search.get("prefix_caching") or ([True, False] if w.get("prefix") else [None])
        specs = search.get("speculative") or ([0, spec_k] if spec_k else [None])
        pds = search.get("pd") or ["off"]
        engines = search.get("engine") or [None]
        for tp, pp, dp, wq, kvd, ep, mnbt, ns, pre, sp, pd, eng in itertools.product(
                tps, pps, dps, weights, kv, eps, mnbts, seqs, prefixes, specs, pds, engines):
            if max_gpus is not None and tp * pp * dp > max_gpus:
                continue
            if dp > 1 and not (model.is_moe and ep):
                continue  # attention DP is vLLM's layout for experts spread over the DP ranks
            if ep is True and tp * dp == 1:
                continue  # experts over one GPU: the same as no expert parallelism
            if _moe_tp_x_ep(ep) and not ((eng or base_engine) == "sglang"
                                         and 1 < ep < tp * dp and (tp * dp) % ep == 0):
                continue  # MoE TP x EP (experts over ep groups, split within each): SGLang's
            if eng == "sglang" and (pre is False or _pd_split(pd)):
                continue  # SGLang's radix cache is always on; P/D is searched for vLLM only
            keys: list[tuple[str, Any]] = []
            if eng is not None:
                keys.append(("engine.name", eng))
                if eng != base_engine:  # the base's release is the other engine's
                    keys.append(("engine.version", DEFAULT_VERSIONS[eng]))
            keys.append(("parallel.tensor_parallel_size", tp))
            if pp != 1:
                keys.append(("parallel.pipeline_parallel_size", pp))
            if dp != 1:
                keys.append(("parallel.data_parallel_size", dp))
            if model.is_moe:
                keys.append(("parallel.enable_expert_parallel", bool(ep)))
                if _moe_tp_x_ep(ep):
                    keys.append(("parallel.expert_parallel_size", ep))
            keys.append(("quantization.weights", wq))
            keys.append(("kv_cache.dtype", kvd))
            if mnbt != "default":
                keys.append(("scheduler.max_num_batched_tokens", mnbt))
            if ns != "default":
                keys.append(("scheduler.max_num_seqs", ns))
            if pre is not None and eng != "sglang":
                keys.append(("kv_cache.prefix_caching", bool(pre)))
            if sp is not None:
                keys.append(("speculative.num_tokens", sp))
            split = _pd_split(pd)
            if split:
                keys += [("disaggregation.enabled", True), ("disaggregation.prefill_replicas", split[0]),
                         ("disaggregation.decode_replicas", split[1])]
            yield Candidate(hw_name, tuple(keys))


def _moe_tp_x_ep(ep: Any) -> bool:
    """Whether an ``ep`` knob value is a number of expert groups (SGLang's ``--ep-size``, MoE
    TP x EP), not on / off."""
    return isinstance(ep, int) and not isinstance(ep, bool)


def _pd_text(value: str) -> str:
    v = value.strip().lower()
    return "off" if v in ("off", "false", "no", "none", "collocated") else v


def _pd_split(value: Any) -> Optional[tuple[int, int]]:
    """``"1:2"`` -> (1, 2): prefill and decode instances of one P/D group; None for off."""
    text = str(value).strip()
    if ":" not in text:
        return None
    a, _, b = text.partition(":")
    try:
        p, d = int(a), int(b)
    except ValueError:
        return None
    return (p, d) if p >= 1 and d >= 1 else None


# --- the bound -----------------------------------------------------------------------------------


def bound(row: Row, base: dict, slo: SLO, target: Optional[float], prices: Mapping[str, float],
          concurrency: Optional[int] = None, lengths: Optional[tuple[float, float]] = None) -> None:
    """Fill ``row``'s memory check, pricing provenance, analytic ceiling and cost floor (no
    simulation). The ceiling: a step computes at most ``max_num_batched_tokens`` tokens, and no
    step computes them faster than a step of prompt chunks alone at that budget (decode tokens
    also read their context); a request needs its uncached prompt tokens and its output tokens
    computed. So one replica serves at most budget / (that step's time x tokens per request)
    requests per second, whatever the scheduler does; the screen's simulations say how much
    less. ``lengths``: the workload's mean prompt and output tokens (``mean_lengths``; computed
    here when not given, once per plan otherwise: no candidate changes the workload)."""
    from sim.api import cost_model_summary, resolve_deployment
    from sim.policies.step import StepShape

    try:
        cfg = config_mod.build_config(base, row.candidate.overrides)
        dep = resolve_deployment(cfg)
    except DoesNotFitError as exc:
        row.status, row.reason = "does_not_fit", str(exc)
        return
    except KvplanError as exc:
        row.status, row.reason = "infeasible", str(exc)
        return
    from sim.scenario import Scenario

    sc = Scenario.from_dict(cfg)
    if concurrency is not None and sc.disaggregation.enabled:
        row.status = "infeasible"
        row.reason = "closed-loop clients are not simulated with P/D groups yet (plan them for a --target-rate)"
        return
    # One unit of the fleet: a replica, or a P/D group (its prefill and decode instances).
    instances = (sc.disaggregation.prefill_replicas + sc.disaggregation.decode_replicas
                 if sc.disaggregation.enabled else 1)
    row.gpus_per_replica = dep.num_gpus_per_replica * instances
    row.usd_per_gpu_hour = usd_per_gpu_hour(row.candidate.hardware, dict(prices))
    cm = cost_model_summary(dep)
    row.pricing = {"source": _pricing_kind(cm["source"]), "cost_model": cm["source"],
                   "known_error": cm.get("known_error"), "description": cm.get("description")}
    p, o = lengths if lengths is not None else mean_lengths(cfg)
    price = dep.cost_model.price
    budget = int(sc.max_num_batched_tokens or 8192)
    prompt = max(1, int(round(p)))
    seqs = max(1, budget // prompt)
    full = price(StepShape(num_prefill_tokens=seqs * prompt, num_prefill_seqs=seqs,
                           prefill_attention_work=seqs * prompt * (prompt + 1) // 2))
    shared = _shared_prefix_tokens(sc)
    tokens = max(1.0, p - shared) + o
    row.bound_rate = instances * seqs * prompt / (full * tokens) if full > 0 else math.inf
    prefill = price(StepShape(num_prefill_tokens=prompt, num_prefill_seqs=1,
                              prefill_attention_work=prompt * (prompt + 1) // 2))
    decode_1 = price(StepShape(num_decode_seqs=1, decode_context_tokens=int(p + o / 2)))
    if slo.tpot_ms is not None and 1000 * decode_1 > slo.tpot_ms:
        row.status = "infeasible"
        row.reason = (f"one decode step alone takes {1000 * decode_1:.1f} ms, over the TPOT bound "
                      f"{slo.tpot_ms:g} ms")
        return
    if slo.ttft_ms is not None and 1000 * prefill > slo.ttft_ms and not shared:
        row.status = "infeasible"
        row.reason = (f"the mean prompt's prefill alone takes {1000 * prefill:.0f} ms, over the TTFT "
                      f"bound {slo.ttft_ms:g} ms")
        return
    if concurrency is None:
        # without clients the target rate is given; the ceiling was set above
        floor_replicas = max(1, math.ceil(cast(float, target) / cast(float, row.bound_rate) - 1e-9))
    else:
        # Clients one replica can hold: its batch limit, its KV pool at the mean request's
        # length, and (with a TPOT bound) the largest batch whose decode step alone stays under it.
        seqs_cap = int(sc.max_num_seqs or 256)
        kv_cap = max(1, int(dep.memory.num_kv_slots // max(1.0, p + o / 2)))
        cap = min(seqs_cap, kv_cap, concurrency)
        if slo.tpot_ms is not None:
            ctx = int(p + o / 2)
            lo, hi = 1, cap
            while lo < hi:  # the largest batch whose decode step is within the bound
                mid = (lo + hi + 1) // 2
                if 1000 * price(StepShape(num_decode_seqs=mid, decode_context_tokens=mid * ctx)) <= slo.tpot_ms:
                    lo = mid
                else:
                    hi = mid - 1
            cap = lo
        row.max_clients = cap
        floor_replicas = max(1, math.ceil(concurrency / cap))
    row.cost_floor = floor_replicas * row.gpus_per_replica * row.usd_per_gpu_hour
    row.status = "bounded"


def _pricing_kind(source: str) -> str:
    return {"operator_tables": "measured", "roofline": "roofline", "profile": "profile"}.get(source, source)


def _shared_prefix_tokens(sc) -> float:
    """Prompt tokens a request may find cached (the workload's shared prefix), 0 without prefix
    caching (``Scenario.caches_prefixes``: ``auto`` is the engine's default) or a prefix."""
    if not sc.caches_prefixes:
        return 0.0
    prefix = sc.workload.get("prefix") or {}
    return float(prefix.get("length") or 0.0)


def workload_sample(cfg: dict) -> list:
    """The workload's first 400 requests (all of a trace read, the first kept)."""
    from sim.api import build_workload

    small = config_mod.build_config(cfg, ["workload.num_requests=400"]) \
        if "trace" not in (cfg.get("workload") or {}) else cfg
    reqs = build_workload(small)[:400]
    if not reqs:
        raise ConfigError("workload: no requests to plan for")
    return reqs


def mean_lengths(cfg: dict, sample: Optional[list] = None) -> tuple[float, float]:
    """Mean prompt and output tokens of the workload (a sample of its first requests)."""
    reqs = sample if sample is not None else workload_sample(cfg)
    return (sum(r.prompt_len for r in reqs) / len(reqs), sum(r.max_output_tokens for r in reqs) / len(reqs))


def shares_prefixes(sample: list) -> bool:
    """Whether the sampled prompts repeat prefixes (a trace's hash ids, conversations' history,
    ``workload.prefix``) often enough that prefix caching is worth trying on and off: the
    share ``simulate`` warns at when a run leaves it out."""
    from sim.api import PREFIX_REUSE_WARN
    from sim.workload.summary import prefix_reuse_fraction

    return (prefix_reuse_fraction(sample) or 0.0) >= PREFIX_REUSE_WARN


#: The headline's words for what priced the best row's steps (``Row.pricing["source"]``).
PRICED_BY = {"measured": "the measured operator tables", "roofline": "the roofline", "profile": "a fitted profile"}


# --- the rungs -----------------------------------------------------------------------------------


def _screen(args: tuple) -> tuple[dict, int]:
    """Rung 1 for one candidate (a process-pool or Ray task): ``("rate", ...)`` a short
    single-seed capacity search, ``("clients", ...)`` the most clients one replica holds. A user
    error of this candidate's config is its verdict, not the plan's."""
    try:
        return (_screen_rate if args[0] == "rate" else _bisect_clients)(args[1:])
    except KvplanError as exc:
        return {"error": str(exc)}, 0


def _screen_rate(args: tuple) -> tuple[dict, int]:
    base, overrides, slo, start, base_dir, screen_s = args
    res = find_capacity(base, slo, seeds=1, ci_target=0, rel_tol=0.1, start_rate=start,
                        sizing=RunSizing(duration_s=screen_s, confirm_s=0.0), overrides=overrides,
                        base_dir=base_dir, workers=1, fleet="divide", max_simulations=40)
    return _outcome(res), res.num_simulations


def _outcome(res) -> dict:
    at = res.at_planning_rate or {}
    tpot = at.get("median_tpot_ms")
    return {"rate": res.planning_rate, "ci": (res.ci_low, res.ci_high),
            "output_tokens_per_s_per_gpu": res.output_tokens_per_s_per_gpu,
            "usd_per_million_output_tokens": res.usd_per_million_output_tokens,
            "tokens_per_s_per_user": (1000.0 / tpot) if tpot else None,
            "p99_ttft_ms": at.get("p99_ttft_ms"), "p99_tpot_ms": at.get("p99_tpot_ms"),
            "goodput": res.goodput, "replicas": res.replicas, "gpus": res.gpus,
            "usd_per_hour": res.usd_per_hour, "confirmed": res.confirmed,
            "misses": sorted({v for e in res.evaluations if not e.passed for v in e.violations})[:3]}


@dataclass
class PlanResult:
    slo: SLO
    target_rate: Optional[float]
    hardware: list[str]
    search: dict
    rows: list[Row]
    num_simulations: int
    wall_s: float
    base_config: dict
    prices: dict
    notes: list[str] = field(default_factory=list)
    concurrency: Optional[int] = None

    @property
    def load_text(self) -> str:
        return f"{self.concurrency} concurrent clients" if self.concurrency else f"{self.target_rate:g} req/s"

    @property
    def ranked(self) -> list[Row]:
        ok = [r for r in self.rows if r.status == "planned" and r.meets_slo]
        return sorted(ok, key=lambda r: (r.usd_per_hour, r.usd_per_million_output_tokens or math.inf, r.candidate.label()))

    @property
    def best(self) -> Optional[Row]:
        ranked = self.ranked
        return ranked[0] if ranked else None

    def frontier(self) -> list[dict]:
        """Output tok/s per GPU against tok/s per user over every simulated candidate."""
        pts = [r for r in self.rows if r.status in ("screened", "planned") and r.output_tokens_per_s_per_gpu
               and r.tokens_per_s_per_user]
        mask = pareto_mask([r.output_tokens_per_s_per_gpu for r in pts], [r.tokens_per_s_per_user for r in pts])
        front = [r for r, m in zip(pts, mask) if m]
        return [{"label": r.candidate.label(), "output_tokens_per_s_per_gpu": r.output_tokens_per_s_per_gpu,
                 "tokens_per_s_per_user": r.tokens_per_s_per_user, "status": r.status}
                for r in sorted(front, key=lambda r: cast(float, r.output_tokens_per_s_per_gpu))]  # set: see pts

    def headline(self) -> str:
        b = self.best
        counts = _counts(self.rows)
        tried = (f"{len(self.rows)} candidates on {', '.join(self.hardware)}: {counts}; "
                 f"{self.num_simulations} simulations, {self.wall_s:.0f} s")
        if b is None:
            return (f"No deployment meets {self.slo} at {self.load_text} ({tried}). "
                    f"The closest misses are listed.")
        source = cast(dict, b.pricing)["source"]  # priced when bounded
        return (f"Cheapest deployment for {self.load_text} inside {self.slo}: {b.candidate.label()}, "
                f"{b.replicas} replica{'s' if b.replicas != 1 else ''} x {b.gpus_per_replica} GPU = {b.gpus} GPUs, "
                f"${b.usd_per_hour:.2f}/hour, ${_num(b.usd_per_million_output_tokens)} per million output "
                f"tokens (steps priced by {PRICED_BY.get(source, source)}). {tried}.")

    def closest_misses(self, n: int = 5) -> list[Row]:
        simulated = [r for r in self.rows if r.status in ("screened", "planned")]
        return sorted(simulated, key=lambda r: (r.estimate_rate or r.planning_rate or 0.0), reverse=True)[:n]

    def to_dict(self) -> dict:
        best = self.best
        return {"kind": "plan", "headline": self.headline(), "slo": self.slo.to_dict(), "slo_text": str(self.slo),
                "target_rate": self.target_rate, "concurrency": self.concurrency, "hardware": self.hardware, "search": self.search,
                "prices": self.prices, "num_simulations": self.num_simulations, "wall_s": round(self.wall_s, 2),
                "best": best.to_dict() if best else None,
                "ranked": [r.to_dict() for r in self.ranked],
                "rows": [r.to_dict() for r in self.rows],
                "frontier": self.frontier(),
                "closest_misses": [r.to_dict() for r in self.closest_misses()] if best is None else [],
                "config": self.base_config, "notes": self.notes}


def plan(config: Union[dict, str, Path, None], slo: SLO, target_rate: Optional[float] = None, *,
         concurrency: Optional[int] = None,
         hardware: Optional[Sequence[str]] = None, max_gpus: Optional[int] = None,
         prices: Union[None, dict, Sequence[str]] = None, search: Union[None, Mapping[str, list], Sequence[str]] = None,
         overrides: Sequence[str] = (), base_dir=None, workers: int = 0, backend: str = "local",
         on_progress: Optional[OnProgress] = None, screen_s: float = 30.0,
         full_search: Optional[Mapping[str, Any]] = None) -> PlanResult:
    """Rank the deployments that serve ``target_rate`` req/s of ``config``'s workload inside
    ``slo`` by cost (see the module docstring for the search). ``screen_s``: seconds of arrivals
    per screening run; ``full_search``: keyword arguments of ``find_capacity`` for the finalists
    (default: ``kvplan capacity``'s own, so that its answer for the top row is the plan's)."""
    t0 = time.perf_counter()
    if (target_rate is None) == (concurrency is None):
        raise ConfigError("plan: give the load as --target-rate R (requests/s) or --concurrency N (clients), one of them")
    if concurrency is not None and not (isinstance(concurrency, int) and concurrency >= 1):
        raise ConfigError(f"--concurrency: expected a whole number of clients >= 1, got {concurrency!r}")
    if target_rate is not None and not (isinstance(target_rate, (int, float)) and math.isfinite(target_rate)
                                        and target_rate > 0):
        raise ConfigError(f"--target-rate: expected a positive number of requests/s, got {target_rate!r}")
    if max_gpus is not None and max_gpus < 1:
        raise ConfigError(f"--max-gpus: expected >= 1, got {max_gpus}")
    if backend not in ("local", "ray"):
        raise ConfigError(f"--backend: expected local or ray, got {backend!r}")
    base = config_mod.build_config(config, list(overrides))
    if target_rate is not None and (base["workload"].get("arrival") or {}).get("process") == "closed":
        raise ConfigError("workload.arrival.process: --target-rate sizes a fleet for a request rate; use an "
                          "open-loop arrival process, or plan for clients with --concurrency")
    table = price_table(prices)
    hw_list = _check_hardware(hardware if hardware else default_hardware(), table)
    knobs = {} if search is None else dict(search) if isinstance(search, Mapping) else parse_search(search)
    sample = workload_sample(base)
    if "prefix_caching" not in knobs and shares_prefixes(sample):  # a trace's or conversations' reuse
        knobs["prefix_caching"] = [True, False]
    rows = [Row(c) for c in candidates(base, hw_list, knobs, max_gpus)]
    if not rows:
        raise ConfigError("plan: no candidate deployment in the search space (check --max-gpus and --search)")
    sims = 0

    def progress(stage: str, done: int, total: int, best: Optional[Row]) -> None:
        if on_progress is not None:
            on_progress(stage, done, total, best.to_dict() if best else None)

    lengths = mean_lengths(base, sample)
    for i, row in enumerate(rows):
        bound(row, base, slo, target_rate, table, concurrency, lengths)
        progress("bound", i + 1, len(rows), None)
    live = sorted((r for r in rows if r.status == "bounded"), key=lambda r: (r.cost_floor, r.candidate.label()))
    if all(r.status == "does_not_fit" for r in rows):
        raise ConfigError(f"model {base['model']}: fits no GPU in the search ({', '.join(hw_list)}, "
                          f"TP up to {max(r.candidate.as_dict()['parallel.tensor_parallel_size'] for r in rows)}): "
                          f"{rows[-1].reason}")
    # Rung 1: screen in fixed-size batches, cheapest floor first; rung 2: the full search on
    # the cheapest estimates. An estimate is a short single-seed run and the full search can
    # price a candidate above it, so a candidate pruned against an estimate is reopened (screened,
    # then searched if its estimate can still win) while its floor is under the best planned
    # cost: what stays pruned is pruned by a deployment searched in full, a sound bound.
    best_estimate = math.inf
    best_cost = math.inf
    screened = reopened_total = 0
    with _mapper(workers, backend) as run_map:

        def screen(batch_rows: list[Row], bar: Callable[[], float]) -> None:
            """Screen ``batch_rows`` in order, pruning each whose floor is at or above ``bar()``
            (their reason is written once the plan's best is known, below)."""
            nonlocal sims, screened, best_estimate
            for start in range(0, len(batch_rows), SCREEN_BATCH):
                todo = []
                for r in batch_rows[start:start + SCREEN_BATCH]:
                    if cast(float, r.cost_floor) >= bar():  # at best a tie with what is already priced
                        r.status = "pruned"
                    else:
                        todo.append(r)
                if concurrency is None:
                    # a bounded row has its ceiling
                    args: list[tuple] = [("rate", base, r.candidate.overrides, slo, _start(cast(float, r.bound_rate)),
                                          base_dir, screen_s) for r in todo]
                else:
                    args = [("clients", base, r.candidate.overrides, slo, min(concurrency, r.max_clients or concurrency),
                             base_dir) for r in todo]
                for r, (out, n) in zip(todo, run_map(_screen, args)):
                    sims += n
                    r.simulations += n
                    if "error" in out:
                        r.status, r.reason = "infeasible", out["error"]
                    elif concurrency is None:
                        _apply_screen(r, out, cast(float, target_rate))  # set without clients
                    else:
                        _apply_client_screen(r, out, concurrency)
                    screened += 1
                    if r.estimate_usd_per_hour is not None:
                        best_estimate = min(best_estimate, r.estimate_usd_per_hour)
                progress("screen", min(start + SCREEN_BATCH, len(batch_rows)), len(batch_rows),
                         _cheapest(live, "estimate_usd_per_hour"))

        screen(live, lambda: best_estimate)
        while True:
            # cheapest estimate first; at equal cost the one with the most headroom (its rate)
            finalists = sorted((r for r in live if r.status == "screened" and r.estimate_usd_per_hour is not None),
                               key=lambda r: (r.estimate_usd_per_hour, -(r.estimate_rate or 0.0), r.candidate.label()))
            for k, r in enumerate(finalists):
                # Branch and bound on the estimates: the next can only win if it is estimated cheaper
                # than the best planned cost (an estimate equal to it can at best tie).
                if cast(float, r.estimate_usd_per_hour) >= best_cost:  # set: see finalists
                    break
                if concurrency is None:
                    res = find_capacity(base, slo, target_rate=target_rate, overrides=r.candidate.overrides,
                                        prices=table, base_dir=base_dir, workers=workers, **dict(full_search or {}))
                    n = res.num_simulations
                    _apply_full(r, res)
                else:
                    n = _full_clients(r, base, slo, concurrency, base_dir)
                sims += n
                r.simulations += n
                if r.meets_slo and r.usd_per_hour is not None:
                    best_cost = min(best_cost, r.usd_per_hour)
                progress("plan", k + 1, len(finalists), _cheapest(live, "usd_per_hour", planned=True))
            reopened = [r for r in live if r.status == "pruned" and cast(float, r.cost_floor) < best_cost]
            if not reopened:
                break
            reopened_total += len(reopened)
            screen(reopened, lambda: best_cost)
    for r in live:  # every floor still pruned is at or above the plan's best: say so
        if r.status == "pruned":
            r.reason = (f"cost floor ${r.cost_floor:.2f}/h is not under ${best_cost:.2f}/h, the cheapest "
                        f"deployment searched in full")
    result = PlanResult(slo, None if target_rate is None else float(target_rate), list(hw_list), {k: list(v) for k, v in knobs.items()}, rows,
                        sims, time.perf_counter() - t0, base, table)
    result.concurrency = concurrency
    result.notes.append(f"screened {screened} of {len(live)} candidates that fit and can meet the SLO; "
                        f"{sum(r.status == 'planned' for r in rows)} searched in full"
                        + (f"; {reopened_total} pruned against a screen's estimate were reopened when the full "
                           f"search priced above it" if reopened_total else ""))
    return result


# --- --concurrency: clients instead of a rate -------------------------------------------------

def _bisect_clients(args: tuple) -> tuple[dict, int]:
    """The most clients one replica holds inside the SLO, by bisection between 1 and the
    bound's ceiling."""
    base, overrides, slo, hi, base_dir = args
    sims, best, best_m, misses = 0, 0, None, []
    lo_c, hi_c = 1, max(1, int(hi))
    while lo_c <= hi_c:
        mid = (lo_c + hi_c) // 2
        ok, bad, m = clients_run(base, overrides, slo, mid, 1, 0, base_dir)
        sims += 1
        if ok:
            best, best_m, lo_c = mid, m, mid + 1
        else:
            misses, hi_c = bad, mid - 1
    return {"clients": best, "metrics": best_m, "misses": misses[:3]}, sims


def _apply_client_screen(r: Row, out: dict, concurrency: int) -> None:
    r.status = "screened"
    r.clients_per_replica = out["clients"]
    m = out["metrics"]
    if not out["clients"] or m is None:
        r.reason = "one client alone misses the SLO: " + "; ".join(out["misses"])
        r.misses = out["misses"]
        return
    replicas = math.ceil(concurrency / out["clients"])
    r.estimate_rate = m["request_throughput"]
    r.estimate_usd_per_hour = replicas * r.gpus_per_replica * r.usd_per_gpu_hour
    _client_metrics(r, m)


def _client_metrics(r: Row, m: dict) -> None:
    tpot = m.get("median_tpot_ms")
    r.tokens_per_s_per_user = 1000.0 / tpot if tpot else None
    r.p99_ttft_ms, r.p99_tpot_ms = m.get("p99_ttft_ms"), m.get("p99_tpot_ms")


def _full_clients(r: Row, base: dict, slo: SLO, concurrency: int, base_dir, seeds: int = 2,
                  most_extra: int = 3) -> int:
    """Rung 2 in client mode: the whole fleet simulated with every client, on ``seeds`` seeds,
    from the screen's replica count up until every seed meets the SLO."""
    sims = 0
    replicas = math.ceil(concurrency / max(1, r.clients_per_replica or 1))
    for extra in range(most_extra + 1):
        n = replicas + extra
        runs = [clients_run(base, r.candidate.overrides, slo, concurrency, n, seed, base_dir) for seed in range(seeds)]
        sims += len(runs)
        if all(ok for ok, _, _ in runs):
            m = runs[0][2]
            r.status, r.meets_slo, r.replicas = "planned", True, n
            # a screened row knows its replica's GPUs and their price
            r.gpus = n * cast(int, r.gpus_per_replica)
            r.usd_per_hour = r.gpus * cast(float, r.usd_per_gpu_hour)
            r.planning_rate = sum(x[2]["request_throughput"] for x in runs) / len(runs)
            r.goodput_per_gpu = r.planning_rate / r.gpus
            out_tok = sum(x[2]["output_throughput"] for x in runs) / len(runs)
            r.output_tokens_per_s_per_gpu = out_tok / r.gpus
            r.usd_per_million_output_tokens = (r.usd_per_hour / (out_tok * 3600.0) * 1e6) if out_tok else None
            _client_metrics(r, m)
            r.p99_ttft_ms = max(x[2]["p99_ttft_ms"] or 0.0 for x in runs)
            r.p99_tpot_ms = max(x[2]["p99_tpot_ms"] or 0.0 for x in runs)
            return sims
        r.misses = sorted({b for ok, bad, _ in runs for b in bad})[:3]
    r.status, r.meets_slo = "planned", False
    r.reason = (f"the fleet of {replicas}-{replicas + most_extra} replicas with all {concurrency} clients "
                f"missed the SLO: " + "; ".join(r.misses))
    return sims


def _start(bound_rate: float) -> float:
    """Where a candidate's screen starts: half its analytic ceiling (the search brackets from
    there), rounded to 3 significant digits so that the runs are the same on every machine."""
    x = max(0.05, 0.5 * bound_rate) if math.isfinite(bound_rate) else 1.0
    return float(f"{x:.3g}")


def _apply_screen(r: Row, out: dict, target: float) -> None:
    r.status = "screened"
    r.estimate_rate = out["rate"]
    r.output_tokens_per_s_per_gpu = out["output_tokens_per_s_per_gpu"]
    r.tokens_per_s_per_user = out["tokens_per_s_per_user"]
    r.usd_per_million_output_tokens = out["usd_per_million_output_tokens"]
    r.p99_ttft_ms, r.p99_tpot_ms = out["p99_ttft_ms"], out["p99_tpot_ms"]
    if out["rate"] and out["rate"] > 0:
        replicas = max(1, math.ceil(target / out["rate"] - 1e-9))
        r.estimate_usd_per_hour = replicas * r.gpus_per_replica * r.usd_per_gpu_hour
    else:
        r.reason = "no rate met the SLO in the screen: " + "; ".join(out["misses"])
        r.misses = out["misses"]


def _apply_full(r: Row, res) -> None:
    out = _outcome(res)
    r.status = "planned"
    r.planning_rate, r.ci = out["rate"], out["ci"]
    r.replicas, r.gpus, r.usd_per_hour = out["replicas"], out["gpus"], out["usd_per_hour"]
    r.usd_per_million_output_tokens = out["usd_per_million_output_tokens"]
    r.output_tokens_per_s_per_gpu = out["output_tokens_per_s_per_gpu"]
    r.tokens_per_s_per_user = out["tokens_per_s_per_user"] or r.tokens_per_s_per_user
    r.p99_ttft_ms, r.p99_tpot_ms = out["p99_ttft_ms"], out["p99_tpot_ms"]
    r.goodput_per_gpu = (out["goodput"] / r.gpus_per_replica) if out["goodput"] else None
    r.meets_slo = bool(out["rate"] and out["rate"] > 0 and r.replicas)
    if not r.meets_slo:
        r.reason = "the full search found no rate inside the SLO: " + "; ".join(out["misses"])
        r.misses = out["misses"]
    elif out["confirmed"] is False:
        r.reason = "the long confirming run missed the SLO at the search's rate; planned at the lower rate it met"


def _cheapest(rows: Iterable[Row], attr: str, planned: bool = False) -> Optional[Row]:
    vals = [r for r in rows if getattr(r, attr) is not None and (not planned or r.meets_slo)]
    return min(vals, key=lambda r: getattr(r, attr)) if vals else None


def _counts(rows: Sequence[Row]) -> str:
    order = ("planned", "screened", "pruned", "does_not_fit", "infeasible")
    c = {s: sum(r.status == s for r in rows) for s in order}
    words = {"planned": "searched in full", "screened": "screened", "pruned": "pruned by the bound",
             "does_not_fit": "do not fit", "infeasible": "cannot meet the SLO"}
    return ", ".join(f"{c[s]} {words[s]}" for s in order if c[s])


def _check_hardware(names: Sequence[str], prices: Mapping[str, float]) -> list[str]:
    from sim.catalog.hardware import get_hardware

    out = []
    for n in names:
        try:
            hw = get_hardware(n)
        except ConfigError as exc:
            raise ConfigError(f"--hardware {n}: {str(exc).split(': ', 1)[-1]}") from None
        if hw.name not in prices:
            raise ConfigError(f"--price: no $/GPU-hour for {hw.name}; give --price {hw.name}=<usd>")
        if hw.name not in out:
            out.append(hw.name)
    if not out:
        raise ConfigError("--hardware: no GPU to plan on (no measured tables installed: name GPUs with --hardware)")
    return out


@contextmanager
def _mapper(workers: int, backend: str) -> Iterator[Callable[[Callable, Sequence], list]]:
    """``map`` over capacity's worker pool (``workers`` as ``kvplan capacity`` reads them), Ray
    (``backend='ray'``) or in process; the results come back in the order of the arguments, so
    the plan is the same for any of them."""
    if backend == "ray":
        try:
            import ray
        except ImportError:
            raise ConfigError("--backend ray: ray is not installed (pip install 'kvplan[ray]')") from None
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)

        def run(fn: Callable, args: Sequence) -> list:
            task = ray.remote(fn)
            return ray.get([task.remote(a) for a in args])

        yield run
        return
    with worker_pool(workers, SCREEN_BATCH) as pool:
        if pool is None:
            yield lambda fn, args: [fn(a) for a in args]
        else:
            yield lambda fn, args: [p.get() for p in [pool.apply_async(fn, (a,)) for a in args]]


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "on", "yes"):
        return True
    if low in ("false", "off", "no"):
        return False
    try:
        return int(text)
    except ValueError:
        return text


def _yaml(v: Any) -> str:
    return "true" if v is True else "false" if v is False else str(v)


def _join(vals: Sequence[Any]) -> str:
    return ",".join(map(str, vals))


def _num(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.3g}"


__all__ = ["Candidate", "PlanResult", "Row", "bound", "candidates", "default_hardware", "parse_search", "plan"]
