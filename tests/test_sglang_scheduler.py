"""SGLang's scheduler (``sim.policies.schedulers.sglang``): each behaviour on a case computed by
hand, then whole runs through the simulator with the invariants (every request accounted for,
no KV slot leaked, the fast path identical to step by step)."""

from __future__ import annotations

import pytest

from sim.policies import Request, StepResult
from sim.policies.kv import PagedAllocator
from sim.policies.schedulers import SchedulerConfig, SglangScheduler
from sim.policies.schedulers.sglang import (CLIP_MAX_NEW_TOKENS, INIT_NEW_TOKEN_RATIO,
                                            MIN_NEW_TOKEN_RATIO_FACTOR, NEW_TOKEN_RATIO_DECAY_STEPS,
                                            RETRACT_DECODE_STEPS)


def make(slots: int = 10_000, budget: int = 64, max_seqs: int = 64, **kw) -> SglangScheduler:
    # A page-1 token pool without a prefix cache: the policy's rules, not the radix cache's.
    alloc = PagedAllocator(slots, block_size=1)
    cfg = SchedulerConfig(max_model_len=32_768, max_num_seqs=max_seqs, max_num_batched_tokens=budget)
    return SglangScheduler(alloc, cfg, **kw)


def req(i: int, prompt: int, out: int, t: float = 0.0) -> Request:
    return Request(f"r{i}", t, prompt, out)


def step(s: SglangScheduler, now: float = 0.0):
    plan = s.schedule(now)
    finished = s.update(plan, StepResult(), now)
    return plan, finished


def shape(plan) -> list[tuple[str, int]]:
    return [(x.request.request_id, x.num_new_tokens) for x in plan.scheduled]


def test_prefill_runs_in_its_own_batch_and_stalls_decodes():
    s = make()
    s.add_request(req(0, 10, 5), 0.0)
    assert shape(step(s)[0]) == [("r0", 10)]
    assert shape(step(s)[0]) == [("r0", 1)]  # decoding
    s.add_request(req(1, 20, 5), 0.0)
    # Prefill first: r1's extend batch runs alone, r0 waits a step (no mixed chunk).
    assert shape(step(s)[0]) == [("r1", 20)]
    assert shape(step(s)[0]) == [("r0", 1), ("r1", 1)]


def test_mixed_chunk_puts_decodes_in_the_extend_batch_and_shrinks_its_budget():
    s = make(budget=16, enable_mixed_chunk=True)
    s.add_request(req(0, 8, 9), 0.0)
    s.add_request(req(1, 8, 9), 0.0)
    assert shape(step(s)[0]) == [("r0", 8), ("r1", 8)]
    s.add_request(req(2, 30, 5), 0.0)
    # Budget 16 minus 2 running decodes = 14 prompt tokens; the decodes ride along.
    plan, _ = step(s)
    assert shape(plan) == [("r2", 14), ("r0", 1), ("r1", 1)]


def test_one_chunked_request_at_a_time_and_it_goes_first():
    s = make(budget=8)
    s.add_request(req(0, 20, 3), 0.0)
    s.add_request(req(1, 20, 3), 0.0)
    assert shape(step(s)[0]) == [("r0", 8)]           # r0 is cut; no budget left for r1
    assert s.chunked_req is s.running[0]
    assert shape(step(s)[0]) == [("r0", 8)]           # its next chunk first
    assert shape(step(s)[0]) == [("r0", 4), ("r1", 4)]  # r0 done; r1 becomes the chunked one
    assert s.chunked_req is not None and s.chunked_req.request_id == "r1"
    # r1 still chunked: the extend batch (r1's chunk) runs again before r0 decodes.
    assert shape(step(s)[0]) == [("r1", 8)]


def _decay() -> float:
    return (INIT_NEW_TOKEN_RATIO - INIT_NEW_TOKEN_RATIO * MIN_NEW_TOKEN_RATIO_FACTOR) / NEW_TOKEN_RATIO_DECAY_STEPS


