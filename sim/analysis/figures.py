"""Plotly figures for the dashboard and the HTML report, built from result records (dicts), so
a saved JSON result draws exactly what the live dashboard drew.

Why one module: the dashboard and the report must show the same pictures; each function takes
a record and returns a ``plotly.graph_objects.Figure`` (plotly is the dashboard extra).
"""

from __future__ import annotations

from typing import Optional

import plotly.graph_objects as go
from plotly.subplots import make_subplots

KV_COLORS = {"token_states": "#2e7d32", "internal_fragmentation": "#f9a825",
             "external_fragmentation": "#ef6c00", "reserved": "#8e24aa", "free": "#cfd8dc"}
KV_LABELS = {"token_states": "token states", "internal_fragmentation": "internal fragmentation",
             "external_fragmentation": "external fragmentation", "reserved": "reserved (unused)",
             "free": "free"}
VERDICT_COLORS = {"B better": "#2e7d32", "B worse": "#c62828", "not significant": "#757575"}
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), height=380)


def latency_cdfs(samples: dict[str, dict], metrics=("ttft_ms", "tpot_ms", "e2el_ms"),
                 title: str = "Latency CDFs") -> go.Figure:
    """One panel per metric, one line per label: ``samples = {label: {"ttft_ms": [...]}}``."""
    names = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "e2el_ms": "E2E latency (ms)",
             "itl_ms": "ITL (ms)"}
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[names.get(m, m) for m in metrics])
    palette = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a"]
    for j, (label, data) in enumerate(samples.items()):
        for i, m in enumerate(metrics):
            xs = sorted(data.get(m) or [])
            n = len(xs)
            fig.add_trace(go.Scatter(x=xs, y=[(k + 1) / n for k in range(n)], mode="lines",
                                     name=label, legendgroup=label, showlegend=i == 0,
                                     line=dict(color=palette[j % len(palette)])), row=1, col=i + 1)
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1, range=[0, 1])
    fig.update_layout(title=title, **_LAYOUT)
    return fig


def kv_memory(timeline: dict, title: str = "KV memory over time") -> go.Figure:
    """Stacked area: what the KV pool holds at each moment (GB)."""
    fig = go.Figure()
    t = timeline.get("time_s", [])
    for part, color in KV_COLORS.items():
        ys = timeline.get(f"kv_{part}_gb")
        if ys is None:
            continue
        fig.add_trace(go.Scatter(x=t, y=ys, name=KV_LABELS[part], stackgroup="kv", mode="lines",
                                 line=dict(width=0.5, color=color)))
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title="KV cache (GB)", **_LAYOUT)
    return fig


def batch_and_queue(timeline: dict, title: str = "Batch size and queue length") -> go.Figure:
    fig = go.Figure()
    t = timeline.get("time_s", [])
    for key, label in (("batch_size", "batch size (requests in the step)"),
                       ("num_running", "running"), ("num_waiting", "waiting (queue)")):
        if key in timeline:
            fig.add_trace(go.Scatter(x=t, y=timeline[key], name=label, mode="lines"))
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title="requests", **_LAYOUT)
    return fig


