"""The Cluster page's figures and tables, from the rows ``dashboards.cluster_runs`` makes.

Why here and not in ``analysis/figures.py``: these plots belong to the page only (the HTML
report draws each case as an ordinary simulation). They follow that module's rules: fixed
colours (the same series keeps its colour from one run to the next), latencies in the unit
their values read best in, log axes ticked 1-2-5 with their unit written on every tick
(``figures.log_ms_axis``), numbers in tables through ``analysis.formatting``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import pandas as pd  # type: ignore[import-untyped]  # no stubs: pandas-stubs is no dependency
import plotly.graph_objects as go  # type: ignore[import-untyped]  # plotly ships no type information
from plotly.subplots import make_subplots  # type: ignore[import-untyped]  # plotly ships no type information

from analysis.figures import format_ms, log_ms_axis
from analysis.formatting import FRACTION, MISSING, format_number, format_value
from sim.summary_table import latency_unit

_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=70, b=50), height=400)
#: mean and p99 of a latency, the same two colours on every panel.
STAT_COLORS = {"mean": "#90caf9", "p99": "#0d47a1"}
TIER_COLORS = {"gpu": "#2e7d32", "cpu": "#1565c0", "ssd": "#ef6c00"}
TIER_LABELS = {"gpu": "GPU prefix cache", "cpu": "CPU DRAM tier", "ssd": "SSD tier"}
HIT_COLOR = "#2e7d32"
FLEET_COLORS = {"autoscaled": "#1565c0", "fixed": "#757575"}
#: Collocated serving and the prefill/decode split, by the start of the case label.
DEPLOYMENT_COLORS = {"collocated": "#546e7a", "P/D": "#6a1b9a"}
ARRIVAL_COLOR = "#cfd8dc"
#: The case the planner picked is outlined in this colour.
HIGHLIGHT = "#212121"


# ---------------------------------------------------------------- figures

def deployment_color(label: str) -> str:
    """Collocated and P/D keep their colours in every plot."""
    return next((c for k, c in DEPLOYMENT_COLORS.items() if label.startswith(k)), "#1565c0")


def _outline(labels: Sequence[str], highlight: Optional[str]) -> dict:
    return dict(width=[3 if lab == highlight else 0 for lab in labels], color=HIGHLIGHT)


#: Above this ratio between the largest and smallest latency a panel's axis is logarithmic
#: (an overloaded case beside a healthy one); below it, linear from 0, so bar heights compare.
LOG_RATIO = 20.0


def _latency_bars(fig: go.Figure, rows: Sequence[dict], metric: str, col: int,
                  highlight: Optional[str] = None, legend: bool = True) -> None:
    """Mean and p99 of ``metric`` (``ttft`` or ``tpot``) per case: a linear axis in the unit the
    values read best in, or a log axis with the unit on every tick when they span decades."""
    labels = [r["label"] for r in rows]
    values = [r.get(f"{stat}_{metric}_ms") for stat in STAT_COLORS for r in rows]
    pos = [v for v in values if v is not None and v > 0]
    log = bool(pos) and max(pos) / min(pos) > LOG_RATIO
    unit, per, _ = ("ms", 1.0, 0) if log else latency_unit(values)
    for stat, color in STAT_COLORS.items():
        ys = [r.get(f"{stat}_{metric}_ms") for r in rows]
        fig.add_trace(go.Bar(x=labels, y=[None if y is None else y / per for y in ys], name=stat,
                             legendgroup=stat, showlegend=legend, offsetgroup=stat,
                             marker=dict(color=color, line=_outline(labels, highlight)),
                             customdata=[format_ms(y) if y is not None else MISSING for y in ys],
                             hovertemplate=f"%{{x}}: {stat} {metric.upper()} %{{customdata}}<extra></extra>"),
                      row=1, col=col)
    if log:
        log_ms_axis(fig, values, row=1, col=col)
        fig.update_yaxes(title_text=f"{metric.upper()} (log scale)", row=1, col=col)
    else:
        fig.update_yaxes(title_text=f"{metric.upper()} ({unit})", rangemode="tozero", row=1, col=col)


def router_comparison(rows: Sequence[dict], highlight: Optional[str] = None) -> go.Figure:
    """Hit rate and TTFT (mean, p99) per router, side by side; ``highlight`` outlined."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Prefix-cache hit rate", "TTFT: mean and p99"])
    labels = [r["label"] for r in rows]
    hits = [r.get("hit_rate") for r in rows]
    fig.add_trace(go.Bar(x=labels, y=hits, name="hit rate", showlegend=False,
                         marker=dict(color=HIT_COLOR, line=_outline(labels, highlight)),
                         text=[format_value(h, FRACTION) for h in hits], textposition="outside",
                         hovertemplate="%{x}: %{y:.1%} of prompt tokens hit<extra></extra>"), row=1, col=1)
    fig.update_yaxes(tickformat=".0%", range=[0, min(1.0, max([h or 0 for h in hits] + [0.05]) * 1.2)],
                     title_text="share of prompt tokens", row=1, col=1)
    _latency_bars(fig, rows, "ttft", 2, highlight)
    fig.update_layout(title="Routers side by side" + (f" (outlined: {highlight})" if highlight else ""),
                      barmode="group", **_LAYOUT)
    return fig


