"""Disaggregated prefill/decode serving (DistServe, Splitwise, vLLM's KV connectors, llm-d P/D):
two pools of replicas, each with its own size, tensor parallelism and hardware, joined by a
KV-transfer link.

A request goes: router -> a prefill instance, which runs its prompt only (with
``first_token="prefill"``, DistServe's and Splitwise's accounting, it samples the first token
and TTFT ends there) -> a decode instance picked by the decode router, where it waits for
room (``sim.policies.kv_transfer.reserve``: blocks for its prompt and a batch slot) -> its KV
crosses the prefill instance's link (FIFO per prefill instance) -> the prefill blocks are freed
and it joins the decode batch (``join``) -> decode steps to the end (with
``first_token="decode"``, vLLM's P/D proxy and llm-d, the default, the first of them samples the
first token the client sees: TTFT includes the transfer and the wait for decode room). Both pools are plain
``sim.simulation.Replica``s with the scenario's scheduler and allocator, each pool sized and
priced by its own ``resolve_deployment``. docs/cluster.md has the model and its limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import simpy

from sim.errors import ConfigError
from sim.policies import kv_transfer
from sim.policies.request import Request, RequestState
from sim.policies.router import Router
from sim.policies.schedulers.base import Scheduler
from sim.results import SimResult
from sim.run_parts import (async_scheduling_of, build_workload, cost_model_summary, fresh_request,
                           kv_page_tokens, replica_engines, resolve_deployment, router_options, scenario_summary,
                           session_links, streamed_interval, streamed_pricer)
from sim.simulation import ApiServerQueue, Replica, StepLog

if TYPE_CHECKING:
    from sim.run_parts import Deployment
    from sim.scenario import Scenario


@dataclass
class Transfer:
    """One request on its way from a prefill to a decode instance (times in seconds)."""

    req: Request
    clone: Request              # what the prefill instance ran (one output token)
    prefill: int
    decode: int
    ready: float                # prefill finished, first token sampled
    announced: float = -1.0     # through the decode instance's API server: its engine sees it
    reserved: float = -1.0      # decode blocks reserved, transfer started
    landed: float = -1.0        # KV on the decode instance
    num_bytes: float = 0.0


class _DecodeView:
    """What the router sees of a decode instance: its scheduler's requests plus those queued for
    it, in its API server or in transfer to it (``sim.policies.router.Routable``)."""

    def __init__(self, sim: "DisaggSimulation", index: int) -> None:
        self.sim, self.index = sim, index

    @property
    def num_unfinished(self) -> int:
        s = self.sim
        j = self.index
        return s.decode[j].num_unfinished + len(s.queues[j]) + s.incoming[j] + s.incoming_api[j]

    @property
    def kv_free_fraction(self) -> float:
        return self.sim.decode[self.index].kv_free_fraction

    def cached_prefix_tokens(self, req: Request) -> int:
        return 0  # a decode instance receives whole prompts: nothing to reuse


class DisaggSimulation:
    """Prefill pool, decode pool and per-prefill-instance links in one simpy environment.
    Step-log rows carry the replica index: prefill instances 0..P-1, decode P..P+D-1."""

    def __init__(self, requests: Sequence[Request], prefill: Sequence[Scheduler],
                 decode: Sequence[Scheduler], prefill_step_time, decode_step_time,
                 links: Sequence[kv_transfer.TransferLink], kv_bytes_per_token: float,
                 prefill_router: Optional[Router] = None, decode_router: Optional[Router] = None,
                 request_overhead: float = 0.0, async_scheduling: bool = False,
                 ingress: Optional[Callable[[int], float]] = None,
                 first_token: str = "decode", api_servers: int = 1,
                 decode_ingress: Optional[Callable[[int], float]] = None) -> None:
        if len(links) != len(prefill):
            raise ValueError("one link per prefill instance")
        if first_token not in ("decode", "prefill"):
            raise ValueError(f"first_token must be decode or prefill, got {first_token!r}")
        #: True: the decode instance emits the client's first token (the prefill's is dropped).
        self.first_token_on_decode = first_token == "decode"
        self.env = simpy.Environment()
        self.requests = list(requests)
        self.log = StepLog()
        self.links = list(links)
        self.kv_bytes_per_token = kv_bytes_per_token
        self.request_overhead = request_overhead
        #: The API servers (``sim.simulation.ApiServerQueue``) in front of the prefill pool,
        #: ``api_servers`` of them (one per prefill instance: each ``vllm serve`` of a P/D
        #: deployment has its own, and the proxy's request reaches the prefill instance's first),
        #: requests served in arrival order by the first one free.
        self._front = ApiServerQueue(ingress, request_overhead, api_servers)
        #: The decode instances' own API servers, one each (None: the request reaches the decode
        #: engine as the prefill ends). vLLM's P/D proxy (its NIXL ``toy_proxy_server.py``) and
        #: llm-d's routing sidecar send the prefill instance the request with ``max_tokens`` 1,
        #: then the whole request to the decode instance's ``vllm serve``, which parses and
        #: tokenises it again before its engine can pull the KV: ``decode_ingress(prompt)`` each,
        #: in the order the prefills end.
        self._decode_front = ([ApiServerQueue(decode_ingress, 0.0, 1) for _ in decode]
                              if decode_ingress is not None else None)
        self.prefill_router = prefill_router or Router()
        self.decode_router = decode_router or Router()
        n_p = len(prefill)
        self.prefill = [Replica(self.env, i, s, prefill_step_time, self.log, self._prefilled,
                                fast_decode=False, async_scheduling=async_scheduling,
                                blocked=self._prefill_blocker(i))
                        for i, s in enumerate(prefill)]
        self.decode = [Replica(self.env, n_p + j, s, decode_step_time, self.log, self._decoded,
                               fast_decode=False, blocked=self._decode_blocker(j))
                       for j, s in enumerate(decode)]
        self.views = [_DecodeView(self, j) for j in range(len(decode))]
        self.queues: list[list[Transfer]] = [[] for _ in decode]   # waiting for decode room
        self.incoming = [0] * len(decode)                          # reserved, in transfer
        self.incoming_api = [0] * len(decode)                      # in a decode API server
        self.held = [0] * n_p                                      # prefills held for transfer
        self.transfers: list[Transfer] = []
        self._by_id: dict[str, Request] = {}
        self.prefill_of: dict[str, int] = {}
        self.decode_of: dict[str, int] = {}
        self.num_finished = 0
        self.env.process(self._arrivals())

    def _prefill_blocker(self, i: int):
        return lambda: self.held[i] > 0

    def _decode_blocker(self, j: int):
        return lambda: self.incoming[j] > 0

    # --- arrivals and prefill -----------------------------------------------------------------
    def _arrivals(self):
        env = self.env
        for req in self.requests:
            at = self._front.take(req, req.arrival_time)
            if at > env.now:
                yield env.timeout(at - env.now)
            reason = self.decode[0].scheduler.validate(req)
            if reason is not None:
                self._reject(req, f"decode pool: {reason}")
                continue
            clone = Request(req.request_id, req.arrival_time, req.prompt_len, 1,
                            prompt_token_ids=req.prompt_token_ids, block_hashes=req.block_hashes,
                            hash_block_size=req.hash_block_size, priority=req.priority)
            self._by_id[req.request_id] = req
            i = self.prefill_router.route(clone, self.prefill)
            self.prefill_of[req.request_id] = i
            self.prefill[i].submit(clone)

    def _reject(self, req: Request, reason: str) -> None:
        req.state = RequestState.REJECTED
        req.reject_reason = reason
        req.finish_time = self.env.now
        self.num_finished += 1

    def _prefilled(self, clone: Request) -> None:
        """A prefill instance finished ``clone`` (or rejected it)."""
        req = self._by_id.pop(clone.request_id)
        if clone.state is not RequestState.FINISHED:
            self._reject(req, f"prefill pool: {clone.reject_reason}")
            return
        req.first_scheduled_time = clone.first_scheduled_time
        req.num_cached_tokens = clone.num_cached_tokens
        req.num_preemptions = clone.num_preemptions
        now = self.env.now
        if req.max_output_tokens == 1:  # nothing to decode: done where it was prefilled
            req.num_computed_tokens, req.num_output_tokens = req.prompt_len, 1
            req.token_times.append(clone.token_times[0])
            req.state, req.finish_reason, req.finish_time = RequestState.FINISHED, "length", now
            self.num_finished += 1
            return
        i = self.prefill_of[clone.request_id]
        if not kv_transfer.hold(self.prefill[i].scheduler, clone):
            raise RuntimeError(f"prefill instance {i}: could not hold {clone.request_id}'s KV")
        self.held[i] += 1
        j = self.decode_router.route(req, self.views)
        self.decode_of[req.request_id] = j
        t = Transfer(req, clone, i, j, ready=clone.token_times[0])
        self.transfers.append(t)
        t.announced = now if self._decode_front is None else self._decode_front[j].take(req, now)
        if t.announced > now:
            self.incoming_api[j] += 1
            self.env.process(self._announce(t))
        else:
            self.queues[j].append(t)
            self._admit(j)

    def _announce(self, t: Transfer):
        """The decode instance's API server is done with ``t``: its engine queues it for room."""
        yield self.env.timeout(t.announced - self.env.now)
        self.incoming_api[t.decode] -= 1
        self.queues[t.decode].append(t)
        self._admit(t.decode)

    # --- decode-side admission and transfer ---------------------------------------------------
    def _admit(self, j: int) -> None:
        """Reserve room on decode instance ``j`` for its queued requests, in order, and start
        their transfers; the head waits until blocks free (no overtaking)."""
        queue, sched = self.queues[j], self.decode[j].scheduler
        while queue and kv_transfer.reserve(sched, queue[0].req, self.incoming[j]):
            t = queue.pop(0)
            now = self.env.now
            t.reserved = now
            t.num_bytes = kv_transfer.transfer_bytes(t.req.prompt_len, self.kv_bytes_per_token)
            t.landed = self.links[t.prefill].start(now, t.num_bytes)
            self.incoming[j] += 1
            self.env.process(self._land(t))

    def _land(self, t: Transfer):
        yield self.env.timeout(t.landed - self.env.now)
        p = self.prefill[t.prefill]
        p.scheduler.allocator.free(t.clone)
        self.held[t.prefill] -= 1
        p.wake()
        self.incoming[t.decode] -= 1
        kv_transfer.join(self.decode[t.decode].scheduler, t.req,
                         None if self.first_token_on_decode else t.ready, self.env.now)
        self.decode[t.decode].wake()

    def _decoded(self, req: Request) -> None:
        self.num_finished += 1
        self._admit(self.decode_of[req.request_id])

    def run(self) -> None:
        """Run to the end; every request must be finished or rejected by then."""
        self.env.run()
        self.log.flush()
        stuck = [r.request_id for r in self.requests if not r.is_finished]
        if stuck or self.num_finished != len(self.requests):
            raise RuntimeError(f"disaggregated run ended with {len(stuck)} requests unaccounted "
                               f"for (e.g. {stuck[:3]})")

    @property
    def num_events(self) -> int:
        reps = self.prefill + self.decode
        return len(self.requests) + len(self.transfers) + sum(r.num_steps + r.num_wakeups for r in reps)


