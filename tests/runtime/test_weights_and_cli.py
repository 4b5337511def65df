"""Loaders and the CLI functions: GGUF Q/K layout, random catalog shapes, memory checks,
and ``kvplan generate`` / ``kvplan bench runtime`` on a tiny checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from kvplan.cli.engine import bench_runtime, generate
from runtime.model_config import ModelConfig
from runtime.model import LlamaForCausalLM
from runtime.weights import _catalog_config, load_model, random_model, unpermute_qk
from sim.errors import ConfigError, DoesNotFitError


def _llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """llama.cpp's convert_hf_to_gguf.py ``permute`` (what GGUF files hold), for the test."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("heads,head_dim", [(9, 64), (3, 8), (1, 4)])
def test_unpermute_inverts_llama_cpp_permute(heads, head_dim):
    w = torch.randn(heads * head_dim, 12)
    assert torch.equal(unpermute_qk(_llama_cpp_permute(w, heads), heads), w)


def test_catalog_shapes_for_random_weights():
    cfg = _catalog_config("llama-3.1-8b")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.intermediate_size, cfg.vocab_size) == (32, 4096, 32, 8, 14336, 128256)
    assert abs(cfg.num_parameters - 8.03e9) / 8.03e9 < 0.01
    assert _catalog_config("qwen2.5-7b").attention_bias
    with pytest.raises(ConfigError, match="not a Llama-family"):
        _catalog_config("opt-13b")


def test_model_too_big_for_memory_is_refused_before_allocating():
    with pytest.raises(DoesNotFitError, match="parameters need"):
        load_model("random:llama-3.1-70b")


def test_random_model_is_reproducible(tmp_path):
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    a, b = random_model(cfg, seed=3).model, random_model(cfg, seed=3).model
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}))
    loaded = load_model(f"random:{tmp_path}")
    assert loaded.source == "random" and loaded.config.head_dim == 16


def test_checkpoint_missing_or_misshapen_tensors_are_refused(hf_models):
    from safetensors.torch import load_file

    path = hf_models["gqa"][0]
    tensors = load_file(f"{path}/model.safetensors")
    cfg = load_model(path, load_tokenizer=False).config
    partial = {k: v for k, v in tensors.items() if not k.endswith("layers.1.mlp.up_proj.weight")}
    with pytest.raises(KeyError, match="lacks 1 tensors"):
        LlamaForCausalLM(cfg).load_weights(partial.items())
    bad = dict(tensors, **{"model.norm.weight": torch.ones(3)})
    with pytest.raises(ValueError, match="model.norm.weight"):
        LlamaForCausalLM(cfg).load_weights(bad.items())


def test_unsupported_rope_is_refused():
    with pytest.raises(ConfigError, match="rope_type 'yarn'"):
        ModelConfig.from_hf_dict({"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
                                  "num_hidden_layers": 1, "num_attention_heads": 1,
                                  "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})


def test_cli_generate_needs_a_tokenizer_for_text(hf_models):
    path = hf_models["gqa"][0]
    with pytest.raises(ConfigError, match="no tokenizer"):
        generate(prompt=["hi"], model=path, chat=False, max_tokens=4, temperature=0.0, top_p=1.0, top_k=0,
                 seed=None, device="cpu", dtype="auto", kv_cache_mib=1.0, block_size=4, threads=None,
                 trace=None, num_speculative_tokens=0, as_json=False)


def test_cli_bench_runtime(hf_models, capsys, tmp_path):
    trace = tmp_path / "steps.jsonl"
    result = bench_runtime(model=hf_models["mha_tied"][0], num_requests=6, scale=0.05, lengths=None,
                           device="cpu", dtype="auto", kv_cache_mib=0.25, block_size=4, max_num_seqs=8,
                           max_num_batched_tokens=32, threads=None, seed=0, trace=str(trace),
                           num_speculative_tokens=2, as_json=True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["num_requests"] == 6 and printed["output_throughput"] > 0
    assert len(trace.read_text().splitlines()) == result["num_steps"] + 2  # + the warm-up (prefill, decode)