def _running_long(slots: int = 12_000) -> SglangScheduler:
    """r0: prompt 10, max_new 10000, prefilled (its first token out): it holds 10 + k slots
    after k decode steps and reserves min(9999 - k, 4096) x ratio = 4096 x ratio."""
    s = make(slots=slots, budget=8192)
    s.add_request(req(0, 10, 10_000), 0.0)
    step(s)
    return s


def test_admission_reserves_future_tokens_and_the_ratio_decays():
    """r1: prompt 5500, max_new 4000 needs 9500 < rem_total. After one decode step rem_total =
    (12000 - 11) - 4096 x (0.7 - decay) = 9125.9: refused, the batch is marked full, and r0
    decodes; the ratio falls by one decay per decode batch."""
    s = _running_long()
    assert shape(step(s)[0]) == [("r0", 1)]
    assert s.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO - _decay())
    s.add_request(req(1, 5500, 4000), 0.0)
    plan, _ = step(s)
    assert shape(plan) == [("r0", 1)] and s.batch_is_full
    assert s.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO - 2 * _decay())
    # batch_is_full holds until the decode batch shrinks: nobody finishes, so r1 keeps waiting
    # even after the ratio has fallen far enough to admit it (see the next test).
    for _ in range(200):
        assert shape(step(s)[0]) == [("r0", 1)]
    assert s.waiting and s.new_token_ratio < INIT_NEW_TOKEN_RATIO - 200 * _decay()


def test_admission_once_the_ratio_has_fallen():
    """The same r1 arriving after 130 decode steps: rem_total = (12000 - 140) - 4096 x
    (0.7 - 130 x decay) = 9527.3 > 9500: admitted at once."""
    s = _running_long()
    for _ in range(130):
        step(s)
    free = 12_000 - s.running[0].num_computed_tokens
    assert 5500 + 4000 < free - 4096 * s.new_token_ratio  # the rule, by hand
    assert 5500 + 4000 >= free - 4096 * INIT_NEW_TOKEN_RATIO  # refused at the initial ratio
    s.add_request(req(1, 5500, 4000), 0.0)
    assert shape(step(s)[0]) == [("r1", 5500)]


def test_clip_max_new_tokens_in_the_reservation():
    s = make(slots=30_000, budget=512)
    s.add_request(req(0, 10, 20_000), 0.0)
    step(s)
    assert s._reserved_by_running(s._decode_batch()) == pytest.approx(CLIP_MAX_NEW_TOKENS * INIT_NEW_TOKEN_RATIO)


