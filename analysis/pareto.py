"""The Pareto frontier of a sweep: configurations no other configuration beats on both axes.

Why: vLLM's and NVIDIA's planners show throughput per GPU (what serving costs) against
tokens per second per user (what a user feels); a configuration is worth considering only
if no other gives more of one without less of the other.
"""

from __future__ import annotations

from typing import Optional, Sequence


def pareto_mask(xs: Sequence[Optional[float]], ys: Sequence[Optional[float]]) -> list[bool]:
    """True for points not dominated when both axes are maximised; None values never are
    on the frontier. Ties (equal points) are all kept."""
    pts = list(zip(xs, ys))
    out = []
    for i, (x, y) in enumerate(pts):
        if x is None or y is None:
            out.append(False)
            continue
        dominated = any(
            j != i and u is not None and v is not None and u >= x and v >= y and (u > x or v > y)
            for j, (u, v) in enumerate(pts))
        out.append(not dominated)
    return out
