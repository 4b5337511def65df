"""Cluster: the questions past one replica. Where requests go (routing), where KV lives (offload
tiers), whether prompts and decodes belong on separate GPUs (disaggregation), and how many
replicas a day needs (autoscaling); docs/cluster.md has the model behind each.

Why lazy tabs: each tab is a comparison of several simulations, and a 2-core machine runs them
one after another; only the open tab computes (its widgets are drawn in every run, so a tab
keeps its settings while another is open), the open tab is in the URL (``?cl.tab=...``), and
every result is cached per distinct input.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import streamlit as st

from dashboards import cluster_display as show
from dashboards import cluster_runs as runs
from dashboards import common
from analysis.formatting import FRACTION, format_number, format_relative, format_value
from sim.catalog import list_hardware, list_models
from sim.catalog.links import LINK_NAMES
from sim.config import DEFAULTS, POLICIES, ROUTERS
from sim.policies.autoscaler import METRICS
from sim.summary_table import latency_unit

TABS = ("Routing", "KV offload", "Prefill/decode", "Autoscaling")

st.title("Cluster")
st.caption("Past one replica: where requests go, where KV lives, whether prompts and decodes "
           "should run on separate GPUs, and how many replicas a day needs. The sidebar is shared; "
           "each tab simulates its comparison when opened, and results are cached.")


# ---------------------------------------------------------------- shared sidebar

def shared_fields() -> common.Fields:
    """Model, GPU, scheduler, KV pool and SLO shared by every tab (each tab sets the rest)."""
    f = common.Fields("cl.")
    d = DEFAULTS
    with st.sidebar:
        st.header("Shared scenario")
        with st.expander("Model and hardware", expanded=True):
            models, hws = [m.name for m in list_models()], [h.name for h in list_hardware()]
            f.add("model", st.selectbox, "Model", models, index=models.index(d["model"]))
            f.add("hardware", st.selectbox, "GPU", hws, index=hws.index("h100-sxm"))
            f.add("parallel.tensor_parallel_size", st.selectbox, "Tensor parallel (GPUs per replica)", [1, 2, 4, 8])
            common.cost_model_field(f)
        with st.expander("Scheduler and KV cache"):
            f.add("scheduler.policy", st.selectbox, "Scheduler", list(POLICIES), index=list(POLICIES).index("chunked"))
            f.add("scheduler.max_num_seqs", st.number_input, "max_num_seqs (empty = the engine's default)",
                  min_value=1, max_value=4096, value=d["scheduler"]["max_num_seqs"])
            f.add("kv_cache.block_size", st.selectbox, "Block size (tokens)", [8, 16, 32, 64, 128], index=1)
            f.add("kv_cache.gpu_memory_utilization", st.slider, "GPU memory utilisation", 0.5, 0.98,
                  float(d["kv_cache"]["gpu_memory_utilization"]), 0.01)
            f.add("kv_cache.max_model_len", st.number_input, "max_model_len (tokens)", min_value=256,
                  max_value=131072, value=32768, step=1024,
                  help="conversations grow turn by turn: a turn past this is rejected and ends its session")
        with st.expander("SLO (per request)", expanded=True):
            ttft = f.add("slo.ttft_ms", st.number_input, "TTFT bound (ms, 0 = none)", min_value=0.0, value=1000.0, step=100.0)
            tpot = f.add("slo.tpot_ms", st.number_input, "TPOT bound (ms, 0 = none)", min_value=0.0, value=25.0, step=5.0)
            f.values["slo.ttft_ms"], f.values["slo.tpot_ms"] = ttft or None, tpot or None
        f.add("seed", st.number_input, "Seed", min_value=0, max_value=2**31 - 1, value=0)
        f.add("overrides", st.text_area, "Other settings (key=value per line, as --set)", value="",
              placeholder="kv_cache.dtype=fp8\nworkload.output_len.mean=200", config_key=False)
    return f


# ---------------------------------------------------------------- helpers

def show_error(exc: Exception, tab: common.Fields, shared: common.Fields) -> None:
    """The error under the field it names: the tab's own fields first, then the sidebar's; a
    key set only in the sidebar's free-form box under that box, anything else in the tab."""
    message = str(exc)
    for group in (tab, shared):
        if group._field_for(message) not in (None, "overrides"):
            group.error(message)
            return
    key = message.split(":", 1)[0].strip()
    typed = st.session_state.get(f"{shared.prefix}overrides") or ""
    if key and key in typed:
        shared.error(message, "overrides")
    else:
        tab.error(message)


