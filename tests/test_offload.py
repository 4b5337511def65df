"""KV offload tiers (GPU -> CPU DRAM -> local SSD) under the prefix cache: where blocks go,
what a lookup finds, what a load costs, and that a run with tiers off is the run it was."""

from __future__ import annotations

import math
import random

import pytest

from sim.api import offload_tiers_of, resolve_deployment, simulate
from sim.errors import ConfigError
from sim.policies.kv import OffloadTier, OffloadTiers, PagedAllocator
from sim.policies.kv.hashing import request_block_hashes
from sim.policies.request import Request, RequestState
from sim.policies.schedulers import make_scheduler
from sim.policies.step import StepResult
from sim.scenario import Scenario
from sim.summary_table import summary_rows

BS = 4


def _tiers(cpu: int = 2, ssd: int = 2, block_bytes: float = 1000.0) -> OffloadTiers:
    tiers = []
    if cpu:
        tiers.append(OffloadTier("cpu", cpu, 64e9, block_bytes, 1.0))
    if ssd:
        tiers.append(OffloadTier("ssd", ssd, 6e9, block_bytes, 64 / 6))
    return OffloadTiers(tiers, BS)


def _req(rid: str, ids: list[int], tail: int = 0) -> Request:
    """A request whose prompt is ``len(ids)`` full blocks (content ``ids``) and one more token."""
    return Request(rid, 0.0, len(ids) * BS + 1, 4, block_hashes=list(ids) + [10**6 + tail],
                   hash_block_size=BS)


def _fill(alloc: PagedAllocator, req: Request):
    """Admit ``req`` with whatever prefix it finds, compute its prompt, publish, free."""
    hit = alloc.lookup_prefix(req)
    assert alloc.allocate(req, req.prompt_len - hit.num_tokens, hit)
    alloc.record_prefix_query(req, hit)
    req.num_computed_tokens = req.prompt_len
    alloc.cache_full_blocks(req)
    alloc.free(req)
    alloc.check_invariants()
    return hit


