"""The roofline on today's GPUs: per-GPU efficiencies fitted to each GPU's measured operator
tables (``benchmarks/roofline_vs_tables.py``), the activation-quantisation kernel of FP8 GEMMs,
and the serving engine's CPU time, asynchronous scheduling and compiled-step host floor, which
the roofline now prices as the operator-table pricer does."""

from __future__ import annotations

import copy
from dataclasses import fields, replace

import pytest

from sim.catalog import get_hardware, get_model
from sim.catalog.engines import get_engine
from sim.pricing import A100_EFFICIENCY, Efficiency, RooflineCostModel
from sim.pricing.efficiency import GPU_EFFICIENCY, efficiency_error, efficiency_for, efficiency_source
from sim.pricing.operator_tables import EAGER_HOST_S_PER_LAYER
from sim.policies.step import StepShape

DECODE = StepShape(num_decode_seqs=16, decode_context_tokens=16 * 1000)
PREFILL = StepShape(num_prefill_tokens=300, num_prefill_seqs=1, prefill_attention_work=300 * 301 // 2)


def _bench():
    from tests.benchmark_module import load_benchmark

    return load_benchmark("roofline_vs_tables")


# -- which constants price which GPU ----------------------------------------------------------

def test_each_gpu_with_tables_has_its_own_constants_and_same_architecture_gpus_borrow_them():
    assert efficiency_for("h100-sxm") is GPU_EFFICIENCY["h100-sxm"]
    assert efficiency_for(get_hardware("b200")) is GPU_EFFICIENCY["b200"]
    # No tables of their own: Hopper and Ada siblings take their fitted fractions ...
    assert efficiency_for("h100-pcie") is GPU_EFFICIENCY["h100-sxm"]
    assert efficiency_for("l4") is GPU_EFFICIENCY["l40s"]
    assert "same architecture" in efficiency_source("h20")
    # ... and the rest, A100 (Vidur's fit) included, keep A100's.
    for gpu in ("a100-80gb", "a10g", "mi300x"):
        assert efficiency_for(gpu) is A100_EFFICIENCY
        assert efficiency_source(gpu) == "A100 kernel timings (Vidur)"
    assert RooflineCostModel("llama-3.1-8b", "h200").efficiency is GPU_EFFICIENCY["h200"]
    # Its known error is that of the GPU whose rows the constants were fitted to, said so when
    # that is a sibling; constants a caller passes have none.
    assert RooflineCostModel("llama-3.1-8b", "b300").known_error()["measured_on"] == "b300"
    borrowed = RooflineCostModel("llama-3.1-8b", "h20").known_error()
    assert borrowed["measured_on"] == "h100-sxm" and "unknown" in borrowed["note"]
    assert RooflineCostModel("llama-3.1-8b", "b300", efficiency=A100_EFFICIENCY).known_error() is None


def test_fitted_constants_are_physical_and_keep_a100s_unmeasured_ones():
    fitted = {"gemm_compute", "memory", "gemm_latency_s", "quantized_gemm_compute",
              "quantized_gemm_latency_s", "attn_prefill_compute", "attention_latency_s",
              "attn_prefill_extra_keys", "allreduce_bandwidth", "allreduce_latency_s",
              "moe_compute_ratio", "moe_row_columns", "moe_memory", "moe_latency_s",
              "moe_expert_latency_s", "attn_score_s"}
    for gpu, e in GPU_EFFICIENCY.items():
        for f in fields(Efficiency):
            v = getattr(e, f.name)
            if f.name not in fitted:  # norms, send/recv, PCIe, CPU: no table times them
                assert v == getattr(A100_EFFICIENCY, f.name), (gpu, f.name)
            elif f.name.endswith("_s"):
                assert 0 < v < 1e-3, (gpu, f.name)
            elif f.name.endswith("_keys"):  # a few 128-wide FlashAttention tiles, not thousands
                assert 64 <= v <= 2048, (gpu, f.name)
            elif f.name.endswith("_columns"):  # a routed row's overhead: below one expert's width
                assert 64 <= v <= 2048, (gpu, f.name)
            else:
                assert 0 < v <= 1, (gpu, f.name)


def test_shipped_constants_are_the_fit_to_each_gpus_tables(installed_tables):
    """GPU_EFFICIENCY is the rounded least-squares fit to the package's rows, not hand-tuned."""
    bench = _bench()
    for gpu in bench.FIT_GPUS:
        data = bench.load_rows(gpu)
        fitted = bench.rounded(bench.fit(gpu, data))
        shipped = GPU_EFFICIENCY[gpu]
        for name in bench.FITTED:
            assert getattr(fitted, name) == pytest.approx(getattr(shipped, name), rel=0.02), (gpu, name)
        # The known error the summary reports is the error these constants have on those rows.
        known = efficiency_error(gpu)["operator_mape_pct"]
        measured = {r["family"]: r["mape"] for r in bench.errors(gpu, data, shipped)}
        assert known == pytest.approx(measured, abs=0.15), gpu


# Measured with the shipped constants (benchmarks/results/roofline_vs_tables.md), H100 / B200:
# gemm 8.3 / 11.1, gemm_fp8 19.6 / 25.3, decode 18.8 / 24.8, prefill 14.6 / 18.5, all-reduce
# 13.9 / 18.0, fused MoE bf16 13.4 / 20.1 and block FP8 8.9 / 14.8 MAPE, B200's NVFP4 15.7;
# with A100's constants 34 / 40, 30 / 33, 32 / 86, 48 / 50, 495 / 297, 20 / 22, 21 / 28, 23.
BOUNDS = {  # family: (MAPE, |median bias|)
    "gemm": (14, 4), "gemm_fp8": (30, 5), "gemm_fp4": (22, 10), "attn_decode": (32, 20),
    "attn_prefill": (25, 10),
    "tp_allreduce": (25, 5),
    "moe": (25, 10), "moe_fp8": (18, 6),
}


@pytest.mark.parametrize("gpu", ["h100-sxm", "b200"])
def test_roofline_error_against_the_measured_tables(gpu, installed_tables):
    bench = _bench()
    data = bench.load_rows(gpu)
    rows = {r["family"]: r for r in bench.errors(gpu, data, efficiency_for(gpu))}
    a100 = {r["family"]: r for r in bench.errors(gpu, data, A100_EFFICIENCY)}
    # NVFP4 rows on Blackwell only (FP4 tensor cores); not fitted: FP8's fraction of FP4's peak.
    assert set(rows) == set(BOUNDS) - (set() if gpu.startswith("b") else {"gemm_fp4"})
    for fam, (mape, bias) in BOUNDS.items():
        if fam not in rows:
            continue
        assert rows[fam]["rows"] >= 40, fam
        assert rows[fam]["mape"] <= mape, rows[fam]
        assert abs(rows[fam]["bias"]) <= bias, rows[fam]
        assert rows[fam]["mape"] < a100[fam]["mape"], (rows[fam], a100[fam])


# -- prefill attention: the matmuls on the tensor cores, the softmax's exponential apart ---------

def test_prefill_attention_pays_an_exponential_per_score_by_hand():
    """Llama-3.1-8B on one H100, a 2,048-token prompt: each causal (query, key) pair of each of
    the 32 heads costs the two 128-wide matmuls' 4 x 128 FLOPs at ``attn_prefill_compute`` of the
    bf16 peak plus one ``attn_score_s`` (the exponential), and FlashAttention's whole tiles add
    ``attn_prefill_extra_keys`` keys a token. The exponential's share is what makes narrow heads
    slower per FLOP: at 64-wide heads it is twice the share it is at 128."""
    h, e = get_hardware("h100-sxm"), GPU_EFFICIENCY["h100-sxm"]
    r = RooflineCostModel("llama-3.1-8b", h, "bf16")
    n = 2048
    pairs = n * (n + 1) / 2 + e.attn_prefill_extra_keys * n
    matmul = 4 * 128 * 32 / (h.flops("bf16") * e.attn_prefill_compute)
    by_hand = pairs * (matmul + 32 * e.attn_score_s) + e.attention_latency_s
    assert r.attn_prefill_time(n, n * (n + 1) / 2) == pytest.approx(by_hand, rel=1e-12)
    share_128 = 32 * e.attn_score_s / (matmul + 32 * e.attn_score_s)
    assert 0.15 < share_128 < 0.5  # the tensor cores outrun the special-function units
    narrow = replace(get_model("llama-3.1-8b"), head_dim=64, num_heads=64, num_kv_heads=16, name="l64")
    r64 = RooflineCostModel(narrow, h, "bf16")
    assert r64.attn_prefill_time(n, n * (n + 1) / 2) > r.attn_prefill_time(n, n * (n + 1) / 2)


# -- the fused-MoE layer: its own fraction of the GEMM rate, its own bandwidth and fixed cost ----

def test_an_expert_layer_is_priced_with_the_fused_moe_constants_by_hand():
    """Qwen3-30B-A3B's experts (128 x 2048 x 768, top 8) on one H100 in bf16: one token reads
    its 8 experts' weights at ``moe_memory`` of HBM, a fixed ``moe_expert_latency_s`` each, and
    the call's fixed ``moe_latency_s``;
    16,384 tokens touch every expert and are compute-bound at ``moe_compute_ratio`` of the dense
    GEMMs' FLOP rate, each routed row computing ``moe_row_columns`` columns beyond its expert's
    3 x 768. Block-FP8 experts add the activation quantisation before each GEMM."""
    h, m, e = get_hardware("h100-sxm"), get_model("qwen3-30b-a3b"), GPU_EFFICIENCY["h100-sxm"]
    hd, ffn, k, experts = m.hidden_size, m.intermediate_size, 8, 128
    x = RooflineCostModel(m, h, "bf16").__dict__["_experts"]
    per_expert_bytes = 3 * hd * ffn * 2
    act = k * (2 * hd + 3 * ffn) * 2  # each routed row's input, up output, down input and output
    bw = h.memory_bandwidth * e.moe_memory
    rate = h.flops("bf16") * e.gemm_compute * e.moe_compute_ratio
    one = max(2 * k * hd * (3 * ffn + e.moe_row_columns) / rate,
              k * (per_expert_bytes / bw + e.moe_expert_latency_s) + act / bw) + e.moe_latency_s
    assert x.time(1) == pytest.approx(one, rel=1e-9)
    assert x.time(1) > 8 * per_expert_bytes / h.memory_bandwidth + 25e-6  # 8 experts + the call
    many = 16384 * 2 * k * hd * (3 * ffn + e.moe_row_columns) / rate
    assert x.time(16384) == pytest.approx(many + e.moe_latency_s, rel=1e-9)
    assert x.touched(16384) == pytest.approx(experts)
    fp8 = RooflineCostModel(m, h, "bf16", weight_dtype="fp8_block").__dict__["_experts"]
    assert fp8.latency == pytest.approx(e.moe_latency_s + 2 * e.quantized_gemm_latency_s)


# -- FP8 GEMMs: their own fraction of the FP8 peak, and the quantisation kernel ------------------

def test_an_fp8_gemm_pays_its_activation_quantisation_by_hand():
    h, e = get_hardware("h100-sxm"), GPU_EFFICIENCY["h100-sxm"]
    m = get_model("llama-3.1-8b")
    fp8 = RooflineCostModel(m, h, "bf16", weight_dtype="fp8")
    k, n = m.hidden_size, m.hidden_size  # o_proj at TP1: 4096 x 4096
    bw = h.memory_bandwidth * e.memory
    for rows in (1, 64, 4096):
        compute = 2 * k * n * rows / (h.flops("fp8") * e.quantized_gemm_compute)
        stream = (k * n * 1 + (k + n) * 2 * rows) / bw
        quant = k * (2 + 1) * rows / bw + e.quantized_gemm_latency_s
        expected = max(compute, stream) + quant + e.gemm_latency_s
        assert fp8.gemm_time("o_proj", rows) == pytest.approx(expected, rel=1e-12)
    # A 16-bit GEMM has no such kernel; on A100 (no FP8 cores) weight-only FP8 has none either.
    bf16 = RooflineCostModel(m, h, "bf16")
    assert bf16.gemm_time("o_proj", 64) == pytest.approx(
        max(2 * k * n * 64 / (h.flops("bf16") * e.gemm_compute), (k * n * 2 + (k + n) * 2 * 64) / bw)
        + e.gemm_latency_s, rel=1e-12)
    assert A100_EFFICIENCY.quantized_gemm_latency_s == 0.0


def test_quantisation_kernel_is_in_the_step_price_and_its_breakdown():
    fp8 = RooflineCostModel("llama-3.1-8b", "h100-sxm", "bf16", weight_dtype="fp8")
    no_quant = RooflineCostModel("llama-3.1-8b", "h100-sxm", "bf16", weight_dtype="fp8",
                                 efficiency=replace(GPU_EFFICIENCY["h100-sxm"], quantized_gemm_latency_s=0.0))
    for shape in (DECODE, PREFILL):
        assert fp8.price(shape) > no_quant.price(shape)
        assert sum(fp8.breakdown(shape).values()) == pytest.approx(fp8.price(shape), rel=1e-9)
    m = get_model("llama-3.1-8b")
    # Decode at 16 rows: four quantised GEMMs a layer, each paying the fixed part at least.
    assert fp8.price(DECODE) - no_quant.price(DECODE) >= 4 * m.num_layers * GPU_EFFICIENCY["h100-sxm"].quantized_gemm_latency_s


# -- the engine's CPU: its figures, overlapped under asynchronous scheduling ------------------

@pytest.mark.parametrize("shape", [DECODE, PREFILL])
def test_engine_cpu_overlaps_the_gpu_when_asynchronous_and_adds_when_not(shape):
    engine = get_engine("vllm", "0.15.1")
    gpu_only = RooflineCostModel("llama-2-7b", "h100-sxm", "fp16",
                                 efficiency=replace(efficiency_for("h100-sxm"), cpu_step_s=0.0, cpu_per_seq_s=0.0))
    cpu = engine.cpu_step_s + engine.cpu_per_seq_s * shape.batch_size
    on = RooflineCostModel("llama-2-7b", "h100-sxm", "fp16", engine=engine)
    off = RooflineCostModel("llama-2-7b", "h100-sxm", "fp16", engine=engine, async_scheduling=False)
    assert on.async_scheduling and not off.async_scheduling  # 0.15.1 schedules asynchronously
    assert on.price(shape) == pytest.approx(max(gpu_only.price(shape), cpu), rel=1e-12)
    assert off.price(shape) == pytest.approx(gpu_only.price(shape) + cpu, rel=1e-12)
    for pricer in (on, off):
        assert sum(pricer.breakdown(shape).values()) == pytest.approx(pricer.price(shape), rel=1e-9)
    # Without an engine the roofline keeps its own (Vidur's V0) CPU constants, added serially.
    legacy = RooflineCostModel("llama-2-7b", "h100-sxm", "fp16")
    e = legacy.efficiency
    assert legacy.price(shape) == pytest.approx(
        gpu_only.price(shape) + e.cpu_step_s + e.cpu_per_seq_s * shape.batch_size, rel=1e-12)


def test_the_roofline_is_bit_identical_over_columns_with_an_engine():
    import numpy as np

    on = RooflineCostModel("llama-2-7b", "h100-sxm", "fp16", engine=get_engine("vllm", "0.15.1"))
    shapes = [DECODE, PREFILL, StepShape(num_decode_seqs=300, decode_context_tokens=300 * 50)]
    assert np.array_equal(on.price_many(shapes), np.array([on.price(s) for s in shapes]))


# -- a scenario priced by the roofline runs the release's loop -----------------------------------

def _deployment(**over):
    from sim.run_parts import resolve_deployment

    cfg = {"model": "llama-2-7b", "hardware": "h100-sxm", "dtype": "float16",
           "cost_model": {"source": "roofline"},
           "scheduler": {"policy": "chunked", "max_num_seqs": 128}}
    for k, v in over.items():
        cfg.setdefault(k, {}).update(v)
    return resolve_deployment(copy.deepcopy(cfg))


def test_a_step_above_the_capture_sizes_waits_for_the_host_and_one_below_does_not():
    dep = _deployment()
    pricer = dep.cost_model
    host = get_model("llama-2-7b").num_layers * EAGER_HOST_S_PER_LAYER
    # max_num_seqs 128 -> vLLM captures up to min(2 x 128, 512) = 256 tokens.
    above = StepShape(num_prefill_tokens=257, num_prefill_seqs=1, prefill_attention_work=257 * 258 // 2)
    below = StepShape(num_prefill_tokens=256, num_prefill_seqs=1, prefill_attention_work=256 * 257 // 2)
    assert pricer.price(above) >= host
    assert pricer.price(below) < host / 2
    assert "outside CUDA graphs" in pricer.describe()
    # Under --enforce-eager every step waits for the host, whatever its size.
    eager = _deployment(engine={"enforce_eager": True}).cost_model
    assert eager.price(StepShape(num_decode_seqs=1, decode_context_tokens=100)) >= host / 2
    # FULL_DECODE_ONLY: decode batches replay graphs, every step with a prompt runs compiled.
    decode_only = _deployment(engine={"cudagraph_mode": "FULL_DECODE_ONLY"}).cost_model
    assert decode_only.price(below) >= host
    assert decode_only.price(StepShape(num_decode_seqs=200, decode_context_tokens=200 * 100)) < host / 2


def test_sglang_extends_outside_its_piecewise_graphs_wait_for_eager_pytorch():
    """SGLang: full graphs for decode batches up to cuda_graph_max_bs; an extend runs in
    piecewise graphs up to the captured extend size, eagerly above it (the table pricer's rules)."""
    from sim.pricing.operator_tables import eager_host_seconds

    dep = _deployment(engine={"name": "sglang"}, scheduler={"max_num_seqs": 128},
                      sglang={"cuda_graph_max_bs": 64, "piecewise_cuda_graph_max_tokens": 512})
    floor = dep.cost_model
    host = eager_host_seconds(get_model("llama-2-7b"), 1)
    assert (floor.above_rows, floor.prefill_above_rows) == (64, 512)
    decode = lambda n: StepShape(num_decode_seqs=n, decode_context_tokens=n * 100)  # noqa: E731
    extend = lambda n: StepShape(num_prefill_tokens=n, num_prefill_seqs=1,  # noqa: E731
                                 prefill_attention_work=n * (n + 1) // 2)
    assert floor.price(decode(64)) < host / 2 <= host <= floor.price(decode(65))
    assert floor.price(extend(512)) < host / 2 and floor.price(extend(513)) >= host


def test_auto_async_scheduling_follows_the_release_under_the_roofline():
    """vLLM 0.14 on schedules one step ahead by default (a request arriving mid-step joins the
    step after next); priced by the roofline, the simulated loop does too."""
    from sim.run_parts import as_scenario, async_scheduling_of

    for version, expected in (("0.15.1", True), ("0.12.0", False)):
        dep = _deployment(engine={"version": version})
        sc = as_scenario({"model": "llama-2-7b", "hardware": "h100-sxm",
                          "cost_model": {"source": "roofline"}, "engine": {"version": version}})
        assert dep.cost_model_source == "roofline"
        assert async_scheduling_of(sc, dep) is expected, version


def test_plan_names_the_roofline_error_and_whose_rows_it_was_measured_on():
    from analysis.plan_report import known_error_words

    ops = efficiency_error("b200")["operator_mape_pct"]
    own = known_error_words(RooflineCostModel("llama-3.1-8b", "b200").known_error())
    assert own == f"operators {min(ops.values()):.0f}-{max(ops.values()):.0f}% on b200"
    assert known_error_words(RooflineCostModel("llama-3.1-8b", "h20").known_error()).endswith(
        "on h100-sxm, another GPU's")


def test_an_efficiency_built_with_the_original_fields_prices_as_before():
    """The three fields the per-GPU fits added default to the old behaviour: FP8 GEMMs at the
    16-bit fraction, no quantisation kernel, no prefill tile overhead (A100's values)."""
    import dataclasses

    new = {"quantized_gemm_compute", "quantized_gemm_latency_s", "attn_prefill_extra_keys",
           "moe_compute_ratio", "moe_row_columns", "moe_memory", "moe_latency_s", "moe_expert_latency_s",
           "attn_score_s"}
    old = Efficiency(**{k: v for k, v in dataclasses.asdict(A100_EFFICIENCY).items() if k not in new})
    assert old.quantized_gemm_compute == 0.0  # 0: as gemm_compute
    for model, weights in (("llama-3.1-8b", None), ("llama-3.1-8b", "fp8"), ("qwen3-30b-a3b", None),
                           ("qwen3-30b-a3b", "fp8_block")):
        a = RooflineCostModel(model, "h100-sxm", "bf16", weight_dtype=weights, efficiency=old)
        b = RooflineCostModel(model, "h100-sxm", "bf16", weight_dtype=weights,
                              efficiency=A100_EFFICIENCY)
        for shape in (DECODE, PREFILL):
            assert a.price(shape) == b.price(shape)
    # Without the fused-MoE constants an expert layer is two dense GEMMs at their own fractions.
    x = RooflineCostModel("qwen3-30b-a3b", "h100-sxm", "bf16", efficiency=old)._experts
    h, m = get_hardware("h100-sxm"), get_model("qwen3-30b-a3b")
    assert x.compute_per_row == pytest.approx(
        2 * 8 * m.hidden_size * 3 * m.intermediate_size / (h.flops("bf16") * old.gemm_compute))
    assert x.latency == 2 * old.gemm_latency_s