def tier_comparison(rows: Sequence[dict]) -> go.Figure:
    """Where each case's prefix hits came from (stacked per tier) and its TTFT."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Prefix hits by tier", "TTFT: mean and p99"])
    labels = [r["label"] for r in rows]
    base = [0.0] * len(rows)
    for tier, color in TIER_COLORS.items():
        ys = [r["tier_hit_rate"].get(tier) for r in rows]
        if all(y is None for y in ys):
            continue
        # Stacked by hand (``base``) in one offset group: the figure's bar mode is "group",
        # which the latency panel needs.
        fig.add_trace(go.Bar(x=labels, y=[y or 0.0 for y in ys], base=list(base), name=TIER_LABELS[tier],
                             marker_color=color, offsetgroup="hits", legendgroup=tier,
                             text=[format_value(y, FRACTION) if y else "" for y in ys], textposition="inside",
                             hovertemplate=f"%{{x}}: {TIER_LABELS[tier]} %{{y:.1%}}<extra></extra>"),
                      row=1, col=1)
        base = [b + (y or 0.0) for b, y in zip(base, ys)]
    fig.update_yaxes(tickformat=".0%", title_text="share of prompt tokens",
                     range=[0, min(1.0, max(base + [0.05]) * 1.15)], row=1, col=1)
    _latency_bars(fig, rows, "ttft", 2)
    fig.update_layout(title="KV offload tiers: where prefix hits come from, and TTFT", barmode="group",
                      uniformtext=dict(minsize=9, mode="hide"), **_LAYOUT)  # no label on a sliver
    return fig


def pd_comparison(rows: Sequence[dict], has_slo: bool) -> go.Figure:
    """Goodput per GPU (or output tokens/s per GPU without an SLO), TTFT and TPOT per case."""
    first = "Goodput per GPU (req/s)" if has_slo else "Output tokens/s per GPU"
    fig = make_subplots(rows=1, cols=3, subplot_titles=[first, "TTFT: mean and p99", "TPOT: mean and p99"])
    labels = [r["label"] for r in rows]
    key = "goodput_per_gpu" if has_slo else "output_throughput_per_gpu"
    ys = [r.get(key) for r in rows]
    fig.add_trace(go.Bar(x=labels, y=ys, showlegend=False, name=first,
                         marker_color=[deployment_color(lab) for lab in labels],
                         text=[format_number(y) for y in ys], textposition="outside",
                         hovertemplate="%{x}: %{y:,.3g}<extra></extra>"), row=1, col=1)
    fig.update_yaxes(rangemode="tozero", range=[0, max([y or 0 for y in ys] + [1e-9]) * 1.2], row=1, col=1)
    _latency_bars(fig, rows, "ttft", 2)
    _latency_bars(fig, rows, "tpot", 3, legend=False)
    fig.update_layout(title="Collocated against disaggregated prefill/decode, same GPUs",
                      barmode="group", **_LAYOUT)
    return fig


def goodput_curve(points: Sequence[dict], has_slo: bool) -> go.Figure:
    """Goodput per GPU against offered rate, one line per case, with the ceiling every case
    shares (all offered requests inside the SLO: rate / GPUs)."""
    key = "goodput_per_gpu" if has_slo else "output_throughput_per_gpu"
    fig = go.Figure()
    labels = list(dict.fromkeys(p["label"] for p in points))
    for label in labels:
        sel = [p for p in points if p["label"] == label]
        fig.add_trace(go.Scatter(x=[p["rate"] for p in sel], y=[p.get(key) for p in sel],
                                 mode="lines+markers", name=label, line=dict(color=deployment_color(label)),
                                 hovertemplate=f"{label} at %{{x:g}} req/s: %{{y:,.3g}}<extra></extra>"))
    if has_slo and points:
        rates = sorted({p["rate"] for p in points})
        gpus = points[0]["num_gpus"] or 1
        fig.add_trace(go.Scatter(x=rates, y=[r / gpus for r in rates], mode="lines",
                                 name="every request inside the SLO", line=dict(dash="dot", color="#757575")))
    fig.update_layout(title=("Goodput per GPU" if has_slo else "Output tokens/s per GPU") + " against offered load",
                      xaxis_title="offered rate (req/s, whole deployment)",
                      yaxis_title="req/s per GPU inside the SLO" if has_slo else "output tokens/s per GPU",
                      **_LAYOUT)
    fig.update_yaxes(rangemode="tozero")
    return fig


def fleet_timeline(result: dict) -> go.Figure:
    """Replicas over the (compressed) day: the autoscaled fleet's serving replicas with those
    still loading the model stacked on them, and the fixed fleet; the arrivals below them."""
    day_s = result["day_s"]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06)
    auto = result["runs"]["autoscaled"]["timeline"]
    fixed = result["runs"]["fixed"]["timeline"]
    hours = [24.0 * r["t_s"] / day_s for r in auto]
    interval = result["settings"]["policy"]["interval_s"]
    fig.add_trace(go.Scatter(x=hours, y=[r["active"] for r in auto], name="autoscaled: serving",
                             mode="lines", line=dict(color=FLEET_COLORS["autoscaled"], width=2, shape="hv"),
                             stackgroup="auto", hovertemplate="hour %{x:.1f}: %{y} serving<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=hours, y=[r["starting"] for r in auto], name="autoscaled: loading the model",
                             mode="lines", line=dict(color="#90caf9", width=0.5, shape="hv"), stackgroup="auto",
                             hovertemplate="hour %{x:.1f}: %{y} loading<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[24.0 * r["t_s"] / day_s for r in fixed], y=[r["active"] for r in fixed],
                             name=f"fixed fleet ({result['runs']['fixed']['totals']['peak_replicas']})",
                             mode="lines", line=dict(color=FLEET_COLORS["fixed"], dash="dash", width=2)), row=1, col=1)
    fig.add_trace(go.Bar(x=hours, y=[r["arrivals"] / interval for r in auto], name="arrivals",
                         marker_color=ARRIVAL_COLOR, showlegend=False,
                         hovertemplate="hour %{x:.1f}: %{y:.2f} req/s<extra></extra>"), row=2, col=1)
    top = max([r["active"] + r["starting"] for r in auto] + [r["active"] for r in fixed] + [1])
    fig.update_yaxes(title_text="replicas", range=[0, top * 1.15], dtick=max(1, round(top / 6)), row=1, col=1)
    fig.update_yaxes(title_text="arrivals (req/s)", rangemode="tozero", row=2, col=1)
    fig.update_xaxes(range=[0, 24], dtick=2)
    fig.update_xaxes(title_text=f"hour of the day ({format_number(day_s / 60)} simulated minutes)", row=2, col=1)
    fig.update_layout(title="Replicas over the day", bargap=0, **{**_LAYOUT, "height": 480})
    return fig


def slo_by_hour(result: dict) -> go.Figure:
    """SLO attainment per hour of the day, autoscaled against fixed."""
    fig = go.Figure()
    for key, label in (("autoscaled", "autoscaled"), ("fixed", "fixed fleet")):
        rows = result["hourly"][key][:24]
        fig.add_trace(go.Scatter(x=[k for k in range(len(rows))], y=[r["slo_attainment"] for r in rows],
                                 mode="lines+markers", name=label, line=dict(color=FLEET_COLORS[key]),
                                 hovertemplate=f"{label}, hour %{{x}}: %{{y:.1%}}<extra></extra>"))
    fig.update_layout(title="SLO attainment by hour (requests arriving in that hour)",
                      xaxis_title="hour of the day", yaxis_title="requests inside the SLO", **_LAYOUT)
    seen = [r["slo_attainment"] for key in ("autoscaled", "fixed") for r in result["hourly"][key][:24]
            if r["slo_attainment"] is not None]
    fig.update_yaxes(tickformat=".0%", range=[min([0.9] + [v - 0.02 for v in seen]), 1.01])
    fig.update_xaxes(range=[-0.5, 23.5], dtick=2)
    return fig


# ---------------------------------------------------------------- tables

def _pct(v: Optional[float]) -> str:
    return format_value(v, FRACTION)


def _latency_columns(rows: Sequence[dict], keys: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Latency columns, each in the unit its own values read best in: ``{"p99 TTFT (s)": [...]}``."""
    out = {}
    for key, name in keys:
        values = [r.get(key) for r in rows]
        unit, per, _ = latency_unit(values)
        out[f"{name} ({unit})"] = [MISSING if v is None else format_number(v / per) for v in values]
    return out


