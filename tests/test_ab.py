"""A/B experiments: common random numbers, bootstrap intervals, verdicts with the right sign."""

from __future__ import annotations

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from cli import analysis as cli_analysis
from sim.analysis.ab import config_diff, run_ab, verdict
from sim.analysis.stats import mean_interval, paired_bootstrap
from sim.errors import ConfigError

LOAD = ["workload.num_requests=200", "workload.arrival.rate=20", "slo.ttft_ms=500", "slo.tpot_ms=60"]
PAGED = {"kv_cache": {"allocator": "paged"}}
CONTIGUOUS = {"kv_cache": {"allocator": "contiguous", "reserve": "max"}}


def test_identical_configs_are_not_different():
    r = run_ab(PAGED, PAGED, seeds=2, overrides=LOAD, num_bootstrap=300)
    assert {row["verdict"] for row in r.rows} == {"not significant"}
    assert all(row["diff"] == 0 and row["ci_low"] == 0 == row["ci_high"] for row in r.rows)
    assert r.differences == [] and "No metric differs significantly" in r.headline()


def test_contiguous_reservation_is_worse_than_paged_with_the_right_sign():
    r = run_ab(PAGED, CONTIGUOUS, seeds=2, overrides=LOAD, num_bootstrap=300)
    ttft = next(row for row in r.rows if row["metric"] == "p99_ttft_ms")
    assert ttft["diff"] > 0 and ttft["ci_low"] > 0 and ttft["verdict"] == "B worse"
    assert r.verdict("slo_attainment") == "B worse"
    assert r.differences == [{"key": "kv_cache.allocator", "a": "paged", "b": "contiguous"}]
    swapped = run_ab(CONTIGUOUS, PAGED, seeds=2, overrides=LOAD, num_bootstrap=300)
    assert swapped.verdict("p99_ttft_ms") == "B better"
    row = next(x for x in swapped.rows if x["metric"] == "p99_ttft_ms")
    assert row["diff"] == pytest.approx(-ttft["diff"])


def test_both_arms_see_the_same_requests_and_progress_is_reported():
    seen = []
    r = run_ab(PAGED, {"scheduler": {"max_num_seqs": 64}}, seeds=2, overrides=LOAD,
               num_bootstrap=100, on_run=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert r.seeds == [0, 1]
    for a, b in zip(r.summaries["A"], r.summaries["B"]):
        assert a["num_requests"] == b["num_requests"] == 200
        assert a["total_input_tokens"] == b["total_input_tokens"]


def test_a_different_workload_in_b_is_replaced_by_a_and_noted():
    r = run_ab(PAGED, {"workload": {"arrival": {"rate": 5.0}}}, seeds=1, overrides=LOAD[:1],
               num_bootstrap=100)
    assert any("A's request stream" in n for n in r.notes)
    assert {row["verdict"] for row in r.rows} == {"not significant"}


def test_verdict_rules():
    assert verdict(-1, 1, True) == "not significant"
    assert verdict(0, 0, False) == "not significant"
    assert verdict(float("nan"), 1, True) == "not significant"
    assert verdict(1, 2, True) == "B better" and verdict(1, 2, False) == "B worse"
    assert verdict(-2, -1, True) == "B worse" and verdict(-2, -1, False) == "B better"


def _mean_stat(arm, idx):
    return arm["x"][idx].mean(axis=1)


def test_paired_bootstrap_covers_a_known_shift_and_cancels_shared_noise():
    rng = np.random.default_rng(1)
    base = [rng.lognormal(3, 1, 400) for _ in range(3)]
    a = [{"x": x} for x in base]
    b = [{"x": x + 2.0} for x in base]
    point, lo, hi = paired_bootstrap(a, b, _mean_stat, num_samples=500)
    assert point == pytest.approx(2.0) and lo == pytest.approx(2.0) and hi == pytest.approx(2.0)
    noisy = [{"x": x + 2.0 + rng.normal(0, 1, x.size)} for x in base]
    point, lo, hi = paired_bootstrap(a, noisy, _mean_stat, num_samples=500)
    assert lo < 2.0 < hi and hi - lo < 0.5


def test_mean_interval():
    m, lo, hi = mean_interval([10.0, 12.0, 11.0])
    assert m == 11.0 and lo < 11.0 < hi
    assert mean_interval([5.0]) == (5.0, 5.0, 5.0)


def test_config_diff_lists_changed_dotted_keys():
    assert config_diff({"a": {"b": 1, "c": 2}}, {"a": {"b": 1, "c": 3}}) == [{"key": "a.c", "a": 2, "b": 3}]


def test_bad_arguments():
    with pytest.raises(ConfigError, match="--seeds"):
        run_ab(None, None, seeds=0)
    with pytest.raises(ConfigError, match="kv_cache.allocator"):
        run_ab(None, {"kv_cache": {"allocator": "buddy"}})


def test_cli_ab_prints_verdicts_and_writes_json(tmp_path):
    fa, fb = tmp_path / "paged.yaml", tmp_path / "contiguous.yaml"
    fa.write_text(yaml.safe_dump(PAGED))
    fb.write_text(yaml.safe_dump(CONTIGUOUS))
    app = typer.Typer()
    app.command()(cli_analysis.ab)
    out = tmp_path / "ab.json"
    args = [str(fa), str(fb), "--seeds", "1", "--bootstrap", "200", "--out", str(out), "--no-progress"]
    for item in LOAD:
        args += ["--set", item]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "B worse" in res.output and "contiguous" in res.output
    assert '"kind": "ab"' in out.read_text()
