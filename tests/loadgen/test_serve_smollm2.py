"""The acceptance check of ``validate --endpoint``: against ``kvplan serve`` running SmolLM2 on
this CPU, with each path calibrated on its own engine's steps, the simulator's errors over HTTP
stay within those of the in-process validation on the same workload, plus the HTTP overhead the
run measured. (With one profile for both, the HTTP errors are larger: the engine's steps run
slower inside the server, where the HTTP stack and the client share the CPU;
benchmarks/validate_over_http.py measures by how much.)

Slow (about 4 minutes: two servers, four runs); run with ``-m slow``. On a shared machine the
runs see different interference, so the bound carries a margin.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "calibration" / "profiles" / "smollm2-135m_fp32_cpu.json"
WORKLOAD = ("--num-requests", "24", "--rate", "2", "--scale", "0.125",  # the seed per run
            "--sim-model", "smollm2-135m")  # a profile fitted to a trace names no catalog model
#: Both paths run the engine with kvplan serve's CPU default (one core left for HTTP and client).
THREADS = max(1, len(os.sched_getaffinity(0)) - 1)
MARGIN = 0.15  # share of the real value either run may move by under a shared machine's noise


def kvplan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT, env={**env, "COLUMNS": "200"},
                          capture_output=True, text=True, timeout=600)


def errors(record: dict) -> dict[str, tuple[float, float, float]]:
    return {m["name"]: (m["real"], m["predicted"], m["error"]) for m in record["metrics"]}


def _serve(tmp_path: Path, name: str) -> tuple[subprocess.Popen, str, Path]:
    """A fresh ``kvplan serve`` tracing its steps: the process, its URL, the trace."""
    log, trace = tmp_path / f"{name}.log", tmp_path / f"{name}_steps.jsonl"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "kvplan.cli.main", "serve", "--port", "0", "--threads", str(THREADS),
                                 "--trace", str(trace)], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while not (m := re.search(r"on (http://\S+)", log.read_text())):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.5)
    return proc, m.group(1) + "/v1", trace


def _validate_http(tmp_path: Path, name: str, profile: Path, seed: int) -> tuple[dict, Path]:
    proc, url, trace = _serve(tmp_path, name)
    try:
        res = kvplan("validate", "--endpoint", url, "--profile", str(profile), "--out", str(tmp_path / name),
                     "--server-trace", str(trace), "--no-progress", *WORKLOAD, "--seed", str(seed))
        assert res.returncode == 0, res.stderr
    finally:
        proc.terminate()
        proc.wait(60)
    return json.loads((tmp_path / name / "validation.json").read_text()), trace


def _validate_local(tmp_path: Path, name: str, profile: Path, seed: int) -> tuple[dict, Path]:
    res = kvplan("validate", "--profile", str(profile), "--out", str(tmp_path / name), "--no-progress",
                 "--threads", str(THREADS), *WORKLOAD, "--seed", str(seed))
    assert res.returncode == 0, res.stderr
    return json.loads((tmp_path / name / "validation.json").read_text()), tmp_path / name / "runtime_steps.jsonl"


def _fit(tmp_path: Path, trace: Path, name: str) -> Path:
    out = tmp_path / f"{name}_profile.json"
    res = kvplan("calibrate", "--trace", str(trace), "--out", str(out), "--no-progress")
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.slow
def test_errors_over_http_within_in_process_errors_plus_overhead(tmp_path):
    """Each path calibrated on its own engine (a traced run at seed 1, ``calibrate --trace``),
    then the seed-0 run validated with it: over HTTP within the in-process errors plus the
    HTTP overhead. The server-side step score says the server's profile fits its own steps."""
    pytest.importorskip("torch")
    cal_http, http_trace = _validate_http(tmp_path, "cal_http", PROFILE, 1)
    assert cal_http["source"]["server_steps"]["num_steps"] > 0
    assert cal_http["source"]["step_error"].startswith("profile on the server's own")
    _, local_trace = _validate_local(tmp_path, "cal_local", PROFILE, 1)
    rec_http, _ = _validate_http(tmp_path, "http", _fit(tmp_path, http_trace, "http"), 0)
    rec_local, _ = _validate_local(tmp_path, "local", _fit(tmp_path, local_trace, "local"), 0)
    e_http, e_local = errors(rec_http), errors(rec_local)
    assert all(math.isfinite(v[2]) for v in e_http.values())
    overhead = rec_http["source"]["http_overhead"]
    assert overhead["ttft_ms"] is not None
    assert abs(rec_http["source"]["server_steps"]["bias"]) < 0.25  # its own profile fits its steps
    real_ttft = e_http["mean_ttft_ms"][0]
    assert abs(e_http["mean_ttft_ms"][2]) <= abs(e_local["mean_ttft_ms"][2]) + overhead["ttft_ms"] / real_ttft + MARGIN
    for name in ("mean_tpot_ms", "mean_e2el_ms"):
        assert abs(e_http[name][2]) <= abs(e_local[name][2]) + MARGIN, (name, e_http[name], e_local[name])
