"""Hybrid attention (gpt-oss: every other layer a 128-token window; Llama 4 Scout: 3 of 4 layers
in 8192-token chunks): parameter counts against the model cards, KV bytes per token of the
full-attention layers only, the window's blocks held per request (taken, trimmed, given back),
attention priced over the window, config.json loading, and exact simulation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sim.api import simulate
from sim.catalog.dtypes import resolve_precision
from sim.catalog.hardware import get_hardware
from sim.catalog.models import get_model
from sim.errors import ConfigError
from sim.memory_plan import kv_bytes_per_token, plan_memory, sliding_window_kv
from sim.policies.kv import PagedAllocator
from sim.policies.request import Request
from sim.policies.step import StepShape
from sim.pricing import RooflineCostModel

GPT_OSS_120B_CONFIG = {  # openai/gpt-oss-120b config.json, the keys kvplan reads
    "model_type": "gpt_oss", "_name_or_path": "openai/gpt-oss-120b", "hidden_size": 2880,
    "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
    "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
    "experts_per_token": 4, "vocab_size": 201088, "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18, "attention_bias": True,
    "max_position_embeddings": 131072, "rope_theta": 150000, "tie_word_embeddings": False,
}


@pytest.mark.parametrize("slug,total,active", [
    # OpenAI's model card counts active parameters without the input embedding.
    ("gpt-oss-120b", 116.83e9, 5.13e9), ("gpt-oss-20b", 20.91e9, 3.61e9),
    # Meta: 109B total with the vision encoder, 17B active.
    ("llama-4-scout", 109e9, 17e9),
])
def test_parameters_match_the_model_cards(slug, total, active):
    m = get_model(slug)
    assert m.params == pytest.approx(total, rel=0.015)
    counted = m.active_params - (m.embedding_params if slug.startswith("gpt-oss") else 0)
    assert counted == pytest.approx(active, rel=0.02)


def test_kv_bytes_per_token_count_only_full_attention_layers():
    bf16 = resolve_precision(get_hardware("h100-sxm"), "bfloat16", None, "auto")
    m = get_model("gpt-oss-120b")
    assert kv_bytes_per_token(m, bf16) == 18 * 2 * 8 * 64 * 2 == 36_864
    # The window: 128 tokens rounded up to blocks of 16, plus one block, for 18 layers of the
    # same width as the 18 full ones: one pool slot per token.
    assert sliding_window_kv(m, 16) == (144, 1.0)
    assert sliding_window_kv(get_model("llama-4-scout"), 16) == (8208, 3.0)
    assert sliding_window_kv(get_model("llama-3.1-8b"), 16) == (0, 0.0)


def test_gpt_oss_120b_fits_one_h100_with_mxfp4_weights():
    plan = plan_memory("gpt-oss-120b", "h100-sxm", "bfloat16", 0.9, weight_dtype="mxfp4")
    # MXFP4 experts, the rest (attention, routers, embeddings, LM head) in BF16: about the
    # 65 GB the checkpoint's safetensors hold.
    assert 64e9 < plan.weights_bytes < 66e9
    assert plan.kv_bytes_per_token == 36_864 and plan.num_kv_slots > 280_000


def _req(rid: str, prompt: int, out: int) -> Request:
    return Request(rid, 0.0, prompt, out)


def test_the_window_is_held_from_admission_trimmed_to_the_request_and_given_back():
    alloc = PagedAllocator(num_slots=16 * 100, block_size=16, window_tokens=144, window_ratio=1.0)
    short, long = _req("s", 20, 10), _req("l", 300, 200)
    assert alloc.allocate(short, 20) and alloc.allocate(long, 300)
    assert len(alloc.window_blocks["s"]) == 2      # 29 tokens: 2 blocks, not the window's 9
    assert len(alloc.window_blocks["l"]) == 9      # capped at the window
    assert alloc.num_held_slots(long) == 19 * 16   # full-attention layers only
    assert alloc.num_free_slots == (100 - 2 - 2 - 9 - 19) * 16
    u = alloc.usage([short, long], None)
    assert u.total == 1600 and u.token_states >= (2 + 9) * 16
    alloc.check_invariants()
    alloc.free(short), alloc.free(long)
    assert alloc.num_free_slots == 1600 and not alloc.window_blocks and alloc.num_window_blocks == 0
    alloc.check_invariants()
    # No room for the window: nothing is taken.
    tight = PagedAllocator(num_slots=16 * 10, block_size=16, window_tokens=144, window_ratio=1.0)
    assert not tight.allocate(_req("x", 120, 200), 120)   # 8 blocks + a 9-block window > 10
    assert tight.num_free_slots == 160 and not tight.window_blocks


def test_swap_gives_the_window_back_and_takes_it_again():
    alloc = PagedAllocator(num_slots=16 * 50, block_size=16, swap_slots=16 * 50,
                           window_tokens=144, window_ratio=1.0)
    r = _req("r", 100, 100)
    r.num_computed_tokens = 100
    assert alloc.allocate(r, 0) and len(alloc.window_blocks["r"]) == 9
    held = alloc.num_free_slots
    alloc.swap_out(r)
    assert alloc.num_free_slots == 800 and "r" not in alloc.window_blocks
    assert alloc.can_swap_in(r)
    alloc.swap_in(r)
    assert alloc.num_free_slots == held and len(alloc.window_blocks["r"]) == 9
    alloc.check_invariants()


GPT_OSS = ["model=gpt-oss-120b", "hardware=h100-sxm", "dtype=bfloat16", "quantization.weights=mxfp4"]


@pytest.mark.parametrize("extra", [[], ["kv_cache.num_gpu_blocks=300", "workload.arrival.rate=40"],
                                   ["kv_cache.num_gpu_blocks=300", "scheduler.policy=vllm_v0",
                                    "scheduler.preemption=swap", "workload.arrival.rate=40"]])
def test_gpt_oss_simulates_exactly_on_the_fast_path(extra):
    """The decode fast path must stay exact with window blocks held (and under preemption)."""
    overrides = GPT_OSS + ["workload.num_requests=200"] + extra
    fast = simulate(None, overrides=overrides)
    slow = simulate(None, overrides=overrides, fast_decode=False)
    f, s = dict(fast.summary), dict(slow.summary)
    f.pop("simulator"), s.pop("simulator")
    assert f == s and f["completed"] + f["rejected"] == 200
    assert fast.steps == slow.steps
    slots = f["num_gpu_blocks"] * 16  # whole blocks of the pool
    for j in range(len(fast.steps["kv_free"])):  # the window's blocks are in the breakdown
        assert sum(fast.steps[f"kv_{k}"][j] for k in ("token_states", "reserved",
                   "internal_fragmentation", "external_fragmentation", "free")) == slots
    if extra:
        assert f["kv_cache"]["preemptions"] > 0
    assert f["cost_model"]["source"] == "roofline"


def test_sliding_layers_read_at_most_the_window():
    m = get_model("gpt-oss-120b")
    full = replace(m, sliding_window_layers=0)
    hybrid_r = RooflineCostModel(m, "h100-sxm", "bfloat16", weight_dtype="mxfp4")
    full_r = RooflineCostModel(full, "h100-sxm", "bfloat16", weight_dtype="mxfp4")
    short = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 100)  # inside the window
    long = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 30_000)
    assert hybrid_r.price(short) == pytest.approx(full_r.price(short), rel=1e-12)
    assert hybrid_r.price(long) < full_r.price(long)
    # Half the layers at 128 tokens: decode attention about halves at long contexts.
    a = hybrid_r.breakdown(long)["attn_decode"]
    b = full_r.breakdown(long)["attn_decode"]
    assert 0.45 < a / b < 0.55
    shapes = [short, long, StepShape(num_prefill_tokens=4096, num_prefill_seqs=1,
                                     prefill_attention_work=4096 * 4097 // 2)]
    assert hybrid_r.price_many(shapes).tolist() == [hybrid_r.price(s) for s in shapes]


def test_gpt_oss_config_json_loads_like_the_catalog_entry(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(GPT_OSS_120B_CONFIG))
    loaded, catalog = get_model(str(tmp_path)), get_model("gpt-oss-120b")
    assert loaded.params == catalog.params and loaded.sliding_window_layers == 18
    assert loaded.sliding_window == 128 and loaded.attention_sinks
    bad = {k: v for k, v in GPT_OSS_120B_CONFIG.items() if k != "num_local_experts"}
    (tmp_path / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="num_local_experts") as err:
        get_model(str(tmp_path))
    assert "\n" not in str(err.value)


def test_a_window_needs_full_attention_layers_too():
    with pytest.raises(ConfigError, match="sliding_window_layers"):
        replace(get_model("gpt-oss-20b"), sliding_window_layers=24)
    with pytest.raises(ValueError, match="paged"):
        from sim.policies.kv import make_allocator

        make_allocator("contiguous", num_slots=1000, window=(144, 1.0))


LLAMA4_SCOUT_CONFIG = {  # meta-llama/Llama-4-Scout-17B-16E config.json (text part)
    "model_type": "llama4", "_name_or_path": "meta-llama/Llama-4-Scout-17B-16E",
    "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                    "intermediate_size": 8192, "intermediate_size_mlp": 16384,
                    "num_local_experts": 16, "num_experts_per_tok": 1,
                    "interleave_moe_layer_step": 1, "vocab_size": 202048,
                    "max_position_embeddings": 10485760, "rope_theta": 500000.0,
                    "attention_chunk_size": 8192, "no_rope_layers": [1, 1, 1, 0] * 12},
}


def test_llama4_scout_config_json_loads_like_the_catalog_entry(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA4_SCOUT_CONFIG))
    loaded, catalog = get_model(str(tmp_path)), get_model("llama-4-scout")
    assert loaded.params == catalog.params and loaded.active_params == catalog.active_params
    assert (loaded.sliding_window, loaded.sliding_window_layers) == (8192, 36)
    maverick = json.loads(json.dumps(LLAMA4_SCOUT_CONFIG))
    maverick["text_config"]["interleave_moe_layer_step"] = 2
    (tmp_path / "config.json").write_text(json.dumps(maverick))
    with pytest.raises(ConfigError, match="interleave_moe_layer_step"):
        get_model(str(tmp_path))
