"""Engine behaviour beyond parity: rejection, abort, stop conditions, sampling, online replay,
the step trace, and that no KV block outlives its request."""

from __future__ import annotations

import json
import random

import pytest

from runtime import LLM, EngineArgs, LLMEngine, SamplingParams, TimedRequest
from runtime.weights import load_model
from sim.errors import KvplanError
from sim.policies import RequestState
from tests.runtime.helpers import VOCAB, hf_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def _prompt(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


@pytest.fixture(scope="module")
def gqa(hf_models):
    return hf_models["gqa"]


@pytest.fixture()
def engine(gqa):
    """A fresh engine on the shared tiny checkpoint (weights loaded once per module)."""
    loaded = _loaded(gqa[0])
    return lambda **kw: LLMEngine(loaded, EngineArgs(model=gqa[0], **{"block_size": 4, "num_kv_blocks": 64, **kw}))


_CACHE: dict[str, object] = {}


def _loaded(path: str):
    if path not in _CACHE:
        _CACHE[path] = load_model(path)
    return _CACHE[path]


def test_oversize_prompt_rejected_while_others_finish(gqa):
    path, model = gqa
    llm = LLM(path, block_size=4, num_kv_blocks=64, max_model_len=48)
    prompts = [_prompt(5, 0), _prompt(45, 1), _prompt(12, 2)]
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    assert outs[1].finish_reason == "rejected"
    assert "max_model_len 48" in outs[1].reject_reason and outs[1].token_ids == []
    for i in (0, 2):
        assert outs[i].finish_reason in ("length", "stop")
        assert outs[i].token_ids == hf_greedy(model, prompts[i], 8)
    assert llm.engine.num_leaked_blocks() == 0


def test_prompt_larger_than_the_whole_pool_is_rejected(engine):
    eng = engine(num_kv_blocks=4)  # 16 slots
    req = eng.add_request(_prompt(20, 3), GREEDY)
    assert req.state is RequestState.REJECTED and "KV" in req.reject_reason
    assert not eng.has_unfinished()


def test_abort_frees_blocks_running_and_waiting(engine):
    eng = engine(max_num_seqs=2)
    reqs = [eng.add_request(_prompt(10, i), SamplingParams(temperature=0, max_tokens=20)) for i in range(3)]
    eng.step()
    eng.step()
    running, waiting = reqs[0], reqs[2]
    assert running.state is RequestState.RUNNING and eng.allocator.holds(running)
    assert waiting.state is RequestState.WAITING
    free_before = eng.allocator.num_free_slots
    out = eng.abort(running.request_id)
    assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 20
    assert not eng.allocator.holds(running)
    assert eng.allocator.num_free_slots > free_before
    assert eng.abort(waiting.request_id).finish_reason == "abort"
    assert eng.abort("no-such-request") is None
    finished = []
    while eng.has_unfinished():
        finished += eng.step()
    assert [o.request_id for o in finished] == [reqs[1].request_id]
    assert eng.num_leaked_blocks() == 0


def test_swapped_request_abort_drops_its_host_copy(engine):
    """Swap preemption moves a victim's KV to host memory; aborting it there frees that copy,
    and the others still finish with every block back in the pool."""
    eng = engine(block_size=2, num_kv_blocks=14, preemption_mode="swap", max_num_batched_tokens=16)
    reqs = [eng.add_request(_prompt(6, i), SamplingParams(temperature=0, max_tokens=12)) for i in range(3)]
    for _ in range(40):
        eng.step()
        if eng.scheduler.swapped:
            break
    victim = eng.scheduler.swapped[0]
    assert victim.state is RequestState.SWAPPED and len(eng.swap_space) == 1
    assert eng.abort(victim.request_id).finish_reason == "abort"
    assert len(eng.swap_space) == 0 and not eng.allocator.host_blocks
    finished = []
    while eng.has_unfinished():
        finished += eng.step()
    assert sorted(o.request_id for o in finished) == sorted(r.request_id for r in reqs if r is not victim)
    assert all(len(o.token_ids) == 12 for o in finished)
    assert eng.num_leaked_blocks() == 0


def test_stop_token_ids_and_eos(gqa):
    path, model = gqa
    prompt = _prompt(9, 4)
    ref = hf_greedy(model, prompt, 8)
    stop = ref[2]
    llm = LLM(path, block_size=4, num_kv_blocks=64)
    out = llm.generate(prompt_token_ids=[prompt], sampling_params=SamplingParams(
        temperature=0, max_tokens=8, stop_token_ids=[stop]))[0]
    assert out.finish_reason == "stop"
    assert out.token_ids == ref[: ref.index(stop) + 1]
    # ignore_eos: the same token as eos would not stop; max_tokens ends it instead.
    out = llm.generate(prompt_token_ids=[prompt], sampling_params=SamplingParams(
        temperature=0, max_tokens=8, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 8


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine):
    prompt = _prompt(7, 5)
    sp = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, seed=1234, max_tokens=12, ignore_eos=True)
    alone = LLM.from_engine(engine()).generate(prompt_token_ids=[prompt], sampling_params=sp)[0].token_ids
    others = [_prompt(n, 10 + n) for n in (3, 15, 22)]
    mixed = LLM.from_engine(engine(max_num_batched_tokens=8)).generate(
        prompt_token_ids=others + [prompt],
        sampling_params=[SamplingParams(temperature=0.8, max_tokens=5)] * 3 + [sp])[-1].token_ids
    assert alone == mixed
    other_seed = SamplingParams(temperature=1.0, seed=99, max_tokens=12, ignore_eos=True)
    assert LLM.from_engine(engine()).generate(prompt_token_ids=[prompt], sampling_params=other_seed)[0].token_ids != alone


def test_top_k_one_and_tiny_top_p_are_greedy(gqa, engine):
    path, model = gqa
    prompt = _prompt(6, 6)
    ref = hf_greedy(model, prompt, 8)
    llm = LLM.from_engine(engine())
    for sp in (SamplingParams(temperature=1.0, top_k=1, max_tokens=8), SamplingParams(temperature=0.7, top_p=1e-6, max_tokens=8)):
        assert llm.generate(prompt_token_ids=[prompt], sampling_params=sp)[0].token_ids == ref


def test_online_replay_respects_arrival_times(gqa, engine):
    path, model = gqa
    prompts = [_prompt(n, 20 + n) for n in (4, 11, 6)]
    arrivals = [0.0, 0.05, 0.15]
    llm = LLM.from_engine(engine())
    start = llm.engine.now()
    outs = llm.replay([TimedRequest(a, p, GREEDY) for a, p in zip(arrivals, prompts)])
    for out, a, p in zip(outs, arrivals, prompts):
        assert out.token_ids == hf_greedy(model, p, 8)
        assert out.metrics.arrival_time == pytest.approx(start + a, abs=0.02)
        assert out.metrics.first_token_time >= out.metrics.arrival_time
        times = out.outputs[0].token_times
        assert times == sorted(times) and len(times) == len(out.token_ids)
        assert out.metrics.ttft > 0 and out.metrics.e2el >= out.metrics.ttft


def test_step_trace_jsonl(engine, tmp_path):
    path = tmp_path / "steps.jsonl"
    eng = engine(trace_path=str(path), max_num_batched_tokens=8)
    prompts = [_prompt(n, 30 + n) for n in (3, 13, 9)]
    outs = LLM.from_engine(eng).generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    eng.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == eng.tracer.records and lines
    for rec in lines:
        assert rec["seconds"] > 0 and rec["num_tokens"] <= 8
        for key in ("num_prefill_tokens", "num_decode_seqs", "decode_context_tokens",
                    "prefill_attention_work", "batch_size", "free_kv_blocks"):
            assert key in rec
        assert rec["batch_size"] == len(rec["requests"])
    # Every prompt token and every output token but the last was computed exactly once.
    computed = sum(r["num_prefill_tokens"] + r["num_decode_seqs"] for r in lines)
    assert computed == sum(len(p) + len(o.token_ids) - 1 for p, o in zip(prompts, outs))


def test_kv_pool_sized_from_byte_budget(gqa):
    path, _ = gqa
    llm = LLM(path, block_size=8, kv_cache_bytes=1 << 20)
    cfg = llm.engine.config
    per_block = 8 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    assert llm.engine.kv_cache.num_blocks == (1 << 20) // per_block
    assert llm.engine.allocator.num_slots == llm.engine.kv_cache.num_blocks * 8


@pytest.mark.parametrize("bad", [
    lambda p: LLM(p, no_such_knob=1),
    lambda p: LLM(p, block_size=0),
    lambda p: LLM(p, preemption_mode="swap-to-disk"),
    lambda p: LLM(p, preemption_mode="swap", swap_space=-1),
    lambda p: LLM(p, scheduling_policy="fastest"),
    lambda p: LLM(p, max_model_len=10**6),
    lambda p: LLM("/no/such/model"),
    lambda p: SamplingParams(temperature=-1),
    lambda p: SamplingParams(top_p=0),
    lambda p: LLM(p, num_kv_blocks=8).generate(prompt_token_ids=[[VOCAB + 5]]),
    lambda p: LLM(p, num_kv_blocks=8).generate(["text needs a tokenizer"]),
])
def test_bad_input_raises_one_line_kvplan_error(gqa, bad):
    with pytest.raises(KvplanError) as exc:
        bad(gqa[0])
    assert "\n" not in str(exc.value)



def test_prompt_forms(gqa, engine):
    path, model = gqa
    llm = LLM.from_engine(engine())
    prompt = _prompt(5, 40)
    ref = hf_greedy(model, prompt, 8)
    assert [o.token_ids for o in llm.generate(prompt, GREEDY)] == [ref]  # one prompt as ids
    assert [o.token_ids for o in llm.generate([prompt, prompt], GREEDY)] == [ref, ref]
    with pytest.raises(KvplanError, match="not both"):
        llm.generate([prompt], GREEDY, prompt_token_ids=[prompt])


def test_model_runner_reads_block_tables_from_the_plan(engine):
    """The plan carries every scheduled request's block table (as vLLM's scheduler output
    carries block ids); the model runner holds no allocator and addresses KV only through them."""
    from sim.policies import Request, ScheduledRequest, StepPlan

    eng = engine(max_num_batched_tokens=8)
    assert not hasattr(eng.runner, "allocator") and eng.scheduler.emit_block_tables
    seen = []
    schedule = eng.scheduler.schedule

    def checked(now):
        plan = schedule(now)
        for s in plan.scheduled:  # a snapshot equal to the allocator's table at planning time
            assert s.block_table == eng.allocator.block_table(s.request)
            seen.append(s.request.request_id)
        return plan

    eng.scheduler.schedule = checked
    LLM.from_engine(eng).generate(prompt_token_ids=[_prompt(n, 50 + n) for n in (3, 13)], sampling_params=GREEDY)
    assert seen
    # Whatever blocks the plan names are the ones written: no allocator is consulted.
    req = Request("x", 0.0, 6, 1, prompt_token_ids=_prompt(6, 60))
    plan = StepPlan(scheduled=[ScheduledRequest(req, 6, 0, is_prefill=True, block_table=[5, 2])])
    assert eng.runner.prepare(plan).meta.slot_mapping.tolist() == [20, 21, 22, 23, 8, 9]
    with pytest.raises(RuntimeError, match="no block table"):
        eng.runner.prepare(StepPlan(scheduled=[ScheduledRequest(req, 6, 0, is_prefill=True)]))
