"""The Plan page (dashboards/views/plan.py) under streamlit's AppTest, driven through the app
(dashboards/app.py) so that its "Open in What-if" buttons can switch page. Each plan is tiny:
one GPU (A100, TP 1 and 2), 5 req/s, the page's quick runs, one worker."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from analysis.plan import default_hardware  # noqa: E402
from analysis.plan_report import RANKED_HEADERS  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"


def app() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tiny_plan(at: AppTest, slo: str = "ttft_p99_ms=500,tpot_p99_ms=50", max_gpus: int = 2) -> AppTest:
    """Plan on a100-80gb with at most 2 GPUs per replica (two candidates) at 5 req/s, quick."""
    at.multiselect(key="pl.gpus").set_value(["a100-80gb"])
    at.number_input(key="pl.max_gpus").set_value(max_gpus)
    at.number_input(key="pl.target").set_value(5.0)
    at.text_input(key="pl.slo").set_value(slo)
    at.checkbox(key="pl.quick").check()
    at.number_input(key="pl.workers").set_value(1)
    at.run()
    at.button(key="pl.run").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_plan_is_the_first_page_and_simulates_only_on_the_button():
    at = app()
    assert at.title[0].value == "Plan"
    # The menu, in order (AppTest's registry of st.navigation's pages).
    menu = [p.get("page_name") for p in at._registered_pages.values()]
    assert menu == ["Plan", "What-if", "A/B", "Capacity", "Sweep / Pareto", "Cluster", "Validation"]
    assert at.multiselect(key="pl.gpus").value == (default_hardware() or ["a100-80gb", "h100-sxm"])
    assert "Press **Plan**" in at.info[0].value and not at.dataframe and not at.success
    # Invalid input: the message under its field, no plan.
    at.text_input(key="pl.slo").set_value("ttft_p99_ms=500,tpot_p42_ms=50").run()
    assert not at.exception and any("tpot_p42_ms" in e.value for e in at.main.error)
    at.text_input(key="pl.slo").set_value("ttft_p99_ms=500").run()
    at.multiselect(key="pl.gpus").set_value([]).run()
    assert not at.exception and any("choose at least one" in e.value for e in at.main.error)


def test_a_plan_ranks_deployments_and_opens_the_best_in_what_if():
    at = app()
    # The base scenario the search varies: its GPU is replaced by each candidate's; the block
    # size must travel to What-if unchanged.
    at.sidebar.selectbox(key="pl.hardware").set_value("h100-sxm")
    at.sidebar.selectbox(key="pl.kv_cache.block_size").set_value(32)
    tiny_plan(at)
    headline = at.success[0].value
    assert headline.startswith("Cheapest deployment for 5 req/s")
    ranked = at.dataframe[0].value
    assert list(ranked.columns) == RANKED_HEADERS
    best = ranked.iloc[0]["deployment"]
    assert best == "a100-80gb tp=1 w=none kv=auto" and f": {best}, " in headline
    assert ranked.iloc[0]["$/hour"] == "$1.79" and ranked.iloc[0]["GPUs"] == "1"
    lost = at.dataframe[1].value  # not chosen, and why: TP 2 costs two GPUs
    assert list(lost.columns) == ["not chosen", "why"]
    assert lost.iloc[0]["not chosen"] == "a100-80gb tp=2 w=none kv=auto" and "$3.58/hour" in lost.iloc[0]["why"]
    assert len(at.get("plotly_chart")) == 1  # the Pareto frontier
    keys = next(c.value for c in at.caption if c.value.startswith("Keys of the top row"))
    keys = dict(k.split("=", 1) for k in keys.split("`")[-2].split())
    assert keys["hardware"] == "a100-80gb"

    at.button(key="pl.open.0").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "What-if"
    for key, value in keys.items():  # the row's keys, each in its What-if field
        widget = next(w for w in at.sidebar if getattr(w, "key", None) == f"wi.{key}")
        assert str(widget.value) == value, key
    assert at.sidebar.selectbox(key="wi.kv_cache.block_size").value == 32
    assert at.sidebar.number_input(key="wi.workload.arrival.rate").value == 5.0  # 5 req/s on 1 replica
    assert at.sidebar.number_input(key="wi.slo.ttft_ms").value == 500.0
    assert next(m.value for m in at.metric if m.label == "Completed / rejected") == "300 / 0"


def test_a_key_with_no_sidebar_field_goes_to_what_ifs_other_settings():
    """A mixture of experts' rows set parallel.enable_expert_parallel, which the sidebar has no
    field for: it joins the plan's own "Other settings" in What-if's."""
    at = app()
    at.sidebar.selectbox(key="pl.model").set_value("gpt-oss-20b")
    at.sidebar.text_area(key="pl.overrides").set_value("kv_cache.swap_space_gb=8")
    tiny_plan(at, max_gpus=1)  # one candidate: TP 1, no expert parallelism
    assert at.dataframe[0].value.iloc[0]["deployment"] == "a100-80gb tp=1 ep=False w=none kv=auto"
    at.button(key="pl.open.0").click().run()
    assert not at.exception and at.title[0].value == "What-if" and not at.sidebar.error
    assert at.sidebar.selectbox(key="wi.model").value == "gpt-oss-20b"
    assert at.sidebar.text_area(key="wi.overrides").value.splitlines() == [
        "kv_cache.swap_space_gb=8", "parallel.enable_expert_parallel=false"]


def test_a_plan_that_nothing_meets_warns_with_the_closest_misses():
    at = tiny_plan(app(), slo="ttft_p99_ms=25")  # the mean prompt's prefill fits, the p99 does not
    assert not at.success and not at.main.error
    assert at.warning[0].value.startswith("No deployment meets ttft_p99_ms<=25 at 5 req/s")
    misses = at.dataframe[0].value
    assert list(misses.columns[:3]) == ["deployment", "best rate met req/s", "what it missed"]
    assert set(misses["deployment"]) == {"a100-80gb tp=1 w=none kv=auto", "a100-80gb tp=2 w=none kv=auto"}
    assert all("p99_ttft_ms" in m for m in misses["what it missed"])
    assert not any(b.key and b.key.startswith("pl.open.") for b in at.button)
    # Nothing can even be screened: the warning and the reasons, no table of misses.
    at.text_input(key="pl.slo").set_value("ttft_p99_ms=0.001").run()
    at.button(key="pl.run").click().run()
    assert not at.exception and not at.main.error
    assert at.warning[0].value.startswith("No deployment meets ttft_p99_ms<=0.001")
    assert list(at.dataframe[0].value.columns) == ["not chosen", "why"]
    assert "prefill alone takes" in at.dataframe[0].value.iloc[0]["why"]


def test_clients_prices_and_pd_groups_from_the_advanced_fields():
    """--concurrency, --price and --search pd from the page: a plan for 8 clients at a price of
    $1 per A100-hour, with a 1:1 P/D group tried beside the collocated replicas; a bad price or
    split is an error under its field."""
    at = app()
    at.number_input(key="pl.clients").set_value(8)
    at.text_input(key="pl.prices").set_value("a100-80gb=1.0")
    at.text_input(key="pl.pd").set_value("1:1")
    tiny_plan(at, max_gpus=1)
    assert at.success[0].value.startswith("Cheapest deployment for 8 concurrent clients")
    ranked = at.dataframe[0].value
    assert ranked.iloc[0]["$/hour"] == "$1.00"
    labels = list(ranked["deployment"]) + list(at.dataframe[1].value["not chosen"])
    assert any(lb.startswith("P/D ") for lb in labels)
    at.text_input(key="pl.prices").set_value("a100-80gb=cheap").run()
    assert any("--price" in e.value for e in at.main.error)
    at.text_input(key="pl.prices").set_value("").run()
    at.text_input(key="pl.pd").set_value("2").run()
    assert any("prefill:decode" in e.value for e in at.main.error)
