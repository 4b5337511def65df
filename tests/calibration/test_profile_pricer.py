"""``ProfileCostModel``: scalar, vectorised and decode-window prices agree bit for bit, and the
simulator's fast decode path with a profile equals its step-by-step path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from sim.api import simulate
from sim.pricing import SHAPE_FIELDS, ProfileCostModel
from sim.policies.step import StepShape
from tests.calibration.helpers import TRUE, make_profile

SHAPES = [
    StepShape(),
    StepShape(num_decode_seqs=1, decode_context_tokens=17),
    StepShape(num_decode_seqs=48, decode_context_tokens=48 * 700),
    StepShape(num_prefill_tokens=2048, num_prefill_seqs=1, prefill_attention_work=2048 * 2049 // 2),
    StepShape(num_prefill_tokens=300, num_prefill_seqs=3, num_decode_seqs=20, decode_context_tokens=5000,
              prefill_context_tokens=512, prefill_attention_work=300 * 512 + 300 * 301 // 2),
    StepShape(num_swap_tokens=64),
]


@pytest.fixture
def cm():
    return ProfileCostModel(make_profile())


def test_price_is_the_linear_model(cm):
    s = SHAPES[4]
    rows = 320
    expected = (TRUE["intercept"] + TRUE["gemm_rows"] * rows + TRUE["gemm_rows_over_knee"] * (rows - 64)
                + TRUE["num_prefill_seqs"] * 3 + TRUE["num_decode_seqs"] * 20
                + TRUE["decode_context_tokens"] * 5000 + TRUE["prefill_context_tokens"] * 512
                + TRUE["prefill_attention_work"] * s.prefill_attention_work)
    assert cm.step_time(s) == pytest.approx(expected, rel=1e-12)
    assert cm.step_time(StepShape()) == 0.0
    assert sum(cm.breakdown(s).values()) == pytest.approx(cm.step_time(s), rel=1e-12)
    # A swap-only step: this profile never measured swaps, so only the intercept prices it.
    assert cm.step_time(SHAPES[5]) == TRUE["intercept"]


def test_vectorised_equals_scalar_exactly(cm):
    cols = {f: np.array([getattr(s, f) for s in SHAPES]) for f in SHAPE_FIELDS}
    np.testing.assert_array_equal(cm.step_times(**cols), [cm.step_time(s) for s in SHAPES])
    with pytest.raises(TypeError, match="unknown StepShape field"):
        cm.step_times(batch=[1])


def test_decode_window_equals_step_by_step_exactly(cm):
    for shape in SHAPES[1:3] + [replace(SHAPES[2], num_spec_tokens=96)]:
        window = [replace(shape, decode_context_tokens=shape.decode_context_tokens
                          + i * shape.num_decode_seqs) for i in range(300)]
        assert cm.price_many(window).tolist() == [cm.step_time(s) for s in window]


def test_simulate_with_profile_fast_path_equals_step_by_step(profile_path):
    over = ["model=smollm2-135m", "kv_cache.num_gpu_blocks=64", "kv_cache.max_model_len=1024",
            f"cost_model.profile={profile_path}", "workload.num_requests=120", "workload.arrival.rate=8",
            "workload.input_len={dist: lognormal, mean: 60, cv: 1, max: 400}",
            "workload.output_len={dist: lognormal, mean: 80, cv: 1, max: 400}"]
    fast = simulate(None, overrides=over, seed=2)
    slow = simulate(None, overrides=over, seed=2, fast_decode=False)
    assert fast.steps == slow.steps
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert fast.summary["kv_cache"]["preemptions"] > 0  # 1,024 KV slots: memory pressure exercised
    sc = fast.summary["scenario"]
    assert sc["kv_slots_per_replica"] == 64 * 16 and "ProfileCostModel" in sc["cost_model"]
    # Priced by the profile: a step of this workload costs at least the profile's intercept.
    assert min(d for d in fast.steps["duration_s"] if d > 0) >= TRUE["intercept"]
    # The roofline would price the same run far faster (a 135M model on an A100).
    roof = simulate(None, overrides=over[:3] + over[4:], seed=2)
    assert roof.summary["duration_s"] < fast.summary["duration_s"]
