"""Data-parallel attention with expert parallelism (``parallel.data_parallel_size``,
``parallel.enable_expert_parallel``): memory per GPU by hand, one engine per attention rank,
the all-to-all priced, and the deployment DeepSeek-V3 is served with compared with TP8."""

from __future__ import annotations

import random

import pytest

from sim.api import resolve_deployment, simulate
from sim.catalog.models import get_model
from sim.errors import ConfigError
from sim.memory_plan import plan_memory
from sim.policies.step import StepShape
from sim.pricing import RooflineCostModel

DP_EP = ["model=deepseek-v3", "hardware=h200", "dtype=bfloat16", "quantization.weights=fp8",
         "parallel.tensor_parallel_size=1", "parallel.data_parallel_size=8",
         "parallel.enable_expert_parallel=true"]


def test_deepseek_v3_dp8_ep8_memory_by_hand():
    """Each GPU holds the whole attention (MLA), dense layers, shared experts, routers and
    embeddings, and 32 of the 256 routed experts of every sparse layer."""
    m = get_model("deepseek-v3")
    plan = plan_memory(m, "h200", "bfloat16", 0.9, tensor_parallel_size=1, weight_dtype="fp8",
                       expert_parallel_size=8)
    routed = 58 * 256 * m.expert_params
    routers = 58 * m.router_params  # 16-bit whatever the format (vLLM's unquantised gate)
    by_hand = ((m.linear_params - routed - routers) + routed / 8 + routers * 2
               + (m.embedding_params + m.lm_head_params) * 2
               + (61 * m.other_params_per_layer + m.final_norm_params) * 2)
    assert plan.weights_bytes == pytest.approx(by_hand, rel=1e-9)
    assert plan.kv_bytes_per_token == 70_272   # the latent, whole, on each rank
    tp8 = plan_memory(m, "h200", "bfloat16", 0.9, tensor_parallel_size=8, weight_dtype="fp8")
    # Each rank's pool is smaller than a TP8 GPU's, but the 8 ranks hold separate latents:
    # the replica caches 5x more tokens than TP8, whose 8 GPUs all hold the same latent.
    assert plan.num_kv_slots < tp8.num_kv_slots < 8 * plan.num_kv_slots
    assert 8 * plan.num_kv_slots > 5 * tp8.num_kv_slots


