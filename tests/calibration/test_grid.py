"""The calibration grid covers the steps a served workload is made of, not only synthetic shapes."""

from __future__ import annotations

import numpy as np

from calibration.profiler import GRIDS, SERVED_REFERENCE, served_lengths


def test_full_grid_has_steady_and_served_cases():
    grid = GRIDS["full"]
    steady = [c for c in grid.cases() if c.steady]
    assert [c.steady for c in steady] == [1, 2, 4, 8, 16, 32]
    assert SERVED_REFERENCE in grid.steady  # the served replays' rate comes from this case
    assert grid.served_loads and all(0 < f < 1 for f in grid.served_loads)
    for c in steady:  # enough requests that the case reaches steady state
        assert len(c.batches[0]) == 3 * c.steady + 8


def test_served_lengths_are_sharegpt_like_and_seeded():
    ins, outs = np.array(served_lengths(4000, seed=1)).T
    assert abs(ins.mean() - 161 / 8) < 2 and abs(outs.mean() - 338 / 8) < 3
    assert served_lengths(10, seed=1) == served_lengths(10, seed=1)
    assert served_lengths(10, seed=1) != served_lengths(10, seed=2)
