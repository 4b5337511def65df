"""Greedy outputs match transformers token for token, whatever the engine does to get there:
small and odd block sizes, chunked prefill on and off, prefix caching on and off, and a KV pool
small enough that requests are preempted and recomputed."""

from __future__ import annotations

import random

import pytest

from runtime import LLM, SamplingParams
from tests.runtime.helpers import SHAPES, VOCAB, hf_greedy

MAX_NEW = 10


def _prompts(seed: int = 0, lengths=(3, 17, 30, 1, 9)) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def _reference(model, prompts):
    return [hf_greedy(model, p, MAX_NEW) for p in prompts]


GREEDY = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)

# (engine args, what the case exercises)
ENGINE_CASES = {
    "chunked_prefix_bs4": dict(block_size=4, num_kv_blocks=128, enable_prefix_caching=True,
                               enable_chunked_prefill=True, max_num_batched_tokens=16),
    "v0_noprefix_bs3": dict(block_size=3, num_kv_blocks=128, enable_prefix_caching=False,
                            enable_chunked_prefill=False),
    "preempt_bs2": dict(block_size=2, num_kv_blocks=24, enable_prefix_caching=False,
                        enable_chunked_prefill=True, max_num_batched_tokens=12),
    # Recompute after preemption may hit the victim's own still-cached blocks (outputs included).
    "preempt_prefix_bs2": dict(block_size=2, num_kv_blocks=24, enable_prefix_caching=True,
                               enable_chunked_prefill=True, max_num_batched_tokens=12),
    # Swap preemption: the victim's KV goes to host memory and comes back into other blocks.
    "preempt_swap_bs2": dict(block_size=2, num_kv_blocks=24, enable_prefix_caching=False,
                             enable_chunked_prefill=True, max_num_batched_tokens=12, preemption_mode="swap"),
    "preempt_swap_v0_prefix_bs3": dict(block_size=3, num_kv_blocks=16, enable_prefix_caching=True,
                                       enable_chunked_prefill=False, preemption_mode="swap"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_greedy_parity_across_shapes(hf_models, shape):
    path, model = hf_models[shape]
    prompts = _prompts()
    ref = _reference(model, prompts)
    llm = LLM(path, **ENGINE_CASES["chunked_prefix_bs4"])
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    assert [o.token_ids for o in outs] == ref
    assert llm.engine.num_leaked_blocks() == 0


@pytest.mark.parametrize("backend", ["sdpa", "torch"])
@pytest.mark.parametrize("case", list(ENGINE_CASES))
def test_greedy_parity_across_engine_settings(hf_models, case, backend):
    """Both CPU attention paths: the fused SDPA one (the default) and the float32 reference."""
    path, model = hf_models["gqa"]
    prompts = _prompts(seed=1)
    ref = _reference(model, prompts)
    llm = LLM(path, attention_backend=backend, **ENGINE_CASES[case])
    assert llm.engine.runner.attention_backend == backend
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    assert [o.token_ids for o in outs] == ref
    assert llm.engine.num_leaked_blocks() == 0
    if case.startswith("preempt"):
        assert llm.engine.scheduler.num_preemptions > 0, "the pool was meant to be too small"
        assert sum(o.metrics.num_preemptions for o in outs) > 0
    if "swap" in case:
        assert llm.engine.scheduler.num_swapped_tokens > 0, "nothing was swapped"
        assert len(llm.engine.swap_space) == 0  # every host copy came back


@pytest.mark.parametrize("policy", ["orca", "static", "vllm_v0", "chunked"])
def test_every_scheduler_policy_gives_the_same_tokens(hf_models, policy):
    path, model = hf_models["mha_tied"]
    prompts = _prompts(seed=2)
    ref = _reference(model, prompts)
    llm = LLM(path, block_size=4, num_kv_blocks=96, scheduling_policy=policy, max_num_seqs=3)
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    assert [o.token_ids for o in outs] == ref
    assert llm.engine.num_leaked_blocks() == 0


def test_static_batch_whose_live_members_are_all_preempted_still_returns(hf_models):
    """A short request finishes first and keeps its blocks (static batches return together);
    the long one then runs out of memory and preempts itself, leaving only finished members.
    That padding-only step must end the batch (the engine once spun on it for ever); the long
    one is recomputed in the next batch and still matches transformers."""
    path, model = hf_models["mha_tied"]
    rng = random.Random(4)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(4)], [rng.randrange(3, VOCAB) for _ in range(4)]]
    params = [SamplingParams(temperature=0.0, max_tokens=2), SamplingParams(temperature=0.0, max_tokens=24)]
    llm = LLM(path, block_size=4, num_kv_blocks=7, scheduling_policy="static", max_num_seqs=2)
    engine = llm.engine
    ids = [engine.add_request(p, sp).request_id for p, sp in zip(prompts, params)]
    outs = {}
    for _ in range(200):  # bounded: a regression fails here instead of hanging the suite
        if not engine.has_unfinished():
            break
        outs.update((o.request_id, o) for o in engine.step())
    assert not engine.has_unfinished(), "the static batch never returned"
    assert [outs[i].token_ids for i in ids] == [hf_greedy(model, p, sp.max_tokens) for p, sp in zip(prompts, params)]
    assert llm.engine.scheduler.num_preemptions > 0, "the pool was meant to be too small"
    assert llm.engine.num_leaked_blocks() == 0


