"""The Cluster page under streamlit's AppTest: every tab renders its comparison (tiles, plot,
table) without an exception, the router comparison lists every router, a changed widget
changes the result, and bad input is an error under its field, never a traceback. Plus the
page's case builders (``dashboards.cluster_runs``) on their own."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboards import cluster_runs as runs  # noqa: E402
from sim.config import ROUTERS, build_config  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "dashboards" / "views" / "cluster.py"
TABS = ("Routing", "KV offload", "Prefill/decode", "Autoscaling")


def open_tab(tab: str = "Routing", **numbers) -> AppTest:
    """The page with ``tab`` open (through the URL, as a link would open it) and number
    inputs of that tab set (``{"clo.workload.num_requests": 100}``)."""
    at = AppTest.from_file(str(PAGE), default_timeout=300)
    at.query_params["cl.tab"] = tab
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if numbers:
        for key, value in numbers.items():
            at.number_input(key=key).set_value(value)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def errors(block) -> list[str]:
    return [e.value for e in block.error]


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label))


@pytest.mark.parametrize("tab", TABS)
def test_every_tab_draws_its_tiles_plot_and_table(tab):
    at = open_tab(tab)
    assert not errors(at.main), errors(at.main)
    assert at.success or at.info, "a headline says what the comparison found"
    assert len(at.metric) >= 4
    assert len(at.get("plotly_chart")) >= 1 and len(at.dataframe) >= 1
    # every table cell is formatted text (thousands separators, percentages), never a raw float
    table = at.dataframe[0].value
    assert all(isinstance(v, str) for v in table.to_numpy().ravel())
    assert "None" not in table.to_string() and "nan" not in table.to_string()


def test_only_the_open_tab_simulates():
    """The other tabs keep their widgets (and settings) but compute nothing."""
    at = open_tab("KV offload")
    assert len(at.dataframe) == 1 and "tiers" in at.dataframe[0].value.columns
    assert at.number_input(key="clr.parallel.num_replicas").value == 4  # the routing tab's widget is there


def test_router_comparison_lists_every_router():
    at = open_tab("Routing")
    table = at.dataframe[0].value
    assert list(table["router"]) == list(ROUTERS) + [f"{r} + affinity" for r in runs.AFFINITY_ROUTERS]
    assert metric(at, "prefix_aware: hit rate").endswith("%")
    # prefix-aware routing keeps a conversation's prefix where it is cached: more hits than round robin
    hits = dict(zip(table["router"], (float(v.rstrip("%")) for v in table["hit rate"])))
    assert hits["prefix_aware"] > hits["round_robin"] + 10
    # shared system prompts: no sessions, so no affinity rows, and every router still listed
    at.radio(key="clr.kind").set_value("shared system prompts").run()
    assert not at.exception
    at.number_input(key="clr.workload.num_requests").set_value(120).run()
    assert not at.exception and list(at.dataframe[0].value["router"]) == list(ROUTERS)


def test_changing_the_replica_count_changes_the_comparison():
    at = open_tab("Routing")
    before = list(at.dataframe[0].value["requests per replica"])
    at.number_input(key="clr.parallel.num_replicas").set_value(2).run()
    assert not at.exception
    after = list(at.dataframe[0].value["requests per replica"])
    assert after != before and all(v.count("/") == 1 for v in after)


def test_offload_tiers_show_hits_per_tier():
    at = open_tab("KV offload")
    table = at.dataframe[0].value
    assert list(table["tiers"]) == ["GPU only", "GPU + CPU 24 GiB", "GPU + CPU 24 GiB + SSD 256 GiB"]
    gpu_only, *_, all_tiers = (float(v.rstrip("%")) for v in table["hit rate"])
    assert all_tiers > gpu_only
    at.number_input(key="clo.kv_cache.ssd_offload_gb").set_value(0.0).run()
    assert not at.exception and list(at.dataframe[0].value["tiers"]) == ["GPU only", "GPU + CPU 24 GiB"]


def test_prefill_decode_compares_on_equal_gpus():
    at = open_tab("Prefill/decode")
    table = at.dataframe[0].value
    assert list(table["deployment"]) == ["collocated 4", "P/D 2:2"] and set(table["GPUs"]) == {"4"}
    assert table["KV transfer mean (ms)"].iloc[0] == "-" and table["KV transfer mean (ms)"].iloc[1] != "-"
    assert len(at.get("plotly_chart")) == 2  # the comparison and the goodput curve


def test_autoscaling_against_a_fixed_fleet():
    at = open_tab("Autoscaling")
    table = at.dataframe[0].value
    assert list(table["fleet"])[0] == "autoscaled" and list(table["fleet"])[1].startswith("fixed ")
    assert "saved" in at.success[0].value or at.warning
    assert len(at.get("plotly_chart")) == 2  # replicas over the day, SLO by hour


def test_autoscaling_on_the_synthetic_day():
    """The machine without the shared traces replays a synthetic day instead."""
    at = open_tab("Autoscaling")
    at.selectbox(key="cla.source").set_value("synthetic").run()
    assert not at.exception and len(at.dataframe) >= 1
    assert "synthetic arrivals" in at.main.caption[-1].value


def test_bad_input_is_an_error_under_its_field():
    at = open_tab("KV offload", **{"clo.kv_cache.cpu_offload_gb": 0.0001})
    assert any(e.startswith("kv_cache.cpu_offload_gb:") and "no whole KV block" in e for e in errors(at.main))
    at = open_tab("Autoscaling", **{"cla.min_replicas": 4, "cla.max_replicas": 2})
    assert any(e.startswith("max_replicas:") for e in errors(at.main))
    if runs.AZURE_CONV.is_file():  # a peak above the trace's own rate (the synthetic day has none)
        at = open_tab("Autoscaling", **{"cla.peak_rate": 50.0})
        assert any(e.startswith("peak_rate:") for e in errors(at.main))
    at = open_tab("Prefill/decode")
    at.text_input(key="clp.curve.rates").set_value("4, fast").run()
    assert not at.exception and any("'fast' is not a number" in e for e in errors(at.main))
    # a shared setting's error is shown in the sidebar, where its field is
    at = open_tab("Routing")
    at.sidebar.text_area(key="cl.overrides").set_value("kv_cache.block_size=0").run()
    assert not at.exception and any("kv_cache.block_size" in e for e in errors(at.sidebar))


def test_a_model_that_does_not_fit_is_explained():
    at = open_tab("Routing")
    at.sidebar.selectbox(key="cl.model").set_value("llama-3.1-70b").run()
    assert not at.exception and any("needs" in e and "GB" in e for e in errors(at.sidebar))


# ---------------------------------------------------------------- the case builders

def test_cases():
    assert [c.label for c in runs.routing_cases(False)] == list(ROUTERS)
    assert len(runs.routing_cases(True)) == len(ROUTERS) + len(runs.AFFINITY_ROUTERS)
    assert [c.label for c in runs.offload_cases(0, 0)] == ["GPU only"]
    assert [c.label for c in runs.offload_cases(0, 100)] == ["GPU only", "GPU + SSD 100 GiB"]
    col, pd = runs.pd_cases(3, 5)
    assert "parallel.num_replicas=8" in col.overrides and "disaggregation.enabled=true" in pd.overrides


def test_synthetic_day_follows_the_profile():
    """Thinned Poisson arrivals: about day x peak x (1 + trough) / 2 requests, more of them at
    the peak hour than at night, ids in arrival order."""
    cfg = build_config(None, [])
    day = runs.DaySpec("synthetic", time_scale=86.4, peak_rate=2.0, trough=0.2, peak_hour=12.0)
    reqs = runs.synthetic_day(cfg, day)
    expected = day.day_s * 2.0 * 1.2 / 2
    assert abs(len(reqs) - expected) < 4 * expected ** 0.5
    assert [r.request_id for r in reqs] == [str(i) for i in range(len(reqs))]
    times = [r.arrival_time for r in reqs]
    assert times == sorted(times) and max(times) < day.day_s
    noon = sum(1 for t in times if 0.4 * day.day_s <= t < 0.6 * day.day_s)
    night = sum(1 for t in times if t < 0.1 * day.day_s or t >= 0.9 * day.day_s)
    assert noon > 2 * night
