"""The operator-table pricer does not price again what a measured row already contains.

AIConfigurator's collector times whole vLLM calls, not bare kernels:

- a GEMM row is ``RowParallelLinear.forward`` (collector/vllm/collect_gemm.py); under
  ``Fp8Config(activation_scheme="dynamic")`` that forward computes the activation scale and casts
  the input before the CUTLASS GEMM, so per-tensor FP8 is the row alone (AIConfigurator derives
  static FP8 by subtracting the ``quantize/`` tables from it: aic-core operators/gemm.rs);
- an attention row is ``impl.forward`` (plus ``impl.do_kv_cache_update`` where the backend splits
  it off; collector/vllm/collect_attn.py): the KV-cache write is inside it;
- an MLA module row is ``DeepseekV2MLAAttention.forward`` (collector/vllm/collect_mla_module.py:
  "projections + attention + output"): the MLA projections and rotary are inside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sim.pricing import table_data  # noqa: E402
from sim.pricing.operator_tables import MLA_MODULE_GEMMS, OperatorTableCostModel  # noqa: E402
from tests.test_operator_tables import MS, synthetic_tables  # noqa: E402

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")


def _with_fp8(root: Path, quantize: bool) -> Path:
    """The synthetic tables plus FP8 rows at half the bf16 latency, and (``quantize``) quantize
    tables of 1 ms per call, which must not reach the price."""
    d = root / "h100_sxm"
    path = d / "gemm/vllm/0.14.0/gemm_perf.parquet"
    c = pq.read_table(path).to_pydict()
    n = len(c["m"])
    c = {key: c[key] + (["fp8"] * n if key == "gemm_dtype" else
                        [v * 0.5 for v in c[key]] if key == "latency" else c[key])
         for key in c}
    pq.write_table(pa.table(c), path)
    if quantize:
        ms = np.array(MS * 2, dtype=np.int64)
        ks = np.array([4096] * len(MS) + [16384] * len(MS), dtype=np.int64)
        for name in ("scale_matrix_perf", "computescale_perf"):
            out = d / f"quantize/vllm/0.14.0/{name}.parquet"
            out.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"m": ms, "k": ks, "quant_dtype": ["fp8"] * len(ms),
                                     "latency": np.ones(len(ms))}), out)
    return root


def _fp8_pricer(root: Path) -> OperatorTableCostModel:
    return OperatorTableCostModel("llama-2-7b", "h100-sxm", "float16", 1, tables=root,
                                  weight_dtype="fp8", max_num_seqs=128)


def test_fp8_gemm_rows_already_include_the_activation_quantisation(tmp_path):
    plain = _fp8_pricer(_with_fp8(synthetic_tables(tmp_path / "a"), quantize=False))
    quant = _fp8_pricer(_with_fp8(synthetic_tables(tmp_path / "b"), quantize=True))
    assert quant.gemm_dtype == "fp8"
    # o_proj of Llama-2-7B is (n, k) = (4096, 4096); at m = 16 the synthetic bf16 row is
    # 0.002 + max(2*16*4096*4096/4e11, 2*4096*4096/3e9) = 0.002 + 0.0111848 ms, the FP8 row half.
    i = MS.index(16)
    assert quant._gemm_ms["o_proj"][i] == pytest.approx(0.5 * (0.002 + 2 * 4096 * 4096 / 3e9))
    # Only the layer's four GEMMs: no quantize term beside them, whether its tables exist or not.
    assert set(quant._gemm_ms) == {"qkv_proj", "o_proj", "mlp_up", "mlp_down"}
    assert quant._graph_vals == plain._graph_vals
    rows = np.array([1.0, 16.0, 300.0, 5000.0])
    assert quant._eager.at_array(rows).tolist() == plain._eager.at_array(rows).tolist()


def test_kv_cache_write_is_inside_the_attention_rows(tmp_path):
    p = OperatorTableCostModel("llama-2-7b", "h100-sxm", "float16", 1,
                               tables=synthetic_tables(tmp_path / "s"), max_num_seqs=128)
    r, L, x = p._roof, p.model.num_layers, 16.0
    # Per layer: two norms, rotary, SiLU*mul (one call each) and the residual adds; no KV write.
    per_layer = (r.elementwise_time("input_norm", x) + r.elementwise_time("post_attn_norm", x)
                 + r.elementwise_time("rope", x) + r.elementwise_time("mlp_act", x)
                 + r._elementwise["residual_add"] * x)
    expected = L * per_layer + (r._embed_per_row + r._final_norm_per_row) * x
    got = p._rows_part(np.array([x]), np.zeros(1), np.zeros(1))[0]
    assert got == pytest.approx(expected, rel=1e-12)
    # The write the attention rows hold: 32 layers x (2 us launch + bytes) no longer added.
    assert r.elementwise_time("kv_cache_write", x) >= r.efficiency.elementwise_latency_s > 0


@needs_package
def test_mla_module_rows_hold_the_projections_and_rotary(monkeypatch):
    monkeypatch.delenv(table_data.ENV_TABLES, raising=False)
    p = OperatorTableCostModel("deepseek-v3", "h200", "bfloat16", 8, tables=PACKAGE,
                               weight_dtype="fp8_block", max_num_seqs=256)
    assert p.tables_read["mla/mla_generation_module_perf"] == "0.24.0"
    # The shapes are known (the memory plan and the summary use them), not priced again.
    assert {"q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj"} <= set(p.gemm_shapes)
    assert not set(MLA_MODULE_GEMMS) & set(p._gemm_ms)
    assert set(p._gemm_ms) == {"mlp_up", "mlp_down", "shared_up", "shared_down", "router",
                               "experts"}
    # A decode step of 32 sequences replays the 32-token graph: per layer the MoE block's GEMMs,
    # two norms, SiLU*mul, residual adds and two all-reduces; no projection, no rotary.
    r, L, x = p._roof, p.model.num_layers, 32.0
    assert 32 in p.capture_sizes
    gemm_ms = sum(float(np.interp(x, p._gemm_m, c)) for c in p._gemm_ms.values())
    ar_ms = float(p._allreduce_ms(np.array([x * p.model.hidden_size]), graph=True)[0])
    per_layer = (gemm_ms * 1e-3 + r.elementwise_time("input_norm", x)
                 + r.elementwise_time("post_attn_norm", x) + r.elementwise_time("mlp_act", x)
                 + r._elementwise["residual_add"] * x + 2 * ar_ms * 1e-3)
    expected = L * per_layer + (r._embed_per_row + r._final_norm_per_row) * x
    assert p._graph_vals[p.capture_sizes.index(32)] == pytest.approx(expected, rel=1e-9)
