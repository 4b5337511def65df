"""A/B: two serving configs on identical request streams; per-metric B - A with bootstrap
intervals and a verdict that says when a difference is not significant."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboards import common
from sim.analysis import figures
from sim.analysis.ab import run_ab

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

sig = [r for r in result["rows"] if r["verdict"] != "not significant"]
(st.success if sig else st.info)(result["headline"])
if result["differences"]:
    st.markdown("**B differs from A in** " + ", ".join(
        f"`{d['key']}`: {d['a']} → {d['b']}" for d in result["differences"]))
else:
    st.markdown("**The two arms are identical.**")

table = pd.DataFrame([{
    "metric": f"{r['label']} ({r['unit']})", "A": r["a"], "B": r["b"], "B - A": r["diff"],
    "relative": r["rel_diff"], "CI low": r["ci_low"], "CI high": r["ci_high"], "verdict": r["verdict"],
} for r in result["rows"]])
st.dataframe(table, hide_index=True, column_config={
    "relative": st.column_config.NumberColumn(format="percent"),
    "A": st.column_config.NumberColumn(format="%.3g"), "B": st.column_config.NumberColumn(format="%.3g"),
    "B - A": st.column_config.NumberColumn(format="%+.3g"),
    "CI low": st.column_config.NumberColumn(format="%+.3g"), "CI high": st.column_config.NumberColumn(format="%+.3g"),
})
common.show_notes(result["notes"])
t1, t2 = st.tabs(["Differences", "Latency CDFs"])
with t1:
    st.plotly_chart(figures.ab_forest(result), key="ab-forest")
with t2:
    st.plotly_chart(figures.latency_cdfs({"A": result["samples"]["A"], "B": result["samples"]["B"]},
                                         title="Latency CDFs (first seed)"), key="ab-cdf")

common.report_downloads([result], "kvplan-ab", "kvplan A/B report")