# --- the scenario runner (``sim.api.simulate`` branches here when enabled) ---------------------
@dataclass
class PoolPlan:
    """One pool: its scenario (hardware, TP, replica count overridden), deployment and size."""

    name: str
    scenario: Scenario
    deployment: Deployment
    num_replicas: int
    gpus_per_replica: int

    @property
    def num_gpus(self) -> int:
        return self.num_replicas * self.gpus_per_replica


def pool_plans(sc) -> tuple[PoolPlan, PoolPlan]:
    """The prefill and decode pools of a scenario with ``disaggregation.enabled``."""
    d, par = sc.disaggregation, sc.parallel
    if par.data_parallel_size > 1:
        raise ConfigError("disaggregation.enabled: needs parallel.data_parallel_size 1 "
                          "(each pool's replicas are tensor-parallel engines)")
    out = []
    for name, n, tp, hw in (("prefill", d.prefill_replicas, d.prefill_tensor_parallel_size, d.prefill_hardware),
                            ("decode", d.decode_replicas, d.decode_tensor_parallel_size, d.decode_hardware)):
        pool_sc = sc.override({"hardware": hw or sc.hardware, "parallel.num_replicas": n,
                               "parallel.tensor_parallel_size": tp or par.tensor_parallel_size})
        try:
            dep = resolve_deployment(pool_sc)
        except ConfigError as exc:
            raise ConfigError(f"disaggregation.{name}_hardware: {exc}") from None
        out.append(PoolPlan(name, pool_sc, dep, n, pool_sc.parallel.gpus_per_replica))
    return out[0], out[1]