def compute(kind: str, params: dict, fn: Callable[[common.Progress], Any], label: str,
            tab: common.Fields, shared: common.Fields) -> Optional[Any]:
    """``common.cached`` with a library error shown under its field instead of raised."""
    try:
        return common.cached(kind, params, fn, label)
    except common.KvplanError as exc:
        show_error(exc, tab, shared)
        return None


def latency(value_ms: Optional[float]) -> str:
    """A latency in the unit it reads best in (``840 ms``, ``1.52 s``)."""
    if value_ms is None:
        return "-"
    unit, per, _ = latency_unit([value_ms])
    return f"{format_number(value_ms / per)} {unit}"


def rel(new: Optional[float], old: Optional[float]) -> Optional[str]:
    """A tile's delta: the relative change from ``old``; None when either is missing or the
    change rounds to nothing (Streamlit would draw "+0%" as a green rise)."""
    if new is None or not old or abs(new / old - 1) < 5e-4:
        return None
    return format_relative(new / old - 1)


def pp(new: Optional[float], old: Optional[float]) -> Optional[str]:
    """A tile's delta of two fractions in percentage points (None as for ``rel``)."""
    if new is None or old is None or abs(new - old) < 5e-4:
        return None
    return f"{(new - old) * 100:+.1f} pp"


def progress_of(p: common.Progress) -> runs.OnRun:
    """A progress bar fed by simulations done out of a group."""
    return lambda done, total, text: p(done / max(total, 1), text)


def cases_param(cases: Sequence[runs.Case]) -> list:
    """The cases as part of a cache key."""
    return [[c.label, list(c.overrides)] for c in cases]


# ---------------------------------------------------------------- routing

SESSIONS, PREFIXES = "conversations (multi-turn)", "shared system prompts"


def routing_workload(f: common.Fields) -> bool:
    """The routing workload's knobs; True for conversations."""
    kind = f.add("kind", st.radio, "Workload", [SESSIONS, PREFIXES], horizontal=True, config_key=False,
                 help="Conversations: every turn re-sends the conversation so far, so its prefix is on the "
                      "replica of the previous turn. Shared prompts: each request starts with one of a few "
                      "system prompts.")
    cols = st.columns(4)
    if kind == SESSIONS:
        with cols[0]:
            f.add("workload.num_requests", st.number_input, "Conversations", min_value=4, max_value=20000, value=40, step=20)
        with cols[1]:
            f.add("workload.arrival.rate", st.number_input, "New conversations per second", min_value=0.01,
                  max_value=1000.0, value=10.0, step=1.0)
        with cols[2]:
            turns = f.add("turns", st.number_input, "Most turns per conversation", min_value=2, max_value=50,
                          value=10, config_key=False)
        with cols[3]:
            think = f.add("think", st.number_input, "Mean think time (s)", min_value=0.0, max_value=3600.0,
                          value=10.0, step=1.0, config_key=False)
        f.slot("workload.sessions")
        f.values["workload.sessions"] = {
            "num_turns": {"dist": "uniform", "min": 2, "max": int(turns)},
            "think_time_s": {"dist": "exponential", "mean": think} if think > 0 else 0.0,
            "new_message_len": {"dist": "lognormal", "mean": 300, "cv": 1}}
        return True
    with cols[0]:
        f.add("workload.num_requests", st.number_input, "Requests", min_value=10, max_value=100000, value=400, step=50)
    with cols[1]:
        f.add("workload.arrival.rate", st.number_input, "Arrival rate (req/s)", min_value=0.01, max_value=10000.0,
              value=20.0, step=1.0)
    with cols[2]:
        f.add("workload.prefix.num_prefixes", st.number_input, "System prompts", min_value=1, max_value=100000, value=32)
    with cols[3]:
        f.add("workload.prefix.length", st.number_input, "System prompt length (tokens)", min_value=16,
              max_value=131072, value=4096, step=256)
    return False