def _hashes(req: Request) -> list[int]:
    return request_block_hashes(req, (req.prompt_len - 1) // BS, BS)


def _where(alloc: PagedAllocator, h: int) -> str:
    if h in alloc.pool.cached:
        return "gpu"
    assert alloc.offload is not None
    t = alloc.offload.tier_of(h)
    return "-" if t < 0 else alloc.offload.tiers[t].name


def _evict(alloc: PagedAllocator, m: int) -> None:
    """Evict the ``m`` least recently used cached blocks from the GPU (uncached free blocks sit
    in front of cached ones in the free queue)."""
    pool = alloc.pool
    uncached = sum(1 for b in pool.free_queue if pool.blocks[b].block_hash is None)
    pool.release(pool.allocate(uncached + m))


# --- tier movement ---------------------------------------------------------------------------


def test_evictions_move_down_the_tiers_in_lru_order_and_drop_at_the_bottom():
    # 4 GPU blocks: each one-block request leaves one cached block (its partial block is not).
    alloc = PagedAllocator(4 * BS, BS, prefix_caching=True, offload=_tiers(cpu=2, ssd=2))
    reqs = [_req(c, [i]) for i, c in enumerate("ABCDEFGH")]
    name = {_hashes(r)[0]: r.request_id for r in reqs}
    for r in reqs:
        _fill(alloc, r)
    cpu, ssd = alloc.offload.tiers
    # Evicted from the GPU least recently used first: A, B, C, D, E. The CPU keeps the last
    # two, the SSD the two before, A fell off the bottom.
    assert sorted(name[h] for h in alloc.pool.cached) == ["F", "G", "H"]
    assert [name[h] for h in cpu.lru] == ["D", "E"]
    assert [name[h] for h in ssd.lru] == ["B", "C"]
    assert alloc.offload.num_dropped == 1
    assert alloc.pool.num_evicted == 5 == cpu.num_inserted
    assert cpu.num_evicted == 3 == ssd.num_inserted and ssd.num_evicted == 1
    alloc.check_invariants()


def test_a_request_frees_its_tail_first_so_its_prefix_head_stays_highest():
    alloc = PagedAllocator(8 * BS, BS, prefix_caching=True, offload=_tiers(cpu=1, ssd=2))
    p = _req("p", [1, 2, 3, 4])
    _fill(alloc, p)
    _evict(alloc, 3)  # block 3 goes first, then 2, then 1
    hs = _hashes(p)
    assert [_where(alloc, h) for h in hs] == ["gpu", "cpu", "ssd", "ssd"]


# --- lookups ---------------------------------------------------------------------------------


def test_lookup_continues_below_the_gpu_and_loads_back():
    alloc = PagedAllocator(8 * BS, BS, prefix_caching=True, offload=_tiers(cpu=1, ssd=2))
    p = _req("p", [1, 2, 3, 4])
    _fill(alloc, p)
    _evict(alloc, 3)
    hs = _hashes(p)
    q = _req("q", [1, 2, 3, 4, 5], tail=1)
    hit = alloc.lookup_prefix(q)
    assert len(hit.block_ids) == 1 and hit.num_tokens == 4 * BS
    assert hit.load is not None and hit.load.hashes == hs[1:] and hit.load.tiers == [0, 1, 1]
    # Swap-token price: one CPU block at the host link's bandwidth, two SSD blocks 64/6 as dear.
    assert hit.load.num_swap_tokens == math.ceil(BS * (1 + 2 * 64 / 6))
    assert alloc.lookup_prefix(q) == hit  # read-only: nothing moved
    assert alloc.allocate(q, q.prompt_len - hit.num_tokens, hit)
    alloc.record_prefix_query(q, hit)
    # Loaded back: all four prefix blocks on the GPU, held by q, none left in a tier.
    assert [_where(alloc, h) for h in hs] == ["gpu"] * 4
    assert alloc.block_table(q)[:4] == [alloc.pool.cached[h] for h in hs]
    cpu, ssd = alloc.offload.tiers
    assert (cpu.num_loaded, ssd.num_loaded) == (1, 2)
    assert (cpu.num_hit_blocks, ssd.num_hit_blocks) == (1, 2)
    alloc.check_invariants()
    q.num_computed_tokens = q.prompt_len
    alloc.cache_full_blocks(q)
    alloc.free(q)
    alloc.check_invariants()


def _lose(alloc: PagedAllocator, h: int) -> None:
    """Take ``h`` out of its tier the way a superseded copy leaves (counts stay conserved)."""
    tier = alloc.offload.tiers[alloc.offload.tier_of(h)]
    del tier.lru[h]
    tier.num_superseded += 1


def test_a_prefix_must_be_contiguous_across_tiers():
    alloc = PagedAllocator(8 * BS, BS, prefix_caching=True, offload=_tiers(cpu=3, ssd=0))
    p = _req("p", [1, 2, 3])
    _fill(alloc, p)
    _evict(alloc, 3)
    hs = _hashes(p)
    assert [_where(alloc, h) for h in hs] == ["cpu", "cpu", "cpu"]
    q = _req("q", [1, 2, 3, 9], tail=2)
    assert alloc.lookup_prefix(q).load.hashes == hs
    _lose(alloc, hs[1])
    hit = alloc.lookup_prefix(q)
    assert hit.num_tokens == BS and hit.load.hashes == hs[:1]  # stops at the gap
    _lose(alloc, hs[0])
    hit = alloc.lookup_prefix(q)
    # Block 0 is nowhere: block 2 cannot be used, wherever it is.
    assert hit.num_tokens == 0 and not hit.block_ids and hit.load is None
    alloc.check_invariants()


def test_a_recomputed_block_supersedes_its_tier_copy():
    alloc = PagedAllocator(8 * BS, BS, prefix_caching=True, offload=_tiers(cpu=2, ssd=0))
    p = _req("p", [1, 2])
    _fill(alloc, p)
    _evict(alloc, 2)
    h0, h1 = _hashes(p)
    _lose(alloc, h0)  # the chain breaks at block 0; block 1 is still in the CPU tier
    s = _req("s", [1, 2], tail=5)
    assert alloc.lookup_prefix(s).num_tokens == 0
    _fill(alloc, s)  # computes both blocks: block 1's GPU copy supersedes the CPU one
    assert _where(alloc, h0) == _where(alloc, h1) == "gpu"
    assert alloc.offload.tiers[0].num_superseded == 2 and not alloc.offload.tiers[0].lru
    alloc.check_invariants()


def test_random_traffic_keeps_every_invariant():
    """Requests sharing random prefixes through a real scheduler on a tiny pool: after every
    step a hash is in one place, no tier is over capacity, counts are conserved."""
    rng = random.Random(7)
    alloc = PagedAllocator(24 * BS, BS, prefix_caching=True, offload=_tiers(cpu=6, ssd=9))
    sched = make_scheduler("chunked", alloc, max_model_len=256, max_num_seqs=3,
                           max_num_batched_tokens=32, preemption="recompute")
    roots = [[rng.randint(0, 10**6) for _ in range(8)] for _ in range(6)]
    reqs = []
    for i in range(120):
        root = rng.choice(roots)
        ids = root[:rng.randint(1, 8)] + [rng.randint(0, 10**6) for _ in range(rng.randint(0, 3))]
        reqs.append(Request(str(i), 0.0, len(ids) * BS + rng.randint(1, BS), rng.randint(1, 6),
                           block_hashes=ids + [10**7 + i], hash_block_size=BS))
    for r in reqs:
        assert sched.add_request(r, 0.0)
    now, steps = 0.0, 0
    while sched.has_unfinished():
        plan = sched.schedule(now)
        now += 0.01
        sched.update(plan, StepResult(), now)
        alloc.check_invariants()
        steps += 1
        assert steps < 10_000
    assert all(r.state is RequestState.FINISHED for r in reqs)
    st = alloc.offload_stats()
    assert st["tiers"]["cpu"]["loaded_blocks"] > 0 and st["tiers"]["ssd"]["loaded_blocks"] > 0
    assert st["tiers"]["cpu"]["resident_blocks"] <= 6 and st["tiers"]["ssd"]["resident_blocks"] <= 9


# --- pricing of a load -----------------------------------------------------------------------


@pytest.mark.parametrize("tier,overrides", [
    ("cpu", ["kv_cache.cpu_offload_gb=1"]),
    ("ssd", ["kv_cache.ssd_offload_gb=1", "kv_cache.ssd_offload_bandwidth_gbs=6"]),
])
def test_a_load_is_charged_to_the_step_that_admits_the_request(tier, overrides):
    """Hand calculation: the step that admits a request whose prefix sits in a tier costs
    bytes / (tier bandwidth x PCIe efficiency) more (plus one copy launch), bytes = blocks x
    kv_bytes_per_token x block_size; a CPU tier at the default (PCIe) bandwidth prices exactly
    as a swap-in of those tokens."""
    sc = Scenario.from_dict({"model": "llama-3.1-8b", "hardware": "h100-sxm",
                             "cost_model": {"source": "roofline"},
                             "kv_cache": {"prefix_caching": True}})
    sc = sc.override({k: float(v) for k, v in (o.split("=") for o in overrides)})
    dep = resolve_deployment(sc)
    kvb = dep.memory.kv_bytes_per_token
    bs = sc.kv_cache.block_size
    tiers = offload_tiers_of(sc, kvb)
    alloc = PagedAllocator(64 * bs, bs, prefix_caching=True, offload=tiers)
    sched = make_scheduler("chunked", alloc, max_model_len=4096, max_num_batched_tokens=4096)

    def run(req: Request):
        sched.add_request(req, 0.0)
        plan = sched.schedule(0.0)
        sched.update(plan, StepResult(), 0.0)
        while sched.has_unfinished():
            sched.update(sched.schedule(0.0), StepResult(), 0.0)
        return plan

    ids = list(range(20))
    run(Request("p", 0.0, 20 * bs + 1, 1, block_hashes=ids + [99], hash_block_size=bs))
    # Push p's 20 cached blocks out of the GPU (64 blocks) into the tier.
    _evict_all(alloc)
    assert alloc.offload.tiers[0].name == tier and len(alloc.offload.tiers[0].lru) == 20
    plan = run(Request("q", 0.0, 20 * bs + 1, 1, block_hashes=ids + [98], hash_block_size=bs))
    t = alloc.offload.tiers[0]
    loaded_bytes = 20 * bs * kvb
    assert t.num_loaded == 20 and t.num_loaded * t.block_bytes == loaded_bytes
    bandwidth = 64e9 if tier == "cpu" else 6e9  # h100-sxm's PCIe; the SSD as configured
    assert t.load_seconds(20) == pytest.approx(loaded_bytes / bandwidth)
    shape = plan.shape
    expect_tokens = 20 * bs if tier == "cpu" else math.ceil(20 * bs * 64 / 6)
    assert shape.num_swap_tokens == expect_tokens
    roof = getattr(dep.cost_model, "base", dep.cost_model)  # under the compiled-step host floor
    eff = roof.efficiency.pcie_efficiency
    from sim.policies.step import StepShape

    without = StepShape(**{**shape.to_dict(), "num_swap_tokens": 0})
    extra = roof.price(shape) - roof.price(without)
    hand = loaded_bytes / (bandwidth * eff) + roof.efficiency.elementwise_latency_s
    assert extra == pytest.approx(hand, rel=2e-3)  # ceil to whole swap tokens


def _evict_all(alloc: PagedAllocator) -> None:
    pool = alloc.pool
    pool.release(pool.allocate(pool.num_free))
    alloc.check_invariants()


# --- whole simulations -----------------------------------------------------------------------

#: 20 system prompts of 1024 tokens, a GPU pool of 320 blocks (5,120 tokens): the prefixes (2.5 GiB) do
#: not fit on the GPU, they do in a 4 GiB CPU tier (or a small CPU tier and an SSD tier).
SIM = ["model=llama-3.1-8b", "hardware=h100-sxm", "cost_model.source=roofline",
       "kv_cache.prefix_caching=true", "kv_cache.num_gpu_blocks=320",
       "workload.num_requests=150", "workload.arrival.rate=30",
       "workload.prefix={num_prefixes: 20, length: 1024, hash_block_size: 16}",
       "workload.input_len={dist: lognormal, mean: 64, cv: 0.5, max: 256}",
       "workload.output_len={dist: lognormal, mean: 32, cv: 0.5, max: 128}"]
CPU = ["kv_cache.cpu_offload_gb=4"]
SSD = ["kv_cache.cpu_offload_gb=0.5", "kv_cache.ssd_offload_gb=4"]


def test_offload_raises_the_hit_rate_and_accounts_for_every_request():
    gpu = simulate(None, overrides=SIM).summary
    cpu = simulate(None, overrides=SIM + CPU).summary
    ssd = simulate(None, overrides=SIM + SSD).summary
    base = gpu["kv_cache"]["prefix_cache_hit_rate"]
    assert "offload" not in gpu["kv_cache"]
    for s in (cpu, ssd):
        kv = s["kv_cache"]
        assert kv["prefix_cache_hit_rate"] >= base
        assert s["completed"] + s["rejected"] == s["num_requests"] == 150
        off = kv["offload"]
        # The tiers' hit rates add up to the overall rate.
        total = off["gpu"]["hit_rate"] + sum(off[t]["hit_rate"] for t in off["tiers"])
        assert total == pytest.approx(kv["prefix_cache_hit_rate"])
        assert off["gpu"]["evictions"] == off[off["tiers"][0]]["inserted_blocks"]
    assert cpu["kv_cache"]["prefix_cache_hit_rate"] > base + 0.2
    assert cpu["mean_ttft_ms"] < gpu["mean_ttft_ms"]
    assert ssd["kv_cache"]["offload"]["ssd"]["hit_tokens"] > 0
    rows = summary_rows(cpu)
    assert any(m == "hit rate gpu / cpu" for _, m, _ in rows)
    assert not any(m.startswith("hit rate gpu") for _, m, _ in summary_rows(gpu))


def test_same_seed_same_result_and_fast_decode_is_exact():
    a = simulate(None, overrides=SIM + SSD)
    b = simulate(None, overrides=SIM + SSD)
    slow = simulate(None, overrides=SIM + SSD, fast_decode=False)
    strip = lambda s: {k: v for k, v in s.items() if k != "simulator"}  # noqa: E731
    assert strip(a.summary) == strip(b.summary) == strip(slow.summary)
    assert a.steps == slow.steps


def test_offload_off_is_the_run_without_the_keys():
    """Tiers at 0 GiB (bandwidths set or not) give the summary of a config without the keys."""
    absent = simulate(None, overrides=SIM).summary
    zero = simulate(None, overrides=SIM + ["kv_cache.cpu_offload_gb=0", "kv_cache.ssd_offload_gb=0",
                                          "kv_cache.cpu_offload_bandwidth_gbs=10",
                                          "kv_cache.ssd_offload_bandwidth_gbs=3"]).summary
    assert zero == absent


# --- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize("sets,needle", [
    # prefix caching is on by default (vLLM's V1 engine): only turning it off conflicts
    (["kv_cache.cpu_offload_gb=4", "kv_cache.prefix_caching=false"],
     "kv_cache.cpu_offload_gb: KV offload tiers need kv_cache.prefix_caching"),
    (["kv_cache.ssd_offload_gb=4", "scheduler.policy=vllm_v0"],
     "kv_cache.ssd_offload_gb: KV offload tiers need kv_cache.prefix_caching"),
    (["kv_cache.cpu_offload_gb=-1"], "kv_cache.cpu_offload_gb: -1 is outside"),
    (["kv_cache.cpu_offload_bandwidth_gbs=0"], "kv_cache.cpu_offload_bandwidth_gbs: 0 is outside"),
    (["kv_cache.ssd_offload_bandwidth_gbs=fast"], "kv_cache.ssd_offload_bandwidth_gbs: expected a finite number"),
])
def test_bad_offload_settings_name_their_key(sets, needle):
    with pytest.raises(ConfigError) as exc:
        simulate(None, overrides=["workload.num_requests=1"] + sets)
    assert needle in str(exc.value)


def test_a_tier_smaller_than_a_block_is_an_error_naming_its_key():
    with pytest.raises(ConfigError, match=r"^kv_cache.cpu_offload_gb: 1e-06 GiB holds no whole KV block"):
        simulate(None, overrides=["workload.num_requests=1", "kv_cache.prefix_caching=true",
                                  "kv_cache.cpu_offload_gb=0.000001"])


def test_tier_sizes_follow_the_swap_space_conversion():
    sc = Scenario.from_dict({"hardware": "h100-sxm", "kv_cache": {
        "prefix_caching": True, "cpu_offload_gb": 2.0, "ssd_offload_gb": 10.0,
        "cpu_offload_bandwidth_gbs": 50.0}})
    kvb = 131072  # llama-3.1-8b, fp16: 128 KiB a token
    tiers = offload_tiers_of(sc, kvb)
    cpu, ssd = tiers.tiers
    assert cpu.capacity_blocks == 2 * 2**30 // (kvb * 16) == 1024
    assert ssd.capacity_blocks == 5120
    assert cpu.bandwidth == 50e9 and cpu.swap_weight == pytest.approx(64 / 50)
    assert ssd.bandwidth == 6e9  # the documented default
    assert offload_tiers_of(Scenario(), kvb) is None
