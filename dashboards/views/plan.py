"""Plan: the cheapest deployment (GPU, TP, weight and KV quantisation, batch limits) that serves
a target rate inside an SLO, as ``kvplan plan`` finds it (``analysis.plan``), with why each
runner-up lost, the closest misses when nothing meets the SLO, and the Pareto frontier.

A plan simulates for minutes, so it runs when the button is pressed (not on every change of a
field); the result is cached per distinct input and kept on the page until an input changes.
Each ranked deployment opens in What-if: its keys and this page's scenario are written into the
What-if page's fields (``wi.<dotted key>`` in ``st.session_state``; a key with no field goes to
its "Other settings" box) and the app switches page.
"""

from __future__ import annotations

import json
from typing import Any, Optional, cast

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis.capacity import RunSizing
from analysis.plan import default_hardware, parse_search, plan
from analysis.plan_report import frontier_figure, plan_section
from analysis.pricing import price_table
from analysis.slo import SLO
from sim.catalog import list_hardware

#: GPUs offered when no measured tables are installed (``default_hardware()`` is then empty).
FALLBACK_GPUS = ["a100-80gb", "h100-sxm"]
#: The What-if page's field prefix (dashboards/views/what_if.py) and its path for st.switch_page.
WHAT_IF_PREFIX, WHAT_IF_PAGE = "wi.", "views/what_if.py"
#: "Quick runs": a shorter screen and a one-seed full search without the long confirming run.
QUICK_SCREEN_S = 10.0
QUICK_FULL = {"seeds": 1, "ci_target": 0, "rel_tol": 0.2, "sizing": RunSizing(duration_s=10.0, confirm_s=0.0)}
#: Where each stage of the plan sits on the progress bar.
STAGES = {"bound": (0.0, 0.05, "memory plan and analytic bound"), "screen": (0.05, 0.5, "screening"),
          "plan": (0.5, 1.0, "full capacity search")}

st.title("Plan")
st.caption("The cheapest deployment for a target rate inside an SLO, as `kvplan plan` finds it: every GPU "
           "chosen, TP to the node, weights none/fp8/nvfp4 and KV auto/fp8 where the GPU has the cores, "
           "a memory check and an analytic cost floor first, a short screen, then the full capacity "
           "search on the cheapest. The sidebar is the base scenario; its GPU, TP, weights and KV dtype "
           "are what the search varies.")

f = common.sidebar_fields("pl.", sections=("deployment", "kv", "scheduler", "speculative", "workload",
                                            "overrides"), load=False)
#: The sidebar's scenario fields, which What-if has too (with the same dotted keys).
SCENARIO_KEYS = [k for k in f.slots if k != "cost_model.source"]
cfg = common.build(f)

catalog = [h.name for h in list_hardware() if h.name in price_table(None)]
defaults = [g for g in (default_hardware() or FALLBACK_GPUS) if g in catalog]


def field(column: Any, key: str, widget: Any, *args: Any, **kw: Any) -> Any:
    """A page field (not a config key) in ``column``, its error slot under it."""
    with column:
        return f.add(key, widget, *args, config_key=False, **kw)


c1, c2, c3 = st.columns([2, 1, 1])
slo_text = field(c1, "slo", st.text_input, "SLO", value="ttft_p99_ms=500,tpot_p99_ms=50",
                 help="As `kvplan plan --slo`: metric_stat_ms=bound, comma separated (metric "
                      "ttft/tpot/itl/e2el, stat mean/median/p90/p99); optional attainment=0.99")
target = field(c2, "target", st.number_input, "Target rate (req/s)", min_value=0.01, value=100.0, step=10.0)
max_gpus = field(c3, "max_gpus", st.number_input, "Max GPUs per replica (0 = to the node)", min_value=0,
                 max_value=64, value=0)
c4, c5 = st.columns([3, 1], vertical_alignment="bottom")
gpus = field(c4, "gpus", st.multiselect, "GPUs", catalog, default=defaults,
             help="Default: every GPU the installed measured tables cover (else "
                  f"{', '.join(FALLBACK_GPUS)}, priced by the roofline). $/GPU-hour from the catalog.")
batch = field(c5, "search", st.checkbox, "Search batch limits too", value=False,
              help="Also vary max_num_batched_tokens and max_num_seqs (`kvplan plan --search full`): "
                   "more candidates, longer.")
