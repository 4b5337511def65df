"""Autoscaling: the pure policy's decisions on a constructed load step, the fleet simulation's
invariants (every request accounted for, no KV leaked, GPU-hours = the integral of the replica
count), reproducibility, and ``kvplan autoscale`` end to end."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.autoscale import by_period, compare_fleets, load_delay_s, simulate_fleet
from sim.errors import ConfigError
from sim.policies.autoscaler import Autoscaler, AutoscalerConfig, model_load_time_s
from sim.policies.request import Request, RequestState
from sim.workload.diurnal import diurnal_requests

ROOT = Path(__file__).resolve().parents[1]
AZURE_SHARED = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"


def _azure_like(path: Path) -> Path:
    """An hour in the Azure conversation trace's format (TIMESTAMP, ContextTokens,
    GeneratedTokens) at about its rate, for a machine without ../shared."""
    import random
    from datetime import datetime, timedelta

    rng, t, start = random.Random(7), 0.0, datetime(2023, 11, 16, 18, 0, 0)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    while t < 3600.0:
        t += rng.expovariate(5.5)
        stamp = (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        lines.append(f"{stamp},{rng.randint(50, 2000)},{rng.randint(5, 400)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def azure(tmp_path_factory) -> Path:
    """The real trace where ../shared has it, else one of its shape (the tests check the day's
    profile and the fleet, not the trace's own numbers)."""
    if AZURE_SHARED.is_file():
        return AZURE_SHARED
    return _azure_like(tmp_path_factory.mktemp("traces") / "azure_conv_like.csv")
SCENARIO = {"slo": {"ttft_ms": 500}}  # Llama-3.1-8B on an A100-80GB, the defaults


# ---------------------------------------------------------------- the policy alone

def _policy(**kw) -> Autoscaler:
    base = dict(target=10.0, min_replicas=1, max_replicas=5, scale_up_delay_s=30.0,
                scale_down_stabilization_s=300.0, tolerance=0.1, interval_s=15.0)
    return Autoscaler(AutoscalerConfig(**{**base, **kw}))


def test_scale_up_once_the_metric_crosses_the_target():
    a = _policy()
    assert a.decide(0, ready=2, starting=0, total=20) == 2  # on target
    assert a.decide(15, ready=2, starting=0, total=21.9) == 2  # inside the 10% band
    assert a.decide(30, ready=2, starting=0, total=30) == 3  # ceil(2 x 15 / 10)
    assert a.decide(45, ready=2, starting=1, total=30) == 3  # the starting one counts


def test_min_and_max_replicas_bound_every_decision():
    a = _policy(scale_down_stabilization_s=0.0)
    assert a.decide(0, ready=2, starting=0, total=10_000) == 5
    assert a.decide(15, ready=5, starting=0, total=0) == 1
    assert _policy(min_replicas=2, scale_down_stabilization_s=0.0).decide(0, 3, 0, 0) == 2


def test_no_scale_down_before_the_cool_down():
    a = _policy()
    assert a.decide(0, ready=4, starting=0, total=40) == 4
    for t in range(15, 301, 15):  # the load drops to a quarter: a raw recommendation of 1
        assert a.decide(t, ready=4, starting=0, total=10) == 4, t
    assert a.decide(315, ready=4, starting=0, total=10) == 1  # the t=0 recommendation expired


def test_no_flapping_under_a_steady_load():
    a = _policy()
    wobble = [40, 43, 37, 44, 36, 41]  # within 10% of 4 x 10
    assert {a.decide(15 * k, 4, 0, wobble[k % 6]) for k in range(200)} == {4}
    b = _policy()  # a load that alternates every interval: the window holds the higher count
    out = [b.decide(15 * k, 3, 0, 30 if k % 2 else 20) for k in range(200)]
    assert set(out[1:]) == {3}


def test_model_load_time_from_the_weights():
    assert model_load_time_s(16e9, 2e9, 30.0) == pytest.approx(38.0)
    # Llama-3.1-8B fp16 on one GPU: about 16 GB of weights.
    assert load_delay_s({}, 2e9, 30.0) == pytest.approx(30 + 16.06e9 / 2e9, rel=1e-2)
    with pytest.raises(ValueError, match="bandwidth"):
        model_load_time_s(1e9, 0.0)
    with pytest.raises(ValueError, match="min_replicas"):
        AutoscalerConfig(min_replicas=3, max_replicas=2)


# ---------------------------------------------------------------- the fleet on a load step

def step_load(phases=((0.0, 1.0), (60.0, 12.0), (180.0, 1.0)), end=400.0) -> list[Request]:
    """Evenly spaced arrivals: ``rate`` req/s from each phase's start; 256 in / 64 out."""
    reqs: list[Request] = []
    t = 0.0
    while t < end:
        rate = [r for start, r in phases if start <= t][-1]
        reqs.append(Request(str(len(reqs)), t, 256, 64))
        t += 1.0 / rate
    return reqs


POLICY = AutoscalerConfig(target=4.0, min_replicas=1, max_replicas=6, scale_up_delay_s=20.0,
                          scale_down_stabilization_s=60.0, interval_s=5.0)


@pytest.fixture(scope="module")
def step_run():
    reqs = step_load()
    return reqs, simulate_fleet(SCENARIO, reqs, policy=POLICY)


def test_fleet_scales_up_after_the_step_and_serves_only_after_the_load_delay(step_run):
    reqs, run = step_run
    starts = [(t, i) for t, i, e in run.events if e == "start"]
    assert starts and min(t for t, _ in starts) >= 60.0  # nothing before the step
    assert min(t for t, _ in starts) <= 60.0 + 2 * POLICY.interval_s
    ready_at: dict[int, float] = {}
    for t, i, e in run.events:
        if e == "ready":
            ready_at.setdefault(i, t)
    for t, i in starts:
        assert ready_at[i] == pytest.approx(t + POLICY.scale_up_delay_s)
    arrival = {r.request_id: r.arrival_time for r in reqs}
    for rid, i in run.replica_of.items():  # nobody is routed to a replica still loading
        assert arrival[rid] >= ready_at[i] - 1e-9
    assert run.totals["peak_replicas"] >= 3


def test_fleet_scales_down_only_after_the_cool_down(step_run):
    _, run = step_run
    drains = [t for t, _, e in run.events if e in ("drain", "cancel")]
    starts = [t for t, _, e in run.events if e == "start"]
    assert drains and starts
    window = POLICY.scale_down_stabilization_s
    for t in drains:  # a scale-up's recommendation holds the count for a whole window
        assert t >= max(s for s in starts if s <= t) + window, (t, starts)
    # The load fell at t=180: down to the minimum, a window later and no sooner.
    assert max(drains) >= 180.0 + window
    assert not [t for t in drains if 180.0 < t < 180.0 + window]
    assert run.timeline[-1]["active"] == POLICY.min_replicas


def test_fleet_accounts_for_every_request_and_leaks_no_kv(step_run):
    reqs, run = step_run
    t = run.totals
    assert t["requests"] == len(reqs) == t["completed"] + t["rejected"]
    assert sorted(r.request_id for r in run.requests) == sorted(r.request_id for r in reqs)
    assert all(r.state in (RequestState.FINISHED, RequestState.REJECTED) for r in run.requests)
    assert t["kv_leaked_slots"] == 0
    assert sum(row["arrivals"] for row in run.timeline) == len(reqs)


def test_gpu_hours_is_the_integral_of_the_replica_count(step_run):
    _, run = step_run
    on: dict[int, float] = {}
    seconds = 0.0
    for t, i, e in run.events:  # by hand: each replica from start (or t=0) to off / cancel
        if e == "start" or (e == "ready" and i not in on):
            on[i] = t
        elif e in ("off", "cancel"):
            seconds += t - on.pop(i)
    seconds += sum(run.totals["duration_s"] - t0 for t0 in on.values())
    assert run.totals["replica_seconds"] == pytest.approx(seconds)
    assert run.totals["gpu_hours"] == pytest.approx(seconds / 3600)
    assert run.totals["usd"] == pytest.approx(seconds / 3600 * run.totals["usd_per_gpu_hour"])
    fixed = simulate_fleet(SCENARIO, step_load(), replicas=3, interval_s=5.0)
    assert fixed.totals["gpu_hours"] == pytest.approx(3 * fixed.totals["duration_s"] / 3600)
    assert fixed.totals["duration_s"] >= 400 - 1


def test_fixed_fleet_sized_for_the_peak_costs_more():
    runs = compare_fleets(SCENARIO, step_load(), POLICY)
    auto, fixed = runs["autoscaled"].totals, runs["fixed"].totals
    assert fixed["peak_replicas"] == auto["peak_replicas"]
    assert fixed["gpu_hours"] > auto["gpu_hours"]
    assert fixed["slo_attainment"] >= auto["slo_attainment"] - 1e-9


def test_same_seed_same_result(azure):
    def once():
        reqs = diurnal_requests(azure, peak_rate=2.0, day_s=600.0, trough=0.2, seed=3)
        pol = AutoscalerConfig(target=4.0, max_replicas=4, scale_up_delay_s=15.0,
                               scale_down_stabilization_s=60.0, interval_s=10.0)
        return simulate_fleet(SCENARIO, reqs, policy=pol, horizon_s=600.0)
    a, b = once(), once()
    assert a.totals == b.totals and a.timeline == b.timeline and a.events == b.events
    assert by_period(a.timeline, 100.0) == by_period(b.timeline, 100.0)


def test_diurnal_trace_follows_its_profile(azure):
    reqs = diurnal_requests(azure, peak_rate=2.0, day_s=2400.0, trough=0.2, peak_hour=12.0)
    assert all(0 <= r.arrival_time < 2400.0 for r in reqs)
    assert [r.arrival_time for r in reqs] == sorted(r.arrival_time for r in reqs)
    mean = 2.0 * (1 + 0.2) / 2
    assert len(reqs) == pytest.approx(mean * 2400.0, rel=0.15)
    night = sum(1 for r in reqs if r.arrival_time < 200.0)
    noon = sum(1 for r in reqs if 1100.0 <= r.arrival_time < 1300.0)
    assert noon > 3 * night
    with pytest.raises(ConfigError, match="trough"):
        diurnal_requests(azure, peak_rate=1.0, trough=0.0)


def test_fleet_rejects_what_it_cannot_model():
    with pytest.raises(ConfigError, match="replicas"):
        simulate_fleet(SCENARIO, step_load(), replicas=0)
    with pytest.raises(ConfigError, match="data_parallel_size"):
        simulate_fleet({**SCENARIO, "parallel": {"data_parallel_size": 2}}, step_load(), replicas=1)


# ---------------------------------------------------------------- the command

def kvplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True,
                          timeout=120)


