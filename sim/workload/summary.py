"""A one-look summary of a workload, so a user sees what they are about to simulate (and can
compare it with a trace's published statistics) before trusting any capacity answer."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from sim.policies.request import Request


def describe(requests: Sequence[Request]) -> dict[str, Any]:
    """Count, duration, arrival rate and length statistics of ``requests``.

    ``request_rate`` is ``(count - 1) / duration_s`` (None when undefined): the first request
    arrives at the start of the window, so n requests span n - 1 gaps. ``prefix_reuse_fraction``
    is the share of prompt blocks whose hash was already seen (what an unlimited prefix cache
    would hit; None when requests carry no block hashes).
    """
    times = np.array([r.arrival_time for r in requests], dtype=np.float64)
    duration = float(times.max() - times.min()) if len(times) else 0.0
    rate: Optional[float] = (len(times) - 1) / duration if duration > 0 else None
    return {
        "count": len(requests),
        "duration_s": duration,
        "request_rate": rate,
        "input_len": _stats([r.prompt_len for r in requests]),
        "output_len": _stats([r.max_output_tokens for r in requests]),
        "prefix_reuse_fraction": prefix_reuse_fraction(requests),
    }


def _stats(values: list[int]) -> dict[str, Optional[float]]:
    if not values:
        return {k: None for k in ("mean", "median", "p99", "min", "max")}
    a = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p99": float(np.percentile(a, 99)),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def prefix_reuse_fraction(requests: Sequence[Request]) -> Optional[float]:
    """Share of the prompt blocks (``block_hashes``) whose hash an earlier arrival already had:
    the hit rate of an unlimited prefix cache; None when no request carries hashes."""
    if not any(r.block_hashes for r in requests):  # most workloads: no sort needed
        return None
    seen: set[int] = set()
    total = reused = 0
    for r in sorted(requests, key=lambda r: r.arrival_time):
        for h in r.block_hashes or ():
            total += 1
            if h in seen:
                reused += 1
            else:
                seen.add(h)
    return reused / total if total else None
