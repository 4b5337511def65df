"""Speculative decoding in the runtime: n-gram drafts verified in the target's own step.

What users rely on: greedy output is token for token what plain greedy decoding (and
transformers) gives, drafts really are accepted (fewer steps), sampled output keeps the target's
distribution, stop tokens inside an accepted run end the request there, and no block leaks.
"""

from __future__ import annotations

import random

import pytest
import torch

from runtime import LLM, SamplingParams
from runtime.speculative import NgramProposer, verify_greedy, verify_sampled
from sim.policies import Request
from sim.policies.kv import make_allocator
from sim.policies.schedulers import make_scheduler
from tests.runtime.helpers import VOCAB, hf_greedy

MAX_NEW = 24


def _repetitive_prompts(seed: int = 3) -> list[list[int]]:
    """Prompts that repeat a motif, so an n-gram lookup finds continuations (as in quoting or
    code editing); plus one random prompt where it mostly will not."""
    rng = random.Random(seed)
    out = []
    for motif_len, reps in [(5, 4), (3, 6), (7, 3)]:
        motif = [rng.randrange(3, VOCAB) for _ in range(motif_len)]
        out.append(motif * reps + motif[:2])
    out.append([rng.randrange(3, VOCAB) for _ in range(11)])
    return out


# --- the proposer and the acceptance rules ---------------------------------------------------

def test_ngram_proposer_takes_the_longest_most_recent_match():
    p = NgramProposer(k=3, min_n=1, max_n=3)
    # suffix (7, 8, 9) last occurred at index 4; what followed it is the draft.
    assert p.propose([7, 8, 9, 1, 7, 8, 9, 2, 5, 7, 8, 9]) == [2, 5, 7]
    # no 3- or 2-gram recurs; the 1-gram 4 does, most recently followed by 6.
    assert p.propose([4, 5, 1, 4, 6, 2, 4]) == [6, 2, 4]
    assert p.propose([1, 2, 3, 4]) == []
    assert p.propose([5]) == []
    assert NgramProposer(k=2).propose([1, 2, 1, 2, 1]) == [2, 1]


def test_ngram_proposer_rejects_bad_settings():
    with pytest.raises(ValueError):
        NgramProposer(k=0)
    with pytest.raises(ValueError):
        NgramProposer(k=2, min_n=3, max_n=2)


def test_verify_greedy_keeps_drafts_up_to_the_first_mismatch_then_adds_the_target_token():
    assert verify_greedy([5, 6, 7, 8], [5, 6, 7]) == [5, 6, 7, 8]  # all accepted + bonus
    assert verify_greedy([5, 9, 7, 8], [5, 6, 7]) == [5, 9]  # second draft rejected
    assert verify_greedy([4, 6, 7, 8], [5, 6, 7]) == [4]
    assert verify_greedy([4], []) == [4]


def test_verify_sampled_emits_the_target_distribution():
    """With a deterministic draft, speculative sampling's first token is distributed as p."""
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    gen = torch.Generator().manual_seed(0)
    n = 6000
    counts = torch.zeros(4)
    accepted = 0
    for _ in range(n):
        out = verify_sampled(p, [2], gen)
        counts[out[0]] += 1
        accepted += out[0] == 2 and len(out) == 2
    freq = counts / n
    assert torch.allclose(freq, p[0], atol=0.02), freq
    assert abs(accepted / n - 0.2) < 0.02  # the draft survives with probability p(d)


# --- the scheduler's side ----------------------------------------------------------------------

def test_scheduler_verifies_only_the_drafts_the_proposer_found():
    alloc = make_allocator("paged", num_slots=256, block_size=4, max_model_len=64)
    sched = make_scheduler("chunked", alloc, max_model_len=64, num_speculative_tokens=4)
    reqs = [Request(str(i), 0.0, 4, 10, prompt_token_ids=[1, 2, 3, 4]) for i in range(3)]
    for r in reqs:
        sched.add_request(r, 0.0)
    plan = sched.schedule(0.0)
    sched.update(plan, _one_token_each(plan), 0.0)
    reqs[0].num_draft_tokens, reqs[1].num_draft_tokens = 2, 0  # reqs[2]: None = a draft model
    plan = sched.schedule(0.0)
    spec = {s.request.request_id: s.num_spec_tokens for s in plan.scheduled}
    assert spec == {"0": 2, "1": 0, "2": 4}
    assert plan.shape.num_spec_tokens == 6