def routing_settings(f: common.Fields) -> None:
    """The prefix_aware weights and the affinity thresholds (docs/cluster.md's defaults)."""
    d = DEFAULTS["parallel"]
    with st.expander("prefix_aware weights and session-affinity thresholds"):
        cols = st.columns(5)
        for col, (key, label, step) in zip(cols, (
                ("router_prefix_weight", "Prefix weight", 0.5), ("router_load_weight", "Load weight", 0.5),
                ("router_kv_weight", "Free-KV weight", 0.5),
                ("session_affinity_abs_threshold", "Affinity: extra requests", 8),
                ("session_affinity_rel_threshold", "Affinity: times the least loaded", 0.25))):
            with col:
                kw = dict(min_value=0, value=int(d[key]), step=int(step)) if isinstance(d[key], int) \
                    else dict(min_value=0.0, value=float(d[key]), step=float(step))
                f.add(f"parallel.{key}", st.number_input, label, **kw)


def routing_tab(shared: common.Fields, is_open: Optional[bool]) -> None:
    """Every router on the same requests; the knobs always drawn, the runs only when open."""
    st.markdown("**Which router, on how many replicas?** Every router serves the same requests; "
                "prefix caching is on.")
    f = common.Fields("clr.")
    c1, c2 = st.columns([1, 2])
    with c1:
        f.add("parallel.num_replicas", st.number_input, "Replicas", min_value=2, max_value=64, value=4)
    sessions = routing_workload(f)
    cases = runs.routing_cases(sessions)
    labels = [c.label for c in cases]
    with c2:
        pick = f.add("highlight", st.selectbox, "Router to deploy (outlined below)", labels,
                     index=labels.index("prefix_aware"), config_key=False)
    routing_settings(f)
    if not is_open:
        return
    base = common.build(shared, f, extra=("kv_cache.prefix_caching=true",))
    if base is None:
        st.info("Fix the setting marked in red to compare routers.")
        return
    found = compute("cluster-routing", {"cfg": base, "cases": cases_param(cases)},
                    lambda p: runs.run_cases(base, cases, progress_of(p), "router"), "comparing routers", f, shared)
    if found is None:
        return
    rows = [runs.routing_row(r) for r in found]
    routing_results(rows, pick, base)
    common.report_downloads([r["record"] for r in found], "kvplan-cluster-routing", "kvplan routing report")


def routing_results(rows: list[dict], pick: str, cfg: dict) -> None:
    """The headline, the picked router's tiles against round_robin, the plot and the table."""
    by = {r["label"]: r for r in rows}
    rr, chosen = by["round_robin"], by[pick]
    best = min(rows, key=lambda r: r["mean_ttft_ms"] if r["mean_ttft_ms"] is not None else float("inf"))
    st.success(f"Lowest mean TTFT: {best['label']} ({latency(best['mean_ttft_ms'])}, "
               f"{format_value(best['hit_rate'], FRACTION)} of prompt tokens from the prefix cache) against "
               f"round_robin's {latency(rr['mean_ttft_ms'])} and {format_value(rr['hit_rate'], FRACTION)}, "
               f"on {cfg['parallel']['num_replicas']} replicas.")
    cols = st.columns(4)
    cols[0].metric(f"{pick}: hit rate", format_value(chosen["hit_rate"], FRACTION),
                   delta=pp(chosen["hit_rate"], rr["hit_rate"]) if pick != "round_robin" else None,
                   help="prompt tokens found in the chosen replica's prefix cache; delta against round_robin")
    cols[1].metric(f"{pick}: mean TTFT", latency(chosen["mean_ttft_ms"]),
                   delta=rel(chosen["mean_ttft_ms"], rr["mean_ttft_ms"]) if pick != "round_robin" else None,
                   delta_color="inverse")
    cols[2].metric(f"{pick}: p99 TTFT", latency(chosen["p99_ttft_ms"]),
                   delta=rel(chosen["p99_ttft_ms"], rr["p99_ttft_ms"]) if pick != "round_robin" else None,
                   delta_color="inverse")
    busiest = chosen["busiest_share"]
    cols[3].metric(f"{pick}: busiest replica", "-" if busiest is None else f"{format_number(busiest)}x",
                   help="requests routed to the busiest replica over the mean per replica: 1x is an even spread")
    st.plotly_chart(show.router_comparison(rows, pick), key="cl-routing")
    st.dataframe(show.routing_table(rows), hide_index=True)
    st.caption("Hit rate: prompt tokens served from the chosen replica's prefix cache at admission. "
               "prefix_aware is llm-d's weighted scorer (prefix, queue, free KV); affinity keeps a "
               "conversation's turns on one replica unless it is overloaded (SGLang's thresholds).")


# ---------------------------------------------------------------- KV offload

