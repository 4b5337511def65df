"""Fixtures: a profile file with known coefficients (``helpers.TRUE``)."""

from __future__ import annotations

import pytest

from tests.calibration.helpers import make_profile


@pytest.fixture
def profile_path(tmp_path):
    return make_profile().save(tmp_path / "profile.json")