def _one_token_each(plan):
    from sim.policies import StepResult
    return StepResult(sampled_token_ids={s.request.request_id: [7] for s in plan.scheduled})


# --- the engine ----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["roomy", "preempt_prefix"])
def test_greedy_speculative_decoding_matches_transformers(hf_models, case):
    path, model = hf_models["gqa"]
    prompts = _repetitive_prompts()
    ref = [hf_greedy(model, p, MAX_NEW) for p in prompts]
    args = dict(block_size=4, num_kv_blocks=128, max_num_batched_tokens=32)
    if case == "preempt_prefix":  # drafts on top of preemption, recompute and prefix hits
        args = dict(block_size=2, num_kv_blocks=40, max_num_batched_tokens=16, enable_prefix_caching=True)
    llm = LLM(path, num_speculative_tokens=3, **args)
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=SamplingParams(temperature=0, max_tokens=MAX_NEW))
    assert [o.token_ids for o in outs] == ref
    accepted = sum(o.metrics.num_spec_accepted for o in outs)
    proposed = sum(o.metrics.num_spec_proposed for o in outs)
    assert 0 < accepted <= proposed
    steps = llm.engine.tracer.records
    assert sum(r["num_spec_tokens"] for r in steps) == proposed
    eng = llm.engine
    assert sum(eng.spec_accepted_at) == accepted and eng.spec_judged[0] == sum(o.metrics.num_spec_steps for o in outs)
    assert all(0.0 <= a <= 1.0 for a in eng.acceptance_table())
    avail = eng.draft_availability()
    assert len(avail) == 4 and abs(sum(avail) - 1) < 1e-9 and avail[0] < 1
    assert llm.engine.num_leaked_blocks() == 0
    if case == "preempt_prefix":
        assert llm.engine.scheduler.num_preemptions > 0


def test_speculation_saves_steps(hf_models):
    path, _ = hf_models["gqa"]
    prompt = _repetitive_prompts()[:1]
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW)
    plain = LLM(path, block_size=4, num_kv_blocks=64)
    spec = LLM(path, block_size=4, num_kv_blocks=64, num_speculative_tokens=4)
    a = plain.generate(prompt_token_ids=prompt, sampling_params=params)[0]
    b = spec.generate(prompt_token_ids=prompt, sampling_params=params)[0]
    assert a.token_ids == b.token_ids
    assert b.metrics.num_spec_accepted > 0
    assert len(spec.engine.tracer.records) == len(plain.engine.tracer.records) - b.metrics.num_spec_accepted


def test_a_stop_token_inside_accepted_drafts_ends_the_request_there(hf_models):
    path, _ = hf_models["gqa"]
    prompt = _repetitive_prompts()[:1]
    free = LLM(path, block_size=4, num_kv_blocks=64).generate(
        prompt_token_ids=prompt, sampling_params=SamplingParams(temperature=0, max_tokens=MAX_NEW))[0]
    stop = free.token_ids[6]
    params = SamplingParams(temperature=0, max_tokens=MAX_NEW, stop_token_ids=[stop])
    want = LLM(path, block_size=4, num_kv_blocks=64).generate(prompt_token_ids=prompt, sampling_params=params)[0]
    llm = LLM(path, block_size=4, num_kv_blocks=64, num_speculative_tokens=4)
    got = llm.generate(prompt_token_ids=prompt, sampling_params=params)[0]
    assert got.token_ids == want.token_ids and got.token_ids[-1] == stop
    assert got.finish_reason == "stop"
    assert llm.engine.num_leaked_blocks() == 0


def test_seeded_sampling_with_speculation_is_reproducible(hf_models):
    path, _ = hf_models["gqa"]
    prompts = _repetitive_prompts()
    params = SamplingParams(temperature=0.8, top_k=20, seed=11, max_tokens=MAX_NEW)
    runs = []
    for _ in range(2):
        llm = LLM(path, block_size=4, num_kv_blocks=128, num_speculative_tokens=3)
        runs.append([o.token_ids for o in llm.generate(prompt_token_ids=prompts, sampling_params=params)])
        assert llm.engine.num_leaked_blocks() == 0
    assert runs[0] == runs[1]
    assert all(len(t) == MAX_NEW for t in runs[0])


def test_bad_speculative_settings_are_config_errors():
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        LLM("random:smollm2-135m", num_speculative_tokens=-1)
    with pytest.raises(ConfigError, match="prompt_lookup"):
        LLM("random:smollm2-135m", num_speculative_tokens=2, prompt_lookup_min=3, prompt_lookup_max=2)
