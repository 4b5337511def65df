"""Streamed runs (``simulate(stream_to=...)``, ``kvplan simulate --stream``): the same summary as
a normal run (ITL quantiles binned within 5e-5), the same request and step rows on disk, and
nothing kept in memory per request."""

from __future__ import annotations

import csv
import gc
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from sim.api import simulate
from sim.streaming import ITL_BIN_WIDTH, ItlHistogram

CASES = {
    "default": ["workload.num_requests=1500"],
    "spec-slo-replicas": ["workload.num_requests=500", "speculative.num_tokens=3", "slo.ttft_ms=300",
                          "slo.tpot_ms=40", "parallel.num_replicas=2", "parallel.router=least_kv"],
    "preempting-rejecting": ["workload.num_requests=400", "kv_cache.max_model_len=700",
                             "kv_cache.num_gpu_blocks=200", "workload.arrival.rate=30"],
    "prefix-cache": ["workload.num_requests=400", "kv_cache.prefix_caching=true",
                     "workload.prefix.num_prefixes=3", "workload.prefix.length=100"],
    "stream-interval": ["workload.num_requests=400", "engine.stream_interval=7"],
}
BINNED = {"median", "p90", "p99"}


def _compare(normal, streamed, path=""):
    """Every field equal, but ITL quantiles (binned) and sums whose order differs (1e-12)."""
    if isinstance(normal, dict):
        assert set(normal) == set(streamed), path
        for k in normal:
            _compare(normal[k], streamed[k], f"{path}.{k}")
    elif isinstance(normal, float) and isinstance(streamed, float):
        binned = "itl" in path and any(f"{q}_" in path or path.endswith(q) for q in BINNED)
        tol = ITL_BIN_WIDTH / 2 + 1e-12 if binned else 1e-12
        assert math.isclose(normal, streamed, rel_tol=tol), (path, normal, streamed)
    else:
        assert normal == streamed, (path, normal, streamed)


@pytest.mark.parametrize("name", list(CASES))
def test_a_streamed_run_gives_the_normal_summary_and_rows(name, tmp_path):
    normal = simulate(None, overrides=CASES[name])
    streamed = simulate(None, overrides=CASES[name], stream_to=tmp_path)
    a, b = dict(normal.summary), dict(streamed.summary)
    sim_a, sim_b = a.pop("simulator"), b.pop("simulator")
    assert sim_a["num_steps"] == sim_b["num_steps"] and sim_a["num_events"] == sim_b["num_events"]
    assert "itl_quantiles" in sim_b["streamed"]
    _compare(a, b)
    assert streamed.requests == [] and all(v == [] for v in streamed.steps.values())
    # The rows on disk are the normal run's (in finishing order, not request order).
    normal.write(tmp_path / "normal")
    rows = {r["request_id"]: r for r in csv.DictReader(open(tmp_path / "requests.csv"))}
    expected = {r["request_id"]: r for r in csv.DictReader(open(tmp_path / "normal" / "requests.csv"))}
    assert rows == expected
    steps = list(csv.reader(open(tmp_path / "steps.csv")))
    assert sorted(steps[1:]) == sorted(list(csv.reader(open(tmp_path / "normal" / "steps.csv")))[1:])
    assert steps[0] == list(normal.steps)


def test_itl_histogram_quantiles_are_within_half_a_bin():
    rng = np.random.default_rng(0)
    h, gaps = ItlHistogram(), []
    for _ in range(300):
        t = np.cumsum(np.concatenate([[rng.uniform(0, 5)], rng.lognormal(-4, 0.8, rng.integers(1, 60)),
                                      np.zeros(rng.integers(0, 3))]))  # ties: speculative tokens
        h.add(t.tolist())
        gaps.append(np.diff(t))
    exact = np.concatenate(gaps) * 1000.0
    s = h.stats_ms()
    assert math.isclose(s["mean"], exact.mean(), rel_tol=1e-12)
    assert math.isclose(s["std"], exact.std(), rel_tol=1e-9)
    for key, q in (("median", 50), ("p90", 90), ("p99", 99)):
        assert math.isclose(s[key], np.percentile(exact, q), rel_tol=ITL_BIN_WIDTH / 2 + 1e-12), key


def _live_requests_late_in_the_run(**kw) -> int:
    """How many Request objects exist when 900 of 1,000 requests have finished."""
    from sim.policies.request import Request

    live = []

    def progress(_: int, done=[0]) -> None:
        done[0] += 1
        if done[0] == 900:
            gc.collect()  # garbage from earlier runs is not held by this one
            live.append(sum(type(o) is Request for o in gc.get_objects()))

    simulate(None, overrides=["workload.num_requests=1000", "workload.arrival.rate=20"],
             progress=progress, **kw)
    return live[0]


def test_a_streamed_run_holds_only_the_requests_in_flight(tmp_path):
    """What keeps memory bounded: requests are built as they arrive and dropped when they
    finish (a normal run holds all of them, with every token's timestamp, to the end)."""
    assert _live_requests_late_in_the_run() >= 1000
    assert _live_requests_late_in_the_run(stream_to=tmp_path) < 200
    assert sum(1 for _ in open(tmp_path / "requests.csv")) == 1001


def test_cli_stream_writes_the_files_and_needs_out(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "kvplan.cli.main", "simulate", "--stream", "--no-progress", "--json",
           "--set", "workload.num_requests=200"]
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 2 and "--stream: needs --out" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    ok = subprocess.run(cmd + ["--out", str(out)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["completed"] == 200 and summary["simulator"]["streamed"]
    assert {p.name for p in out.iterdir()} >= {"summary.json", "config.yaml", "requests.csv", "steps.csv"}
    assert json.loads((out / "summary.json").read_text()) == summary
