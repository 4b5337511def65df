"""MLA module rows that predate AIConfigurator's fused-op collector give way to re-collected ones.

What a user relies on: Kimi-K2.5 / DeepSeek on B300 is priced from MLA rows that time what
serving runs. The 0.24 MLA module folders of B300, GB200 and GB300 ran eager norm kernels that
serving never runs (about twice the re-collected rows at small batches; B200's folder says so
in its ``collection_meta.yaml``); B200's 0.24 and GB300's 0.27 were re-collected. A GPU reads
its own re-collected rows first, then its same-die twin's (GB300 for B300, B200 for GB200);
a GPU with neither (H200) keeps its rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.catalog.engines import get_engine
from sim.pricing import make_pricer, table_data
from sim.pricing.table_data import recollected, recollected_file

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
    h200 = _kimi("h200")  # no re-collected Hopper rows: its own, as before
    assert h200.table_source()["tables_read"]["mla/mla_generation_module_perf"] == "0.24.0"
