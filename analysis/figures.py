"""Plotly figures for the dashboard and the HTML report, built from result records (dicts), so
a saved JSON result draws exactly what the live dashboard drew.

Why one module: the dashboard and the report must show the same pictures; each function takes
a record and returns a ``plotly.graph_objects.Figure`` (plotly is the dashboard extra).
"""

from __future__ import annotations

import math
from typing import Optional

import plotly.graph_objects as go  # type: ignore[import-untyped]  # plotly ships no type information
from plotly.subplots import make_subplots  # type: ignore[import-untyped]  # plotly ships no type information

from analysis.formatting import format_diff, format_relative, with_unit
from sim.summary_table import latency_unit

KV_COLORS = {"token_states": "#2e7d32", "internal_fragmentation": "#f9a825",
             "external_fragmentation": "#ef6c00", "reserved": "#8e24aa", "free": "#cfd8dc"}
KV_LABELS = {"token_states": "token states", "internal_fragmentation": "internal fragmentation",
             "external_fragmentation": "external fragmentation", "reserved": "reserved (unused)",
             "free": "free"}
VERDICT_COLORS = {"B better": "#2e7d32", "B worse": "#c62828", "not significant": "#757575"}
#: Line colours by position, so the same label keeps its colour from one run to the next.
PALETTE = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a")
_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), height=380)


def latency_cdfs(samples: dict[str, dict], metrics=("ttft_ms", "tpot_ms", "e2el_ms"),
                 title: str = "Latency CDFs") -> go.Figure:
    """One panel per metric, one line per label: ``samples = {label: {"ttft_ms": [...]}}``.
    Each panel is drawn in the unit its largest value reads best in (ms, s or min), the same
    rule as the CLI's summary table."""
    names = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2el_ms": "E2E latency", "itl_ms": "ITL"}
    units = {m: latency_unit([max(d.get(m) or [0.0]) for d in samples.values()]) if m.endswith("_ms")
             else ("", 1.0, 2) for m in metrics}
    titles = [f"{names.get(m, m)} ({units[m][0]})" if units[m][0] else names.get(m, m) for m in metrics]
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=titles)
    for j, (label, data) in enumerate(samples.items()):
        for i, m in enumerate(metrics):
            per = units[m][1]
            xs = sorted(v / per for v in (data.get(m) or []))
            n = len(xs)
            fig.add_trace(go.Scatter(x=xs, y=[(k + 1) / n for k in range(n)], mode="lines",
                                     name=label, legendgroup=label, showlegend=i == 0,
                                     line=dict(color=PALETTE[j % len(PALETTE)])), row=1, col=i + 1)
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
    """Running requests as a wide pale band with the step's batch size as a thin dark line on
    top (the two coincide whenever every running request computes, which is most steps), and
    the queue in red; fixed colours so a rerun draws the same picture."""
    fig = go.Figure()
    t = timeline.get("time_s", [])
    for key, label, line in (
            ("num_running", "running", dict(color="#90caf9", width=5)),
            ("batch_size", "batch size (requests in the step)", dict(color="#0d47a1", width=1.5)),
            ("num_waiting", "waiting (queue)", dict(color="#c62828", width=2))):
        if key in timeline:
            fig.add_trace(go.Scatter(x=t, y=timeline[key], name=label, mode="lines", line=line))
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title="requests", **_LAYOUT)
    return fig


def utilization(timeline: dict, title: str = "GPU utilisation per step") -> go.Figure:
    """Model FLOPs utilisation and memory-bandwidth utilisation over time (each time bin's
    work over its busy time at the GPU's peak; see ``analysis.utilization``)."""
    fig = go.Figure()
    t = timeline.get("time_s", [])
    for key, label, color in (("mbu", "memory bandwidth utilisation (MBU)", "#ef6c00"),
                              ("mfu", "model FLOPs utilisation (MFU)", "#1565c0")):
        if key in timeline:
            fig.add_trace(go.Scatter(x=t, y=timeline[key], name=label, mode="lines",
                                     line=dict(color=color, width=2)))
    fig.update_layout(title=title, xaxis_title="time (s)", yaxis_title="of peak", **_LAYOUT)
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    return fig


MEMORY_PARTS = (("weights_gb", "weights", "#455a64"),
                ("activation_reserve_gb", "activations + runtime reserve", "#8e24aa"),
                ("kv_pool_gb", "KV cache pool", "#2e7d32"),
                ("unused_gb", "left free (gpu_memory_utilization)", "#cfd8dc"))


