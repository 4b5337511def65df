"""Sampling filters on known distributions (the engine tests cover greedy and seeds)."""

from __future__ import annotations

import math

import pytest
import torch

from runtime.sampling import Sampler, SamplingParams, _filtered_probs

# probabilities 0.5, 0.25, 0.15, 0.1
LOGITS = torch.tensor([0.5, 0.25, 0.15, 0.1]).log()


@pytest.mark.parametrize("params,kept", [
    (SamplingParams(top_k=2), {0, 1}),
    (SamplingParams(top_p=0.5), {0}),  # the top token alone reaches 0.5
    (SamplingParams(top_p=0.6), {0, 1}),
    (SamplingParams(top_p=0.8), {0, 1, 2}),
    (SamplingParams(top_k=3, top_p=0.6), {0, 1}),
    (SamplingParams(), {0, 1, 2, 3}),
])
def test_top_k_top_p_keep_the_right_tokens(params, kept):
    probs = _filtered_probs(LOGITS, params)
    assert {i for i, p in enumerate(probs.tolist()) if p > 0} == kept
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-6)


def test_temperature_sharpens():
    hot = _filtered_probs(LOGITS, SamplingParams(temperature=2.0))
    cold = _filtered_probs(LOGITS, SamplingParams(temperature=0.5))
    assert cold[0] > 0.5 > hot[0]


def test_seeded_rows_draw_from_their_own_stream():
    sampler = Sampler()
    logits = torch.zeros(2, 1000)
    sp = SamplingParams(seed=5)
    first = sampler(logits, ["a", "b"], [sp, sp])
    assert first[0] == first[1]  # same seed, same first draw, whatever the row
    one = logits[:1]
    later = [sampler(one, ["a"], [sp])[0] for _ in range(3)]
    assert later != [first[0]] * 3  # the stream advances
    sampler.forget("a")
    assert sampler(one, ["a"], [sp]) == [first[0]]  # a new request with the same seed restarts
    with pytest.raises(ValueError, match="2 logit rows for 1 requests"):
        sampler(logits, ["a"], [sp])


@pytest.mark.parametrize("temperature", [-0.1, math.nan, math.inf])
def test_temperature_must_be_finite_and_non_negative(temperature):
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="temperature"):
        SamplingParams(temperature=temperature)


@pytest.mark.parametrize("field", ["max_num_seqs", "max_num_batched_tokens", "num_threads"])
def test_engine_args_refuse_non_positive_limits(field):
    """EngineArgs is a public constructor (LLM(**kwargs)), not only the CLI's: it checks its own."""
    from runtime.args import EngineArgs
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match=field):
        EngineArgs(**{field: 0})
