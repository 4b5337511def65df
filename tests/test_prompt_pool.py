"""``workload.prompt_pool``: a load tool's reused prompts (aiperf / genai-perf
``--num-dataset-entries``), and what a prefix cache makes of them."""

from __future__ import annotations

import numpy as np
import pytest

from sim.api import simulate
from sim.errors import ConfigError
from sim.workload import build_requests
from sim.workload.prompt_pool import PromptPool, entry_hashes, entry_order, hit_bound


def _workload(entries: int, sampling: str = "shuffle", n: int = 60, clients: int = 1, **extra) -> dict:
    return {"num_requests": n, "arrival": {"process": "closed", "concurrency": clients},
            "input_len": {"dist": "uniform", "min": 300, "max": 500},
            "output_len": {"dist": "uniform", "min": 4, "max": 8},
            "prompt_pool": {"entries": entries, "sampling": sampling}, **extra}


def _entries_of(requests) -> tuple[np.ndarray, np.ndarray]:
    """Which entry each request sent (entries numbered by first appearance) and their lengths."""
    ids: dict[tuple, int] = {}
    order, lens = [], {}
    for r in requests:
        e = ids.setdefault(tuple(r.block_hashes), len(ids))
        order.append(e)
        lens[e] = r.prompt_len
    return np.array(order), np.array([lens[e] for e in range(len(ids))])


def test_shuffle_sends_every_entry_once_per_pass_in_a_new_order():
    order = entry_order(25, PromptPool(entries=10), np.random.default_rng(0))
    passes = [order[0:10], order[10:20]]
    assert all(sorted(p.tolist()) == list(range(10)) for p in passes)
    assert passes[0].tolist() != passes[1].tolist()
    assert len(set(order[20:].tolist())) == 5  # the third pass begun: no repeats inside it


def test_sequential_cycles_and_random_draws_with_replacement():
    assert entry_order(7, PromptPool(entries=3, sampling="sequential"), np.random.default_rng(0)).tolist() \
        == [0, 1, 2, 0, 1, 2, 0]
    drawn = entry_order(1000, PromptPool(entries=10, sampling="random"), np.random.default_rng(0))
    assert set(drawn.tolist()) == set(range(10))
    # With replacement, the first 10 draws repeat an entry (probability 1 - 10!/10^10 ~ 0.9996).
    assert len(set(drawn[:10].tolist())) < 10


def test_entries_keep_their_lengths_and_share_blocks_only_with_their_repeats():
    reqs = build_requests(_workload(entries=5, n=40), seed=2)
    order, _ = _entries_of(reqs)
    assert len(set(order.tolist())) == 5
    by_entry: dict[int, set] = {}
    for r, e in zip(reqs, order.tolist()):
        by_entry.setdefault(e, set()).add((r.prompt_len, r.max_output_tokens))
    assert all(len(v) == 1 for v in by_entry.values())  # ISL and OSL drawn once per entry
    blocks = [set(r.block_hashes) for r in reqs]
    for i in range(len(reqs)):
        for j in range(len(reqs)):
            assert (blocks[i] & blocks[j]) == (blocks[i] if order[i] == order[j] else set())
    assert entry_hashes(np.array([33, 16]), 16) == [[0, 1, 2], [3]]


@pytest.mark.parametrize("sampling", ["shuffle", "random", "sequential"])
def test_one_client_hits_exactly_the_pools_bound(sampling):
    # One client: each request finishes before the next is sent, so with a pool this small every
    # repeat finds its entry cached. Hit tokens = every full block before the last token of every
    # repeat, nothing else.
    wl = _workload(entries=10, sampling=sampling)
    res = simulate({"model": "llama-3.1-8b", "hardware": "a100-80gb", "workload": wl,
                    "kv_cache": {"prefix_caching": True}, "cost_model": {"source": "roofline"}}, seed=0)
    order, lens = _entries_of(build_requests(wl, seed=0))
    prompt_tokens = sum(int(lens[e]) for e in order)
    expected = hit_bound(order, lens, 16) * 16 / prompt_tokens
    assert res.summary["completed"] == 60
    assert res.summary["kv_cache"]["prefix_cache_hit_rate"] == pytest.approx(expected, rel=1e-12)
    assert expected > 0.75  # 50 of 60 requests are repeats


def test_repeats_cut_ttft_where_prefix_caching_is_on():
    base = {"model": "llama-3.1-8b", "hardware": "a100-80gb", "cost_model": {"source": "roofline"},
            "kv_cache": {"prefix_caching": True}}
    pooled = simulate({**base, "workload": _workload(entries=10, clients=4)}, seed=0).summary
    fresh = simulate({**base, "workload": _workload(entries=10_000, clients=4)}, seed=0).summary
    off = simulate({**base, "kv_cache": {"prefix_caching": False}, "workload": _workload(entries=10, clients=4)},
                   seed=0).summary
    assert fresh["kv_cache"]["prefix_cache_hit_rate"] == 0
    # Repeats skip their prefill (the API server still tokenises every prompt, so not all of TTFT).
    assert pooled["mean_ttft_ms"] < 0.7 * fresh["mean_ttft_ms"]
    assert off["kv_cache"]["prefix_cache_hit_rate"] == 0
    assert off["mean_ttft_ms"] == pytest.approx(fresh["mean_ttft_ms"], rel=0.25)


def test_a_shared_prefix_applies_per_entry():
    wl = _workload(entries=6, n=30, prefix={"num_prefixes": 2, "length": 64, "hash_block_size": 16})
    reqs = build_requests(wl, seed=1)
    order, _ = _entries_of(reqs)
    assert len(set(order.tolist())) == 6
    firsts = {tuple(r.block_hashes[:4]) for r in reqs}
    assert len(firsts) == 2  # two system prompts of 4 blocks, shared across entries
    assert all(r.prompt_len >= 364 for r in reqs)


@pytest.mark.parametrize("pool, message", [
    ({}, "workload.prompt_pool.entries: required"),
    ({"entries": 0}, "workload.prompt_pool.entries"),
    ({"entries": 10, "sampling": "roundrobin"}, "workload.prompt_pool.sampling"),
    ({"entries": 10, "size": 3}, "workload.prompt_pool.size"),
])
def test_bad_pool_names_its_key(pool, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        build_requests({**_workload(entries=1), "prompt_pool": pool}, seed=0)


def test_a_trace_or_sessions_with_a_pool_is_an_error(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,100,10\n")
    with pytest.raises(ConfigError, match="prompt_pool"):
        build_requests({"trace": str(trace), "prompt_pool": {"entries": 3}}, seed=0)
    wl = _workload(entries=3)
    wl["arrival"] = {"process": "poisson", "rate": 1.0}
    wl["sessions"] = {"num_turns": {"dist": "fixed", "mean": 2}}
    with pytest.raises(ConfigError, match="prompt_pool"):
        build_requests(wl, seed=0)


def test_same_seed_same_requests():
    a = build_requests(_workload(entries=7), seed=5)
    b = build_requests(_workload(entries=7), seed=5)
    assert [(r.prompt_len, r.max_output_tokens, r.block_hashes) for r in a] == \
        [(r.prompt_len, r.max_output_tokens, r.block_hashes) for r in b]
