"""What-if: one scenario, every knob; latency CDFs, the KV memory breakdown over time, batch
size and queue length over time, and latency against offered load."""

from __future__ import annotations

import streamlit as st

from dashboards import common
from sim.analysis import figures
from sim.analysis.whatif import rate_curve, simulation_record
from sim.api import simulate

st.title("What-if")
st.caption("Change any knob in the sidebar; results are cached, so going back is instant.")

f = common.sidebar_fields("wi.")
cfg = common.build(f)

c1, c2 = st.columns([3, 1])
with c1:
    rates_text = f.add("curve.rates", st.text_input, "Rates for the rate-latency curve (req/s)",
                       value="2, 4, 8, 12, 16", config_key=False)
with c2:
    curve_s = f.add("curve.duration", st.number_input, "Curve run length (s of arrivals)",
                    min_value=5.0, max_value=600.0, value=30.0, step=5.0, config_key=False)
try:
    rates = common.parse_numbers(rates_text, "rates")
except ValueError as exc:
    f.error(str(exc), "curve.rates")
    rates = None

if cfg is None:
    st.info("Fix the setting marked in red to see results.")
    st.stop()


def _run(progress: common.Progress) -> dict:
    total = cfg["workload"]["num_requests"]
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(done[0] / total, f"simulating: {done[0]}/{total} requests finished")

    return simulation_record(simulate(cfg, progress=tick), label="what-if")


try:
    record = common.cached("whatif", cfg, _run, "simulating")
except common.KvplanError as exc:
    f.error(str(exc))
    st.stop()

s = record["summary"]
if (s.get("overload") or {}).get("message"):  # a server that cannot keep up is said first
    st.error(s["overload"]["message"])
cols = st.columns(4)
cols[0].metric("Completed / rejected", f"{s['completed']} / {s['rejected']}")
cols[1].metric("Output tok/s per GPU", f"{s['output_throughput_per_gpu']:,.0f}")
cols[2].metric("TTFT p99 (ms)", f"{s['p99_ttft_ms']:,.1f}" if s["p99_ttft_ms"] is not None else "-")
cols[3].metric("TPOT p99 (ms)", f"{s['p99_tpot_ms']:,.2f}" if s["p99_tpot_ms"] is not None else "-")
cols = st.columns(4)
kv = s["kv_cache"]
cols[0].metric("KV holding token states", f"{kv['token_states']:.1%}", help=f"averaged over {kv['averaged_over']}")
cols[1].metric("KV fragmentation (int + ext)", f"{kv['internal_fragmentation'] + kv['external_fragmentation']:.1%}",
               help=(f"of all KV memory; {kv['fragmentation_of_used']:.1%} of the memory in use"
                     if "fragmentation_of_used" in kv else "of all KV memory"))
cols[2].metric("Preemptions", f"{kv['preemptions']:,}")
if "goodput" in s:
    cols[3].metric("Goodput (req/s)", f"{s['goodput']:.2f}", help=f"SLO attainment {s['slo_attainment']:.1%}")
else:
    cols[3].metric("Request throughput (req/s)", f"{s['request_throughput']:.2f}")
if "cost_model" in s["scenario"]:
    st.caption(f"Step times from a calibration profile: {s['scenario']['cost_model']}")
for warning in s.get("warnings", []):  # e.g. the profile was measured on another machine
    st.warning(warning)

tabs = st.tabs(["Latency CDFs", "KV memory", "Batch and queue", "Rate-latency curve", "Summary"])
with tabs[0]:
    st.plotly_chart(figures.latency_cdfs({"what-if": record["latencies"]}), key="wi-cdf")
with tabs[1]:
    st.plotly_chart(figures.kv_memory(record["timeline"]), key="wi-kv")
    st.caption("Replica 0. Token states: KV of real tokens; reserved: slots held for tokens not yet "
               "generated (contiguous allocators); fragmentation: unusable slots inside and between blocks.")
with tabs[2]:
    st.plotly_chart(figures.batch_and_queue(record["timeline"]), key="wi-queue")
with tabs[3]:
    if rates:
        params = {"cfg": cfg, "rates": rates, "duration": curve_s}

        def _curve(progress: common.Progress) -> list:
            return rate_curve(cfg, rates, duration_s=curve_s,
                              on_done=lambda d, t: progress(d / t, f"rate-latency curve: {d}/{t} rates"))

        try:
            record["rate_curve"] = common.cached("curve", params, _curve, "rate-latency curve")
        except common.KvplanError as exc:
            f.error(str(exc), "curve.rates")
        else:
            st.plotly_chart(figures.rate_latency(record["rate_curve"], cfg["slo"],
                                                 cfg["workload"]["arrival"].get("rate")), key="wi-curve")
            st.caption(f"Each point: arrivals spanning {curve_s:g} s at that rate; statistics after a 10% warm-up.")
with tabs[4]:
    st.json(s, expanded=False)

common.report_downloads([record], "kvplan-what-if", "kvplan what-if report")
