"""Validation: the simulator's predictions against real measurements, read from a
validation.json (format in docs/dashboard.md)."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import streamlit as st

from dashboards import common
from analysis import figures
from calibration.validation_file import FORMAT, load_validation, verdict

st.title("Validation")
st.caption("Predicted against real, per metric: how far to trust the simulator on this hardware and model.")

f = common.Fields("val.")
c1, c2 = st.columns(2)
with c1:
    path = f.add("path", st.text_input, "validation.json path", value="", config_key=False,
                 placeholder="runs/calibration/validation.json")
with c2:
    upload = f.add("upload", st.file_uploader, "... or upload one", type=["json"], config_key=False)

source = None
if upload is not None:
    source, where, name = upload.getvalue(), "upload", upload.name
elif path.strip():
    source, where, name = path.strip(), "path", path.strip()

if source is None:
    st.info(f"Load a validation.json ({FORMAT}): per metric the real value, the simulator's "
            f"prediction and the relative error. Make one with `kvplan validate --profile "
            f"calibration/profiles/smollm2-135m_fp32_cpu.json --rate 3 --num-requests 64 --out "
            f"runs/val` (the real engine on this machine against the simulator), or `kvplan "
            f"validate --real <a vLLM run folder>`. See docs/dashboard.md for the format.")
    st.code('{"format": "kvplan-validation/1",\n "source": {"profile": "...", "hardware": "a100-80gb"},\n'
            ' "metrics": [{"name": "p99_ttft_ms", "real": 120.0, "predicted": 131.0, "error": 0.092}]}',
            language="json")
    st.stop()

try:
    record = load_validation(source, name)
except common.KvplanError as exc:
    f.error(str(exc), where)
    st.stop()

level, sentence = verdict(record)
{"good": st.success, "fair": st.warning, "bad": st.error, "none": st.info}[level](sentence)
cols = st.columns(3)
cols[0].metric("Metrics", len(record["metrics"]))
cols[1].metric("Mean absolute error", f"{record['mape']:.1%}" if record["mape"] is not None else "-")
cols[2].metric("Largest error", f"{record['max_abs_error']:.1%}" if record["max_abs_error"] is not None else "-")
if record["source"]:
    with st.expander("Source of these numbers", expanded=False):
        st.table(pd.DataFrame([{"": k, "value": str(v)} for k, v in record["source"].items()
                               if k not in ("warnings", "stages", "notes")]))
stages = record["source"].get("stages")  # validate --real: per load stage, the overload verdict
if isinstance(stages, list) and stages:
    st.dataframe(pd.DataFrame(stages), hide_index=True)
notes = record["source"].get("notes")
for note in notes if isinstance(notes, list) else []:
    st.caption(str(note))
warnings = record["source"].get("warnings")  # e.g. the profile was measured on another machine
for warning in warnings if isinstance(warnings, list) else []:
    st.warning(str(warning))
st.dataframe(pd.DataFrame([{"metric": m["name"], "unit": m["unit"], "real": m["real"],
                            "predicted": m["predicted"], "error": m["error"]} for m in record["metrics"]]),
             hide_index=True, column_config={"error": st.column_config.NumberColumn(format="percent")})
t1, t2, t3 = st.tabs(["Predicted against real", "Error per metric", "Distributions"])
with t1:
    st.plotly_chart(figures.validation_scatter(record), key="val-scatter")
with t2:
    st.plotly_chart(figures.validation_errors(record), key="val-errors")
with t3:
    cdf = figures.validation_cdfs(record)
    if cdf is None:
        st.caption("This file has no per-request samples.")
    else:
        st.plotly_chart(cdf, key="val-cdf")
common.report_downloads([record], "kvplan-validation", "kvplan validation report")
