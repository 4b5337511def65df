"""What-if: one scenario, every knob; latency CDFs, the KV memory breakdown over time, batch
size and queue length over time, GPU utilisation and memory split, and latency against
offered load.

The page draws the scenario's own run first and the rate-latency curve (one run per rate) last,
so the tiles and the first plots are on screen while the curve is still simulating.
"""

from __future__ import annotations

from typing import Optional, cast

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis import figures
from analysis.whatif import rate_curve, simulation_record
from sim.api import simulate
from sim.summary_table import latency_unit, summary_rows

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
    rates: Optional[list[float]] = common.parse_numbers(rates_text, "rates")
except ValueError as exc:
    f.error(str(exc), "curve.rates")
    rates = None

if cfg is None:
    st.info("Fix the setting marked in red to see results.")
    st.stop()


def _run(progress: common.Progress) -> dict:
    total = cast(dict, cfg)["workload"]["num_requests"]  # set: the page stops without it
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        progress(done[0] / total, f"simulating: {done[0]}/{total} requests finished")

    return simulation_record(simulate(cfg, progress=tick), label="what-if")


def latency(value_ms) -> str:
    """A latency tile's value in the unit it reads best in (``21.8 min``, not ``1,305,857``)."""
    if value_ms is None:
        return "-"
    unit, per, digits = latency_unit([value_ms])
    return f"{value_ms / per:,.{digits}f} {unit}"


try:
    record = common.cached("whatif", cfg, _run, "simulating")
except common.KvplanError as exc:
    f.error(str(exc))
    st.stop()

s = record["summary"]
if (s.get("overload") or {}).get("message"):  # a server that cannot keep up is said first
    st.error(s["overload"]["message"])
cols = st.columns(4)
cols[0].metric("Completed / rejected", f"{s['completed']:,} / {s['rejected']:,}")
cols[1].metric("Output tok/s per GPU", f"{s['output_throughput_per_gpu']:,.0f}")
cols[2].metric("TTFT p99", latency(s["p99_ttft_ms"]), help=f"median {latency(s['median_ttft_ms'])}")
cols[3].metric("TPOT p99", latency(s["p99_tpot_ms"]), help=f"median {latency(s['median_tpot_ms'])}")
cols = st.columns(4)
kv = s["kv_cache"]
cols[0].metric("KV holding token states", f"{kv['token_states']:.1%}", help=f"averaged over {kv['averaged_over']}")
frag = kv["internal_fragmentation"] + kv["external_fragmentation"]
if "fragmentation_of_used" in kv:
    cols[1].metric("KV fragmentation (of used)", f"{kv['fragmentation_of_used']:.1%}",
                   help=f"{frag:.1%} of all KV memory (internal + external)")
else:
    cols[1].metric("KV fragmentation (int + ext)", f"{frag:.1%}", help="of all KV memory")
cols[2].metric("Preemptions", f"{kv['preemptions']:,}")
if "goodput" in s:
    cols[3].metric("Goodput (req/s)", f"{s['goodput']:.2f}", help=f"SLO attainment {s['slo_attainment']:.1%}")
else:
    cols[3].metric("Request throughput (req/s)", f"{s['request_throughput']:.2f}")
util, mem = record.get("utilization") or {}, record.get("memory")
if util.get("mfu") is not None or mem:
    cols = st.columns(4)
    if util.get("mfu") is not None:
        cols[0].metric("Model FLOPs utilisation", f"{util['mfu']:.1%}",
                       help="useful model FLOPs over busy time at the GPU's peak (linear layers and decode attention)")
        cols[1].metric("Memory bandwidth utilisation", f"{util['mbu']:.1%}",
                       help="weights, KV read and KV written over busy time at the GPU's peak bandwidth")
    if mem:
        cols[2].metric("Weights per GPU", f"{mem['weights_gb']:,.1f} GB", help=f"of {mem['total_gb']:,.0f} GB")
        cols[3].metric("KV pool per GPU", f"{mem['kv_pool_gb']:,.1f} GB",
                       help=f"{s['scenario'].get('kv_slots_per_replica', 0):,} tokens per replica")