def test_cli_autoscale_writes_json_and_csv(tmp_path, azure):
    out = tmp_path / "as"
    proc = kvplan("autoscale", "--trace", str(azure), "--time-scale", "144", "--peak-rate", "2",
                  "--max-replicas", "4", "--target", "4", "--cooldown", "60", "--interval", "10",
                  "--set", "slo.ttft_ms=500", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "GPU-hours" in proc.stdout and "fixed" in proc.stdout
    data = json.loads((out / "autoscale.json").read_text())
    assert set(data["runs"]) == {"autoscaled", "fixed"}
    assert data["settings"]["policy"]["max_replicas"] == 4
    assert data["runs"]["autoscaled"]["totals"]["gpu_hours"] <= data["runs"]["fixed"]["totals"]["gpu_hours"]
    with open(out / "timeline.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["fleet"] for r in rows} == {"autoscaled", "fixed"}
    assert "active" in rows[0] and "slo_attainment" in rows[0]


@pytest.mark.parametrize("args, flag", [
    (("--target", "0"), "--target"),
    (("--metric", "gpu"), "--metric"),
    (("--min-replicas", "3", "--max-replicas", "2"), "--max-replicas"),
    (("--trough", "1.5"), "--trough"),
])
def test_cli_bad_option_is_one_line(args, flag):
    proc = kvplan("autoscale", *args, "--no-progress")
    assert proc.returncode == 2, proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and flag in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