def test_retraction_takes_fewest_outputs_then_longest_prompt_and_requeues():
    """Admission reserves a new request's whole max_new but a running one's only x ratio (here
    0.7 x 0.01): three requests admitted one step apart overcommit a 62-slot pool, and the
    decode batch runs out. Retraction pops the fewest outputs first (ties: longest prompt)
    until the rest have 20 slots each free, keeping at least one."""
    s = make(slots=62, budget=512, schedule_conservativeness=0.01)
    s.add_request(req(0, 10, 30), 0.0)
    assert shape(step(s)[0]) == [("r0", 10)]
    s.add_request(req(1, 14, 30), 0.0)
    assert shape(step(s)[0]) == [("r1", 14)]   # 14 + 30 < 62 - 10 - 29 x 0.007
    s.add_request(req(2, 4, 30), 0.0)
    assert shape(step(s)[0]) == [("r2", 4)]
    for _ in range(40):
        before = {r.request_id: (r.num_output_tokens, r.prompt_len, r.num_computed_tokens)
                  for r in s.running}
        free = s.allocator.num_free_slots
        plan, _ = step(s)
        if plan.preempted:
            break
    else:
        pytest.fail("the pool never ran out")
    # The rule, by hand on the state before the step.
    order = sorted(before, key=lambda k: (before[k][0], -before[k][1]))
    expected, left = [], list(order)
    while len(left) > 1:
        victim = left.pop(0)
        expected.append(victim)
        free += before[victim][2]
        if free >= RETRACT_DECODE_STEPS * len(left):
            break
    assert [r.request_id for r in plan.preempted] == expected
    assert [r.request_id for r in s.waiting][-len(expected):] == expected  # the end of the queue
    keep = [r for r in s.running]
    assert sorted(r.request_id for r in keep) == sorted(left)
    decoded = sum(before[r.request_id][0] for r in keep)
    assert s.new_token_ratio == pytest.approx(min(1.0, (decoded + RETRACT_DECODE_STEPS * len(keep)) / (30 * len(keep))))
    assert all(r.num_computed_tokens == 0 for r in s.waiting)
    # By hand: the prefills stalled r0's decodes (prefill first), so all three have 12 outputs
    # when the pool runs out (1 slot free): the longest prompt goes first, r1 (14 tokens, 25
    # slots) leaving 26 < 2 x 20, then r0 (10, 21 slots) leaving 47 >= 20.
    assert expected == ["r1", "r0"]
    # Everyone still finishes, and the pool is whole at the end.
    for _ in range(2000):
        if not s.has_unfinished():
            break
        step(s)
    assert not s.has_unfinished()
    assert s.allocator.num_free_slots == 62


def test_max_running_requests_marks_the_batch_full():
    s = make(max_seqs=2)
    for i in range(3):
        s.add_request(req(i, 5, 3), 0.0)
    assert shape(step(s)[0]) == [("r0", 5), ("r1", 5)]
    assert s.batch_is_full and len(s.waiting) == 1


def test_queue_orders():
    s = make(schedule_policy="lof")
    s.add_request(req(0, 5, 3), 0.0)
    s.add_request(req(1, 5, 30), 0.0)
    s.add_request(req(2, 5, 10), 0.0)
    assert [r.request_id for r in s._ordered_waiting()] == ["r1", "r2", "r0"]
    fc = make()
    for i, out in enumerate((3, 30, 10)):
        fc.add_request(req(i, 5, out), 0.0)
    assert [r.request_id for r in fc._ordered_waiting()] == ["r0", "r1", "r2"]
    # Without a prefix cache lpm has nothing to match: SGLang falls back to FCFS.
    assert make(schedule_policy="lpm").schedule_policy == "fcfs"


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="schedule_policy"):
        make(schedule_policy="sjf")


def test_ratio_resets_when_idle():
    s = make()
    s.add_request(req(0, 5, 4), 0.0)
    for _ in range(4):   # a prefill, then three decode batches
        step(s)
    assert not s.has_unfinished()
    assert s.new_token_ratio == pytest.approx(s.init_new_token_ratio - 3 * _decay())
    step(s)
    assert s.new_token_ratio == s.init_new_token_ratio


# --- cache-aware queue orders over the radix cache -------------------------------------------

def _radix_sched(policy: str) -> SglangScheduler:
    from sim.policies.kv import RadixAllocator

    alloc = RadixAllocator(10_000, block_size=1, prefix_caching=True)
    cfg = SchedulerConfig(max_model_len=4096, max_num_seqs=64, max_num_batched_tokens=4096)
    return SglangScheduler(alloc, cfg, schedule_policy=policy)


def _ids(prefix: list[int], n: int, seed: int) -> list[int]:
    import random as _r

    rng = _r.Random(seed)
    return prefix + [rng.randrange(1000, 2000) for _ in range(n)]


def _cache(s: SglangScheduler, rid: str, tokens: list[int]) -> None:
    """Serve one request to completion so its tokens sit in the tree."""
    s.add_request(Request(rid, 0.0, len(tokens), 1, prompt_token_ids=tokens), 0.0)
    while s.has_unfinished():
        step(s)


