"""Hardware and model catalogs: the slugs are a config contract, the numbers are datasheet and
config.json facts, and HF configs load into the same shapes."""

from __future__ import annotations

import json

import pytest

from sim.catalog import HARDWARE_NAMES, MODEL_NAMES, get_hardware, get_model, load_hf_config
from sim.errors import ConfigError

HARDWARE_SLUGS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "l40s", "a10g", "mi300x")
MODEL_SLUGS = ("opt-13b", "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b",
               "llama-3.1-70b", "mistral-7b", "qwen2.5-7b", "smollm2-135m")


# -- hardware -------------------------------------------------------------------------------

def test_hardware_slugs_are_the_contract():
    assert set(HARDWARE_SLUGS) <= set(HARDWARE_NAMES)
    for slug in HARDWARE_SLUGS:
        assert get_hardware(slug).name == slug


@pytest.mark.parametrize("slug,mem_gib,bw_tbs,fp16_tflops", [
    ("a100-40gb", 40, 1.555, 312),
    ("a100-80gb", 80, 2.039, 312),
    ("h100-sxm", 80, 3.35, 989.4),
    ("h200", 141, 4.8, 989.4),
    ("b200", 180, 8.0, 2250),
    ("gb200", 186, 8.0, 2500),
    ("h20", 96, 4.0, 148),
    ("l4", 24, 0.3, 121),
    ("mi325x", 256, 6.0, 1307.4),
    ("l40s", 48, 0.864, 362.05),
    ("a10g", 24, 0.6, 125),
    ("mi300x", 192, 5.3, 1307.4),
])
def test_hardware_datasheet_numbers(slug, mem_gib, bw_tbs, fp16_tflops):
    hw = get_hardware(slug)
    assert hw.memory_bytes == mem_gib * 2**30
    assert hw.memory_bandwidth == pytest.approx(bw_tbs * 1e12)
    # Dense, not the 2:4-sparsity figure the datasheets print beside it.
    assert hw.flops("fp16") == pytest.approx(fp16_tflops * 1e12)
    assert hw.flops("bf16") == hw.flops("fp16")
    assert hw.flops("fp32") < hw.flops("fp16") < hw.flops("int8")
    assert hw.interconnect_bandwidth > 0 and hw.pcie_bandwidth > 0
    assert hw.gpus_per_node >= 1 and hw.usd_per_gpu_hour > 0


def test_fp8_only_where_the_tensor_cores_have_it():
    for slug in ("h100-sxm", "h200", "l40s", "mi300x"):
        assert get_hardware(slug).supports("fp8")
    for slug in ("a100-40gb", "a100-80gb", "a10g"):
        hw = get_hardware(slug)
        assert not hw.supports("fp8")
        with pytest.raises(ConfigError, match="no fp8"):
            hw.flops("fp8")


def test_hardware_lookup_is_forgiving_about_case_and_aliases():
    assert get_hardware("A100-80GB").name == "a100-80gb"
    assert get_hardware("h100").name == "h100-sxm"
    assert get_hardware("a100_40gb").name == "a100-40gb"


def test_unknown_hardware_names_the_allowed_values():
    with pytest.raises(ConfigError) as exc:
        get_hardware("v100")
    msg = str(exc.value)
    assert "\n" not in msg and "'v100'" in msg
    for slug in HARDWARE_SLUGS:
        assert slug in msg


# -- models ---------------------------------------------------------------------------------

def test_model_slugs_are_the_contract():
    assert set(MODEL_SLUGS) <= set(MODEL_NAMES)
    for slug in MODEL_SLUGS:
        assert get_model(slug).name == slug


# Published parameter counts (model cards / HF safetensors totals).
@pytest.mark.parametrize("slug,params", [
    ("opt-13b", 12.85e9),
    ("llama-2-7b", 6.738e9),
    ("llama-2-13b", 13.016e9),
    ("llama-2-70b", 68.977e9),
    ("llama-3.1-8b", 8.030e9),
    ("llama-3.1-70b", 70.554e9),
    ("mistral-7b", 7.242e9),
    ("qwen2.5-7b", 7.616e9),
    ("smollm2-135m", 134.5e6),
    ("mixtral-8x7b", 46.703e9),
    ("qwen3-8b", 8.191e9),
    ("qwen3-14b", 14.768e9),
    ("qwen3-32b", 32.762e9),
    ("qwen3-30b-a3b", 30.532e9),
    ("qwen3-235b-a22b", 235.094e9),
])
def test_parameter_count_from_shapes_matches_published(slug, params):
    assert get_model(slug).params == pytest.approx(params, rel=0.002)


def test_model_shape_facts():
    opt = get_model("opt-13b")
    assert not opt.gated_mlp and opt.tie_word_embeddings and opt.linear_bias
    assert opt.num_layers == 40 and opt.hidden_size == 5120 and opt.kv_size == 5120
    l70 = get_model("llama-2-70b")
    assert l70.gated_mlp and l70.num_kv_heads == 8 and l70.kv_size == 1024
    assert get_model("qwen2.5-7b").qkv_bias
    assert not get_model("llama-3.1-8b").qkv_bias
    assert get_model("smollm2-135m").tie_word_embeddings
    assert get_model("smollm2-135m").head_dim == 64
    assert get_model("mistral-7b").sliding_window == 4096


