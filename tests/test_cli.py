"""End-to-end runs of the ``kvplan`` command, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def kvplan(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_help_lists_commands():
    proc = kvplan("--help")
    assert proc.returncode == 0
    assert "simulate" in proc.stdout


def test_simulate_default_scenario_writes_outputs(tmp_path):
    out = tmp_path / "run"
    proc = kvplan("simulate", "--set", "workload.num_requests=200", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Time to first token" in proc.stdout and "token states" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    for key in ("completed", "rejected", "duration_s", "request_throughput", "output_throughput",
                "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "p90_itl_ms", "p99_e2el_ms"):
        assert key in summary
    for key in ("token_states", "reserved", "internal_fragmentation", "external_fragmentation",
                "preemptions", "prefix_cache_hit_rate"):
        assert key in summary["kv_cache"]
    assert summary["ttft_ms"]["p99"] == summary["p99_ttft_ms"]
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) == 201 and rows[0].startswith("request_id,")
    assert (out / "steps.csv").read_text().startswith("replica,start_s,duration_s")


def test_config_file_with_overrides_and_json(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: opt-13b\nhardware: a100-40gb\nkv_cache: {max_model_len: 2048, allocator: contiguous}\n"
                   "scheduler: {policy: orca}\nworkload: {num_requests: 100}\nslo: {ttft_ms: 1000}\n")
    proc = kvplan("simulate", str(cfg), "--set", "kv_cache.reserve=pow2", "--json", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["scenario"]["allocator"] == "contiguous" and s["scenario"]["reserve"] == "pow2"
    assert "goodput" in s and s["scenario"]["seed"] == 5


def test_same_seed_same_output(tmp_path):
    a = kvplan("simulate", "--set", "workload.num_requests=100", "--json", "--seed", "11")
    b = kvplan("simulate", "--set", "workload.num_requests=100", "--json", "--seed", "11")
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize("args,needles", [
    (["--set", "scheduler.polcy=orca"], ["scheduler.polcy", "policy"]),
    (["--set", "scheduler.policy=fifo"], ["scheduler.policy", "chunked", "vllm_v0"]),
    (["--set", "kv_cache.block_size=0"], ["kv_cache.block_size"]),
    (["--set", "model=gpt-17"], ["model", "llama-2-7b"]),
    (["--set", "hardware=tpu"], ["hardware", "h100-sxm"]),
    (["--set", "model=llama-2-70b", "--set", "hardware=a100-40gb"], ["llama-2-70b", "GB"]),
    (["--set", "workload.arrival.process=poison"], ["workload.arrival.process", "poisson"]),
    (["missing.yaml"], ["missing.yaml", "not found"]),
])
def test_bad_input_is_one_line_exit_2(args, needles):
    assert_one_line_error(kvplan("simulate", *args, "--no-progress"), *needles)


def test_bad_trace_row_names_file_and_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:47.6805900,abc,44\n")
    proc = kvplan("simulate", "--set", f"workload.trace={trace}", "--no-progress")
    assert_one_line_error(proc, f"{trace}:3")


def test_bad_yaml_names_file_and_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model: opt-13b\nkv_cache: [unclosed\n")
    assert_one_line_error(kvplan("simulate", str(cfg)), "bad.yaml:")


def test_real_azure_trace_runs():
    trace = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
    if not trace.exists():
        pytest.skip("shared traces not present")
    proc = kvplan("simulate", "--set", f"workload.trace={trace}", "--set", "workload.num_requests=300",
                  "--set", "kv_cache.max_model_len=8192", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed"] == 300
