"""The plots planners read: axes that carry units, colours that stay put, labelled lines."""

from __future__ import annotations

import pytest

pytest.importorskip("plotly")
from analysis import figures  # noqa: E402

POINTS = [{"rate": r, "median_ttft_ms": 40.0 * r, "p99_ttft_ms": 90.0 * r ** 2,
           "median_tpot_ms": 12.0 + r, "p99_tpot_ms": 15.0 + 2 * r} for r in (2, 4, 8, 16)]


def test_log_axis_ticks_carry_units_not_bare_digits():
    fig = figures.rate_latency(POINTS, {"ttft_ms": 500.0, "tpot_ms": 50.0}, 8.0)
    for axis in (fig.layout.yaxis, fig.layout.yaxis2):
        assert axis.type == "log"
        labels = list(axis.ticktext)
        assert labels and all(t.endswith((" ms", " s", " min")) for t in labels), labels
    ttft = dict(zip(fig.layout.yaxis.tickvals, fig.layout.yaxis.ticktext))
    assert ttft[500] == "500 ms" and ttft[1000] == "1 s" and ttft[20000] == "20 s"


def test_format_ms_scales_units():
    assert [figures.format_ms(v) for v in (0.5, 200, 1500, 120_000)] == ["0.5 ms", "200 ms", "1.5 s", "2 min"]


def test_wide_ranges_keep_to_decades():
    fig = figures.rate_latency([{"rate": 1, "p99_ttft_ms": 5.0}, {"rate": 2, "p99_ttft_ms": 5e6}])
    assert all(str(v).startswith("1") for v in fig.layout.yaxis.tickvals)


def test_line_colours_do_not_depend_on_the_data():
    a = figures.rate_latency(POINTS, None, 4.0)
    b = figures.rate_latency(POINTS[:2], {"ttft_ms": 100.0}, 2.0)
    colours = lambda fig: {t.name: t.line.color for t in fig.data if t.name in ("median", "p99")}
    assert colours(a) == colours(b) and len(set(colours(a).values())) == 2


def test_the_current_rate_line_is_labelled():
    names = [t.name for t in figures.rate_latency(POINTS, None, 8.0).data]
    assert "this scenario: 8 req/s" in names


def test_batch_size_is_drawn_above_the_running_band():
    fig = figures.batch_and_queue({"time_s": [0, 1], "batch_size": [3, 4], "num_running": [3, 4],
                                   "num_waiting": [0, 1]})
    by = {t.name: (i, t.line) for i, t in enumerate(fig.data)}
    run_i, run = by["running"]
    batch_i, batch = by["batch size (requests in the step)"]
    assert batch_i > run_i and batch.width < run.width and batch.color != run.color


def test_latency_cdfs_scale_a_long_latency():
    fig = figures.latency_cdfs({"x": {"ttft_ms": [1_000.0, 1_305_857.0], "tpot_ms": [12.0, 20.0],
                                      "e2el_ms": [5_000.0, 30_000.0]}})
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["TTFT (min)", "TPOT (ms)", "E2E latency (s)"]
    assert max(fig.data[0].x) == pytest.approx(1_305_857.0 / 60_000)


def test_memory_split_stacks_every_part():
    fig = figures.memory_split({"weights_gb": 16.0, "activation_reserve_gb": 1.5, "kv_pool_gb": 59.7,
                                "unused_gb": 8.6})
    assert fig.layout.barmode == "stack" and sum(t.x[0] for t in fig.data) == pytest.approx(85.8)
