"""benchmarks/public_vllm_runs.py: the published measurements it carries are consistent with the
collection's layout, and each run it builds reads back, through the user's own path, as the
server the collection's manifest describes (a data-parallel entry as servers behind a router)."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.real_runs import read_run
from calibration.validate_real import build_config
from tests.benchmark_module import load_benchmark

bench = load_benchmark("public_vllm_runs")
needs_shared = pytest.mark.skipif(not bench.SHARED_RUNS.is_dir(), reason="needs ../shared/real_runs")
STAGES = {"general": 2, "codegen": 2, "roleplay": 1, "reasoning": 1}


def test_every_run_has_a_workload_a_stage_count_and_no_shared_twin():
    names = [r.name for r in bench.RUNS]
    assert len(names) == len(set(names))
    for run in bench.RUNS:
        base = run.workload.removesuffix("-lite")
        assert base in bench.TEMPLATES and base in bench.OUTPUT_LEN
        assert len(run.stages) == STAGES[base], run.name
        assert all(0 < ttft < e2e for ttft, e2e in run.stages), run.name  # TTFT is part of E2E
        assert run.id == int(run.name.split("-")[0])
    # The shared runs' ids (2, 3, 6, 7, 9-12) are sim_vs_real_vllm.py's, not repeated here.
    assert not {r.id for r in bench.RUNS} & {2, 3, 6, 7, 9, 10, 11, 12}


def test_summary_scores_only_stages_not_overloaded_and_counts_detection():
    rows = bench.score(bench.RUNS[0], [
        {"overloaded": False, "mean_ttft_ms": 50.0, "mean_e2el_ms": 3000.0, "mean_tpot_ms": 12.0},
        {"overloaded": True, "mean_ttft_ms": 60.0, "mean_e2el_ms": 4000.0, "mean_tpot_ms": 15.0}])
    first = rows[0]
    real_tpot = (3311.6 - 41.68) / 247
    assert first["mean_tpot_ms"]["real"] == pytest.approx(real_tpot)
    assert first["mean_e2el_ms"]["error"] == pytest.approx(3000.0 / 3311.6 - 1)
    overloaded = {**rows[1], "overloaded_real": True}
    s = bench.summarise([first, overloaded])["all"]
    assert s["stages"] == 1 and s["overloaded_real"] == 1 and s["overload_predicted"] == 1
    assert s["mean_e2el_ms"]["mape"] == pytest.approx(abs(3000.0 / 3311.6 - 1))
    assert bench.summarise([first, rows[1]])["all"]["false_overload"] == [f"{first['run']} stage 1"]


@needs_shared
def test_a_built_run_reads_back_as_the_manifest_server(tmp_path):
    run = next(r for r in bench.RUNS if r.name.startswith("32-mixtral"))  # TP 2, dp 2, H100
    folder = bench.build_folder(run, tmp_path / "ground_truth", None)
    real = read_run(folder)
    assert real.model == run.model and real.hardware == "h100-sxm"
    assert real.server["tensor_parallel_size"] == 2 and real.server["max_num_batched_tokens"] == 2048
    assert real.server["num_replicas"] == 2 and "data_parallel_size" not in real.server
    config, _ = build_config(real)
    assert config["parallel"]["num_replicas"] == 2
    assert [s.rate for s in real.stages] == [8.0, 20.0]


@needs_shared
def test_lite_rates_replace_both_stage_rates(tmp_path):
    run = next(r for r in bench.RUNS if r.workload == "general-lite" and r.hw == "L40S")
    real = read_run(bench.build_folder(run, tmp_path / "gt", (2.4, 6.0)))
    assert [s.rate for s in real.stages] == [2.4, 6.0] and real.hardware == "l40s"


@needs_shared
def test_one_run_end_to_end(tmp_path: Path):
    out = tmp_path / "r.json"
    assert bench.main(["--only", "26-llama", "--stage-seconds", "20", "--out", str(out)]) == 0
    import json

    res = json.loads(out.read_text())
    assert [r["stage"] for r in res["stages"]] == [0, 1]
    assert res["summary"]["all"]["stages"] == 2 and not res["skipped"]
    for row in res["stages"]:
        assert row["mean_ttft_ms"]["predicted"] > 0 and row["mean_e2el_ms"]["predicted"] > row["mean_ttft_ms"]["predicted"]
