"""MFU and memory-bandwidth utilisation from the step log, against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.utilization import model_for_run, overall, step_work, utilization_model
from sim.api import simulate
from sim.catalog import get_hardware, get_model
from sim.memory_plan import plan_memory


def test_dense_flops_per_token_is_twice_the_linear_weights():
    m = get_model("llama-3.1-8b")
    um = utilization_model("llama-3.1-8b", "a100-80gb")
    # Llama 3.1 8B: 32 layers x (q 4096x4096, kv 2x4096x1024, o 4096x4096, MLP 3x4096x14336)
    # plus an untied 128,256 x 4096 head; 2 FLOPs per multiply-add.
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert um.flops_per_token == pytest.approx(2 * (32 * layer + 128_256 * 4096))
    assert um.flops_per_context_token == 2 * 32 * 32 * (128 + 128)
    assert um.peak_flops == get_hardware("a100-80gb").flops("fp16")
    assert m.active_params > um.flops_per_token / 2  # the embedding lookup is no FLOPs


def test_a_decode_step_reads_the_weights_once_and_each_context_token_once():
    plan = plan_memory("llama-3.1-8b", "a100-80gb")
    um = utilization_model("llama-3.1-8b", "a100-80gb", kv_bytes_per_token=plan.kv_bytes_per_token)
    steps = {"num_prefill_tokens": [0], "num_decode_seqs": [1], "num_spec_tokens": [0],
             "decode_context_tokens": [1000], "duration_s": [0.010]}
    flops, nbytes = step_work(steps, um)
    # Weights in the memory plan include norms (a few MB): within 0.1%.
    assert nbytes[0] - plan.kv_bytes_per_token * 1001 == pytest.approx(plan.weights_bytes, rel=1e-3)
    u = overall(steps, um)
    assert u["mbu"] == pytest.approx(nbytes[0] / 0.010 / get_hardware("a100-80gb").memory_bandwidth)
    assert u["mfu"] == pytest.approx(flops[0] / 0.010 / um.peak_flops)


def test_tensor_parallel_splits_the_work_per_gpu():
    one = utilization_model("llama-3.1-70b", "h100-sxm", gpus_per_replica=1)
    four = utilization_model("llama-3.1-70b", "h100-sxm", gpus_per_replica=4)
    assert four.flops_per_token == pytest.approx(one.flops_per_token / 4)
    assert four.fixed_weight_bytes == pytest.approx(one.fixed_weight_bytes / 4)


def test_moe_reads_only_the_experts_its_tokens_touch():
    um = utilization_model("mixtral-8x7b", "h100-sxm")
    m = get_model("mixtral-8x7b")
    one, many = um.step_bytes(np.array([1.0]), np.array([0.0])), um.step_bytes(np.array([4096.0]), np.array([0.0]))
    all_experts = m.num_moe_layers * m.num_experts * m.expert_params * 2  # fp16 bytes
    # One token touches top_k = 2 of 8 experts; 4,096 tokens touch all 8.
    assert one[0] - um.fixed_weight_bytes - um.kv_bytes_per_token == pytest.approx(
        um.expert_bytes * 2, rel=1e-9)
    assert many[0] - um.fixed_weight_bytes - um.kv_bytes_per_token * 4096 == pytest.approx(all_experts, rel=1e-6)
    # Every token computes through 2 experts only.
    assert um.flops_per_token < 2 * m.params / 3


def test_a_simulated_run_stays_below_peak_and_prefill_heavy_runs_use_more_flops():
    def util(overrides):
        r = simulate(None, overrides=["workload.num_requests=200", *overrides])
        return overall(r.steps, model_for_run(r.summary["scenario"], r.config))

    decode = util(["workload.input_len.mean=64", "workload.output_len.mean=512"])
    prefill = util(["workload.input_len.mean=4000", "workload.output_len.mean=8"])
    for u in (decode, prefill):
        assert 0 < u["mfu"] < 1 and 0 < u["mbu"] < 1
    assert prefill["mfu"] > 3 * decode["mfu"]
    assert decode["mbu"] > decode["mfu"]