def offload_tab(shared: common.Fields, is_open: Optional[bool]) -> None:
    """GPU only against the tiers added one at a time, on prefixes that outgrow the GPU pool."""
    st.markdown("**What do CPU and SSD tiers under the GPU prefix cache buy?** One replica, prefix "
                "caching on; blocks evicted from the GPU move down the tiers and are loaded back on a hit.")
    f = common.Fields("clo.")
    cols = st.columns(4)
    with cols[0]:
        cpu = f.add("kv_cache.cpu_offload_gb", st.number_input, "CPU tier (GiB, 0 = off)", min_value=0.0,
                    max_value=4096.0, value=24.0, step=8.0)
    with cols[1]:
        bw = f.add("kv_cache.cpu_offload_bandwidth_gbs", st.number_input, "CPU read bandwidth (GB/s, 0 = PCIe)",
                   min_value=0.0, max_value=1000.0, value=0.0, step=8.0)
        f.values["kv_cache.cpu_offload_bandwidth_gbs"] = bw or None
    with cols[2]:
        ssd = f.add("kv_cache.ssd_offload_gb", st.number_input, "SSD tier (GiB, 0 = off)", min_value=0.0,
                    max_value=100000.0, value=256.0, step=64.0)
    with cols[3]:
        f.add("kv_cache.ssd_offload_bandwidth_gbs", st.number_input, "SSD read bandwidth (GB/s)", min_value=0.1,
              max_value=1000.0, value=6.0, step=1.0)
    cols = st.columns(4)
    with cols[0]:
        f.add("workload.num_requests", st.number_input, "Requests", min_value=10, max_value=100000, value=300, step=50)
    with cols[1]:
        f.add("workload.arrival.rate", st.number_input, "Arrival rate (req/s)", min_value=0.01, max_value=1000.0,
              value=1.5, step=0.5)
    with cols[2]:
        f.add("workload.prefix.num_prefixes", st.number_input, "Shared prefixes", min_value=1, max_value=100000,
              value=100, help="documents or system prompts that requests start with, picked uniformly")
    with cols[3]:
        f.add("workload.prefix.length", st.number_input, "Prefix length (tokens)", min_value=16, max_value=131072,
              value=8192, step=1024)
    if not is_open:
        return
    base = common.build(shared, f, extra=("kv_cache.prefix_caching=true", "parallel.num_replicas=1"))
    if base is None:
        st.info("Fix the setting marked in red to compare the tiers.")
        return
    cases = runs.offload_cases(cpu, ssd)
    found = compute("cluster-offload", {"cfg": base, "cases": cases_param(cases)},
                    lambda p: runs.run_cases(base, cases, progress_of(p), "tier set"), "comparing tiers", f, shared)
    if found is None:
        return
    offload_results([runs.offload_row(r) for r in found], base)
    common.report_downloads([r["record"] for r in found], "kvplan-cluster-offload", "kvplan offload report")


def offload_results(rows: list[dict], cfg: dict) -> None:
    """The headline, the pool against the prefixes, hits per tier, TTFT and the table."""
    gpu, last = rows[0], rows[-1]
    prefix = cfg["workload"]["prefix"]
    working = prefix["num_prefixes"] * prefix["length"]
    if len(rows) == 1:
        st.info("Both tiers are off: set a CPU or SSD size to compare.")
    else:
        st.success(f"{last['label']}: {format_value(last['hit_rate'], FRACTION)} of prompt tokens hit against "
                   f"{format_value(gpu['hit_rate'], FRACTION)} on the GPU alone; mean TTFT "
                   f"{latency(last['mean_ttft_ms'])} against {latency(gpu['mean_ttft_ms'])}.")
    cols = st.columns(4)
    cols[0].metric("GPU KV pool (tokens)", format_number(gpu["kv_tokens"]),
                   help=f"the shared prefixes alone are {format_number(working)} tokens")
    cols[1].metric("Hit rate, all tiers", format_value(last["hit_rate"], FRACTION),
                   delta=pp(last["hit_rate"], gpu["hit_rate"]) if len(rows) > 1 else None,
                   help="delta against the GPU prefix cache alone")
    cols[2].metric("Mean TTFT, all tiers", latency(last["mean_ttft_ms"]),
                   delta=rel(last["mean_ttft_ms"], gpu["mean_ttft_ms"]) if len(rows) > 1 else None,
                   delta_color="inverse")
    cols[3].metric("Loaded back from the tiers", f"{format_number(sum(last['loaded_gb'].values()))} GB",
                   help="every load back over the host link, priced into the step that admits the request")
    st.plotly_chart(show.tier_comparison(rows), key="cl-offload")
    st.dataframe(show.offload_table(rows), hide_index=True)
    st.caption("Tiers are an exclusive victim cache (a block lives in one place), LRU per tier; a load is "
               "priced into the admitting step at the tier's bandwidth. docs/cluster.md, KV offload tiers.")


