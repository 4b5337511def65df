"""Fixtures for kernel tests: Triton's CPU interpreter, scoped to the tests that ask for it.

Triton's mode is fixed when ``triton`` is first imported (see ``kernels.interpreter``), so on a
machine without CUDA this file imports it with ``TRITON_INTERPRET=1`` and restores the variable;
our kernels then decorate in the same mode. The dispatcher's switch, ``TRITON_INTERPRET=1``, is
set per test with monkeypatch, never for the whole session, which would route every other
test's CPU attention through the slow interpreter.
"""

from __future__ import annotations

import pytest
import torch

from kernels.interpreter import import_triton_interpreted, interpreter_ready
from kernels.paged_case import TOLERANCE

# Triton's own library must be decorated for the interpreter, which happens at `import triton`:
# import it now with TRITON_INTERPRET=1 (restored right after), unless a GPU may need it compiled.
if not torch.cuda.is_available():
    import_triton_interpreted()


@pytest.fixture
def close():
    """``close(actual, expected, dtype)``: assert_close with the tolerance of ``dtype``."""
    def check(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
        atol, rtol = TOLERANCE[dtype]
        torch.testing.assert_close(actual.double(), expected.double(), atol=atol, rtol=rtol)
    return check


@pytest.fixture
def interpret(monkeypatch):
    """Run Triton kernels on CPU in the interpreter for this test."""
    if not interpreter_ready():
        pytest.skip("needs triton imported with TRITON_INTERPRET=1 (not installed, or imported compiled first)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield


@pytest.fixture
def no_interpret(monkeypatch):
    """Make sure the interpreter is off (the CPU default path is the torch reference)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    yield
