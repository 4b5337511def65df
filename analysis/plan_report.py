"""How a plan reads (``kvplan plan``, ``kvplan report plan.json``): the ranked deployments, why
the runners-up lost, the closest misses when nothing meets the SLO, and the Pareto frontier."""

from __future__ import annotations

from typing import Any, Optional

from analysis.report import Section

RANKED_HEADERS = ["#", "deployment", "GPUs", "replicas", "$/hour", "$/M output tok", "goodput/GPU req/s",
                  "p99 TTFT ms", "p99 TPOT ms", "planning rate req/s (search CI)", "pricing (known error)"]


def plan_section(rec: dict) -> Section:
    sec = Section("Plan")
    sec.text.append(rec["headline"])
    sec.text.append("The scenario above is the base the search varies: each candidate replaces its hardware, "
                    "parallelism, quantisation and the knobs searched.")
    if rec.get("ranked"):
        rows = [[i + 1, r["label"], r["gpus"], r["replicas"], _money(r["usd_per_hour"]),
                 _small(r["usd_per_million_output_tokens"]), _f(r["goodput_per_gpu"], 2),
                 _f(r["p99_ttft_ms"], 0), _f(r["p99_tpot_ms"], 1), _capacity(r), _pricing(r)]
                for i, r in enumerate(rec["ranked"])]
        sec.tables.append((RANKED_HEADERS, rows))
        sec.text.append("Keys of the top row (for kvplan capacity / simulate --set): "
                        + " ".join(rec["ranked"][0]["overrides"]))
    elif rec.get("closest_misses"):
        sec.tables.append((["deployment", "best rate met req/s", "what it missed", "pricing"],
                           [[r["label"], _f(r["estimate_rate"] or r["planning_rate"], 2),
                             "; ".join(r["misses"]) or r["reason"], _pricing(r)] for r in rec["closest_misses"]]))
    # Simulated losers first (their estimates say the most), pruned last: a wide search prunes
    # most of its candidates, and the 40 rows shown should not be only those.
    order = {"screened": 0, "infeasible": 1, "does_not_fit": 2, "pruned": 3}
    lost = sorted((r for r in rec["rows"] if r["status"] in order), key=lambda r: order[r["status"]])
    if lost:
        sec.tables.append((["not chosen", "why"], [[r["label"], _why(r)] for r in lost[:40]]))
        if len(lost) > 40:
            sec.notes.append(f"{len(lost) - 40} more candidates not chosen are in the JSON.")
    if rec.get("frontier"):
        sec.tables.append((["Pareto frontier: deployment", "output tok/s per GPU", "tok/s per user"],
                           [[f["label"], _f(f["output_tokens_per_s_per_gpu"], 0), _f(f["tokens_per_s_per_user"], 1)]
                            for f in rec["frontier"]]))
        sec.figures.append(frontier_figure(rec))
    sec.notes += list(rec.get("notes", []))
    sec.notes.append("Rows priced by the roofline or a profile carry that source's error, not the measured "
                     "tables'; goodput and latencies are at the target rate's fleet or, screened only, at "
                     "the screen's rate.")
    return sec


def _why(r: dict) -> str:
    if r["status"] == "screened":
        est = r.get("estimate_usd_per_hour")
        return (f"screened at {_f(r['estimate_rate'], 2)} req/s per replica: about {_money(est)}/hour"
                if est is not None else r["reason"] or "no rate met the SLO in the screen")
    return r["reason"]


def _capacity(r: dict) -> str:
    ci = r.get("ci")
    rate = r.get("planning_rate")
    if rate is None:
        return "-"
    return f"{rate:.2f} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f"{rate:.2f}"


def _pricing(r: dict) -> str:
    p = r.get("pricing") or {}
    return f"{p.get('source', '-')}" + (f" ({known_error_words(p.get('known_error'))})" if p.get("known_error") else "")


def known_error_words(known: Any) -> str:
    """The pricer's known error in a few words: the measured tables' interpolation error on the
    GPU (GEMM / decode attention), and against real runs where there are some; a profile's
    held-out error; the roofline's operator error range where its constants were fitted."""
    if not isinstance(known, dict):
        return str(known)
    parts = []
    if isinstance(known.get("gemm_mean_abs_pct"), (int, float)):
        parts.append(f"GEMM {known['gemm_mean_abs_pct']:.0f}%, attention "
                     f"{known.get('decode_attention_mean_abs_pct', 0):.0f}% interpolation")
    real = known.get("step_vs_real")
    if isinstance(real, dict) and isinstance(real.get("mean_e2el_mape"), (int, float)):
        parts.append(f"real runs E2E {100 * real['mean_e2el_mape']:.0f}% TTFT {100 * real.get('mean_ttft_mape', 0):.0f}%")
    if isinstance(known.get("heldout_mape"), (int, float)):
        parts.append(f"held out {100 * known['heldout_mape']:.0f}%")
    ops = known.get("operator_mape_pct")
    if isinstance(ops, dict) and ops:  # the roofline's constants against measured operators
        borrowed = "" if "note" not in known else ", another GPU's"
        parts.append(f"operators {min(ops.values()):.0f}-{max(ops.values()):.0f}% on "
                     f"{known.get('measured_on', '?')}{borrowed}")
    return "; ".join(parts) or "see the JSON"


def frontier_figure(rec: dict) -> Any:
    """Output tok/s per GPU against tok/s per user: every simulated candidate, the frontier
    drawn through (None without plotly). The report and the dashboard's Plan page draw it."""
    try:
        import plotly.graph_objects as go  # type: ignore[import-untyped]  # plotly ships no type information
    except ImportError:
        return None
    pts = [r for r in rec["rows"] if r.get("output_tokens_per_s_per_gpu") and r.get("tokens_per_s_per_user")]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[r["tokens_per_s_per_user"] for r in pts], y=[r["output_tokens_per_s_per_gpu"] for r in pts],
                             mode="markers", name="candidates", text=[r["label"] for r in pts]))
    front = rec["frontier"]
    fig.add_trace(go.Scatter(x=[f["tokens_per_s_per_user"] for f in front], y=[f["output_tokens_per_s_per_gpu"] for f in front],
                             mode="lines+markers", name="Pareto frontier", text=[f["label"] for f in front]))
    fig.update_layout(xaxis_title="tokens/s per user", yaxis_title="output tokens/s per GPU", height=420)
    return fig


def _money(v: Optional[float]) -> str:
    return "-" if v is None else f"${v:,.2f}"


def _small(v: Optional[float]) -> str:
    return "-" if v is None else f"${v:.3g}"


def _f(v: Optional[float], digits: int) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"
