"""Closed-loop clients and the in-flight cap (``workload.arrival.process: closed``,
``workload.max_concurrency``; ``sim.workload.clients``): Little's law on the achieved
concurrency, N in flight under N clients, a lone client's TTFT is one prefill step, the cap is
never exceeded, the fast decode path stays exact, same seed same result, one-line errors, and
the command line end to end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.api import build_replica_scheduler, resolve_deployment, simulate
from sim.errors import ConfigError
from sim.policies import Request, RequestState
from sim.scenario import Scenario
from tests.exactness import assert_fast_path_exact

ROOT = Path(__file__).resolve().parents[1]


def closed(n: int, clients: int, think: float = 0.0) -> list[str]:
    return [f"workload.num_requests={n}", "workload.arrival.process=closed",
            f"workload.arrival.concurrency={clients}", f"workload.arrival.think_time_s={think}"]


def capped(n: int, cap: int, rate: float = 40.0) -> list[str]:
    return [f"workload.num_requests={n}", f"workload.arrival.rate={rate}", f"workload.max_concurrency={cap}"]


def rows(out: Path) -> list[dict]:
    with open(out / "requests.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def in_flight_profile(rows_: list[dict]) -> list[tuple[float, int]]:
    """(time, requests in flight just after it) from requests.csv's send (arrival_s) and finish
    times, every event at one instant applied together (a client sends its next the moment its
    last one finished: one leaves, one comes)."""
    deltas: dict[float, int] = {}
    for r in rows_:
        deltas[float(r["arrival_s"])] = deltas.get(float(r["arrival_s"]), 0) + 1
        deltas[float(r["finish_s"])] = deltas.get(float(r["finish_s"]), 0) - 1
    out, n = [], 0
    for t in sorted(deltas):
        n += deltas[t]
        out.append((t, n))
    return out


def time_average(profile: list[tuple[float, int]]) -> float:
    area = sum(n * (t1 - t0) for (t0, n), (t1, _) in zip(profile, profile[1:]))
    return area / (profile[-1][0] - profile[0][0])


# --- Little's law and the number in flight ---------------------------------------------------


def test_littles_law_and_n_in_flight_under_n_clients(tmp_path):
    res = simulate(None, overrides=closed(400, 16), seed=1)
    s = res.summary
    # Little's law: L = X * W (throughput x mean E2E, E2E from send to last token).
    littles = s["request_throughput"] * s["mean_e2el_ms"] / 1000
    assert s["achieved_concurrency"] == pytest.approx(littles, rel=0.02)
    assert s["max_concurrency"] == 16 and s["completed"] == 400
    # The same time average, integrated independently from requests.csv.
    res.write(tmp_path)
    prof = in_flight_profile(rows(tmp_path))
    assert time_average(prof) == pytest.approx(s["achieved_concurrency"], rel=1e-9)
    # Think time 0: 16 in flight from the first send until the last one is sent, then the tail.
    last_send = max(float(r["arrival_s"]) for r in rows(tmp_path))
    before_tail = [n for t, n in prof if t < last_send]
    assert len(before_tail) > 100 and set(before_tail) == {16}
    assert max(n for _, n in prof) == 16
    assert 15.0 < s["achieved_concurrency"] < 16.0  # the drain at the end pulls it below 16


def test_think_time_keeps_the_client_and_lowers_what_is_in_flight():
    busy = simulate(None, overrides=closed(120, 8), seed=2).summary
    thinking = simulate(None, overrides=closed(120, 8, think=2.0), seed=2)
    s = thinking.summary
    assert s["achieved_concurrency"] < busy["achieved_concurrency"]
    assert s["achieved_concurrency"] == pytest.approx(
        s["request_throughput"] * s["mean_e2el_ms"] / 1000, rel=0.02)
    # Each client's next request leaves 2 s after one finished: every send after the first 8
    # is exactly a finish time plus 2 s.
    finishes = {r.finish_time for r in thinking.requests}
    later = sorted(thinking.requests, key=lambda r: r.arrival_time)[8:]
    assert all(any(abs(r.arrival_time - (f + 2.0)) < 1e-9 for f in finishes) for r in later)


def test_one_client_ttft_is_an_idle_servers_prefill_step():
    over = closed(12, 1) + ["cost_model.request_overhead_ms=5"]
    res = simulate(None, overrides=over, seed=3)
    sc = Scenario.from_dict(res.config)
    dep = resolve_deployment(sc)
    assert dep.request_overhead_s == pytest.approx(0.005)
    for r in res.requests:
        assert r.state is RequestState.FINISHED
        # The same request alone in a fresh engine: its first step is its whole prefill.
        sched = build_replica_scheduler(sc, dep.memory.num_kv_slots, 0, dep.model,
                                        dep.memory.kv_bytes_per_token)
        sched.add_request(Request(r.request_id, 0.0, r.prompt_len, r.max_output_tokens), 0.0)
        shape = sched.schedule(0.0).shape
        assert (shape.num_prefill_tokens, shape.num_prefill_seqs, shape.num_decode_seqs) == (r.prompt_len, 1, 0)
        ttft = r.token_times[0] - r.arrival_time
        # ... plus the API server's time on it (engine.frontend: sim.catalog.frontends).
        front = dep.frontend.ingress_s(r.prompt_len)
        assert front > 0.005  # the default front end is on
        assert ttft == pytest.approx(dep.request_overhead_s + front + dep.cost_model.step_time(shape),
                                     rel=1e-12, abs=1e-12)


# --- ramp-up: the clients' phases -------------------------------------------------------------

FIXED = ["workload.input_len={dist: fixed, mean: 2000}", "workload.output_len={dist: fixed, mean: 200}",
         "cost_model.source=roofline"]


def test_a_ramp_starts_client_k_at_k_over_n_of_it_and_keeps_littles_law():
    res = simulate(None, overrides=closed(64, 8) + ["workload.arrival.ramp_up_s=2"] + FIXED, seed=1)
    first = sorted(r.arrival_time for r in res.requests)[:8]
    assert first == pytest.approx([k * 0.25 for k in range(8)], abs=1e-12)
    s = res.summary
    assert s["achieved_concurrency"] == pytest.approx(s["request_throughput"] * s["mean_e2el_ms"] / 1000, rel=0.02)
    assert s["completed"] == 64 and s["max_concurrency"] == 8


def test_identical_clients_started_together_stay_in_step_and_a_ramp_spreads_them():
    """Four clients with fixed lengths, started together: the first prompts' prefills are
    staggered, but decoding steps are shared, so the four finish within a few decode steps of
    each other, every cycle, and each next prompt queues behind the others' prefills. Started
    over one lifetime they finish spread out and TTFT falls to about one prefill."""
    def finishes_and_ttft(extra):
        res = simulate(None, overrides=closed(40, 4) + FIXED + extra, seed=2)
        last = sorted(res.requests, key=lambda r: r.arrival_time)[-8:-4]  # one late wave of sends
        spread = max(r.finish_time for r in last) - min(r.finish_time for r in last)
        ttft = sum(r.token_times[0] - r.arrival_time for r in res.requests[8:]) / (len(res.requests) - 8)
        lifetime = sum(r.finish_time - r.arrival_time for r in res.requests) / len(res.requests)
        return spread, ttft, lifetime

    together_spread, together_ttft, lifetime = finishes_and_ttft([])
    ramp_spread, ramp_ttft, _ = finishes_and_ttft([f"workload.arrival.ramp_up_s={lifetime:.4f}"])
    assert together_spread < 0.1 * lifetime  # in step: within a few decode steps
    assert ramp_spread > 0.5 * lifetime
    assert ramp_ttft < 0.7 * together_ttft


# --- the cap ---------------------------------------------------------------------------------


def test_max_concurrency_is_never_exceeded_and_ttft_starts_at_the_send(tmp_path):
    res = simulate(None, overrides=capped(300, 4), seed=4)
    res.write(tmp_path)
    prof = in_flight_profile(rows(tmp_path))
    assert max(n for _, n in prof) == 4  # reached, never exceeded
    assert res.summary["max_concurrency"] == 4
    # The same arrivals uncapped: a capped request is sent no earlier than it arrived, and
    # some waited on the client; their TTFT counts from the send, so it is not that wait.
    free = {r.request_id: r for r in simulate(None, overrides=capped(300, 4)[:2], seed=4).requests}
    waited = 0
    for r in res.requests:
        assert r.arrival_time >= free[r.request_id].arrival_time
        waited += r.arrival_time > free[r.request_id].arrival_time
        assert r.token_times[0] > r.arrival_time
    assert waited > 50
    assert "max_concurrency" not in simulate(None, overrides=capped(20, 4)[:2], seed=4).summary


def test_a_cap_with_an_infinite_rate_is_the_closed_loop():
    a = simulate(None, overrides=capped(60, 6, rate=float("inf")), seed=5)
    b = simulate(None, overrides=closed(60, 6), seed=5)
    assert [(r.arrival_time, r.finish_time) for r in a.requests] == [(r.arrival_time, r.finish_time) for r in b.requests]


# --- exactness and reproducibility ------------------------------------------------------------

EXACT_CASES = {
    "closed": closed(150, 12),
    "closed-think-overhead": closed(150, 12, think=0.05) + ["cost_model.request_overhead_ms=3"],
    "closed-two-replicas": closed(150, 24) + ["parallel.num_replicas=2", "parallel.router=least_kv"],
    "closed-roofline-sync": closed(150, 12) + ["cost_model.source=roofline"],
    "closed-ramp": closed(150, 12) + ["workload.arrival.ramp_up_s=3"],
    "capped": capped(200, 6),
    "capped-two-replicas-overhead": capped(200, 10, rate=60) + ["parallel.num_replicas=2",
                                                                "cost_model.request_overhead_ms=2"],
}


@pytest.mark.parametrize("name", list(EXACT_CASES))
def test_fast_decode_is_bit_identical_to_step_by_step(name):
    assert_fast_path_exact(EXACT_CASES[name], seed=6)


def test_same_seed_same_result():
    strip = lambda s: {k: v for k, v in s.items() if k != "simulator"}  # noqa: E731
    for over in (closed(80, 8, think=0.1), capped(80, 3)):
        a = simulate(None, overrides=over, seed=7).summary
        b = simulate(None, overrides=over, seed=7).summary
        c = simulate(None, overrides=over, seed=8).summary
        assert strip(a) == strip(b)
        assert a["mean_e2el_ms"] != c["mean_e2el_ms"]


def test_a_streamed_run_reports_the_same_concurrency(tmp_path):
    over = closed(100, 8)
    normal = simulate(None, overrides=over, seed=9).summary
    streamed = simulate(None, overrides=over, seed=9, stream_to=tmp_path).summary
    assert streamed["max_concurrency"] == normal["max_concurrency"] == 8
    assert streamed["achieved_concurrency"] == pytest.approx(normal["achieved_concurrency"], rel=1e-12)


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("sets,needle", [
    (["workload.arrival.process=closed", "workload.arrival.concurrency=0"], "workload.arrival.concurrency: 0 must be >= 1"),
    (["workload.arrival.process=closed", "workload.arrival.concurrency=4", "workload.arrival.think_time_s=-1"],
     "workload.arrival.think_time_s: -1 must be >= 0"),
    (["workload.arrival.process=closed"], "workload.arrival.concurrency: required for process closed"),
    (["workload.max_concurrency=0"], "workload.max_concurrency: 0 must be >= 1"),
    (["workload.arrival.concurrency=4"], "workload.arrival.concurrency: only applies to process closed"),
    (["workload.arrival.think_time_s=1"], "workload.arrival.think_time_s: only applies to process closed"),
    (["workload.arrival.ramp_up_s=1"], "workload.arrival.ramp_up_s: only applies to process closed"),
    (["workload.arrival.process=closed", "workload.arrival.concurrency=4", "workload.arrival.ramp_up_s=-2"],
     "workload.arrival.ramp_up_s: -2 must be >= 0"),
    (["workload.arrival.process=closed", "workload.arrival.concurrency=8", "workload.max_concurrency=4"],
     "workload.max_concurrency: 4 is below workload.arrival.concurrency"),
    (["workload.max_concurrency=4", "workload.sessions={num_turns: {dist: fixed, mean: 2}, think_time_s: 1, "
      "new_message_len: {dist: fixed, mean: 10}}"], "workload.max_concurrency: not supported with workload.sessions"),
    (["workload.arrival.process=closed", "workload.arrival.concurrency=4", "disaggregation.enabled=true"],
     "disaggregation.enabled: closed-loop clients"),
])
def test_bad_values_are_one_line_config_errors(sets, needle):
    with pytest.raises(ConfigError) as err:
        simulate(None, overrides=["workload.num_requests=5"] + sets)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def kvplan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_bad_value_on_the_command_line_is_one_line_exit_2():
    proc = kvplan("simulate", "--no-progress", "--set", "workload.arrival.process=closed")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "workload.arrival.concurrency" in lines[0]


def test_cli_closed_loop_end_to_end(tmp_path):
    out = tmp_path / "run"
    proc = kvplan("simulate", "--no-progress", "--set", "workload.arrival.process=closed",
                  "--set", "workload.arrival.concurrency=8", "--set", "workload.num_requests=100",
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "concurrency achieved / max" in proc.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["completed"] == 100 and s["max_concurrency"] == 8
    assert 7.0 < s["achieved_concurrency"] <= 8.0


def test_capacity_of_a_closed_loop_is_in_clients_and_a_rate_target_is_refused_in_one_line():
    from tests.test_cli import assert_one_line_error, kvplan

    closed = ("--set", "workload.arrival.process=closed", "--set", "workload.arrival.concurrency=4")
    proc = kvplan("capacity", "--slo", "ttft_p99_ms=500", "--no-progress", "--target-rate", "5", *closed)
    assert_one_line_error(proc, "--target-rate", "--target-clients")