# ---------------------------------------------------------------- prefill/decode

def pd_tab(shared: common.Fields, is_open: Optional[bool]) -> None:
    """Collocated against the prefill/decode split on the same GPUs, then goodput against rate."""
    st.markdown("**Should prompts and decodes run on separate GPUs?** The same GPUs as collocated "
                "replicas or as a prefill pool and a decode pool joined by a link.")
    f = common.Fields("clp.")
    cols = st.columns(4)
    with cols[0]:
        p = f.add("disaggregation.prefill_replicas", st.number_input, "Prefill instances", min_value=1,
                  max_value=64, value=2)
    with cols[1]:
        d = f.add("disaggregation.decode_replicas", st.number_input, "Decode instances", min_value=1,
                  max_value=64, value=2)
    with cols[2]:
        f.add("disaggregation.link", st.selectbox, "KV link", list(LINK_NAMES), index=list(LINK_NAMES).index("infiniband"),
              help="nvlink 450 GB/s, infiniband (NDR) and roce 50 GB/s, pcie 64 GB/s per GPU and direction")
    with cols[3]:
        bw = f.add("disaggregation.link_bandwidth_gbs", st.number_input, "Link bandwidth (GB/s, 0 = the link's)",
                   min_value=0.0, max_value=10000.0, value=0.0, step=10.0)
        f.values["disaggregation.link_bandwidth_gbs"] = bw or None
    cols = st.columns(4)
    with cols[0]:
        f.add("workload.num_requests", st.number_input, "Requests", min_value=10, max_value=100000, value=300, step=50)
    with cols[1]:
        f.add("workload.arrival.rate", st.number_input, "Arrival rate (req/s)", min_value=0.01, max_value=10000.0,
              value=16.0, step=2.0)
    with cols[2]:
        m = f.add("workload.input_len.mean", st.number_input, "Mean prompt (tokens)", min_value=16,
                  max_value=131072, value=4096, step=512)
    with cols[3]:
        o = f.add("workload.output_len.mean", st.number_input, "Mean output (tokens)", min_value=2,
                  max_value=16384, value=256, step=64)
    f.values.update({"workload.input_len.cv": 0.5, "workload.input_len.max": 4 * int(m),
                     "workload.output_len.cv": 0.5, "workload.output_len.max": 4 * int(o)})
    c1, c2 = st.columns([3, 1])
    with c1:
        rates_text = f.add("curve.rates", st.text_input, "Rates for the goodput curve (req/s)", value="4, 8, 16, 24",
                           config_key=False)
    with c2:
        curve_s = f.add("curve.duration", st.number_input, "Curve run length (s of arrivals)", min_value=5.0,
                        max_value=600.0, value=20.0, step=5.0, config_key=False)
    if not is_open:
        return
    try:
        rates = common.parse_numbers(rates_text, "rates")
    except ValueError as exc:
        f.error(str(exc), "curve.rates")
        rates = None
    base = common.build(shared, f, extra=("disaggregation.enabled=true", "parallel.router=least_outstanding"))
    if base is None:
        st.info("Fix the setting marked in red to compare.")
        return
    cases = runs.pd_cases(int(p), int(d))
    found = compute("cluster-pd", {"cfg": base, "cases": cases_param(cases)},
                    lambda pr: runs.run_cases(base, cases, progress_of(pr), "deployment"),
                    "collocated against P/D", f, shared)
    if found is None:
        return
    has_slo = bool(base["slo"]["ttft_ms"] or base["slo"]["tpot_ms"])
    pd_results([runs.pd_row(r) for r in found], has_slo, base["workload"]["arrival"]["rate"])
    if rates:  # last: one simulation per rate and deployment, after the answer is drawn
        points = compute("cluster-pd-curve", {"cfg": base, "cases": cases_param(cases), "rates": rates,
                                              "duration": curve_s},
                         lambda pr: runs.pd_curve(base, cases, rates, curve_s, progress_of(pr)),
                         "goodput curve", f, shared)
        if points is not None:
            st.plotly_chart(show.goodput_curve(points, has_slo), key="cl-pd-curve")
            st.caption(f"Each point: {curve_s:g} s of arrivals (at least 100 requests) at that rate.")
    common.report_downloads([r["record"] for r in found], "kvplan-cluster-pd", "kvplan prefill/decode report")


