"""The load generator's client against a fake OpenAI server with known delays: what it measures,
when it sends, how it stops, and what it does with errors and with servers that refuse vLLM's
extensions. Tolerances are loose upward (a shared 2-core box delays event loops) and tight
downward (a measured time can never be below the delay the server waited)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from calibration.loadgen import LoadgenError, api_base, run_load
from sim.policies.request import Request
from tests.loadgen.fake_server import FakeServer

SLACK = 0.08  # seconds a busy machine may add to any measured time


def requests(arrivals, prompt_len: int = 12, output_len: int = 8) -> list[Request]:
    return [Request(str(i), float(t), prompt_len + i, output_len) for i, t in enumerate(arrivals)]


def test_ttft_itl_e2e_match_the_server_delays():
    ttft, itl, n = 0.12, 0.03, 6
    with FakeServer(ttft_s=ttft, itl_s=itl) as srv:
        run = run_load(srv.url, requests([0.0, 0.5, 1.0], output_len=n), duration_limit=30)
    assert run.prompt_kind == "token-ids" and run.target.model == "fake-model"
    assert [r.prompt_tokens for r in run.results] == [12, 13, 14]  # exact lengths, counted by the server
    for r in run.results:
        assert r.success, r.error
        assert r.output_tokens == n and r.num_chunks == n and len(r.itl_s) == n - 1
        assert ttft <= r.ttft_s < ttft + SLACK
        # Token k leaves the server no sooner than ttft + k x itl after the request; one gap alone
        # may be short (a busy event loop that read chunk k late reads chunk k + 1 on time).
        since_start = r.ttft_s + np.cumsum(r.itl_s)
        assert all(t >= ttft + (k + 1) * itl - 1e-3 for k, t in enumerate(since_start)), since_start
        assert np.mean(r.itl_s) < itl + SLACK / 2
        assert ttft + (n - 1) * itl <= r.e2el_s < ttft + (n - 1) * itl + 2 * SLACK


def test_open_loop_requests_leave_on_time_even_when_the_server_is_slow():
    arrivals = [0.0, 0.1, 0.2, 0.3, 0.4]
    attempts = []
    # A stall of the whole process (another job on a shared machine) delays every request
    # alike and fails any schedule; it is rare, so up to three runs are taken and one must keep
    # time. A client that waited for answers before sending (the bug this catches) sends at
    # 0, 0.25, 0.5, ... through a one-at-a-time server on every run.
    for _ in range(3):
        with FakeServer(ttft_s=0.25, itl_s=0.0, serial=True) as srv:  # one at a time: 0.25 s each
            run = run_load(srv.url, requests(arrivals, output_len=2), duration_limit=30)
            got = [t for t, _ in srv.received[1:]]  # [0] is the probe
        sent = np.array(got) - got[0]
        attempts.append(sent)
        if np.allclose(sent, arrivals, atol=0.05):  # the server saw them on schedule
            break
    else:
        pytest.fail(f"no run kept the schedule {arrivals}: the server saw {attempts}")
    assert all(abs(r.start_s - r.arrival_s) < 0.05 for r in run.results)
    ttfts = [r.ttft_s for r in run.results]
    assert ttfts[-1] > ttfts[0] + 0.5  # ...and queued them: the last waited for four others


def test_time_limit_stops_sending_and_cancels_what_is_in_flight():
    with FakeServer(ttft_s=0.05, itl_s=0.05) as srv:  # 20 tokens: about 1 s per request
        t0 = time.perf_counter()
        run = run_load(srv.url, requests([0.1 * i for i in range(20)], output_len=20), duration_limit=0.35)
        wall = time.perf_counter() - t0
    assert len(run.results) == 4 and run.num_planned == 20  # sent at 0, 0.1, 0.2, 0.3
    assert all(not r.success and "time limit" in r.error for r in run.results)
    assert run.duration_s < 0.35 + SLACK and wall < 5
    assert any("16 of 20 requests not sent" in n for n in run.notes)


def test_a_rejected_request_is_recorded_and_the_run_goes_on():
    reqs = [Request(str(i), 0.05 * i, 10, out) for i, out in enumerate([4, 7, 4, 4])]
    with FakeServer(ttft_s=0.02, itl_s=0.005, fail_max_tokens=7) as srv:
        run = run_load(srv.url, reqs, duration_limit=30)
    assert [r.success for r in run.results] == [True, False, True, True]
    bad = run.results[1]
    assert bad.status == 400 and bad.error.startswith("HTTP 400") and "max_tokens 7" in bad.error
    assert len(run.completed) == 3 and len(run.failed) == 1


def test_strict_server_without_extensions_or_token_prompts():
    with FakeServer(ttft_s=0.02, itl_s=0.005, strict=True, token_id_prompts=False) as srv:
        run = run_load(srv.url, requests([0.0, 0.05]), duration_limit=30)
        body = srv.received[-1][1]
    assert run.target.extensions == () and not run.target.token_id_prompts
    assert run.prompt_kind == "text-words" and isinstance(body["prompt"], str)
    assert "ignore_eos" not in body and "min_tokens" not in body
    assert all(r.success for r in run.results)
    notes = " ".join(run.notes)
    assert "rejects token-id prompts" in notes and "ignore_eos" in notes and "return_token_ids" in notes


def test_chat_ttft_starts_at_content_not_at_the_role_chunk():
    with FakeServer(ttft_s=0.15, itl_s=0.01, role_chunk=True) as srv:
        run = run_load(srv.url, requests([0.0], output_len=4), endpoint_type="chat", duration_limit=30)
        body = srv.received[-1][1]
    r = run.results[0]
    assert body["messages"][0]["role"] == "user" and isinstance(body["messages"][0]["content"], str)
    assert r.success and r.num_chunks == 4 and r.ttft_s >= 0.15


def test_chunks_of_several_tokens_count_their_tokens_from_usage():
    with FakeServer(ttft_s=0.02, itl_s=0.02, tokens_per_chunk=3) as srv:
        run = run_load(srv.url, requests([0.0], output_len=9), duration_limit=30)
    r = run.results[0]
    assert r.output_tokens == 9 and r.num_chunks == 3 and len(r.itl_s) == 2


def test_server_metrics_give_the_server_side_latency():
    from calibration.server_metrics import config_info, server_latency

    with FakeServer(ttft_s=0.1, itl_s=0.01) as srv:
        run = run_load(srv.url, requests([0.0, 0.2, 0.4], output_len=3), duration_limit=30)
    server = server_latency(run.metrics_before, run.metrics_after)
    assert server is not None and server.num_requests == 3  # the probe is not counted
    assert 0.1 <= server.mean_ttft_s < 0.1 + SLACK
    client = np.mean([r.ttft_s for r in run.results])
    assert 0 <= client - server.mean_ttft_s < SLACK
    assert config_info(run.metrics_after) == {"block_size": "16", "num_gpu_blocks": "1000"}


@pytest.mark.parametrize("url, message", [
    ("ftp://127.0.0.1:1", r"expected an http\(s\) URL"),
    ("127.0.0.1:8000", r"expected an http\(s\) URL"),
    ("http://127.0.0.1:99999/v1", "port"),
])
def test_bad_urls_are_one_error(url, message):
    with pytest.raises(LoadgenError, match=message):
        run_load(url, requests([0.0]))


def test_an_unreachable_server_says_so():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(LoadgenError, match=r"cannot reach the server at .*: connection refused \(is it running"):
        run_load(f"http://127.0.0.1:{port}/v1", requests([0.0]))


def test_api_base_normalises_what_users_type():
    assert api_base("http://h:8000") == "http://h:8000/v1"
    assert api_base("http://h:8000/v1/") == "http://h:8000/v1"
    assert api_base("https://h/x/v1/completions") == "https://h/x/v1"
    assert api_base("http://h:8000/v1/chat/completions") == "http://h:8000/v1"
