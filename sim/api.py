"""Run a scenario end to end: config -> workload -> replicas -> simpy -> metrics.

``simulate`` is the one entry point the CLI, the dashboard, capacity search and A/B experiments
share; it returns a ``SimResult`` that can be written to a folder (summary.json, requests.csv,
steps.csv) or inspected in memory. The parts a run is built from live in ``sim.run_parts`` and
the result in ``sim.results`` (shared with ``sim.disaggregation`` and ``sim.streaming``, which
this module imports and which import it not); their public names are re-exported here.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from sim.disaggregation import simulate_disaggregated
from sim.errors import ConfigError
from sim.metrics import offload_summary, summarize, summary_of
from sim.policies.request import Request
from sim.policies.router import Router
from sim.policies.schedulers.base import Scheduler
from sim.policies.speculative import AcceptanceSampler
from sim.results import REQUEST_COLUMNS, SimResult, request_row
from sim.run_parts import (Deployment, as_scenario, async_scheduling_of, build_replica_scheduler,
                           build_workload, cost_model_summary, fresh_request, kv_page_tokens, offload_tiers_of,
                           replica_engines, resolve_deployment, router_options, scenario_summary,
                           session_links, streamed_interval, streamed_pricer, swap_slots_of)
from sim.scenario import Scenario
from sim.simulation import STEP_COLUMNS, Simulation
from sim.streaming import ITL_BIN_WIDTH, StreamRecorder
from sim.workload.summary import prefix_reuse_fraction

if TYPE_CHECKING:
    from sim.workload.clients import ClientGroup

__all__ = [
    "REQUEST_COLUMNS", "Deployment", "SimResult", "as_scenario", "async_scheduling_of",
    "build_replica_scheduler", "build_workload", "client_groups", "cost_model_summary",
    "fresh_request", "in_flight_cap", "new_simulation", "offload_tiers_of", "replica_engines",
    "request_row", "resolve_deployment", "router_options", "scenario_summary", "session_links",
    "simulate", "swap_slots_of",
]


@contextmanager
def _no_cyclic_gc():
    """Pause Python's cyclic garbage collector while a simulation runs. Why: every step makes
    short-lived objects (plans, scheduled requests, events) and the summary millions of floats,
    all freed by reference counting, but their sheer number keeps triggering collections that
    scan every live request: 5-10% of a run for nothing. The collector runs again after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def simulate(config: Union[Scenario, dict, str, Path, None] = None, *, overrides: Sequence[str] = (),
             seed: Optional[int] = None, requests: Optional[list[Request]] = None,
             progress: Optional[Callable[[int], None]] = None,
             base_dir: Optional[Union[str, Path]] = None, fast_decode: bool = True,
             statistics: bool = True, stream_to: Optional[Union[str, Path]] = None,
             clients: Optional[Sequence["ClientGroup"]] = None) -> SimResult:
    """Simulate one scenario. ``config`` is a ``Scenario``, a full config dict (from
    ``build_config``), a partial dict or a YAML path; ``requests`` replaces the configured
    workload (A/B runs pass the same stream to both arms). ``fast_decode=False`` forces one
    simpy step per decode step (the reference the bulk-decode fast path is tested against).
    ``statistics=False`` leaves the run's latency, throughput and KV statistics out of the
    summary (it keeps ``scenario``, ``num_gpu_blocks``, ``cost_model`` and ``simulator``), for
    callers that judge the requests themselves (capacity search's steady-state window): over
    millions of inter-token gaps the percentiles cost as much as a short run.
    ``stream_to`` (a folder) streams the run (``sim.streaming``): requests are built as they
    arrive, written to ``requests.csv`` as they finish and not kept, steps written to
    ``steps.csv``; memory stays bounded, the result's ``requests`` and ``steps`` are empty, and
    the summary is the same but for ITL quantiles (binned, within 0.005%).
    ``clients`` (``sim.workload.clients.ClientGroup``s over ranges of the requests in arrival
    order) replaces the workload's own closed loop or concurrency cap: ``kvplan validate
    --real`` replays each closed-loop stage of a measured run with its own."""
    with _no_cyclic_gc():
        return _simulate(config, overrides, seed, requests, progress, base_dir, fast_decode,
                         statistics, stream_to, clients)


