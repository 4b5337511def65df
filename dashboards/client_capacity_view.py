"""The Capacity page's client mode: the most closed-loop clients one replica serves inside
the SLO (``analysis.client_capacity``, as ``kvplan capacity --clients``), and the replicas a
target number of clients then needs. Its own module so that the rate page stays one job."""

from __future__ import annotations

from typing import Any, Optional

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from analysis.client_capacity import ClientCapacityResult, find_client_capacity
from dashboards import common


def client_capacity_page(f: Any, cfg: Optional[dict], slo_text: str, c2: Any, c3: Any) -> None:
    """Inputs beside the SLO, the search (cached per inputs), then the answer."""
    with c2:
        target = f.add("target_clients", st.number_input, "Target clients", min_value=0, value=0, step=8,
                       config_key=False, help="0: none. Otherwise the fleet is simulated with all of them.")
    with c3:
        seeds = f.add("client_seeds", st.number_input, "Seeds", min_value=1, max_value=8, value=2,
                      config_key=False)
    cap = f.add("max_clients", st.number_input, "Most clients searched", min_value=1, max_value=65536,
                value=1024, config_key=False,
                help="A TPOT-only SLO may never be missed: clients past the running-request limit only wait.")
    slo = common.slo_field(f, slo_text)
    if cfg is None or slo is None:
        st.info("Fix the setting marked in red to search.")
        return
    params = {"cfg": cfg, "slo": slo.to_dict(), "seeds": int(seeds), "cap": int(cap), "target": int(target)}

    def search(progress: common.Progress) -> ClientCapacityResult:
        expected = 12 + 8 * int(seeds)   # a rough count, for the bar

        def hook(run, n):
            progress(min(n / expected, 0.99), f"simulation {n} ({run.stage}): {run.clients} clients x "
                     f"{run.replicas}, seed {run.seed}, {'met' if run.passed else 'missed'} the SLO")
        return find_client_capacity(cfg, slo, seeds=int(seeds), max_clients=int(cap),
                                    target_clients=int(target) or None, on_run=hook)

    try:
        result = common.cached("capacity_clients", params, search, "capacity search (clients)")
    except common.KvplanError as exc:
        f.error(str(exc))
        return
    (st.success if result.planning_clients > 0 else st.error)(result.headline())
    _tiles(result)
    st.dataframe(_seed_table(result), hide_index=True)
    if result.at_planning_clients:
        st.caption("At the planning count (mean over seeds)")
        st.dataframe(pd.DataFrame([{"statistic": k, "value": f"{v:,.2f}"}
                                   for k, v in result.at_planning_clients.items()]), hide_index=True)
    for note in result.notes:
        st.caption(note)


def _tiles(result: ClientCapacityResult) -> None:
    cols = st.columns(5)
    if result.planning_clients <= 0:
        cols[0].metric("Clients per replica", "none meet the SLO")
    else:
        cols[0].metric("Clients per replica", str(result.planning_clients),
                       help=f"every seed met the SLO with this many; search estimate "
                            f"{result.capacity_clients:.1f} ({result.ci_low:.1f}-{result.ci_high:.1f})")
        cols[1].metric("Throughput there (req/s)", f"{result.at_planning_clients.get('request_throughput', 0):.2f}")
        cols[2].metric("Output tok/s per GPU", f"{result.output_tokens_per_s_per_gpu or 0:,.0f}")
    if result.target_clients and result.replicas:
        cols[3].metric(f"Replicas for {result.target_clients} clients", str(result.replicas),
                       help=f"{result.gpus} GPUs, ${result.usd_per_hour:,.2f}/hour; {result.fleet_note}")
    cols[4].metric("Simulations", result.num_simulations)


def _seed_table(result: ClientCapacityResult) -> pd.DataFrame:
    return pd.DataFrame([{"Seed": str(s.seed), "Most clients meeting the SLO": str(s.low),
                          "Fewest clients missing it": "—" if s.high is None else str(s.high),
                          "Note": s.note or "—"} for s in result.searches])
