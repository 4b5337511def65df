"""The simpy executor: the bulk-decode fast path is exact (on random scenarios too) and belongs
to the simulator alone, runs are reproducible, every request is accounted for, and the KV
breakdown adds up."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.api import simulate
from sim.fast_decode import BulkDecode
from sim.policies import Request, RequestState, StepResult, StepShape
from sim.policies.kv import make_allocator
from sim.policies.router import ROUTERS, Router
from sim.policies.schedulers import SCHEDULERS, Scheduler, make_scheduler
from sim.policies.speculative import AcceptanceSampler
from sim.simulation import Simulation

SMALL = ["workload.num_requests=300", "workload.arrival.rate=30"]

CASES = {
    "chunked-paged": [],
    "vllm_v0-paged-swap": ["scheduler.policy=vllm_v0", "scheduler.preemption=swap"],
    "orca-contiguous-pow2": ["scheduler.policy=orca", "kv_cache.allocator=contiguous", "kv_cache.reserve=pow2"],
    "static-contiguous": ["scheduler.policy=static", "kv_cache.allocator=contiguous", "scheduler.max_num_seqs=16"],
    "two-replicas-least-kv": ["parallel.num_replicas=2", "parallel.router=least_kv"],
    "tight-memory": ["model=opt-13b", "hardware=a100-40gb", "kv_cache.max_model_len=2048"],
}


@pytest.mark.parametrize("name", list(CASES))
def test_fast_decode_path_is_identical_to_step_by_step(name):
    overrides = SMALL + CASES[name]
    fast = simulate(None, overrides=overrides, seed=3)
    slow = simulate(None, overrides=overrides, seed=3, fast_decode=False)
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert [r.finish_time for r in fast.requests] == [r.finish_time for r in slow.requests]
    assert fast.steps == slow.steps
    f, s = dict(fast.summary), dict(slow.summary)
    f.pop("simulator"), s.pop("simulator")
    assert f == s


def test_same_seed_same_result_different_seed_different_result():
    a = simulate(None, overrides=SMALL, seed=7).summary
    b = simulate(None, overrides=SMALL, seed=7).summary
    c = simulate(None, overrides=SMALL, seed=8).summary
    assert a == b
    assert a["mean_ttft_ms"] != c["mean_ttft_ms"]


def test_every_request_accounted_for_with_exact_token_counts():
    res = simulate(None, overrides=SMALL + ["kv_cache.max_model_len=1024"], seed=1)
    for r in res.requests:
        assert r.state in (RequestState.FINISHED, RequestState.REJECTED)
        if r.state is RequestState.FINISHED:
            assert r.num_output_tokens == r.max_output_tokens == len(r.token_times)
            assert r.arrival_time <= r.token_times[0] <= r.finish_time
        else:
            assert "max_model_len 1024" in r.reject_reason
    s = res.summary
    assert s["completed"] + s["rejected"] == s["num_requests"] == 300
    assert s["rejected"] > 0  # lognormal tails above 1024 tokens exist at n=300


def test_kv_breakdown_sums_to_one_every_step():
    res = simulate(None, overrides=SMALL + ["kv_cache.allocator=contiguous", "scheduler.policy=orca"], seed=2)
    st = res.steps
    for j in range(len(st["duration_s"])):
        parts = [st[f"kv_{k}"][j] for k in ("token_states", "reserved", "internal_fragmentation",
                                           "external_fragmentation", "free")]
        assert all(p >= 0 for p in parts)
        assert sum(parts) == res.summary["scenario"]["kv_slots_per_replica"]
    kv = res.summary["kv_cache"]
    assert math.isclose(sum(kv[k] for k in ("token_states", "reserved", "internal_fragmentation",
                                            "external_fragmentation", "free")), 1.0)


def test_tpot_follows_vllm_definition():
    res = simulate(None, overrides=SMALL, seed=4)
    for r in res.requests:
        if r.num_output_tokens > 1:
            assert math.isclose(r.tpot, (r.e2el - r.ttft) / (r.num_output_tokens - 1))


# --- speculative decoding with a proposer that may find fewer than k drafts (n-gram lookup) ---

SPEC = SMALL + ["speculative.num_tokens=2", "speculative.draft_cost_ratio=0"]


def test_a_proposer_that_never_finds_drafts_is_plain_decoding():
    plain = simulate(None, overrides=SMALL, seed=5)
    never = simulate(None, overrides=SPEC + ["speculative.draft_availability=[1, 0, 0]"], seed=5)
    assert sum(never.steps["num_spec_tokens"]) == 0
    assert [r.token_times for r in never.requests] == [r.token_times for r in plain.requests]


def test_draft_availability_sets_how_many_drafts_each_decode_verifies():
    always = simulate(None, overrides=SPEC + ["speculative.draft_availability=[0, 0, 1]"], seed=5)
    half = simulate(None, overrides=SPEC + ["speculative.draft_availability=[0.5, 0, 0.5]"], seed=5)
    for run in (always, half):
        assert all(r.state is RequestState.FINISHED and r.num_output_tokens == r.max_output_tokens
                   for r in run.requests)
    spec_reqs = [r for r in always.requests if r.num_spec_steps]
    # k drafts every decode step (one fewer only when a single token is left to verify)
    assert spec_reqs and all(2 * r.num_spec_steps - 1 <= r.num_spec_proposed <= 2 * r.num_spec_steps
                             for r in spec_reqs)
    # Half of the decode steps find no draft: about half as many verifications per output token.
    per_token = [sum(r.num_spec_steps for r in run.requests) / sum(r.num_output_tokens for r in run.requests)
                 for run in (always, half)]
    assert 0.35 < per_token[1] / per_token[0] < 0.75
    assert all(2 * r.num_spec_steps - 1 <= r.num_spec_proposed <= 2 * r.num_spec_steps for r in half.requests)


@pytest.mark.parametrize("bad", ["[0.5, 0.5]", "[0.5, 0.2, 0.2]", "[1.2, -0.2, 0]", "fast"])
def test_bad_draft_availability_is_a_config_error(bad):
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="speculative.draft_availability"):
        simulate(None, overrides=SPEC + [f"speculative.draft_availability={bad}"], seed=5)


# --- the bulk-decode fast path against step by step, on random scenarios ---------------------

ALLOCATOR_KINDS = ["paged", "contiguous-max", "contiguous-pow2", "contiguous-oracle", "radix"]


def _toy_step_time(shape: StepShape) -> float:
    """A cheap deterministic price with every term the real ones have (float sums included)."""
    return (2e-3 + 3e-5 * shape.num_tokens + 1e-7 * shape.decode_context_tokens
            + 1e-9 * shape.prefill_attention_work + 1e-6 * shape.num_swap_tokens)


def _random_requests(rng, n: int, content: str, max_len: int, rate: float = 500.0) -> list[tuple]:
    """Request specs (arrival, prompt_len, output_len, token ids, block hashes, priority)."""
    shared = [rng.randint(1, 5) for _ in range(max_len)]
    specs, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(rate)
        plen = rng.randint(1, max_len * 2 // 3)
        out = rng.randint(1, max_len * 2 // 3)  # some exceed max_model_len: rejected
        ids = hashes = None
        if content == "token_ids":  # shared prefixes of several lengths, then a random body
            cut = rng.randint(0, plen)
            ids = shared[:cut] + [rng.randint(1, 5) for _ in range(plen - cut)]
        elif content == "block_hashes":
            hashes = [rng.randint(0, 2) for _ in range(-(-plen // 8))]
        specs.append((t, plen, out, ids, hashes, rng.randint(0, 2)))
    return specs


def _run(params: dict, fast: bool):
    rng_specs = params["requests"]
    reqs = [Request(str(i), t, plen, out, prompt_token_ids=ids, block_hashes=hashes,
                    hash_block_size=8, priority=prio)
            for i, (t, plen, out, ids, hashes, prio) in enumerate(rng_specs)]
    kind, _, reserve = params["allocator"].partition("-")
    schedulers = []
    for _ in range(params["replicas"]):
        alloc = make_allocator(kind, num_slots=params["num_slots"], block_size=params["block_size"],
                               prefix_caching=params["prefix_caching"] and kind in ("paged", "radix"),
                               reserve=reserve or "max", max_model_len=params["max_model_len"],
                               swap_slots=params["swap_slots"])
        schedulers.append(make_scheduler(
            params["policy"], alloc, max_model_len=params["max_model_len"],
            max_num_seqs=params["max_num_seqs"], max_num_batched_tokens=params["budget"],
            preemption=params["preemption"], queue_policy=params["queue_policy"],
            num_speculative_tokens=params["spec_k"]))
    samplers = None
    if params["spec_k"]:
        k = params["spec_k"]
        avail = [1.0 / (k + 1)] * (k + 1) if params["draft_availability"] else None
        samplers = [AcceptanceSampler(0.6, seed=9 + i, draft_availability=avail)
                    for i in range(params["replicas"])]
    sim = Simulation(reqs, schedulers, _toy_step_time, router=Router(params["router"]),
                     spec_samplers=samplers, draft_cost_ratio=params["draft_cost_ratio"],
                     fast_decode=fast, async_scheduling=params.get("async_scheduling", False))
    sim.run()
    # Plans: fewer than steps means windows were taken.
    return sim, reqs, schedulers, sum(r.num_plans for r in sim.replicas)


def _outcome(sim, reqs, schedulers) -> dict:
    return {
        "requests": [(r.state, r.token_times, r.finish_time, r.finish_reason, r.num_output_tokens,
                      r.num_computed_tokens, r.num_preemptions, r.num_cached_tokens,
                      r.num_spec_proposed, r.num_spec_accepted, r.num_spec_steps, r.first_scheduled_time)
                     for r in reqs],
        "steps": sim.log.columns(),
        "schedulers": [(s.num_preemptions, s.num_swapped_tokens, s.allocator.num_free_slots,
                        s.allocator.num_prefix_queries, s.allocator.num_prefix_hits) for s in schedulers],
    }


scenarios = st.fixed_dictionaries({
    "policy": st.sampled_from(sorted(SCHEDULERS)),
    "allocator": st.sampled_from(["paged"] * 3 + ALLOCATOR_KINDS),
    "block_size": st.sampled_from([1, 4, 16]),
    "num_slots": st.integers(48, 500),
    "max_model_len": st.sampled_from([64, 96]),
    "max_num_seqs": st.integers(1, 24),
    "budget": st.sampled_from([None, 16, 128]),
    "preemption": st.sampled_from(["recompute", "swap"]),
    "swap_slots": st.sampled_from([0, 64, 4096]),
    "queue_policy": st.sampled_from(["fcfs", "priority"]),
    "prefix_caching": st.booleans(),
    "content": st.sampled_from(["lengths", "token_ids", "block_hashes"]),
    "spec_k": st.sampled_from([0, 0, 2]),
    "draft_availability": st.booleans(),
    "draft_cost_ratio": st.sampled_from([0.0, 0.1]),
    "replicas": st.integers(1, 3),
    "router": st.sampled_from(ROUTERS),
    "num_requests": st.integers(1, 60),
    "arrival_rate": st.sampled_from([20.0, 300.0, 1e5]),
    "seed": st.integers(0, 10_000),
    "async_scheduling": st.booleans(),
})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params=scenarios)
def test_bulk_decode_equals_step_by_step_on_random_scenarios(params):
    """Every scheduler x allocator, preemption by recompute and swap, prefix caching over token
    ids or trace hashes, speculative decoding, several replicas: the fast path changes nothing."""
    if params["policy"] == "static":
        params["preemption"] = "recompute"  # static batching never swaps
    if params["policy"] not in ("chunked", "sglang"):
        params["budget"] = None  # a non-chunked budget must hold a whole prompt
    if params["num_slots"] < params["max_model_len"] and params["allocator"] != "paged":
        params["num_slots"] = params["max_model_len"]
    if params["allocator"] == "radix" and params["policy"] != "sglang":
        # The radix cache with SGLang's policy: the one pairing a scenario builds. (Under vLLM's
        # policies the step log's KV columns can differ while every request is identical: see
        # docs/engines.md.)
        params["policy"] = "sglang"
    rng = random.Random(params["seed"])
    params["requests"] = _random_requests(rng, params["num_requests"], params["content"],
                                          params["max_model_len"], params["arrival_rate"])
    fast = _outcome(*_run(params, fast=True)[:3])
    slow = _outcome(*_run(params, fast=False)[:3])
    assert fast["requests"] == slow["requests"]
    assert fast["steps"] == slow["steps"]
    assert fast["schedulers"] == slow["schedulers"]


_PREFIX_EVICTION = dict(policy="chunked", allocator="paged", block_size=1, max_model_len=64,
                        max_num_seqs=1, budget=None, preemption="recompute", swap_slots=0,
                        queue_policy="fcfs", prefix_caching=True, spec_k=0, draft_availability=False,
                        draft_cost_ratio=0.0, arrival_rate=20.0, async_scheduling=False)


@pytest.mark.parametrize("case", [
    # a window's allocations evict cached blocks whose hashes its own publications meet
    dict(_PREFIX_EVICTION, num_slots=48, content="token_ids", replicas=1, router="round_robin",
         num_requests=14, seed=48),
    # the router reads a replica's free KV while the last step of a window runs
    dict(_PREFIX_EVICTION, num_slots=77, max_model_len=96, content="lengths", replicas=2,
         router="least_kv", num_requests=6, seed=0),
], ids=["evictions-interleave-with-publications", "router-reads-kv-mid-window"])
def test_bulk_decode_with_a_small_prefix_cache_is_exact(case):
    """Found by the random test: with a prefix cache, a window must allocate and publish step by
    step, at the simulated time each step would, not all at once."""
    params = dict(case)
    params["requests"] = _random_requests(random.Random(params["seed"]), params["num_requests"],
                                          params["content"], params["max_model_len"], params["arrival_rate"])
    assert _outcome(*_run(params, fast=True)[:3]) == _outcome(*_run(params, fast=False)[:3])


def test_bulk_decode_takes_windows_and_saves_plans():
    """Not vacuous: on a plain decode-heavy scenario the fast path plans far fewer steps."""
    params = dict(policy="chunked", allocator="paged", block_size=16, num_slots=4096,
                  max_model_len=96, max_num_seqs=8, budget=None, preemption="recompute",
                  swap_slots=0, queue_policy="fcfs", prefix_caching=True, content="token_ids",
                  spec_k=0, draft_availability=False, draft_cost_ratio=0.0, replicas=2,
                  router="round_robin")
    params["requests"] = _random_requests(random.Random(1), 30, "token_ids", 96)
    fast_sim, fast_reqs, fast_s, fast_plans = _run(params, fast=True)
    slow_sim, slow_reqs, slow_s, slow_plans = _run(params, fast=False)
    assert _outcome(fast_sim, fast_reqs, fast_s) == _outcome(slow_sim, slow_reqs, slow_s)
    assert fast_plans < slow_plans // 2  # slow: one plan per step (+ idle polls)


# --- the bulk path belongs to the simulator: no runtime plan can reach it ------------------

def test_bulk_decode_is_not_part_of_the_shared_scheduler():
    """The runtime drives schedulers through their public surface only; that surface has no
    bulk-decode methods, and no runtime module imports the simulator's fast path. A policy
    only says what it knows of its own state: how many decode batches in a row its own rules
    keep the same (``decode_window_limit``) and what skipped decode-batch calls do to its state
    (``skip_decode_schedules``: SGLang's falling new_token_ratio); the runtime never asks."""
    for name in ("reserve_decode_window", "advance_decode_window"):
        assert not hasattr(Scheduler, name)
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "runtime").rglob("*.py")):
        text = path.read_text()
        assert "decode_window_limit" not in text and "skip_decode_schedules" not in text, path
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("sim.fast_decode", "sim.simulation"), path
            elif isinstance(node, ast.Import):
                assert all(a.name not in ("sim.fast_decode", "sim.simulation") for a in node.names), path


