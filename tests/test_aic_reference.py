"""benchmarks/aic_reference.py: AIConfigurator's own predictions of its silicon rows against
kvplan's replay of the same rows. The compare step is tested on hand-made reports (errors by
hand); the predict step needs the aiconfigurator package, which kvplan does not install, so here
it must refuse in one line."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_module import load_benchmark

ref = load_benchmark("aic_reference")


def _kv(id_, system, ttft, tpot, sim_ttft, sim_tpot, status="replayed"):
    return {"id": id_, "system": system, "model": "m", "precision": "fp8", "status": status,
            "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot, "sim_ttft_ms": sim_ttft, "sim_tpot_ms": sim_tpot}


def test_rows_are_paired_by_id_and_scored_against_the_measurement():
    kv = [_kv("a", "h100_sxm", 100.0, 10.0, 110.0, 9.0),
          _kv("b", "b200_sxm", 200.0, 20.0, 150.0, 25.0),
          _kv("c", "b200_sxm", 50.0, 5.0, None, None, status="skipped"),
          _kv("d", "b200_sxm", 50.0, 5.0, 60.0, 6.0)]
    aic = [{"id": "a", "status": "predicted", "aic_ttft_ms": 80.0, "aic_tpot_ms": 12.0},
           {"id": "b", "status": "predicted", "aic_ttft_ms": 300.0, "aic_tpot_ms": 20.0},
           {"id": "c", "status": "predicted", "aic_ttft_ms": 50.0, "aic_tpot_ms": 5.0},
           {"id": "d", "status": "failed", "error": "PerfDataNotAvailableError: MoE data missing"}]
    pairs = ref.paired_rows(kv, aic)
    assert [p["id"] for p in pairs] == ["a", "b"]  # c: kvplan skipped it; d: AIC refused it
    s = ref.error_stats(pairs)
    # a: kvplan +10% / -10%, AIC -20% / +20%; b: kvplan -25% / +25%, AIC +50% / 0%.
    assert s["kvplan_ttft_mape"] == pytest.approx(0.175) and s["kvplan_tpot_mape"] == pytest.approx(0.175)
    assert s["aic_ttft_mape"] == pytest.approx(0.35) and s["aic_tpot_mape"] == pytest.approx(0.10)
    assert s["kvplan_ttft_bias"] == pytest.approx(-0.075) and s["aic_ttft_bias"] == pytest.approx(0.15)


def test_compare_writes_the_table_per_gpu(tmp_path):
    kv_report = {"backend": "vllm", "command": "silicon_matrix.py", "rows": [
        _kv("a", "h100_sxm", 100.0, 10.0, 110.0, 9.0), _kv("b", "b200_sxm", 200.0, 20.0, 150.0, 25.0)]}
    aic_report = {"aiconfigurator_version": "0.12.0", "estimator": "cli_estimate", "rows": [
        {"id": "a", "status": "predicted", "aic_ttft_ms": 80.0, "aic_tpot_ms": 12.0},
        {"id": "b", "status": "failed", "error": "ValueError: Parallelism width mismatch"}]}
    kv, aic, out = tmp_path / "kv.json", tmp_path / "aic.json", tmp_path / "cmp.md"
    kv.write_text(json.dumps(kv_report))
    aic.write_text(json.dumps(aic_report))
    assert ref.main(["compare", "--kvplan", str(kv), "--aic", str(aic), "--out", str(out)]) == 0
    md = out.read_text()
    assert "| **all** | 1 | 10.0% | 20.0% | 10.0% | 20.0% |" in md
    assert "| h100_sxm | 1 |" in md and "b200_sxm" not in md.split("refusals")[0].split("By GPU:")[1]
    assert "Parallelism width mismatch" in md


def test_compare_and_predict_refuse_in_one_line(tmp_path, capsys):
    assert ref.main(["compare", "--kvplan", str(tmp_path / "none.json"), "--aic", str(tmp_path / "x.json")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    (tmp_path / "kv.json").write_text("{}")
    assert ref.main(["compare", "--kvplan", str(tmp_path / "kv.json"), "--aic", str(bad)]) == 2
    assert "not JSON" in capsys.readouterr().err
    try:
        import aiconfigurator  # noqa: F401
    except ImportError:
        assert ref.main(["predict", "--limit", "1"]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "aiconfigurator package" in err


def test_estimator_arguments_are_aics_own():
    row = {"id": "r", "model_path": "openai/gpt-oss-120b", "system": "b200_sxm", "backend": "vllm",
           "backend_version": "0.15.1", "isl": "1024", "osl": "8192", "gemm_quant_mode": "",
           "moe_quant_mode": "w4a16_mxfp4", "batch_size": "64.0", "tp_size": "2", "pp_size": "1",
           "attention_dp_size": "", "moe_tp_size": "2", "moe_ep_size": "1"}
    args = ref.estimate_args(row)
    assert args == {"model_path": "openai/gpt-oss-120b", "system_name": "b200_sxm", "mode": "agg",
                    "backend_name": "vllm", "backend_version": "0.15.1", "isl": 1024, "osl": 8192,
                    "gemm_quant_mode": None, "moe_quant_mode": "w4a16_mxfp4", "batch_size": 64,
                    "tp_size": 2, "pp_size": 1, "moe_tp_size": 2, "moe_ep_size": 1}


def test_a_renamed_checkpoint_goes_by_the_name_the_package_ships():
    """Meta renamed Meta-Llama-3.1-70B to Llama-3.1-70B; the package ships the config under the
    old name, so the estimator gets that (it would otherwise try to download the config)."""
    row = {"id": "r", "model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm", "backend": "vllm",
           "backend_version": "", "isl": "1024", "osl": "128", "batch_size": "8", "tp_size": "4"}
    args = ref.estimate_args(row)
    assert args["model_path"] == "meta-llama/Meta-Llama-3.1-70B" and args["backend_version"] is None
