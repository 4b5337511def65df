"""Sessions (sim.workload.sessions + sim.simulation): multi-turn conversations whose prompts
grow turn by turn, held back until the previous turn finishes and the user has thought."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.api import simulate
from sim.errors import ConfigError
from sim.policies import RequestState, StepShape
from sim.policies.kv import make_allocator
from sim.policies.router import Router
from sim.policies.schedulers import make_scheduler
from sim.simulation import Simulation
from sim.workload import SessionRequests, build_requests
from sim.workload.sessions import assemble

ROOT = Path(__file__).resolve().parents[1]

SESSIONS = ("{num_turns: {dist: uniform, min: 2, max: 6}, think_time_s: {dist: exponential, "
            "mean: 2}, new_message_len: {dist: lognormal, mean: 60, cv: 1}}")
#: A small multi-replica conversation run (Llama-3.1-8B on A100s, prefix caching).
SIM = ["workload.num_requests=60", "workload.arrival.rate=10", f"workload.sessions={SESSIONS}",
       "parallel.num_replicas=3", "kv_cache.prefix_caching=true", "cost_model.source=roofline"]


def _workload(**sessions) -> dict:
    spec = {"num_turns": {"dist": "fixed", "mean": 4}, "think_time_s": 1.5,
            "new_message_len": {"dist": "fixed", "mean": 40}, **sessions}
    return {"num_requests": 10, "arrival": {"process": "poisson", "rate": 2.0},
            "input_len": {"dist": "uniform", "min": 20, "max": 200},
            "output_len": {"dist": "uniform", "min": 5, "max": 100}, "sessions": spec}


# --- building the turns ----------------------------------------------------------------------


def test_turn_k_prompt_and_hashes_by_hand():
    """Turn k = turn k-1's prompt + its output + the new message; the full blocks of turn
    k-1's prompt keep their ids, every later block gets a fresh one."""
    reqs = assemble([0.0], [20], None, [[5, 7]], [[10, 3, 4]], [[1.0, 2.0]], [0], 8)
    assert [r.prompt_len for r in reqs] == [20, 20 + 10 + 5, 35 + 3 + 7]
    assert [r.max_output_tokens for r in reqs] == [10, 3, 4]
    assert [r.block_hashes for r in reqs] == [[0, 1, 2], [0, 1, 3, 4, 5], [0, 1, 3, 4, 6, 7]]
    assert [r.arrival_time for r in reqs] == [0.0, 1.0, 3.0]  # lower bounds: as if instant
    links = reqs.links
    assert links.next_turn == {"0": ("1", 1.0), "1": ("2", 2.0)}
    assert links.session_of == {"0": "0", "1": "0", "2": "0"}
    assert links.turn_of == {"0": 1, "1": 2, "2": 3}


def test_sessions_grow_from_the_workload_spec():
    reqs = build_requests(_workload(), seed=3)
    assert isinstance(reqs, SessionRequests)
    links = reqs.links
    by_id = {r.request_id: r for r in reqs}
    assert links.num_sessions == 10 and len(reqs) == 40
    seen: set[int] = set()
    for r in reqs:
        if links.turn_of[r.request_id] == 1:
            seen.update(r.block_hashes)
    for parent_id, (child_id, think) in links.next_turn.items():
        parent, child = by_id[parent_id], by_id[child_id]
        assert think == 1.5
        assert links.session_of[parent_id] == links.session_of[child_id]
        assert links.turn_of[child_id] == links.turn_of[parent_id] + 1
        assert child.prompt_len == parent.prompt_len + parent.max_output_tokens + 40
        keep = parent.prompt_len // child.hash_block_size
        assert child.block_hashes[:keep] == parent.block_hashes[:keep]
        assert len(child.block_hashes) == -(-child.prompt_len // child.hash_block_size)
        fresh = child.block_hashes[keep:]
        assert not seen & set(fresh)  # new content shares nothing with anything before
        seen.update(fresh)


def test_same_seed_same_sessions_and_other_streams_untouched():
    a, b = build_requests(_workload(), 7), build_requests(_workload(), 7)
    assert [(r.prompt_len, r.max_output_tokens, r.block_hashes) for r in a] == \
        [(r.prompt_len, r.max_output_tokens, r.block_hashes) for r in b]
    # First turns are exactly the workload without sessions.
    plain = _workload()
    del plain["sessions"]
    first = [r for r in a if a.links.turn_of[r.request_id] == 1]
    assert [(r.arrival_time, r.prompt_len, r.max_output_tokens) for r in first] == \
        [(r.arrival_time, r.prompt_len, r.max_output_tokens) for r in build_requests(plain, 7)]


def test_sessions_from_a_trace_with_a_session_id_column(tmp_path):
    trace = tmp_path / "chat.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens,arrived_at,session_id,turn\n"
                     "100,20,0.0,a,1\n"
                     "50,10,0.5,b,1\n"
                     "60,8,3.0,b,2\n"
                     "30,5,4.0,a,2\n"
                     "10,7,9.0,a,3\n")
    reqs = build_requests({"trace": str(trace)}, 0)
    by_session: dict[str, list] = {}
    for r in reqs:
        by_session.setdefault(reqs.links.session_of[r.request_id], []).append(r)
    a, b = by_session.values()
    assert [r.prompt_len for r in a] == [100, 100 + 20 + 30, 150 + 5 + 10]
    assert [r.max_output_tokens for r in a] == [20, 5, 7]
    assert [r.prompt_len for r in b] == [50, 50 + 10 + 60]
    # Think times from the trace's timing (no measured latency column: the whole gap).
    assert reqs.links.next_turn[a[0].request_id] == (a[1].request_id, 4.0)
    assert reqs.links.next_turn[a[1].request_id] == (a[2].request_id, 5.0)
    assert reqs.links.next_turn[b[0].request_id] == (b[1].request_id, 2.5)