def pd_results(rows: list[dict], has_slo: bool, rate: float) -> None:
    """The headline at the offered rate, P/D's tiles against collocated, the plot and the table."""
    col, pd_ = rows
    key = "goodput_per_gpu" if has_slo else "output_throughput_per_gpu"
    what = "req/s per GPU inside the SLO" if has_slo else "output tokens/s per GPU"
    better = pd_[key] is not None and col[key] is not None and pd_[key] > col[key]
    (st.success if better else st.info)(
        f"At {rate:g} req/s on {col['num_gpus']} GPUs: {pd_['label']} serves {format_number(pd_[key])} {what}, "
        f"{col['label']} {format_number(col[key])}"
        + ("." if has_slo else " (set an SLO in the sidebar for goodput)."))
    cols = st.columns(4)
    cols[0].metric("P/D goodput per GPU" if has_slo else "P/D output tok/s per GPU", format_number(pd_[key]),
                   delta=rel(pd_[key], col[key]), help=f"{col['label']}: {format_number(col[key])}")
    cols[1].metric("P/D p99 TTFT", latency(pd_["p99_ttft_ms"]), delta=rel(pd_["p99_ttft_ms"], col["p99_ttft_ms"]),
                   delta_color="inverse", help=f"{col['label']}: {latency(col['p99_ttft_ms'])}")
    cols[2].metric("P/D p99 TPOT", latency(pd_["p99_tpot_ms"]), delta=rel(pd_["p99_tpot_ms"], col["p99_tpot_ms"]),
                   delta_color="inverse", help=f"{col['label']}: {latency(col['p99_tpot_ms'])}")
    cols[3].metric("KV transfer, mean", latency(pd_.get("transfer_mean_ms")),
                   help=f"p99 {latency(pd_.get('transfer_p99_ms'))}; {format_number(pd_.get('transfer_gb'))} GB a "
                        f"request; in the decode instance's API server {latency(pd_.get('decode_api_server_ms'))} "
                        f"and waiting for decode KV {latency(pd_.get('wait_for_kv_ms'))} on average")
    st.plotly_chart(show.pd_comparison(rows, has_slo), key="cl-pd")
    st.dataframe(show.pd_table(rows), hide_index=True)
    st.caption("TTFT of P/D ends at the decode instance's first token, as vLLM's P/D proxy and llm-d serve it: "
               "it includes the decode instance's API server pass, the KV transfer over the link and the wait "
               "for decode room "
               "(disaggregation.first_token=prefill in the other settings counts it at the prefill instance, as "
               "DistServe and Splitwise do). docs/cluster.md, Disaggregated prefill/decode.")


# ---------------------------------------------------------------- autoscaling

TRACE_SOURCE, SYNTHETIC_SOURCE = "Azure conv. trace", "synthetic"


def day_fields(f: common.Fields) -> runs.DaySpec:
    """Which day: the trace (or a synthetic one), its compression and daily profile."""
    have_trace = runs.AZURE_CONV.exists()
    sources = [TRACE_SOURCE, SYNTHETIC_SOURCE] if have_trace else [SYNTHETIC_SOURCE]
    cols = st.columns(5)
    with cols[0]:
        source = f.add("source", st.selectbox, "Day of arrivals", sources, config_key=False,
                       help=("Azure LLM inference 2023, conversation: the trace's bursts and lengths under a "
                             "daily rate profile. " if have_trace else f"{runs.AZURE_CONV} is not on this machine. ")
                       + "Synthetic: Poisson arrivals thinned to the profile, ShareGPT-like lengths.")
    with cols[1]:
        scale = f.add("time_scale", st.number_input, "Day compressed (x)", min_value=1.0, max_value=8640.0,
                      value=144.0, step=24.0, config_key=False,
                      help="144: 24 hours in 10 simulated minutes; load delay, interval and cool-down stay in real seconds")
    with cols[2]:
        peak = f.add("peak_rate", st.number_input, "Peak rate (req/s)", min_value=0.01, max_value=1000.0, value=3.0,
                     step=0.5, config_key=False)
    with cols[3]:
        trough = f.add("trough", st.number_input, "Night rate (x peak)", min_value=0.01, max_value=1.0, value=0.2,
                       step=0.05, config_key=False)
    with cols[4]:
        hour = f.add("peak_hour", st.number_input, "Peak hour", min_value=0.0, max_value=23.99, value=14.0, step=1.0,
                     config_key=False)
    return runs.DaySpec("trace" if source == TRACE_SOURCE else "synthetic", scale, peak, trough, hour)


