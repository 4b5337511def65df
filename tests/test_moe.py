"""Mixture of experts (Mixtral-style): parameter counts against the model card, config.json
loading, the memory plan holding every expert, and the step price reading only the experts a
step's tokens touch, with the same bits on one step and many."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from sim.catalog.models import ModelSpec, get_model
from sim.errors import ConfigError
from sim.memory_plan import plan_memory
from sim.policies.step import StepShape
from sim.pricing import RooflineCostModel
from sim.pricing.experts import ExpertLayer, touched_table

MIXTRAL_CONFIG = {  # mistralai/Mixtral-8x7B-v0.1 config.json (the keys kvplan reads)
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 1e6,
    "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None,
    "tie_word_embeddings": False,
}


def test_mixtral_total_and_active_parameters_match_the_model_card():
    m = get_model("mixtral-8x7b")
    assert m.is_moe and (m.num_experts, m.num_experts_per_tok) == (8, 2)
    assert m.params == pytest.approx(46.7e9, rel=0.002)         # "46.7B total"
    assert m.active_params == pytest.approx(12.9e9, rel=0.002)  # "12.9B active per token"
    dense = get_model("mistral-7b")
    assert not dense.is_moe and dense.active_params == dense.params


def test_mixtral_config_json_loads_like_the_catalog_entry(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MIXTRAL_CONFIG))
    spec = get_model(tmp_path)
    ref = get_model("mixtral-8x7b")
    assert (spec.num_experts, spec.num_experts_per_tok, spec.sliding_window) == (8, 2, None)
    assert spec.params == ref.params and spec.active_params == ref.active_params
    assert get_model("mistralai/Mixtral-8x7B-Instruct-v0.1") is ref


@pytest.mark.parametrize("experts,k,match", [(8, 0, "both"), (0, 2, "both"), (4, 5, "exceeds")])
def test_inconsistent_experts_are_rejected(experts, k, match):
    with pytest.raises(ConfigError, match=match):
        ModelSpec(name="x", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=4, head_dim=16,
                  intermediate_size=128, vocab_size=100, max_position_embeddings=64,
                  num_experts=experts, num_experts_per_tok=k)


def test_memory_holds_every_expert():
    m = get_model("mixtral-8x7b")
    plan = plan_memory(m, "h100-sxm", "bfloat16", tensor_parallel_size=2)
    # every expert's weights, halved over TP 2, at 2 bytes
    assert plan.weights_bytes == pytest.approx(m.params * 2 / 2, rel=0.01)
    assert plan.num_kv_slots > 0


def test_touched_experts_follow_uniform_routing():
    t = touched_table(8, 2)
    assert t[0] == 0.0 and t[1] == 2.0  # one token: its two experts
    assert t[4] == pytest.approx(8 * (1 - 0.75 ** 4))
    assert all(a < b for a, b in zip(t, t[1:]))
    assert 8 - t[-1] < 1e-11  # the table ends where every expert is touched


def test_expert_layer_prices_one_step_and_many_with_the_same_bits():
    layer = ExpertLayer(compute_per_row=1e-7, weight_per_expert=2e-4, memory_per_row=1e-8,
                        latency=4e-6, num_experts=8, top_k=2)
    rows = [0, 1, 2, 3, 7, 40, 41, 100, 500, 10_000, 10 ** 7]
    assert layer.time(np.array(rows, dtype=float), np.maximum).tolist() == \
        [layer.time(r) for r in rows]


def test_a_decode_step_reads_only_the_experts_its_tokens_touch():
    mix = RooflineCostModel("mixtral-8x7b", "h100-sxm", "bfloat16", tensor_parallel_size=2)
    mlp = lambda b: mix.breakdown(StepShape(num_decode_seqs=b, decode_context_tokens=100 * b))["mlp"]
    # one token reads 2 of 8 experts; 64 tokens read all 8 (about 4x the weight traffic)
    assert 3.0 < mlp(64) / mlp(1) < 4.5
    assert mlp(1) < mlp(2) < mlp(4) < mlp(16)
    # the whole step: dearer than the dense model of Mixtral's active size at one sequence,
    # by less than its total size would make it
    dense = RooflineCostModel("llama-2-13b", "h100-sxm", "bfloat16", tensor_parallel_size=2)
    one = StepShape(num_decode_seqs=1, decode_context_tokens=100)
    assert mix.price(one) < 3 * dense.price(one)


def test_mixtral_roofline_scalar_and_vectorised_prices_are_bit_identical():
    from sim.pricing.base import SHAPE_FIELDS

    mix = RooflineCostModel("mixtral-8x7b", "h100-sxm", "bfloat16", tensor_parallel_size=2)
    rng = random.Random(2)
    shapes = [StepShape(num_prefill_tokens=p, num_prefill_seqs=min(p, 3),
                        num_decode_seqs=d, decode_context_tokens=d * rng.randint(1, 4000),
                        prefill_attention_work=p * (p + 1) // 2)
              for p, d in ((rng.choice([0, rng.randint(1, 8192)]), rng.randint(0, 300))
                           for _ in range(1000))]
    scalar = [mix.price(s) for s in shapes]
    cols = {f: np.array([getattr(s, f) for s in shapes]) for f in SHAPE_FIELDS}
    assert mix.price_columns(cols).tolist() == scalar


QWEN3_MOE_CONFIG = {  # Qwen/Qwen3-30B-A3B config.json (the keys kvplan reads)
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rope_theta": 1e6, "num_experts": 128,
    "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": False, "attention_bias": False,
}


@pytest.mark.parametrize("slug,total,active", [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),      # model card: 30.5B total, 3.3B activated
    ("qwen3-235b-a22b", 235e9, 22e9),      # model card: 235B total, 22B activated
])
def test_qwen3_moe_total_and_active_parameters_match_the_model_cards(slug, total, active):
    m = get_model(slug)
    assert m.params == pytest.approx(total, rel=0.01)
    assert m.active_params == pytest.approx(active, rel=0.02)
    assert m.qk_norm  # per-head q/k RMSNorm weights are counted


def test_qwen3_moe_config_json_prices_the_expert_width(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_MOE_CONFIG))
    spec = get_model(tmp_path)
    ref = get_model("qwen3-30b-a3b")
    assert spec.intermediate_size == 768 and (spec.num_experts, spec.num_experts_per_tok) == (128, 8)
    assert spec.params == ref.params and spec.active_params == ref.active_params
    dense = dict(QWEN3_MOE_CONFIG, model_type="qwen3", intermediate_size=12288)
    for k in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        dense.pop(k)
    (tmp_path / "config.json").write_text(json.dumps(dense))
    assert not get_model(tmp_path).is_moe and get_model(tmp_path).qk_norm
    mixed = dict(QWEN3_MOE_CONFIG, mlp_only_layers=[0, 1])
    (tmp_path / "config.json").write_text(json.dumps(mixed))
    with pytest.raises(ConfigError, match="dense layers"):
        get_model(tmp_path)


def test_qwen3_moe_decode_reads_few_of_its_128_experts():
    m = RooflineCostModel("qwen3-30b-a3b", "h100-sxm", "bfloat16")
    mlp = lambda b: m.breakdown(StepShape(num_decode_seqs=b, decode_context_tokens=100 * b))["mlp"]
    # 8 of 128 experts at one token, about 52 at 8 tokens (128 (1 - (120/128)^8)), all by ~300
    assert touched_table(128, 8)[1] == pytest.approx(8.0)
    assert mlp(1) < mlp(8) < mlp(64)
