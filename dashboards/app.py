"""kvplan's dashboard: ``kvplan dashboard`` (or ``streamlit run dashboards/app.py``).

One page per question a budget holder asks, the README's question first: which deployment
serves this load inside this SLO at the least cost (Plan, the default page), what does this
scenario do (What-if), is B better than A (A/B), how many GPUs (Capacity), which configurations
are worth considering (Sweep/Pareto), what routing, KV offload, disaggregation and autoscaling
do across replicas (Cluster), and how far to trust the simulator (Validation).
"""

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).resolve().parent / "views"

st.set_page_config(page_title="kvplan", page_icon=":material/memory:", layout="wide")
page = st.navigation([
    st.Page(PAGES / "plan.py", title="Plan", icon=":material/savings:", default=True),
    st.Page(PAGES / "what_if.py", title="What-if", icon=":material/tune:"),
    st.Page(PAGES / "ab.py", title="A/B", icon=":material/compare_arrows:"),
    st.Page(PAGES / "capacity.py", title="Capacity", icon=":material/speed:"),
    st.Page(PAGES / "sweep.py", title="Sweep / Pareto", icon=":material/scatter_plot:"),
    st.Page(PAGES / "cluster.py", title="Cluster", icon=":material/hub:"),
    st.Page(PAGES / "validation.py", title="Validation", icon=":material/fact_check:"),
])
page.run()