def policy_fields(f: common.Fields) -> tuple[dict, dict]:
    """The policy (AutoscalerConfig's fields but the delay) and the run's other options."""
    cols = st.columns(5)
    with cols[0]:
        metric = f.add("metric", st.selectbox, "Scaling metric", list(METRICS), config_key=False,
                       help="concurrency: outstanding requests per serving replica (Knative/KServe); "
                            "queue: waiting requests (KEDA)")
    with cols[1]:
        target = f.add("target", st.number_input, "Target per replica", min_value=0.1, max_value=10000.0, value=2.0,
                       step=1.0, config_key=False)
    with cols[2]:
        lo = f.add("min_replicas", st.number_input, "Fewest replicas", min_value=1, max_value=256, value=1, config_key=False)
    with cols[3]:
        hi = f.add("max_replicas", st.number_input, "Most replicas", min_value=1, max_value=256, value=8, config_key=False)
    with cols[4]:
        initial = f.add("initial_replicas", st.number_input, "Replicas at midnight", min_value=0, max_value=256,
                        value=0, config_key=False, help="serving at t=0; 0: the fewest replicas")
    with st.expander("Decision timing, model load, price, router"):
        more = st.columns(4)
        with more[0]:
            interval = f.add("interval_s", st.number_input, "Decision interval (s)", min_value=1.0, max_value=3600.0,
                             value=15.0, step=5.0, config_key=False)
            cooldown = f.add("scale_down_stabilization_s", st.number_input, "Scale-down cool-down (s)", min_value=0.0,
                             max_value=86400.0, value=60.0, step=30.0, config_key=False)
        with more[1]:
            tol = f.add("tolerance", st.number_input, "Tolerance", min_value=0.0, max_value=10.0, value=0.1, step=0.05,
                        config_key=False)
            f.add("parallel.router", st.selectbox, "Router", list(ROUTERS), index=list(ROUTERS).index("least_outstanding"))
        with more[2]:
            load = f.add("load_bandwidth", st.number_input, "Weights load (GB/s per GPU)", min_value=0.01, max_value=1000.0,
                  value=2.0, step=0.5, config_key=False)
            startup = f.add("startup_s", st.number_input, "Start-up besides weights (s)", min_value=0.0, max_value=3600.0,
                  value=30.0, step=10.0, config_key=False)
        with more[3]:
            fixed = f.add("fixed", st.number_input, "Fixed fleet (0 = autoscaled peak)", min_value=0, max_value=256, value=0,
                  config_key=False)
            price = f.add("price", st.number_input, "$ per GPU-hour (0 = catalog)", min_value=0.0, max_value=1000.0, value=0.0,
                  step=0.1, config_key=False)
    policy = {"metric": metric, "target": target, "min_replicas": int(lo), "max_replicas": int(hi),
              "interval_s": interval, "scale_down_stabilization_s": cooldown, "tolerance": tol}
    return policy, {"initial": int(initial), "fixed": int(fixed), "price": price, "load": load, "startup": startup}


def check_policy(f: common.Fields, policy: dict, initial: int) -> bool:
    """The combinations a single widget cannot check, each under its field."""
    ok = True
    if policy["max_replicas"] < policy["min_replicas"]:
        f.error(f"max_replicas: must be >= the fewest replicas ({policy['min_replicas']}), got "
                f"{policy['max_replicas']}", "max_replicas")
        ok = False
    elif initial and not policy["min_replicas"] <= initial <= policy["max_replicas"]:
        f.error(f"initial_replicas: {initial} is outside {policy['min_replicas']}..{policy['max_replicas']}",
                "initial_replicas")
        ok = False
    return ok


