"""End to end against ``kvplan serve`` (a tiny random-weight model): kvplan's load generator and
``validate --endpoint``, and an outside client, GuideLLM, whose report kvplan's reader scores."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibration.loadgen import run_load
from calibration.server_metrics import server_latency
from sim.policies.request import Request

ROOT = Path(__file__).resolve().parents[2]


def kvplan(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def workload(n: int, gap: float = 0.05) -> list[Request]:
    return [Request(str(i), gap * i, 20 + 7 * i, 6 + i) for i in range(n)]


def test_loadgen_measures_kvplan_serve_exactly(kvplan_server):
    reqs = workload(8)
    run = run_load(kvplan_server.url, reqs, duration_limit=60)
    assert run.target.model == kvplan_server.model and run.prompt_kind == "token-ids"
    assert set(run.target.extensions) >= {"ignore_eos", "return_token_ids"}
    for r, q in zip(run.results, reqs):
        assert r.success, r.error
        assert r.prompt_tokens == q.prompt_len                    # token-exact prompts
        assert r.output_tokens == q.max_output_tokens             # ignore_eos honoured
        assert sum(r.chunk_tokens) == r.output_tokens             # every token seen in a chunk
        assert 0 < r.ttft_s <= r.e2el_s
    server = server_latency(run.metrics_before, run.metrics_after)
    assert server is not None and server.num_requests == 8
    client_ttft = float(np.mean([r.ttft_s for r in run.results]))
    assert client_ttft >= server.mean_ttft_s - 0.002  # the client sees the token after the server emits it


def test_chat_prompts_sized_with_the_models_tokenizer(kvplan_server):
    reqs = workload(3)
    run = run_load(kvplan_server.url, reqs, endpoint_type="chat", tokenizer=str(kvplan_server.model_dir),
                   duration_limit=60)
    assert run.prompt_kind == "text-tokenizer"
    for r, q in zip(run.results, reqs):
        assert r.success, r.error
        assert r.planned_prompt_len == q.prompt_len
        assert r.prompt_tokens > q.prompt_len  # the chat template's own tokens come on top
        assert r.output_tokens == q.max_output_tokens


def test_validate_endpoint_against_kvplan_serve(kvplan_server, tmp_path):
    out = tmp_path / "val"
    proc = kvplan("validate", "--endpoint", kvplan_server.url, "--hardware", "a100-80gb",
                  "--sim-model", str(kvplan_server.model_dir / "config.json"), "--out", str(out),
                  "--num-requests", "8", "--rate", "8", "--no-progress",
                  "--set", "kv_cache.num_gpu_blocks=2048")  # the planner's A100 pool for a tiny model is 18M blocks
    assert proc.returncode == 0, proc.stderr
    record = json.loads((out / "validation.json").read_text())
    assert all(math.isfinite(m["error"]) for m in record["metrics"])
    overhead = record["source"]["http_overhead"]
    assert overhead["server_requests"] == 8 and overhead["ttft_ms"] is not None
    assert "HTTP overhead:" in proc.stdout


# About 25 s, GuideLLM's own start-up most of it: in the default suite, as the issue asks for an outside client.
@pytest.mark.skipif(importlib.util.find_spec("guidellm") is None, reason="guidellm is not installed")
def test_guidellm_against_kvplan_serve_and_kvplans_reader(kvplan_server, tmp_path):
    from calibration.real_runs import read_run

    report = tmp_path / "benchmarks.json"
    target = kvplan_server.url[: -len("/v1")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "GUIDELLM__DEFAULT_RESULTS_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "guidellm", "run",
         "--backend", f"kind=openai_http,target={target},model={kvplan_server.model},request_format=/v1/completions",
         "--profile", "kind=constant,rate=8", "--constraint", "kind=max_requests,count=6",
         "--data", "kind=synthetic_text,prompt_tokens=24,output_tokens=8",
         "--tokenizer", f"kind=hf_auto,model={kvplan_server.model_dir}",
         "--output", f"kind=json,path={report}", "--disable-console-interactive"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    run = read_run(report)
    assert run.format == "guidellm" and run.model == kvplan_server.model
    m = run.measured[0]
    # GuideLLM's max_requests constraint may cut the last request still in flight when it
    # fires (seen on a loaded 2-core machine: 5 of 6): what the reader must get right is
    # that every request GuideLLM counted as sent completed, none failed, 8 tokens each.
    assert 5 <= m.completed <= 6 and m.completed == m.sent and m.failures == 0
    assert m.output_len == pytest.approx(8)
    assert 0 < m.ttft_ms["mean"] < m.e2el_ms["mean"]
    proc = kvplan("validate", "--real", str(report), "--out", str(tmp_path / "val"), "--hardware", "a100-80gb",
                  "--model", str(kvplan_server.model_dir / "config.json"))
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "val" / "validation.json").read_text())
    assert record["source"]["format"] == "guidellm"
    assert any(m["name"] == "stage0_mean_ttft_ms" for m in record["metrics"])
