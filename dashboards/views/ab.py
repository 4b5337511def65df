"""A/B: two serving configs on identical request streams; per-metric B - A with bootstrap
intervals and a verdict that says when a difference is not significant."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis import figures
from analysis.ab import OVERALL_LEVEL, run_ab
from analysis.report import ab_row

st.title("A/B experiment")
st.caption("Both arms serve the very same requests (common random numbers) for each seed; the "
           "sidebar sets what they share, the two columns what they differ in.")

shared = common.sidebar_fields("ab.", "Shared scenario", num_requests=300, rate=20.0,
                               sections=("deployment", "workload", "slo"), expanded=("deployment", "workload"))
with st.sidebar:
    seeds = shared.add("seeds", st.number_input, "Seeds (request streams)", min_value=1, max_value=10,
                       value=2, config_key=False)
    confidence = shared.add("confidence", st.select_slider, "Confidence", [0.8, 0.9, 0.95, 0.99],
                            value=0.95, config_key=False)

arms = {}
for col, arm, choose in zip(st.columns(2), ("A", "B"), ({}, {"kv_cache.allocator": "contiguous"})):
    with col:
        st.subheader(f"Arm {arm}")
        fields = common.Fields(f"ab{arm}.")
        common.scenario_fields(fields, sections=("kv", "scheduler", "speculative", "overrides"),
                               expanded=("kv", "scheduler"), choose=choose)
        arms[arm] = (fields, common.build(shared, fields))

if any(cfg is None for _, cfg in arms.values()):
    st.info("Fix the setting marked in red to compare.")
    st.stop()

cfg_a, cfg_b = arms["A"][1], arms["B"][1]
params = {"a": cfg_a, "b": cfg_b, "seeds": seeds, "confidence": confidence}
try:
    result = common.cached("ab", params, lambda p: run_ab(
        cfg_a, cfg_b, seeds=int(seeds), confidence=confidence,
        on_run=lambda d, t: p(d / t, f"A/B: {d}/{t} simulations")).to_dict(), "A/B")
except common.KvplanError as exc:
    arms["B"][0].error(str(exc))
    st.stop()

# The headline's colour is the overall verdict: green B better, red B worse, amber mixed.
getattr(st, OVERALL_LEVEL[result["overall"]])(result["headline"])
if result["differences"]:
    st.markdown("**B differs from A in** " + ", ".join(
        f"`{d['key']}`: {d['a']} → {d['b']}" for d in result["differences"]))
else:
    st.markdown("**The two arms are identical.**")

# The report's own rows: one formatter for the page, the terminal and the reports.
interval = f"{result['confidence']:.0%} interval of B - A"
st.dataframe(pd.DataFrame([ab_row(r) for r in result["rows"]],
                          columns=["metric", "A", "B", "B - A", interval, "verdict"]), hide_index=True)
common.show_notes(result["notes"])
t1, t2 = st.tabs(["Differences", "Latency CDFs"])
with t1:
    st.plotly_chart(figures.ab_forest(result), key="ab-forest")
with t2:
    st.plotly_chart(figures.latency_cdfs({"A": result["samples"]["A"], "B": result["samples"]["B"]},
                                         title="Latency CDFs (first seed)"), key="ab-cdf")

common.report_downloads([result], "kvplan-ab", "kvplan A/B report")