@pytest.mark.parametrize("policy", sorted(SCHEDULERS))
def test_bulk_decode_refuses_a_scheduler_made_for_the_runtime(policy):
    """A scheduler that emits block tables serves an executor that addresses KV memory (the
    runtime's model runner); the simulator's fast path will not drive it."""
    alloc = make_allocator("paged", num_slots=256, block_size=4)
    runtime_sched = make_scheduler(policy, alloc, max_model_len=64, emit_block_tables=True)
    with pytest.raises(RuntimeError, match="block tables"):
        BulkDecode(runtime_sched, _toy_step_time)
    sim_sched = make_scheduler(policy, make_allocator("paged", num_slots=256, block_size=4), max_model_len=64)
    assert BulkDecode(sim_sched, _toy_step_time).scheduler is sim_sched


def test_block_tables_only_when_asked_and_they_match_the_allocator():
    """The runtime's scheduler fills every scheduled request's block table from the allocator;
    the simulator's leaves them empty (it never addresses KV memory)."""
    for emit in (False, True):
        alloc = make_allocator("paged", num_slots=256, block_size=4)
        sched = make_scheduler("chunked", alloc, max_model_len=64, max_num_batched_tokens=16,
                               emit_block_tables=emit)
        for i in range(3):
            sched.add_request(Request(str(i), 0.0, 10 + 7 * i, 5), 0.0)
        while sched.has_unfinished():
            plan = sched.schedule(0.0)
            for s in plan.scheduled:
                if emit:
                    table = alloc.block_table(s.request)
                    assert s.block_table == table and s.block_table is not table  # a snapshot
                    end = s.request.num_computed_tokens + s.num_new_tokens + s.num_spec_tokens
                    assert len(s.block_table) * 4 >= end
                else:
                    assert s.block_table is None
            sched.update(plan, StepResult(), 1.0)


