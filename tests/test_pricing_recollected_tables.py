"""MLA module rows that predate AIConfigurator's fused-op collector give way to re-collected ones.

What a user relies on: Kimi-K2.5 / DeepSeek on B300 is priced from MLA rows that time what
serving runs. The 0.24 MLA module folders of B300, GB200 and GB300 ran eager norm kernels that
serving never runs (about twice the re-collected rows at small batches; B200's folder says so
in its ``collection_meta.yaml``); B200's 0.24 and GB300's 0.27 were re-collected. A GPU reads
its own re-collected rows first, then its same-die twin's (GB300 for B300, B200 for GB200);
a GPU with neither (H100, H200) keeps its rows, less what the legacy collector adds to a decode
row as measured on a GPU that has both collections (GB300's 0.24 and 0.27).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.catalog.engines import get_engine
from sim.pricing import make_pricer, table_data
from sim.pricing.table_data import (collector_pair, legacy_collector_overhead, read_columns,
                                     recollected, recollected_file)

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")
TABLE = "mla_generation_module_perf"


def _folder(root: Path, gpu: str, version: str, meta: str) -> Path:
    d = root / gpu / "mla" / "vllm" / version
    d.mkdir(parents=True)
    (d / f"{TABLE}.parquet").write_bytes(b"")
    if meta:
        (d / "collection_meta.yaml").write_text(meta)
    return d


LEGACY = f"provenance: legacy\ntables:\n  {TABLE}:\n    status: complete\n"
FIXED_NOTE = f"provenance: legacy\ntables:\n  {TABLE}:\n    norm_dispatch: vllm_c_eager_surrogate\n"
FIXED_LOCAL = f"provenance: local\ntables:\n  {TABLE}:\n    collector_ref: 9dc4e14\n"


def test_recollected_reads_the_collection_note(tmp_path):
    assert not recollected(_folder(tmp_path, "a", "0.24.0", LEGACY), TABLE)
    assert recollected(_folder(tmp_path, "b", "0.24.0", FIXED_NOTE), TABLE)
    assert recollected(_folder(tmp_path, "c", "0.27.0", FIXED_LOCAL), TABLE)
    assert not recollected(_folder(tmp_path, "d", "0.24.0", ""), TABLE)  # no note at all
    assert not recollected(_folder(tmp_path, "e", "0.24.0", FIXED_LOCAL), "other_table")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "collection_meta.yaml").write_text("tables: [unclosed")
    assert not recollected(tmp_path / "f", TABLE)  # unreadable: treated as not re-collected


def test_recollected_file_prefers_the_gpu_then_its_twin(tmp_path):
    _folder(tmp_path, "b300_sxm", "0.24.0", LEGACY)
    _folder(tmp_path, "gb300", "0.24.0", LEGACY)
    _folder(tmp_path, "gb300", "0.27.0", FIXED_LOCAL)
    path, label = recollected_file(tmp_path / "b300_sxm", "mla", "vllm", TABLE, (0, 17, 0))
    assert label == "gb300/0.27.0" and path.parent.name == "0.27.0"
    path, label = recollected_file(tmp_path / "gb300", "mla", "vllm", TABLE, (0, 17, 0))
    assert label == "0.27.0"  # its own newer folder, before any twin
    _folder(tmp_path, "h200_sxm", "0.24.0", LEGACY)
    assert recollected_file(tmp_path / "h200_sxm", "mla", "vllm", TABLE) is None  # no twin


def _kimi(gpu: str):
    return make_pricer("operator_tables", "moonshotai/Kimi-K2.5", gpu, dtype="bfloat16",
                       weight_dtype="nvfp4" if gpu.startswith("b") else "int4",
                       tensor_parallel_size=8, kv_cache_dtype="fp8",
                       engine=get_engine("vllm", "0.17.0"))


@needs_package
def test_kimi_on_b300_reads_the_recollected_sm103_rows(no_env):
    b300, b200 = _kimi("b300"), _kimi("b200")
    read = b300.table_source()["tables_read"]
    assert read["mla/mla_generation_module_perf"] == "gb300/0.27.0"
    assert read["mla/mla_context_module_perf"] == "gb300/0.27.0"
    assert any("fused-op collector" in w for w in b300.warnings())
    assert b200.table_source()["tables_read"]["mla/mla_generation_module_perf"] == "0.24.0"
    assert not any("fused-op collector" in w for w in b200.warnings())
    # One decode layer at 4 sequences of 1,500 tokens: the same die as B200 prices within 15%
    # of it (the stale rows gave twice).
    b, ctx = 4.0, 1500.0
    assert b300._dec.at(b, ctx) == pytest.approx(b200._dec.at(b, ctx), rel=0.15)
    h200 = _kimi("h200")  # no re-collected Hopper rows: its own, less the legacy collector's part
    assert h200.table_source()["tables_read"]["mla/mla_generation_module_perf"] == "0.24.0"
    assert h200.table_source()["tables_read"]["mla/legacy_collector_overhead"] == "gb300 0.24.0 / 0.27.0"
    assert any("legacy collector" in w for w in h200.warnings())


def _write_rows(path: Path, rows: list[tuple]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = ("num_heads", "batch_size", "step", "kv_cache_dtype", "gemm_type", "latency")
    pq.write_table(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}), path)


def test_legacy_collector_overhead_is_the_same_gpus_difference_by_batch(tmp_path):
    """By hand: one GPU measured by both collectors; the overhead at a batch is the median over
    the cells both measured of legacy minus re-collected (16-bit GEMMs only), never negative."""
    old = _folder(tmp_path, "gb300", "0.24.0", LEGACY) / f"{TABLE}.parquet"
    new = _folder(tmp_path, "gb300", "0.27.0", FIXED_LOCAL) / f"{TABLE}.parquet"
    _write_rows(old, [(16, 1, 1024, "bfloat16", "bfloat16", 0.090), (32, 1, 1024, "bfloat16", "bfloat16", 0.100),
                      (16, 1, 8192, "bfloat16", "bfloat16", 0.100), (16, 4, 1024, "bfloat16", "bfloat16", 0.050),
                      (16, 1, 1024, "bfloat16", "nvfp4", 0.900)])
    _write_rows(new, [(16, 1, 1024, "bfloat16", "bfloat16", 0.050), (32, 1, 1024, "bfloat16", "bfloat16", 0.070),
                      (16, 1, 8192, "bfloat16", "bfloat16", 0.040), (16, 4, 1024, "bfloat16", "bfloat16", 0.060),
                      (16, 1, 1024, "bfloat16", "nvfp4", 0.050)])
    _folder(tmp_path, "h200_sxm", "0.24.0", LEGACY)
    pair = collector_pair(tmp_path, "mla", "vllm", TABLE)
    assert pair is not None and pair[2] == "gb300 0.24.0 / 0.27.0"
    batches, extra = legacy_collector_overhead(pair)
    assert batches.tolist() == [1.0, 4.0]
    # batch 1: differences 40, 30, 60 us -> median 40 us; batch 4: -10 us -> 0.
    assert extra == pytest.approx([40e-6, 0.0])


@needs_package
def test_hopper_mla_decode_rows_lose_the_legacy_collectors_overhead(no_env):
    """H200's vLLM MLA decode rows are the legacy collector's only: each loses the GB300 pair's
    overhead at its batch, a prefill row keeps its time, and B200 (re-collected) is unchanged."""
    h200 = _kimi("h200")
    path = PACKAGE / "h200_sxm" / "mla" / "vllm" / "0.24.0" / f"{TABLE}.parquet"
    c = read_columns(path, ("num_heads", "batch_size", "step", "kv_cache_dtype", "gemm_type", "latency"))
    sel = ((c["num_heads"] == 8) & (c["batch_size"] == 4) & (c["step"] == 8192)
           & (c["kv_cache_dtype"] == "fp8") & (c["gemm_type"] == "bfloat16"))
    measured = float(np.median(c["latency"][sel])) * 1e-3
    batches, extra = legacy_collector_overhead(collector_pair(PACKAGE, "mla", "vllm", TABLE))
    off = float(extra[list(batches).index(4.0)])
    assert 30e-6 < off < 60e-6
    assert h200._dec.at(4.0, 8192.0) == pytest.approx(measured - off, rel=0.02)
    assert not any("legacy collector" in w for w in _kimi("b200").warnings())