def _frame(first: dict[str, list[str]], lat: dict[str, list[str]], rest: dict[str, list[str]]) -> pd.DataFrame:
    return pd.DataFrame({**first, **lat, **rest})


def _done(rows: Sequence[dict]) -> list[str]:
    return [f"{r['completed']:,} / {r['rejected']:,}" for r in rows]


def routing_table(rows: Sequence[dict]) -> pd.DataFrame:
    """One row per router, every cell text; latencies in their own units."""
    lat = _latency_columns(rows, (("mean_ttft_ms", "mean TTFT"), ("p99_ttft_ms", "p99 TTFT"),
                                  ("mean_tpot_ms", "mean TPOT")))
    rest = {"busiest replica (x mean load)": [MISSING if r["busiest_share"] is None else
                                              f"{format_number(r['busiest_share'])}x" for r in rows],
            "requests per replica": [" / ".join(f"{c:,}" for c in r["replica_counts"]) for r in rows],
            "completed / rejected": _done(rows)}
    if any(r.get("affinity_kept") is not None for r in rows):
        rest["turns kept on their replica"] = [_pct(r.get("affinity_kept")) for r in rows]
    return _frame({"router": [r["label"] for r in rows], "hit rate": [_pct(r["hit_rate"]) for r in rows]},
                  lat, rest)


