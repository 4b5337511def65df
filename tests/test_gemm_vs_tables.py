"""benchmarks/gemm_vs_tables.py: the GPU half measures only points the tables hold, and the
compare half joins them to the right rows and reports measured / table per dtype and m band."""

from __future__ import annotations

import json

import pytest

from sim.pricing.table_data import package_tables_root
from tests.benchmark_module import load_benchmark

gvt = load_benchmark("gemm_vs_tables")
pytestmark = pytest.mark.skipif(package_tables_root() is None, reason="aiconfigurator-core not installed")


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200_sxm", "b200_sxm"])
def test_every_grid_point_is_a_table_row(gpu):
    """A point the table lacks would be dropped from the comparison without a word."""
    _, table = gvt._table_rows(gpu, "vllm", "0.24.0")
    rows = {(str(d), int(m), int(n), int(k))
            for d, m, n, k in zip(table["gemm_dtype"], table["m"], table["n"], table["k"])}
    missing = [(d, m, n, k) for d in gvt.DTYPES for n, k in gvt.NK_GRID for m in gvt.M_GRID
               if (d, m, n, k) not in rows]
    assert missing == []


def test_compare_divides_by_the_row_at_the_same_shape(tmp_path):
    _, table = gvt._table_rows("h200_sxm", "vllm", "0.24.0")
    cols = zip(table["gemm_dtype"], table["m"], table["n"], table["k"], table["latency"])
    at = {int(m): float(t) for d, m, n, k, t in cols if str(d) == "bfloat16" and n == 4096 and k == 4096}
    t1, t4k = at[1], at[4096]
    measured = tmp_path / "gemm_x_measured.json"
    measured.write_text(json.dumps({"device": "hand-made", "points": [
        {"dtype": "bfloat16", "m": 1, "n": 4096, "k": 4096, "cold_ms": 2 * t1, "hot_ms": t1,
         "graph_ms": 0.5 * t1},
        {"dtype": "bfloat16", "m": 4096, "n": 4096, "k": 4096, "cold_ms": 0.5 * t4k, "hot_ms": 3 * t4k},
        {"dtype": "bfloat16", "m": 3, "n": 4096, "k": 4095, "cold_ms": 1.0, "hot_ms": 1.0},  # no such row
    ]}))
    report = gvt.compare(measured, "h200_sxm", "vllm", "0.24.0")
    assert report["joined"] == 2 and report["missing_in_table"] == 1
    by_band = {s["band"]: s for s in report["summary"]}
    assert by_band["m 1-64"]["cold_median"] == pytest.approx(2.0)
    assert by_band["m 1-64"]["hot_median"] == pytest.approx(1.0)
    assert by_band["m 1-64"]["graph_median"] == pytest.approx(0.5)
    assert by_band["m 2048-16384"]["graph_median"] is None  # measured without a graph column
    assert by_band["m 2048-16384"]["cold_median"] == pytest.approx(0.5)
    assert by_band["m 2048-16384"]["hot_median"] == pytest.approx(3.0)
    assert by_band["m 1-64"]["table_kernel"] == "torch.nn.functional.linear"
    md = (tmp_path / "gemm_x_vs_h200_sxm_vllm_0.24.0.md").read_text()
    assert "| bfloat16 | m 1-64 | 1 | 2.00 [2.00-2.00] | 1.00 | 0.50 |" in md
    assert json.loads((tmp_path / "gemm_x_vs_h200_sxm_vllm_0.24.0.json").read_text())["joined"] == 2
