"""Small statistics shared by capacity search and A/B tests: a t-interval over seeds and a
paired, two-level bootstrap.

Why two levels: a simulation's seed fixes the arrival pattern and the request lengths, so
requests within one run are not independent draws of the workload. Resampling seeds first and
requests within each chosen seed second keeps both sources of variation in the interval; with a
single seed it reduces to the ordinary request bootstrap.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; a single value has zero width
    (stated as such by callers, since one seed says nothing about spread)."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if x.size < 2 or float(x.std(ddof=1)) == 0.0:
        return m, m, m
    # scipy.special's Student-t inverse is what scipy.stats.t.ppf calls; importing scipy.stats
    # costs 0.4 s, most of a capacity search's start-up.
    from scipy.special import stdtrit  # type: ignore[import-untyped]  # no stubs: scipy-stubs is no dependency

    half = float(stdtrit(x.size - 1, 0.5 + confidence / 2) * x.std(ddof=1) / math.sqrt(x.size))
    return m, m - half, m + half


#: statistic(arm_data, idx) -> one value per bootstrap row; ``idx`` has shape (B, n).
Statistic = Callable[[dict, np.ndarray], np.ndarray]


def paired_bootstrap(runs_a: Sequence[dict], runs_b: Sequence[dict], statistic: Statistic, *,
                     num_samples: int = 2000, confidence: float = 0.95,
                     rng: np.random.Generator | None = None) -> tuple[float, float, float]:
    """Difference ``statistic(B) - statistic(A)`` averaged over seeds: (point, low, high).

    ``runs_a[i]`` and ``runs_b[i]`` hold per-request arrays (same length, same request order)
    of seed i; both arms are resampled with the same indices (common random numbers), so
    identical arms give an interval of exactly zero width.
    """
    rng = rng or np.random.default_rng(0)
    s = len(runs_a)
    point = float(np.mean([_full(statistic, b) - _full(statistic, a) for a, b in zip(runs_a, runs_b)]))
    diffs = np.empty((s, num_samples))
    for i, (a, b) in enumerate(zip(runs_a, runs_b)):
        n = _length(a)
        idx = rng.integers(0, n, size=(num_samples, n)) if n else np.zeros((num_samples, 0), int)
        diffs[i] = statistic(b, idx) - statistic(a, idx)
    pick_seed = rng.integers(0, s, size=(num_samples, s))
    pick_row = rng.integers(0, num_samples, size=(num_samples, s))
    reps = np.nanmean(diffs[pick_seed, pick_row], axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.nanpercentile(reps, [tail, 100 - tail]) if np.isfinite(reps).any() else (math.nan, math.nan)
    return point, float(lo), float(hi)


def _full(statistic: Statistic, arm: dict) -> float:
    n = _length(arm)
    return float(statistic(arm, np.arange(n)[None, :])[0])


def _length(arm: dict) -> int:
    return len(next(iter(v for v in arm.values() if isinstance(v, np.ndarray))))