def rate_latency(points: list[dict], slo: Optional[dict] = None, current_rate: Optional[float] = None,
                 title: str = "Latency against offered load") -> go.Figure:
    """p50/p99 TTFT and TPOT against request rate (steady-state window of each run)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT (ms)", "TPOT (ms)"])
    rates = [p["rate"] for p in points]
    for col, metric in ((1, "ttft"), (2, "tpot")):
        for stat, dash in (("median", "dot"), ("p99", "solid")):
            fig.add_trace(go.Scatter(x=rates, y=[p.get(f"{stat}_{metric}_ms") for p in points],
                                     mode="lines+markers", name=f"{stat} {metric.upper()}",
                                     line=dict(dash=dash)), row=1, col=col)
        bound = (slo or {}).get(f"{metric}_ms")
        if bound:
            _bound(fig, bound, "SLO bound", row=1, col=col, legend=col == 1)
        if current_rate:
            fig.add_vline(x=current_rate, line_dash="dot", line_color="#757575", row=1, col=col)
    fig.update_xaxes(title_text="request rate (req/s)")
    fig.update_yaxes(type="log")
    fig.update_layout(title=title, **_LAYOUT)
    return fig


def capacity_search(result: dict, title: str = "Capacity search") -> go.Figure:
    """Every simulation of the search: p99 TTFT and TPOT against rate, pass or fail, with
    the bracket and the SLO bounds."""
    evs = result["evaluations"]
    bounds = result["slo"]["bounds"]
    metrics = [m for m in ("ttft", "tpot", "itl", "e2el") if any(k.endswith(f"_{m}_ms") for k in bounds)] or ["ttft"]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[f"{m.upper()} (ms)" for m in metrics])
    for i, m in enumerate(metrics):
        key = next((k for k in bounds if k.endswith(f"_{m}_ms")), f"p99_{m}_ms")
        for passed, color, name in ((True, "#2e7d32", "met SLO"), (False, "#c62828", "missed SLO")):
            sel = [e for e in evs if e["passed"] is passed]
            fig.add_trace(go.Scatter(
                x=[e["rate"] for e in sel], y=[e["metrics"].get(key) for e in sel], mode="markers",
                marker=dict(color=color, size=9), name=name, legendgroup=name, showlegend=i == 0,
                text=[f"seed {e['seed']}" for e in sel]), row=1, col=i + 1)
        if key in bounds:
            _bound(fig, bounds[key], "SLO bound", row=1, col=i + 1, legend=i == 0)
        if result.get("planning_rate"):
            fig.add_vline(x=result["planning_rate"], line_dash="dot", line_color="#1565c0", row=1, col=i + 1)
    if result.get("planning_rate"):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="capacity (planning rate)",
                                 line=dict(dash="dot", color="#1565c0")))
    fig.update_xaxes(title_text="request rate per replica (req/s)")
    fig.update_yaxes(type="log")
    fig.update_layout(title=title, **_LAYOUT)
    return fig


def _bound(fig: go.Figure, y: float, name: str, row: int, col: int, legend: bool) -> None:
    """A horizontal SLO line. No annotation: on log axes plotly reads annotation positions
    as exponents, which stretches the axis to 1e50."""
    fig.add_hline(y=y, line_dash="dash", line_color="#c62828", row=row, col=col)
    if legend:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name,
                                 line=dict(dash="dash", color="#c62828")))


def ab_forest(result: dict, title: str = "B - A, relative to A (with confidence interval)") -> go.Figure:
    rows = [r for r in result["rows"] if r["a"]]
    labels = [r["label"] for r in rows]
    rel = [r["diff"] / r["a"] * 100 for r in rows]
    lo = [(r["diff"] - r["ci_low"]) / abs(r["a"]) * 100 for r in rows]
    hi = [(r["ci_high"] - r["diff"]) / abs(r["a"]) * 100 for r in rows]
    colors = [VERDICT_COLORS[r["verdict"]] for r in rows]
    fig = go.Figure(go.Scatter(
        x=rel, y=labels, mode="markers", marker=dict(color=colors, size=10),
        error_x=dict(type="data", symmetric=False, array=hi, arrayminus=lo),
        text=[r["verdict"] for r in rows], hovertemplate="%{y}: %{x:.1f}% (%{text})<extra></extra>"))
    fig.add_vline(x=0, line_color="#424242")
    fig.update_layout(title=title, xaxis_title="difference (% of A)", **{**_LAYOUT, "height": 60 + 34 * len(rows)})
    fig.update_yaxes(autorange="reversed")
    return fig


def pareto(result: dict, title: str = "Throughput per GPU against speed per user") -> go.Figure:
    rows = [r for r in result["rows"] if r.get(result["x"]) is not None and r.get(result["y"]) is not None]
    x, y = result["x"], result["y"]
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r[x])
    rest = [r for r in rows if not r["pareto"]]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[r[x] for r in rest], y=[r[y] for r in rest], mode="markers",
                             name="dominated", marker=dict(color="#90a4ae", size=9),
                             text=[r["label"] for r in rest]))
    fig.add_trace(go.Scatter(x=[r[x] for r in front], y=[r[y] for r in front], mode="lines+markers",
                             name="Pareto frontier", marker=dict(color="#1565c0", size=11),
                             text=[r["label"] for r in front]))
    fig.update_traces(hovertemplate="%{text}<br>%{x:.0f} tok/s/GPU, %{y:.1f} tok/s/user<extra></extra>")
    fig.update_layout(title=title, xaxis_title="output tokens/s per GPU",
                      yaxis_title="output tokens/s per user (1000 / mean TPOT)", **_LAYOUT)
    return fig


#: Unit families a validation's metrics are drawn in, one panel each (latencies, rates, counts):
#: milliseconds beside steps on one log-log plot hide both.
UNIT_FAMILIES = (("latency (ms)", ("ms",)), ("throughput", ("tok/s", "req/s")),
                 ("time (s)", ("s",)), ("counts", ("",)))


def validation_scatter(record: dict, title: str = "Predicted against real") -> go.Figure:
    panels = []
    for name, units in UNIT_FAMILIES:
        ms = [m for m in record["metrics"] if (m.get("unit") or "") in units]
        if ms:
            panels.append((name, ms))
    known = {u for _, units in UNIT_FAMILIES for u in units}
    other = [m for m in record["metrics"] if (m.get("unit") or "") not in known]
    if other:
        panels.append(("other", other))
    fig = make_subplots(rows=1, cols=max(len(panels), 1), subplot_titles=[p[0] for p in panels])
    for col, (name, ms) in enumerate(panels, 1):
        pos = [v for m in ms for v in (m["real"], m["predicted"]) if v > 0]
        top = max(pos + [1e-9])
        low = min(pos + [top / 1e3])
        fig.add_trace(go.Scatter(x=[low, top], y=[low, top], mode="lines", name="predicted = real",
                                 line=dict(dash="dash", color="#757575"), showlegend=col == 1),
                      row=1, col=col)
        fig.add_trace(go.Scatter(
            x=[m["real"] for m in ms], y=[m["predicted"] for m in ms], mode="markers",
            text=[m["name"] for m in ms], name=name, marker=dict(size=9),
            customdata=[(m["error"] or 0) * 100 for m in ms],
            hovertemplate="%{text}: real %{x:.3g}, predicted %{y:.3g} (%{customdata:+.1f}%)<extra></extra>"),
            row=1, col=col)
        fig.update_xaxes(type="log", title_text="real", row=1, col=col)
        fig.update_yaxes(type="log", title_text="predicted" if col == 1 else None, row=1, col=col)
    fig.update_layout(title=title, **_LAYOUT)
    return fig


def validation_errors(record: dict, title: str = "Relative error per metric") -> go.Figure:
    ms = [m for m in record["metrics"] if m["error"] is not None]
    fig = go.Figure(go.Bar(x=[m["name"] for m in ms], y=[m["error"] * 100 for m in ms],
                           marker_color=["#c62828" if abs(m["error"]) > 0.1 else "#2e7d32" for m in ms]))
    fig.update_layout(title=title, yaxis_title="(predicted - real) / real (%)", **_LAYOUT)
    return fig


def validation_cdfs(record: dict) -> Optional[go.Figure]:
    samples = record.get("samples") or {}
    if not samples:
        return None
    per_label = {"real": {m: v["real"] for m, v in samples.items()},
                 "predicted": {m: v["predicted"] for m, v in samples.items()}}
    return latency_cdfs(per_label, metrics=tuple(samples), title="Per-request distributions")