def _lagged_ttft(async_scheduling: bool) -> float:
    """TTFT of a request that arrives in the middle of a long decode run."""
    reqs = [Request("long", 0.0, 8, 50), Request("late", 0.0105, 8, 2)]
    alloc = make_allocator("paged", num_slots=4096, block_size=16)
    sched = make_scheduler("chunked", alloc, max_model_len=512, max_num_seqs=8)
    sim = Simulation(reqs, [sched], lambda shape: 0.010, async_scheduling=async_scheduling)
    sim.run()
    return reqs[1].ttft


def test_async_scheduling_delays_a_new_request_by_one_step():
    """vLLM V1 schedules step N+1 while step N runs: a request arriving during step N runs first
    in step N+2. With 10 ms steps and an arrival 0.5 ms into a step, TTFT is the rest of that
    step (9.5 ms) + its own step synchronously, + one more step with async scheduling."""
    assert _lagged_ttft(False) == pytest.approx(0.0095 + 0.010)
    assert _lagged_ttft(True) == pytest.approx(0.0095 + 0.020)


def test_async_scheduling_auto_follows_the_pricer(tmp_path):
    """auto: the release's default wherever a serving engine's steps are priced (operator
    tables or the roofline: vLLM 0.14 on schedules one step ahead), off for older releases."""
    from sim.api import simulate

    r = simulate(None, overrides=["workload.num_requests=5"], seed=0)
    assert r.summary["cost_model"]["source"] == "roofline"
    assert r.summary["scenario"]["async_scheduling"] is True
    r = simulate(None, overrides=["workload.num_requests=5", "engine.version=0.12.0"], seed=0)
    assert r.summary["scenario"]["async_scheduling"] is False
    r = simulate(None, overrides=["workload.num_requests=5", "scheduler.async_scheduling=false"], seed=0)
    assert r.summary["scenario"]["async_scheduling"] is False
    r = simulate(None, overrides=["workload.num_requests=5", "scheduler.async_scheduling=true"], seed=0)
    assert r.summary["scenario"]["async_scheduling"] is True


