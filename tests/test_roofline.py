"""The roofline cost model and the memory plan: checked against real A100 kernel timings
(Vidur's profiles in ../shared/gpu_profiles; those tests skip where the data is absent), and
held to the properties any step-time model must have."""

from __future__ import annotations

import math
import random
import time
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from sim.catalog import get_hardware, get_model
from sim.catalog.dtypes import resolve_dtype, resolve_precision
from sim.memory_plan import plan_memory
from sim.pricing import (
    A100_EFFICIENCY, BREAKDOWN_KEYS, Efficiency, RooflineCostModel, StepPricer,
)
from sim.errors import ConfigError, DoesNotFitError
from sim.policies.step import StepShape

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILES = REPO_ROOT / ".." / "shared" / "gpu_profiles"


def _load_benchmark():
    """benchmarks/cost_model_vs_vidur.py holds the loader and the comparison, so the test and
    the README table are the same code."""
    from tests.benchmark_module import load_benchmark

    return load_benchmark("cost_model_vs_vidur")


@pytest.fixture(scope="module")
def vidur():
    if not (PROFILES / "a100" / "Llama-2-7b-hf" / "mlp.csv").is_file():
        pytest.skip(f"Vidur GPU profiles not found at {PROFILES}")
    bench = _load_benchmark()
    return bench, bench.load_profiles(PROFILES)


# -- against real A100 measurements --------------------------------------------------------

# Bounds on each family's median APE and MAPE (%), and on its median bias. Measured with
# A100_EFFICIENCY: qkv 7.1/9.0, o 5.5/8.4, mlp 5.7/7.2, norms 7.6/12.0, whole layer without
# attention 4.9/6.2, prefill 18.9/20.1, decode 9.1/11.2, all-reduce 6.6/11.4, send/recv
# 10.0/10.4; the bounds leave ~30% headroom
# so that rounding or a refit does not flake, while a real regression (a FLOP or byte count
# off by 2x, a dropped latency) breaks them. Why the roofline cannot do better, per family:
# - GEMMs: near the ridge (64-512 rows) cuBLAS tile quantisation makes time a staircase, a
#   roofline is its envelope;
# - norms/elementwise: kernels of 2-200 us with different instruction mixes share 2
#   efficiencies; the residual add streams at ~90% of HBM, the others at 40-50%;
# - prefill attention: FlashAttention without cached context runs at ~55-75% of the speed
#   per causal pair of chunked prefill with context (causal tile imbalance); one efficiency
#   over both leaves ~20% either way;
# - decode attention: batches under 8 cannot fill the GPU with (batch x KV heads) blocks;
# - collectives: NCCL switches protocol (LL, LL128, Simple) with message size.
FAMILY_BOUNDS = {
    # family: (median APE, MAPE, |median bias|)
    "qkv_proj": (10, 12, 6),
    "o_proj": (8, 12, 6),
    "mlp": (8, 10, 6),
    "norms_elementwise": (11, 16, 8),
    "layer_without_attention": (7, 8, 5),
    "attn_prefill": (25, 27, 8),
    "attn_decode": (12, 15, 6),
    "tp_allreduce": (9, 15, 6),
    "pp_send_recv": (13, 14, 8),
}


def test_roofline_error_per_operator_family(vidur, capsys):
    bench, data = vidur
    rows = bench.compare(data, A100_EFFICIENCY)
    with capsys.disabled():
        print("\n" + bench.format_table(rows, markdown=False))
    by_name = {r.name: r for r in rows}
    assert set(by_name) == set(FAMILY_BOUNDS)
    for name, (median_bound, mape_bound, bias_bound) in FAMILY_BOUNDS.items():
        r = by_name[name]
        assert r.rows >= 900, name
        assert r.median_ape <= median_bound, (name, r)
        assert r.mape <= mape_bound, (name, r)
        assert abs(r.bias) <= bias_bound, (name, r)


