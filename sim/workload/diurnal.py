"""A day-long bursty workload from a timed trace: the trace's burstiness under a diurnal rate.

The Azure conversation trace covers about an hour at 5.5 req/s. ``diurnal_requests`` makes a
day of it:

1. **Rate profile** ``r(t) = peak_rate x (trough + (1 - trough) x (1 + cos(2 pi (h - peak_hour)
   / 24)) / 2)`` with ``h = 24 t / day_s`` the hour of the day: ``peak_rate`` at ``peak_hour``,
   ``trough x peak_rate`` twelve hours away, mean ``peak_rate x (1 + trough) / 2``.
2. **The trace tiled at its own pace**: copies of the trace one after another (its timestamps
   unchanged, the day starting at an offset into it drawn from ``seed``), so its bursts keep
   their real length in seconds, the time scale the load delay and cool-down act on.
3. **Thinned to the profile**: each request is kept with probability ``r(t) / trace rate``
   (independently, seeded): the kept requests have the profile's rate on average and the
   trace's bursts locally. ``peak_rate`` may not exceed the trace's mean rate.
4. **Lengths**: each kept request has its row's prompt and output lengths.

``day_s`` compresses the daily cycle only: 86400 is a real day, 2880 a day in 48 minutes (30x).
The expected request count is ``day_s x peak_rate x (1 + trough) / 2``.
"""

from __future__ import annotations

import math
import os
from typing import Union

import numpy as np

from sim.errors import ConfigError
from sim.policies.request import Request
from sim.workload.traces import read_trace

def diurnal_rate(t: Union[float, np.ndarray], *, peak_rate: float, day_s: float,
                 trough: float, peak_hour: float) -> Union[float, np.ndarray]:
    """Arrivals per second at time ``t`` (seconds from midnight of the simulated day)."""
    h = 24.0 * np.asarray(t, dtype=float) / day_s
    return peak_rate * (trough + (1.0 - trough) * 0.5 * (1.0 + np.cos(2 * math.pi * (h - peak_hour) / 24.0)))


def diurnal_requests(trace_path: Union[str, os.PathLike], *, peak_rate: float,
                     day_s: float = 86400.0, trough: float = 0.2, peak_hour: float = 14.0,
                     seed: int = 0) -> list[Request]:
    """Requests over ``[0, day_s)`` following the diurnal profile, with the timed trace's
    bursts and lengths (module docstring); ids ``"0"``, ``"1"``, ... in arrival order."""
    for name, value, ok in (("peak_rate", peak_rate, peak_rate > 0), ("day_s", day_s, day_s > 0),
                            ("trough", trough, 0 < trough <= 1),
                            ("peak_hour", peak_hour, 0 <= peak_hour < 24)):
        if not ok or not math.isfinite(value):
            raise ConfigError(f"{name}: {value!r} is out of range (peak_rate > 0, day_s > 0, "
                              f"0 < trough <= 1, 0 <= peak_hour < 24)")
    trace = read_trace(trace_path)
    if trace.timestamps is None or len(trace) < 2:
        raise ConfigError(f"trace: {os.fspath(trace_path)} has no timestamps (an Azure or Mooncake "
                          f"trace is needed for its arrival pattern)")
    ts = np.asarray(trace.timestamps, dtype=float)
    ts = ts - ts[0]
    n = len(ts)
    period = float(ts[-1]) * n / (n - 1)  # one copy after another, the mean gap between them
    if not period > 0:
        raise ConfigError(f"trace: {os.fspath(trace_path)} spans no time")
    trace_rate = n / period
    if peak_rate > trace_rate:
        raise ConfigError(f"peak_rate: {peak_rate:g} req/s is above the trace's mean rate "
                          f"{trace_rate:.3g} req/s (the trace is thinned, never made denser)")
    rng = np.random.default_rng(seed)
    offset = float(rng.uniform(0.0, period))  # where in the trace the day starts
    copies = int(math.ceil((day_s + offset) / period))
    times = (np.arange(copies)[:, None] * period + ts[None, :]).ravel() - offset
    rows = np.tile(np.arange(n), copies)
    inside = (times >= 0) & (times < day_s)
    times, rows = times[inside], rows[inside]
    keep = rng.random(len(times)) < diurnal_rate(times, peak_rate=peak_rate, day_s=day_s,
                                                 trough=trough, peak_hour=peak_hour) / trace_rate
    times, rows = times[keep], rows[keep]
    inputs, outputs = trace.input_lens[rows], trace.output_lens[rows]
    return [Request(str(k), float(times[k]), int(inputs[k]), int(outputs[k]))
            for k in range(len(times))]