def memory_split(split: dict, title: str = "One GPU's memory") -> go.Figure:
    """A horizontal stacked bar of one GPU's memory: weights, activation reserve, KV pool and
    the share ``gpu_memory_utilization`` keeps back, in GB."""
    fig = go.Figure()
    for key, label, color in MEMORY_PARTS:
        v = split.get(key)
        if v is None:
            continue
        fig.add_trace(go.Bar(x=[v], y=["GPU"], orientation="h", name=f"{label}: {v:,.1f} GB",
                             marker_color=color, hovertemplate=f"{label}: %{{x:.1f}} GB<extra></extra>"))
    fig.update_layout(title=title, barmode="stack", xaxis_title="GB",
                      **{**_LAYOUT, "height": 220})
    fig.update_yaxes(showticklabels=False)
    return fig


def rate_latency(points: list[dict], slo: Optional[dict] = None, current_rate: Optional[float] = None,
                 title: str = "Latency against offered load") -> go.Figure:
    """p50/p99 TTFT and TPOT against request rate (steady-state window of each run), on log
    axes whose ticks carry their unit (``200 ms``, ``1.5 s``, ``2 min``)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["TTFT", "TPOT"])
    rates = [p["rate"] for p in points]
    for col, metric in ((1, "ttft"), (2, "tpot")):
        values = []
        for stat, dash, color in (("median", "dot", "#1565c0"), ("p99", "solid", "#ef6c00")):
            ys = [p.get(f"{stat}_{metric}_ms") for p in points]
            values += ys
            fig.add_trace(go.Scatter(x=rates, y=ys, mode="lines+markers", name=f"{stat}",
                                     legendgroup=stat, showlegend=col == 1,
                                     line=dict(dash=dash, color=color), marker=dict(color=color),
                                     hovertemplate=f"{stat} {metric.upper()} at %{{x:g}} req/s: "
                                                   "%{y:,.1f} ms<extra></extra>"), row=1, col=col)
        bound = (slo or {}).get(f"{metric}_ms")
        if bound:
            values.append(bound)
            _bound(fig, bound, "SLO bound", row=1, col=col, legend=col == 1)
        if current_rate:
            fig.add_vline(x=current_rate, line_dash="dot", line_color="#757575", row=1, col=col)
        log_ms_axis(fig, values, row=1, col=col)
    if current_rate:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"this scenario: {current_rate:g} req/s",
                                 line=dict(dash="dot", color="#757575")))
    fig.update_xaxes(title_text="request rate (req/s)")
    fig.update_layout(title=title, **_LAYOUT)
    return fig


def capacity_search(result: dict, title: str = "Capacity search") -> go.Figure:
    """Every simulation of the search: p99 TTFT and TPOT against rate, with the bracket and the
    SLO bounds. Colour says met or missed; the marker's shape says which seed (one legend entry
    per seed, which shows or hides that seed's points), since each seed brackets its own answer
    and the points only read as brackets seed by seed. Hover: seed, stage, rate, value."""
    evs = result["evaluations"]
    bounds = result["slo"]["bounds"]
    metrics = [m for m in ("ttft", "tpot", "itl", "e2el") if any(k.endswith(f"_{m}_ms") for k in bounds)] or ["ttft"]
    symbols = ("circle", "square", "diamond", "triangle-up", "triangle-down", "cross", "x", "star",
               "pentagon", "hexagon", "star-triangle-up", "hourglass")
    seeds = sorted({e["seed"] for e in evs})
    symbol = {seed: symbols[j % len(symbols)] for j, seed in enumerate(seeds)}
    colors = {True: "#2e7d32", False: "#c62828"}

    def hover(e: dict, key: str) -> str:
        value = e["metrics"].get(key)
        shown = "not measured" if value is None else f"{value:,.1f} ms"
        return (f"seed {e['seed']}, {e.get('stage', 'search')} run, {e['rate']:.3g} req/s, {key} {shown}: "
                f"{'met' if e['passed'] else 'missed'} the SLO")

    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[f"{m.upper()} (ms)" for m in metrics])
    for i, m in enumerate(metrics):
        key = next((k for k in bounds if k.endswith(f"_{m}_ms")), f"p99_{m}_ms")
        for seed in seeds:
            sel = [e for e in evs if e["seed"] == seed]
            fig.add_trace(go.Scatter(
                x=[e["rate"] for e in sel], y=[e["metrics"].get(key) for e in sel], mode="markers",
                marker=dict(color=[colors[bool(e["passed"])] for e in sel], symbol=symbol[seed], size=9,
                            line=dict(width=[2 if e.get("stage") == "confirm" else 0 for e in sel],
                                      color="#1565c0")),
                name=f"seed {seed}", legendgroup=f"seed {seed}", showlegend=False,
                text=[hover(e, key) for e in sel], hovertemplate="%{text}<extra></extra>"),
                row=1, col=i + 1)
        if key in bounds:
            _bound(fig, bounds[key], "SLO bound", row=1, col=i + 1, legend=i == 0)
        if result.get("planning_rate"):
            fig.add_vline(x=result["planning_rate"], line_dash="dot", line_color="#1565c0", row=1, col=i + 1)
    if result.get("planning_rate"):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name="capacity (planning rate)",
                                 line=dict(dash="dot", color="#1565c0")))
    for passed, name in ((True, "met SLO"), (False, "missed SLO")):   # the colour key
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(color=colors[passed], size=9)))
    for seed in seeds:   # the shape key; clicking an entry shows or hides that seed's points
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"seed {seed}", legendgroup=f"seed {seed}",
                                 marker=dict(color="#757575", symbol=symbol[seed], size=9)))
    fig.update_xaxes(title_text="request rate per replica (req/s)")
    fig.update_yaxes(type="log")
    fig.update_layout(title=title, **_LAYOUT)
    return fig


#: 1-2-5 steps per decade: enough ticks to read a log axis, few enough not to crowd it.
_STEPS = (1.0, 2.0, 5.0)


def format_ms(v: float) -> str:
    """A duration given in ms as a tick label: ``0.5 ms``, ``200 ms``, ``1.5 s``, ``2 min``."""
    if v >= 60_000:
        return f"{v / 60_000:g} min"
    if v >= 1000:
        return f"{v / 1000:g} s"
    return f"{v:g} ms"


def log_ms_axis(fig: go.Figure, values_ms, row: Optional[int] = None, col: Optional[int] = None) -> None:
    """Make a y axis of millisecond values logarithmic with 1-2-5 ticks labelled with their
    unit. Plotly's own log ticks label minor ticks as bare digits ("5" for 500 ms), which
    planners misread."""
    pos = [float(v) for v in values_ms if v is not None and v > 0 and math.isfinite(v)]
    kw = {} if row is None else {"row": row, "col": col}
    if not pos:
        fig.update_yaxes(type="log", **kw)
        return
    lo, hi = min(pos), max(pos)
    ticks = []
    for exp in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        ticks += [round(step * 10.0 ** exp, 12) for step in _STEPS]
    ticks = [t for t in ticks if lo / 2.5 <= t <= hi * 2.5]
    if len(ticks) > 12:  # more than four decades: decades only
        ticks = [t for t in ticks if math.isclose(t / 10 ** math.floor(math.log10(t)), 1.0)]
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[format_ms(t) for t in ticks], **kw)


def _bound(fig: go.Figure, y: float, name: str, row: int, col: int, legend: bool) -> None:
    """A horizontal SLO line. No annotation: on log axes plotly reads annotation positions
    as exponents, which stretches the axis to 1e50."""
    fig.add_hline(y=y, line_dash="dash", line_color="#c62828", row=row, col=col)
    if legend:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=name,
                                 line=dict(dash="dash", color="#c62828")))


#: The forest plot's axis stops below the first jump of more than FOREST_GAP times between
#: effect sizes (one effect an order of magnitude above the rest), and never inside
#: +-FOREST_FLOOR % of A: within that band every effect is readable anyway.
FOREST_GAP = 5.0
FOREST_FLOOR = 5.0


def ab_forest(result: dict, title: str = "B - A, relative to A (with confidence interval)") -> go.Figure:
    """B - A in % of A per metric, coloured by verdict, with a legend of the verdicts.

    When one effect dwarfs the rest (a +1,670% TTFT beside a -8% TPOT) the axis stops at the
    smaller effects (``forest_limit``) and the large one is drawn at the edge as an arrow
    labelled with its true value, so that the small effects stay readable.
    """
    rows = [r for r in result["rows"] if _finite(r["a"]) and r["a"] != 0 and _finite(r["diff"])]
    effects = {r["metric"]: _relative_effect(r) for r in rows}
    limit = forest_limit([abs(v) for eff in effects.values() for v in eff])
    fig = go.Figure()
    for verdict, color in VERDICT_COLORS.items():
        fig.add_trace(_forest_trace([r for r in rows if r["verdict"] == verdict], effects, limit,
                                    verdict, color))
    for r in rows:
        if limit is not None and abs(effects[r["metric"]][0]) > limit:
            _mark_clipped(fig, r["label"], effects[r["metric"]][0], limit, VERDICT_COLORS[r["verdict"]])
    fig.add_vline(x=0, line_color="#424242")
    axis = "difference B - A (% of A)"
    if limit is not None:
        axis += f"; axis cut at ±{limit:.3g}%: ▶ ◀ mark a larger effect, its value beside it"
    fig.update_layout(title=title, xaxis_title=axis, legend_title_text="verdict",
                      **{**_LAYOUT, "height": max(220, 80 + 34 * len(rows))})
    fig.update_xaxes(range=_forest_range(effects.values(), limit))
    fig.update_yaxes(categoryorder="array", categoryarray=[r["label"] for r in rows], autorange="reversed")
    return fig


def forest_limit(magnitudes: list[float], gap: float = FOREST_GAP, floor: float = FOREST_FLOOR) -> Optional[float]:
    """Where the forest plot's axis stops (in % of A), or None when every effect fits.

    ``magnitudes`` are the absolute estimates and interval ends. Sorted, the axis stops just
    above the last one before a jump of more than ``gap`` times, so a few huge effects do not
    squeeze the others into a dot at zero; effects below ``floor`` never count as a jump.
    """
    ms = sorted(m for m in magnitudes if _finite(m))
    for small, big in zip(ms, ms[1:]):
        if big > gap * max(small, floor):
            return 1.1 * max(small, floor)
    return None


def _relative_effect(row: dict) -> tuple[float, float, float]:
    """(estimate, interval low, interval high) of B - A in % of |A|."""
    scale = abs(row["a"]) / 100
    return row["diff"] / scale, row["ci_low"] / scale, row["ci_high"] / scale


def _forest_trace(rows: list[dict], effects: dict, limit: Optional[float], verdict: str,
                  color: str) -> go.Scatter:
    """One verdict's points; a verdict with none still gets its legend entry (a stable key)."""
    if not rows:
        return go.Scatter(x=[None], y=[None], mode="markers", name=verdict,
                          marker=dict(color=color, size=10))
    est = [_clip(effects[r["metric"]][0], limit) for r in rows]
    lo = [_clip(effects[r["metric"]][1], limit) for r in rows]
    hi = [_clip(effects[r["metric"]][2], limit) for r in rows]
    symbols = [_clip_symbol(effects[r["metric"]][0], limit) for r in rows]
    return go.Scatter(
        x=est, y=[r["label"] for r in rows], mode="markers", name=verdict,
        marker=dict(color=color, size=[10 if s == "circle" else 14 for s in symbols], symbol=symbols),
        error_x=dict(type="data", symmetric=False, array=[max(0.0, h - e) for h, e in zip(hi, est)],
                     arrayminus=[max(0.0, e - low) for e, low in zip(est, lo)], color=color),
        customdata=[_forest_hover(r, effects[r["metric"]]) for r in rows],
        hovertemplate="%{y}: %{customdata[0]} %{customdata[1]}<br>B - A = %{customdata[2]}"
                      "<br>%{fullData.name}<extra></extra>")


