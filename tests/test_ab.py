"""A/B experiments: common random numbers, bootstrap intervals, verdicts with the right sign."""

from __future__ import annotations

import math

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from kvplan.cli import analysis as cli_analysis
from analysis.ab import OVERALL_LEVEL, config_diff, overall_verdict, run_ab, verdict
from analysis.formatting import (format_diff, format_interval, format_number, format_relative,
                                     format_value, with_unit)
from analysis.report import ab_row
from analysis.stats import mean_interval, paired_bootstrap
from sim.errors import ConfigError

LOAD = ["workload.num_requests=200", "workload.arrival.rate=20", "slo.ttft_ms=500", "slo.tpot_ms=60"]
PAGED = {"kv_cache": {"allocator": "paged"}}
CONTIGUOUS = {"kv_cache": {"allocator": "contiguous", "reserve": "max"}}


def test_identical_configs_are_not_different():
    r = run_ab(PAGED, PAGED, seeds=2, overrides=LOAD, num_bootstrap=300)
    assert {row["verdict"] for row in r.rows} == {"not significant"}
    assert all(row["diff"] == 0 and row["ci_low"] == 0 == row["ci_high"] for row in r.rows)
    assert r.differences == [] and "No metric differs significantly" in r.headline()
    assert r.overall() == r.to_dict()["overall"] == "not significant"


#: Enough load that max-length reservations queue requests on every seed (at 20 req/s the
#: engine, with V1's overlapped CPU, keeps up often enough that two seeds' interval touches 0).
CONTIGUOUS_LOAD = [o if not o.startswith("workload.arrival.rate=") else "workload.arrival.rate=25"
                   for o in LOAD]


def test_contiguous_reservation_is_worse_than_paged_with_the_right_sign():
    r = run_ab(PAGED, CONTIGUOUS, seeds=2, overrides=CONTIGUOUS_LOAD, num_bootstrap=300)
    ttft = next(row for row in r.rows if row["metric"] == "p99_ttft_ms")
    assert ttft["diff"] > 0 and ttft["ci_low"] > 0 and ttft["verdict"] == "B worse"
    assert r.verdict("slo_attainment") == "B worse"
    assert r.differences == [{"key": "kv_cache.allocator", "a": "paged", "b": "contiguous"}]
    assert r.overall() == "B worse" and r.headline().startswith("B is worse than A: worse on ")
    swapped = run_ab(CONTIGUOUS, PAGED, seeds=2, overrides=CONTIGUOUS_LOAD, num_bootstrap=300)
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


def _row(metric, verdict_, *, a=100.0, diff=0.0, ci=(0.0, 0.0), unit="ms", important=None):
    row = {"metric": metric, "label": metric, "unit": unit, "a": a, "b": a + diff, "diff": diff,
           "rel_diff": diff / a if a else None, "ci_low": ci[0], "ci_high": ci[1], "verdict": verdict_}
    if important is not None:
        row["important"] = important
    return row


def test_overall_verdict_rule_and_headline_level():
    better, worse, ns = "B better", "B worse", "not significant"
    assert overall_verdict([_row("p99_ttft_ms", ns), _row("mean_ttft_ms", ns)]) == ns
    assert overall_verdict([_row("p99_ttft_ms", better), _row("mean_ttft_ms", ns)]) == better
    # Worse on one metric a plan is sized on outweighs any number of improvements.
    assert overall_verdict([_row("p99_ttft_ms", worse), _row("mean_tpot_ms", better),
                            _row("goodput", better)]) == worse
    # Worse only on a mean (secondary), better on a tail: mixed.
    assert overall_verdict([_row("mean_ttft_ms", worse), _row("p99_ttft_ms", better)]) == "mixed"
    # A saved row's own flag wins; rows saved without one fall back to the metric table.
    assert overall_verdict([_row("mean_ttft_ms", worse, important=True)]) == worse
    assert overall_verdict([_row("output_throughput_per_gpu", worse)]) == worse
    assert OVERALL_LEVEL == {better: "success", worse: "error", "mixed": "warning", ns: "info"}


@pytest.mark.parametrize("value, text", [
    (0, "0"), (0.0, "0"), (-0.0, "0"), (61.592, "61.6"), (574.58, "575"), (20300, "20,300"),
    (16834.79, "16,835"), (9.996, "10.0"), (0.0123, "0.0123"), (1.23e-5, "1.23e-05"),
    (-1.722, "-1.72"), (None, "-"), (math.nan, "-"), (np.float64("nan"), "-"), (math.inf, "inf"),
    (np.float64(3601.9), "3,602"),
])
def test_format_value(value, text):
    assert format_value(value, "ms") == text