advanced = st.expander("Advanced")
quick = field(advanced, "quick", st.checkbox, "Quick runs (rough)", value=False,
              help=f"Screens of {QUICK_SCREEN_S:g} s of arrivals and a one-seed full search without "
                   "the long confirming run: minutes become seconds, the answer is rougher.")
workers = field(advanced, "workers", st.number_input, "Workers (0 = one per CPU, at most 4)", min_value=0,
                max_value=16, value=0, help="The plan is the same for any number.")
clients = field(advanced, "clients", st.number_input, "Plan for concurrent clients instead (0 = the target rate)",
                min_value=0, max_value=100000, value=0,
                help="As `kvplan plan --concurrency N`: N closed-loop clients, each sending its next request "
                     "when its last finishes; the target rate is then not used.")
prices_text = field(advanced, "prices", st.text_input, "$/GPU-hour overrides", value="",
                    help="As `--price`: gpu=usd, comma separated, e.g. h100-sxm=2.5,h200=3.2 (empty: the catalog's).")
pd_text = field(advanced, "pd", st.text_input, "Also try P/D groups", value="",
                help="As `--search pd=...`: prefill:decode instances per group, comma separated, e.g. 1:1,1:2 "
                     "(empty: collocated replicas only).")

slo: Optional[SLO] = common.slo_field(f, slo_text)
if not gpus:
    f.error("GPUs: choose at least one", "gpus")
prices: Optional[list[str]] = [p.strip() for p in prices_text.split(",") if p.strip()]
try:
    price_table(prices)
except common.KvplanError as exc:
    f.error(str(exc), "prices")
    prices = None
search: Optional[dict] = None
try:
    items = (["full"] if batch else []) + ([f"pd=off,{pd_text}"] if pd_text.strip() else [])
    search = parse_search(items) if items else None
except common.KvplanError as exc:
    f.error(str(exc), "pd")
    pd_text = None
run = st.button("Plan", type="primary", icon=":material/play_arrow:", key="pl.run")
if cfg is None or slo is None or not gpus or prices is None or pd_text is None:
    st.info("Fix the setting marked in red to plan.")
    st.stop()

params = {"cfg": cfg, "slo": slo.to_dict(), "target": target, "gpus": gpus, "max_gpus": max_gpus,
          "search": batch, "quick": quick, "clients": clients, "prices": prices, "pd": pd_text}
params_key = json.dumps(params, sort_keys=True, default=str)


def _plan(progress: common.Progress) -> dict:
    def hook(stage: str, done: int, total: int, best: Optional[dict]) -> None:
        lo, hi, words = STAGES.get(stage, (0.0, 1.0, stage))
        text = f"{words}: {done}/{total} candidates, {total - done} left"
        cost = best and (best.get("usd_per_hour") or best.get("estimate_usd_per_hour"))
        if cost:  # so there is a best
            text += f"; best so far {cast(dict, best)['label']}, ${cost:,.2f}/hour"
        progress(lo + (hi - lo) * done / max(total, 1), text)

    # cfg and slo are set: the page stops without them
    return plan(cast(dict, cfg), cast(SLO, slo), None if clients else target, concurrency=int(clients) or None, hardware=gpus,
                max_gpus=max_gpus or None, prices=prices, search=search, workers=int(workers), on_progress=hook,
                screen_s=QUICK_SCREEN_S if quick else 30.0, full_search=QUICK_FULL if quick else None).to_dict()


def _error_field(message: str) -> Optional[str]:
    """The page field a plan error belongs to (the sidebar's, by their dotted key, otherwise)."""
    for start, key in (("--hardware", "gpus"), ("--price", "prices"), ("--max-gpus", "max_gpus"),
                       ("plan: no candidate", "max_gpus"), ("--search pd", "pd"), ("--search", "search"),
                       ("--target-rate", "target"), ("--concurrency", "clients")):
        if message.startswith(start):
            return key
    return None


if run:
    try:
        common.cached("plan", params, _plan, "planning")
    except common.KvplanError as exc:
        f.error(str(exc), _error_field(str(exc)))
        st.stop()
    st.session_state["pl.shown"] = params_key
if st.session_state.get("pl.shown") != params_key:
    st.info("Press **Plan** to search (a default plan simulates for a few minutes; the result is kept "
            "for these inputs).")
    st.stop()
rec = common.cached("plan", params, _plan, "planning")  # a hit: the plan above
tables = {headers[0]: (headers, rows) for headers, rows in plan_section(rec).tables}


