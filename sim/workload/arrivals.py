"""Arrival processes: when requests reach the server.

All functions return non-decreasing arrival times in seconds with the first request at t=0
(as ``vllm bench serve`` sends its first request at once). Synthetic processes draw
*unit-rate* gaps and divide by the rate, so for a given random stream a change of rate only
stretches or compresses the same arrival pattern: A/B runs at different loads see the same
bursts (common random numbers). ``rate = inf`` sends every request at t=0, the usual
offline-throughput setting.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np


def gamma_arrivals(n: int, rate: float, cv: float, rng: np.random.Generator) -> np.ndarray:
    """Renewal process with gamma inter-arrival gaps of mean ``1/rate`` and CV ``cv``.

    Burstiness: ``cv = 1`` is exactly Poisson (shape 1 gamma = exponential, same numbers as
    :func:`poisson_arrivals` for the same stream), ``cv > 1`` bursty, ``cv < 1`` smoother,
    ``cv = 0`` constant. Shape ``k = 1/cv^2``, scale ``cv^2/rate``.
    """
    _check(n, rate)
    if cv < 0 or not math.isfinite(cv):
        raise ValueError(f"cv must be finite and >= 0, got {cv}")
    if cv < 1e-6:  # indistinguishable from constant; 1/cv^2 would overflow
        return constant_arrivals(n, rate)
    shape = 1.0 / (cv * cv)
    unit_gaps = rng.standard_gamma(shape, size=max(n - 1, 0)) / shape
    return _times(n, unit_gaps, rate)


def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Poisson process: exponential gaps with mean ``1/rate`` (inter-arrival CV 1)."""
    return gamma_arrivals(n, rate, 1.0, rng)


def constant_arrivals(n: int, rate: float) -> np.ndarray:
    """One request every ``1/rate`` seconds (a deterministic load generator)."""
    _check(n, rate)
    return _times(n, np.ones(max(n - 1, 0)), rate)


def trace_arrivals(
    timestamps: np.ndarray, *, rate: Optional[float] = None, time_scale: float = 1.0
) -> np.ndarray:
    """A trace's own timing, rebased to start at 0.

    ``time_scale`` multiplies every time (0.5 replays twice as fast); ``rate`` instead rescales
    the trace so that its mean arrival rate, ``(n - 1) / duration``, equals ``rate`` while
    keeping its shape (bursts, diurnal swings). The two are exclusive.
    """
    times = np.asarray(timestamps, dtype=np.float64)
    times = times - times[0] if len(times) else times.copy()
    if rate is not None and time_scale != 1.0:
        raise ValueError("give either rate or time_scale, not both")
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise ValueError(f"time_scale must be finite and > 0, got {time_scale}")
    if rate is None:
        return times * time_scale
    _check(len(times), rate)
    if math.isinf(rate):
        return np.zeros_like(times)
    duration = float(times[-1]) if len(times) else 0.0
    if duration <= 0:
        if len(times) <= 1:
            return times
        raise ValueError("cannot rescale a trace whose requests all arrive at the same time")
    own_rate = (len(times) - 1) / duration
    return times * (own_rate / rate)


def _times(n: int, unit_gaps: np.ndarray, rate: float) -> np.ndarray:
    if n == 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    return np.concatenate(([0.0], np.cumsum(unit_gaps) / rate))


def _check(n: int, rate: float) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 (or inf), got {rate}")
