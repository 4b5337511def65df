"""Capacity: the highest rate one replica sustains inside an SLO (with its uncertainty), and
the replicas, GPUs and dollars a target rate then needs."""

from __future__ import annotations

import copy
from typing import cast

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis import figures
from analysis.capacity import NO_RATE, CapacityResult, RunSizing, find_capacity, plan, rate_text
from analysis.slo import SLO

st.title("Capacity")
st.caption("A bracketed search over request rate, one bracket per seed, each run long enough to "
           "reach steady state; seeds are added until the confidence interval is as narrow as "
           "asked. Changing only the target rate or the price re-plans instantly.")

f = common.sidebar_fields("cap.", sections=("deployment", "kv", "scheduler", "speculative", "workload",
                                             "overrides"), load=False)
cfg = common.build(f)

mode = f.add("mode", st.radio, "Search over", ["request rate", "concurrent clients"], horizontal=True,
             config_key=False, help="As `kvplan capacity` and `kvplan capacity --clients`: the highest open-loop "
                                    "rate, or the most closed-loop clients (each sending its next request when "
                                    "its last one finishes), one replica serves inside the SLO.")
c1, c2, c3 = st.columns([2, 1, 1])
with c1:
    slo_text = f.add("slo", st.text_input, "SLO", value="ttft_p99_ms=500,tpot_p99_ms=50", config_key=False,
                     help="metric_stat_ms=bound, comma separated; metric ttft/tpot/itl/e2el, "
                          "stat mean/median/p90/p99; optional attainment=0.99")
if mode == "concurrent clients":
    from dashboards.client_capacity_view import client_capacity_page

    client_capacity_page(f, cfg, slo_text, c2, c3)
    st.stop()
with c2:
    target = f.add("target", st.number_input, "Target rate (req/s)", min_value=0.0, value=100.0,
                   step=10.0, config_key=False)
with c3:
    price = f.add("price", st.number_input, "$ per GPU-hour (0 = catalog)", min_value=0.0, value=0.0,
                  step=0.1, config_key=False)
c4, c5, c6, c7 = st.columns(4)
with c4:
    seeds = f.add("seeds", st.number_input, "Seeds (at least)", min_value=1, max_value=10, value=2,
                  config_key=False, help="More are added while the interval is wider than its target.")
with c5:
    duration = f.add("duration", st.number_input, "Run length (s of arrivals)", min_value=5.0,
                     max_value=3600.0, value=30.0, step=5.0, config_key=False,
                     help="Runs too short for steady state are lengthened automatically.")
with c6:
    confirm = f.add("confirm", st.number_input, "Confirming run (s, 0 = none)", min_value=0.0,
                    max_value=7200.0, value=300.0, step=60.0, config_key=False,
                    help="One long run at the answer: near a hard limit a queue builds over minutes, "
                         "so short runs can overstate capacity.")
with c7:
    tol = f.add("tol", st.select_slider, "Bracket width", [0.02, 0.05, 0.1, 0.2], value=0.1,
                config_key=False, format_func=lambda x: f"{x:.0%}")
c8, c9, _ = st.columns([1, 1, 2])
with c8:
    ci_target = f.add("ci_target", st.select_slider, "Interval target (±)", [0.0, 0.05, 0.1, 0.2], value=0.1,
                      config_key=False, format_func=lambda x: f"{x:.0%}" if x else "off",
                      help="Seeds are added (and brackets narrowed) until the 95% interval's half-width "
                           "is within this fraction of the estimate; off keeps the seeds fixed.")
with c9:
    max_seeds = f.add("max_seeds", st.number_input, "Most seeds", min_value=1, max_value=16, value=8,
                      config_key=False, help="The interval target stops adding seeds here and says so.")

slo = common.slo_field(f, slo_text)

if cfg is None or slo is None:
    st.info("Fix the setting marked in red to search.")
    st.stop()

params = {"cfg": cfg, "slo": slo.to_dict(), "seeds": seeds, "duration": duration, "tol": tol,
          "confirm": confirm, "ci_target": ci_target, "max_seeds": max_seeds}


