"""Streamlit's AppTest runs page scripts as ``__main__`` and leaves them there; a later
spawn-based process pool (``kvplan sweep``) would then re-run a page script in every worker.
Restore the real ``__main__`` after each dashboard test."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_main_module():
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main