@pytest.mark.parametrize("allocator", ALLOCATOR_KINDS)
@pytest.mark.parametrize("policy", sorted(SCHEDULERS))
def test_every_scheduler_fills_memory_before_queueing(policy, allocator):
    """Eight short requests arrive together into a pool that holds all eight at once (even as
    max-length contiguous reservations, with vLLM v0's 1% watermark spare): every scheduler with
    every allocator must run all eight together, not queue them. vLLM v0 with the contiguous
    allocator once admitted one at a time: its watermark asked the allocator how far a request
    could grow, which for a request not yet holding a reservation read "never"."""
    max_len = 64
    kind, _, reserve = allocator.partition("-")
    alloc = make_allocator(kind, num_slots=8 * max_len + 16, block_size=16, reserve=reserve or "max",
                           max_model_len=max_len)
    sched = make_scheduler(policy, alloc, max_model_len=max_len, max_num_seqs=64,
                           max_num_batched_tokens=2048)
    reqs = [Request(f"r{i}", 0.0, 16, 4) for i in range(8)]
    sim = Simulation(reqs, [sched], _toy_step_time)
    sim.run()
    assert max(sim.log.columns()["num_running"]) == 8
    assert all(r.state is RequestState.FINISHED for r in reqs)


def test_kv_split_of_memory_in_use_shows_what_block_size_and_reservation_cost():
    """At light load fragmentation is a sliver of all KV memory; as a share of the memory in use
    it shows what bigger blocks and max-length reservations waste (summary kv_cache
    ``token_states_of_used`` / ``fragmentation_of_used``, time-averaged like the rest)."""
    light = ["workload.num_requests=300", "workload.arrival.rate=2"]
    kv = lambda *o: simulate(None, overrides=light + list(o)).summary["kv_cache"]
    small, big = kv("kv_cache.block_size=16"), kv("kv_cache.block_size=128")
    assert small["token_states_of_used"] > big["token_states_of_used"] + 0.05
    assert big["fragmentation_of_used"] > small["fragmentation_of_used"]
    contiguous = kv("kv_cache.allocator=contiguous")
    all_mem = contiguous["internal_fragmentation"] + contiguous["external_fragmentation"]
    assert all_mem < 0.2 < 0.5 < contiguous["fragmentation_of_used"]
    for k in (small, big, contiguous):
        assert 0.0 <= k["fragmentation_of_used"] <= 1.0 and 0.0 <= k["token_states_of_used"] <= 1.0
