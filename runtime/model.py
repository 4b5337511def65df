"""Llama-family decoder in plain torch, running one packed step of variable-length sequences.

Inputs are flat: ``input_ids`` and ``positions`` ``[num_tokens]`` for every scheduled token of
every request (decode tokens and prefill chunks together, no padding), plus the step's
``AttentionMetadata``. Each layer writes its new K/V into its slice of the paged KV cache and
attends through it. Arithmetic follows transformers' ``LlamaForCausalLM`` op for op (RMSNorm in
float32, rotate-half RoPE, SwiGLU) so greedy outputs match it token for token.

Q/K/V and gate/up projections are fused into one GEMM each (fewer, larger matmuls: that is
what a small model on a CPU is bound by); ``load_weights`` splices HF's separate tensors in.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, cast

import torch
import torch.nn.functional as F
from torch import nn

from runtime.attention import AttentionMetadata, paged_attention
from runtime.model_config import ModelConfig


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # transformers' order: normalise in float32, cast back, then scale. F.rms_norm is the
        # same arithmetic in one op (a small model on a CPU pays per op, not per FLOP).
        return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.eps).to(x.dtype)


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies, with Llama-3.1 or linear scaling applied when configured."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "freq_factors":
        return inv_freq / torch.tensor(scaling["factors"], dtype=torch.float32)
    if kind == "llama3":
        factor = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled)
    return inv_freq


class RotaryEmbedding(nn.Module):
    """cos/sin for the step's positions, computed once per forward and shared by all layers."""

    inv_freq: torch.Tensor  # a registered buffer: nn.Module's attribute lookup types it loosely

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[:, None].float() * self.inv_freq[None, :].float()
        emb = torch.cat((freqs, freqs), dim=-1)
        # [num_tokens, 1, head_dim]: broadcasts over heads.
        return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim ** -0.5
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=False)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:  # Qwen3: RMSNorm over each head's query and key, before RoPE
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata) -> torch.Tensor:
        n = x.shape[0]
        qk, v = self.qkv_proj(x).split([self.q_size + self.kv_size, self.kv_size], dim=-1)
        qk = qk.view(n, self.num_heads + self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
            qk = torch.cat((self.q_norm(q), self.k_norm(k)), dim=1)
        # Q and K heads side by side get RoPE in one pass; the kernels take strided views.
        qk = apply_rope(qk, cos, sin)
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        out = paged_attention(q, k, v, kv_cache[0], kv_cache[1], meta, self.scale)
        return self.o_proj(out.reshape(n, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.intermediate_size = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class SparseMoE(nn.Module):
    """A mixture-of-experts MLP (Mixtral, Qwen3-MoE): a router picks ``top_k`` of ``num_experts``
    SwiGLU experts per token by softmax probability; their outputs are summed with those
    probabilities (renormalised over the chosen when ``norm_topk_prob``). Experts run one after
    another over the tokens routed to each, in expert order, and add into the output in that
    order: transformers' arithmetic, so greedy tokens match it."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        e, i, h = cfg.num_experts, cfg.intermediate_size, cfg.hidden_size
        self.num_experts, self.top_k, self.intermediate_size = e, cfg.num_experts_per_tok, i
        self.norm_topk_prob = cfg.norm_topk_prob
        # Mixtral keeps the weights in float32; Qwen3-MoE casts them to the activation dtype.
        self.float_weights = cfg.model_type == "mixtral"
        self.gate = nn.Linear(h, e, bias=False)
        self.experts_gate_up = nn.Parameter(torch.empty(e, 2 * i, h))
        self.experts_down = nn.Parameter(torch.empty(e, h, i))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.gate(x)
        probs = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        if not self.float_weights:
            weights = weights.to(logits.dtype)
        out = torch.zeros_like(x)
        for e in torch.unique(chosen).tolist():  # ascending: the order outputs add up in
            slot, token = torch.where(chosen.T == e)  # rows in transformers' order
            gate, up = F.linear(x[token], self.experts_gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.experts_down[e]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = SparseMoE(cfg) if cfg.num_experts else MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                kv_cache: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, kv_cache, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


#: Checkpoint names of one expert's weights -> (our stacked parameter, which part): Mixtral's
#: w1/w3/w2 and Qwen3-MoE's gate/up/down projections. Part 0 and 1 of ``experts_gate_up`` are
#: its gate and up halves.
_EXPERT = re.compile(r"^(.*\.layers\.\d+)\.(?:block_sparse_moe|mlp)\.experts\.(\d+)\."
                     r"(w1|w3|w2|gate_proj|up_proj|down_proj)\.weight$")
_EXPERT_PART = {"w1": ("experts_gate_up", 0), "gate_proj": ("experts_gate_up", 0),
                "w3": ("experts_gate_up", 1), "up_proj": ("experts_gate_up", 1),
                "w2": ("experts_down", 0), "down_proj": ("experts_down", 0)}
#: transformers 5's in-memory layout: every expert stacked in one tensor.
_STACKED = re.compile(r"^(.*\.layers\.\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")

#: HF parameter name suffix -> (fused parameter, shard index) for the fused projections.
_PACKED = {
    "q_proj": ("qkv_proj", 0),
    "k_proj": ("qkv_proj", 1),
    "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0),
    "up_proj": ("gate_up_proj", 1),
}


class LlamaForCausalLM(nn.Module):
    """Parameter names follow transformers' (``model.layers.N.self_attn...``, ``lm_head``)
    except the two fused projections, so HF checkpoints map one to one."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.model.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.model.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary = RotaryEmbedding(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_caches: list[tuple[torch.Tensor, torch.Tensor]], meta: AttentionMetadata) -> torch.Tensor:
        """Final hidden states ``[num_tokens, hidden]`` (norm applied); logits are computed
        only for the rows that sample, by ``compute_logits``."""
        # self.model is a bare nn.Module holding submodules by name: mypy sees them as Tensor | Module.
        h = cast(nn.Embedding, self.model.embed_tokens)(input_ids)
        cos, sin = self.rotary(positions, h.dtype)
        for layer, kv in zip(cast(nn.ModuleList, self.model.layers), kv_caches):
            h = layer(h, cos, sin, kv, meta)
        return cast(RMSNorm, self.model.norm)(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        embed = cast(nn.Embedding, self.model.embed_tokens)  # see forward
        weight = embed.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(hidden, weight).float()

    # --- weights ----------------------------------------------------------------------------
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy HF-named tensors in; raise if any parameter is left unset or a name is unknown."""
        params = dict(self.named_parameters())
        loaded: set[tuple[str, int]] = set()
        for name, tensor in weights:
            if name.endswith("rotary_emb.inv_freq"):
                continue  # older checkpoints store it; we recompute it
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            name = name.replace(".block_sparse_moe.gate.", ".mlp.gate.")  # Mixtral's router
            expert = _EXPERT.match(name)
            if expert:
                layer, e, part = expert.group(1), int(expert.group(2)), expert.group(3)
                stacked, half = _EXPERT_PART[part]
                target = f"{layer}.mlp.{stacked}"
                if target not in params or e >= params[target].shape[0]:
                    raise KeyError(f"checkpoint tensor {name!r} has no place in the model")
                piece = params[target].data[e]
                if stacked == "experts_gate_up":
                    i = self.config.intermediate_size
                    piece = piece.narrow(0, half * i, i)
                _copy(piece, tensor, name)
                loaded.add((target, 2 * e + half if stacked == "experts_gate_up" else e))
                continue
            stacked_all = _STACKED.match(name)
            if stacked_all:
                target = f"{stacked_all.group(1)}.mlp.experts_{stacked_all.group(2).replace('_proj', '')}"
                if target not in params:
                    raise KeyError(f"checkpoint tensor {name!r} has no place in the model")
                _copy(params[target].data, tensor, name)
                slices = params[target].shape[0] * (2 if "gate_up" in target else 1)
                loaded.update((target, s) for s in range(slices))
                continue
            target, shard = name, -1
            for hf, (fused, idx) in _PACKED.items():
                if f".{hf}." in name:
                    target, shard = name.replace(f".{hf}.", f".{fused}."), idx
                    break
            if target not in params:
                raise KeyError(f"checkpoint tensor {name!r} has no place in the model")
            param = params[target]
            if shard < 0:
                _copy(param.data, tensor, name)
            else:
                _copy(self._shard(param, target, shard), tensor, name)
            loaded.add((target, shard))
        needed: set[tuple[str, int]] = set()
        for n, p in params.items():
            packed = ".qkv_proj." in n or ".gate_up_proj." in n
            if n.endswith(".experts_gate_up"):
                needed.update((n, s) for s in range(2 * p.shape[0]))
            elif n.endswith(".experts_down"):
                needed.update((n, s) for s in range(p.shape[0]))
            else:
                needed.update((n, i) for i in (range(3 if ".qkv_proj." in n else 2) if packed else [-1]))
        missing = sorted(needed - loaded)
        if missing:
            raise KeyError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[0]}")

    def _shard(self, param: nn.Parameter, name: str, shard: int) -> torch.Tensor:
        if ".qkv_proj." in name:
            attn = cast(DecoderLayer, cast(nn.ModuleList, self.model.layers)[0]).self_attn
            sizes = [attn.q_size, attn.kv_size, attn.kv_size]
        else:
            sizes = [self.config.intermediate_size] * 2
        start = sum(sizes[:shard])
        return param.data.narrow(0, start, sizes[shard])


def _copy(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise ValueError(f"tensor {name!r}: checkpoint shape {tuple(src.shape)} != model shape {tuple(dst.shape)}")
    dst.copy_(src)