def test_the_all_to_all_is_priced_and_experts_are_read_where_they_live():
    r = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=1,
                          weight_dtype="fp8", expert_parallel_size=8, data_parallel_size=8)
    s = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 2000)
    b = r.breakdown(s)
    assert b["ep_all_to_all"] > 0 and b["tp_allreduce"] == 0
    assert sum(b.values()) == pytest.approx(r.price(s), rel=1e-9)
    # 256 tokens over 8 ranks touch about 256 experts in all: each GPU reads its ~32.
    layer = r._experts
    assert layer.local_share * layer.touched(32 * layer.global_rows) == pytest.approx(32, rel=0.01)
    rng = random.Random(1)
    shapes = [StepShape(num_decode_seqs=d, decode_context_tokens=d * rng.randint(1, 4000),
                        num_prefill_tokens=p, num_prefill_seqs=1 if p else 0,
                        prefill_attention_work=p * (p + 1) // 2)
              for d, p in ((rng.randint(0, 64), rng.choice([0, rng.randint(1, 2048)]))
                           for _ in range(200))]
    assert r.price_many(shapes).tolist() == [r.price(x) for x in shapes]


@pytest.mark.parametrize("batch", [64, 256])
def test_dp_attention_with_ep_decodes_a_batch_faster_than_tp8(batch):
    """Same total batch: TP8 runs it as one, DP8+EP8 as 8 ranks of batch / 8 each."""
    tp8 = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=8, weight_dtype="fp8")
    dp = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=1,
                           weight_dtype="fp8", expert_parallel_size=8, data_parallel_size=8)
    one = tp8.price(StepShape(num_decode_seqs=batch, decode_context_tokens=batch * 2000))
    each = dp.price(StepShape(num_decode_seqs=batch // 8, decode_context_tokens=batch // 8 * 2000))
    assert each < one


def test_a_dp_ep_replica_runs_one_engine_per_rank():
    s = simulate(None, overrides=DP_EP + ["workload.num_requests=80", "workload.arrival.rate=8"]).summary
    sc = s["scenario"]
    assert s["completed"] == 80
    assert sc["gpus_per_replica"] == 8 and sc["data_parallel_size"] == 8
    assert sc["expert_parallel_size"] == 8
    assert "dp=8, ep=8" in s["cost_model"]["description"]
    assert s["output_throughput_per_gpu"] == pytest.approx(s["output_throughput"] / 8)


def test_a_dense_model_with_dp_is_independent_engines():
    base = ["workload.num_requests=200", "workload.arrival.rate=16", "cost_model.source=roofline"]
    dp = simulate(None, overrides=base + ["parallel.data_parallel_size=2"]).summary
    two = simulate(None, overrides=base + ["parallel.num_replicas=2"]).summary
    assert dp["scenario"]["gpus_per_replica"] == 2 and dp["scenario"]["expert_parallel_size"] == 1
    assert dp["mean_ttft_ms"] == two["mean_ttft_ms"] and dp["duration_s"] == two["duration_s"]


@pytest.mark.parametrize("extra,needle", [
    (["parallel.enable_expert_parallel=true"], "has no experts"),
    (["model=mixtral-8x7b", "parallel.data_parallel_size=3", "parallel.enable_expert_parallel=true"],
     "do not spread evenly"),
    (["parallel.expert_parallel_size=2", "parallel.tensor_parallel_size=2", "engine.name=sglang"],
     "has no experts"),
    (["model=mixtral-8x7b", "parallel.tensor_parallel_size=4", "parallel.expert_parallel_size=3",
      "engine.name=sglang"], "does not divide"),
    (["model=mixtral-8x7b", "parallel.tensor_parallel_size=4", "parallel.expert_parallel_size=2"],
     "MoE TP x EP is SGLang's"),
])
def test_impossible_expert_parallelism_is_one_line(extra, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        simulate(None, overrides=["workload.num_requests=10"] + extra)
    assert "\n" not in str(err.value)


def test_moe_tp_x_ep_holds_the_same_weights_and_runs():
    """SGLang's MoE TP x EP (``parallel.expert_parallel_size`` 2 of tp 4): each GPU holds a
    quarter of every layer's routed expert weights, as with pure TP or pure EP (half the
    experts, each split in two), and a run accounts for every request."""
    base = {"model": "mixtral-8x7b", "hardware": "h100-sxm", "engine": {"name": "sglang"},
            "cost_model": {"source": "roofline"}}
    weights = {}
    for name, par in (("tp", {"tensor_parallel_size": 4}),
                      ("ep", {"tensor_parallel_size": 4, "enable_expert_parallel": True}),
                      ("tpxep", {"tensor_parallel_size": 4, "expert_parallel_size": 2})):
        weights[name] = resolve_deployment({**base, "parallel": par}).memory.weights_bytes
    assert weights["tp"] == weights["ep"] == weights["tpxep"]
    res = simulate({**base, "parallel": {"tensor_parallel_size": 4, "expert_parallel_size": 2},
                    "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate": 20.0}}})
    assert res.summary["completed"] == 40
    assert res.summary["scenario"]["expert_parallel_size"] == 2


def test_dp_without_ep_splits_every_expert_over_all_gpus():
    """vLLM's DP attention without ``--enable-expert-parallel`` (``FusedMoEParallelConfig``
    flattens TP across DP for the MoE): each expert split over all tp x dp GPUs, the ranks'
    tokens gathered. By hand on Mixtral DP 2 x TP 1: the routed experts over 2 GPUs as at TP 2
    (half of each), attention and the rest whole on each rank; the MoE sees both ranks' rows."""
    m = get_model("mixtral-8x7b")
    base = {"model": "mixtral-8x7b", "hardware": "h100-sxm", "cost_model": {"source": "roofline"}}
    dp = resolve_deployment({**base, "parallel": {"data_parallel_size": 2}})
    ep = resolve_deployment({**base, "parallel": {"data_parallel_size": 2, "enable_expert_parallel": True}})
    routed = m.num_moe_layers * m.num_experts * m.expert_params
    # Half of the routed experts either way (split in two, or 4 of 8 whole): the same bytes.
    assert dp.memory.weights_bytes == pytest.approx(ep.memory.weights_bytes, rel=1e-9)
    from sim.catalog.dtypes import resolve_precision
    from sim.catalog.hardware import get_hardware
    from sim.memory_plan import weights_bytes_per_gpu

    whole = weights_bytes_per_gpu(m, resolve_precision(get_hardware("h100-sxm"), "float16"))
    assert whole - dp.memory.weights_bytes == pytest.approx(routed * 2 / 2, rel=1e-9)  # fp16: 2 B
    res = simulate({**base, "parallel": {"data_parallel_size": 2},
                    "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate": 20.0}}})
    s = res.summary["scenario"]
    assert res.summary["completed"] == 40
    assert s["expert_parallel_size"] == 1 and s["gpus_per_replica"] == 2
    assert s["expert_tensor_parallel_size"] == 2  # each expert over both GPUs
    # The roofline gathers the other rank's rows for the experts (priced beside EP's exchange).
    cm = RooflineCostModel(m, "h100-sxm", expert_parallel_size=1, data_parallel_size=2,
                           expert_tensor_parallel_size=2)
    parts = cm.breakdown(StepShape(num_decode_seqs=8, decode_context_tokens=8 * 1000))
    assert parts["ep_all_to_all"] > 0
    alone = RooflineCostModel(m, "h100-sxm", tensor_parallel_size=2)
    # Each GPU reads half of every touched expert for 16 rows (both ranks'), as TP 2 would.
    assert cm._experts.time(8) == pytest.approx(alone._experts.time(16), rel=1e-9)
