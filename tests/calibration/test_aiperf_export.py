"""aiperf and genai-perf profile exports read by ``kvplan validate --real``: the load in its mode,
the tool's pool of reused prompts and its warm-up replayed, malformed fields as one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.real_runs import RealRunError, read_run
from calibration.validate_real import compare_run
from tests.calibration.helpers import run_kvplan
from tests.calibration.test_real_runs import _roofline

ROOFLINE = ["cost_model.source=roofline"] if _roofline() else []


def aiperf_export(folder: Path, *, concurrency=8, requests=64, warmup=16, entries=None, isl=600, osl=32,
                  rate=None, ttft_ms=40.0, e2e_ms=500.0, **config) -> Path:
    """An aiperf ``profile_export_aiperf.json``: metric blocks by tag, ``input_config`` nested and
    holding only what was set (aiperf dumps it with ``exclude_unset``)."""
    folder.mkdir(parents=True, exist_ok=True)
    loadgen = {"request_count": requests, "warmup_request_count": warmup}
    if concurrency is not None:
        loadgen["concurrency"] = concurrency
    if rate is not None:
        loadgen["request_rate"] = rate
    inp: dict = {"prompt": {"input_tokens": {"mean": isl, "stddev": 0}, "output_tokens": {"mean": osl}},
                 "random_seed": 100, **config}
    if entries is not None:
        inp["conversation"] = {"num_dataset_entries": entries}
    doc = {"schema_version": "1.0", "aiperf_version": "0.4.0",
           "time_to_first_token": {"unit": "ms", "avg": ttft_ms, "p50": ttft_ms, "p90": 1.5 * ttft_ms, "p99": 2 * ttft_ms},
           "request_latency": {"unit": "ms", "avg": e2e_ms, "p90": 1.1 * e2e_ms, "p99": 1.2 * e2e_ms},
           "request_throughput": {"unit": "requests/sec", "avg": 15.0},
           "output_sequence_length": {"unit": "tokens", "avg": float(osl)},
           "input_sequence_length": {"unit": "tokens", "avg": float(isl)},
           "request_count": {"unit": "requests", "avg": requests},
           "input_config": {"endpoint": {"model_names": ["meta-llama/Llama-2-7b-hf"], "type": "chat",
                                         "streaming": True},
                            "input": inp, "loadgen": loadgen}}
    path = folder / "profile_export_aiperf.json"
    path.write_text(json.dumps(doc))
    return path


def genai_perf_export(path: Path) -> Path:
    """genai-perf's ``profile_export_genai_perf.json``: the same metric blocks, ``input_config``
    flat (as triton-inference-server/perf_analyzer#298 shows one), a measurement window (request
    count 0)."""
    doc = {"request_throughput": {"unit": "requests/sec", "avg": 17.2},
           "request_latency": {"unit": "ms", "avg": 5767.4, "p90": 5882.4, "p99": 5910.2},
           "time_to_first_token": {"unit": "ms", "avg": 184.6, "p90": 302.8, "p99": 425.0},
           "output_sequence_length": {"unit": "tokens", "avg": 500.0},
           "input_sequence_length": {"unit": "tokens", "avg": 200.9},
           "input_config": {"model": ["meta-llama/Llama-2-7b-hf"], "streaming": True, "num_dataset_entries": 100,
                            "output_tokens_mean": 500, "output_tokens_stddev": 0, "random_seed": 0,
                            "request_count": 0, "synthetic_input_tokens_mean": 200,
                            "synthetic_input_tokens_stddev": 20, "warmup_request_count": 0, "concurrency": 100,
                            "measurement_interval": 10000, "request_rate": None}}
    path.write_text(json.dumps(doc))
    return path


def test_aiperf_export_is_a_closed_loop_over_aiperfs_default_pool(tmp_path):
    run = read_run(aiperf_export(tmp_path / "concurrency_8").parent)  # the artifact folder
    assert run.format == "aiperf" and run.model == "meta-llama/Llama-2-7b-hf"
    (stage,) = run.stages
    assert (stage.process, stage.concurrency, stage.num_requests) == ("closed", 8, 64)
    assert run.warmup is not None and (run.warmup.process, run.warmup.num_requests) == ("closed", 16)
    # Nothing set: aiperf's defaults, 100 entries drawn in shuffle order.
    assert (run.prompt_pool.entries, run.prompt_pool.sampling) == (100, "shuffle")
    assert run.pool_lens == ([600] * 100, [32] * 100)
    (m,) = run.measured
    assert m.ttft_ms == {"mean": 40.0, "p90": 60.0, "p99": 80.0}
    assert m.tpot_ms == pytest.approx((500.0 - 40.0) / 31)


def test_genai_perf_export_is_flat_and_steps_through_its_entries(tmp_path):
    run = read_run(genai_perf_export(tmp_path / "profile_export_genai_perf.json"))
    assert run.format == "genai-perf"
    assert (run.stages[0].process, run.stages[0].concurrency) == ("closed", 100)
    assert run.stages[0].num_requests == 1000  # a measurement window: 10 x concurrency replayed
    assert (run.prompt_pool.entries, run.prompt_pool.sampling) == (100, "sequential")
    prompts, outputs = run.pool_lens
    assert set(outputs) == {500}
    assert len(set(prompts)) > 10 and abs(np.mean(prompts) - 200) < 8  # normal(200, 20) per entry
    assert run.warmup is None


def test_request_rate_with_a_cap_and_aiperfs_arrival_patterns(tmp_path):
    run = read_run(aiperf_export(tmp_path / "r", rate=4.0, concurrency=6))
    (stage,) = run.stages
    assert (stage.process, stage.rate, stage.concurrency, stage.cv) == ("poisson", 4.0, 6, 1.0)
    path = aiperf_export(tmp_path / "g", rate=4.0, concurrency=None)
    doc = json.loads(path.read_text())
    doc["input_config"]["loadgen"].update(arrival_pattern="gamma", arrival_smoothness=4.0)
    path.write_text(json.dumps(doc))
    (stage,) = read_run(path).stages
    assert (stage.process, stage.cv, stage.concurrency) == ("poisson", 0.5, None)  # shape 4: CV 1/2
    doc["input_config"]["loadgen"]["arrival_pattern"] = "constant"
    path.write_text(json.dumps(doc))
    assert read_run(path).stages[0].process == "constant"


def test_the_pool_and_warm_up_are_replayed_and_only_the_measured_requests_scored(tmp_path):
    # One client, a pool of 4 entries and 8 warm-up requests: every measured request repeats an
    # entry the warm-up cached, so the whole prompt but its last block is a hit. A pool as large
    # as the run sends every prompt fresh.
    small = read_run(aiperf_export(tmp_path / "a", concurrency=1, requests=12, warmup=8, entries=4))
    large = read_run(aiperf_export(tmp_path / "b", concurrency=1, requests=12, warmup=8, entries=20))
    cs, cl = (compare_run(r, hardware="h100-sxm", overrides=ROOFLINE) for r in (small, large))
    assert [len(c.stages) for c in (cs, cl)] == [1, 1]
    assert cs.summary["completed"] == 20  # the warm-up simulated too
    assert cs.summary["kv_cache"]["prefix_cache_hit_rate"] == pytest.approx(16 * (599 // 16 * 16) / (20 * 600))
    assert cl.summary["kv_cache"]["prefix_cache_hit_rate"] == 0
    hit, fresh = cs.stages[0].predicted["mean_ttft_ms"], cl.stages[0].predicted["mean_ttft_ms"]
    assert hit < 0.8 * fresh
    assert any("warm-up" in n for n in cs.notes)


def test_validate_real_reads_an_aiperf_artifact_folder(tmp_path, capsys):
    path = aiperf_export(tmp_path / "concurrency_8").parent
    out = tmp_path / "out"
    code, stdout, err = run_kvplan(["validate", "--real", str(path), "--out", str(out), "--hardware", "h100-sxm",
                                    *_roofline()], capsys)
    assert code == 0, err
    doc = json.loads((out / "validation.json").read_text())
    assert doc["source"]["format"] == "aiperf"
    assert "stage0_mean_ttft_ms" in [m["name"] for m in doc["metrics"]]
    assert "pool of 100 entries" in stdout


def test_a_sweeps_folder_is_one_run_per_concurrency_in_numeric_order(tmp_path, capsys):
    # AIConfigurator's bench_run.sh: artifacts/concurrency_<N>/ per point of the sweep.
    for n in (16, 2, 8):
        aiperf_export(tmp_path / "artifacts" / f"concurrency_{n}", concurrency=n, requests=4 * n, warmup=n)
    from calibration.real_runs import expand_run_paths

    runs = expand_run_paths([tmp_path / "artifacts"])
    assert [p.name for p in runs] == ["concurrency_2", "concurrency_8", "concurrency_16"]
    out = tmp_path / "out"
    code, stdout, err = run_kvplan(["validate", "--real", str(tmp_path / "artifacts"), "--out", str(out),
                                    "--hardware", "h100-sxm", *_roofline()], capsys)
    assert code == 0, err
    for n in (2, 8, 16):
        doc = json.loads((out / f"concurrency_{n}" / "validation.json").read_text())
        assert doc["source"]["stages"][0]["concurrency"] == n


@pytest.mark.parametrize("edit, needle", [
    (lambda d: d.pop("time_to_first_token"), "time_to_first_token.avg: missing"),
    (lambda d: d["time_to_first_token"].update(unit="tokens"), "time_to_first_token.unit"),
    (lambda d: d["input_config"]["loadgen"].pop("concurrency"), "neither concurrency nor request_rate"),
    (lambda d: d["input_config"]["input"].update(dataset_sampling_strategy="lottery"), "dataset_sampling_strategy"),
    (lambda d: d["input_config"]["loadgen"].update(concurrency=-2), "input_config concurrency"),
    (lambda d: d["request_latency"].update(avg="slow"), "request_latency.avg"),
])
def test_malformed_exports_are_one_line_errors(tmp_path, capsys, edit, needle):
    path = aiperf_export(tmp_path / "x")
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(RealRunError, match=needle.replace(".", r"\.")):
        read_run(path)
    code, _, err = run_kvplan(["validate", "--real", str(path), "--out", str(tmp_path / "o"),
                               "--hardware", "h100-sxm"], capsys)
    assert code != 0 and needle in err and len(err.strip().splitlines()) == 1
