"""Invariants of the shared serving policies under random workloads (hypothesis).

No block leaked or freed twice, ref counts exact, a prefix-cache hit always holds the tokens it
claims, every request ends finished or rejected with its exact token counts.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.policies import Request, RequestState
from sim.policies.kv import ContiguousAllocator, PagedAllocator, make_allocator
from sim.policies.schedulers import make_scheduler
from tests.policy_driver import ShadowDriver

POLICIES = ["static", "orca", "vllm_v0", "chunked"]


def make_requests(rng: random.Random, n: int, max_prompt: int, max_out: int, vocab: int = 4,
                  shared_prefix: int = 0) -> list[Request]:
    prefixes = [[rng.randint(1, vocab) for _ in range(shared_prefix)] for _ in range(3)]
    reqs = []
    for i in range(n):
        body = [rng.randint(1, vocab) for _ in range(rng.randint(1, max_prompt))]
        prompt = (rng.choice(prefixes) if shared_prefix else []) + body
        reqs.append(Request(str(i), float(i), len(prompt), rng.randint(1, max_out), prompt_token_ids=prompt))
    return reqs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(POLICIES),
    block_size=st.sampled_from([1, 2, 4, 8, 16]),
    num_slots=st.integers(64, 600),
    prefix_caching=st.booleans(),
    preemption=st.sampled_from(["recompute", "swap"]),
    budget=st.sampled_from([None, 8, 64]),
    queue_policy=st.sampled_from(["fcfs", "priority"]),
    max_num_seqs=st.integers(1, 12),
    stop_prob=st.sampled_from([0.0, 0.1]),
    seed=st.integers(0, 10_000),
)
def test_paged_schedulers_account_for_every_token_and_block(policy, block_size, num_slots, prefix_caching,
                                                            preemption, budget, queue_policy, max_num_seqs, stop_prob,
                                                            seed):
    if policy == "static":
        preemption = "recompute"
    if policy != "chunked" and budget is not None:
        budget = None  # non-chunked budgets must hold a whole prompt
    rng = random.Random(seed)
    max_model_len = 64
    alloc = PagedAllocator(num_slots, block_size=block_size, prefix_caching=prefix_caching,
                           swap_slots=num_slots // 2)
    sched = make_scheduler(policy, alloc, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=budget, preemption=preemption, queue_policy=queue_policy)
    reqs = make_requests(rng, 25, 50, 30, shared_prefix=rng.choice([0, 8, 20]))
    if queue_policy == "priority":
        for r in reqs:
            r.priority = rng.randint(0, 2)
    accepted = [r for r in reqs if sched.add_request(r, 0.0)]
    driver = ShadowDriver(sched, stop_prob=stop_prob, seed=seed)
    driver.run()
    # Every request is accounted for exactly once.
    assert sorted(r.request_id for r in driver.finished) == sorted(r.request_id for r in accepted)
    for r in reqs:
        assert r.state in (RequestState.FINISHED, RequestState.REJECTED)
        if r.state is RequestState.REJECTED:
            assert r.reject_reason and r.max_total_tokens > max_model_len or "KV pool" in r.reject_reason
            continue
        assert len(r.output_token_ids) == r.num_output_tokens == len(r.token_times)
        if r.finish_reason == "length":
            assert r.num_output_tokens == r.max_output_tokens
        else:
            assert r.finish_reason == "stop" and 1 <= r.num_output_tokens <= r.max_output_tokens
        assert list(r.token_times) == sorted(r.token_times)
    # Nothing leaked: every block back in the free queue, no host blocks held.
    assert alloc.pool.num_free == alloc.pool.num_blocks
    assert not alloc.req_blocks and not alloc.host_blocks
    assert alloc.pool.num_shared_refs == 0


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(POLICIES), reserve=st.sampled_from(["max", "pow2", "oracle"]),
       num_slots=st.integers(64, 500), seed=st.integers(0, 10_000))
def test_contiguous_address_space_never_overlaps_or_leaks(policy, reserve, num_slots, seed):
    rng = random.Random(seed)
    alloc = ContiguousAllocator(num_slots, reserve=reserve, max_model_len=64)
    sched = make_scheduler(policy, alloc, max_model_len=64, max_num_seqs=8)
    reqs = make_requests(rng, 20, 40, 30)
    for r in reqs:
        sched.add_request(r, 0.0)
    driver = ShadowDriver(sched, use_token_ids=False)
    driver.run()
    assert alloc.num_free_slots == num_slots and alloc.free_extents == [(0, num_slots)]
    assert sched.num_preemptions == 0  # contiguous reservation never runs out mid-request
    for r in reqs:
        if r.state is RequestState.FINISHED:
            assert r.num_output_tokens == r.max_output_tokens


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["alloc", "grow", "free", "cache"]),
                              st.integers(0, 7), st.integers(1, 40)), max_size=80),
       block_size=st.sampled_from([1, 4, 16]), prefix=st.booleans())
def test_block_pool_random_operations_keep_refcounts_exact(ops, block_size, prefix):
    """Raw allocator calls in any order: allocate-or-nothing, exact ref counts, no double free."""
    alloc = PagedAllocator(128, block_size=block_size, prefix_caching=prefix)
    reqs = {i: Request(str(i), 0.0, 40, 10, prompt_token_ids=[1 + (i % 2)] * 40) for i in range(8)}
    for op, i, n in ops:
        req = reqs[i]
        if op == "alloc" and not alloc.holds(req):
            req.num_computed_tokens = 0
            hit = alloc.lookup_prefix(req)
            free_before = alloc.num_free_slots
            can = alloc.can_allocate(req, n, hit)
            ok = alloc.allocate(req, n, hit)
            assert ok == can
            if ok:
                req.num_computed_tokens = hit.num_tokens
            else:
                assert alloc.num_free_slots == free_before and not alloc.holds(req)
        elif op == "grow" and alloc.holds(req):
            if alloc.allocate(req, n):
                req.num_computed_tokens = min(req.num_computed_tokens + n, req.prompt_len)
        elif op == "cache" and alloc.holds(req):
            alloc.cache_full_blocks(req)
        elif op == "free":
            alloc.free(req)
        alloc.check_invariants()
    for req in reqs.values():
        alloc.free(req)
    alloc.check_invariants()
    assert alloc.pool.num_free == alloc.pool.num_blocks


def test_prefix_hit_skips_full_blocks_but_recomputes_last_token():
    alloc = PagedAllocator(256, block_size=4, prefix_caching=True)
    sched = make_scheduler("chunked", alloc, max_model_len=64)
    a = Request("a", 0.0, 12, 2, prompt_token_ids=list(range(1, 13)))
    sched.add_request(a, 0.0)
    drive = ShadowDriver(sched)
    drive.run()
    # Same 12-token prompt: 3 full blocks cached, but the last token must be recomputed, so 2 hit.
    b = Request("b", 1.0, 12, 2, prompt_token_ids=list(range(1, 13)))
    c = Request("c", 1.0, 13, 2, prompt_token_ids=list(range(1, 14)))
    d = Request("d", 1.0, 12, 2, prompt_token_ids=[99] + list(range(2, 13)))
    for r in (b, c, d):
        sched.add_request(r, 1.0)
    drive.run()
    assert b.num_cached_tokens == 8
    assert c.num_cached_tokens == 12
    assert d.num_cached_tokens == 0  # a different first token changes every block's hash
    assert alloc.num_prefix_hits == 20 and alloc.num_prefix_queries == 12 * 3 + 13


def test_trace_block_hashes_share_prefixes_without_token_ids():
    alloc = PagedAllocator(4096, block_size=16, prefix_caching=True)
    sched = make_scheduler("chunked", alloc, max_model_len=4096)
    a = Request("a", 0.0, 1100, 1, block_hashes=[7, 8, 9], hash_block_size=512)
    b = Request("b", 0.0, 1100, 1, block_hashes=[7, 8, 10], hash_block_size=512)
    drive = ShadowDriver(sched, use_token_ids=False)
    sched.add_request(a, 0.0)
    drive.run()
    sched.add_request(b, 1.0)
    drive.run()
    assert b.num_cached_tokens == 1024  # the two shared 512-token blocks, in 16-token blocks


def test_lru_eviction_keeps_recently_used_prefix():
    alloc = PagedAllocator(8 * 4, block_size=4, prefix_caching=True)
    sched = make_scheduler("chunked", alloc, max_model_len=32)
    drive = ShadowDriver(sched)
    for name, tok in (("x", 1), ("y", 2)):
        sched.add_request(Request(name, 0.0, 9, 1, prompt_token_ids=[tok] * 9), 0.0)
        drive.run()
    # Reuse x's prefix so y's blocks are the least recently freed, then force evictions.
    sched.add_request(Request("x2", 0.0, 9, 1, prompt_token_ids=[1] * 9), 0.0)
    drive.run()
    sched.add_request(Request("z", 0.0, 21, 1, prompt_token_ids=[3] * 21), 0.0)  # needs 6 of 8 blocks
    drive.run()
    x3 = Request("x3", 0.0, 9, 1, prompt_token_ids=[1] * 9)
    y2 = Request("y2", 0.0, 9, 1, prompt_token_ids=[2] * 9)
    assert alloc.lookup_prefix(x3).num_tokens == 8
    assert alloc.lookup_prefix(y2).num_tokens == 0  # least recently used: evicted


def test_oversize_request_rejected_with_reason_others_finish():
    alloc = make_allocator("paged", num_slots=64, block_size=8)
    sched = make_scheduler("chunked", alloc, max_model_len=48)
    ok = Request("ok", 0.0, 10, 5, prompt_token_ids=[1] * 10)
    too_long = Request("long", 0.0, 40, 20, prompt_token_ids=[1] * 40)
    assert sched.add_request(ok, 0.0)
    assert not sched.add_request(too_long, 0.0)
    assert too_long.state is RequestState.REJECTED and "max_model_len 48" in too_long.reject_reason
    ShadowDriver(sched).run()
    assert ok.state is RequestState.FINISHED and ok.num_output_tokens == 5


def test_request_bigger_than_pool_is_rejected():
    alloc = make_allocator("paged", num_slots=32, block_size=8)
    sched = make_scheduler("chunked", alloc, max_model_len=100)
    r = Request("big", 0.0, 30, 10)
    assert not sched.add_request(r, 0.0)
    assert "KV pool has 32" in r.reject_reason


def test_abort_frees_blocks():
    alloc = make_allocator("paged", num_slots=128, block_size=4)
    sched = make_scheduler("chunked", alloc, max_model_len=64)
    r = Request("r", 0.0, 20, 10, prompt_token_ids=[1] * 20)
    sched.add_request(r, 0.0)
    drive = ShadowDriver(sched)
    drive.step()
    assert alloc.num_free_slots < 128
    assert sched.abort("r", 1.0) is r
    assert r.finish_reason == "abort" and alloc.num_free_slots == 128
    assert not sched.has_unfinished()


def test_chunked_prefill_respects_token_budget_and_puts_decodes_first():
    alloc = make_allocator("paged", num_slots=4096, block_size=16)
    sched = make_scheduler("chunked", alloc, max_model_len=2048, max_num_batched_tokens=64)
    sched.add_request(Request("short", 0.0, 10, 50), 0.0)
    drive = ShadowDriver(sched, use_token_ids=False)
    drive.step()
    sched.add_request(Request("long", 1.0, 500, 5), 1.0)
    plan = sched.schedule(drive.now)
    assert plan.scheduled[0].request.request_id == "short" and plan.scheduled[0].num_new_tokens == 1
    assert plan.scheduled[1].num_new_tokens == 63 and plan.scheduled[1].is_prefill
    assert plan.num_scheduled_tokens == 64


def test_vllm_v0_never_mixes_prefill_and_decode():
    alloc = make_allocator("paged", num_slots=8192, block_size=16)
    sched = make_scheduler("vllm_v0", alloc, max_model_len=1024)
    rng = random.Random(1)
    for r in make_requests(rng, 30, 200, 40):
        sched.add_request(r, 0.0)
    drive = ShadowDriver(sched)
    while sched.has_unfinished():
        plan = sched.schedule(drive.now)
        kinds = {s.is_prefill for s in plan.scheduled}
        assert len(kinds) == 1
        drive.finished += sched.update(plan, drive_result(plan), drive.now)
        drive.now += 1


def drive_result(plan):
    from sim.policies import StepResult

    return StepResult()


def test_static_batch_returns_together_and_admits_nobody_midway():
    alloc = make_allocator("contiguous", num_slots=10_000, reserve="max", max_model_len=256)
    sched = make_scheduler("static", alloc, max_model_len=256, max_num_seqs=4)
    reqs = [Request(str(i), 0.0, 10, out) for i, out in enumerate([3, 9, 5, 4, 2])]
    for r in reqs:
        sched.add_request(r, 0.0)
    drive = ShadowDriver(sched, use_token_ids=False)
    drive.run()
    first = reqs[:4]
    assert {r.finish_time for r in first} == {first[1].finish_time}  # batch ends with its longest
    assert reqs[4].first_scheduled_time >= first[1].finish_time  # joined only after the batch


def test_swap_preemption_keeps_computed_tokens():
    alloc = PagedAllocator(64, block_size=4, swap_slots=256)
    sched = make_scheduler("vllm_v0", alloc, max_model_len=64, preemption="swap")
    reqs = [Request(str(i), 0.0, 12, 30, prompt_token_ids=[i + 1] * 12) for i in range(4)]
    for r in reqs:
        sched.add_request(r, 0.0)
    drive = ShadowDriver(sched)
    swapped_seen = False
    while sched.has_unfinished():
        drive.step()
        swapped_seen |= bool(sched.swapped)
    assert swapped_seen and sched.num_swapped_tokens > 0
    assert all(r.num_output_tokens == 30 for r in reqs)


@pytest.mark.parametrize("policy", POLICIES)
def test_speculative_tokens_advance_computed_by_accepted(policy):
    if policy == "static":
        pytest.skip("static batching has no speculative path in the simulator")
    alloc = make_allocator("paged", num_slots=4096, block_size=4)
    sched = make_scheduler(policy, alloc, max_model_len=256, num_speculative_tokens=3)
    r = Request("r", 0.0, 8, 20)
    sched.add_request(r, 0.0)
    from sim.policies import StepResult

    now = 0.0
    while sched.has_unfinished():
        plan = sched.schedule(now)
        acc = {s.request.request_id: min(2, s.num_spec_tokens) for s in plan.scheduled if s.num_spec_tokens}
        now += 1
        sched.update(plan, StepResult(num_accepted=acc), now)
        if r.state is RequestState.RUNNING:
            assert r.num_computed_tokens == r.num_tokens - 1
    assert r.num_output_tokens == 20 and r.num_spec_accepted > 0
    assert alloc.num_free_slots == 4096


@pytest.mark.parametrize("policy", ["orca", "chunked"])  # vllm_v0 never admits high here
def test_priority_preemption_takes_an_already_scheduled_victim_out_of_the_plan(policy):
    """Under the priority policy the victim can be a request scheduled earlier in the same step;
    it must leave the plan (its blocks are gone) and its tokens return to the budget."""
    alloc = PagedAllocator(16, block_size=4)
    sched = make_scheduler(policy, alloc, max_model_len=16, queue_policy="priority")
    low = Request("low", 0.0, 6, 5, prompt_token_ids=[1] * 6, priority=2)
    high = Request("high", 0.0, 8, 5, prompt_token_ids=[2] * 8, priority=0)
    # low is admitted first, so it is not the newest: only the priority rule makes it the victim,
    # and it sits before high in the running order, so it is scheduled before high asks for room.
    drive = ShadowDriver(sched)
    sched.add_request(low, 0.0)
    drive.step()
    sched.add_request(high, drive.now)
    while not high.num_output_tokens:
        drive.step()
    assert sched.running == [low, high]
    plan = sched.schedule(drive.now)
    assert low in plan.preempted
    assert [s.request for s in plan.scheduled] == [high]
    assert all(s.request.state is RequestState.RUNNING for s in plan.scheduled)


def test_stop_on_the_last_allowed_token_is_reported_as_stop():
    from sim.policies import StepResult

    alloc = make_allocator("paged", num_slots=64, block_size=4)
    sched = make_scheduler("chunked", alloc, max_model_len=32)
    r = Request("r", 0.0, 4, 2, prompt_token_ids=[1, 2, 3, 4])
    sched.add_request(r, 0.0)
    plan = sched.schedule(0.0)
    sched.update(plan, StepResult(sampled_token_ids={"r": [5]}), 1.0)
    plan = sched.schedule(1.0)
    done = sched.update(plan, StepResult(sampled_token_ids={"r": [0]}, stopped={"r"}), 2.0)
    assert done == [r] and r.finish_reason == "stop" and r.output_token_ids == [5, 0]


# --- the allocator interface: declared once, implemented by every allocator ----------------

def _allocators():
    """One of every allocator kind and capability: paged plain / with prefix cache and swap
    space, and contiguous under each reservation policy."""
    return [
        PagedAllocator(256, block_size=4),
        PagedAllocator(256, block_size=4, prefix_caching=True, swap_slots=128),
        *(ContiguousAllocator(256, reserve=r, max_model_len=64) for r in ("max", "pow2", "oracle")),
    ]


def test_every_allocator_implements_every_declared_method():
    """What a scheduler may ask of an allocator is declared on ``KVAllocator`` (with defaults for
    capabilities it lacks) and nothing is left abstract in any implementation."""
    import ast

    from sim.native import source_path
    from sim.policies.kv import KVAllocator

    declared = [n for n in vars(KVAllocator) if not n.startswith("_")]
    # Docstrings read from the source: a mypyc-compiled class keeps none at run time.
    tree = ast.parse(source_path(KVAllocator.__module__).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KVAllocator")
    docs = {n.name: ast.get_docstring(n) or "" for n in cls.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for name in ("record_prefix_query", "can_swap_out", "swap_out", "can_swap_in", "swap_in",
                 "block_table", "caches_prefixes", "num_prefix_queries", "num_prefix_hits"):
        assert name in declared
        assert docs.get(name, "").strip() or name.startswith("num_"), name
    for alloc in _allocators():
        # (compiled classes carry no __abstractmethods__: mypyc refuses abstract ones at build)
        assert not getattr(type(alloc), "__abstractmethods__", frozenset())
        for name in declared:
            assert hasattr(alloc, name), (type(alloc).__name__, name)


@pytest.mark.parametrize("index", range(5))
def test_every_allocator_honours_the_declared_contract(index):
    from sim.policies.kv import PrefixHit

    alloc = _allocators()[index]
    bs = alloc.block_size
    req = Request("r", 0.0, 10, 5, prompt_token_ids=list(range(1, 11)))
    hit = alloc.lookup_prefix(req)
    assert isinstance(hit, PrefixHit) and hit.num_tokens == 0
    assert alloc.allocate(req, 10, hit)
    alloc.record_prefix_query(req, hit)
    assert alloc.num_prefix_hits <= alloc.num_prefix_queries
    assert alloc.num_prefix_queries == (10 if isinstance(alloc, PagedAllocator) else 0)
    table = alloc.block_table(req)
    slots = [table[p // bs] * bs + p % bs for p in range(10)]
    assert len(set(slots)) == 10 and all(0 <= s < alloc.num_slots for s in slots)
    req.num_computed_tokens = 10
    alloc.cache_full_blocks(req)
    if alloc.can_swap_out(req):
        assert alloc.swap_out(req) == 10 and not alloc.holds(req)
        assert alloc.can_swap_in(req, 1)
        assert alloc.swap_in(req) == 10 and alloc.holds(req)
    else:  # asked anyway (a scheduler never does): an invariant failure, not a silent no-op
        with pytest.raises(RuntimeError, match="swap space"):
            alloc.swap_out(req)
    alloc.free(req)
    assert alloc.num_free_slots == alloc.num_slots and alloc.block_table(req) == []
    alloc.check_invariants()


def test_schedulers_call_the_allocator_interface_without_probing():
    """No ``getattr``/``hasattr`` on an allocator in the shared policies: a missing capability
    is a declared default, not an absent attribute."""
    import ast
    from pathlib import Path

    import sim.policies

    root = Path(sim.policies.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr"):
                raise AssertionError(f"{path.name}:{node.lineno}: {ast.unparse(node)}")


@pytest.mark.parametrize("kind", ["paged", "paged-prefix", "contiguous"])
@pytest.mark.parametrize("seed", range(20))
def test_allocate_decodes_is_allocate_one_token_each_in_order(kind, seed):
    """The schedulers' batched decode allocation (one call per step, inlined by the paged
    allocator) gives exactly what ``allocate(req, 1)`` request by request gives: the same count,
    the same blocks, the same free pool, stopping at the first request that is not a plain
    decode or does not fit."""
    rng = random.Random(seed)

    def build():
        r = random.Random(seed)
        name, _, prefix = kind.partition("-")
        alloc = make_allocator(name, num_slots=r.choice([64, 96, 160]), block_size=4,
                               prefix_caching=bool(prefix), reserve="max", max_model_len=64)
        reqs = []
        for i in range(r.randint(1, 12)):
            req = Request(f"r{i}", 0.0, r.randint(1, 20), r.randint(1, 30))
            req.num_output_tokens = r.randint(0, req.max_output_tokens - 1)
            # mostly plain decodes (one uncomputed token), some still prefilling
            req.num_computed_tokens = req.num_tokens - (1 if r.random() < 0.85 else 3)
            alloc.allocate(req, 0)  # hold the computed tokens, where the pool still has room
            reqs.append(req)
        return alloc, reqs

    start = rng.randint(0, 3)
    limit = rng.randint(1, 12)
    batched, reqs_b = build()
    looped, reqs_l = build()
    got = batched.allocate_decodes(reqs_b, start, limit)
    expect = 0
    for req in reqs_l[start:start + limit]:
        if req.num_uncomputed_tokens != 1 or not looped.allocate(req, 1):
            break
        expect += 1
    assert got == expect
    assert batched.num_free_slots == looped.num_free_slots
    assert [batched.num_held_slots(r) for r in reqs_b] == [looped.num_held_slots(r) for r in reqs_l]
    batched.check_invariants()
