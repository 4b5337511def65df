"""``kvplan loadgen --concurrency N`` (a closed loop of N clients) and the in-flight cap
(``workload.max_concurrency``) against the fake server: never more than N in flight, each
client's next request leaves when its last one ended, TTFT from the send, and bench.json says
what vllm bench serve would (``max_concurrency`` N, ``request_rate`` inf), so validate --real
replays it as a closed loop."""

from __future__ import annotations

import json

from calibration.loadgen import Clients, run_load
from calibration.real_runs import read_run
from sim.policies.request import Request
from tests.loadgen.fake_server import FakeServer
from tests.loadgen.test_cli import SMALL, kvplan, one_line_error
from tests.loadgen.test_client import SLACK


def requests(n: int, output_len: int = 6) -> list[Request]:
    return [Request(str(i), 0.1 * i, 12 + i, output_len) for i in range(n)]


def max_in_flight(results) -> int:
    return most_in_flight([(r.start_s, r.start_s + r.e2el_s) for r in results])


def most_in_flight(spans) -> int:
    """The most (start, end) spans open at once; an end at the same instant as a start frees
    its slot first."""
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    n = top = 0
    for _, d in events:
        n += d
        top = max(top, n)
    return top


def test_closed_loop_keeps_n_in_flight_and_sends_on_each_finish():
    ttft, itl, n_out = 0.1, 0.01, 6
    with FakeServer(ttft_s=ttft, itl_s=itl) as srv:
        run = run_load(srv.url, requests(9, n_out), duration_limit=30, clients=Clients(3))
    res = sorted(run.results, key=lambda r: r.start_s)
    assert len(res) == 9 and all(r.success for r in res)
    assert max_in_flight(res) == 3
    assert all(r.start_s < SLACK for r in res[:3])  # the first 3 at once, not at their arrival times
    ends = [r.start_s + r.e2el_s for r in res]
    for r in res[3:]:  # every later one leaves right after some earlier one ended
        assert min(abs(r.start_s - e) for e in ends if e <= r.start_s + 1e-6) < SLACK
        assert r.arrival_s == r.start_s or abs(r.arrival_s - r.start_s) < SLACK  # no schedule to lag
    # Requests go out in workload order, each client taking the next.
    assert [r.index for r in res] == list(range(9))
    # 9 requests of ttft + 5 gaps through 3 clients: 3 rounds.
    assert run.duration_s >= 3 * (ttft + (n_out - 1) * itl)
    assert any("closed loop: 3 clients" in n for n in run.notes)


def test_a_cap_holds_open_loop_arrivals_and_times_ttft_from_the_send():
    with FakeServer(ttft_s=0.2, itl_s=0.0) as srv:
        run = run_load(srv.url, [Request(str(i), 0.0, 12, 2) for i in range(6)], duration_limit=30,
                       clients=Clients(2, closed=False))
    res = run.results
    assert max_in_flight(res) == 2
    waited = [r for r in res if r.start_s - r.arrival_s > 0.1]
    assert len(waited) == 4  # all arrived at t=0; four waited on the client for a slot
    assert all(0.2 <= r.ttft_s < 0.2 + SLACK for r in res)  # the wait is in no TTFT


def test_cli_concurrency_writes_a_closed_loop_bench_json(tmp_path):
    out = tmp_path / "run"
    with FakeServer(ttft_s=0.03, itl_s=0.005) as srv:
        proc = kvplan("loadgen", "--endpoint", srv.url, "--out", str(out), "--num-requests", "6",
                      "--concurrency", "2", "--no-progress", *SMALL)
        bad = kvplan("loadgen", "--endpoint", srv.url, "--out", str(tmp_path / "x"), "--concurrency", "0")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "bench.json").read_text())
    assert doc["max_concurrency"] == 2 and doc["request_rate"] == "inf" and doc["completed"] == 6
    assert "closed loop of 2 clients" in doc["kvplan"]["workload"]
    st = read_run(out / "bench.json").stages[0]  # validate --real replays it as a closed loop
    assert (st.process, st.concurrency, st.num_requests) == ("closed", 2, 6)
    one_line_error(bad, "--concurrency")
