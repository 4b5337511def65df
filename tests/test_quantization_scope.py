"""``quantization.scope``: which linear layers a quantised checkpoint covers.

The format does not say it; the checkpoint's recipe does. NVIDIA's NVFP4 exports of MoE models
list ``*self_attn*`` in ``exclude_modules`` (nvidia/DeepSeek-R1-0528-NVFP4,
nvidia/MiniMax-M2.5-NVFP4), so their attention projections run BF16 GEMMs from BF16 weights;
nvidia/DeepSeek-R1-0528-FP4-V2 quantises the output projection (``wo``) too. Pricing those
attention GEMMs as FP4 makes a long prefill's projections 2-4x too cheap and the weights too
small. These tests compute the expected bytes and curves by hand or from the 16-bit deployment.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.dtypes import NVFP4_BYTES, resolve_precision, resolved_scope
from sim.catalog.hardware import get_hardware
from sim.memory_plan import plan_memory
from sim.pricing import table_data
from sim.pricing.roofline import RooflineCostModel
from tests.test_cli import assert_one_line_error, kvplan

needs_package = pytest.mark.skipif(table_data.package_tables_root() is None,
                                   reason="aiconfigurator-core is not installed")

# DeepSeek-V3's attention, by hand from its config.json: hidden 7168, 128 heads, q rank 1536,
# kv rank 512 + 64 rotary dims, q/k heads 128 + 64 wide, v heads 128 wide, 61 MLA layers.
H, HEADS, Q_RANK, KV_RANK, ROPE, NOPE, V = 7168, 128, 1536, 512, 64, 128, 128
REPLICATED = H * Q_RANK + H * (KV_RANK + ROPE)  # q_a, kv_a: whole on every TP rank
Q_B = Q_RANK * HEADS * (NOPE + ROPE)
KV_B = KV_RANK * HEADS * (NOPE + V)
O_PROJ = HEADS * V * H


@pytest.mark.parametrize("weights,moe,scope", [
    ("nvfp4", True, "mlp_only"),        # NVIDIA's NVFP4 MoE exports: attention 16-bit
    ("nvfp4", False, "all"),            # its dense exports (Llama-3.3-70B-Instruct-FP4)
    ("mxfp4", True, "experts_only"),    # gpt-oss
    ("int4", True, "experts_only"),     # Kimi-K2.5
    ("fp8_block", True, "all"),         # DeepSeek's and Qwen's FP8 releases
])
def test_auto_scope_by_format_and_model(weights, moe, scope):
    assert resolved_scope("auto", weights, moe) == scope
    assert resolved_scope("all", weights, moe) == "all"  # an explicit scope is kept


@pytest.mark.parametrize("scope,attention_bf16_params", [
    ("all", 0),
    ("mlp_and_o_proj", REPLICATED + (Q_B + KV_B) / 8),
    ("mlp_only", REPLICATED + (Q_B + KV_B + O_PROJ) / 8),
])
def test_memory_plan_holds_the_16_bit_attention_at_two_bytes(scope, attention_bf16_params):
    base = plan_memory("deepseek-v3", "b200", "bfloat16", tensor_parallel_size=8,
                       weight_dtype="nvfp4", quant_scope="all")
    plan = plan_memory("deepseek-v3", "b200", "bfloat16", tensor_parallel_size=8,
                       weight_dtype="nvfp4", quant_scope=scope)
    extra = 61 * attention_bf16_params * (2 - NVFP4_BYTES)
    assert plan.weights_bytes - base.weights_bytes == pytest.approx(extra, rel=1e-9)
    # The bytes come out of the KV pool.
    assert base.kv_pool_bytes - plan.kv_pool_bytes == pytest.approx(extra, rel=1e-9)
    if scope == "mlp_only":  # auto is mlp_only for an NVFP4 MoE
        auto = plan_memory("deepseek-v3", "b200", "bfloat16", tensor_parallel_size=8,
                           weight_dtype="nvfp4")
        assert auto.weights_bytes == plan.weights_bytes


def test_roofline_prices_the_excluded_layers_as_the_16_bit_model_does():
    def model(weights=None, scope="auto"):
        return RooflineCostModel("deepseek-v3", "b200", dtype="bfloat16", tensor_parallel_size=8,
                                 weight_dtype=weights, quant_scope=scope)

    bf16, every, v2 = model(), model("nvfp4", "all"), model("nvfp4", "mlp_and_o_proj")
    for op in ("q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj"):
        assert v2._gemms[op] == bf16._gemms[op] != every._gemms[op], op
    for op in ("o_proj", "mlp_up", "mlp_down", "shared_up", "shared_down"):
        assert v2._gemms[op] == every._gemms[op] != bf16._gemms[op], op
    assert v2._gemms["router"] == bf16._gemms["router"]  # never quantised
    for field in ("compute_per_row", "weight_per_expert", "memory_per_row"):
        assert getattr(v2._experts, field) == getattr(every._experts, field), field
    assert "scope mlp_and_o_proj: attention_in in bfloat16" in v2.describe()
    assert "scope" not in every.describe()
    # An 8k prefill: BF16 projections cost more than FP4 ones.
    from sim.policies.step import StepShape
    prefill = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1,
                        prefill_attention_work=8192 * 8193 // 2)
    assert every.price(prefill) < v2.price(prefill) < model("nvfp4", "mlp_only").price(prefill)


def _tables_model(engine, weights=None, scope="auto", ep=1):
    from sim.pricing.operator_tables import OperatorTableCostModel

    return OperatorTableCostModel("deepseek-v3", "b200", dtype="bfloat16", tensor_parallel_size=8,
                                  weight_dtype=weights, kv_cache_dtype="fp8", quant_scope=scope,
                                  tables=table_data.package_tables_root(), engine=engine,
                                  expert_parallel_size=ep, expert_tensor_parallel_size=8 // ep)


@needs_package
def test_operator_tables_read_the_bf16_rows_for_the_excluded_layers():
    """SGLang's tables time the MLA projections as GEMMs: each reads its own dtype's rows
    (b200_sxm/gemm/sglang/0.5.14, q_a_proj's 1536 x 7168 at 8,192 rows: bfloat16 0.1284 ms,
    nvfp4 0.0880 ms)."""
    from sim.catalog.engines import get_engine

    def model(weights=None, scope="auto"):
        return _tables_model(get_engine("sglang", "0.5.10"), weights, scope, ep=8)

    every, v2 = model("nvfp4", "all"), model("nvfp4", "mlp_and_o_proj")
    assert every.gemm_dtype == v2.gemm_dtype == "nvfp4"
    i = int(np.searchsorted(v2._gemm_m, 8192))
    assert v2._gemm_m[i] == 8192
    assert v2._gemm_ms["q_a_proj"][i] == pytest.approx(0.1284, abs=5e-5)
    assert every._gemm_ms["q_a_proj"][i] == pytest.approx(0.0880, abs=5e-5)
    for op in ("o_proj", "mlp_up", "shared_up"):  # quantised in both
        np.testing.assert_allclose(v2._gemm_ms[op], every._gemm_ms[op], err_msg=op)
    for op in ("q_b_proj", "kv_a_proj", "kv_b_proj"):  # 16-bit in V2: never below FP4's
        assert (v2._gemm_ms[op] >= every._gemm_ms[op]).all(), op
    assert "attention_in in bfloat16" in v2.describe()


def test_precision_rejects_an_unknown_scope():
    from sim.errors import ConfigError

    with pytest.raises(ConfigError, match="quantization.scope"):
        resolve_precision(get_hardware("b200"), "bfloat16", "nvfp4", scope="attention")


def test_scope_errors_are_one_line():
    assert_one_line_error(kvplan("simulate", "--set", "quantization.scope=mlp_only"),
                          "quantization.scope", "weights is none")
    assert_one_line_error(kvplan("simulate", "--set", "quantization.weights=fp8",
                                 "--set", "quantization.scope=experts_only"),
                          "quantization.scope", "has none")
    assert_one_line_error(kvplan("simulate", "--set", "quantization.scope=half"),
                          "quantization.scope")


@needs_package
def test_mla_module_rows_in_the_attention_dtype():
    """vLLM's 0.24 tables time the whole MLA block (projections inside) per GEMM dtype: an NVFP4
    MoE checkpoint whose attention is 16-bit reads the block's bfloat16 rows, as a bf16 model does."""
    from sim.catalog.engines import get_engine
    from sim.policies.step import StepShape

    vllm = get_engine("vllm", "0.19.0")
    bf16, every = _tables_model(vllm), _tables_model(vllm, "nvfp4", "all")
    mlp_only = _tables_model(vllm, "nvfp4", "mlp_only")
    prefill = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1,
                        prefill_attention_work=8192 * 8193 // 2)
    attn = {name: m.breakdown(prefill)["attn_prefill"]
            for name, m in (("bf16", bf16), ("all", every), ("mlp_only", mlp_only))}
    assert attn["mlp_only"] == attn["bf16"] != attn["all"]