def test_prefix_cache_hits_skip_compute_and_keep_parity(hf_models):
    path, model = hf_models["gqa"]
    rng = random.Random(3)
    shared = [rng.randrange(3, VOCAB) for _ in range(20)]
    prompts = [shared + [rng.randrange(3, VOCAB) for _ in range(n)] for n in (2, 7, 11)]
    ref = _reference(model, prompts)
    llm = LLM(path, block_size=4, num_kv_blocks=128, enable_prefix_caching=True, max_num_batched_tokens=24)
    first = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    again = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
    assert [o.token_ids for o in first] == ref
    assert [o.token_ids for o in again] == ref
    # The shared 20-token prefix is 5 full blocks of 4: later requests reuse them.
    assert sum(o.metrics.num_cached_tokens for o in first) >= 20
    assert all(o.metrics.num_cached_tokens >= 20 for o in again)
    # Cached tokens were really skipped: the second pass computed fewer prefill tokens.
    recs = llm.engine.tracer.records
    split = next(i for i, r in enumerate(recs) if any(q[0] == again[0].request_id for q in r["requests"]))
    prefill_first = sum(r["num_prefill_tokens"] for r in recs[:split])
    prefill_again = sum(r["num_prefill_tokens"] for r in recs[split:])
    assert prefill_again <= prefill_first - 2 * 20
    assert llm.engine.num_leaked_blocks() == 0


# --- Qwen3 and mixtures of experts ------------------------------------------------------------

@pytest.fixture(scope="module")
def new_models(tmp_path_factory):
    from tests.runtime.helpers import NEW_SHAPES, save_random_hf_model

    out = {}
    for name, shape in NEW_SHAPES.items():
        path = str(tmp_path_factory.mktemp(f"hf_{name}"))
        out[name] = (path, save_random_hf_model(path, shape))
    return out


@pytest.mark.parametrize("shape", ["qwen3", "mixtral", "qwen3_moe", "qwen3_moe_raw"])
def test_greedy_parity_for_qwen3_and_mixtures_of_experts(new_models, shape):
    """Qwen3's per-head q/k norm and the MoE layers (router softmax, top-k, renormalisation,
    experts summed in transformers' order) on the same paged KV cache and the same
    ``sim.policies``, under chunked prefill with prefix caching and under preemption."""
    path, model = new_models[shape]
    prompts = _prompts(seed=2)
    ref = _reference(model, prompts)
    for case in ("chunked_prefix_bs4", "preempt_bs2"):
        llm = LLM(path, **ENGINE_CASES[case])
        outs = llm.generate(prompt_token_ids=prompts, sampling_params=GREEDY)
        assert [o.token_ids for o in outs] == ref, case
        assert llm.engine.num_leaked_blocks() == 0


def test_moe_routing_really_varies(new_models):
    """The parity above must not pass because every token went to the same experts."""
    import torch

    path, model = new_models["qwen3_moe"]
    torch.manual_seed(0)
    _, _, chosen = model.model.layers[0].mlp.gate(torch.randn(64, 64))  # logits, weights, ids
    assert len(torch.unique(chosen)) == 8


@pytest.mark.parametrize("kind,drop", [("mixtral", "num_local_experts"), ("qwen3_moe", "num_local_experts"),
                                       ("qwen3_moe", "moe_intermediate_size")])
def test_a_moe_config_missing_its_expert_shape_is_one_line(new_models, kind, drop):
    import json
    from pathlib import Path

    from runtime.model_config import ModelConfig
    from sim.errors import ConfigError

    cfg = json.loads((Path(new_models[kind][0]) / "config.json").read_text())
    cfg.pop(drop)
    cfg.pop("num_experts", None)
    with pytest.raises(ConfigError, match=drop) as err:
        ModelConfig.from_hf_dict(cfg)
    assert "\n" not in str(err.value)
