"""Sweep / Pareto: a grid of configurations, and the frontier of output tokens/s per GPU
(what serving costs) against output tokens/s per user (what a user feels)."""

from __future__ import annotations

import os
from typing import cast

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis import figures
from analysis.slo import parse_slo
from analysis.sweep import grid_points, parse_grid, run_sweep

st.title("Sweep and Pareto frontier")
st.caption("One simulation per configuration and seed; the frontier holds the configurations no "
           "other beats on both axes.")

f = common.sidebar_fields("sw.", "Base scenario", num_requests=200)
cfg = common.build(f)

grid_text = f.add("grid", st.text_area, "Grid (one key=v1,v2,... per line)",
                  value="scheduler.max_num_seqs=16,64,256\nworkload.arrival.rate=4,16", config_key=False,
                  help="Any config key, e.g. kv_cache.block_size=8,16,32 or parallel.tensor_parallel_size=1,2")
c1, c2, c3 = st.columns(3)
with c1:
    seeds = f.add("seeds", st.number_input, "Seeds per configuration", min_value=1, max_value=10, value=1,
                  config_key=False)
with c2:
    workers = f.add("workers", st.number_input, "Parallel workers", min_value=1,
                    max_value=max(os.cpu_count() or 1, 1), value=1, config_key=False)
with c3:
    slo_text = f.add("slo", st.text_input, "SLO for the frontier (optional)", value="", config_key=False,
                     placeholder="ttft_p99_ms=500,tpot_p99_ms=50")

grid = slo = None
try:
    grid = parse_grid([ln for ln in grid_text.splitlines() if ln.strip()])
    if len(grid_points(grid)) > 200:
        raise common.KvplanError(f"--grid: {len(grid_points(grid))} configurations; keep it under 200 here")
except common.KvplanError as exc:
    f.error(str(exc), "grid")
    grid = None
try:
    slo = parse_slo(slo_text) if slo_text.strip() else None
except common.KvplanError as exc:
    f.error(str(exc), "slo")
    slo_text = None

if cfg is None or grid is None or slo_text is None:
    st.info("Fix the setting marked in red to run the sweep.")
    st.stop()

# A bound on percentiles only re-ranks the same simulations (not part of the cache key); an
# attainment bound needs each request judged inside the simulation, so it is.
sim_slo = slo if slo is not None and slo.attainment is not None else None
params = {"cfg": cfg, "grid": grid, "seeds": seeds, "slo": sim_slo.to_dict() if sim_slo else None}
try:
    sims = common.cached("sweep", params, lambda p: run_sweep(  # grid is set: the page stops without it
        cfg, cast(dict[str, list], grid), seeds=int(seeds), workers=int(workers), slo=sim_slo,
        on_done=lambda d, t: p(d / t, f"sweep: {d}/{t} simulations")), "sweep")
except common.KvplanError as exc:
    f.error(str(exc), "grid")
    st.stop()
result = sims.with_slo(slo).to_dict()

front = [r for r in result["rows"] if r["pareto"]]
ranked = sorted((r for r in result["rows"] if r.get("rank")), key=lambda r: r["rank"])
st.success(f"{len(result['rows'])} configurations, {result['num_simulations']} simulations; "
           f"{len(front)} on the Pareto frontier (compared at equal offered load).")
if slo is not None and not ranked:
    st.error(f"No configuration meets the SLO ({slo}).")
elif ranked:
    st.subheader("Best configurations" + (f" under {slo}" if slo else ""))
    st.dataframe(pd.DataFrame([{
        "rank": r["rank"], "configuration": r["label"], "offered req/s": r.get("offered_rate"),
        "tok/s per GPU": r["output_throughput_per_gpu"], "tok/s per user": r["tokens_per_s_per_user"],
        "TTFT p99 (ms)": r["p99_ttft_ms"], "TPOT p99 (ms)": r["p99_tpot_ms"]} for r in ranked[:10]]),
        hide_index=True)
st.plotly_chart(figures.pareto(result), key="sw-pareto")
table = pd.DataFrame([{
    "configuration": r["label"], "tok/s per GPU": r["output_throughput_per_gpu"],
    "tok/s per user": r["tokens_per_s_per_user"], "TTFT p99 (ms)": r["p99_ttft_ms"],
    "TPOT p99 (ms)": r["p99_tpot_ms"], **({"meets SLO": r.get("meets_slo")} if slo else {}),
    "offered req/s": r.get("offered_rate"), "Pareto": r["pareto"], "error": r["error"] or "",
} for r in result["rows"]]).sort_values(["Pareto", "tok/s per GPU"], ascending=False)
st.dataframe(table, hide_index=True)
common.show_notes(result["notes"])
common.report_downloads([result], "kvplan-sweep", "kvplan sweep report")