def offload_table(rows: Sequence[dict]) -> pd.DataFrame:
    """One row per tier set: hits per tier, TTFT, loads back."""
    lat = _latency_columns(rows, (("mean_ttft_ms", "mean TTFT"), ("p99_ttft_ms", "p99 TTFT")))

    def per_tier(r: dict, key: str) -> str:
        return " / ".join(format_number(r[key][t]) if t in r[key] else MISSING for t in ("cpu", "ssd"))

    rest = {"output tok/s": [format_number(r["output_throughput"]) for r in rows],
            "loaded GB cpu / ssd": [per_tier(r, "loaded_gb") for r in rows],
            "load s cpu / ssd": [per_tier(r, "load_s") for r in rows],
            "completed / rejected": _done(rows)}
    first = {"tiers": [r["label"] for r in rows], "hit rate": [_pct(r["hit_rate"]) for r in rows],
             "gpu / cpu / ssd hits": [" / ".join(_pct(r["tier_hit_rate"].get(t)) for t in ("gpu", "cpu", "ssd"))
                                      for r in rows]}
    return _frame(first, lat, rest)


def pd_table(rows: Sequence[dict]) -> pd.DataFrame:
    """Collocated and P/D: goodput and SLO first, then latencies, transfer, pool utilisation."""
    first = {"deployment": [r["label"] for r in rows], "GPUs": [str(r["num_gpus"]) for r in rows],
             "goodput per GPU (req/s)": [format_number(r.get("goodput_per_gpu")) for r in rows],
             "SLO attainment": [_pct(r.get("slo_attainment")) for r in rows]}
    lat = _latency_columns(rows, (("p99_ttft_ms", "p99 TTFT"), ("p99_tpot_ms", "p99 TPOT"),
                                  ("transfer_mean_ms", "KV transfer mean"), ("transfer_p99_ms", "KV transfer p99"),
                                  ("decode_api_server_ms", "decode API server mean"),
                                  ("median_ttft_ms", "median TTFT"), ("median_tpot_ms", "median TPOT")))
    rest = {"output tok/s per GPU": [format_number(r["output_throughput_per_gpu"]) for r in rows],
            "KV per request (GB)": [format_number(r.get("transfer_gb")) for r in rows],
            "prefill / decode busy": [f"{_pct(r['prefill_utilization'])} / {_pct(r['decode_utilization'])}"
                                      if "prefill_utilization" in r else MISSING for r in rows],
            "completed / rejected": _done(rows)}
    return _frame(first, lat, rest)


