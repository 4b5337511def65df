"""SGLang's RadixAttention as a KV allocator (``sim.policies.kv.radix``, issue #26): token-level
prefix matching with edge splits, LRU eviction of unlocked leaves, sharing between concurrent
requests, page sizes above one, and exact slot accounting. Expectations are computed by hand or
independently of the allocator (the trace's longest-common-prefix bound, a shadow KV store)."""

from __future__ import annotations

import random
from itertools import takewhile
from typing import Hashable, Optional

import pytest

from sim.policies import Request, RequestState
from sim.policies.kv import KVAllocator, PagedAllocator, PrefixHit, RadixAllocator
from sim.policies.schedulers import make_scheduler
from tests.policy_driver import ShadowDriver


def req(rid: str, tokens: list[int], max_out: int = 4) -> Request:
    return Request(rid, 0.0, len(tokens), max_out, prompt_token_ids=list(tokens))


def admit(alloc: KVAllocator, r: Request, compute: Optional[int] = None) -> PrefixHit:
    """What a scheduler does at admission, then one step computing ``compute`` tokens (the
    whole prompt by default) and publishing them."""
    hit = alloc.lookup_prefix(r)
    n = (r.prompt_len if compute is None else compute) - hit.num_tokens
    assert alloc.allocate(r, n, hit)
    alloc.record_prefix_query(r, hit)
    r.num_computed_tokens = hit.num_tokens + n
    alloc.cache_full_blocks(r)
    alloc.check_invariants()
    return hit