# --- simulating them -------------------------------------------------------------------------


def _toy_step_time(shape: StepShape) -> float:
    return 2e-3 + 3e-5 * shape.num_tokens + 1e-7 * shape.decode_context_tokens


def _run_direct(fast: bool, router: str = "prefix_aware"):
    reqs = build_requests(_workload(num_turns={"dist": "uniform", "min": 1, "max": 5},
                                    think_time_s={"dist": "exponential", "mean": 0.5}), seed=1)
    schedulers = [make_scheduler("chunked", make_allocator("paged", num_slots=4096, block_size=16,
                                                           prefix_caching=True, max_model_len=2048),
                                 max_model_len=2048, max_num_batched_tokens=512)
                  for _ in range(3)]
    links = reqs.links
    sim = Simulation(reqs, schedulers, _toy_step_time,
                     router=Router(router, session_affinity=True), fast_decode=fast,
                     next_turn=links.next_turn, session_of=links.session_of)
    sim.run()
    return sim, reqs, schedulers


def test_every_turn_is_accounted_for_and_no_block_leaks():
    sim, reqs, schedulers = _run_direct(fast=True)
    assert sim.num_finished == len(reqs)
    assert sorted(r.request_id for r in sim.finished) == sorted(r.request_id for r in reqs)
    for r in reqs:
        assert r.state is RequestState.FINISHED
    for s in schedulers:
        a = s.allocator
        assert a.pool.num_free == a.pool.num_blocks
        assert not a.req_blocks and a.pool.num_shared_refs == 0
    # Later turns found their previous prompt cached.
    assert sum(r.num_cached_tokens for r in reqs) > 0


def test_a_turn_arrives_after_its_parent_finished_plus_think_time():
    sim, reqs, _ = _run_direct(fast=True)
    by_id = {r.request_id: r for r in reqs}
    for parent_id, (child_id, think) in reqs.links.next_turn.items():
        parent, child = by_id[parent_id], by_id[child_id]
        assert child.arrival_time == pytest.approx(parent.finish_time + think)
        assert child.first_scheduled_time >= parent.finish_time + think - 1e-12


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "prefix_aware"])
def test_bulk_decode_is_exact_with_sessions(router):
    outcomes = []
    for fast in (True, False):
        sim, reqs, _ = _run_direct(fast, router)
        outcomes.append(([(r.arrival_time, r.finish_time, list(r.token_times), r.num_cached_tokens)
                          for r in reqs], sim.log.columns()))
    assert outcomes[0] == outcomes[1]


def test_a_rejected_turn_ends_its_session():
    # Prompts 100, 250, 400, 550, 700 with 50 output tokens each: turn 4 needs 600 > 500.
    sets = ["workload.num_requests=3", "workload.input_len={dist: fixed, mean: 100}",
            "workload.output_len={dist: fixed, mean: 50}", "kv_cache.max_model_len=500",
            "workload.sessions={num_turns: {dist: fixed, mean: 5}, think_time_s: 0.5, "
            "new_message_len: {dist: fixed, mean: 100}}", "cost_model.source=roofline"]
    res = simulate(None, overrides=sets)
    links = res.extra["session_links"]
    for r in res.requests:
        turn = links.turn_of[r.request_id]
        assert r.state is (RequestState.FINISHED if turn <= 3 else RequestState.REJECTED)
        if turn == 5:
            assert "session ended" in r.reject_reason
    s = res.summary
    assert (s["completed"], s["rejected"]) == (9, 6)
    assert s["sessions"] == {"num_sessions": 3, "num_turns": 15, "mean_turns": 5.0,
                             "max_turns": 5, "completed_sessions": 0}


