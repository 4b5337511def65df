"""Helpers shared by the runtime tests: random-weight transformers checkpoints (the parity
reference is transformers itself) and transformers' own greedy continuation."""

from __future__ import annotations

import torch

#: name -> transformers config kwargs. Covers GQA, MHA with tied embeddings, MQA with an odd
#: head count, Llama-3 rope scaling, and Qwen2 (q/k/v bias).
SHAPES: dict[str, dict] = {
    "gqa": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2),
    "mha_tied": dict(hidden_size=48, intermediate_size=96, num_attention_heads=3, num_key_value_heads=3,
                     tie_word_embeddings=True),
    "mqa_odd": dict(hidden_size=80, intermediate_size=112, num_attention_heads=5, num_key_value_heads=1),
    "llama3_rope": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    "qwen2_bias": dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                       model_type="qwen2"),
}
#: Architectures beyond the Llama block: Qwen3 (per-head q/k RMSNorm, head_dim apart from
#: hidden / heads), Mixtral (top-2 of 4 experts), Qwen3-MoE (top-3 of 8, q/k norm, with and
#: without renormalising the chosen experts' weights).
NEW_SHAPES: dict[str, dict] = {
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=24),
    "mixtral": dict(model_type="mixtral", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2),
    "qwen3_moe": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=128,
                      moe_intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=16, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True),
    "qwen3_moe_raw": dict(model_type="qwen3_moe", hidden_size=64, intermediate_size=128,
                          moe_intermediate_size=48, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=16, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False),
}
VOCAB = 256
EOS = 2


def save_random_hf_model(path: str, shape: dict, seed: int = 0) -> torch.nn.Module:
    """A random-weight transformers model saved with save_pretrained; returns it (eval mode)."""
    import transformers

    shape = dict(shape)
    kind = shape.pop("model_type", "llama")
    prefix = {"llama": "Llama", "qwen2": "Qwen2", "qwen3": "Qwen3", "mixtral": "Mixtral",
              "qwen3_moe": "Qwen3Moe"}[kind]
    common = dict(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=256,
                  bos_token_id=1, eos_token_id=EOS)
    torch.manual_seed(seed)
    config = getattr(transformers, f"{prefix}Config")(**common, **shape)
    model = getattr(transformers, f"{prefix}ForCausalLM")(config)
    if kind in ("mixtral", "qwen3_moe"):
        # A router initialised near zero would send every token to the same experts by ties;
        # spread it so that routing really differs from token to token.
        with torch.no_grad():
            for layer in model.model.layers:
                layer.mlp.gate.weight.normal_(0.0, 0.5)
    model.eval()
    model.save_pretrained(path)
    return model


def hf_greedy(model: torch.nn.Module, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy continuation of one prompt (batch of one, so no padding), stopping
    at EOS like our engine does: EOS included, nothing after it."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=model.config.eos_token_id)
    return out[0, len(prompt):].tolist()