def _simulate(config, overrides, seed, requests, progress, base_dir, fast_decode, statistics,
              stream_to, clients=None) -> SimResult:
    sc = as_scenario(config, overrides, seed)
    if sc.disaggregation.enabled:  # prefill and decode pools (docs/cluster.md)
        if stream_to is not None:
            raise ConfigError("disaggregation.enabled: a disaggregated run is not streamed")
        if clients or client_groups(sc, 1):
            raise ConfigError("disaggregation.enabled: closed-loop clients and "
                              "workload.max_concurrency are not simulated with disaggregated "
                              "serving yet")
        return simulate_disaggregated(sc, requests, base_dir, statistics)
    cfg = sc.to_dict()
    dep = resolve_deployment(sc)
    if stream_to is not None:
        if requests is not None:
            raise ConfigError("stream_to: a streamed run builds the configured workload as it goes; "
                              "pass no requests")
        from sim.workload import build_requests

        reqs: Sequence[Request] = build_requests(sc.workload, sc.seed, base_dir=base_dir, lazy=True)
        built: Sequence[Request] = reqs
    else:
        # A workload built here is fresh already; given requests are copied (A/B runs simulate
        # one stream under several configs).
        built = requests if requests is not None else build_workload(sc, base_dir)
        reqs = [fresh_request(r) for r in built] if requests is not None else list(built)
    # Conversations (sim.workload.sessions): which turn follows which, by request id.
    links = session_links(built)
    groups = list(clients) if clients is not None else client_groups(sc, len(reqs))
    # One engine (scheduler, KV pool) per data-parallel attention rank of every replica.
    schedulers, samplers = replica_engines(sc, dep, sc.parallel.num_replicas * sc.parallel.data_parallel_size)
    replica_of: dict[str, int] = {}
    par = sc.parallel
    router = _RecordingRouter(par.router, replica_of, **router_options(sc))
    recorder = None
    if stream_to is not None:
        recorder = StreamRecorder(Path(stream_to), replica_of, sc.slo.ttft_ms, sc.slo.tpot_ms,
                                  stream_interval=streamed_interval(dep))
    sim = new_simulation(sc, dep, reqs, schedulers, samplers, router, progress=progress,
                         fast_decode=fast_decode,
                         on_finish=recorder.request if recorder is not None else None,
                         keep_finished=recorder is None,
                         step_sink=recorder.steps if recorder is not None else None,
                         next_turn=links.next_turn if links is not None else None,
                         session_of=links.session_of if links is not None else None,
                         clients=groups)
    if recorder is not None:
        with recorder:
            sim.run()
        steps: dict[str, list] = {name: [] for name in STEP_COLUMNS}
        num_steps = recorder.kv.num_steps
    else:
        sim.run()
        steps = sim.log.columns()
        num_steps = len(steps["duration_s"])
    queries = sum(s.allocator.num_prefix_queries for s in schedulers)
    hits = sum(s.allocator.num_prefix_hits for s in schedulers)
    slo_kw: dict[str, Any] = dict(slo_ttft_ms=sc.slo.ttft_ms, slo_tpot_ms=sc.slo.tpot_ms,
                                  num_preemptions=sum(s.num_preemptions for s in schedulers),
                                  prefix_queries=queries, prefix_hits=hits,
                                  num_gpus=dep.num_gpus_per_replica * sc.parallel.num_replicas)
    if not statistics:
        summary: dict = {}
    elif recorder is not None:
        summary = summary_of(recorder.totals(), recorder.kv.breakdown(), recorder.kv.num_spec_steps,
                             **slo_kw)
    else:
        summary = summarize(reqs, steps, stream_interval=streamed_interval(dep), **slo_kw)
    if statistics and sc.kv_cache.offload_enabled:
        summary["kv_cache"]["offload"] = offload_summary(
            [st for st in (s.allocator.offload_stats() for s in schedulers) if st is not None],
            queries, hits)
    cap = in_flight_cap(groups, len(reqs))
    if statistics and cap is not None:  # the clients' cap (vllm bench serve's max_concurrency)
        summary["max_concurrency"] = cap
    summary["scenario"] = scenario_summary(sc, dep)
    summary["num_gpu_blocks"] = dep.memory.num_kv_slots // kv_page_tokens(sc, dep.model, dep.memory)
    summary["cost_model"] = cost_model_summary(dep)
    summary["simulator"] = {"num_steps": num_steps, "num_events": sim.num_events}
    extra: dict = {"replica_of": replica_of}
    if links is not None:
        extra["session_links"] = links
        if statistics:
            summary["sessions"] = links.summary(reqs)
            if par.session_affinity:
                summary["sessions"]["affinity"] = {"kept": router.num_affinity_hits,
                                                   "moved": router.num_affinity_fallbacks}
    if recorder is not None:
        summary["simulator"]["streamed"] = {
            "folder": str(stream_to), "files": ["requests.csv", "steps.csv"],
            "itl_quantiles": f"log-histogram bins, within {ITL_BIN_WIDTH / 2:.1e} relative"}
        extra["streamed_to"] = str(stream_to)
        reqs = []
    warnings = list(dep.cost_model.warnings())  # e.g. a profile measured on another machine
    if stream_to is None and not sc.caches_prefixes and not dep.model.is_hybrid_linear:
        warnings += _prefix_reuse_left_out(built)
    if warnings:
        summary["warnings"] = warnings
    return SimResult(cfg, summary, list(reqs), steps, dep, extra, scenario=sc)