def slots_of(alloc: RadixAllocator, r: Request) -> list[int]:
    bs = alloc.block_size
    table = alloc.block_table(r)
    return [table[p // bs] * bs + p % bs for p in range(alloc.num_held_slots(r))]


# --- 1. token-granular matching, the logits-token cap, edge splits -----------------------------

def test_shared_prefix_matches_at_token_granularity_and_splits_edges():
    alloc = RadixAllocator(1000)
    system = list(range(1, 11))  # a 10-token shared prefix
    a = req("a", system + [101, 102])
    assert admit(alloc, a).num_tokens == 0
    a_slots = alloc.block_table(a)[:]
    assert len(a_slots) == 12 and alloc.num_cached_slots == 12  # inserted while running

    b = req("b", system + [201, 202, 203])
    hit = admit(alloc, b)
    assert hit.num_tokens == 10 and hit.block_ids == a_slots[:10]  # ends inside a's edge
    b_slots = alloc.block_table(b)[:]
    assert b_slots[:10] == a_slots[:10] and len(set(b_slots[10:]) & set(a_slots)) == 0

    # The identical 12-token prompt matches 11: its last token is computed for the logits.
    assert alloc.lookup_prefix(req("c", system + [101, 102])).num_tokens == 11
    # Both branches of the split edge are intact and give their own slots back.
    d = alloc.lookup_prefix(req("d", system + [101, 102, 7]))
    assert d.num_tokens == 12 and d.block_ids == a_slots
    e = alloc.lookup_prefix(req("e", system + [201, 202, 203, 9]))
    assert e.num_tokens == 13 and e.block_ids == b_slots
    assert alloc.lookup_prefix(req("f", system[:5] + [999] * 5)).num_tokens == 5  # a third split
    assert alloc.lookup_prefix(req("g", [2] + system)).num_tokens == 0
    # Edges [0,5) [5,10) [10,11) [11,12) [10,13): five nodes, 15 cached slots.
    assert alloc.num_tree_nodes == 5 and alloc.num_cached_slots == 15
    alloc.check_invariants()
    # Both requests hold everything cached: nothing evictable. After a finishes only its own
    # branch (2 tokens) is, the shared 10 stay locked by b.
    assert alloc.num_evictable_slots == 0
    alloc.free(a)
    assert alloc.num_evictable_slots == 2
    assert alloc.num_free_slots == 1000 - 13 and alloc.num_unused_slots == 1000 - 15
    alloc.free(b)
    assert alloc.num_evictable_slots == 15 and alloc.num_free_slots == 1000
    alloc.check_invariants()


def test_outputs_are_cached_when_a_request_finishes():
    """``cache_finished_req`` inserts prompt + outputs (with token ids): a follow-up turn whose
    prompt is the whole conversation matches all of it but its last token."""
    alloc = RadixAllocator(100)
    a = req("a", [1, 2, 3, 4])
    admit(alloc, a)
    for tok in (5, 6, 7):  # three decode steps: outputs 5, 6, 7; 7's KV is never computed
        a.output_token_ids.append(tok)
        a.num_output_tokens += 1
        assert alloc.allocate(a, 1)
        a.num_computed_tokens += 1
        alloc.cache_full_blocks(a)  # prompt only while running
        assert alloc.num_cached_slots == 4
    a.output_token_ids.append(8)
    a.num_output_tokens += 1
    alloc.free(a)
    assert alloc.num_cached_slots == 7  # the 7 computed tokens: 1..4 and outputs 5, 6, 7
    assert alloc.lookup_prefix(req("b", [1, 2, 3, 4, 5, 6, 7, 8, 9])).num_tokens == 7
    alloc.check_invariants()


# --- 2. LRU eviction of unlocked leaves ---------------------------------------------------------

def test_lru_evicts_least_recently_used_leaves_never_a_locked_prefix():
    alloc = RadixAllocator(30)
    p1, p2, p3 = list(range(1, 11)), list(range(20, 30)), list(range(40, 50))
    r1, r2, r3 = req("r1", p1), req("r2", p2), req("r3", p3)
    for r in (r1, r2, r3):
        admit(alloc, r)
    assert alloc.num_unused_slots == 0
    for r in (r2, r1, r3):  # freed in this order: r2 least recently used
        alloc.free(r)
    assert alloc.num_free_slots == 30 and alloc.num_evictable_slots == 30

    # r4 shares r3's first 5 tokens: the hit is locked first, then 5 slots come from evicting
    # the LRU leaf, all of r2 (whole nodes go).
    r4 = req("r4", p3[:5] + [60, 61, 62, 63, 64])
    assert admit(alloc, r4).num_tokens == 5
    assert alloc.lookup_prefix(req("x2", p2 + [0])).num_tokens == 0  # r2 evicted
    assert alloc.lookup_prefix(req("x1", p1 + [0])).num_tokens == 10  # r1 kept
    assert alloc.num_unused_slots == 5 and alloc.num_evicted_slots == 10

    # The x1 lookup just touched r1: now r3's tail [45..49] is the least recently used.
    r5 = req("r5", [70] * 10)
    admit(alloc, r5)
    assert alloc.lookup_prefix(req("y3", p3 + [0])).num_tokens == 5  # tail gone, head locked
    assert alloc.lookup_prefix(req("y1", p1 + [0])).num_tokens == 10
    # r4's and r5's prompts went into the tree while they run (locked); r1 (10) is the only
    # evictable content now, and r6 takes it.
    assert alloc.num_evictable_slots == 10 and alloc.num_unused_slots == 0
    r6 = req("r6", [80] * 10)
    admit(alloc, r6)
    assert alloc.lookup_prefix(req("z1", p1 + [0])).num_tokens == 0
    assert alloc.num_free_slots == 0
    # Only r4's locked prefix and running requests' tokens are left: nothing can be evicted,
    # allocation fails and changes nothing.
    r7 = req("r7", [90])
    assert not alloc.can_allocate(r7, 1) and not alloc.allocate(r7, 1)
    assert alloc.lookup_prefix(req("w3", p3[:5] + [0])).num_tokens == 5
    alloc.check_invariants()

    # r4 finishes: its 10 tokens go in as [40..44] -> [60..64]. r7 needs 6: the leaf goes
    # first (5), then its parent, a leaf now (5 more).
    alloc.free(r4)
    assert alloc.num_evictable_slots == 10
    assert alloc.allocate(r7, 6)
    assert alloc.lookup_prefix(req("v3", p3 + [0])).num_tokens == 0
    assert alloc.num_free_slots == 4 and alloc.num_evictable_slots == 0
    alloc.check_invariants()


# --- 3. the bound: every token a previous prompt shares is a hit --------------------------------

def _lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_hit_tokens_equal_the_longest_common_prefix_bound():
    rng = random.Random(7)
    systems = [[rng.randint(1000, 9999) for _ in range(37)] for _ in range(4)]  # not page aligned
    prompts = []
    for _ in range(50):
        # questions from a small vocabulary, so they also share leading tokens by chance
        question = [rng.randint(1, 4) for _ in range(rng.randint(1, 12))]
        prompts.append(rng.choice(systems) + question)
    bound = 0
    for i, p in enumerate(prompts):
        best = max((_lcp(p, q) for q in prompts[:i]), default=0)
        bound += min(best, len(p) - 1)
    assert bound > 46 * 37  # every request after its system prompt's first hits at least it

    alloc = RadixAllocator(50 * 64)
    paged = PagedAllocator(50 * 64, block_size=16, prefix_caching=True)
    for i, p in enumerate(prompts):
        r = req(str(i), p)
        hit = admit(alloc, r)
        expect = min(max((_lcp(p, q) for q in prompts[:i]), default=0), len(p) - 1)
        assert hit.num_tokens == expect, i
        alloc.free(r)
        q = req(str(i), p)  # the same request through vLLM's block-hash cache
        admit(paged, q)
        paged.free(q)
    assert alloc.num_prefix_hits == bound
    assert alloc.num_prefix_queries == sum(len(p) for p in prompts)
    assert paged.num_prefix_hits < bound  # full 16-token blocks only: 32 of each 37
    alloc.check_invariants()


# --- 4. trace block ids ---------------------------------------------------------------------------

def test_block_hashes_match_at_token_granularity_of_the_id_runs():
    alloc = RadixAllocator(200)

    def trace(rid: str, n: int, hashes: list[int], hbs: int = 4) -> Request:
        return Request(rid, 0.0, n, 2, block_hashes=hashes, hash_block_size=hbs)

    a = trace("a", 10, [7, 8, 9])
    admit(alloc, a)
    alloc.free(a)
    assert alloc.num_cached_slots == 10
    assert alloc.lookup_prefix(trace("b", 12, [7, 8, 5])).num_tokens == 8  # two equal ids
    assert alloc.lookup_prefix(trace("c", 6, [7, 8])).num_tokens == 5  # inside id 8's run
    assert alloc.lookup_prefix(trace("e", 10, [7, 8, 9])).num_tokens == 9  # logits token
    assert alloc.lookup_prefix(trace("d", 10, [7, 8, 9], hbs=2)).num_tokens == 0  # other size
    assert alloc.lookup_prefix(req("t", [7, 8, 9, 7, 8, 9, 7, 8, 9, 7])).num_tokens == 0
    # Known content ends with the ids (8 tokens): only those are matched and inserted, the
    # request's other computed tokens are freed.
    g = trace("g", 10, [7, 8])
    assert admit(alloc, g).num_tokens == 8
    assert alloc.num_held_slots(g) == 10
    alloc.free(g)
    assert alloc.num_unused_slots == 200 - alloc.num_cached_slots
    # A request with no content never matches and leaves nothing cached.
    before = alloc.num_cached_slots
    n = Request("n", 0.0, 10, 2)
    assert admit(alloc, n).num_tokens == 0
    alloc.free(n)
    assert alloc.num_cached_slots == before
    alloc.check_invariants()


def test_long_trace_prompts_compare_block_ids_not_tokens():
    """8k-token prompts of 512-token ids: a lookup splits inside a run and compares at most a
    handful of ids (a per-token comparison would build thousands of keys per admission)."""
    alloc = RadixAllocator(40_000)
    base = list(range(16))
    a = Request("a", 0.0, 8000, 1, block_hashes=base, hash_block_size=512)
    admit(alloc, a)
    alloc.free(a)
    b = Request("b", 0.0, 7000, 1, block_hashes=base[:10] + [99, 98, 97, 96], hash_block_size=512)
    assert alloc.lookup_prefix(b).num_tokens == 5120
    c = Request("c", 0.0, 6001, 1, block_hashes=base[:12], hash_block_size=512)
    assert alloc.lookup_prefix(c).num_tokens == 6000
    alloc.check_invariants()


# --- 5. random operations: invariants, correct KV behind every hit, no leak ----------------------

class _Workload:
    """Random requests over a few shared prefixes: token ids, trace ids, or no content."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.prefixes = [[rng.randint(1, 3) for _ in range(rng.randint(3, 14))] for _ in range(3)]
        self.n = 0

    def make(self) -> Request:
        rng = self.rng
        self.n += 1
        rid = f"r{self.n}"
        kind = rng.random()
        out = rng.randint(1, 6)
        if kind < 0.7:
            tokens = rng.choice(self.prefixes) + [rng.randint(1, 3) for _ in range(rng.randint(1, 8))]
            return req(rid, tokens, out)
        if kind < 0.9:
            n = rng.randint(2, 18)
            hashes = [rng.randint(1, 2) for _ in range(rng.randint(1, (n + 3) // 4))]
            return Request(rid, 0.0, n, out, block_hashes=hashes, hash_block_size=4)
        return Request(rid, 0.0, rng.randint(1, 12), out)


def _content_at(r: Request, t: int) -> Hashable:
    """What position ``t`` of ``r`` holds, as a shadow KV store records it."""
    if r.prompt_token_ids is not None:
        return ("tok", r.token_id(t))
    if r.block_hashes is not None and t < r.prompt_len and t // r.hash_block_size < len(r.block_hashes):
        return ("blk", r.hash_block_size, r.block_hashes[t // r.hash_block_size], t % r.hash_block_size)
    return ("own", r.request_id, t)


@pytest.mark.parametrize("page", [1, 2, 4])
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_keep_invariants_and_correct_kv(page, seed):
    rng = random.Random(seed * 10 + page)
    alloc = RadixAllocator(48, block_size=page)
    work = _Workload(rng)
    shadow: dict[int, Hashable] = {}
    waiting: list[Request] = []
    running: list[Request] = []

    def write(r: Request, lo: int, hi: int) -> None:
        for t, s in enumerate(slots_of(alloc, r)[lo:hi], start=lo):
            shadow[s] = _content_at(r, t)

    def verify() -> None:
        alloc.check_invariants()
        for r in running:
            for t, s in enumerate(slots_of(alloc, r)[:r.num_computed_tokens]):
                assert shadow.get(s) == _content_at(r, t), (r, t)
        u = alloc.usage(running, None)
        assert u.total == alloc.num_slots and u.free == alloc.num_free_slots

    def step(r: Request, n: int) -> None:
        """Compute n tokens of r; emit a token when it has computed all it knows."""
        c = r.num_computed_tokens
        write(r, c, c + n)
        r.num_computed_tokens += n
        if r.num_computed_tokens == r.num_tokens:
            if r.prompt_token_ids is not None:
                r.output_token_ids.append(rng.randint(1, 3))
            r.num_output_tokens += 1
        alloc.cache_full_blocks(r)
        if r.num_output_tokens >= r.max_output_tokens:
            running.remove(r)
            alloc.free(r)

    for _ in range(250):
        op = rng.random()
        if op < 0.3:
            r = waiting.pop(rng.randrange(len(waiting))) if waiting and rng.random() < 0.5 else work.make()
            hit = alloc.lookup_prefix(r)
            assert hit.num_tokens % page == 0 and hit.num_tokens < r.num_tokens
            n = rng.randint(1, r.num_tokens - hit.num_tokens)
            if alloc.allocate(r, n, hit):
                alloc.record_prefix_query(r, hit)
                r.num_computed_tokens = hit.num_tokens
                running.append(r)
                verify()  # the hit's slots hold exactly this request's content
                step(r, n)
            else:
                waiting.append(r)
        elif op < 0.75 and running:
            r = rng.choice(running)
            left = r.num_tokens - r.num_computed_tokens
            n = rng.randint(1, left)
            if alloc.allocate(r, n):
                step(r, n)
        elif op < 0.85 and running:
            decoding = [r for r in running if r.num_uncomputed_tokens == 1]
            start = rng.randint(0, len(decoding))
            got = alloc.allocate_decodes(decoding, start, rng.randint(1, 4))
            for r in decoding[start:start + got]:
                step(r, 1)
        elif op < 0.95 and running:
            r = running.pop(rng.randrange(len(running)))  # preempt (recompute) or abort
            alloc.free(r)
            if rng.random() < 0.7:
                r.num_computed_tokens = 0
                waiting.append(r)
        else:
            alloc.evict(rng.randint(1, 10))
        verify()

    for r in running:
        alloc.free(r)
    running.clear()
    verify()
    assert alloc.num_free_slots == alloc.num_slots
    assert alloc.num_unused_slots + alloc.num_evictable_slots == alloc.num_slots
    alloc.evict(alloc.num_slots)
    assert alloc.num_unused_slots == alloc.num_slots and alloc.num_tree_nodes == 0
    alloc.check_invariants()


# --- 6. pages of several tokens -------------------------------------------------------------------

def test_page_size_four_matches_and_inserts_whole_pages_only():
    alloc = RadixAllocator(64, block_size=4)
    a_tokens = list(range(1, 15))  # 14 tokens: 3 full pages and a partial one
    a = req("a", a_tokens)
    admit(alloc, a)
    assert alloc.num_held_slots(a) == 16 and alloc.num_cached_slots == 12
    a_pages = alloc.block_table(a)[:]
    alloc.free(a)  # the partial page (tokens 12, 13) is freed, not cached
    assert alloc.num_cached_slots == 12 and alloc.num_unused_slots == 64 - 12

    b = req("b", a_tokens[:10] + [50, 51, 52, 53, 54, 55])
    hit = alloc.lookup_prefix(b)
    assert hit.num_tokens == 8 and hit.block_ids == a_pages[:2]  # 10 shared: 2 whole pages
    assert alloc.allocate(b, 8, hit)
    assert alloc.num_held_slots(b) == 16
    slots = slots_of(alloc, b)
    assert len(set(slots)) == 16 and slots[:8] == [a_pages[p // 4] * 4 + p % 4 for p in range(8)]
    assert alloc.lookup_prefix(req("c", a_tokens)).num_tokens == 12  # 13 allowed, 3 pages
    assert alloc.lookup_prefix(req("d", a_tokens[:9] + [60])).num_tokens == 8
    assert alloc.lookup_prefix(req("e", a_tokens[:3] + [70] * 6)).num_tokens == 0
    assert alloc.num_free_slots % 4 == 0
    alloc.check_invariants()


# --- the scheduler loop: every hit's slots hold the right tokens ----------------------------------

class RadixShadowDriver(ShadowDriver):
    """The policy tests' shadow executor, tracking tokens through the radix allocator's
    block tables (pages) as it does through the paged allocator's."""

    @property
    def _tracks_tokens(self) -> bool:
        return self.use_token_ids


@pytest.mark.parametrize("policy", ["chunked", "vllm_v0", "orca"])
@pytest.mark.parametrize("page", [1, 4])
def test_schedulers_read_the_right_kv_through_the_radix_cache(policy, page):
    rng = random.Random(f"{policy}-{page}")
    alloc = RadixAllocator(96, block_size=page)  # small: preemptions and evictions happen
    sched = make_scheduler(policy, alloc, max_model_len=64, max_num_seqs=6,
                           max_num_batched_tokens=16 if policy == "chunked" else None)
    prefixes = [[rng.randint(1, 4) for _ in range(rng.randint(5, 20))] for _ in range(3)]
    reqs = []
    for i in range(30):
        tokens = rng.choice(prefixes) + [rng.randint(1, 4) for _ in range(rng.randint(1, 20))]
        reqs.append(Request(str(i), float(i), len(tokens), rng.randint(1, 20), prompt_token_ids=tokens))
    for r in reqs:
        assert sched.add_request(r, 0.0)
    driver = RadixShadowDriver(sched, stop_prob=0.05, seed=page)
    driver.run()
    assert all(r.state is RequestState.FINISHED for r in reqs)
    assert alloc.num_prefix_hits > 0 and sched.num_preemptions > 0
    assert all(alloc.num_held_slots(r) == 0 for r in reqs)
    assert alloc.num_free_slots == alloc.num_slots
    alloc.check_invariants()


def test_concurrent_identical_prompts_share_after_their_first_chunk():
    """Two requests admitted together compute the same prompt twice; publishing keeps the
    tree's copy and frees the duplicate, and the second's table points at the first's."""
    alloc = RadixAllocator(100)
    tokens = list(range(1, 21))
    a, b = req("a", tokens), req("b", tokens)
    for r in (a, b):
        assert alloc.lookup_prefix(r).num_tokens == 0 and alloc.allocate(r, 8)
    for r in (a, b):
        r.num_computed_tokens = 8
        alloc.cache_full_blocks(r)
    assert alloc.block_table(b)[:8] == alloc.block_table(a)[:8]
    assert alloc.num_unused_slots == 100 - 8 and alloc.num_held_slots(b) == 8
    for r in (a, b):  # next chunk: b's private slots again, shared once published
        assert alloc.allocate(r, 12)
        r.num_computed_tokens = 20
        alloc.cache_full_blocks(r)
    assert alloc.block_table(b) == alloc.block_table(a) and alloc.num_cached_slots == 20
    assert alloc.usage([a, b], None).token_states == 20  # shared slots count once
    alloc.check_invariants()
    alloc.free(a)
    alloc.free(b)
    assert alloc.num_free_slots == 100 and alloc.num_cached_slots == 20
    alloc.check_invariants()


# --- the allocator interface ----------------------------------------------------------------------

@pytest.mark.parametrize("page", [1, 4])
@pytest.mark.parametrize("seed", range(12))
def test_allocate_decodes_is_allocate_one_token_each_in_order(page, seed):
    """Including when room comes from evicting cached content."""

    def build() -> tuple[RadixAllocator, list[Request]]:
        r = random.Random(seed)
        alloc = RadixAllocator(r.choice([48, 64, 96]), block_size=page)
        for i in range(r.randint(0, 3)):  # leave some cached, evictable content
            done = req(f"c{i}", [r.randint(1, 5) for _ in range(r.randint(4, 12))])
            if alloc.allocate(done, done.prompt_len):
                done.num_computed_tokens = done.prompt_len
                alloc.free(done)
        reqs = []
        for i in range(r.randint(1, 10)):
            x = req(f"r{i}", [r.randint(1, 5) for _ in range(r.randint(1, 12))], r.randint(2, 20))
            x.num_output_tokens = r.randint(0, x.max_output_tokens - 1)
            x.output_token_ids = [1] * x.num_output_tokens
            x.num_computed_tokens = x.num_tokens - (1 if r.random() < 0.85 else 3)
            alloc.allocate(x, 0)
            reqs.append(x)
        return alloc, reqs

    rng = random.Random(seed)
    start, limit = rng.randint(0, 3), rng.randint(1, 10)
    batched, reqs_b = build()
    looped, reqs_l = build()
    got = batched.allocate_decodes(reqs_b, start, limit)
    one_by_one = takewhile(lambda x: x.num_uncomputed_tokens == 1 and looped.allocate(x, 1),
                           reqs_l[start:start + limit])
    assert got == sum(1 for _ in one_by_one)
    state = lambda a, rs: (a.num_free_slots, a.num_unused_slots, [a.block_table(x) for x in rs])  # noqa: E731
    assert state(batched, reqs_b) == state(looped, reqs_l)
    batched.check_invariants()


def test_declared_contract_and_a_plain_pool_without_prefix_caching():
    for caching in (True, False):
        alloc = RadixAllocator(64, prefix_caching=caching)
        assert alloc.caches_prefixes is caching
        r = req("r", list(range(1, 11)))
        hit = alloc.lookup_prefix(r)
        assert hit.num_tokens == 0 and alloc.allocate(r, 10, hit)
        alloc.record_prefix_query(r, hit)
        assert alloc.num_prefix_queries == (10 if caching else 0)
        assert alloc.block_table(r) == list(range(10)) and alloc.num_held_slots(r) == 10
        r.num_computed_tokens = 10
        alloc.cache_full_blocks(r)
        assert not alloc.can_swap_out(r)  # SGLang retracts and recomputes
        with pytest.raises(RuntimeError, match="swap space"):
            alloc.swap_out(r)
        alloc.free(r)
        assert alloc.num_free_slots == 64 and alloc.block_table(r) == []
        assert alloc.num_cached_slots == (10 if caching else 0)
        again = req("again", list(range(1, 11)) + [0])
        assert alloc.lookup_prefix(again).num_tokens == (10 if caching else 0)
        assert alloc.cached_prefix_blocks(again) == (10 if caching else 0)
        alloc.check_invariants()


def test_cached_prefix_blocks_is_read_only():
    alloc = RadixAllocator(64)
    a = req("a", list(range(1, 13)))
    admit(alloc, a)
    alloc.free(a)
    probe = req("p", list(range(1, 8)) + [50])
    assert alloc.cached_prefix_blocks(probe) == 7
    assert alloc.num_tree_nodes == 1  # no split, no touch
    assert alloc.num_prefix_queries == 12
    assert alloc.lookup_prefix(probe).num_tokens == 7 and alloc.num_tree_nodes == 2


def test_stale_hit_is_refused_not_served():
    """A hit from an older lookup whose content was evicted since cannot hand out slots that
    now belong to someone else."""
    alloc = RadixAllocator(12)
    a = req("a", list(range(1, 11)))
    admit(alloc, a)
    alloc.free(a)
    b = req("b", list(range(1, 11)) + [0])
    hit = alloc.lookup_prefix(b)
    assert hit.num_tokens == 10
    c = req("c", [77] * 12)
    assert alloc.allocate(c, 12)  # evicts a's prefix
    alloc.free(c)
    assert not alloc.allocate(b, 1, hit)
    alloc.check_invariants()
