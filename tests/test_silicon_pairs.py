"""``benchmarks/silicon_pairs.py``: rows of one silicon point under different settings paired,
copies of one measurement counted once, the same settings measured twice left out, measured and
simulated effects as B / A, and the summary's effect error and direction by hand."""

from __future__ import annotations

import json
import math

import pytest

from tests.benchmark_module import load_benchmark

sp = load_benchmark("silicon_pairs")


def result(rid: str, ttft: float, tpot: float, sim_ttft: float, sim_tpot: float, clients: int = 4,
           engine: dict | None = None, source: str = "a.csv") -> dict:
    """One replayed row of ``silicon_matrix.py``'s JSON, as much of it as the pairing reads."""
    return {"id": rid, "status": "replayed", "system": "b200_sxm", "model": "m/M", "precision": "fp4",
            "source": source, "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot,
            "sim_ttft_ms": sim_ttft, "sim_tpot_ms": sim_tpot,
            "config": {"model": "m/M", "engine": engine or {"name": "vllm", "version": "0.17.0"},
                       "parallel": {"tensor_parallel_size": 4, "pipeline_parallel_size": 1,
                                    "data_parallel_size": 1, "enable_expert_parallel": False},
                       "workload": {"arrival": {"process": "closed", "concurrency": clients},
                                    "input_len": {"mean": 921.5}, "output_len": {"mean": 921.5}}}}


GRAPHS = {"name": "vllm", "version": "0.17.0", "max_cudagraph_capture_size": 2048}


def test_pairs_are_one_point_under_two_settings_each_measurement_once():
    rows = [
        result("a", 170.0, 8.4, 83.0, 8.5),                          # default capture sizes
        result("b", 170.0, 8.4, 83.0, 8.5, source="b.csv"),          # a copy of a, filed twice
        result("c", 81.5, 8.2, 83.5, 8.5, engine=GRAPHS),            # capture up to 2048
        result("d", 160.0, 8.0, 83.0, 8.5),                          # a's settings, remeasured
        result("e", 90.0, 10.0, 85.0, 10.2, clients=8, engine=GRAPHS),  # another point
        {"id": "f", "status": "skipped"},
    ]
    pairs, conflicts = sp.find_pairs(rows)
    # a-c and c-d: the copy b and the repeat a-d (same settings) are not pairs; e has no partner.
    assert [(p["a"], p["b"]) for p in pairs] == [("a", "c"), ("c", "d")] and conflicts == []
    ac = pairs[0]
    assert ac["changed"] == {"engine.max_cudagraph_capture_size": [None, 2048]}
    assert ac["measured_ttft_ratio"] == pytest.approx(81.5 / 170.0)
    assert ac["simulated_ttft_ratio"] == pytest.approx(83.5 / 83.0)
    assert ac["measured_tpot_ratio"] == pytest.approx(8.2 / 8.4)
    assert sp.change_kind(ac) == "engine.max_cudagraph_capture_size"


def test_one_measurement_under_two_configs_is_a_conflict_not_a_pair():
    rows = [result("a", 170.0, 8.4, 83.0, 8.5), result("z", 170.0, 8.4, 40.0, 8.5, engine=GRAPHS, source="b.csv")]
    pairs, conflicts = sp.find_pairs(rows)
    assert pairs == [] and [(c["a"], c["b"]) for c in conflicts] == [("a", "z")]
    assert conflicts[0]["simulated_ttft_ratio"] == pytest.approx(40.0 / 83.0)


def test_effect_summary_by_hand():
    pairs = [{"measured_ttft_ratio": 0.5, "simulated_ttft_ratio": 1.0,
              "measured_tpot_ratio": 1.2, "simulated_tpot_ratio": 1.1},
             {"measured_ttft_ratio": 2.0, "simulated_ttft_ratio": 1.5,
              "measured_tpot_ratio": 1.02, "simulated_tpot_ratio": 0.9}]
    s = sp.effect_summary(pairs, min_change=0.10)
    assert s["pairs"] == 2
    assert s["ttft_measured_effect"] == pytest.approx(math.log(2.0))
    assert s["ttft_simulated_effect"] == pytest.approx(math.log(1.5) / 2)
    assert s["ttft_effect_error"] == pytest.approx((math.log(2.0) + math.log(2.0 / 1.5)) / 2)
    # TTFT: both changes exceed 10%; kvplan predicts no change for the first (not the right
    # direction) and the right one for the second. TPOT: only the 20% change counts.
    assert (s["ttft_direction_pairs"], s["ttft_direction_agreement"]) == (2, 0.5)
    assert (s["tpot_direction_pairs"], s["tpot_direction_agreement"]) == (1, 1.0)
    empty = sp.effect_summary([], 0.1)
    assert empty["pairs"] == 0 and empty["ttft_effect_error"] is None and empty["ttft_direction_agreement"] is None


def test_the_script_writes_its_report_and_says_a_bad_file_in_one_line(tmp_path, capsys):
    matrix = tmp_path / "m.json"
    matrix.write_text(json.dumps({"rows": [result("a", 170.0, 8.4, 83.0, 8.5),
                                           result("c", 81.5, 8.2, 83.5, 8.5, engine=GRAPHS)]}))
    assert sp.main(["--matrix", str(matrix), "--out", str(tmp_path / "pairs")]) == 0
    report = json.loads((tmp_path / "pairs.json").read_text())
    assert report["summary"]["all"]["pairs"] == 1 and len(report["pairs"]) == 1
    text = (tmp_path / "pairs.md").read_text()
    assert "engine.max_cudagraph_capture_size default -> 2048" in text
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert sp.main(["--matrix", str(bad), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and str(bad) in err and "\n" not in err


def test_a_copy_is_equal_to_the_files_rounding_and_a_rerun_is_not():
    """One rule for "the same measurement" (``silicon_sample.same_means``), used by the pairing,
    the matrix's copies and its repeat spread: a mean written to 2 decimals in one file and to
    the float's last digit in another is a copy; two runs 0.05 ms (0.08%) apart on TTFT are
    two measurements (the CSV's closest such runs), so they pair."""
    copy = [result("a", 1728.9347790225293, 48.2201591041891, 900.0, 40.0),
            result("b", 1728.93, 48.22, 500.0, 40.0, engine=GRAPHS, source="b.csv")]
    pairs, conflicts = sp.find_pairs(copy)
    assert pairs == [] and [(c["a"], c["b"]) for c in conflicts] == [("a", "b")]
    rerun = [result("a", 61.93078607539064, 8.365533667291494, 60.0, 8.0),
             result("b", 61.98165394962416, 8.373296350709891, 60.0, 8.0, engine=GRAPHS, source="b.csv")]
    pairs, conflicts = sp.find_pairs(rerun)
    assert [(p["a"], p["b"]) for p in pairs] == [("a", "b")] and conflicts == []