def test_multi_replica_sessions_same_seed_same_result():
    a = simulate(None, overrides=SIM + ["parallel.router=prefix_aware",
                                        "parallel.session_affinity=true"])
    b = simulate(None, overrides=SIM + ["parallel.router=prefix_aware",
                                        "parallel.session_affinity=true"])
    strip = lambda s: {k: v for k, v in s.items() if k != "simulator"}  # noqa: E731
    assert strip(a.summary) == strip(b.summary)
    s = a.summary
    assert s["completed"] + s["rejected"] == s["num_requests"] == s["sessions"]["num_turns"]
    assert s["sessions"]["num_sessions"] == 60
    aff = s["sessions"]["affinity"]
    assert aff["kept"] + aff["moved"] == s["num_requests"] - 60
    assert set(a.extra["replica_of"].values()) == {0, 1, 2}


def test_session_affinity_raises_the_hit_rate_of_a_load_balancer():
    rates = {}
    for affinity in ("false", "true"):
        s = simulate(None, overrides=SIM + ["parallel.router=least_outstanding",
                                            f"parallel.session_affinity={affinity}"]).summary
        rates[affinity] = s["kv_cache"]["prefix_cache_hit_rate"]
    assert rates["true"] > rates["false"] + 0.1, rates


def test_without_sessions_the_new_keys_change_nothing():
    base = ["workload.num_requests=80", "parallel.num_replicas=2", "cost_model.source=roofline",
            "parallel.router=least_outstanding"]
    plain = simulate(None, overrides=base).summary
    keyed = simulate(None, overrides=base + ["parallel.session_affinity=true",
                                             "parallel.router_prefix_weight=1"]).summary
    assert "sessions" not in plain
    plain.pop("scenario"), keyed.pop("scenario")
    assert plain == keyed


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("sessions, needle", [
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: 1, new_message_len: {dist: fixed, mean: 9}, turns: 3}",
     "workload.sessions.turns: unknown key"),
    ("{think_time_s: 1, new_message_len: {dist: fixed, mean: 9}}", "workload.sessions.num_turns: required"),
    ("{num_turns: {dist: fixed, mean: 3}, new_message_len: {dist: fixed, mean: 9}}",
     "workload.sessions.think_time_s: required"),
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: 1}", "workload.sessions.new_message_len: required"),
    ("{num_turns: {mean: 3}, think_time_s: 1, new_message_len: {dist: fixed, mean: 9}}",
     "workload.sessions.num_turns.dist: required"),
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: {dist: weibull, mean: 1}, new_message_len: {dist: fixed, mean: 9}}",
     "workload.sessions.think_time_s.dist"),
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: {dist: uniform, min: 1}, new_message_len: {dist: fixed, mean: 9}}",
     "workload.sessions.think_time_s.max: required"),
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: -1, new_message_len: {dist: fixed, mean: 9}}",
     "workload.sessions.think_time_s"),
    ("{num_turns: {dist: fixed, mean: 3}, think_time_s: 1, new_message_len: {dist: fixed, mean: 9}, hash_block_size: 0}",
     "workload.sessions.hash_block_size"),
    ("3", "workload.sessions: expected a mapping"),
])
def test_bad_session_keys_are_one_line_config_errors_naming_the_key(sessions, needle):
    with pytest.raises(ConfigError) as err:
        simulate(None, overrides=["workload.num_requests=5", f"workload.sessions={sessions}"])
    msg = str(err.value)
    assert needle in msg and "\n" not in msg, msg


def test_cli_simulate_with_sessions_exits_0():
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan.cli.main", "simulate", "--no-progress",
         "--set", "workload.num_requests=20", "--set", f"workload.sessions={SESSIONS}",
         "--set", "parallel.num_replicas=2", "--set", "parallel.router=prefix_aware",
         "--set", "parallel.session_affinity=true", "--set", "kv_cache.prefix_caching=true"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # the summary table says how many sessions and turns ran, and where affinity kept them
    assert "sessions / turns" in proc.stdout and "20 / " in proc.stdout
    assert "session affinity: turns kept / moved" in proc.stdout
