"""Closed-loop and capped real runs read and replayed in their mode (``kvplan validate --real``):
vllm bench serve with ``max_concurrency`` (an infinite rate: a closed loop), GuideLLM's
``synchronous`` / ``concurrent`` strategies and ``max_concurrency`` caps, inference-perf's
``concurrent`` load; malformed fields are one-line errors naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.real_runs import RealRunError, read_run
from calibration.validate_real import compare_run
from sim.workload.shared_prefix import Stage, stage_clients, staged_requests
from tests.calibration.test_real_runs import _roofline, make_inference_perf, make_vllm_bench

ROOFLINE = ["cost_model.source=roofline"] if _roofline() else []


def vllm_bench(path: Path, rate, cap) -> Path:
    make_vllm_bench(path)
    doc = json.loads(path.read_text())
    doc.update(request_rate=rate, max_concurrency=cap)
    path.write_text(json.dumps(doc))
    return path


def guidellm(path: Path, strategies: list[dict]) -> Path:
    """A GuideLLM 0.8 report: benchmarks[].config.strategy as its SchedulingStrategy models
    dump them (type_, streams, rate, max_concurrency), metrics.*.successful."""
    def dist(mean):
        return {"successful": {"mean": mean, "median": mean, "count": 10,
                               "percentiles": {"p50": mean, "p90": mean * 1.1, "p99": mean * 1.3}}}

    def bench(strategy):
        return {"type_": "generative_benchmark", "duration": 8.0,
                "config": {"strategy": strategy, "backend": {"model": "meta-llama/Llama-2-7b-hf"}},
                "metrics": {"request_totals": {"successful": 10, "errored": 0, "incomplete": 0, "total": 10},
                            "request_latency": dist(0.4), "time_to_first_token_ms": dist(30.0),
                            "time_per_output_token_ms": dist(9.0), "prompt_token_count": dist(150.0),
                            "output_token_count": dist(40.0), "requests_per_second": dist(1.2)}}

    path.write_text(json.dumps({"metadata": {"version": 2}, "benchmarks": [bench(s) for s in strategies]}))
    return path


def inference_perf_concurrent(root: Path, levels=((2, 12), (4, 20))) -> Path:
    """An inference-perf run with ``load.type: concurrent`` (stages of concurrency_level and
    num_requests, as inference_perf/config.py's ConcurrentLoadStage)."""
    folder = make_inference_perf(root, stages=((2, 6),) * len(levels))
    profile = json.loads((folder / "profile.yaml").read_text())
    profile["load"] = {"type": "concurrent", "stages": [{"concurrency_level": c, "num_requests": n}
                                                       for c, n in levels]}
    (folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    for i, (c, n) in enumerate(levels):
        f = folder / "results" / f"stage_{i}_lifecycle_metrics.json"
        d = json.loads(f.read_text())
        d["load_summary"]["count"] = n
        d["successes"]["count"] = n
        d["successes"]["throughput"]["requests_per_sec"] = 4.0
        f.write_text(json.dumps(d))
    return folder


# --- readers ---------------------------------------------------------------------------------


def test_vllm_bench_max_concurrency(tmp_path):
    run = read_run(vllm_bench(tmp_path / "closed.json", "inf", 4))
    st = run.stages[0]
    assert (st.process, st.concurrency, st.num_requests, st.duration_s) == ("closed", 4, 12, 5.0)
    assert any("closed loop of 4 clients" in n for n in run.notes)
    capped = read_run(vllm_bench(tmp_path / "capped.json", 3.0, 2)).stages[0]
    assert (capped.process, capped.rate, capped.concurrency) == ("poisson", 3.0, 2)
    assert read_run(vllm_bench(tmp_path / "open.json", 3.0, None)).stages[0].concurrency is None


def test_guidellm_closed_loop_strategies(tmp_path):
    run = read_run(guidellm(tmp_path / "g.json", [
        {"type_": "synchronous"}, {"type_": "concurrent", "streams": 8, "rampup_duration": 0.0},
        {"type_": "throughput", "max_concurrency": 16}, {"type_": "throughput"},
        {"type_": "constant", "rate": 2.0, "max_concurrency": 3}, {"type_": "poisson", "rate": 1.0}]))
    got = [(s.process, s.concurrency, s.num_requests) for s in run.stages]
    assert got == [("closed", 1, 10), ("closed", 8, 10), ("closed", 16, 10), ("burst", None, 10),
                   ("constant", 3, 10), ("poisson", None, 10)]
    assert run.stages[0].duration_s == 8.0 and run.stages[0].rate == pytest.approx(10 / 8)
    assert not any("skipped" in n for n in run.notes)


def test_inference_perf_concurrent_load(tmp_path):
    run = read_run(inference_perf_concurrent(tmp_path))
    got = [(s.process, s.concurrency, s.num_requests, s.duration_s) for s in run.stages]
    assert got == [("closed", 2, 12, 3.0), ("closed", 4, 20, 5.0)]  # duration: completed / req/s


@pytest.mark.parametrize("kind,needle", [
    ("vllm", "max_concurrency: expected an integer >= 1, got 0"),
    ("guidellm", "benchmarks[1].config.strategy.streams: expected an integer >= 1, got None"),
    ("guidellm-cap", "benchmarks[0].config.strategy.max_concurrency: expected an integer >= 1, got 'x'"),
    ("inference-perf", "load.stages[1].concurrency_level: expected an integer >= 1, got None"),
])
def test_malformed_closed_loop_fields_are_one_line_errors(tmp_path, kind, needle):
    if kind == "vllm":
        path, name = vllm_bench(tmp_path / "b.json", "inf", 0), "b.json"
    elif kind == "guidellm":
        path, name = guidellm(tmp_path / "g.json", [{"type_": "synchronous"}, {"type_": "concurrent"}]), "g.json"
    elif kind == "guidellm-cap":
        path, name = guidellm(tmp_path / "g.json", [{"type_": "poisson", "rate": 1.0, "max_concurrency": "x"}]), "g.json"
    else:
        path = inference_perf_concurrent(tmp_path)
        profile = yaml.safe_load((path / "profile.yaml").read_text())
        del profile["load"]["stages"][1]["concurrency_level"]
        (path / "profile.yaml").write_text(yaml.safe_dump(profile))
        name = "profile.yaml"
    with pytest.raises(RealRunError) as err:
        read_run(path)
    msg = str(err.value)
    assert needle in msg and name in msg and "\n" not in msg


# --- replay ----------------------------------------------------------------------------------


def test_stage_clients_cover_each_limited_stage():
    stages = [Stage(rate=5.0, duration_s=4.0, num_requests=20, process="poisson", concurrency=3),
              Stage(rate=2.0, duration_s=6.0, num_requests=12),
              Stage(rate=2.0, duration_s=5.0, num_requests=10, process="closed", concurrency=2)]
    reqs, stage_of, starts = staged_requests(stages, [100] * 42, [20] * 42, seed=1)
    groups = stage_clients(stages, stage_of)
    assert [(g.first, g.last, g.limit, g.closed) for g in groups] == [(0, 20, 3, False), (32, 42, 2, True)]
    assert all(r.arrival_time == starts[2] for r in reqs[32:])  # a closed stage: all ready at its start
    assert np.bincount(stage_of).tolist() == [20, 12, 10]


def _max_in_flight(reqs) -> int:
    from tests.loadgen.test_concurrency import most_in_flight

    return most_in_flight([(r.arrival_time, r.finish_time) for r in reqs])


@pytest.mark.parametrize("kind", ["vllm", "guidellm", "inference-perf"])
def test_closed_loop_runs_are_replayed_in_their_mode(tmp_path, kind):
    if kind == "vllm":
        run = read_run(vllm_bench(tmp_path / "b.json", "inf", 3))
        limits = [3]
    elif kind == "guidellm":
        run = read_run(guidellm(tmp_path / "g.json", [{"type_": "synchronous"},
                                                        {"type_": "concurrent", "streams": 4}]))
        limits = [1, 4]
    else:
        run = read_run(inference_perf_concurrent(tmp_path))
        limits = [2, 4]
    cmp = compare_run(run, hardware="h100-sxm", overrides=ROOFLINE)
    assert [s.stage.concurrency for s in cmp.stages] == limits
    done = cmp.summary["completed"]
    assert done == sum(s.stage.num_requests for s in cmp.stages)
    src = cmp.source()
    assert [st["process"] for st in src["stages"]] == ["closed"] * len(limits)
    assert "closed loop" in src["workload"]
    for s in cmp.stages:
        assert s.predicted["mean_ttft_ms"] is not None and s.scored


def test_a_closed_stage_keeps_its_clients_in_the_simulation(tmp_path):
    """The simulated requests of a synchronous stage never overlap; those of a 4-stream stage
    reach 4 in flight and no more; TTFT is timed from each send."""
    from sim.api import simulate

    stages = [Stage(rate=1.0, duration_s=10.0, num_requests=10, process="closed", concurrency=1),
              Stage(rate=1.0, duration_s=10.0, num_requests=24, process="closed", concurrency=4)]
    reqs, stage_of, _ = staged_requests(stages, [300] * 34, [30] * 34, seed=0)
    cfg = {"model": "llama-2-7b", "hardware": "h100-sxm"}
    res = simulate(cfg, overrides=ROOFLINE, requests=reqs, clients=stage_clients(stages, stage_of))
    done = res.requests
    assert _max_in_flight(done[:10]) == 1 and _max_in_flight(done[10:]) == 4
    assert all(r.token_times[0] > r.arrival_time for r in done)
    assert "max_concurrency" not in res.summary  # two groups: no single cap for the run