def _forest_hover(row: dict, effect: tuple[float, float, float]) -> list[str]:
    est, lo, hi = (v / 100 for v in effect)
    diff = with_unit(format_diff(row["diff"], row["unit"]), row["unit"])
    return [format_relative(est), f"[{format_relative(lo)}, {format_relative(hi)}]", diff]


def _mark_clipped(fig: go.Figure, label: str, value: float, limit: float, color: str) -> None:
    """The true value of an effect drawn at the axis edge, written inside the plot beside it."""
    right = value > 0
    fig.add_annotation(x=limit if right else -limit, y=label, text=format_relative(value / 100),
                       showarrow=False, xanchor="right" if right else "left", xshift=-12 if right else 12,
                       font=dict(color=color), bgcolor="rgba(255,255,255,0.85)")


def _clip(value: float, limit: Optional[float]) -> float:
    return value if limit is None or not _finite(value) else max(-limit, min(limit, value))


def _clip_symbol(value: float, limit: Optional[float]) -> str:
    if limit is None or abs(value) <= limit:
        return "circle"
    return "triangle-right" if value > 0 else "triangle-left"


def _forest_range(effects, limit: Optional[float]) -> list[float]:
    """The x range: every (clipped) estimate and interval end and 0, padded by 8%."""
    xs = [_clip(v, limit) for eff in effects for v in eff if _finite(v)] + [0.0]
    low, high = min(xs), max(xs)
    pad = 0.08 * (high - low) or 1.0
    return [low - pad, high + pad]


def _finite(value) -> bool:
    """A real number (not None, NaN or infinite)."""
    return isinstance(value, (int, float)) and float("-inf") < value < float("inf")


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
