"""The fit: recovers a known model from noisy steps, reports error on steps it never saw, turns
trace records into step periods, and refuses unusable input in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibration.fit import FitError, Samples, fit, read_trace, samples_from_records, step_periods
from sim.errors import KvplanError, TraceFormatError
from tests.calibration.helpers import KNEE, TRUE, synthetic_samples


def test_fit_recovers_known_coefficients_and_knee():
    result = fit(synthetic_samples(noise=0.01))
    assert result.knee == KNEE
    assert set(result.features) == set(TRUE) | {"gemm_multi_row"}
    for name, true in TRUE.items():
        assert result.coefficients[name] == pytest.approx(true, rel=0.15), name
    # the synthetic truth has no one-row/many-row step: the fit finds (almost) none
    assert result.coefficients["gemm_multi_row"] < 0.1 * TRUE["intercept"]
    err = result.error
    assert err["heldout_mape"] < 0.02 and err["heldout_p90_ape"] < 0.03
    assert err["num_heldout"] == 120 and err["num_train"] == 480
    assert err["unused_features"] == ["num_swap_tokens", "num_spec_seqs", "num_padding_tokens"]  # never seen: not fitted


def test_heldout_error_is_honest_about_noise():
    noisy = fit(synthetic_samples(noise=0.10)).error
    # |N(0, 0.1)| has mean 0.08: a fit cannot predict noise, and the held-out error says so.
    assert 0.05 < noisy["heldout_mape"] < 0.12
    assert noisy["heldout_p90_ape"] > noisy["heldout_mape"]


def test_split_is_seeded():
    s = synthetic_samples(noise=0.05)
    assert fit(s, seed=3).error == fit(s, seed=3).error
    assert fit(s, seed=3).error["heldout_mape"] != fit(s, seed=4).error["heldout_mape"]


def test_no_knee_when_the_data_has_none():
    s = synthetic_samples(noise=0.0)
    rows = s.cols["num_prefill_tokens"] + s.cols["num_decode_seqs"]
    s.seconds = s.seconds - TRUE["gemm_rows_over_knee"] * np.maximum(rows - KNEE, 0)
    result = fit(s, knees=(None,))
    assert result.knee is None and "gemm_rows_over_knee" not in result.features
    assert result.error["heldout_max_ape"] < 1e-6


def test_too_few_steps_is_a_user_error():
    s = synthetic_samples(n=6)
    with pytest.raises(FitError, match="6 usable steps") as exc:
        fit(s)
    assert isinstance(exc.value, KvplanError) and "\n" not in str(exc.value)


def _record(step, start, seconds, **shape):
    return {"step": step, "start": start, "seconds": seconds, "schedule_seconds": 0.0,
            "num_prefill_tokens": 0, "num_decode_seqs": 0, **shape}


def test_step_period_adds_bookkeeping_and_drops_idle_waits():
    recs = [_record(0, 0.000, 0.100, num_decode_seqs=1),
            _record(1, 0.102, 0.100, num_decode_seqs=1),   # 2 ms bookkeeping before step 2
            _record(2, 0.204, 0.100, num_decode_seqs=1),   # then 5 s idle: no request in flight
            _record(3, 5.304, 0.100, num_decode_seqs=1)]
    np.testing.assert_allclose(step_periods(recs), [0.102, 0.102, 0.102, 0.102])


def test_samples_drop_warmup_and_empty_steps():
    recs = [_record(i, 0.1 * i, 0.09, num_decode_seqs=2, decode_context_tokens=10 + 2 * i) for i in range(8)]
    recs[5]["num_decode_seqs"] = 0  # an empty step carries no timing information
    s = samples_from_records(recs, warmup_steps=3)
    assert s.n == 4 and s.num_warmup_dropped == 3
    assert list(s.cols["decode_context_tokens"]) == [16, 18, 22, 24]
    merged = Samples.concat([s, s])
    assert merged.n == 8 and merged.num_warmup_dropped == 6


def test_read_trace_names_file_and_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(_record(0, 0, 0.1, num_decode_seqs=1)) + "\n" + '{"seconds": "x"}\n')
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: seconds: expected a number"):
        read_trace(p)
    p.write_text("not json\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:1: not JSON"):
        read_trace(p)
    p.write_text("\n[1, 2]\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: not a JSON object"):
        read_trace(p)
    with pytest.raises(TraceFormatError, match="trace file not found"):
        read_trace(tmp_path / "missing.jsonl")


def test_fit_recovers_the_step_from_one_row_to_many():
    """A CPU runs one decode as matrix-vector products and two or more as blocked GEMMs: the
    fit must price the jump, not spread it over the slope (measured: 38 -> 58 ms, SmolLM2)."""
    s = synthetic_samples(noise=0.01)
    rows = s.cols["num_prefill_tokens"] + s.cols["num_decode_seqs"]
    jump = 0.020
    s.seconds = s.seconds + jump * (rows >= 2)
    result = fit(s)
    assert result.coefficients["gemm_multi_row"] == pytest.approx(jump, rel=0.1)
    assert result.error["heldout_mape"] < 0.02