def test_constants_are_the_fit_to_the_measurements(vidur):
    """A100_EFFICIENCY is the rounded least-squares fit, not hand-tuned."""
    bench, data = vidur
    fitted = bench.fit(data)
    for f in fields(Efficiency):
        assert getattr(fitted, f.name) == pytest.approx(getattr(A100_EFFICIENCY, f.name),
                                                        rel=0.06), f.name


def test_efficiencies_are_physical():
    for f in fields(Efficiency):
        v = getattr(A100_EFFICIENCY, f.name)
        if f.name in ("quantized_gemm_latency_s", "attn_prefill_extra_keys"):
            assert v == 0.0  # no FP8 cores on A100; no tile overhead fitted on Vidur's rows
        elif f.name in ("moe_memory", "moe_latency_s", "moe_row_columns", "moe_expert_latency_s"):
            assert v == 0.0  # A100's tables hold no balanced MoE rows: experts as dense GEMMs
        elif f.name == "attn_score_s":
            assert v == 0.0  # Vidur's fit prices the exponentials inside attn_prefill_compute
        elif f.name.endswith("_s"):
            assert 0 < v < 5e-3, f.name
        else:
            assert 0 < v <= 1, f.name


def test_measured_gemms_halve_with_tp2_and_so_does_the_roofline(vidur):
    bench, data = vidur
    measured = {(m.op, m.model, m.tp, m.args): m.seconds for m in data}
    for model, gemm_op, op in (("llama-2-70b", "mlp_up", "mlp_up_proj"),
                               ("llama-2-7b", "qkv_proj", "attn_pre_proj")):
        tp1 = RooflineCostModel(model, "a100-80gb", tensor_parallel_size=1)
        tp2 = RooflineCostModel(model, "a100-80gb", tensor_parallel_size=2)
        for n in (1, 4096):
            real = measured[(op, model, 2, (n,))] / measured[(op, model, 1, (n,))]
            ours = tp2.gemm_time(gemm_op, n) / tp1.gemm_time(gemm_op, n)
            assert 0.45 < real < 0.65 and 0.45 < ours < 0.65
            assert ours == pytest.approx(real, abs=0.1)


# -- properties of the step time ----------------------------------------------------------

MODELS = [
    RooflineCostModel("llama-2-7b", "a100-80gb"),
    RooflineCostModel("opt-13b", "a100-40gb"),
    RooflineCostModel("llama-3.1-70b", "h100-sxm", "bfloat16", tensor_parallel_size=4,
                      pipeline_parallel_size=2),
    RooflineCostModel("qwen2.5-7b", "l40s", weight_dtype="fp8", kv_cache_dtype="fp8"),
    RooflineCostModel("mistral-7b", "mi300x", "bf16", weight_dtype="int4"),
    RooflineCostModel("smollm2-135m", "a10g", "float32"),
]


