"""The model shape the runtime builds, normalised from every source we load (an HF config.json,
GGUF metadata, a catalog entry), so ``model.py`` reads one dataclass and never a raw dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from sim.errors import ConfigError

#: RoPE variants the model implements; anything else is refused at load time, not mis-run.
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "freq_factors")
#: Architectures the runtime runs: the Llama block with optional QKV bias (Qwen2), per-head q/k
#: RMSNorm (Qwen3), and a sparse mixture-of-experts MLP (Mixtral: top-k renormalised; Qwen3-MoE:
#: renormalised when ``norm_topk_prob``).
SUPPORTED_ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe")


@dataclass(frozen=True)
class ModelConfig:
    """A Llama-family decoder: RMSNorm, RoPE, GQA attention, SwiGLU MLP."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    #: HF-style scaling dict with ``rope_type`` ("linear" | "llama3") or None; GGUF files of
    #: Llama 3.1 carry llama.cpp's per-dimension divisors instead: ``freq_factors``.
    rope_scaling: Optional[dict[str, Any]] = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 has q/k/v biases
    #: RMSNorm over each head's query and key before RoPE (Qwen3).
    qk_norm: bool = False
    #: Mixture of experts (0: dense): every layer's MLP is ``num_experts`` SwiGLU experts of
    #: ``intermediate_size`` each, ``num_experts_per_tok`` per token, weighted by the router's
    #: softmax over them, renormalised over the chosen ones when ``norm_topk_prob``.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    norm_topk_prob: bool = True
    model_type: str = "llama"
    bos_token_id: Optional[int] = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_ARCHITECTURES:
            raise ConfigError(
                f"model_type {self.model_type!r} is not supported (runtime supports "
                f"{', '.join(SUPPORTED_ARCHITECTURES)})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads {self.num_key_value_heads}"
            )
        if (self.num_experts > 0) != (self.num_experts_per_tok > 0) or self.num_experts_per_tok > self.num_experts:
            raise ConfigError(f"num_experts {self.num_experts} and num_experts_per_tok "
                              f"{self.num_experts_per_tok}: both 0 (dense) or 0 < k <= experts")
        rope_type = (self.rope_scaling or {}).get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ConfigError(f"rope_type {rope_type!r} is not supported ({', '.join(SUPPORTED_ROPE_TYPES)})")

    # --- sizes the KV pool and the memory budget need -------------------------------------
    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token across all layers."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes

    @property
    def num_parameters(self) -> int:
        h, i, L = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        mlp = 3 * h * i * max(self.num_experts, 1) + h * self.num_experts
        per_layer = h * (q + 2 * kv) + q * h + mlp + 2 * h
        if self.attention_bias:
            per_layer += q + 2 * kv
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return L * per_layer + emb + h

    # --- constructors ---------------------------------------------------------------------
    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any]) -> "ModelConfig":
        """From a Hugging Face ``config.json`` (transformers 4.x ``rope_theta``/``rope_scaling``
        or 5.x ``rope_parameters``)."""
        model_type = cfg.get("model_type", "llama")
        try:
            heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            rope_params = dict(cfg.get("rope_parameters") or {})
            rope_theta = float(rope_params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
            scaling = cfg.get("rope_scaling") or rope_params or None
            if scaling is not None:
                scaling = dict(scaling)
                scaling["rope_type"] = scaling.get("rope_type", scaling.get("type", "default"))
                scaling.pop("type", None)
                if scaling["rope_type"] == "default":
                    scaling = None
            eos = cfg.get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, (list, tuple)) else (() if eos is None else (int(eos),))
            if cfg.get("hidden_act", "silu") != "silu":
                raise ConfigError(f"hidden_act {cfg.get('hidden_act')!r} is not supported (silu only)")
            ffn = int(cfg["intermediate_size"]) if model_type != "qwen3_moe" else int(cfg["moe_intermediate_size"])
            experts, per_token = 0, 0
            if model_type == "mixtral":
                experts, per_token = int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"])
            elif model_type == "qwen3_moe":
                if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
                    raise ConfigError("Qwen3-MoE with dense layers (decoder_sparse_step != 1 or "
                                      "mlp_only_layers) is not supported")
                # Hub configs say num_experts; transformers 5 saves num_local_experts.
                count = cfg["num_experts"] if "num_experts" in cfg else cfg["num_local_experts"]
                experts, per_token = int(count), int(cfg["num_experts_per_tok"])
            return cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=ffn,
                num_hidden_layers=int(cfg["num_hidden_layers"]),
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or hidden // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=rope_theta,
                rope_scaling=scaling,
                max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", model_type == "qwen2")),
                qk_norm=model_type in ("qwen3", "qwen3_moe"),
                num_experts=experts,
                num_experts_per_tok=per_token,
                # Mixtral always renormalises its top-k weights; Qwen3-MoE when configured.
                norm_topk_prob=(model_type == "mixtral" or bool(cfg.get("norm_topk_prob", False))),
                model_type=model_type,
                bos_token_id=cfg.get("bos_token_id"),
                eos_token_ids=eos_ids,
            )
        except KeyError as e:
            raise ConfigError(f"model config lacks {e.args[0]!r}") from None