def model_kv_bytes_per_token(sc) -> float:
    """KV bytes of one token for the whole model (every layer, each KV head once): what a
    transfer moves, whatever the two pools' tensor parallelism (re-sharding moves no extra)."""
    from sim.catalog.dtypes import resolve_precision
    from sim.catalog.hardware import get_hardware
    from sim.catalog.models import get_model
    from sim.memory_plan import kv_bytes_per_token

    prec = resolve_precision(get_hardware(sc.hardware), sc.dtype, sc.quantization.weight_dtype,
                             sc.kv_cache.dtype)
    return float(kv_bytes_per_token(get_model(sc.model), prec, 1, 1))


def make_links(sc, prefill: PoolPlan, decode: PoolPlan) -> list[kv_transfer.TransferLink]:
    """One link per prefill instance: the catalog's (or overridden) per-GPU bandwidth times
    ``min(tp_prefill, tp_decode)`` parallel streams."""
    from sim.catalog.links import get_link

    d = sc.disaggregation
    spec = get_link(d.link)
    bw = spec.bandwidth if d.link_bandwidth_gbs is None else d.link_bandwidth_gbs * 1e9
    lat = spec.latency if d.link_latency_us is None else d.link_latency_us * 1e-6
    streams = min(prefill.scenario.parallel.tensor_parallel_size,
                  decode.scenario.parallel.tensor_parallel_size)
    return [kv_transfer.TransferLink(bw, lat, streams) for _ in range(prefill.num_replicas)]