def fleet_table(rows: Sequence[dict]) -> pd.DataFrame:
    """Autoscaled and fixed fleet totals."""
    lat = _latency_columns(rows, (("p99_ttft_ms", "p99 TTFT"), ("p99_tpot_ms", "p99 TPOT")))
    first = {"fleet": [r["fleet"] for r in rows],
             "replicas mean / peak": [f"{format_number(r['mean_replicas'])} / {r['peak_replicas']}" for r in rows],
             "GPU-hours": [format_number(r["gpu_hours"]) for r in rows],
             "$": [format_number(r["usd"]) for r in rows],
             "SLO attainment": [_pct(r["slo_attainment"]) for r in rows]}
    rest = {"completed / rejected": _done(rows),
            "scale ups / downs": [f"{r['scale_ups']} / {r['scale_downs']}" for r in rows]}
    return _frame(first, lat, rest)


def hourly_table(result: dict) -> pd.DataFrame:
    """The day hour by hour: arrivals, replicas, SLO met by either fleet."""
    auto, fixed = result["hourly"]["autoscaled"][:24], result["hourly"]["fixed"][:24]
    return pd.DataFrame({
        "hour": [f"{k:02d}" for k in range(len(auto))],
        "arrivals": [f"{r['arrivals']:,}" for r in auto],
        "serving (mean)": [format_number(r["active"]) for r in auto],
        "loading (mean)": [format_number(r["starting"]) for r in auto],
        "peak": [str(r["peak"]) for r in auto],
        "SLO met": [_pct(r["slo_attainment"]) for r in auto],
        "SLO met, fixed": [_pct(f["slo_attainment"]) for f in fixed] + [MISSING] * (len(auto) - len(fixed)),
    })
