"""``kvplan loadgen`` and ``kvplan validate --endpoint`` as a user types them, against the fake
server: the files they write, what they print, and one-line errors."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loadgen.fake_server import FakeServer

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "calibration" / "profiles" / "smollm2-135m_fp32_cpu.json"
SMALL = ["--set", "workload.num_requests=6", "--set", "workload.arrival.rate=20",
         "--set", "workload.input_len.mean=24", "--set", "workload.output_len.mean=6",
         "--set", "workload.output_len.max=12"]


def kvplan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def server():
    with FakeServer(ttft_s=0.03, itl_s=0.005) as srv:
        yield srv


def test_loadgen_writes_bench_json_and_trace(server, tmp_path):
    out = tmp_path / "run"
    proc = kvplan("loadgen", "--endpoint", server.url, "--out", str(out), "--num-requests", "5",
                  "--no-progress", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "Serving Benchmark Result" in proc.stdout and "Mean TTFT (ms):" in proc.stdout
    assert "token-ids prompts" in proc.stdout
    doc = json.loads((out / "bench.json").read_text())
    assert doc["completed"] == 5 and doc["num_prompts"] == 5 and doc["request_rate"] == 20.0
    assert doc["model_id"] == "fake-model" and doc["max_model_len"] == 4096
    rows = (out / "trace.csv").read_text().splitlines()
    assert len(rows) == 6 and rows[0].startswith("arrived_at,num_prefill_tokens,num_decode_tokens")
    # the saved run is a run validate --real reads (GPU cost model, a catalog model named)
    proc = kvplan("validate", "--real", str(out / "bench.json"), "--out", str(tmp_path / "val"),
                  "--hardware", "h100-sxm", "--model", "llama-3.1-8b")
    assert proc.returncode == 0, proc.stderr
    assert "stage0_mean_ttft_ms" in proc.stdout


def test_validate_endpoint_with_a_profile(server, tmp_path):
    out = tmp_path / "val"
    proc = kvplan("validate", "--endpoint", server.url, "--profile", str(PROFILE), "--out", str(out),
                  "--num-requests", "6", "--rate", "20", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "mean_ttft_ms" in proc.stdout and "HTTP overhead:" in proc.stdout
    record = json.loads((out / "validation.json").read_text())
    assert record["format"] == "kvplan-validation/1"
    names = {m["name"] for m in record["metrics"]}
    assert {"mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "request_throughput"} <= names
    assert all(math.isfinite(m["error"]) for m in record["metrics"])
    src = record["source"]
    assert src["kind"] == "endpoint" and src["served_model"] == "fake-model" and src["model"] == "smollm2-135m"
    assert src["requests"] == {"planned": 6, "sent": 6, "completed": 6, "failed": 0}
    overhead = src["http_overhead"]
    assert overhead["ttft_ms"] is not None and 0 <= overhead["ttft_ms"] < 100
    # The simulated front end tokenises what the load generator sent: token-id prompts not at all.
    from calibration.validate_endpoint import LOADGEN_PROMPT_TEXT

    text = LOADGEN_PROMPT_TEXT[src["prompts"]]
    assert any(f"workload.prompt_text {text}" in n for n in src["notes"])
    if text == "token_ids":
        assert overhead["modelled"]["tokenize_us_per_token"] == 0
    assert {"ttft_ms", "e2el_ms"} <= set(record["samples"])
    assert (out / "bench.json").is_file() and (out / "trace.csv").is_file() and (out / "sim").is_dir()


def test_validate_endpoint_with_the_gpu_cost_model_and_a_config_workload(server, tmp_path):
    out = tmp_path / "val"
    proc = kvplan("validate", "--endpoint", server.url, "--hardware", "h100-sxm", "--sim-model", "llama-3.1-8b",
                  "--out", str(out), "--no-progress", "--json", *SMALL)
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert printed["metrics"] and "http_overhead" in printed
    src = json.loads((out / "validation.json").read_text())["source"]
    assert src["hardware"] == "h100-sxm" and src["model"] == "llama-3.1-8b" and src["requests"]["sent"] == 6
    assert src["num_gpu_blocks"] == 1000  # the pool the server states (vllm:cache_config_info)


def test_one_line_errors(server, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = str(tmp_path / "o")
    one_line_error(kvplan("loadgen", "--endpoint", dead, "--out", out), "cannot reach the server", "connection refused")
    one_line_error(kvplan("loadgen", "--endpoint", "localhost:8000", "--out", out), "--endpoint", "http(s) URL")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", out, "--duration-limit", "0"), "--duration-limit")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", out, "--endpoint-type", "embeddings"),
                   "--endpoint-type")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", out, "--num-requests", "0"), "--num-requests")
    one_line_error(kvplan("loadgen", "--out", out), "--endpoint")
    afile = tmp_path / "f.txt"
    afile.write_text("x")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", str(afile)), "is a file")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", out, "--endpoint-type", "chat",
                          "--prompts", "token-ids", *SMALL), "token-id prompts")
    one_line_error(kvplan("loadgen", "--endpoint", server.url, "--out", out, "--model", "no-such-model", *SMALL),
                   "--model no-such-model: not served", "fake-model")
    one_line_error(kvplan("validate", "--endpoint", server.url, "--out", out), "--profile", "--hardware")


def _half_speed_trace(path: Path) -> None:
    """A server step trace whose every step took twice what the shipped profile prices it at."""
    from sim.policies import StepShape
    from sim.pricing.profile import ProfileCostModel

    model = ProfileCostModel(str(PROFILE))
    with open(path, "w") as fh:
        for i in range(20):
            batch = 1 + i % 8
            shape = StepShape(num_decode_seqs=batch, decode_context_tokens=batch * (40 + 10 * i))
            rec = {"step": i, "seconds": 2 * model.price(shape), "schedule_seconds": 0.0, **shape.to_dict()}
            fh.write(json.dumps(rec) + "\n")


def test_validate_endpoint_scores_the_profile_on_the_servers_own_steps(server, tmp_path):
    """``--server-trace``: the engine ran at half the profile's speed inside the server, and the
    record says so (bias -50%), beside the HTTP overhead: the two reasons HTTP errors differ."""
    trace = tmp_path / "server_steps.jsonl"
    _half_speed_trace(trace)
    out = tmp_path / "val"
    proc = kvplan("validate", "--endpoint", server.url, "--profile", str(PROFILE), "--out", str(out),
                  "--num-requests", "6", "--rate", "20", "--no-progress", "--server-trace", str(trace))
    assert proc.returncode == 0, proc.stderr
    assert "profile on the server's own 20 steps: MAPE 50.0%, bias -50.0%" in " ".join(proc.stdout.split())
    steps = json.loads((out / "validation.json").read_text())["source"]["server_steps"]
    assert steps["num_steps"] == 20 and steps["bias"] == pytest.approx(-0.5)
    assert steps["busy_s_real"] == pytest.approx(2 * steps["busy_s_predicted"])


def test_server_trace_errors(server, tmp_path):
    out = str(tmp_path / "o")
    one_line_error(kvplan("validate", "--endpoint", server.url, "--hardware", "h100-sxm", "--out", out,
                          "--server-trace", str(tmp_path / "t.jsonl")), "--server-trace", "--profile")
    one_line_error(kvplan("validate", "--endpoint", server.url, "--profile", str(PROFILE), "--out", out,
                          "--server-trace", str(tmp_path / "missing.jsonl")), "--server-trace", "no such file")
    one_line_error(kvplan("validate", "--profile", str(PROFILE), "--out", out,
                          "--server-trace", str(tmp_path / "t.jsonl")), "--server-trace", "only with --endpoint")