def _search(progress: common.Progress):
    expected = 5 * (max(seeds, max_seeds) if ci_target else seeds) + 4   # a rough count, for the bar

    def hook(ev, n):
        progress(min(n / expected, 0.99), f"simulation {n} ({ev.stage}): {ev.rate:.3g} req/s, "
                 f"seed {ev.seed}, {'met' if ev.passed else 'missed'} the SLO")
    # slo is set: the page stops without it
    return find_capacity(cfg, cast(SLO, slo), seeds=int(seeds), rel_tol=tol, on_evaluation=hook,
                         sizing=RunSizing(duration_s=duration, confirm_s=confirm),
                         ci_target=ci_target, max_seeds=int(max_seeds))


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _answer_tiles(result: CapacityResult) -> None:
    """The capacity, its interval, throughput, price and the simulations it took."""
    cols = st.columns(5)
    cols[0].metric("Capacity per replica (req/s)", f"{result.planning_rate:.2f}",
                   help=f"every seed met the SLO here{' and a long run confirmed it' if result.confirmed else ''}; "
                        f"search estimate {result.capacity_rate:.2f} req/s")
    half = result.ci_half_width
    cols[1].metric(f"{result.confidence:.0%} interval of the estimate",
                   "one seed" if half is None else f"±{half:.1%}",
                   help=f"{result.ci_low:.2f}-{result.ci_high:.2f} req/s over {len(result.searches)} seeds; "
                        f"{result.sizing_note}")
    cols[2].metric("Output tok/s per GPU", f"{result.output_tokens_per_s_per_gpu or 0:,.0f}")
    cols[3].metric("$ per million output tokens", f"{result.usd_per_million_output_tokens or 0:.3f}",
                   help=f"at ${result.usd_per_gpu_hour:.2f} per GPU-hour ({result.hardware})")
    cols[4].metric("Simulations", result.num_simulations)


def _no_rate_tiles(result: CapacityResult) -> None:
    """When nothing meets the SLO there is no capacity, throughput or price to show: the tile
    says so (a 0.00 req/s or a $0.000 tile would read as an answer)."""
    cols = st.columns([3, 1])
    cols[0].metric("Capacity per replica", NO_RATE, help=result.no_rate_text())
    cols[1].metric("Simulations", result.num_simulations)


def _seed_table(result: CapacityResult) -> pd.DataFrame:
    """One row per seed, as text: rates with two decimals, '—' where a bound was not found."""
    runs = {s.seed: sum(1 for e in result.evaluations if e.seed == s.seed) for s in result.searches}
    return pd.DataFrame([{
        "Seed": str(s.seed),
        "Highest rate meeting the SLO (req/s)": rate_text(s.low),
        "Lowest rate missing it (req/s)": rate_text(s.high),
        "Bracket width": f"{s.high / s.low - 1:.1%}" if s.low and s.high else "—",
        "Rates tried": str(runs[s.seed]),
        "Note": s.note or "—"} for s in result.searches])


try:
    found = common.cached("capacity", params, _search, "capacity search")
except common.KvplanError as exc:
    f.error(str(exc))
    st.stop()

result = plan(copy.deepcopy(found), target or None, price or None)
rec = result.to_dict()
(st.success if result.planning_rate > 0 else st.error)(result.headline())
if result.interval_met is False:
    st.warning(f"Interval target not met. {_sentence(result.sizing_note)}.", icon=":material/warning:")
(_answer_tiles if result.planning_rate > 0 else _no_rate_tiles)(result)
if result.replicas:
    cols = st.columns(3)
    cols[0].metric(f"Replicas for {target:g} req/s", result.replicas)
    cols[1].metric("GPUs", result.gpus)
    cols[2].metric("$ per hour", f"{result.usd_per_hour:,.2f}")
common.show_notes(result.notes)

st.plotly_chart(figures.capacity_search(rec), key="cap-search")
st.caption(f"{_sentence(result.sizing_note)}. Each seed is one arrival pattern and one set of request "
           f"lengths; the plot's marker shape says which seed each simulation belongs to.")
st.dataframe(_seed_table(result), hide_index=True)
common.report_downloads([rec], "kvplan-capacity", "kvplan capacity report")
