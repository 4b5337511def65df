"""Routers (sim.policies.router): every policy's choice on small constructed replicas, worked by
hand, and prefix-aware routing on the Mooncake trace against a load-only router."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from sim.api import simulate
from sim.policies.request import Request
from sim.policies.router import ROUTERS, Router
from sim.workload import build_requests

MOONCAKE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"


@dataclass
class Fake:
    """A replica as a router sees it: outstanding requests, free KV fraction, cached prefix."""

    num_unfinished: int = 0
    kv_free_fraction: float = 1.0
    cached: int = 0  # leading prompt tokens its prefix cache holds

    def cached_prefix_tokens(self, req: Request) -> int:
        return min(self.cached, req.prompt_len)


def _req(prompt_len: int = 100, rid: str = "r") -> Request:
    return Request(rid, 0.0, prompt_len, 10)


def test_round_robin_takes_replicas_in_turn_whatever_their_state():
    router = Router("round_robin")
    replicas = [Fake(num_unfinished=9), Fake(), Fake(kv_free_fraction=0.0)]
    assert [router.route(_req(), replicas) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_picks_the_fewest_requests_ties_to_the_lowest_index():
    router = Router("least_outstanding")
    assert router.route(_req(), [Fake(3), Fake(1), Fake(2)]) == 1
    assert router.route(_req(), [Fake(2), Fake(1), Fake(1)]) == 1
    assert router.route(_req(), [Fake(0), Fake(0)]) == 0


def test_least_kv_picks_the_most_free_memory_ties_to_the_lowest_index():
    router = Router("least_kv")
    assert router.route(_req(), [Fake(kv_free_fraction=0.2), Fake(kv_free_fraction=0.7),
                                 Fake(kv_free_fraction=0.5)]) == 1
    assert router.route(_req(), [Fake(kv_free_fraction=0.3), Fake(kv_free_fraction=0.6),
                                 Fake(kv_free_fraction=0.6)]) == 1
    # Memory only: a busier replica with more free KV wins.
    assert router.route(_req(), [Fake(0, 0.5), Fake(50, 0.51)]) == 1


def test_one_replica_is_always_chosen():
    for policy in ROUTERS:
        assert Router(policy).route(_req(), [Fake(100, 0.0)]) == 0


def test_prefix_aware_scores_by_hand():
    """3 * cached fraction + 2 * min-max normalised load + 2 * free KV."""
    router = Router("prefix_aware")
    replicas = [Fake(num_unfinished=2, kv_free_fraction=0.5, cached=50),
                Fake(num_unfinished=6, kv_free_fraction=0.25, cached=100),
                Fake(num_unfinished=4, kv_free_fraction=1.0, cached=0)]
    # q_min 2, q_max 6: load = (6 - q) / 4 -> 1, 0, 0.5.
    expected = [3 * 0.5 + 2 * 1.0 + 2 * 0.5,     # 4.5
                3 * 1.0 + 2 * 0.0 + 2 * 0.25,    # 3.5
                3 * 0.0 + 2 * 0.5 + 2 * 1.0]     # 3.0
    assert router.scores(_req(100), replicas) == pytest.approx(expected)
    assert router.route(_req(100), replicas) == 0


def test_prefix_aware_load_is_one_everywhere_when_all_queues_are_equal():
    router = Router("prefix_aware")
    replicas = [Fake(5, 0.5, 0), Fake(5, 0.5, 40)]
    assert router.scores(_req(100), replicas) == pytest.approx([0 + 2 + 1, 3 * 0.4 + 2 + 1])
    assert router.route(_req(100), replicas) == 1


def test_a_full_prefix_match_beats_the_widest_load_gap_but_not_load_and_memory_together():
    router = Router("prefix_aware")
    # Same free memory: the cached replica (3 + 0 + 2 = 5) beats the idle one (0 + 2 + 2 = 4).
    assert router.route(_req(100), [Fake(0, 1.0, 0), Fake(30, 1.0, 100)]) == 1
    # The cached replica is also out of KV memory: 3 + 0 + 0 = 3 < 0 + 2 + 2 = 4.
    assert router.route(_req(100), [Fake(0, 1.0, 0), Fake(30, 0.0, 100)]) == 0
    # Half of the prompt cached is worth 1.5: not enough against the load gap alone.
    assert router.route(_req(100), [Fake(0, 1.0, 0), Fake(30, 1.0, 50)]) == 0


def test_prefix_aware_ties_go_to_the_lowest_index():
    router = Router("prefix_aware")
    # 3 * 0.5 + 2 * 1 + 2 * 0.25 = 4 on replica 0; 3 * 0 + 2 * 1 + 2 * 1 = 4 on replica 1.
    assert router.route(_req(100), [Fake(1, 0.25, 50), Fake(1, 1.0, 0)]) == 0
    assert router.route(_req(100), [Fake(1, 1.0, 0), Fake(1, 0.25, 50)]) == 0


def test_prefix_aware_weights_change_the_choice_and_zero_weights_are_allowed():
    replicas = [Fake(0, 1.0, 0), Fake(30, 1.0, 100)]
    assert Router("prefix_aware", load_weight=4.0).route(_req(100), replicas) == 0
    assert Router("prefix_aware", prefix_weight=0.0).route(_req(100), replicas) == 0
    assert Router("prefix_aware", load_weight=0.0, kv_weight=0.0).route(_req(100), replicas) == 1


@pytest.mark.parametrize("kwargs", [
    {"prefix_weight": -1.0}, {"load_weight": -0.5}, {"kv_weight": float("nan")},
    {"affinity_abs_threshold": -1}, {"affinity_rel_threshold": 0.5},
])
def test_bad_router_options_are_value_errors(kwargs):
    with pytest.raises(ValueError):
        Router("prefix_aware", **kwargs)


def test_unknown_policy_is_a_value_error_naming_the_choices():
    with pytest.raises(ValueError, match="round_robin"):
        Router("random")


def test_session_affinity_sticks_to_the_replica_of_the_previous_turn():
    router = Router("least_outstanding", session_affinity=True)
    replicas = [Fake(0), Fake(1), Fake(2)]
    assert router.route(_req(), replicas, session="s") == 0  # first turn: the policy picks
    replicas[0].num_unfinished = 10  # busier now, but well within the thresholds
    assert router.route(_req(), replicas, session="s") == 0
    assert router.route(_req(), replicas, session="t") == 1  # another session: the policy
    assert router.route(_req(), replicas) == 1  # no session: the policy
    assert (router.num_affinity_hits, router.num_affinity_fallbacks) == (1, 0)


def test_without_affinity_a_session_is_routed_by_the_policy():
    router = Router("least_outstanding")
    replicas = [Fake(0), Fake(1)]
    assert router.route(_req(), replicas, session="s") == 0
    replicas[0].num_unfinished = 5
    assert router.route(_req(), replicas, session="s") == 1


@pytest.mark.parametrize("q_sticky, q_min, moves", [
    (74, 10, False),   # gap 64: not more than abs 64
    (75, 10, True),    # gap 65 > 64 and 75 > 1.5 * 10
    (195, 130, False),  # gap 65 > 64, but 195 is not more than 1.5 * 130
    (196, 130, True),  # gap 66 > 64 and 196 > 195
])
def test_session_affinity_falls_back_only_past_both_default_thresholds(q_sticky, q_min, moves):
    router = Router("round_robin", session_affinity=True)
    replicas = [Fake(0), Fake(0)]
    assert router.route(_req(), replicas, session="s") == 0
    replicas[0].num_unfinished, replicas[1].num_unfinished = q_sticky, q_min
    assert router.overloaded(0, replicas) is moves
    # Falling back, round robin's next pick is replica 1.
    assert router.route(_req(), replicas, session="s") == (1 if moves else 0)


def test_session_affinity_relative_threshold_alone_keeps_the_session():
    router = Router("least_outstanding", session_affinity=True, affinity_abs_threshold=10,
                    affinity_rel_threshold=2.0)
    replicas = [Fake(0), Fake(1)]
    assert router.route(_req(), replicas, session="s") == 0
    # Gap 30 > 10, but 130 <= 2 * 100: not overloaded.
    replicas[0].num_unfinished, replicas[1].num_unfinished = 130, 100
    assert router.route(_req(), replicas, session="s") == 0
    # 201 > 2 * 100 and gap 101 > 10: moves to the least loaded, and the session follows.
    replicas[0].num_unfinished = 201
    assert router.route(_req(), replicas, session="s") == 1
    replicas[0].num_unfinished = 90  # the session's replica is now 1: gap 10, not past 10
    assert router.route(_req(), replicas, session="s") == 1
    assert (router.num_affinity_hits, router.num_affinity_fallbacks) == (2, 1)


def _mooncake(first: int, end: int) -> list[Request]:
    """Rows ``first .. end-1`` of the Mooncake trace (a stretch where prompts reuse prefixes),
    arrivals rebased to 0."""
    rows = build_requests({"trace": str(MOONCAKE), "num_requests": end}, 0)[first:end]
    t0 = rows[0].arrival_time
    return [Request(r.request_id, r.arrival_time - t0, r.prompt_len, r.max_output_tokens,
                    block_hashes=r.block_hashes, hash_block_size=r.hash_block_size) for r in rows]


@pytest.mark.skipif(not MOONCAKE.exists(), reason="needs ../shared/traces")
def test_prefix_aware_raises_the_hit_rate_on_mooncake_over_least_outstanding():
    reqs = _mooncake(3000, 3300)
    base = ["model=llama-3.1-8b", "hardware=h100-sxm", "cost_model.source=roofline",
            "scheduler.policy=chunked", "kv_cache.prefix_caching=true",
            "kv_cache.max_model_len=131072", "parallel.num_replicas=4"]
    rates = {}
    for router in ("least_outstanding", "prefix_aware"):
        sets = [f"parallel.router={router}", "parallel.session_affinity=true"]
        s = simulate(None, overrides=base + sets, requests=reqs).summary
        assert s["completed"] + s["rejected"] == len(reqs)
        rates[router] = s["kv_cache"]["prefix_cache_hit_rate"]
    assert rates["prefix_aware"] > rates["least_outstanding"] + 0.05, rates
