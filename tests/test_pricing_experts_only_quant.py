"""INT4 and MXFP4 weights quantise a mixture of experts' routed experts only.

Kimi-K2.5's INT4 checkpoint ignores ``self_attn``, ``shared_experts`` and the dense layers' MLP;
vLLM's MXFP4 method (gpt-oss) quantises ``FusedMoE`` only. A planner pricing those GEMMs as
4-bit would make attention and shared experts 3-4x cheaper to read than they are.
"""

from __future__ import annotations

import pytest

from sim.catalog.dtypes import INT4_BYTES, MXFP4_BYTES, experts_only
from sim.pricing.roofline import RooflineCostModel


def test_experts_only_formats():
    assert experts_only("int4", True) and experts_only("mxfp4", True)
    assert experts_only("int4_awq", True)  # an alias of int4
    assert not experts_only("int4", False)  # a dense model's int4 is every linear layer
    assert not experts_only("nvfp4", True) and not experts_only("fp8_block", True)


@pytest.mark.parametrize("model,hw,fmt,wbytes", [
    ("moonshotai/Kimi-K2.5", "h200", "int4", INT4_BYTES),
    ("openai/gpt-oss-120b", "b200", "mxfp4", MXFP4_BYTES),
])
def test_roofline_quantises_the_experts_only(model, hw, fmt, wbytes):
    bf16 = RooflineCostModel(model, hw, dtype="bfloat16", tensor_parallel_size=8)
    q = RooflineCostModel(model, hw, dtype="bfloat16", tensor_parallel_size=8, weight_dtype=fmt)
    # Attention, router, shared-expert and dense-MLP GEMMs: identical to the 16-bit model's.
    assert set(q._gemms) == set(bf16._gemms)
    for op, g in q._gemms.items():
        assert g == bf16._gemms[op], op
    # The experts' weights stream at the format's bytes per weight, against 2 in bf16 (beside
    # the fixed cost each touched expert pays in either format).
    fixed = q.efficiency.moe_expert_latency_s
    assert q._experts.weight_per_expert - fixed == pytest.approx(
        (bf16._experts.weight_per_expert - fixed) * wbytes / 2, rel=1e-9)


def test_dense_int4_still_quantises_every_gemm():
    bf16 = RooflineCostModel("llama-3.1-8b", "h100-sxm", dtype="bfloat16")
    q = RooflineCostModel("llama-3.1-8b", "h100-sxm", dtype="bfloat16", weight_dtype="int4")
    assert q._gemms["qkv_proj"] != bf16._gemms["qkv_proj"]
