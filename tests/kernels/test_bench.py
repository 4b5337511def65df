"""The GPU benchmark's CPU-checkable parts: peak table, the no-GPU message, the smoke run's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.bench import peak_bandwidth, result_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H200", 4.8e12), ("NVIDIA H100 80GB HBM3", 3.35e12), ("NVIDIA H100 PCIe", 2.0e12),
    ("NVIDIA A100-SXM4-80GB", 2.039e12), ("NVIDIA A100-SXM4-40GB", 1.555e12), ("NVIDIA L4", 0.3e12),
    ("Some Future GPU", None),
])
def test_peak_bandwidth_by_device_name(name, peak):
    assert peak_bandwidth(name) == peak


def test_result_file_named_after_device(tmp_path):
    assert result_path("NVIDIA H100 80GB HBM3", tmp_path).name == "kernels_h100_80gb_hbm3.json"


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "kernels.bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when there is no GPU")
def test_without_gpu_fails_with_one_line():
    proc = _bench()
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--cpu-smoke" in proc.stderr


def test_cpu_smoke_runs_every_path_and_writes_json(tmp_path):
    proc = _bench("--cpu-smoke", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads((tmp_path / "kernels_cpu_smoke.json").read_text())
    assert report["goals"]["all_correct"]
    assert {r["num_splits"] for r in report["decode"]} >= {1, 2}  # unsplit and split-K both ran
    assert any(r["q_len"] < r["prompt_len"] for r in report["prefill"])  # chunk after cached context
