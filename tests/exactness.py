"""One check shared by the tests of every arrival path: the bulk decode fast path
(``sim.fast_decode``) gives bit-for-bit what one simpy step per decode step gives."""

from __future__ import annotations

from typing import Sequence

from sim.api import SimResult, simulate


def assert_fast_path_exact(overrides: Sequence[str], seed: int) -> SimResult:
    """Simulate ``overrides`` both ways; every request's times, every step and the summary (but
    the simulator's own counters) must be identical. Returns the fast run."""
    fast = simulate(None, overrides=list(overrides), seed=seed)
    slow = simulate(None, overrides=list(overrides), seed=seed, fast_decode=False)
    key = lambda res: [(r.request_id, r.arrival_time, r.finish_time, list(r.token_times))  # noqa: E731
                       for r in res.requests]
    assert key(fast) == key(slow)
    assert fast.steps == slow.steps
    f, s = dict(fast.summary), dict(slow.summary)
    f.pop("simulator"), s.pop("simulator")
    assert f == s
    return fast