def prefill(n: int, ctx: int = 0, seqs: int = 1, **kw) -> StepShape:
    per = n // seqs
    return StepShape(num_prefill_tokens=n, num_prefill_seqs=seqs, prefill_context_tokens=ctx,
                     prefill_attention_work=seqs * (per * (ctx // seqs)
                                                    + per * (per + 1) // 2), **kw)


def decode(seqs: int, ctx: int, spec: int = 0, **kw) -> StepShape:
    return StepShape(num_decode_seqs=seqs, decode_context_tokens=ctx, num_spec_tokens=spec,
                     **kw)


def _random_shape(rng: random.Random) -> StepShape:
    p = rng.choice([0, 0, rng.randint(1, 8192)])
    d = rng.choice([0, rng.randint(1, 512)])
    ps = min(p, rng.randint(1, 8)) if p else 0
    return StepShape(
        num_prefill_tokens=p, num_prefill_seqs=ps, num_decode_seqs=d,
        num_spec_tokens=rng.choice([0, 4 * d]),
        decode_context_tokens=d * rng.randint(1, 4000),
        prefill_context_tokens=rng.randint(0, 4000) if p else 0,
        prefill_attention_work=p * (p + 1) // 2 if p else 0,
        num_swap_tokens=rng.choice([0, 0, rng.randint(1, 5000)]),
        num_padding_tokens=rng.choice([0, 0, rng.randint(0, 100)]),
    )


@pytest.mark.parametrize("cm", MODELS, ids=repr)
def test_more_prefill_tokens_never_cheaper(cm):
    times = [cm.step_time(prefill(n)) for n in range(1, 8193, 37)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    # ... and prefill with cached context costs at least as much as without.
    for n in (16, 512, 4096):
        assert cm.step_time(prefill(n, ctx=2048)) >= cm.step_time(prefill(n))


@pytest.mark.parametrize("cm", MODELS, ids=repr)
def test_more_decode_work_never_cheaper(cm):
    for seqs in (1, 8, 64, 256):
        by_ctx = [cm.step_time(decode(seqs, seqs * c)) for c in range(1, 8192, 97)]
        assert all(b >= a for a, b in zip(by_ctx, by_ctx[1:]))
    by_seqs = [cm.step_time(decode(s, s * 1000)) for s in range(1, 513)]
    assert all(b >= a for a, b in zip(by_seqs, by_seqs[1:]))
    by_spec = [cm.step_time(decode(32, 32 * 1000, spec=k)) for k in range(0, 33 * 8)]
    assert all(b >= a for a, b in zip(by_spec, by_spec[1:]))


@pytest.mark.parametrize("cm", MODELS, ids=repr)
def test_adding_any_work_never_makes_a_step_cheaper(cm):
    rng = random.Random(7)
    for _ in range(300):
        s = _random_shape(rng)
        base = cm.step_time(s)
        for field in ("num_prefill_tokens", "num_decode_seqs", "num_spec_tokens",
                      "decode_context_tokens", "prefill_context_tokens",
                      "prefill_attention_work", "num_swap_tokens", "num_padding_tokens"):
            bigger = StepShape(**{**s.to_dict(), field: getattr(s, field) + rng.randint(1, 999)})
            assert cm.step_time(bigger) >= base, (field, s)


@pytest.mark.parametrize("cm", MODELS, ids=repr)
def test_breakdown_sums_to_step_time_and_vectorised_matches(cm):
    rng = random.Random(3)
    shapes = [_random_shape(rng) for _ in range(500)]
    for s in shapes:
        b = cm.breakdown(s)
        assert tuple(b) == BREAKDOWN_KEYS
        assert all(v >= 0 for v in b.values())
        assert sum(b.values()) == pytest.approx(cm.step_time(s), rel=1e-9, abs=1e-15)
    arrays = {f.name: np.array([getattr(s, f.name) for s in shapes])
              for f in fields(StepShape)}
    # Same float operations in the same order: bit-identical, so the engine may mix them.
    np.testing.assert_array_equal(cm.step_times(**arrays), [cm.step_time(s) for s in shapes])


@pytest.mark.parametrize("cm", MODELS, ids=repr)
def test_a_decode_window_priced_at_once_matches_step_by_step_exactly(cm):
    """The bulk-decode path may price a window of decode steps (context growing one token per
    sequence a step) with ``price_many``: element i equals step i priced alone."""
    for shape in (decode(37, 37 * 900), decode(8, 8 * 10, spec=16), decode(256, 256 * 3000)):
        window = [replace(shape, decode_context_tokens=shape.decode_context_tokens
                          + i * shape.num_decode_seqs) for i in range(200)]
        times = cm.price_many(window)
        np.testing.assert_array_equal(times, [cm.step_time(s) for s in window])
        assert all(b >= a for a, b in zip(times, times[1:]))


def test_empty_step_is_free_and_a_step_pricer():
    cm = MODELS[0]
    assert cm.step_time(StepShape()) == 0.0
    assert sum(cm.breakdown(StepShape()).values()) == 0.0
    assert isinstance(cm, StepPricer) and cm.describe().startswith("roofline")


def test_decode_is_weight_bound_and_prefill_compute_bound():
    cm = RooflineCostModel("llama-2-7b", "a100-80gb")
    b = cm.breakdown(decode(1, 100))
    gemm = b["qkv_proj"] + b["o_proj"] + b["mlp"]
    # 6.48e9 linear-layer weights in fp16 streamed at 76% of 2.04 TB/s, plus 32 layers x
    # (4 GEMM + 1 activation) kernel floors: ~9.5 ms.
    e = A100_EFFICIENCY
    latency = 32 * (4 * e.gemm_latency_s + e.elementwise_latency_s)
    assert gemm == pytest.approx(6.48e9 * 2 / (2.039e12 * 0.76) + latency, rel=0.05)
    # A 4096-token prefill: 2 * 6.5e9 FLOPs/token at 70% of 312 TFLOP/s.
    b = cm.breakdown(prefill(4096))
    gemm = b["qkv_proj"] + b["o_proj"] + b["mlp"]
    assert gemm == pytest.approx(2 * 6.48e9 * 4096 / (312e12 * 0.70), rel=0.1)


def test_decode_attention_streams_the_context_kv():
    cm = RooflineCostModel("llama-2-7b", "a100-80gb")
    t1 = cm.breakdown(decode(64, 64 * 1000))["attn_decode"]
    t2 = cm.breakdown(decode(64, 64 * 2000))["attn_decode"]
    kv_bytes = 64 * 1000 * 2 * 32 * 4096 * 2  # tokens x K,V x layers x width x fp16
    assert t2 - t1 == pytest.approx(kv_bytes / (2.039e12 * A100_EFFICIENCY.memory), rel=0.01)


def test_tp2_roughly_halves_gemms_but_adds_all_reduce():
    tp1 = RooflineCostModel("llama-2-13b", "a100-80gb")
    tp2 = RooflineCostModel("llama-2-13b", "a100-80gb", tensor_parallel_size=2)
    for shape in (decode(32, 32 * 500), prefill(2048)):
        b1, b2 = tp1.breakdown(shape), tp2.breakdown(shape)
        for fam in ("qkv_proj", "o_proj", "mlp"):
            assert 0.45 <= b2[fam] / b1[fam] <= 0.62, (fam, shape)
        assert b1["tp_allreduce"] == 0 and b2["tp_allreduce"] > 0
        assert tp2.step_time(shape) < tp1.step_time(shape)


def test_tensor_parallel_group_beyond_a_node_uses_the_network():
    inside = RooflineCostModel("llama-2-70b", "a100-80gb", tensor_parallel_size=8)
    across = RooflineCostModel("llama-2-70b", "a100-80gb", tensor_parallel_size=16)
    nbytes = 64e6
    assert across.allreduce_time(nbytes) > 5 * inside.allreduce_time(nbytes)


def test_pipeline_parallel_adds_send_recv_not_speed():
    pp1 = RooflineCostModel("llama-2-13b", "a100-80gb")
    pp2 = RooflineCostModel("llama-2-13b", "a100-80gb", pipeline_parallel_size=2)
    for shape in (decode(16, 16 * 300), prefill(1024)):
        b1, b2 = pp1.breakdown(shape), pp2.breakdown(shape)
        assert b1["pp_send_recv"] == 0 and b2["pp_send_recv"] > 0
        # One batch in flight: same total layer work, plus transfers (the bubble).
        assert pp2.step_time(shape) == pytest.approx(
            pp1.step_time(shape) + b2["pp_send_recv"], rel=1e-9)


def test_swap_costs_pcie_time():
    cm = RooflineCostModel("opt-13b", "a100-40gb")
    t = cm.breakdown(decode(1, 100, num_swap_tokens=1000))["swap"]
    expected = 1000 * 819200 / (32e9 * A100_EFFICIENCY.pcie_efficiency)
    assert t == pytest.approx(expected, rel=0.01)
    only_swap = StepShape(num_swap_tokens=1000)
    assert cm.step_time(only_swap) > expected


def test_cpu_overhead_per_step_and_per_sequence():
    cm = RooflineCostModel("llama-2-7b", "a100-80gb")
    e = A100_EFFICIENCY
    assert cm.breakdown(decode(1, 10))["overhead"] == pytest.approx(e.cpu_step_s + e.cpu_per_seq_s)
    assert cm.breakdown(decode(100, 1000))["overhead"] == pytest.approx(
        e.cpu_step_s + 100 * e.cpu_per_seq_s)


def test_quantisation_changes_the_right_terms():
    fp16 = RooflineCostModel("llama-2-7b", "a100-80gb")
    w4 = RooflineCostModel("llama-2-7b", "a100-80gb", weight_dtype="int4")
    w8 = RooflineCostModel("llama-2-7b", "a100-80gb", weight_dtype="int8")
    kv8 = RooflineCostModel("llama-2-7b", "a100-80gb", kv_cache_dtype="fp8")
    small = decode(1, 100)
    # Weight-bound decode: 4-bit weights stream ~3.8x faster.
    ratio = fp16.breakdown(small)["mlp"] / w4.breakdown(small)["mlp"]
    assert 3.0 < ratio < 4.0
    # W8A8 on A100 uses the int8 tensor cores: compute-bound GEMMs run ~2x faster.
    big = prefill(4096)
    assert fp16.breakdown(big)["mlp"] / w8.breakdown(big)["mlp"] == pytest.approx(2, rel=0.1)
    # int4 is W4A16: compute-bound prefill is not faster.
    assert w4.breakdown(big)["mlp"] == pytest.approx(fp16.breakdown(big)["mlp"], rel=0.02)
    # An 8-bit KV cache halves decode attention's bytes.
    long = decode(64, 64 * 4000)
    assert kv8.breakdown(long)["attn_decode"] < 0.55 * fp16.breakdown(long)["attn_decode"]


def test_fp8_weights_compute_in_fp8_only_where_supported():
    a100 = resolve_precision(get_hardware("a100-80gb"), "bf16", "fp8")
    h100 = resolve_precision(get_hardware("h100-sxm"), "bf16", "fp8")
    assert a100.compute == "bf16" and a100.weight_bytes == 1
    assert h100.compute == "fp8" and h100.weight_bytes == 1


def test_dtype_aliases_and_errors():
    assert resolve_dtype("fp16") == resolve_dtype("float16") == "float16"
    assert resolve_dtype("BF16") == "bfloat16"
    assert resolve_dtype("fp32") == "float32"
    with pytest.raises(ConfigError, match="dtype: unknown value 'fp12'"):
        resolve_dtype("fp12")
    hw = get_hardware("a100-80gb")
    with pytest.raises(ConfigError, match="weight_dtype"):
        resolve_precision(hw, "fp16", "int3")
    with pytest.raises(ConfigError, match="kv_cache_dtype"):
        resolve_precision(hw, "fp16", None, "int4")
    assert resolve_precision(hw, "fp16", "float16").weight_dtype == "auto"


def test_bad_parallel_sizes_are_config_errors():
    with pytest.raises(ConfigError, match="does not divide"):
        RooflineCostModel("llama-2-7b", "a100-80gb", tensor_parallel_size=3)
    with pytest.raises(ConfigError, match="pipeline_parallel_size"):
        RooflineCostModel("smollm2-135m", "a100-80gb", pipeline_parallel_size=31)
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        plan_memory("llama-2-7b", "a100-80gb", tensor_parallel_size=0)


def test_step_time_is_fast():
    cm = RooflineCostModel("llama-3.1-70b", "h100-sxm", tensor_parallel_size=4,
                           pipeline_parallel_size=2)
    rng = random.Random(0)
    shapes = [_random_shape(rng) for _ in range(2000)]

    def per_call(f) -> float:
        start = time.perf_counter()
        for _ in range(5):
            for s in shapes:
                f(s)
        return (time.perf_counter() - start) / (5 * len(shapes))

    # Against a baseline timed in the same run (a Python call that reads the shape), not an
    # absolute bound: other jobs on a shared machine slow both alike. About 100x here (24 us
    # against 0.23 us on a loaded 2-core machine); the bound catches a 10x regression, and
    # benchmarks/sim_speed.py measures the speed itself.
    baseline = min(per_call(lambda s: s.num_prefill_tokens + s.num_decode_seqs) for _ in range(3))
    priced = min(per_call(cm.step_time) for _ in range(3))
    assert priced < 1000 * baseline, (priced, baseline)


# -- memory plan ----------------------------------------------------------------------------

def test_opt13b_on_a100_40gb_memory_plan():
    plan = plan_memory("opt-13b", "a100-40gb", "float16", 0.9)
    assert plan.weights_bytes == pytest.approx(25.7e9, abs=0.05e9)
    assert plan.kv_bytes_per_token == 2 * 40 * 5120 * 2 == 800 * 1024
    assert plan.budget_bytes == pytest.approx(0.9 * 40 * 2**30)
    assert 0.5e9 < plan.activation_reserve_bytes < 3e9
    assert plan.kv_pool_bytes == pytest.approx(
        plan.budget_bytes - plan.weights_bytes - plan.activation_reserve_bytes)
    assert plan.num_kv_slots == int(plan.kv_pool_bytes // plan.kv_bytes_per_token)
    assert 12_000 < plan.num_kv_slots < 16_000  # ~11.5 GB of KV: ~880 blocks of 16
    assert plan.num_blocks(16) == plan.num_kv_slots // 16


def test_llama70b_does_not_fit_one_a100_40gb():
    with pytest.raises(DoesNotFitError) as exc:
        plan_memory("llama-2-70b", "a100-40gb", "float16", 0.9)
    msg = str(exc.value)
    assert isinstance(exc.value, ConfigError) and "\n" not in msg
    assert "llama-2-70b in float16 needs 138.0 GB of weights per GPU" in msg
    assert "a100-40gb x 0.90 gives 38.7 GB" in msg
    assert "tensor_parallel_size >= 4" in msg and "quantised" in msg
    plan = plan_memory("llama-2-70b", "a100-40gb", "float16", 0.9, tensor_parallel_size=4)
    assert plan.weights_bytes == pytest.approx(138e9 / 4, rel=0.01)
    assert plan.kv_bytes_per_token == 2 * 80 * 2 * 128 * 2  # 8 KV heads / 4 ranks


def test_weights_fit_but_reserve_leaves_no_kv():
    with pytest.raises(DoesNotFitError, match="activation reserve") as exc:
        plan_memory("llama-2-13b", "a100-40gb", "float16", 0.62)
    assert "\n" not in str(exc.value)


def test_memory_plan_sharding_and_quantisation():
    base = plan_memory("llama-3.1-70b", "h100-sxm", "bf16", tensor_parallel_size=2)
    pp = plan_memory("llama-3.1-70b", "h100-sxm", "bf16", tensor_parallel_size=2,
                     pipeline_parallel_size=2)
    assert pp.weights_bytes < 0.55 * base.weights_bytes
    assert pp.kv_bytes_per_token == base.kv_bytes_per_token // 2
    w4 = plan_memory("llama-3.1-70b", "h100-sxm", "bf16", weight_dtype="int4")
    assert w4.weights_bytes < 0.32 * get_model("llama-3.1-70b").params * 2
    fp8kv = plan_memory("llama-3.1-8b", "h100-sxm", "bf16", kv_cache_dtype="fp8")
    bf16kv = plan_memory("llama-3.1-8b", "h100-sxm", "bf16")
    assert fp8kv.kv_bytes_per_token * 2 == bf16kv.kv_bytes_per_token
    assert fp8kv.num_kv_slots == pytest.approx(2 * bf16kv.num_kv_slots, rel=1e-3)


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    plan = plan_memory("qwen2.5-7b", "a100-80gb", tensor_parallel_size=7)  # 4 KV heads
    assert plan.kv_bytes_per_token == 2 * 28 * 1 * 128 * 2
    with pytest.raises(ConfigError):
        plan_memory("llama-2-7b", "a100-80gb", gpu_memory_utilization=1.5)


def test_memory_plan_covers_every_catalog_pair_that_fits():
    """Every model x GPU either plans with a positive pool or says why not, in one line."""
    from sim.catalog import list_hardware, list_models

    for m in list_models():
        for hw in list_hardware():
            try:
                plan = plan_memory(m, hw)
            except DoesNotFitError as exc:
                assert "\n" not in str(exc) and m.name in str(exc)
                continue
            assert plan.num_kv_slots > 0 and plan.kv_pool_bytes > 0
            assert math.isclose(plan.memory_bytes, hw.usable_memory_bytes)


# --- FP4 weights (MXFP4, NVFP4) -------------------------------------------------------------

@pytest.mark.parametrize("weights,bits", [("mxfp4", 4.25), ("nvfp4", 4.5)])
def test_fp4_weights_hold_their_block_scales_and_compute_natively_only_on_blackwell(weights, bits):
    from sim.catalog.dtypes import resolve_precision
    from sim.catalog.hardware import get_hardware

    blackwell = resolve_precision(get_hardware("b200"), "bfloat16", weights)
    assert blackwell.weight_bytes == bits / 8 and blackwell.compute == "fp4"
    if weights == "mxfp4":  # Hopper runs MXFP4 dequantised (gpt-oss on H100: W4A16 kernels)
        hopper = resolve_precision(get_hardware("h200"), "bfloat16", weights)
        assert hopper.weight_bytes == bits / 8 and hopper.compute == "bf16"
    else:  # NVFP4 needs FP4 tensor cores: refused on Hopper in one line naming GPU and format
        with pytest.raises(ConfigError, match="h200 cannot run nvfp4"):
            resolve_precision(get_hardware("h200"), "bfloat16", weights)
    # Weights shrink by the byte ratio (Qwen3-235B-A22B over TP4: bf16 117.5 GB per GPU).
    full = plan_memory("qwen3-235b-a22b", "b200", "bfloat16", tensor_parallel_size=4)
    four = plan_memory("qwen3-235b-a22b", "b200", "bfloat16", tensor_parallel_size=4,
                       weight_dtype=weights)
    assert four.weights_bytes < full.weights_bytes * (bits / 16 + 0.05)
    # Every byte the weights free goes to the KV pool.
    freed = full.weights_bytes - four.weights_bytes
    assert math.isclose(four.kv_pool_bytes - full.kv_pool_bytes, freed, rel_tol=0.01)
    assert four.num_kv_slots > 2 * full.num_kv_slots


def test_fp4_weights_speed_decode_everywhere_and_prefill_only_with_fp4_tensor_cores():
    decode = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 1000)
    prefill = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1,
                        prefill_attention_work=8192 * 8193 // 2)

    def price(hw, w, shape):
        # Every linear layer in the format (scope all): the format's physics, not a recipe's.
        return RooflineCostModel("qwen3-235b-a22b", hw, "bfloat16", tensor_parallel_size=4,
                                 weight_dtype=w, quant_scope="all").price(shape)

    for hw, fp4 in (("h200", "mxfp4"), ("b200", "nvfp4")):  # fewer bytes: decode beats FP8
        assert price(hw, fp4, decode) < price(hw, "fp8", decode)
    # Hopper dequantises MXFP4 to 16-bit compute: a compute-bound prefill is slower than FP8's;
    # Blackwell computes in FP4: faster.
    assert price("h200", "mxfp4", prefill) > price("h200", "fp8", prefill)
    assert price("b200", "nvfp4", prefill) < price("b200", "fp8", prefill)


def test_fp4_weights_are_a_config_choice():
    from sim.api import simulate

    s = simulate(None, overrides=["model=qwen3-30b-a3b", "hardware=b200", "dtype=bfloat16",
                                  "quantization.weights=nvfp4", "workload.num_requests=30"]).summary
    assert s["completed"] == 30 and "weights nvfp4" in s["cost_model"]["description"]
