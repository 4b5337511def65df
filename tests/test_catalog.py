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
    ("b200", 180, 7.7, 2250),  # shipping HGX B200: 7.7 TB/s (8 TB/s was the 192 GB preview)
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


@pytest.mark.parametrize("slug,mib", [("l40s", 46068), ("l4", 23034), ("a10g", 23028)])
def test_gddr6_ecc_parts_plan_from_the_memory_the_driver_reports(slug, mib):
    """A GDDR6 data-centre GPU keeps 1/16 of its memory for ECC (on by default): nvidia-smi shows
    an L40S's 48 GiB as 46,068 MiB, and vLLM's gpu_memory_utilization is a fraction of that."""
    from sim.memory_plan import plan_memory

    hw = get_hardware(slug)
    assert hw.usable_memory_bytes == mib * 2**20
    assert hw.usable_memory_bytes == pytest.approx(hw.memory_bytes * 15 / 16, rel=0.001)
    plan = plan_memory("llama-3.1-8b", slug, dtype="bfloat16", weight_dtype="int4" if slug != "l40s" else None)
    assert plan.budget_bytes == pytest.approx(mib * 2**20 * 0.9)
    assert plan.kv_pool_bytes == pytest.approx(plan.budget_bytes - plan.weights_bytes - plan.activation_reserve_bytes)
    # HBM parts report within a few percent of the nominal size: they plan from it.
    assert get_hardware("h100-sxm").usable_memory_bytes == get_hardware("h100-sxm").memory_bytes


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



# -- Blackwell Ultra, H100 PCIe, GeForce RTX 4090 --------------------------------------------

NEW_GPUS = {
    "b300": ("b300-sxm", "b300-sxm6", "nvidia-b300", "NVIDIA B300 SXM6 AC", "hgx-b300", "DGX-B300"),
    "gb300": ("gb300-nvl72", "nvidia-gb300", "NVIDIA GB300", "dgx-gb300"),
    "h100-pcie": ("h100-pcie-80gb", "nvidia-h100-pcie", "NVIDIA H100 PCIe", "H100_PCIE"),
    "rtx-4090": ("rtx4090", "geforce-rtx-4090", "NVIDIA GeForce RTX 4090", "RTX 4090", "4090"),
}
BLACKWELL = {"b200", "b300", "gb200", "gb300", "rtx-pro-6000"}


@pytest.mark.parametrize("slug", sorted(NEW_GPUS))
def test_new_gpus_resolve_by_name_and_alias(slug):
    assert slug in HARDWARE_NAMES
    hw = get_hardware(slug)
    assert hw.name == slug and get_hardware(slug.upper()) is hw
    for alias in NEW_GPUS[slug]:
        assert get_hardware(alias) is hw, alias
    with pytest.raises(ConfigError) as exc:
        get_hardware("rtx-5090")
    assert slug in str(exc.value)


# Datasheet numbers, dense, per GPU: memory GiB, memory TB/s, BF16/FP16, FP8, INT8 and FP4
# TFLOPS (None: no tensor-core path), GPU link and host link GB/s per direction, NIC GB/s,
# GPUs in one NVLink (or PCIe) domain.
@pytest.mark.parametrize(
    "slug,mem_gib,bw_tbs,bf16,fp8,int8,fp4,link_gbs,host_gbs,nic_gbs,per_node", [
        # Blackwell Ultra datasheet, HGX B300 column; host CPUs are PCIe Gen5.
        ("b300", 270, 7.7, 2250, 4500, 153.5, 13500, 900, 64, 100, 8),
        # Blackwell Ultra datasheet, GB300 NVL72 column; NVLink-C2C to Grace.
        ("gb300", 279, 8.0, 2500, 5000, 165, 15000, 900, 450, 100, 72),
        # H100 datasheet, PCIe column; NVLink bridge joins pairs.
        ("h100-pcie", 80, 2.0, 756.5, 1513, 1513, None, 300, 64, 50, 2),
        # Ada whitepaper Appendix A: FP32-accumulate rates; no NVLink, PCIe Gen4 x16.
        ("rtx-4090", 24, 1.008, 165.2, 330.3, 660.6, None, 32, 32, 3.125, 8),
    ])
def test_new_gpu_datasheet_numbers(slug, mem_gib, bw_tbs, bf16, fp8, int8, fp4, link_gbs,
                                   host_gbs, nic_gbs, per_node):
    hw = get_hardware(slug)
    assert hw.memory_bytes == mem_gib * 2**30
    assert hw.memory_bandwidth == pytest.approx(bw_tbs * 1e12)
    assert hw.flops("bf16") == hw.flops("fp16") == pytest.approx(bf16 * 1e12)
    assert hw.flops("fp8") == pytest.approx(fp8 * 1e12)
    assert hw.flops("int8") == pytest.approx(int8 * 1e12)
    if fp4 is None:
        assert not hw.supports("fp4")
    else:
        assert hw.flops("fp4") == pytest.approx(fp4 * 1e12)
    assert hw.flops("fp32") < hw.flops("tf32") * 1.001 <= hw.flops("fp16") * 1.001
    assert hw.interconnect_bandwidth == pytest.approx(link_gbs * 1e9)
    assert hw.pcie_bandwidth == pytest.approx(host_gbs * 1e9)
    assert hw.network_bandwidth == pytest.approx(nic_gbs * 1e9)
    assert hw.gpus_per_node == per_node
    assert hw.usd_per_gpu_hour > 0 and hw.description