@pytest.mark.parametrize("alias,slug", [
    ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
    ("meta-llama/Llama-2-13b-hf", "llama-2-13b"),
    ("meta-llama/Llama-2-70b-hf", "llama-2-70b"),
    ("facebook/opt-13b", "opt-13b"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m"),
    ("HuggingFaceTB/SmolLM2-135M", "smollm2-135m"),
    ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
    ("Llama-2-7b-hf", "llama-2-7b"),
    ("LLAMA-2-7B", "llama-2-7b"),
])
def test_hugging_face_ids_are_aliases(alias, slug):
    assert get_model(alias) is get_model(slug)


def test_unknown_model_lists_the_slugs():
    with pytest.raises(ConfigError) as exc:
        get_model("gpt-5")
    msg = str(exc.value)
    assert "\n" not in msg and "'gpt-5'" in msg
    for slug in MODEL_SLUGS:
        assert slug in msg


# -- HF config.json -------------------------------------------------------------------------

LLAMA2_7B_CONFIG = {
    "_name_or_path": "meta-llama/Llama-2-7b-hf",
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}


def _write(tmp_path, cfg, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_llama_config_json_loads_like_the_catalog_entry(tmp_path):
    path = _write(tmp_path, LLAMA2_7B_CONFIG)
    for arg in (path, str(path), tmp_path, str(tmp_path)):  # the file or its directory
        spec = get_model(arg)
        ref = get_model("llama-2-7b")
        assert spec.name == "llama-2-7b-hf"
        assert spec.params == ref.params
        assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads,
                spec.head_dim, spec.intermediate_size, spec.vocab_size) == (
            ref.num_layers, ref.hidden_size, ref.num_heads, ref.num_kv_heads, ref.head_dim,
            ref.intermediate_size, ref.vocab_size)


def test_small_gqa_config_with_explicit_head_dim(tmp_path):
    cfg = dict(LLAMA2_7B_CONFIG, hidden_size=256, intermediate_size=512, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, num_hidden_layers=2, vocab_size=1000,
               tie_word_embeddings=True, rope_theta=500000.0)
    del cfg["_name_or_path"]
    sub = tmp_path / "tiny-llama"
    sub.mkdir()
    _write(sub, cfg)
    spec = get_model(sub)
    assert spec.name == "tiny-llama"
    assert spec.head_dim == 32 and spec.q_size == 128 and spec.kv_size == 64
    assert spec.tie_word_embeddings and spec.lm_head_params == 0
    assert spec.rope_theta == 500000.0
    # 2 layers x (qkv 256x256 + o 128x256 + mlp 3x256x512 + 2 norms) + embedding + final norm
    assert spec.params == 2 * (256 * 256 + 128 * 256 + 3 * 256 * 512 + 2 * 256) + 1000 * 256 + 256


def test_qwen2_config_has_qkv_bias_and_mistral_a_window(tmp_path):
    qwen = dict(LLAMA2_7B_CONFIG, model_type="qwen2", num_key_value_heads=4,
                use_sliding_window=False, sliding_window=131072)
    spec = load_hf_config(_write(tmp_path, qwen, "qwen.json"))
    assert spec.qkv_bias and spec.sliding_window is None
    mistral = dict(LLAMA2_7B_CONFIG, model_type="mistral", num_key_value_heads=8,
                   sliding_window=4096)
    assert load_hf_config(_write(tmp_path, mistral, "mistral.json")).sliding_window == 4096


def test_opt_config_loads_like_opt_13b(tmp_path):
    cfg = {
        "_name_or_path": "facebook/opt-13b", "model_type": "opt", "hidden_size": 5120,
        "ffn_dim": 20480, "num_attention_heads": 40, "num_hidden_layers": 40,
        "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 5120,
        "do_layer_norm_before": True, "enable_bias": True,
    }
    spec = get_model(_write(tmp_path, cfg))
    assert spec.name == "opt-13b"
    assert spec.params == get_model("opt-13b").params
    assert not spec.gated_mlp and spec.tie_word_embeddings


@pytest.mark.parametrize("content,match", [
    ('{"model_type": "gpt2", "n_embd": 768}', "model_type 'gpt2'"),
    ('{"model_type": "llama", "hidden_size": 64}', "lacks required key"),
    ('{"model_type": "llama", "hidden_size": "big", "num_attention_heads": 4, '
     '"num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 10}', "bad value"),
    ("not json", "cannot read"),
    ("[1, 2]", "not a JSON object"),
])
def test_bad_config_json_is_a_one_line_config_error(tmp_path, content, match):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=match) as exc:
        get_model(path)
    assert "\n" not in str(exc.value)


def test_directory_without_config_json(tmp_path):
    with pytest.raises(ConfigError, match="no config.json"):
        get_model(tmp_path)


def test_inconsistent_heads_are_rejected(tmp_path):
    cfg = dict(LLAMA2_7B_CONFIG, num_key_value_heads=5)
    with pytest.raises(ConfigError, match="multiple of num_kv_heads"):
        get_model(_write(tmp_path, cfg))
