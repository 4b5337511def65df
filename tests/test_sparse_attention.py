"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): parameter counts against the published
sizes, the indexer's key cached beside the MLA latent, attention bounded at ``index_topk`` tokens
while the indexer scans the whole context (roofline), and the measured DSA module rows read for
this model (operator tables)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.api import resolve_deployment
from sim.catalog.dtypes import resolve_precision
from sim.catalog.hardware import get_hardware
from sim.catalog.models import get_model, load_hf_config
from sim.errors import ConfigError
from sim.memory_plan import kv_bytes_per_token
from sim.policies.step import StepShape
from sim.pricing import table_data
from sim.pricing.roofline import RooflineCostModel

# GLM-5's config.json (zai-org/GLM-5), the keys kvplan reads.
GLM5 = {
    "model_type": "glm_moe_dsa", "_name_or_path": "zai-org/GLM-5", "hidden_size": 6144,
    "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64,
    "head_dim": 64, "intermediate_size": 12288, "moe_intermediate_size": 2048,
    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 2048,
    "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256, "vocab_size": 154880,
    "max_position_embeddings": 202752, "index_topk": 2048, "index_n_heads": 32,
    "index_head_dim": 128, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
}


@pytest.fixture
def glm5(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GLM5))
    return load_hf_config(str(path))


def test_glm5_shapes_and_published_size(glm5):
    # Z.ai: 744B parameters, 40B active.
    assert glm5.is_mla and glm5.is_sparse_attention
    assert (glm5.head_dim, glm5.v_head_dim, glm5.index_topk) == (256, 256, 2048)
    assert glm5.params == pytest.approx(744e9, rel=0.01)
    assert glm5.active_params == pytest.approx(40e9, rel=0.06)


def test_the_indexer_key_is_cached_beside_the_latent(glm5):
    # Per layer and token: the MLA latent and rotary key (512 + 64 values, FP8: 1 byte) and the
    # indexer's FP8 key of 128 values with one float32 scale.
    prec = resolve_precision(get_hardware("b200"), "bfloat16", "fp8_block", "fp8")
    assert glm5.indexer_cache_bytes == 128 + 4
    assert kv_bytes_per_token(glm5, prec, tp=8) == 78 * (576 + 132)


def test_shared_index_layers_are_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(GLM5, index_topk_freq=4)))
    with pytest.raises(ConfigError, match="index_topk_freq"):
        load_hf_config(str(path))


def test_roofline_attention_stops_growing_at_topk_while_the_indexer_scans_on(glm5):
    cm = RooflineCostModel(glm5, "b200", dtype="bfloat16", tensor_parallel_size=8,
                           weight_dtype="fp8_block", kv_cache_dtype="fp8")
    dense = RooflineCostModel(get_model("deepseek-v3"), "b200", dtype="bfloat16",
                              tensor_parallel_size=8, weight_dtype="fp8_block", kv_cache_dtype="fp8")

    def attn(model, ctx):
        return model.breakdown(StepShape(num_decode_seqs=32, decode_context_tokens=32 * ctx))["attn_decode"]

    # Past 2,048 tokens only the indexer's bytes grow (memory-bound at batch 32): 132 bytes a
    # cached token in each of 78 layers.
    grow = attn(cm, 20000) - attn(cm, 10000)
    assert grow == pytest.approx(78 * 32 * 10000 * cm._indexer_bytes, rel=1e-9)
    # Dense MLA's attention grows with the whole latent (576 bytes a token): 4x faster here.
    assert attn(dense, 20000) - attn(dense, 10000) > 3 * grow
    # A long prompt: attention pairs capped at 2,048 per query, the indexer over every pair.
    n = 16384
    shape = StepShape(num_prefill_seqs=1, num_prefill_tokens=n, prefill_attention_work=n * (n + 1) // 2)
    capped = cm.attn_prefill_time(n, n * 2048, 0)
    indexer = max(cm._indexer_flops * (n * (n + 1) // 2), cm._indexer_bytes * n)
    assert cm.breakdown(shape)["attn_prefill"] == pytest.approx(78 * (capped + indexer), rel=1e-9)


def test_dsa_module_rows_of_this_model_price_its_attention(installed_tables):
    import pyarrow.parquet as pq

    try:
        dep = resolve_deployment({"model": "zai-org/GLM-5", "hardware": "b200", "engine": {"name": "sglang"},
                                  "parallel": {"tensor_parallel_size": 8},
                                  "quantization": {"weights": "fp8_block"}, "kv_cache": {"dtype": "fp8"}})
    except ConfigError:
        pytest.skip("aiconfigurator-core (GLM-5 config) not installed")
    cm = dep.cost_model
    assert dep.cost_model_source == "operator_tables"
    assert cm.dsa_table_model == "zai-org/GLM-5-FP8"  # the same model's FP8 checkpoint
    assert "q_a_proj" not in cm._gemm_ms  # the module rows hold the projections
    path = table_data.gpu_dir(cm.tables, "b200") / "sparse_attention" / "sglang" / cm.tables_read[
        "sparse_attention/dsa_generation_module_perf"] / "dsa_generation_module_perf.parquet"
    rows = [r for r in pq.read_table(path).to_pylist()
            if r["model"] == "zai-org/GLM-5-FP8" and r["num_heads"] == 8 and r["kv_cache_dtype"] == "fp8"
            and r["gemm_type"] == "fp8_block" and r["batch_size"] == 32 and r["step"] == 2048]
    want = float(np.median([r["latency"] for r in rows])) * 1e-3
    # Decode of 32 sequences at 2,048 tokens: the module row per layer, every layer.
    got = cm.breakdown(StepShape(num_decode_seqs=32, decode_context_tokens=32 * 2048))["attn_decode"]
    assert got == pytest.approx(78 * want, rel=0.02)