def test_lpm_puts_the_longest_cached_prefix_first():
    s = _radix_sched("lpm")
    a, b = list(range(1, 41)), list(range(100, 111))
    _cache(s, "warm-a", _ids(a, 5, 1))     # 40 tokens of prefix a cached
    _cache(s, "warm-b", _ids(b, 5, 2))     # 11 tokens of prefix b cached
    waiting = [Request("none", 0.0, 30, 4, prompt_token_ids=_ids([], 30, 3)),
               Request("b", 0.0, 31, 4, prompt_token_ids=_ids(b, 20, 4)),
               Request("a", 0.0, 50, 4, prompt_token_ids=_ids(a, 10, 5))]
    for r in waiting:
        s.add_request(r, 0.0)
    # By hand: matches a 40, b 11, none 0 -> a, b, none (FCFS would keep none, b, a).
    assert [r.request_id for r in s._ordered_waiting()] == ["a", "b", "none"]
    plan = s.schedule(0.0)
    assert [(x.request.request_id, x.num_new_tokens) for x in plan.scheduled] == [("a", 10), ("b", 20), ("none", 30)]


def test_lpm_is_fcfs_above_128_waiting():
    s = _radix_sched("lpm")
    prefix = list(range(1, 21))
    _cache(s, "warm", _ids(prefix, 2, 0))
    for i in range(129):
        ids = _ids(prefix if i == 128 else [], 10, 100 + i)
        s.add_request(Request(f"q{i}", 0.0, len(ids), 2, prompt_token_ids=ids), 0.0)
    assert s._ordered_waiting()[0].request_id == "q0"   # the cached one (q128) is not moved up


def test_dfs_weight_walks_the_heavier_subtree_first():
    s = _radix_sched("dfs-weight")
    x, y = list(range(1, 21)), list(range(300, 320))
    _cache(s, "warm-x", _ids(x, 3, 1))
    _cache(s, "warm-y", _ids(y, 3, 2))
    # One waiting request under x, two under y, one matching nothing: y's subtree weighs 2.
    for rid, ids in (("x1", _ids(x, 8, 3)), ("none", _ids([], 8, 4)), ("y1", _ids(y, 8, 5)),
                     ("y2", _ids(y, 9, 6))):
        s.add_request(Request(rid, 0.0, len(ids), 2, prompt_token_ids=ids), 0.0)
    order = [r.request_id for r in s._ordered_waiting()]
    assert order[:2] in (["y1", "y2"], ["y2", "y1"]) and order[2:] == ["x1", "none"]


def test_chunked_prefill_size_and_conservativeness_reach_the_policy():
    s = make(budget=24, schedule_conservativeness=0.5)
    assert s.budget == 24
    assert s.new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO * 0.5)
    assert s.min_new_token_ratio == pytest.approx(INIT_NEW_TOKEN_RATIO * 0.5 * MIN_NEW_TOKEN_RATIO_FACTOR)
    s.add_request(req(0, 60, 2), 0.0)
    assert shape(step(s)[0]) == [("r0", 24)]
    assert make(schedule_conservativeness=5.0).init_new_token_ratio == 1.0   # capped at 1


def test_lpm_holds_back_a_request_sharing_an_uncached_prefix_with_one_ahead():
    """SGLang's in-batch prefix caching: A and B share 40 uncached tokens (>= 32), so B waits
    behind C until A has put them in the cache; with 20 shared tokens (< 32) nothing moves."""
    for shared, expected in ((40, ["A", "C", "B"]), (20, ["A", "B", "C"])):
        s = _radix_sched("lpm")
        common = list(range(500, 500 + shared))
        for rid, ids in (("A", _ids(common, 10, 1)), ("B", _ids(common, 12, 2)), ("C", _ids([], 30, 3))):
            s.add_request(Request(rid, 0.0, len(ids), 2, prompt_token_ids=ids), 0.0)
        assert [r.request_id for r in s._ordered_waiting()] == expected, shared
