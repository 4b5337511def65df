"""Fixtures for kernel tests: Triton's CPU interpreter, scoped to the tests that ask for it.

``TRITON_INTERPRET`` is set per test with monkeypatch (never for the whole session, which would
route every other test's CPU attention through the slow interpreter). That is enough because
``kernels._triton_util.jit`` decorates kernels lazily, per mode, at call time: Triton 3.x reads
the variable when ``@triton.jit`` runs, not when a kernel launches.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

# Absolute tolerances on outputs of attention over N(0, 1) values (|out| <~ 3): a few ulps of
# the storage dtype, since kernels and references both accumulate in float32.
TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.fixture
def tol():
    """Per-dtype absolute tolerance table."""
    return TOLERANCE


@pytest.fixture
def interpret(monkeypatch):
    """Run Triton kernels on CPU in the interpreter for this test."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield


@pytest.fixture
def no_interpret(monkeypatch):
    """Make sure the interpreter is off (the CPU default path is the torch reference)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    yield