if "cost_model" in s["scenario"]:
    st.caption(f"Step times from a calibration profile: {s['scenario']['cost_model']}")
for warning in s.get("warnings", []):  # e.g. the profile was measured on another machine
    st.warning(warning)

tabs = st.tabs(["Latency CDFs", "KV memory", "Batch and queue", "GPU utilisation and memory",
                "Rate-latency curve", "Summary"])
with tabs[0]:
    st.plotly_chart(figures.latency_cdfs({"what-if": record["latencies"]}), key="wi-cdf")
with tabs[1]:
    sc, peaks = s["scenario"], record.get("peaks", {})
    cols = st.columns(4)
    if sc.get("allocator") == "paged":
        cols[0].metric("KV blocks per replica", f"{sc['kv_slots_per_replica'] // sc['block_size']:,}",
                       help=f"{sc['block_size']} tokens each")
    cols[1].metric("Fragmentation of memory in use", f"{kv.get('fragmentation_of_used', frag):.1%}",
                   help="slots allocated but not holding a token: a request wastes up to block_size - 1 "
                        "slots in its last block, so larger blocks waste more")
    cols[2].metric("Largest batch", f"{peaks.get('num_running', 0):,} requests",
                   help="most requests running at once: the KV pool (in whole blocks) and max_num_seqs bound it")
    cols[3].metric("Prefix-cache hit rate", f"{kv['prefix_cache_hit_rate']:.1%}",
                   help="hits count whole blocks only: a 100-token shared prefix reuses 96 tokens with "
                        "16-token blocks and 64 with 32-token blocks")
    st.plotly_chart(figures.kv_memory(record["timeline"]), key="wi-kv")
    st.caption("Replica 0. Token states: KV of real tokens; reserved: slots held for tokens not yet "
               "generated (contiguous allocators); fragmentation: unusable slots inside and between blocks.")
with tabs[2]:
    st.plotly_chart(figures.batch_and_queue(record["timeline"]), key="wi-queue")
with tabs[3]:
    if "mfu" in record["timeline"]:
        st.plotly_chart(figures.utilization(record["timeline"]), key="wi-util")
        st.caption("Replica 0, per GPU. Low MFU with high bandwidth utilisation: decode is memory-bound "
                   "(larger batches, FP8 weights or KV help); high MFU: compute-bound prefill.")
    if mem:
        st.plotly_chart(figures.memory_split(mem), key="wi-mem")
with tabs[5]:
    st.dataframe(pd.DataFrame(summary_rows(s), columns=["section", "metric", "value"]),
                 hide_index=True, width="stretch")
    with st.expander("summary.json"):
        st.json(s, expanded=False)
with tabs[4]:  # last: one simulation per rate, while everything above is already drawn
    if rates:
        params = {"cfg": cfg, "rates": rates, "duration": curve_s}

        def _curve(progress: common.Progress) -> list:
            # both set: the page stops without cfg, and this tab draws only with rates
            return rate_curve(cast(dict, cfg), cast(list[float], rates), duration_s=curve_s,
                              on_done=lambda d, t: progress(d / t, f"rate-latency curve: {d}/{t} rates"))

        try:
            record["rate_curve"] = common.cached("curve", params, _curve, "rate-latency curve")
        except common.KvplanError as exc:
            f.error(str(exc), "curve.rates")
        else:
            st.plotly_chart(figures.rate_latency(record["rate_curve"], cfg["slo"],
                                                 cfg["workload"]["arrival"].get("rate")), key="wi-curve")
            st.caption(f"Each point: arrivals spanning {curve_s:g} s at that rate; statistics after a 10% warm-up.")

common.report_downloads([record], "kvplan-what-if", "kvplan what-if report")