@pytest.mark.parametrize("rel, text", [
    (0.0, "0%"), (-0.08287, "-8.29%"), (0.02916, "+2.92%"), (-0.14868, "-14.9%"), (8.3288, "+833%"),
    (16.705, "+1,670%"), (238.59, "+23,900%"), (4e-7, "+0.00%"), (None, "-"), (math.nan, "-"),
])
def test_format_relative_has_a_sign_and_at_most_three_significant_digits(rel, text):
    assert format_relative(rel) == text


def test_differences_intervals_and_fractions():
    assert format_diff(512.99, "ms") == "+513" and format_diff(-146.47, "tok/s") == "-146"
    assert format_diff(0.0, "ms") == "0" and format_diff(None, "ms") == "-"
    assert format_number(1e-3, signed=True, max_decimals=2) == "+0.00"  # rounded away, sign kept
    assert format_interval(172.46, 882.83, "ms") == "[+172, +883]"
    assert format_interval(-1053.76, 508.72, "ms") == "[-1,054, +509]"
    assert format_interval(math.nan, 1.0, "ms") == "-"
    assert format_value(0.987, "fraction") == "98.7%" and format_value(-0.0, "fraction") == "0.0%"
    assert format_diff(0.037, "fraction") == "+3.70 pp"
    assert format_interval(0.012, 0.05, "fraction") == "[+1.20, +5.00] pp"
    assert with_unit("+513", "ms") == "+513 ms" and with_unit("+3.7 pp", "fraction") == "+3.7 pp"


def test_a_report_row_reads_the_same_everywhere():
    row = _row("p99_ttft_ms", "B worse", a=131.75, diff=2200.93, ci=(1371.6, 2851.1))
    assert ab_row({**row, "label": "TTFT p99"}) == [
        "TTFT p99 (ms)", "132", "2,333", "+2,201 (+1,670%)", "[+1,372, +2,851]", "B worse"]
    slo = _row("slo_attainment", "B better", a=0.95, diff=0.037, ci=(0.012, 0.05), unit="fraction")
    assert ab_row(slo)[:5] == ["slo_attainment (%)", "95.0%", "98.7%", "+3.70 pp (+3.89%)", "[+1.20, +5.00] pp"]


def _forest(rows):
    figures = pytest.importorskip("analysis.figures")  # plotly is the dashboard extra
    return figures.ab_forest({"rows": rows})


def test_forest_plot_has_a_legend_of_the_three_verdicts():
    fig = _forest([_row("p99_ttft_ms", "B worse", diff=10, ci=(5, 15))])  # one verdict present
    legend = {t.name: t.marker.color for t in fig.data if t.showlegend is not False}
    assert legend == {"B better": "#2e7d32", "B worse": "#c62828", "not significant": "#757575"}


def test_a_huge_effect_does_not_flatten_the_small_ones():
    small = [_row("mean_tpot_ms", "B better", diff=-8, ci=(-12, -4)),
             _row("p99_tpot_ms", "not significant", diff=3, ci=(-2, 9))]
    huge = _row("p99_ttft_ms", "B worse", diff=2000, ci=(1500, 2600))
    fig = _forest(small + [huge])
    low, high = fig.layout.xaxis.range
    widest_small = 12  # % of A: the largest interval end among the small effects
    assert high - low < 4 * widest_small  # not stretched to +2,600%
    assert low < -widest_small and high > 9  # every small interval still inside
    worse = next(t for t in fig.data if t.name == "B worse")
    assert low < worse.x[0] < high and worse.marker.symbol[0] == "triangle-right"
    assert [a.text for a in fig.layout.annotations] == ["+2,000%"]  # the true value, beside the arrow
    unclipped = _forest(small)
    assert not unclipped.layout.annotations and unclipped.layout.xaxis.range[1] >= 9


def test_one_config_against_itself_with_one_arm_changed_compares_the_engines(tmp_path):
    """``--set-b engine.name=sglang``: the same config, SGLang on B; the diff names the engine,
    both arms serve the same requests, and prefill-first SGLang's TPOT comes out higher."""
    r = run_ab(PAGED, PAGED, seeds=2, overrides=LOAD, num_bootstrap=200,
               overrides_b=["engine.name=sglang"])
    assert {d["key"] for d in r.differences} >= {"engine.name"}
    assert r.verdict("mean_tpot_ms") == "B worse"
    for a, b in zip(r.summaries["A"], r.summaries["B"]):
        assert a["total_input_tokens"] == b["total_input_tokens"]
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(PAGED))
    app = typer.Typer()
    app.command()(cli_analysis.ab)
    args = [str(f), str(f), "--seeds", "1", "--bootstrap", "100", "--no-progress", "--json",
            "--set-b", "engine.name=sglang", "--set-a", "engine.version=0.15.1"]
    for item in LOAD:
        args += ["--set", item]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    keys = {d["key"] for d in __import__("json").loads(res.output)["differences"]}
    assert {"engine.name", "engine.version"} <= keys
