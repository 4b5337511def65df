"""The server's life: SIGTERM drains in-flight requests (new ones get 503) and exits 0, in
process and through ``kvplan serve`` in a subprocess; a drain that runs out of time aborts what
is left; an engine that fails answers 500 then 503, not silence; and the command's bad flags are
one line, exit 2, before any model loads."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serve.helpers import run_server, slow_steps, sse_events

ROOT = Path(__file__).resolve().parents[2]


def _stream(client: httpx.Client, max_tokens: int):
    body = {"prompt": "drain me", "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    return client.stream("POST", "/v1/completions", json=body)


def test_sigterm_finishes_requests_in_flight_and_refuses_new_ones(chat_model_dir):
    with run_server(chat_model_dir) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        with slow_steps(srv, 0.02), _stream(http, 40) as stream:
            lines = stream.iter_lines()
            first = next(sse_events(lines))
            assert first["choices"][0]["finish_reason"] is None
            srv.server.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
            refused = http.post("/v1/completions", json={"prompt": "late", "max_tokens": 2})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "server_shutting_down"
            assert http.get("/health").status_code == 503
            rest = list(sse_events(lines))
        assert rest[-1]["usage"]["completion_tokens"] == 40
        assert [e["choices"][0]["finish_reason"] for e in rest if e["choices"]][-1] == "length"
        srv.thread.join(15)
        assert not srv.thread.is_alive(), "the server did not exit after the drain"
        assert srv.state.engine.num_leaked_blocks() == 0


def test_a_drain_that_times_out_aborts_what_is_left(chat_model_dir):
    with run_server(chat_model_dir, drain_timeout_s=0.3) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        with slow_steps(srv, 0.02), _stream(http, 200) as stream:
            lines = stream.iter_lines()
            next(sse_events(lines))
            srv.server.handle_exit(signal.SIGTERM, None)
            rest = list(sse_events(lines))
        assert [e["choices"][0]["finish_reason"] for e in rest if e["choices"]][-1] == "abort"
        assert rest[-1]["usage"]["completion_tokens"] < 200
        srv.thread.join(15)
        assert not srv.thread.is_alive()
        assert srv.state.engine.num_leaked_blocks() == 0


def test_kvplan_serve_drains_on_sigterm_and_exits_0(chat_model_dir):
    """The real command: SIGTERM mid-stream; the stream still ends with all its tokens, the
    process says it drained and exits 0 (not killed by the signal)."""
    env = {**os.environ, "KVPLAN_API_KEY": "k"}
    proc = subprocess.Popen([sys.executable, "-m", "kvplan.cli.main", "serve", "--model", chat_model_dir, "--port", "0",
                             "--served-model-name", "tiny", "--kv-cache-mib", "4", "--threads", "1"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        while not (m := re.fullmatch(r"serving tiny on (http://127\.0\.0\.1:\d+)\n", seen[-1] if seen else "")):
            seen.append(proc.stderr.readline())
            assert seen[-1], "".join(seen)  # EOF: the server died before it served
        headers = {"Authorization": "Bearer k"}
        with httpx.Client(base_url=m.group(1), timeout=60, headers=headers) as http, _stream(http, 200) as stream:
            lines = stream.iter_lines()
            next(sse_events(lines))
            proc.send_signal(signal.SIGTERM)
            rest = list(sse_events(lines))
        assert rest[-1]["usage"]["completion_tokens"] == 200
        assert proc.wait(30) == 0
        err = proc.stderr.read()
        assert "draining" in err and "drained" in err and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_engine_failure_is_a_500_then_503(chat_model_dir):
    with run_server(chat_model_dir) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        def break_engine(engine) -> None:
            def step():
                raise RuntimeError("device lost")
            engine.step = step
        srv.on_engine(break_engine)
        r = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
        assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
        assert "device lost" in r.json()["error"]["message"]
        assert http.get("/health").status_code == 503
        r = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_dead"
        del srv.state.engine.step  # the engine thread no longer steps: safe to restore here


def _kvplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", "serve", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("args,needle", [
    (["--port", "70000"], "--port"),
    (["--max-tokens-limit", "0"], "--max-tokens-limit"),
    (["--max-concurrent-requests", "0"], "--max-concurrent-requests"),
    (["--drain-timeout", "-1"], "--drain-timeout"),
    (["--max-num-seqs", "0"], "--max-num-seqs"),
    (["--api-key", " "], "--api-key"),
])
def test_bad_flags_are_one_line_exit_2(args, needle):
    proc = _kvplan(*args)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr


def test_a_busy_port_is_one_line_before_the_model_loads():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.monotonic()
        proc = _kvplan("--port", str(port), "--model", "/no/such/model")  # the port fails first
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "cannot listen" in lines[0], proc.stderr
    assert time.monotonic() - start < 60