def _table(first_header: str) -> Optional[pd.DataFrame]:
    """One of the report's tables (``plan_section``: the CLI's words), as text."""
    if first_header not in tables:
        return None
    headers, rows = tables[first_header]
    return pd.DataFrame([[str(v) for v in row] for row in rows], columns=headers)


def open_in_what_if(row: dict) -> None:
    """Write ``row``'s deployment into the What-if page's fields and switch to it: this page's
    scenario, then the row's keys (a key with no field, or a value its field cannot show, goes
    to What-if's "Other settings"), one replica at its share of the target rate, the SLO's
    bounds as per-request goodput bounds."""
    state = st.session_state
    for key in SCENARIO_KEYS:
        if f"pl.{key}" in state:
            state[WHAT_IF_PREFIX + key] = state[f"pl.{key}"]
    extra = []
    for key, value in row["config"].items():
        if key in SCENARIO_KEYS and _field_takes(key, value):
            state[WHAT_IF_PREFIX + key] = value
        else:
            extra.append(f"{key}={json.dumps(value) if isinstance(value, bool) else value}")
    state[WHAT_IF_PREFIX + "parallel.num_replicas"] = 1
    if clients:  # a closed loop: this replica's share of the clients
        share = max(1, -(-int(clients) // max(1, row.get("replicas") or 1)))
        extra += ["workload.arrival.process=closed", f"workload.arrival.concurrency={share}"]
    else:
        rate = target / max(1, row.get("replicas") or 1)
        state[WHAT_IF_PREFIX + "workload.arrival.rate"] = min(10000.0, max(0.01, float(f"{rate:.3g}")))
    bounds = cast(SLO, slo)  # set: rows to open exist only after a plan
    state[WHAT_IF_PREFIX + "slo.ttft_ms"] = float(bounds.ttft_ms or 0.0)
    state[WHAT_IF_PREFIX + "slo.tpot_ms"] = float(bounds.tpot_ms or 0.0)
    typed = (state.get("pl.overrides") or "").rstrip()
    state[WHAT_IF_PREFIX + "overrides"] = "\n".join(filter(None, [typed] + extra))
    st.switch_page(WHAT_IF_PAGE)


def _field_takes(key: str, value: Any) -> bool:
    """Whether the sidebar's field for ``key`` can show ``value`` (its select boxes have a fixed
    list of options; see common.scenario_fields)."""
    options: dict[str, list[Any]] = {
        "parallel.tensor_parallel_size": [1, 2, 4, 8], "parallel.pipeline_parallel_size": [1, 2, 4, 8],
        "hardware": [h.name for h in list_hardware()]}
    return value in options.get(key, [value])


ranked, misses, lost = rec["ranked"], _table("deployment"), _table("not chosen")
if ranked:
    st.success(rec["headline"])
    best = ranked[0]
    cols = st.columns(4)
    cols[0].metric("GPUs", best["gpus"], help=f"{best['replicas']} replica(s) x {best['gpus_per_replica']} GPU(s)")
    cols[1].metric("$ per hour", f"${best['usd_per_hour']:,.2f}")
    per_m = best["usd_per_million_output_tokens"]
    cols[2].metric("$ per million output tokens", f"${per_m:.3g}" if per_m else "—")
    cols[3].metric("Simulations", rec["num_simulations"], help=f"{rec['wall_s']:.0f} s")
    st.subheader("Ranked deployments")
    st.dataframe(_table("#"), hide_index=True)
    st.caption("Keys of the top row (for `kvplan capacity` / `simulate --set`): `"
               + " ".join(best["overrides"]) + "`")
    for i, row in enumerate(ranked[:10]):
        c1, c2 = st.columns([5, 1], vertical_alignment="center")
        c1.markdown(f"**#{i + 1}** {row['label']}: {row['gpus']} GPU{'s' if row['gpus'] != 1 else ''}, "
                    f"${row['usd_per_hour']:,.2f}/hour")
        if c2.button("Open in What-if", key=f"pl.open.{i}", icon=":material/tune:"):
            open_in_what_if(row)
else:
    st.warning(rec["headline"], icon=":material/warning:")
    if misses is not None:
        st.subheader("Closest misses")
        st.dataframe(misses, hide_index=True)
if lost is not None:
    st.subheader("Not chosen, and why")
    st.dataframe(lost, hide_index=True)
figure = frontier_figure(rec) if rec.get("frontier") else None
if figure is not None:
    st.subheader("Pareto frontier")
    st.plotly_chart(figure, key="pl-frontier")
common.show_notes(rec.get("notes", []))
common.report_downloads([rec], "kvplan-plan", "kvplan plan report")
