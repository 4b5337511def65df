"""DeepSeek-V3: multi-head latent attention (MLA), shared experts and dense-first layers.
Parameter counts against the model card, KV bytes per token by attention kind, the memory
plan and decode step on 8x H200 against a hand calculation, config.json loading, bad configs."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from sim.api import simulate
from sim.catalog.models import get_model
from sim.errors import ConfigError
from sim.memory_plan import kv_bytes_per_token, plan_memory
from sim.policies.step import StepShape
from sim.pricing import RooflineCostModel
from sim.catalog.dtypes import resolve_precision
from sim.catalog.hardware import get_hardware

GB = 1e9

DEEPSEEK_V3_CONFIG = {  # deepseek-ai/DeepSeek-V3 config.json, the keys kvplan reads
    "model_type": "deepseek_v3", "_name_or_path": "deepseek-ai/DeepSeek-V3",
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
    "moe_intermediate_size": 2048, "intermediate_size": 18432, "first_k_dense_replace": 3,
    "moe_layer_freq": 1, "vocab_size": 129280, "max_position_embeddings": 163840,
    "rope_theta": 10000, "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
}


@pytest.mark.parametrize("slug,total,active", [
    ("deepseek-v3", 671e9, 37e9),       # model card: 671B total, 37B activated (MTP apart)
    ("mixtral-8x22b", 141e9, 39e9),     # model card: 141B, 39B active
])
def test_total_and_active_parameters_match_the_model_cards(slug, total, active):
    m = get_model(slug)
    assert m.params == pytest.approx(total, rel=0.01)
    assert m.active_params == pytest.approx(active, rel=0.02)


def test_deepseek_v3_parameters_by_hand():
    """The same count written out from the architecture: MLA projections, 3 dense and 58
    sparse layers (256 routed + 1 shared expert each, and a router)."""
    h, heads = 7168, 128
    attn = (h * 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 * heads * (128 + 128)
            + heads * 128 * h)
    expert = 3 * h * 2048
    dense_mlp = 3 * h * 18432
    norms = 2 * h + 1536 + 512
    layers = 61 * (attn + norms) + 3 * dense_mlp + 58 * (257 * expert + h * 256)
    total = layers + 2 * 129280 * h + h
    m = get_model("deepseek-v3")
    assert m.params == total
    assert m.active_params == total - 58 * (256 - 8) * expert


def test_kv_bytes_per_token_by_attention_kind():
    bf16 = resolve_precision(get_hardware("h200"), "bfloat16", None, "auto")
    fp8 = resolve_precision(get_hardware("h200"), "bfloat16", None, "fp8")
    # Multi-head (Llama-2-7B): K and V of 32 heads x 128, 32 layers, 2 bytes.
    assert kv_bytes_per_token(get_model("llama-2-7b"), bf16) == 2 * 32 * 32 * 128 * 2
    # Grouped-query (Llama-3.1-70B): 8 KV heads, split over tensor parallelism.
    assert kv_bytes_per_token(get_model("llama-3.1-70b"), bf16, tp=4) == 2 * 80 * 2 * 128 * 2
    # MLA (DeepSeek-V3): one 512 latent + 64 rotary key per layer, whole on every TP rank.
    m = get_model("deepseek-v3")
    assert kv_bytes_per_token(m, bf16) == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(m, bf16, tp=8) == 70_272
    assert kv_bytes_per_token(m, fp8, tp=8) == 35_136  # FP8 KV halves it
    # Had it cached K and V per head it would hold 2 x 128 x 192 values per layer: 85x more.
    assert 2 * 128 * 192 / m.kv_cache_width > 85


def test_deepseek_v3_on_8_h200_memory_plan_by_hand():
    """FP8 weights over TP8: every sharded weight / 8 plus MLA's replicated down-projections,
    the 58 routers whole in bf16 (vLLM's unquantised gate), embeddings and LM head in bf16
    (vocab-parallel); the pool is what is left of 90%."""
    plan = plan_memory("deepseek-v3", "h200", "bfloat16", 0.9, tensor_parallel_size=8,
                       weight_dtype="fp8")
    m = get_model("deepseek-v3")
    replicated = 61 * 7168 * (1536 + 512 + 64)
    routers = 58 * 7168 * 256
    linear = m.linear_params - replicated - routers
    by_hand = (linear / 8 + replicated + routers * 2 + 2 * 129280 * 7168 * 2 / 8
               + (61 * m.other_params_per_layer + 7168) * 2)
    assert plan.weights_bytes == pytest.approx(by_hand, rel=1e-9)
    assert 84 * GB < plan.weights_bytes < 86 * GB
    assert plan.kv_bytes_per_token == 70_272
    budget = plan.memory_bytes * 0.9
    assert plan.kv_pool_bytes == pytest.approx(budget - plan.weights_bytes - plan.activation_reserve_bytes)
    assert plan.num_kv_slots == int(plan.kv_pool_bytes // 70_272)
    assert 650_000 < plan.num_kv_slots < 750_000


@pytest.mark.parametrize("batch", [64, 256])
def test_deepseek_v3_decode_step_is_bounded_by_the_bytes_it_must_read(batch):
    """A decode step streams the experts its tokens touch, every attention and dense weight
    shard, and the context's latents. The roofline must cost at least that at full bandwidth
    and not wildly more (its efficiency factors, all-reduces and CPU overhead)."""
    r = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=8,
                          weight_dtype="fp8")
    ctx = 2000
    step = r.price(StepShape(num_decode_seqs=batch, decode_context_tokens=batch * ctx))
    touched = 256 * (1 - (1 - 8 / 256) ** batch)
    expert_bytes = 3 * 7168 * 2048 / 8                     # one expert's shard, FP8
    moe = 58 * ((touched + 1) * expert_bytes + 7168 * 256 * 2)
    attn = 61 * (7168 * (1536 + 576) + (1536 * 128 * 192 + 512 * 128 * 256 + 128 * 128 * 7168) / 8)
    dense = 3 * 3 * 7168 * 18432 / 8
    head = 129280 * 7168 * 2 / 8
    kv = batch * ctx * 61 * 576 * 2
    floor = (moe + attn + dense + head + kv) / get_hardware("h200").memory_bandwidth
    assert floor < step < 3.5 * floor


def test_deepseek_v3_prices_scalar_and_vectorised_with_the_same_bits():
    r = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=8,
                          weight_dtype="fp8", kv_cache_dtype="fp8")
    rng = random.Random(3)
    shapes = []
    for _ in range(300):
        p = rng.choice([0, rng.randint(1, 4096)])
        d = rng.randint(0, 256)
        shapes.append(StepShape(num_prefill_tokens=p, num_prefill_seqs=1 if p else 0,
                                num_decode_seqs=d, decode_context_tokens=d * rng.randint(1, 8000),
                                prefill_context_tokens=rng.randint(0, 4000) if p else 0,
                                prefill_attention_work=p * (p + 1) // 2))
    scalar = [r.price(s) for s in shapes]
    assert r.price_many(shapes).tolist() == scalar
    # Cached context costs a prefill the latent's up-projection on top of reading it.
    base = StepShape(num_prefill_tokens=512, num_prefill_seqs=1, prefill_attention_work=512 * 513 // 2)
    more = StepShape(num_prefill_tokens=512, num_prefill_seqs=1, prefill_context_tokens=8000,
                     prefill_attention_work=512 * 513 // 2 + 512 * 8000)
    assert r.price(more) > r.price(base)


def test_deepseek_v3_simulates_on_8_h200_with_the_roofline():
    s = simulate(None, overrides=["model=deepseek-v3", "hardware=h200", "dtype=bfloat16",
                                  "parallel.tensor_parallel_size=8", "quantization.weights=fp8",
                                  "workload.num_requests=60", "workload.arrival.rate=4"]).summary
    assert s["completed"] == 60
    assert s["cost_model"]["source"] == "roofline"  # the tables' MLA rows are not read yet
    assert s["num_gpu_blocks"] > 40_000             # ~700k tokens of latent in blocks of 16


def test_deepseek_v3_config_json_loads_like_the_catalog_entry(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3_CONFIG))
    loaded, catalog = get_model(str(tmp_path)), get_model("deepseek-v3")
    assert loaded.params == catalog.params and loaded.active_params == catalog.active_params
    assert loaded.kv_cache_width == 576 and loaded.num_moe_layers == 58
    assert get_model("deepseek-ai/DeepSeek-R1") is catalog


@pytest.mark.parametrize("drop,needle", [
    ("n_routed_experts", "n_routed_experts"), ("kv_lora_rank", "kv_lora_rank"),
])
def test_a_deepseek_config_missing_a_key_is_one_line(tmp_path, drop, needle):
    cfg = {k: v for k, v in DEEPSEEK_V3_CONFIG.items() if k != drop}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=needle) as err:
        get_model(str(tmp_path))
    assert "\n" not in str(err.value)


def test_mla_shapes_are_checked():
    from dataclasses import replace

    m = get_model("deepseek-v3")
    with pytest.raises(ConfigError, match="num_kv_heads"):
        replace(m, num_kv_heads=16)
    with pytest.raises(ConfigError, match="qk_rope_head_dim"):
        replace(m, qk_rope_head_dim=192)
    with pytest.raises(ConfigError, match="dense_intermediate_size"):
        replace(m, dense_intermediate_size=0)
    with pytest.raises(ConfigError, match="shared experts"):
        replace(get_model("llama-3.1-8b"), num_shared_experts=1)
    assert np.isclose(m.qk_nope_head_dim, 128)


# --- DeepSeek-V3 from AIConfigurator's measured tables (H200) ---------------------------------

from pathlib import Path  # noqa: E402

from sim.pricing.table_data import package_tables_root  # noqa: E402

SHARED_TABLES = package_tables_root() or Path("/nonexistent")  # aiconfigurator-core's tables
needs_shared = pytest.mark.skipif(not (SHARED_TABLES / "h200_sxm" / "mla").is_dir(),
                                  reason="../shared MLA tables absent")


@needs_shared
def test_deepseek_v3_is_priced_from_the_measured_mla_and_moe_tables():
    from sim.pricing.operator_tables import OperatorTableCostModel

    r = OperatorTableCostModel("deepseek-v3", "h200", "bfloat16", 8, tables=SHARED_TABLES,
                               weight_dtype="fp8", max_num_seqs=256)
    assert set(r.gemm_shapes) >= {"q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj",
                                  "mlp_up", "shared_up", "router"}
    # Decode attention per layer: the measured MLA module at this rank's 16 heads (batch 64,
    # 2,048 tokens: 0.13-0.17 ms in the table's rows, which are the legacy collector's), less
    # that collector's overhead at batch 64 as GB300's two collections measure it (58 us).
    extra = r._mla_decode_extra
    assert extra is not None and 50e-6 < extra[1][list(extra[0]).index(64.0)] < 65e-6
    assert 0.07e-3 < r._dec.at(64, 2048) < 0.12e-3
    roof = RooflineCostModel("deepseek-v3", "h200", "bfloat16", tensor_parallel_size=8,
                             weight_dtype="fp8")
    step = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 2000)
    # The roofline's MLA decode attention is optimistic against the measured module (docs).
    assert r.breakdown(step)["attn_decode"] > 1.4 * roof.breakdown(step)["attn_decode"]
    rng = random.Random(4)
    shapes = [StepShape(num_decode_seqs=d, decode_context_tokens=d * rng.randint(1, 8000),
                        num_prefill_tokens=p, num_prefill_seqs=1 if p else 0,
                        prefill_attention_work=p * (p + 1) // 2)
              for d, p in ((rng.randint(0, 256), rng.choice([0, rng.randint(1, 4096)]))
                           for _ in range(200))]
    scalar = [r.price(s) for s in shapes]
    assert r.price_many(shapes).tolist() == scalar
    f = r.decode_context_pricer(step)
    assert f(64 * 2500) == r.price(step.with_decode_context(64 * 2500))


@needs_shared
def test_deepseek_v3_simulates_from_the_tables_when_present(monkeypatch):
    monkeypatch.setenv("KVPLAN_GPU_TABLES", str(SHARED_TABLES))
    s = simulate(None, overrides=["model=deepseek-v3", "hardware=h200", "dtype=bfloat16",
                                  "parallel.tensor_parallel_size=8", "quantization.weights=fp8",
                                  "workload.num_requests=40", "workload.arrival.rate=4"]).summary
    assert s["cost_model"]["source"] == "operator_tables" and s["completed"] == 40