def simulate_disaggregated(sc, requests: Optional[list[Request]], base_dir, statistics: bool = True):
    """``sim.api.simulate`` for a scenario with ``disaggregation.enabled``: a ``SimResult``
    whose summary adds ``disaggregation`` (per pool, transfers) and whose GPU count is both
    pools'."""
    from sim.metrics import summarize

    pre, dec = pool_plans(sc)
    built = requests if requests is not None else build_workload(sc, base_dir)
    if session_links(built) is not None:
        raise ConfigError("disaggregation.enabled: conversations (workload.sessions) are not "
                          "simulated with disaggregated serving yet")
    reqs = [fresh_request(r) for r in built] if requests is not None else list(built)

    def schedulers(pool: PoolPlan) -> list[Scheduler]:
        return replica_engines(pool.scenario, pool.deployment, pool.num_replicas)[0]

    par = sc.parallel
    router_kw = router_options(sc)
    links = make_links(sc, pre, dec)
    p_scheds, d_scheds = schedulers(pre), schedulers(dec)
    # Both pools stream through API servers (the prefill one its first tokens, the decode one
    # the rest): each step no faster than its server streams it, as a colocated replica's.
    sim = DisaggSimulation(reqs, p_scheds, d_scheds, streamed_pricer(pre.deployment).step_time,
                           streamed_pricer(dec.deployment).step_time, links, model_kv_bytes_per_token(sc),
                           prefill_router=Router(par.router, **router_kw),
                           decode_router=Router(par.router, **router_kw),
                           request_overhead=pre.deployment.request_overhead_s,
                           ingress=pre.deployment.frontend.ingress,
                           async_scheduling=async_scheduling_of(pre.scenario, pre.deployment),
                           first_token=sc.disaggregation.first_token,
                           api_servers=pre.num_replicas,
                           decode_ingress=(dec.deployment.frontend.ingress
                                           if decode_api_server(sc) else None))
    sim.run()
    steps = sim.log.columns()
    scheds = p_scheds + d_scheds
    num_gpus = pre.num_gpus + dec.num_gpus
    if statistics:
        summary = summarize(reqs, steps, slo_ttft_ms=sc.slo.ttft_ms, slo_tpot_ms=sc.slo.tpot_ms,
                            num_preemptions=sum(s.num_preemptions for s in scheds),
                            prefix_queries=sum(s.allocator.num_prefix_queries for s in scheds),
                            prefix_hits=sum(s.allocator.num_prefix_hits for s in scheds),
                            num_gpus=num_gpus, stream_interval=streamed_interval(pre.deployment))
        summary["disaggregation"] = disaggregation_summary(sim, steps, pre, dec, summary)
        summary["disaggregation"]["link"] = {"name": sc.disaggregation.link,
                                             "bandwidth_gbs_per_gpu": links[0].bandwidth / 1e9,
                                             "streams": links[0].streams,
                                             "latency_us": links[0].latency * 1e6}
        summary["disaggregation"]["first_token"] = sc.disaggregation.first_token
    else:
        summary = {}
    summary["scenario"] = scenario_summary(dec.scenario, dec.deployment)
    summary["scenario"]["num_replicas"] = pre.num_replicas + dec.num_replicas
    summary["num_gpu_blocks"] = dec.deployment.memory.num_kv_slots // kv_page_tokens(
        sc, dec.deployment.model, dec.deployment.memory)
    summary["cost_model"] = cost_model_summary(dec.deployment)
    summary["simulator"] = {"num_steps": len(steps["duration_s"]), "num_events": sim.num_events}
    replica_of = {rid: pre.num_replicas + j for rid, j in sim.decode_of.items()}
    return SimResult(sc.to_dict(), summary, reqs, steps, dec.deployment,
                     {"replica_of": replica_of, "prefill_of": dict(sim.prefill_of)}, scenario=sc)


