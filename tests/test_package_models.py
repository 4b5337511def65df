"""``model: <HF id>`` through the config.json files aiconfigurator-core ships: the folder is found
without importing the package, the shapes are the json's, the new architectures (Kimi K2,
MiniMax-M2) count the published parameters, what kvplan does not model is refused in one line,
and without the package an HF id is an ordinary unknown model."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.catalog import package_models
from sim.catalog.models import get_model, load_hf_config
from sim.catalog.package_models import find_model_config, list_model_ids, model_configs_dir
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

needs_package = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                   reason="aiconfigurator-core is not installed")


def _json(hf_id: str) -> dict:
    found = find_model_config(hf_id)
    assert found is not None, hf_id
    with open(found[1], encoding="utf-8") as f:
        return json.load(f)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    return text


@needs_package
def test_the_config_folder_is_found_without_importing_the_package():
    imported = "aiconfigurator_core" in sys.modules
    folder = model_configs_dir()
    assert folder is not None and os.path.isfile(os.path.join(folder, "Qwen--Qwen3-32B_config.json"))
    ids = list_model_ids()
    assert "Qwen/Qwen3-32B" in ids and "moonshotai/Kimi-K2-Instruct" in ids
    assert not any(i.endswith("_hf_quant") for i in ids)  # quantisation recipes are not models
    assert find_model_config("qwen/QWEN3-32b") == find_model_config("Qwen/Qwen3-32B")
    assert find_model_config("Qwen3-32B") is None and find_model_config("no/such-model") is None
    assert ("aiconfigurator_core" in sys.modules) == imported  # the Rust extension stays unloaded


@needs_package
def test_qwen3_32b_has_the_shapes_of_the_shipped_json():
    cfg, m = _json("Qwen/Qwen3-32B"), get_model("Qwen/Qwen3-32B")
    assert m is get_model("qwen3-32b")  # the catalog keeps priority
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["head_dim"])
    assert m.intermediate_size == cfg["intermediate_size"] and m.vocab_size == cfg["vocab_size"]


@needs_package
def test_an_id_only_the_package_has_is_named_by_its_id():
    cfg, m = _json("Qwen/Qwen3-0.6B"), get_model("qwen/qwen3-0.6b")
    assert m.name == m.hf_id == "Qwen/Qwen3-0.6B"
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.intermediate_size) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["intermediate_size"])
    assert m.qk_norm and m.tie_word_embeddings == cfg["tie_word_embeddings"]


@needs_package
def test_kimi_k2_is_deepseek_v3_layout_with_about_1t_parameters():
    cfg, m = _json("moonshotai/Kimi-K2-Instruct"), get_model("moonshotai/Kimi-K2-Instruct")
    assert cfg["model_type"] == "kimi_k2"
    assert m.is_mla and m.is_moe
    assert (m.num_experts, m.num_experts_per_tok, m.num_shared_experts) == (384, 8, 1)
    assert (m.num_heads, m.first_dense_layers, m.kv_cache_width) == (64, 1, 512 + 64)
    assert m.params == pytest.approx(1.03e12, rel=0.01)       # model card: 1T total, 32B active
    assert m.active_params == pytest.approx(32.5e9, rel=0.03)
    # Kimi K2.5 wraps the same text model (and a vision encoder kvplan does not serve).
    k25 = get_model("moonshotai/Kimi-K2.5")
    assert (k25.params, k25.kv_cache_width, k25.num_experts) == (m.params, m.kv_cache_width, 384)


@needs_package
def test_deepseek_v3_through_the_package_matches_the_catalog():
    nv = get_model("nvidia/DeepSeek-V3.1-NVFP4")  # not a catalog alias: read from its json
    assert nv.name == "nvidia/DeepSeek-V3.1-NVFP4"
    assert nv.params == get_model("deepseek-v3").params == pytest.approx(671e9, rel=0.01)


@needs_package
def test_minimax_m25_is_a_gqa_moe_of_about_229b():
    cfg, m = _json("MiniMaxAI/MiniMax-M2.5"), get_model("MiniMaxAI/MiniMax-M2.5")
    assert cfg["model_type"] == "minimax_m2" and not m.is_mla
    assert (m.num_experts, m.num_experts_per_tok, m.intermediate_size) == (
        cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["intermediate_size"])
    assert (m.num_heads, m.num_kv_heads, m.head_dim) == (48, 8, 128)
    assert m.num_moe_layers == m.num_layers == 62 and m.num_shared_experts == 0
    assert m.params == pytest.approx(229e9, rel=0.01)  # model card: 230B total, 10B active
    assert 10e9 <= m.active_params <= 11.5e9


@needs_package
def test_minimax_m25s_cross_head_qk_norm_adds_an_all_reduce_per_layer_under_tp():
    """MiniMax-M2's q/k RMSNorm spans all heads (qk_norm_type per_layer): vLLM's forward_qk
    all-reduces each token's q and k variance (two fp32) over TP, then normalises. The roofline
    prices, per layer, the norm kernel over this GPU's q and k, and under TP one all-reduce of
    8 bytes per row and a second kernel: by hand against the same model without the flag."""
    import dataclasses

    from sim.pricing.roofline import QK_VARIANCE_BYTES, RooflineCostModel
    from sim.policies.step import StepShape

    m = get_model("MiniMaxAI/MiniMax-M2.5")
    assert m.qk_norm and m.qk_norm_across_heads
    plain = dataclasses.replace(m, qk_norm_across_heads=False)
    shape = StepShape(num_decode_seqs=8, decode_context_tokens=8 * 1024)
    for tp in (1, 4):
        with_norm = RooflineCostModel(m, "h100-sxm", dtype="bfloat16", tensor_parallel_size=tp)
        without = RooflineCostModel(plain, "h100-sxm", dtype="bfloat16", tensor_parallel_size=tp)
        lat, L, rows = with_norm.efficiency.elementwise_latency_s, m.num_layers, 8
        q = m.q_size // tp + m.num_kv_heads // tp * m.head_dim
        kernel = 2 * q * 2 / (with_norm.hardware.memory_bandwidth * with_norm.efficiency.norm_memory)
        assert with_norm._elementwise["qk_norm"] == pytest.approx(kernel)
        expected = L * (kernel * rows + lat)
        if tp > 1:
            expected += L * (with_norm._ar_fixed + with_norm._ar_per_byte * QK_VARIANCE_BYTES * rows + lat)
        assert with_norm.price(shape) - without.price(shape) == pytest.approx(expected, rel=1e-6)
        assert without._elementwise["qk_norm"] is None


def test_minimax_with_linear_attention_layers_is_refused(tmp_path):
    cfg = {"model_type": "minimax_m2", "num_hidden_layers": 4, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "intermediate_size": 128, "vocab_size": 1000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "attn_type_list": [0, 1, 0, 1]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as exc:
        load_hf_config(tmp_path)
    assert "linear-attention" in _one_line(exc)
    cfg["attn_type_list"] = [1, 1, 1, 1]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(tmp_path).num_experts == 8


def test_a_wrapper_around_an_unmodelled_text_model_is_refused(tmp_path):
    cfg = {"model_type": "kimi_k25", "text_config": {"model_type": "kimi_linear"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as exc:
        load_hf_config(tmp_path)
    assert "'kimi_k25'" in _one_line(exc) and "'kimi_linear'" in str(exc.value)


@needs_package
def test_an_unmodelled_architecture_is_refused_in_one_line_naming_its_model_type():
    with pytest.raises(ConfigError) as exc:
        get_model("nvidia/Nemotron-H-56B-Base-8K")
    line = _one_line(exc)
    assert "nvidia/Nemotron-H-56B-Base-8K" in line and "'nemotron_h'" in line
    assert "kimi_k2" in line and "minimax_m2" in line  # the supported list


@needs_package
def test_every_shipped_config_loads_or_is_refused_in_one_line():
    loaded = 0
    for hf_id in list_model_ids():
        try:
            m = get_model(hf_id)
        except ConfigError as exc:
            assert "\n" not in str(exc) and hf_id in str(exc), str(exc)
        else:
            loaded += 1
            assert m.params > 0
    assert loaded >= 30


def test_without_the_package_an_hf_id_is_an_unknown_model(monkeypatch):
    real = importlib.util.find_spec

    def hide(name: str, *args, **kwargs):
        return None if name == package_models.PACKAGE else real(name, *args, **kwargs)

    monkeypatch.setattr(package_models.importlib.util, "find_spec", hide)
    assert model_configs_dir() is None and list_model_ids() == []
    with pytest.raises(ConfigError) as exc:
        get_model("moonshotai/Kimi-K2-Instruct")
    line = _one_line(exc)
    assert "unknown model 'moonshotai/Kimi-K2-Instruct'" in line
    assert "aiconfigurator-core" in line and "not installed" in line
    assert get_model("Qwen/Qwen3-32B").name == "qwen3-32b"  # catalog aliases need no package


@needs_package
@pytest.mark.parametrize("model", ["Qwen/Qwen3-32B", "Qwen/Qwen3-0.6B"])
def test_kvplan_simulate_with_an_hf_id(tmp_path, model):
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan.cli.main", "simulate", "--set", f"model={model}",
         "--set", "hardware=h100-sxm", "--set", "workload.num_requests=50",
         "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert (tmp_path / "summary.json").is_file()


@needs_package
def test_kvplan_simulate_refuses_an_unmodelled_hf_id_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan.cli.main", "simulate", "--set", "model=nvidia/Nemotron-H-56B-Base-8K",
         "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "'nemotron_h'" in lines[0], proc.stderr


@needs_package
def test_minimax_router_gate_is_priced_as_an_fp32_sgemm(no_env):
    """MiniMax-M2's router gate runs in fp32 in both engines (vLLM's and SGLang's
    ``MiniMaxM2MoE``: ``ReplicatedLinear(params_dtype=float32)`` fed ``hidden.to(float32)``), so
    PyTorch runs cuBLAS's SGEMM on CUDA cores: at an 8k-token prefill 2 x 8192 x 3072 x 256
    FLOPs a layer at the fp32 rate, about 0.3 ms on an H100, where a 16-bit gate is a few
    microseconds. By hand against the same model with a 16-bit gate, in both pricers."""
    import dataclasses

    from sim.pricing import make_pricer
    from sim.pricing.roofline import RooflineCostModel

    m = get_model("MiniMaxAI/MiniMax-M2.5")
    assert m.router_fp32 and not get_model("Qwen/Qwen3-30B-A3B").router_fp32
    bf16_gate = dataclasses.replace(m, router_fp32=False)
    hd, e_count = m.hidden_size, m.num_experts

    roof = RooflineCostModel(m, "h100-sxm", dtype="bfloat16", tensor_parallel_size=4)
    e, h = roof.efficiency, roof.hardware
    flops_s = h.flops("fp32") * e.gemm_compute
    bw = h.memory_bandwidth * e.memory
    for rows in (4, 8192):
        expected = max(2 * hd * e_count * rows / flops_s,
                       hd * e_count * 4 / bw + (hd * (2 + 8) + e_count * 4) * rows / bw) + e.gemm_latency_s
        assert roof.gemm_time("router", rows) == pytest.approx(expected, rel=1e-9)
    plain = RooflineCostModel(bf16_gate, "h100-sxm", dtype="bfloat16", tensor_parallel_size=4)
    assert roof.gemm_time("router", 8192) > 5 * plain.gemm_time("router", 8192)
    assert 0.2e-3 < roof.gemm_time("router", 8192) < 0.3e-3  # 12.9 GFLOP at 53 TFLOP/s (0.791 x 67)

    args = dict(dtype="bfloat16", weight_dtype="fp8_block", tensor_parallel_size=4)
    tab = make_pricer("operator_tables", m, "h200", **args)
    tab16 = make_pricer("operator_tables", bf16_gate, "h200", **args)
    i = int(np.searchsorted(tab._gemm_m, 8192))
    assert tab._gemm_m[i] == 8192
    et = tab._roof.efficiency  # the table pricer's modelled terms keep A100's constants
    sgemm_ms = 2 * 8192 * hd * e_count / (tab._roof.hardware.flops("fp32") * et.gemm_compute) * 1e3
    cast_ms = (8192 * hd * (2 + 4) / (tab._roof.hardware.memory_bandwidth * et.elementwise_memory)
               + et.elementwise_latency_s) * 1e3
    assert float(tab._gemm_ms["router"][i]) == pytest.approx(
        max(sgemm_ms, float(tab16._gemm_ms["router"][i])) + cast_ms, rel=1e-9)
    # Decode rows: the SGEMM is under the 16-bit row's floor; only the cast kernel is added.
    j = int(np.searchsorted(tab._gemm_m, 4))
    assert float(tab._gemm_ms["router"][j] - tab16._gemm_ms["router"][j]) == pytest.approx(
        (4 * hd * 6 / (tab._roof.hardware.memory_bandwidth * e.elementwise_memory)
         + e.elementwise_latency_s) * 1e3, rel=1e-6)
    # The summary's pricer description says so (cost_model.source).
    assert "router gate in fp32" in tab.describe() and "router gate in fp32" not in tab16.describe()
    # Every other op is priced as before.
    for op in tab._gemm_ms:
        if op != "router":
            assert np.array_equal(tab._gemm_ms[op], tab16._gemm_ms[op])
