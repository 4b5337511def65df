"""Run statistics over a run's steady-state window, and how long a run must be to have one.

Why: a short run under-states load. A serving system fills up over about one end-to-end
latency (the batch grows until as many requests finish as arrive), so 300 requests arriving in
ten seconds never see the queue a real deployment sees at that rate; on the default scenario
such runs report twice the capacity that a ten-minute run sustains. Capacity and sweep runs
are therefore sized by the time their arrivals span (``duration_s`` x rate requests), judged
on the requests that arrive after a warm-up, and checked to span several mean end-to-end
latencies.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from sim.metrics import LATENCY_METRICS, meets_slo, request_latencies
from sim.policies.request import Request, RequestState

#: Arrivals must span this many mean end-to-end latencies for a run to count as steady.
MIN_SPANS = 4.0


def run_length(rate: float, duration_s: float, min_requests: int, max_requests: int) -> int:
    """Requests for a run whose arrivals span ``duration_s`` at ``rate`` (clamped)."""
    return int(min(max(math.ceil(rate * duration_s), min_requests), max_requests))


def window_metrics(requests: Sequence[Request], *, warmup_fraction: float = 0.1,
                   slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
                   stream_interval: int = 1) -> dict:
    """Flat ``vllm bench serve`` statistics (``p99_ttft_ms`` ...) over the requests that
    arrive after the first ``warmup_fraction`` of the arrival span, plus ``slo_attainment``
    over the same requests, ``arrival_span_s``, ``steady`` (span >= MIN_SPANS mean E2EL)
    and the token counts needed for steady-state throughput."""
    reqs = sorted(requests, key=lambda r: r.arrival_time)
    if not reqs:
        return {"measured": 0, "arrival_span_s": 0.0, "steady": False}
    t0, t1 = reqs[0].arrival_time, reqs[-1].arrival_time
    cut = t0 + warmup_fraction * (t1 - t0)
    kept = [r for r in reqs if r.arrival_time >= cut]
    lat = request_latencies(kept, stream_interval)  # ITL one gap a streamed chunk
    out: dict = {"measured": len(kept), "arrival_span_s": t1 - t0}
    for name in LATENCY_METRICS:
        ms = lat[name] * 1000.0
        for stat, fn in (("mean", np.mean), ("median", np.median),
                         ("p90", lambda x: np.percentile(x, 90)), ("p99", lambda x: np.percentile(x, 99))):
            out[f"{stat}_{name}_ms"] = float(fn(ms)) if ms.size else None
    done = [r for r in kept if r.state is RequestState.FINISHED]
    out["completed"] = len(done)
    out["rejected"] = sum(r.state is RequestState.REJECTED for r in kept)
    out["mean_output_tokens"] = float(np.mean([r.num_output_tokens for r in done])) if done else 0.0
    out["mean_input_tokens"] = float(np.mean([r.prompt_len for r in done])) if done else 0.0
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        good = sum(meets_slo(r, slo_ttft_ms, slo_tpot_ms) for r in kept)
        out["slo_attainment"] = good / len(kept)
    e2el = out["mean_e2el_ms"]
    out["steady"] = e2el is not None and out["arrival_span_s"] >= MIN_SPANS * e2el / 1000.0
    return out
