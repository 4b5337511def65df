"""The kernels compile for a real GPU (sm_90) on this CPU machine: what the interpreter can't check."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_every_kernel_compiles_for_hopper():
    # A fresh process: this one imported triton for the interpreter, which can't also compile.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "kernels.compile_check", "--arch", "90"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    kernels_seen = {line.rsplit("[", 1)[1].split("]")[0] for line in lines}
    assert kernels_seen == {"_decode_kernel", "_merge_kernel", "_prefill_kernel", "_write_kv_kernel"}
    assert all(line.startswith("ok") for line in lines)
