"""The simpy executor: the bulk-decode fast path is exact, runs are reproducible, every request
is accounted for, and the KV breakdown adds up."""

from __future__ import annotations

import math

import pytest

from sim.api import simulate
from sim.policies import RequestState

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