def test_fp4_tensor_cores_exactly_on_blackwell():
    from sim.catalog import list_hardware

    for hw in list_hardware():
        assert hw.supports("fp4") == (hw.name in BLACKWELL), hw.name
    for slug in ("h100-sxm", "h100-pcie", "h200", "h20", "l4", "l40s", "rtx-4090"):
        with pytest.raises(ConfigError, match="no fp4"):
            get_hardware(slug).flops("fp4")


def test_blackwell_ultra_is_blackwell_with_more_memory_and_fp4_and_less_int8():
    for ultra, base in (("b300", "b200"), ("gb300", "gb200")):
        u, b = get_hardware(ultra), get_hardware(base)
        assert u.flops("fp4") == pytest.approx(1.5 * b.flops("fp4"))  # NVIDIA's "1.5x dense FP4"
        assert u.flops("bf16") == b.flops("bf16") and u.flops("fp8") == b.flops("fp8")
        assert u.flops("int8") < b.flops("int8") / 25  # Blackwell Ultra cut INT8
        assert u.memory_bytes > 1.45 * b.memory_bytes
        assert u.memory_bandwidth == b.memory_bandwidth
        assert (u.interconnect_bandwidth, u.gpus_per_node) == (b.interconnect_bandwidth,
                                                               b.gpus_per_node)
        assert u.network_bandwidth == 2 * b.network_bandwidth  # ConnectX-8 800G vs CX-7 400G
        assert u.usd_per_gpu_hour > b.usd_per_gpu_hour


def test_geforce_runs_fp32_accumulate_at_half_rate():
    ada, pro = get_hardware("rtx-4090"), get_hardware("l40s")
    assert ada.flops("fp16") == pytest.approx(ada.flops("int8") / 4, rel=1e-3)
    assert ada.flops("fp8") == pytest.approx(2 * ada.flops("fp16"), rel=1e-3)
    assert pro.flops("fp16") == pytest.approx(pro.flops("int8") / 2, rel=0.02)
    assert ada.interconnect_bandwidth == ada.pcie_bandwidth  # no NVLink


def test_h100_pcie_is_a_slower_h100_with_nvlink_pairs():
    pcie, sxm = get_hardware("h100-pcie"), get_hardware("h100-sxm")
    assert pcie.memory_bytes == sxm.memory_bytes
    assert pcie.memory_bandwidth < sxm.memory_bandwidth
    for dt in ("bf16", "fp8", "int8"):
        assert pcie.flops(dt) < sxm.flops(dt)
    assert pcie.gpus_per_node == 2 and pcie.interconnect_bandwidth < sxm.interconnect_bandwidth
    assert pcie.network_bandwidth < pcie.interconnect_bandwidth


def test_roofline_decode_follows_memory_bandwidth():
    from sim.policies.step import StepShape
    from sim.pricing import make_pricer

    decode = StepShape(num_decode_seqs=8, decode_context_tokens=8 * 1500)  # memory-bound
    t = {hw: make_pricer("roofline", "llama-3.1-8b", hw).price(decode)
         for hw in ("b300", "b200", "gb300", "h100-sxm", "h100-pcie", "rtx-4090")}
    assert t["b300"] < t["h100-sxm"] < t["h100-pcie"] < t["rtx-4090"]
    # Same HBM bandwidth and BF16 rate; each priced with the efficiencies its own measured
    # tables give (sim.pricing.efficiency), which differ by a few percent.
    assert t["b300"] == pytest.approx(t["b200"], rel=0.05)
    # Bandwidth-bound: the step time ratio is near the HBM bandwidth ratio.
    assert t["h100-pcie"] / t["h100-sxm"] == pytest.approx(3350 / 2000, rel=0.15)


def test_llama_8b_fits_a_4090_at_fp16_and_70b_says_why_not():
    from sim.errors import DoesNotFitError
    from sim.memory_plan import plan_memory

    plan = plan_memory("llama-3.1-8b", "rtx-4090", "float16")
    assert plan.num_kv_slots > 16_000
    fp8 = plan_memory("llama-3.1-8b", "rtx-4090", "float16", weight_dtype="fp8")
    assert fp8.num_kv_slots > 2 * plan.num_kv_slots
    with pytest.raises(DoesNotFitError) as exc:
        plan_memory("llama-3.1-70b", "rtx-4090", "float16")
    assert "\n" not in str(exc.value) and "rtx-4090" in str(exc.value)
    assert plan_memory("llama-3.1-70b", "b300", "bfloat16").num_kv_slots > \
        plan_memory("llama-3.1-70b", "b200", "bfloat16").num_kv_slots

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
    ("mistral-nemo-12b", 12.248e9),
    ("yi-34b", 34.389e9),
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
    nemo = get_model("mistral-nemo-12b")  # heads narrower than hidden / heads (160)
    assert nemo.head_dim == 128 and nemo.kv_size == 1024 and nemo.sliding_window is None


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
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.1-70b"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "mistral-nemo-12b"),
    ("01-ai/Yi-34B", "yi-34b"),
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
