"""Which fused-MoE kernel's measured rows price a MoE's experts: the one vLLM runs by default.

What a user relies on: gpt-oss on B200 is priced with FlashInfer's TRT-LLM MXFP4 MoE (vLLM's
``SM100_FI_MXFP4_BF16``), on H100/H200 with OpenAI's Triton kernels, and an INT4 (W4A16) MoE
such as Kimi-K2.5 with Marlin, even where the version folder nearest the engine release measured
another kernel under the same ``moe_dtype`` (AIConfigurator's pre-0.24 collector: a generic
``vllm_mxfp4_moe`` 3.6x slower on B200, and ``vllm_marlin_int4_moe`` that ran Triton WNA16).
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.engines import get_engine
from sim.pricing import make_pricer, table_data
from sim.pricing.operator_tables import default_moe_kernel
from sim.pricing.table_data import read_columns

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")
MINIMAX = "MiniMaxAI/MiniMax-M2.5"


def test_default_kernel_by_architecture():
    assert default_moe_kernel("mxfp4", "b200_sxm") == ("mxfp4_bf16", "trtllmmxfp4experts")
    assert default_moe_kernel("mxfp4", "gb300") == ("mxfp4_bf16", "trtllmmxfp4experts")
    assert default_moe_kernel("mxfp4", "h100_sxm") == ("oaitritonmxfp4experts",)
    assert default_moe_kernel("mxfp4", "l40s") == ("marlinexperts",)
    assert default_moe_kernel("int4", "h200_sxm") == ("marlinexperts",)
    assert default_moe_kernel("fp8_block", "b200_sxm") is None  # no engine named: the fastest measured


def test_block_fp8_default_kernel_is_flashinfer_trtllm_under_vllm_on_blackwell():
    """vLLM's FP8 MoE oracle tries FlashInfer's TRT-LLM MoE first on SM10x; from 0.18 its modular
    kernel takes any router (MiniMax-M2's included). Hopper, older vLLM releases and SGLang keep
    the version-nearest rows."""
    trtllm = ("flashinfer_trtllm", "trtllmfp8experts")
    assert default_moe_kernel("fp8_block", "b200_sxm", get_engine("vllm", "0.19.0")) == trtllm
    assert default_moe_kernel("fp8_block", "gb300", get_engine("vllm", "0.18.0")) == trtllm
    assert default_moe_kernel("fp8_block", "b200_sxm", get_engine("vllm", "0.17.0")) is None
    assert default_moe_kernel("fp8_block", "h200_sxm", get_engine("vllm", "0.19.0")) is None
    assert default_moe_kernel("fp8_block", "b200_sxm", get_engine("sglang", "0.5.9")) is None


def _rows(path, hidden, inter, experts, topk, tp, dtype, label):
    c = read_columns(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                            "num_experts", "moe_tp_size", "moe_ep_size", "distribution",
                            "kernel_source", "latency"))
    sel = ((c["moe_dtype"] == dtype) & (c["hidden_size"] == hidden) & (c["inter_size"] == inter)
           & (c["num_experts"] == experts) & (c["topk"] == topk) & (c["moe_tp_size"] == tp)
           & (c["moe_ep_size"] == 1) & (c["distribution"] == "balanced")
           & np.array([label in str(k) for k in c["kernel_source"]]))
    return dict(zip(c["num_tokens"][sel].tolist(), c["latency"][sel].tolist()))


@needs_package
def test_gpt_oss_on_b200_reads_flashinfer_rows_not_the_nearer_folder(no_env):
    # vLLM 0.15.1: the 0.19 folder is nearer than 0.24, and measured the experts at TP 1 too.
    p = make_pricer("operator_tables", "openai/gpt-oss-120b", "b200", dtype="bfloat16",
                    weight_dtype="mxfp4", engine=get_engine("vllm", "0.15.1"))
    assert p.table_source()["tables_read"]["moe/moe_perf"] == "0.24.0"
    assert "flashinfer_trtllm_mxfp4_bf16" in p.moe_kernel
    d = PACKAGE / "b200_sxm" / "moe" / "vllm"
    fi = _rows(d / "0.24.0" / "moe_perf.parquet", 2880, 2880, 128, 4, 1, "w4a16_mxfp4", "trtllm")
    old = _rows(d / "0.19.0" / "moe_perf.parquet", 2880, 2880, 128, 4, 1, "w4a16_mxfp4", "mxfp4")
    # The experts' curve at a measured token count is that row (isotonic: a monotone table).
    m = float(p._gemm_m[np.searchsorted(p._gemm_m, 8192)])
    assert m == 8192
    got = float(p._gemm_ms["experts"][np.searchsorted(p._gemm_m, 8192)])
    assert got == pytest.approx(fi[8192], rel=1e-6)
    assert old[8192] > 3 * fi[8192]  # what the version-nearest rule used to price


@needs_package
def test_gpt_oss_on_hopper_reads_the_triton_rows(no_env):
    p = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", dtype="bfloat16",
                    weight_dtype="mxfp4", engine=get_engine("vllm", "0.18.0"))
    assert "oaitritonmxfp4experts" in p.moe_kernel
    assert p.table_source()["tables_read"]["moe/moe_perf"] == "0.24.0"


@needs_package
def test_int4_moe_reads_marlin_rows(no_env):
    p = make_pricer("operator_tables", "moonshotai/Kimi-K2.5", "h200", dtype="bfloat16",
                    weight_dtype="int4", tensor_parallel_size=8, engine=get_engine("vllm", "0.16.0"))
    assert p.moe_kernel.endswith("marlinexperts") and p.moe_dtype == "int4_wo"
    d = PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    marlin = _rows(d, 7168, 2048, 384, 8, 8, "int4_wo", "marlinexperts")
    old = _rows(PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.19.0" / "moe_perf.parquet",
                7168, 2048, 384, 8, 8, "int4_wo", "marlin_int4")
    i = int(np.searchsorted(p._gemm_m, 4096))
    assert p._gemm_m[i] == 4096
    # The Marlin row (the curve is made non-decreasing in tokens: within a few per cent of it),
    # not the nearer 0.19 folder's Triton WNA16 row, which is about twice as slow.
    assert float(p._gemm_ms["experts"][i]) == pytest.approx(marlin[4096], rel=0.05)
    assert old[4096] > 1.8 * marlin[4096]


@needs_package
def test_mxfp8_activations_read_flashinfers_fp8_rows(no_env):
    """``quantization.moe_activations: mxfp8`` (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1) prices
    gpt-oss's experts on B200 from the same FlashInfer kernel's MXFP4 x MXFP8 rows, which
    AIConfigurator timed for this shape under its SGLang collector only; the BF16 rows stay
    vLLM's default. SGLang's default is MXFP8; Hopper has no such kernel."""
    vllm = get_engine("vllm", "0.15.1")
    bf16 = make_pricer("operator_tables", "openai/gpt-oss-120b", "b200", dtype="bfloat16",
                       weight_dtype="mxfp4", engine=vllm)
    fp8 = make_pricer("operator_tables", "openai/gpt-oss-120b", "b200", dtype="bfloat16",
                      weight_dtype="mxfp4", engine=vllm, moe_activations="mxfp8")
    assert bf16.moe_activations == "bf16" and bf16.moe_dtype == "w4a16_mxfp4"
    assert fp8.moe_activations == "mxfp8" and fp8.moe_dtype == "w4a8_mxfp4_mxfp8"
    assert fp8.table_source()["tables_read"]["moe/moe_perf"] == "sglang/0.5.14"
    d = PACKAGE / "b200_sxm" / "moe" / "sglang" / "0.5.14" / "moe_perf.parquet"
    rows = _rows(d, 2880, 2880, 128, 4, 1, "w4a8_mxfp4_mxfp8", "flashinfer_trtllm")
    i = int(np.searchsorted(fp8._gemm_m, 8192))
    assert fp8._gemm_m[i] == 8192
    assert float(fp8._gemm_ms["experts"][i]) == pytest.approx(rows[8192], rel=0.05)
    # A whole 8k prefill: the experts at FP8 rate make it far cheaper.
    from sim.policies.step import StepShape
    s = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1, prefill_attention_work=8192 * 8193 // 2)
    assert fp8.price(s) < 0.7 * bf16.price(s)
    sgl = make_pricer("operator_tables", "openai/gpt-oss-120b", "b200", dtype="bfloat16",
                      weight_dtype="mxfp4", engine=get_engine("sglang"))
    assert sgl.moe_activations == "mxfp8" and sgl.moe_dtype == "w4a8_mxfp4_mxfp8"
    hopper = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", dtype="bfloat16",
                         weight_dtype="mxfp4", engine=get_engine("sglang"))
    assert hopper.moe_activations == "bf16"
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="quantization.moe_activations: mxfp8 needs Blackwell"):
        make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", dtype="bfloat16",
                    weight_dtype="mxfp4", engine=vllm, moe_activations="mxfp8")


def test_mxfp8_activations_need_mxfp4_weights():
    from sim.config import build_scenario
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="quantization.moe_activations"):
        build_scenario({"quantization": {"weights": "fp8", "moe_activations": "mxfp8"}})
    with pytest.raises(ConfigError, match="quantization.moe_activations"):
        build_scenario({"quantization": {"moe_activations": "fp16"}})
    sc = build_scenario({"model": "openai/gpt-oss-120b", "hardware": "b200",
                         "quantization": {"weights": "mxfp4", "moe_activations": "mxfp8"}})
    assert sc.quantization.moe_activations == "mxfp8"


@needs_package
def test_marlin_mxfp4_experts_run_at_marlins_measured_flop_rate(no_env):
    """``quantization.moe_kernel: marlin`` (``VLLM_MXFP4_USE_MARLIN=1``, as InferenceX's gpt-oss
    Hopper scripts export): the H200 tables time Marlin's MXFP4 MoE on another shape only (896
    experts of 3584 x 3072, top-16), so gpt-oss's experts cost the default Triton rows, bounded
    below by that shape's FLOP rate at the same tokens per expert (T x top-k / E), times
    gpt-oss's FLOPs. A long prefill is compute-bound and slower in Marlin; a small decode batch
    keeps the Triton rows."""
    vllm = get_engine("vllm", "0.24.0")
    args = dict(dtype="bfloat16", weight_dtype="mxfp4", engine=vllm, moe_routing="balanced")
    triton = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", **args)
    marlin = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", moe_kernel="marlin", **args)
    ref = _rows(PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet",
                3584, 3072, 896, 16, 1, "w4a16_mxfp4", "marlin")
    tokens = np.array(sorted(ref))
    per_expert = tokens * 16 / 896
    rate = 6 * 3584 * 3072 * 16 * tokens / np.array([ref[t] for t in tokens])  # FLOPs per ms
    # gpt-oss-120b: 128 experts of 2880 x 2880, top-4. 8,192 tokens: 256 per expert.
    want_rate = np.exp(np.interp(np.log(8192 * 4 / 128), np.log(per_expert), np.log(rate)))
    want = 6 * 2880 * 2880 * 4 * 8192 / want_rate
    i = int(np.searchsorted(marlin._gemm_m, 8192))
    assert marlin._gemm_m[i] == 8192
    assert float(marlin._gemm_ms["experts"][i]) == pytest.approx(want, rel=1e-3)
    assert float(marlin._gemm_ms["experts"][i]) > 2 * float(triton._gemm_ms["experts"][i])
    # Decode batches read the same 4-bit weights: the Triton rows, unchanged.
    j = int(np.searchsorted(marlin._gemm_m, 16))
    assert float(marlin._gemm_ms["experts"][j]) == float(triton._gemm_ms["experts"][j])
    from sim.policies.step import StepShape
    s = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1, prefill_attention_work=8192 * 8193 // 2)
    assert marlin.price(s) > 1.3 * triton.price(s)
    assert "Marlin bound from" in marlin.describe() and "Marlin" not in triton.describe()
    assert marlin.table_source()["tables_read"]["moe/marlin_reference"] == "0.24.0"
    # Expert TP 8 splits the FLOPs eight ways, at the rate the reference measured split eight
    # ways (its 384-wide slices; gpt-oss's are 360): slower than the unsplit rate.
    tp8 = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", moe_kernel="marlin",
                      tensor_parallel_size=8, **args)
    ref8 = _rows(PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet",
                 3584, 3072, 896, 16, 8, "w4a16_mxfp4", "marlin")
    t8 = np.array(sorted(ref8))
    rate8 = 6 * 3584 * (3072 / 8) * 16 * t8 / np.array([ref8[t] for t in t8])
    want8_rate = np.exp(np.interp(np.log(8192 * 4 / 128), np.log(t8 * 16 / 896), np.log(rate8)))
    assert want8_rate < 0.9 * want_rate
    k = int(np.searchsorted(tp8._gemm_m, 8192))
    assert float(tp8._gemm_ms["experts"][k]) == pytest.approx(6 * 2880 * 360 * 4 * 8192 / want8_rate, rel=1e-3)
    assert "MoE TP 8" in tp8.describe()
    # Under EP each GPU runs whole experts: the unsplit rows.
    ep8 = make_pricer("operator_tables", "openai/gpt-oss-120b", "h200", moe_kernel="marlin",
                      tensor_parallel_size=8, expert_parallel_size=8, **args)
    assert "MoE TP 1" in ep8.describe()


def test_marlin_moe_kernel_needs_four_bit_experts_and_bf16_activations():
    from sim.config import build_scenario
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="quantization.moe_kernel: marlin runs 4-bit experts"):
        build_scenario({"quantization": {"weights": "fp8", "moe_kernel": "marlin"}})
    with pytest.raises(ConfigError, match="quantization.moe_kernel: marlin takes bf16"):
        build_scenario({"model": "openai/gpt-oss-120b", "hardware": "b200",
                        "quantization": {"weights": "mxfp4", "moe_kernel": "marlin", "moe_activations": "mxfp8"}})
    sc = build_scenario({"model": "openai/gpt-oss-120b", "hardware": "h200",
                         "quantization": {"weights": "mxfp4", "moe_kernel": "marlin"}})
    assert sc.quantization.moe_kernel == "marlin"


@needs_package
def test_block_fp8_experts_read_block_rows_not_faster_per_tensor_ones(no_env):
    """A block-FP8 checkpoint (MiniMax-M2.5) runs block-scaled MoE kernels only: its experts are
    priced from the ``fp8_block`` rows of the version-nearest folder, never from per-tensor
    ``fp8`` rows of the same shape, which on H200 at TP 4 are a third faster at 8,192 tokens.
    A per-tensor FP8 checkpoint still reads the FP8 family (block rows where faster)."""
    p = make_pricer("operator_tables", "MiniMaxAI/MiniMax-M2.5", "h200", dtype="bfloat16",
                    weight_dtype="fp8_block", tensor_parallel_size=4, engine=get_engine("vllm", "0.16.0"))
    assert p.moe_dtype == "fp8_block"
    assert p.table_source()["tables_read"]["moe/moe_perf"] == "0.19.0"
    d = PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.19.0" / "moe_perf.parquet"
    block = _rows(d, 3072, 1536, 256, 8, 4, "fp8_block", "fused_moe")
    tensor = _rows(d, 3072, 1536, 256, 8, 4, "fp8", "fused_moe")
    i = int(np.searchsorted(p._gemm_m, 8192))
    assert p._gemm_m[i] == 8192
    # The block row (scaled to the experts a uniform router touches: all of them at 8k tokens).
    assert float(p._gemm_ms["experts"][i]) == pytest.approx(block[8192], rel=0.02)
    assert tensor[8192] < 0.7 * block[8192]
    per_tensor = make_pricer("operator_tables", "MiniMaxAI/MiniMax-M2.5", "h200", dtype="bfloat16",
                             weight_dtype="fp8", tensor_parallel_size=4, engine=get_engine("vllm", "0.16.0"))
    assert float(per_tensor._gemm_ms["experts"][i]) == pytest.approx(tensor[8192], rel=0.02)


@needs_package
def test_minimax_block_fp8_on_b200_prices_the_kernel_the_release_runs(no_env):
    """MiniMax-M2.5's block-FP8 experts at TP 4 on B200: vLLM 0.19 runs FlashInfer's TRT-LLM MoE
    (the 0.24 folder's rows, the only ones that time it); ``quantization.moe_kernel: triton``
    (``VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0``) and vLLM 0.17 read Triton's
    ``fused_experts`` rows of the 0.19 folder, whose tuned configs jump between 64 and 80 tokens
    (0.21 -> 0.35 ms a layer) where TRT-LLM's stay flat."""
    args = dict(dtype="bfloat16", weight_dtype="fp8_block", tensor_parallel_size=4, moe_routing="balanced")
    fi = make_pricer("operator_tables", MINIMAX, "b200", engine=get_engine("vllm", "0.19.0"), **args)
    assert "trtllmfp8experts" in fi.moe_kernel
    assert fi.table_source()["tables_read"]["moe/moe_perf"] == "0.24.0"
    d = PACKAGE / "b200_sxm" / "moe" / "vllm"
    trt = _rows(d / "0.24.0" / "moe_perf.parquet", 3072, 1536, 256, 8, 4, "fp8_block", "trtllmfp8experts")
    triton_rows = _rows(d / "0.19.0" / "moe_perf.parquet", 3072, 1536, 256, 8, 4, "fp8_block", "vllm_fused_moe")
    for tokens in (4, 128, 8192):
        i = int(np.searchsorted(fi._gemm_m, tokens))
        assert fi._gemm_m[i] == tokens
        assert float(fi._gemm_ms["experts"][i]) == pytest.approx(trt[tokens], rel=1e-6)
    forced = make_pricer("operator_tables", MINIMAX, "b200", engine=get_engine("vllm", "0.19.0"),
                         moe_kernel="triton", **args)
    old = make_pricer("operator_tables", MINIMAX, "b200", engine=get_engine("vllm", "0.17.0"), **args)
    for p in (forced, old):
        assert p.moe_kernel == "vllm_fused_moe"
        assert p.table_source()["tables_read"]["moe/moe_perf"] == "0.19.0"
        i = int(np.searchsorted(p._gemm_m, 128))
        assert float(p._gemm_ms["experts"][i]) == pytest.approx(triton_rows[128], rel=1e-6)
    assert triton_rows[80] > 1.5 * triton_rows[64] and trt[80] < 1.1 * trt[64]
    # B300's tables time TRT-LLM's kernel only: Triton asked for, the warning says what priced it.
    b300 = make_pricer("operator_tables", MINIMAX, "b300", engine=get_engine("vllm", "0.19.0"),
                       moe_kernel="triton", **args)
    assert "trtllmfp8experts" in b300.moe_kernel
    assert any("moe_kernel triton, but no Triton MoE rows" in w for w in b300.warnings())


def test_triton_moe_kernel_needs_fp8_experts():
    from sim.config import build_scenario
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="quantization.moe_kernel: triton runs FP8 experts"):
        build_scenario({"model": "openai/gpt-oss-120b", "hardware": "b200",
                        "quantization": {"weights": "mxfp4", "moe_kernel": "triton"}})
    sc = build_scenario({"model": MINIMAX, "hardware": "b200", "parallel": {"tensor_parallel_size": 4},
                         "quantization": {"weights": "fp8_block", "moe_kernel": "triton"}})
    assert sc.quantization.moe_kernel == "triton"


@needs_package
def test_moe_kernel_key_reaches_the_pricer_through_a_scenario(no_env):
    """``quantization.moe_kernel`` in a config (or ``--set``) is what prices the experts, and the
    summary's ``cost_model.tables`` names the kernel read."""
    from sim.api import resolve_deployment
    base = {"model": MINIMAX, "hardware": "b200", "engine": {"name": "vllm", "version": "0.19.0"},
            "parallel": {"tensor_parallel_size": 4}, "quantization": {"weights": "fp8_block"}}
    auto = resolve_deployment(base).cost_model.table_source()
    forced = resolve_deployment({**base, "quantization": {"weights": "fp8_block", "moe_kernel": "triton"}})
    assert "trtllmfp8experts" in auto["moe_kernel"] and auto["tables_read"]["moe/moe_perf"] == "0.24.0"
    assert forced.cost_model.table_source()["moe_kernel"] == "vllm_fused_moe"
