"""The real engine runs SGLang's policies (``engine.name: sglang``): the same scheduler and radix
allocator objects the simulator prices, over a real model and a real paged KV cache addressed by
the radix allocator's page tables. Greedy outputs must equal transformers' whatever the policy,
prefix hits must read the right KV, and no slot may outlive its request."""

from __future__ import annotations

import random

import pytest

from runtime import LLM, EngineArgs, SamplingParams
from sim.scenario import Scenario
from tests.runtime.helpers import VOCAB, hf_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


def _prompts(n: int, shared: int, own: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(3, VOCAB) for _ in range(shared)]
    return [system + [rng.randrange(3, VOCAB) for _ in range(own + i % 3)] for i in range(n)]


@pytest.fixture(scope="module")
def gqa(hf_models):
    return hf_models["gqa"]


@pytest.mark.parametrize("page_size", [1, 4])
def test_sglang_policies_match_transformers_and_hit_the_radix_cache(gqa, page_size):
    path, model = gqa
    # 13 shared tokens: not a multiple of 4, so pages cut the match and page 1 does not.
    prompts = _prompts(6, shared=13, own=4)
    llm = LLM(path, block_size=page_size, num_kv_blocks=400 // page_size, max_model_len=64,
              scheduling_policy="sglang", kv_allocator="radix",
              sglang_options={"schedule_policy": "lpm", "schedule_conservativeness": 1.0,
                              "enable_mixed_chunk": False, "max_prefill_tokens": 16384})
    # Sequentially, so later prompts find the first one's prefix in the tree.
    outs = [llm.generate(prompt_token_ids=[p], sampling_params=GREEDY)[0] for p in prompts]
    for p, o in zip(prompts, outs):
        assert o.token_ids == hf_greedy(model, p, 6)
    alloc = llm.engine.allocator
    assert alloc.num_prefix_hits == 5 * (13 // page_size * page_size)
    assert llm.engine.num_leaked_blocks() == 0


def test_retraction_in_the_real_engine_keeps_outputs_exact(gqa):
    """The scheduler test's case on a real model: three requests admitted one step apart into a
    62-slot pool (conservativeness 0.01) run it out; two are retracted, prefilled again later,
    and every output still equals transformers' greedy one."""
    path, model = gqa
    rng = random.Random(5)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (10, 14, 4)]
    params = SamplingParams(temperature=0.0, max_tokens=30)
    llm = LLM(path, block_size=1, num_kv_blocks=62, max_model_len=64, scheduling_policy="sglang",
              kv_allocator="radix", enable_prefix_caching=False,
              sglang_options={"schedule_conservativeness": 0.01})
    eng = llm.engine
    reqs, outs = [], {}
    for p in prompts:
        reqs.append(eng.add_request(p, params))
        for o in eng.step():
            outs[o.request_id] = o
    while eng.has_unfinished():
        for o in eng.step():
            outs[o.request_id] = o
    for p, r in zip(prompts, reqs):
        assert outs[r.request_id].token_ids == hf_greedy(model, p, 30)
    assert eng.scheduler.num_retractions == 2
    assert eng.num_leaked_blocks() == 0


def test_engine_args_from_an_sglang_scenario():
    sc = Scenario.from_dict({"engine": {"name": "sglang"}, "sglang": {"schedule_policy": "lpm", "page_size": 4}})
    args = EngineArgs.from_scenario(sc)
    assert args.kv_allocator == "radix" and args.policy() == "sglang" and args.block_size == 4
    assert args.sglang_options["schedule_policy"] == "lpm"
    assert EngineArgs.from_scenario(Scenario.from_dict({})).kv_allocator == "paged"


def test_the_real_engine_polls_for_requests_as_sglang_does(gqa):
    """--scheduler-recv-interval 3 in the real engine, through the simulator's RecvSkipper: a
    request added while A decodes reaches the scheduler only after the third decode step since
    A's extend batch; both outputs still equal transformers' greedy ones."""
    path, model = gqa
    rng = random.Random(7)
    pa, pb = ([rng.randrange(3, VOCAB) for _ in range(n)] for n in (9, 7))
    params = SamplingParams(temperature=0.0, max_tokens=12)
    llm = LLM(path, block_size=1, num_kv_blocks=200, max_model_len=64, scheduling_policy="sglang",
              kv_allocator="radix", sglang_options={"scheduler_recv_interval": 3})
    eng = llm.engine
    outs = {}
    a = eng.add_request(pa, params)
    eng.step()                       # A's extend batch: the loop polls after it
    eng.step()                       # decode 1
    b = eng.add_request(pb, params)  # arrives while A decodes
    eng.step()                       # decode 2: B not read yet
    assert b not in eng.scheduler.waiting and b.first_scheduled_time is None
    eng.step()                       # decode 3: the loop polls after it
    assert b in eng.scheduler.waiting
    while eng.has_unfinished():
        for o in eng.step():
            outs[o.request_id] = o
    assert outs[a.request_id].token_ids == hf_greedy(model, pa, 12)
    assert outs[b.request_id].token_ids == hf_greedy(model, pb, 12)
    assert eng.num_leaked_blocks() == 0