#: Share of prompt blocks an earlier request already had, from which a run without prefix
#: caching says what it leaves out.
PREFIX_REUSE_WARN = 0.05


def _prefix_reuse_left_out(requests: Sequence[Request]) -> list[str]:
    """A warning when the workload's prompts repeat prefixes (trace ``hash_ids``, a synthetic
    shared prefix) that the run does not cache: vLLM's V1 engine caches prefixes by default,
    kvplan only with ``kv_cache.prefix_caching``, and a trace replayed without it is priced as if
    every prompt were new."""
    share = prefix_reuse_fraction(requests)
    if share is None or share < PREFIX_REUSE_WARN:
        return []
    return [f"workload: {share:.0%} of the prompt blocks repeat an earlier request's prefix, but "
            f"kv_cache.prefix_caching is false, so every prompt is prefilled in full (vLLM's V1 "
            f"engine caches prefixes by default): --set kv_cache.prefix_caching=true to model the reuse"]


class _RecordingRouter(Router):
    def __init__(self, policy: str, record: dict[str, int], **options: Any) -> None:
        super().__init__(policy, **options)
        self.record = record

    def route(self, req, replicas, session=None):
        i = super().route(req, replicas, session)
        if len(replicas) > 1:
            self.record[req.request_id] = i
        return i


def client_groups(sc: Scenario, num_requests: int) -> list["ClientGroup"]:
    """The scenario's clients over its ``num_requests`` requests (``sim.workload.clients``):
    one group for a closed loop or a concurrency cap, none for open-loop arrivals."""
    from sim.workload.clients import clients_of

    group = clients_of(sc.workload_spec, num_requests)
    return [] if group is None else [group]


def in_flight_cap(groups: Sequence["ClientGroup"], num_requests: int) -> Optional[int]:
    """summary.json's ``max_concurrency``: the in-flight cap when one client group covers
    every request (a run's own closed loop or cap), else None."""
    if len(groups) == 1 and groups[0].first == 0 and groups[0].last == num_requests:
        return groups[0].limit
    return None


def new_simulation(sc: Scenario, dep: "Deployment", requests: Sequence[Request],
                   schedulers: list[Scheduler], samplers: Optional[list[AcceptanceSampler]],
                   router: Router, *, progress: Optional[Callable[[int], None]],
                   fast_decode: bool, **hooks: Any) -> Simulation:
    """The event loop over ``schedulers`` priced by the deployment's cost model, with the
    scenario's speculative, async-scheduling and per-request settings; ``hooks`` are the
    ``Simulation``'s callbacks (on_finish, step_sink, next_turn, clients, ...). Without a
    ``clients`` hook the scenario's own closed loop or concurrency cap applies, so every
    caller (the autoscaled fleet too) sends the workload as configured. Each replica (its
    lockstep data-parallel ranks together) has its own API server."""
    if "clients" not in hooks:
        hooks["clients"] = client_groups(sc, len(requests))
    pricer, fe = streamed_pricer(dep), dep.frontend
    return Simulation(requests, schedulers, pricer.step_time, router=router,
                      spec_samplers=samplers, draft_cost_ratio=sc.speculative.draft_cost_ratio,
                      progress=progress, fast_decode=fast_decode,
                      async_scheduling=async_scheduling_of(sc, dep),
                      request_overhead=dep.request_overhead_s,
                      ingress=fe.ingress, lockstep=lockstep_ranks(sc, dep),
                      api_servers=max(1, len(schedulers) // lockstep_ranks(sc, dep)),
                      decode_pricer=getattr(pricer, "decode_context_pricer", None), **hooks)


def lockstep_ranks(sc: Scenario, dep: "Deployment") -> int:
    """Schedulers of a replica that step together: its data-parallel attention ranks where the
    model is a MoE (the experts' collectives couple every forward pass), else 1 (a dense
    model's DP ranks are independent copies)."""
    dp = sc.parallel.data_parallel_size
    return dp if dp > 1 and dep.model.is_moe else 1
