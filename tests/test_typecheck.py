"""The packages type-check: ``mypy sim runtime kernels calibration analysis kvplan dashboards
benchmarks`` reports nothing.

Why: the type hints say what flows where (a ``Sequence`` of requests, an optional progress
callback, a memory plan that may be absent); a hint that lies misleads the next reader, and the
mypyc-compiled hot modules (``sim.native``) enforce theirs at run time. mypy comes with the
``native`` extra (in ``dev``); without it the test skips."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The simulator, and the engine, kernels, calibration, analysis, CLI, dashboards and benchmark
#: scripts around it.
PACKAGES = ["sim", "runtime", "kernels", "calibration", "analysis", "kvplan", "dashboards", "benchmarks"]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy (kvplan[native]) is not installed")
def test_the_packages_type_check(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *PACKAGES],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