def _ms_stats(values_s: list[float]) -> dict:
    if not values_s:
        return {"mean": None, "p50": None, "p99": None}
    a = np.asarray(values_s) * 1000
    return {"mean": float(a.mean()), "p50": float(np.percentile(a, 50)),
            "p99": float(np.percentile(a, 99))}


def pool_summary(steps: dict, indices: range, duration: float, pool: PoolPlan) -> dict:
    """One pool's busy fraction, time-averaged queue and KV use, from the step log's rows of
    replicas ``indices``."""
    from sim.metrics import kv_breakdown

    rep = np.asarray(steps["replica"])
    mask = (rep >= indices.start) & (rep < indices.stop) if rep.size else np.zeros(0, bool)
    cols = {k: [v for v, keep in zip(col, mask) if keep] for k, col in steps.items()}
    dur = np.asarray(cols["duration_s"], dtype=float)
    busy = float(dur.sum())
    kv = kv_breakdown(cols)
    span = max(duration, 1e-12) * len(indices)
    return {
        "num_replicas": pool.num_replicas,
        "gpus_per_replica": pool.gpus_per_replica,
        "hardware": pool.scenario.hardware,
        "num_gpus": pool.num_gpus,
        "kv_slots_per_replica": pool.deployment.memory.num_kv_slots,
        "num_steps": int(dur.size),
        "utilization": busy / span,
        "mean_queue": float(np.dot(np.asarray(cols["num_waiting"], dtype=float), dur) / span),
        "mean_batch": float(np.dot(np.asarray(cols["batch_size"], dtype=float), dur) / max(busy, 1e-12)),
        "kv_token_states": kv["token_states"],
        "kv_free": kv["free"],
    }


def decode_api_server(sc) -> bool:
    """``disaggregation.decode_api_server``, None resolved by engine: vLLM's P/D proxy sends the
    decode instance the request after the prefill returns (a second pass, in series); SGLang's
    router sends it to the prefill and decode servers at once (sglang-router's PD mode, its
    bootstrap room), so the decode server's pass overlaps the prefill and is not priced."""
    said = sc.disaggregation.decode_api_server
    return sc.engine.name != "sglang" if said is None else bool(said)


def disaggregation_summary(sim: DisaggSimulation, steps: dict, pre: PoolPlan, dec: PoolPlan,
                           summary: dict) -> dict:
    """summary.json's ``disaggregation``: per pool, the transfers, the GPU count and goodput per
    GPU (both pools' GPUs)."""
    n_p = pre.num_replicas
    duration = summary["duration_s"]
    done = [t for t in sim.transfers if t.landed >= 0]
    num_gpus = pre.num_gpus + dec.num_gpus
    out = {
        "prefill": pool_summary(steps, range(0, n_p), duration, pre),
        "decode": pool_summary(steps, range(n_p, n_p + dec.num_replicas), duration, dec),
        "transfer": {
            "count": len(done),
            "bytes": float(sum(t.num_bytes for t in done)),
            "mean_gb": float(np.mean([t.num_bytes for t in done]) / 1e9) if done else 0.0,
            # prefill end -> KV on the decode instance: waiting for room + link queue + wire
            "total_ms": _ms_stats([t.landed - t.ready for t in done]),
            # the decode instance's API server's second pass (0 without one)
            "decode_api_server_ms": _ms_stats([t.announced - t.ready for t in done]),
            "wait_for_kv_ms": _ms_stats([t.reserved - t.announced for t in done]),
            "link_ms": _ms_stats([t.landed - t.reserved for t in done]),
            "link_utilization": float(sum(link.busy_s for link in sim.links)
                                      / (max(duration, 1e-12) * len(sim.links))),
        },
        "num_gpus": num_gpus,
        "output_throughput_per_gpu": summary["output_throughput"] / num_gpus,
    }
    tr = out["transfer"]
    tr["mean_ms"], tr["p99_ms"] = tr["total_ms"]["mean"], tr["total_ms"]["p99"]
    if "goodput" in summary:
        out["goodput_per_gpu"] = summary["goodput"] / num_gpus
    return out