def autoscale_tab(shared: common.Fields, is_open: Optional[bool]) -> None:
    """The day on an autoscaled fleet and on a fixed one sized for its peak."""
    st.markdown("**How many replicas over a day, and what does autoscaling save?** HPA's rule on a "
                "per-replica target, against a fixed fleet sized for the peak, on the same requests.")
    f = common.Fields("cla.")
    day = day_fields(f)
    policy, opt = policy_fields(f)
    if not is_open:
        return
    base = common.build(shared, f)
    if base is None or not check_policy(f, policy, opt["initial"]):
        st.info("Fix the setting marked in red to replay the day.")
        return
    expected = 2 * day.day_s * day.peak_rate * (1 + day.trough) / 2  # both fleets' requests
    params = {"cfg": base, "day": day.__dict__, "policy": policy, **opt}

    def _run(p: common.Progress) -> dict:
        done = [0]

        def tick(n: int) -> None:
            done[0] += n
            p(min(done[0] / expected, 0.99), f"autoscaled, then fixed fleet: {done[0]:,} requests finished")
        return runs.autoscale_day(base, day, policy, load_bandwidth_gbs=opt["load"], startup_s=opt["startup"],
                                  initial_replicas=opt["initial"] or None, fixed_replicas=opt["fixed"] or None,
                                  usd_gpu_hour=opt["price"] or None, progress=tick)

    result = compute("cluster-autoscale", params, _run, "replaying the day", f, shared)
    if result is not None:
        autoscale_results(result)


def autoscale_results(result: dict) -> None:
    """Savings and SLO first, then replicas over the day, SLO by hour, the totals, hour by hour."""
    a = result["runs"]["autoscaled"]["totals"]
    fx = result["runs"]["fixed"]["totals"]
    saved = result["savings"]["fraction"]
    fixed_n = fx["peak_replicas"]
    keeps = (a["slo_attainment"] or 0) >= (fx["slo_attainment"] or 0) - 0.01
    (st.success if keeps else st.warning)(
        f"Autoscaled: {format_number(a['gpu_hours'])} GPU-hours (${format_number(a['usd'])}) against "
        f"{format_number(fx['gpu_hours'])} (${format_number(fx['usd'])}) for {fixed_n} replicas all day: "
        f"{format_value(saved, FRACTION)} saved, SLO attainment {format_value(a['slo_attainment'], FRACTION)} "
        f"against {format_value(fx['slo_attainment'], FRACTION)}"
        + ("." if keeps else "; the scale-up delay costs SLO during the ramps."))
    cols = st.columns(5)
    cols[0].metric("GPU-hours", format_number(a["gpu_hours"]), delta=rel(a["gpu_hours"], fx["gpu_hours"]),
                   delta_color="inverse", help=f"fixed fleet: {format_number(fx['gpu_hours'])}; starting and "
                                               "draining replicas are billed")
    cols[1].metric("Cost ($)", format_number(a["usd"]), delta=rel(a["usd"], fx["usd"]), delta_color="inverse",
                   help=f"at ${format_number(a['usd_per_gpu_hour'])} per GPU-hour; fixed fleet ${format_number(fx['usd'])}")
    cols[2].metric("SLO attainment", format_value(a["slo_attainment"], FRACTION),
                   delta=pp(a["slo_attainment"], fx["slo_attainment"]),
                   help=f"fixed fleet: {format_value(fx['slo_attainment'], FRACTION)}")
    cols[3].metric("Replicas mean / peak", f"{format_number(a['mean_replicas'])} / {a['peak_replicas']}",
                   help=f"{a['scale_ups']} scale-ups, {a['scale_downs']} scale-downs")
    cols[4].metric("Scale-up delay", latency(result["delay_s"] * 1000),
                   help="the model's weights per GPU over the load bandwidth, plus the start-up time")
    st.plotly_chart(show.fleet_timeline(result), key="cl-fleet")
    st.plotly_chart(show.slo_by_hour(result), key="cl-fleet-slo")
    rows = [runs.fleet_row("autoscaled", a), runs.fleet_row(f"fixed {fixed_n}", fx)]
    st.dataframe(show.fleet_table(rows), hide_index=True)
    with st.expander("Hour by hour"):
        st.dataframe(show.hourly_table(result), hide_index=True)
    day = result["settings"]["day"]
    st.caption(f"{result['requests']:,} requests over {format_number(result['day_s'] / 60)} simulated minutes "
               f"({'the Azure conversation trace' if day['source'] == 'trace' else 'synthetic arrivals'} under a "
               f"daily profile, {day['time_scale']:g}x compressed). `kvplan autoscale --out DIR` writes the same "
               "comparison as autoscale.json.")


# ---------------------------------------------------------------- layout

shared = shared_fields()
tabs = st.tabs(TABS, key="cl.tab", on_change="rerun", bind="query-params")
for tab, draw in zip(tabs, (routing_tab, offload_tab, pd_tab, autoscale_tab)):
    with tab:
        draw(shared, tab.open)
