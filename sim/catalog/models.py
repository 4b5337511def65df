"""Model catalog: the transformer shapes that decide weight memory, KV bytes per token and
the FLOPs and bytes of every operator.

Why shapes and not a parameter count: the cost model prices each GEMM from its dimensions
and the memory plan shards weights and KV heads across tensor-parallel ranks, so the count is
derived (``ModelSpec.params``) and checked against the published figure in the tests.

Names are lower-case slugs (a contract used in configs); Hugging Face ids are aliases, and a
path to an HF ``config.json`` (or its directory) loads Llama/Mistral/Qwen2/OPT-style models.
Any other ``org/name`` id resolves through the configs the ``aiconfigurator-core`` package ships,
when it is installed (``sim.catalog.package_models``), for the architectures modelled here.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Optional

from sim.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, dense or mixture-of-experts.

    - ``num_experts`` / ``num_experts_per_tok``: 0 for a dense model; for a mixture of experts
      (Mixtral, Qwen3-MoE: every layer sparse, no shared expert) every layer's MLP is
      ``num_experts`` experts of ``intermediate_size`` each (the expert's, e.g. Qwen3-MoE's
      ``moe_intermediate_size``), and a router (``hidden x num_experts``) sends each token to
      ``num_experts_per_tok`` of them. All experts are held in memory (``params``); a token
      computes through k (``active_params``).
    - ``qk_norm``: RMSNorm over each head's query and key (Qwen3); priced as part of the norms.
    - ``qk_norm_across_heads``: the q/k RMSNorm spans all heads (MiniMax-M2's ``qk_norm_type:
      per_layer``): under tensor parallelism each GPU holds some heads, so vLLM all-reduces the
      per-token variance (``MiniMaxText01RMSNormTP.forward_qk``): one more small all-reduce and
      kernel per layer, priced by ``sim.pricing``.
    - ``router_fp32``: the MoE router gate runs in fp32 (MiniMax-M2: vLLM's and SGLang's
      ``MiniMaxM2MoE`` build the gate as a ``ReplicatedLinear`` with ``params_dtype=float32``
      and feed it ``hidden_states.to(float32)``): a CUDA-core SGEMM, whose prefill cost is
      not negligible (2 x tokens x hidden x experts FLOPs at the fp32 rate), priced by
      ``sim.pricing``; a 16-bit router otherwise.
    - ``num_shared_experts``: experts every token goes through besides its routed k
      (DeepSeek-V3: 1), each ``intermediate_size`` wide; ``first_dense_layers``: leading layers
      with a dense MLP of ``dense_intermediate_size`` instead of experts (DeepSeek-V3: 3 of 61,
      18432 wide).
    - MLA, multi-head latent attention (DeepSeek-V2/V3), when ``kv_lora_rank`` > 0: queries
      come through a ``q_lora_rank`` bottleneck (0: a plain projection), keys and values are
      up-projected per head from one ``kv_lora_rank`` latent plus a ``qk_rope_head_dim`` rotary
      key shared by all heads, and that latent is all the KV cache holds per token and layer.
      ``head_dim`` is the query/key head width (no-rope part + ``qk_rope_head_dim``),
      ``v_head_dim`` the value head width. ``num_kv_heads`` is ``num_heads`` (every head has its
      own K and V after the up-projection).
    - ``num_mtp_layers``: multi-token-prediction modules (DeepSeek-V3's MTP head); recorded,
      not counted in ``params`` (model cards count them apart: 671B + 14B).
    - ``sliding_window_layers``: how many layers attend only to the last ``sliding_window``
      tokens in a hybrid model (gpt-oss: every other layer, window 128); their KV is held up to
      the window, the rest's for the whole context. 0 (Mistral-7B-v0.1's window is recorded
      but priced and held as full attention). ``attention_sinks``: a learned per-head logit in
      each softmax (gpt-oss); recorded, its cost negligible.
    - Linear attention, ``linear_attention_layers`` > 0 (Qwen3.5, Qwen3-Next: three of every
      four layers a Gated DeltaNet): those layers keep no KV cache but a constant recurrent
      state per request, a ``linear_num_value_heads x linear_key_head_dim x
      linear_value_head_dim`` matrix in ``linear_state_bytes``-byte values (the config's
      ``mamba_ssm_dtype``, float32) plus the last ``linear_conv_kernel - 1`` inputs of its
      causal convolution (``recurrent_state_elements``); their projections are q, k (each
      ``linear_num_key_heads x linear_key_head_dim``), v and an output gate z (each
      ``linear_num_value_heads x linear_value_head_dim``), two scalars per value head (b, a)
      and the output projection. The other layers are full attention.
    - ``attn_output_gate``: the full-attention layers' query projection also emits a sigmoid
      gate on the attention output (Qwen3.5): q projection twice ``q_size`` wide.
    - DeepSeek sparse attention, ``index_topk`` > 0 (DeepSeek-V3.2, GLM-5: MLA whose queries
      attend to the ``index_topk`` cached tokens a lightning indexer scores highest): the
      indexer has ``index_num_heads`` heads of ``index_head_dim`` (its q from the q latent, one
      shared key per token, cached in FP8 with a float32 scale per 128 values beside the MLA
      latent), so attention reads at most ``index_topk`` tokens of a long context while the
      indexer scans all of it.

    - ``gated_mlp``: SwiGLU (gate, up, down: three h x ffn matrices) as in Llama, versus
      OPT's two-matrix ReLU MLP (fc1, fc2).
    - ``qkv_bias``: bias on the q/k/v projections (Qwen2); ``linear_bias``: bias on every
      linear layer (OPT), which implies qkv bias.
    - ``norm``: ``rmsnorm`` (weight only) or ``layernorm`` (weight and bias).
    - ``learned_position_rows``: rows of a learned position-embedding table (OPT: 2048 + 2
      offset rows); 0 for rotary models.
    - ``sliding_window``: attention window (Mistral-7B-v0.1); recorded for the scheduler,
      the cost model prices full context.
    - ``rope_theta``: rotary base (for the runtime; costs do not depend on it).
    - ``multimodal``: the checkpoint is a multimodal wrapper (Qwen3.5, Kimi-K2.5, Qwen3-VL,
      Llama 4) whose text model kvplan prices. Its vision encoder is not served here, but
      engines treat the architecture apart: SGLang turns its piecewise CUDA graphs off for
      multimodal models by default (``sim.catalog.engines.sglang_extend_graph_tokens``).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    linear_bias: bool = False
    norm: str = "rmsnorm"
    learned_position_rows: int = 0
    sliding_window: Optional[int] = None
    rope_theta: float = 10000.0
    hf_id: Optional[str] = None
    num_experts: int = 0
    num_experts_per_tok: int = 0
    qk_norm: bool = False
    qk_norm_across_heads: bool = False
    router_fp32: bool = False
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    dense_intermediate_size: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    num_mtp_layers: int = 0
    sliding_window_layers: int = 0
    attention_sinks: bool = False
    linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0
    linear_state_bytes: int = 4
    attn_output_gate: bool = False
    index_topk: int = 0
    index_num_heads: int = 0
    index_head_dim: int = 0
    multimodal: bool = False

    def __post_init__(self) -> None:
        if (self.num_experts > 0) != (self.num_experts_per_tok > 0) or self.num_experts < 0:
            raise ConfigError(f"model {self.name}: num_experts and num_experts_per_tok must both "
                              f"be positive (mixture-of-experts) or both 0 (dense)")
        if self.num_experts_per_tok > self.num_experts:
            raise ConfigError(f"model {self.name}: num_experts_per_tok ({self.num_experts_per_tok}) "
                              f"exceeds num_experts ({self.num_experts})")
        for attr in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
                     "intermediate_size", "vocab_size", "max_position_embeddings"):
            if int(getattr(self, attr)) <= 0:
                raise ConfigError(f"model {self.name}: {attr} must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model {self.name}: num_heads ({self.num_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ConfigError(f"model {self.name}: norm must be rmsnorm or layernorm")
        if (self.num_shared_experts or self.first_dense_layers) and not self.is_moe:
            raise ConfigError(f"model {self.name}: shared experts and dense-first layers need "
                              f"num_experts (a mixture of experts)")
        if not 0 <= self.first_dense_layers < self.num_layers:
            raise ConfigError(f"model {self.name}: first_dense_layers must be in [0, num_layers)")
        if self.first_dense_layers and self.dense_intermediate_size <= 0:
            raise ConfigError(f"model {self.name}: first_dense_layers needs dense_intermediate_size")
        if self.sliding_window_layers and not (self.sliding_window and 0 < self.sliding_window_layers
                                                < self.num_layers):
            raise ConfigError(f"model {self.name}: sliding_window_layers needs sliding_window and "
                              f"some full-attention layers (0 < sliding_window_layers < num_layers)")
        if self.linear_attention_layers:
            if not 0 < self.linear_attention_layers + self.sliding_window_layers < self.num_layers:
                raise ConfigError(f"model {self.name}: linear_attention_layers needs some "
                                  f"full-attention layers (0 < linear_attention_layers < num_layers)")
            if min(self.linear_num_key_heads, self.linear_num_value_heads, self.linear_key_head_dim,
                   self.linear_value_head_dim, self.linear_conv_kernel, self.linear_state_bytes) <= 0:
                raise ConfigError(f"model {self.name}: linear attention needs positive "
                                  f"linear_num_key_heads, linear_num_value_heads, head dims, "
                                  f"linear_conv_kernel and linear_state_bytes")
            if self.linear_num_value_heads % self.linear_num_key_heads:
                raise ConfigError(f"model {self.name}: linear_num_value_heads must be a multiple "
                                  f"of linear_num_key_heads")
        if self.index_topk and not (self.is_mla and self.index_num_heads > 0 and self.index_head_dim > 0):
            raise ConfigError(f"model {self.name}: sparse attention (index_topk) needs MLA and "
                              f"positive index_num_heads and index_head_dim")
        if self.is_mla:
            if not 0 < self.qk_rope_head_dim < self.head_dim or self.v_head_dim <= 0:
                raise ConfigError(f"model {self.name}: MLA needs 0 < qk_rope_head_dim < head_dim "
                                  f"and v_head_dim > 0")
            if self.num_kv_heads != self.num_heads:
                raise ConfigError(f"model {self.name}: MLA up-projects K and V for every head: "
                                  f"num_kv_heads must equal num_heads")

    # -- shapes ---------------------------------------------------------------------------
    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of K (= width of V) per token."""
        return self.num_kv_heads * self.head_dim

    @property
    def qkv_size(self) -> int:
        """Output width of the fused q/k/v projection (with the output gate's q-wide half)."""
        return (2 if self.attn_output_gate else 1) * self.q_size + 2 * self.kv_size

    @property
    def mlp_in_size(self) -> int:
        """Output width of the first MLP GEMM (gate+up fused, or fc1)."""
        return (2 if self.gated_mlp else 1) * self.intermediate_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_nope_head_dim(self) -> int:
        """MLA: the part of a query/key head without rotary position (0 otherwise)."""
        return self.head_dim - self.qk_rope_head_dim if self.is_mla else 0

    @property
    def kv_cache_width(self) -> int:
        """Values the KV cache holds per token and layer: K and V of every KV head, or for MLA
        the compressed latent plus the shared rotary key (DeepSeek-V3: 512 + 64 = 576, against
        2 x 128 heads x 192 = 49,152 had it cached K and V)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.kv_size

    @property
    def num_full_attention_layers(self) -> int:
        """Layers whose KV grows with the whole context (all but the sliding-window and
        linear-attention ones)."""
        return self.num_layers - self.sliding_window_layers - self.linear_attention_layers

    @property
    def num_attention_layers(self) -> int:
        """Layers with softmax attention over a KV cache (full or sliding-window)."""
        return self.num_layers - self.linear_attention_layers

    @property
    def is_hybrid_linear(self) -> bool:
        return self.linear_attention_layers > 0

    @property
    def is_sparse_attention(self) -> bool:
        """DeepSeek sparse attention (DSA): each query attends to ``index_topk`` tokens."""
        return self.index_topk > 0

    @property
    def indexer_cache_bytes(self) -> int:
        """Bytes a DSA layer's indexer caches per token: its FP8 key and a float32 scale per
        128 values (SGLang's and vLLM's indexer k cache); 0 without sparse attention."""
        if not self.is_sparse_attention:
            return 0
        return self.index_head_dim + 4 * -(-self.index_head_dim // 128)

    @property
    def indexer_params(self) -> int:
        """One DSA layer's indexer weights: its query up-projection from the q latent, the
        key projection and the per-head weights from the hidden state (0 without DSA)."""
        if not self.is_sparse_attention:
            return 0
        q_in = self.q_lora_rank or self.hidden_size
        return (q_in * self.index_num_heads * self.index_head_dim
                + self.hidden_size * (self.index_head_dim + self.index_num_heads))

    @property
    def linear_key_size(self) -> int:
        """Width of a linear-attention layer's q (= its k): key heads x key head width."""
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_size(self) -> int:
        """Width of a linear-attention layer's v (= its gate z and its output)."""
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_channels(self) -> int:
        """Channels of a linear-attention layer's causal convolution: q, k and v."""
        return 2 * self.linear_key_size + self.linear_value_size

    @property
    def linear_qkvz_size(self) -> int:
        """Output width of a linear-attention layer's fused q, k, v, z projection."""
        return self.linear_conv_channels + self.linear_value_size

    @property
    def linear_in_proj_size(self) -> int:
        """Output width of a linear-attention layer's input projections: q, k, v, z, and b, a
        (one scalar each per value head)."""
        return self.linear_qkvz_size + 2 * self.linear_num_value_heads

    def recurrent_state_elements(self, tp: int = 1) -> tuple[int, int]:
        """(recurrent-state values, convolution-window values) one request holds in one
        linear-attention layer on one of ``tp`` ranks (heads split over TP): the delta rule's
        ``value heads x key dim x value dim`` matrix, and the last ``conv_kernel - 1`` inputs
        of the causal convolution over q, k and v."""
        if not self.is_hybrid_linear:
            return 0, 0
        ssm = self.linear_num_value_heads // tp * self.linear_key_head_dim * self.linear_value_head_dim
        conv = self.linear_conv_channels // tp * (self.linear_conv_kernel - 1)
        return ssm, conv

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # -- parameter counts ------------------------------------------------------------------
    @property
    def expert_params(self) -> int:
        """Weights of one MLP (a dense layer's, or one expert's)."""
        return (self.mlp_in_size + self.intermediate_size) * self.hidden_size

    @property
    def router_params(self) -> int:
        """The MoE router of one layer (``hidden x num_experts``); 0 for a dense model."""
        return self.hidden_size * self.num_experts

    @property
    def linear_attention_params(self) -> int:
        """Weights of one linear-attention layer's GEMMs: the input projections (q, k, v, z,
        b, a) and the output projection (0 for a model without such layers)."""
        if not self.is_hybrid_linear:
            return 0
        return self.hidden_size * (self.linear_in_proj_size + self.linear_value_size)

    @property
    def attention_params(self) -> int:
        """Weights of one (full or sliding-window) attention layer's projections. MLA: q down
        (to ``q_lora_rank``) and up, the latent-and-rotary-key down projection, the per-head
        K/V up projection from the latent, and the output projection."""
        h = self.hidden_size
        if not self.is_mla:
            return h * self.qkv_size + self.attention_output_params
        heads, rank = self.num_heads, self.kv_lora_rank
        q = (h * self.q_lora_rank + self.q_lora_rank * heads * self.head_dim
             if self.q_lora_rank else h * heads * self.head_dim)
        kv_down = h * (rank + self.qk_rope_head_dim)
        kv_up = rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_down + kv_up + self.attention_output_params + self.indexer_params

    @property
    def attention_output_params(self) -> int:
        """Weights of one attention layer's output projection (MLA: every head's value width
        back to the hidden size), the part a checkpoint may quantise apart from the rest."""
        values = self.num_heads * self.v_head_dim if self.is_mla else self.q_size
        return values * self.hidden_size

    @property
    def replicated_attention_params(self) -> int:
        """Attention weights every tensor-parallel rank holds whole (vLLM's MLA keeps the q and
        kv down-projections replicated: their outputs are shared by all heads)."""
        if not self.is_mla:
            return 0
        return self.hidden_size * (self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim)

    @property
    def dense_mlp_params(self) -> int:
        """One dense layer's MLP (a dense model's every layer; a MoE's first dense layers)."""
        if self.is_moe and self.first_dense_layers:
            ffn = self.dense_intermediate_size
            return ((2 if self.gated_mlp else 1) * ffn + ffn) * self.hidden_size
        return self.expert_params

    @property
    def moe_mlp_params(self) -> int:
        """One sparse layer's MLP: every routed and shared expert, and the router."""
        return self.expert_params * (self.num_experts + self.num_shared_experts) + self.router_params

    @property
    def linear_params(self) -> int:
        """Weights of every layer's GEMMs, all experts included (what weight quantisation
        shrinks, and what memory must hold)."""
        return (self.num_attention_layers * self.attention_params
                + self.linear_attention_layers * self.linear_attention_params
                + self.num_dense_layers * self.dense_mlp_params
                + self.num_moe_layers * self.moe_mlp_params)

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of the largest layer's GEMMs, every expert included (the fullest pipeline
        stage holds the largest layers; every layer is the same but for dense-first MoEs)."""
        mlp = self.moe_mlp_params if self.is_moe else self.dense_mlp_params
        return max(self.attention_params, self.linear_attention_params) + mlp

    @property
    def other_params_per_layer(self) -> int:
        """Biases and norm weights of one layer (kept in the activation dtype)."""
        h = self.hidden_size
        n = 2 * (h if self.norm == "rmsnorm" else 2 * h)
        if self.is_mla:  # RMSNorm on the q and kv latents
            n += self.q_lora_rank + self.kv_lora_rank
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.qkv_bias or self.linear_bias:
            n += self.qkv_size
        if self.linear_bias:
            n += h + self.mlp_in_size + h
        if self.is_hybrid_linear:
            # Linear-attention layers' small weights, averaged over layers: the causal
            # convolution's kernel over q, k, v, per-head decay and time-step bias, the gated
            # output norm; the shared expert's sigmoid gate (Qwen3-Next / Qwen3.5) is in the MLP.
            conv = self.linear_conv_channels * self.linear_conv_kernel
            per_linear = conv + 2 * self.linear_num_value_heads + self.linear_value_head_dim
            n += -(-self.linear_attention_layers * per_linear // self.num_layers)
        return n

    @property
    def params_per_layer(self) -> int:
        return self.linear_params_per_layer + self.other_params_per_layer

    @property
    def embedding_params(self) -> int:
        """Token embedding plus any learned position table."""
        return (self.vocab_size + self.learned_position_rows) * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate output projection; 0 when tied to the token embedding."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def final_norm_params(self) -> int:
        return self.hidden_size if self.norm == "rmsnorm" else 2 * self.hidden_size

    @property
    def params(self) -> int:
        """Total parameters, computed from the shapes (MTP modules not counted)."""
        return (self.linear_params + self.num_layers * self.other_params_per_layer
                + self.embedding_params + self.lm_head_params + self.final_norm_params)

    @property
    def active_params(self) -> int:
        """Parameters one token computes through: ``params`` less the routed experts it is not
        sent to (equal to ``params`` for a dense model)."""
        idle = max(self.num_experts - self.num_experts_per_tok, 0) * self.expert_params
        return self.params - self.num_moe_layers * idle


def _llama(name: str, hf_id: str, layers: int, hidden: int, heads: int, kv_heads: int,
           ffn: int, vocab: int, max_pos: int, **kw: Any) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                     num_kv_heads=kv_heads, head_dim=kw.pop("head_dim", hidden // heads),
                     intermediate_size=ffn, vocab_size=vocab, max_position_embeddings=max_pos,
                     hf_id=hf_id, **kw)


# Shapes from each model's config.json on the Hugging Face Hub (hf_id).
_CATALOG: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec(name="opt-13b", num_layers=40, hidden_size=5120, num_heads=40,
                  num_kv_heads=40, head_dim=128, intermediate_size=20480, vocab_size=50272,
                  max_position_embeddings=2048, gated_mlp=False, tie_word_embeddings=True,
                  linear_bias=True, norm="layernorm", learned_position_rows=2048 + 2,
                  hf_id="facebook/opt-13b"),
        _llama("llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", "meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("codellama-34b", "codellama/CodeLlama-34b-hf", 48, 8192, 64, 8, 22016, 32000, 16384,
               rope_theta=1000000.0),
        _llama("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256,
               131072, rope_theta=500000.0),
        _llama("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256,
               131072, rope_theta=500000.0),
        _llama("mistral-7b", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
               sliding_window=4096),
        _llama("qwen2.5-7b", "Qwen/Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, 32768,
               qkv_bias=True, rope_theta=1000000.0),
        # Mistral NeMo 12B: 32 heads of 128 on a 5,120-wide residual (head_dim is not
        # hidden / heads), a 2^17-token vocabulary, no sliding window.
        _llama("mistral-nemo-12b", "mistralai/Mistral-Nemo-Base-2407", 40, 5120, 32, 8, 14336,
               131072, 128000, head_dim=128, rope_theta=1000000.0),
        _llama("yi-34b", "01-ai/Yi-34B", 60, 7168, 56, 8, 20480, 64000, 4096, rope_theta=5000000.0),
        _llama("smollm2-135m", "HuggingFaceTB/SmolLM2-135M", 30, 576, 9, 3, 1536, 49152, 8192,
               tie_word_embeddings=True, rope_theta=100000.0),
        _llama("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000,
               32768, rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2),
        _llama("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, 32, 8, 12288, 151936, 40960,
               head_dim=128, qk_norm=True, rope_theta=1000000.0),
        _llama("qwen3-14b", "Qwen/Qwen3-14B", 40, 5120, 40, 8, 17408, 151936, 40960,
               head_dim=128, qk_norm=True, rope_theta=1000000.0),
        _llama("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 25600, 151936, 40960,
               head_dim=128, qk_norm=True, rope_theta=1000000.0),
        # Qwen3-MoE: intermediate_size is each expert's (the config's moe_intermediate_size).
        _llama("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 4, 768, 151936, 40960,
               head_dim=128, qk_norm=True, rope_theta=1000000.0, num_experts=128,
               num_experts_per_tok=8),
        _llama("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 4096, 64, 4, 1536, 151936, 40960,
               head_dim=128, qk_norm=True, rope_theta=1000000.0, num_experts=128,
               num_experts_per_tok=8),
        _llama("mixtral-8x22b", "mistralai/Mixtral-8x22B-v0.1", 56, 6144, 48, 8, 16384, 32768,
               65536, rope_theta=1000000.0, num_experts=8, num_experts_per_tok=2),
        # DeepSeek-V3: MLA (q rank 1536, kv latent 512 + 64 rotary dims; 192-wide q/k heads,
        # 128-wide v heads), 256 routed experts of 2048 (top 8) plus one shared, the first 3
        # of 61 layers dense (18432), one MTP module (not counted in params).
        _llama("deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 7168, 128, 128, 2048, 129280,
               163840, head_dim=192, num_experts=256, num_experts_per_tok=8,
               num_shared_experts=1, first_dense_layers=3, dense_intermediate_size=18432,
               q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128,
               num_mtp_layers=1),
        # gpt-oss: every other layer attends to a 128-token window (with attention sinks), MoE
        # of 2880-wide experts, top 4; q/k/v biases. Experts ship in MXFP4
        # (quantization.weights mxfp4 quantises the experts only: ``dtypes.experts_only``).
        _llama("gpt-oss-20b", "openai/gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072,
               head_dim=64, qkv_bias=True, rope_theta=150000.0, num_experts=32,
               num_experts_per_tok=4, sliding_window=128, sliding_window_layers=12,
               attention_sinks=True),
        _llama("gpt-oss-120b", "openai/gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072,
               head_dim=64, qkv_bias=True, rope_theta=150000.0, num_experts=128,
               num_experts_per_tok=4, sliding_window=128, sliding_window_layers=18,
               attention_sinks=True),
        # Llama 4 Scout (text): 16 experts of 8192, top 1, plus a shared expert in every layer;
        # 3 of 4 layers attend within 8192-token chunks (held here as an 8192-token window).
        _llama("llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E", 48, 5120, 40, 8, 8192, 202048,
               10485760, head_dim=128, rope_theta=500000.0, num_experts=16,
               num_experts_per_tok=1, num_shared_experts=1, sliding_window=8192,
               sliding_window_layers=36),
    )
}

# Hugging Face ids that share a catalog entry's shapes (chat/instruct fine-tunes).
_EXTRA_ALIASES: dict[str, tuple[str, ...]] = {
    "llama-2-7b": ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b"),
    "llama-2-13b": ("meta-llama/Llama-2-13b-chat-hf", "meta-llama/Llama-2-13b"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-chat-hf", "meta-llama/Llama-2-70b"),
    "codellama-34b": ("codellama/CodeLlama-34b-Instruct-hf", "codellama/CodeLlama-34b-Python-hf"),
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B",
                     "meta-llama/Meta-Llama-3.1-8B-Instruct"),
    "llama-3.1-70b": ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B",
                      "meta-llama/Meta-Llama-3.1-70B-Instruct",
                      "meta-llama/Llama-3.3-70B-Instruct"),  # 3.3: the 3.1 architecture, new weights
    "mistral-7b": ("mistralai/Mistral-7B-Instruct-v0.1",),
    "qwen2.5-7b": ("Qwen/Qwen2.5-7B-Instruct",),
    "mistral-nemo-12b": ("mistralai/Mistral-Nemo-Instruct-2407",),
    "yi-34b": ("01-ai/Yi-34B-Chat", "01-ai/Yi-1.5-34B", "01-ai/Yi-1.5-34B-Chat"),
    "smollm2-135m": ("HuggingFaceTB/SmolLM2-135M-Instruct",),
    "mixtral-8x7b": ("mistralai/Mixtral-8x7B-Instruct-v0.1",),
    "mixtral-8x22b": ("mistralai/Mixtral-8x22B-Instruct-v0.1",),
    "deepseek-v3": ("deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-R1-0528"),
    "llama-4-scout": ("meta-llama/Llama-4-Scout-17B-16E-Instruct",),
}


def _build_aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for slug, spec in _CATALOG.items():
        ids = ((spec.hf_id,) if spec.hf_id else ()) + _EXTRA_ALIASES.get(slug, ())
        for hf_id in ids:
            aliases[hf_id.lower()] = slug
            aliases[hf_id.split("/", 1)[1].lower()] = slug  # bare repo name, no org
    return aliases


_ALIASES = _build_aliases()

MODEL_NAMES: tuple[str, ...] = tuple(_CATALOG)


def get_model(name_or_path: "str | os.PathLike[str] | ModelSpec") -> ModelSpec:
    """A catalog slug, a Hugging Face id alias, a path to an HF ``config.json`` (or the
    directory holding one), or the HF id of a config shipped by ``aiconfigurator-core``
    (named by that id). The catalog comes first, so its slugs and aliases keep their shapes.
    Unknown names raise ConfigError listing the slugs."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    text = os.fspath(name_or_path).strip()
    key = text.lower()
    if key in _CATALOG:
        return _CATALOG[key]
    if key in _ALIASES:
        return _CATALOG[_ALIASES[key]]
    if os.path.exists(text):
        return load_hf_config(text)
    from sim.catalog.package_models import find_model_config, model_configs_dir

    found = find_model_config(text)
    if found is not None:
        hf_id, file = found
        return dataclasses.replace(load_hf_config(file, name=hf_id), hf_id=hf_id)
    package = "" if model_configs_dir() else " (not installed)"
    raise ConfigError(
        f"model: unknown model {text!r}; allowed: {', '.join(MODEL_NAMES)}, a Hugging Face "
        f"id of one of them, a path to a config.json, or the Hugging Face id (org/name) of a "
        f"config in aiconfigurator-core's model_configs{package}"
    )


def list_models() -> list[ModelSpec]:
    return list(_CATALOG.values())


_LLAMA_LIKE = ("llama", "mistral", "qwen2", "mixtral", "qwen3", "qwen3_moe", "mimo")
_DEEPSEEK_LIKE = ("deepseek_v3", "kimi_k2")  # Kimi K2: DeepSeek-V3's layout, 384 experts
# DeepSeek-V3's layout with DeepSeek sparse attention (a lightning indexer picking index_topk).
_DSA = ("deepseek_v32", "glm_moe_dsa")
# Multimodal wrappers whose ``text_config`` is a model kvplan prices (the vision encoder is
# not served here): wrapper -> the text model types accepted -> the type it is read as.
_WRAPPERS: dict[str, dict[str, str]] = {
    "kimi_k25": {"kimi_k2": "kimi_k2", "deepseek_v3": "deepseek_v3"},
    "qwen3_vl": {"qwen3_vl_text": "qwen3"},
    "qwen3_vl_moe": {"qwen3_vl_moe_text": "qwen3_moe"},
    "qwen3_5": {"qwen3_5_text": "qwen3_5_text"},
    "qwen3_5_moe": {"qwen3_5_moe_text": "qwen3_5_moe_text"},
}
# Hybrid Gated DeltaNet + gated full attention (linear-attention layers, ``ModelSpec``).
_QWEN_HYBRID = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
SUPPORTED_MODEL_TYPES: tuple[str, ...] = (_LLAMA_LIKE + _DEEPSEEK_LIKE + _DSA + tuple(_WRAPPERS)
                                          + _QWEN_HYBRID + ("minimax_m2", "gpt_oss", "llama4", "llama4_text",
                                             "opt"))


def load_hf_config(path: "str | os.PathLike[str]", *, name: Optional[str] = None) -> ModelSpec:
    """Read an HF ``config.json`` of an architecture in ``SUPPORTED_MODEL_TYPES`` (Llama,
    Mistral, Qwen2/3, Mixtral, Qwen3-MoE, MiMo, DeepSeek-V3, Kimi K2/K2.5, MiniMax-M2, gpt-oss,
    Llama 4, Qwen3-VL's text model, Qwen3-Next and Qwen3.5's text models, OPT). ``name`` names the spec and the errors (a package
    config's HF id); else the name comes from the config or its folder."""
    path = os.fspath(path)
    file = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise ConfigError(f"model: no config.json at {path}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"model: cannot read {file}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"model: {file} is not a JSON object")

    label = name or file
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"model: {label} has model_type {model_type or '(missing)'!r}, which kvplan does not "
            f"model; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    name = name or _name_from(cfg, file)
    multimodal = model_type in _WRAPPERS or model_type == "llama4"
    if model_type in _WRAPPERS:
        model_type, cfg = _unwrap(label, model_type, cfg)
    spec = _read_text_model(label, name, model_type, cfg)
    return dataclasses.replace(spec, multimodal=True) if multimodal else spec


def _read_text_model(label: str, name: str, model_type: str, cfg: dict) -> ModelSpec:
    """The ``ModelSpec`` of a text model's config (``model_type`` already unwrapped)."""
    try:
        if model_type == "opt":
            return _from_opt(name, cfg)
        if model_type in _DEEPSEEK_LIKE + _DSA:
            return _from_deepseek_v3(name, cfg)
        if model_type == "minimax_m2":
            return _from_minimax_m2(name, cfg)
        if model_type == "gpt_oss":
            return _from_gpt_oss(name, cfg)
        if model_type in ("llama4", "llama4_text"):
            return _from_llama4(name, cfg.get("text_config") or cfg)
        if model_type in _QWEN_HYBRID:
            return _from_qwen_hybrid(name, cfg)
        return _from_llama_like(name, model_type, cfg)
    except KeyError as exc:
        raise ConfigError(f"model: {label} lacks required key {exc.args[0]!r}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"model: {label} has a bad value: {exc}") from None


def _unwrap(label: str, model_type: str, cfg: dict) -> tuple[str, dict]:
    """A multimodal wrapper's text model as (model type to read it as, its config). The
    wrapper's ``tie_word_embeddings`` applies when the text config does not say."""
    text = cfg.get("text_config")
    inner = str(text.get("model_type", "")).lower() if isinstance(text, dict) else ""
    accepted = _WRAPPERS[model_type]
    if not isinstance(text, dict) or inner not in accepted:
        raise ConfigError(f"model: {label} has model_type {model_type!r} with a text model of "
                          f"type {inner or '(missing)'!r}; supported there: {', '.join(accepted)}")
    return accepted[inner], {"tie_word_embeddings": cfg.get("tie_word_embeddings", False), **text}


def _name_from(cfg: dict, file: str) -> str:
    raw = cfg.get("_name_or_path") or os.path.basename(os.path.dirname(os.path.abspath(file)))
    return str(raw).rstrip("/").split("/")[-1].lower() or "custom"


def _experts(model_type: str, cfg: dict) -> tuple[int, int, int]:
    """(experts, experts per token, the MLP width priced) of a llama-like config: 0, 0 and the
    dense ``intermediate_size`` for a dense model; for Qwen3-MoE the expert's width, every
    layer sparse (a config mixing dense and sparse layers is refused: not modelled)."""
    if model_type == "mixtral":
        return int(cfg["num_local_experts"]), int(cfg["num_experts_per_tok"]), int(cfg["intermediate_size"])
    if model_type == "qwen3_moe":
        if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
            raise ValueError("Qwen3-MoE with dense layers (decoder_sparse_step != 1 or "
                             "mlp_only_layers) is not modelled")
        # Hub configs say num_experts; transformers 5 saves num_local_experts.
        count = cfg["num_experts"] if "num_experts" in cfg else cfg["num_local_experts"]
        return int(count), int(cfg["num_experts_per_tok"]), int(cfg["moe_intermediate_size"])
    return 0, 0, int(cfg["intermediate_size"])


def _common_fields(cfg: dict, max_positions: int, rope_theta: float) -> dict:
    """The fields every HF decoder config spells the same way (layers, widths, heads, vocab,
    positions, tied embeddings, rotary base), with the architecture's defaults for the two
    that configs leave out; each ``_from_*`` adds what its architecture has."""
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    return dict(
        num_layers=int(cfg["num_hidden_layers"]), hidden_size=hidden, num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", max_positions)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_theta=float(cfg.get("rope_theta", rope_theta)),
    )


def _from_llama_like(name: str, model_type: str, cfg: dict) -> ModelSpec:
    experts, per_token, ffn = _experts(model_type, cfg)
    return ModelSpec(
        name=name,
        **_common_fields(cfg, max_positions=2048, rope_theta=10000.0),
        intermediate_size=ffn,
        gated_mlp=True,
        # Qwen2 (and MiMo, built on it) always has q/k/v bias; Llama only with attention_bias.
        qkv_bias=model_type in ("qwen2", "mimo") or bool(cfg.get("attention_bias", False)),
        norm="rmsnorm",
        sliding_window=(int(cfg["sliding_window"]) if cfg.get("sliding_window")
                        and cfg.get("use_sliding_window", model_type == "mistral") else None),
        num_experts=experts,
        num_experts_per_tok=per_token,
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        num_mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),  # MiMo's MTP modules
    )


def _from_deepseek_v3(name: str, cfg: dict) -> ModelSpec:
    """DeepSeek-V3 / R1 and Kimi K2 (the same layout: 64 heads, 384 experts, one dense layer):
    MLA, routed and shared experts, the first layers dense; DeepSeek-V3.2 and GLM-5 add sparse
    attention (``index_topk``, ``index_n_heads``, ``index_head_dim``)."""
    if int(cfg.get("moe_layer_freq", 1)) != 1:
        raise ValueError("DeepSeek-V3 with moe_layer_freq != 1 is not modelled")
    if int(cfg.get("index_topk_freq") or 1) != 1 or cfg.get("index_topk_pattern"):
        raise ValueError("sparse attention sharing one top-k index over several layers "
                         "(index_topk_freq / index_topk_pattern, GLM-5.2) is not modelled")
    heads = int(cfg["num_attention_heads"])
    rope = int(cfg["qk_rope_head_dim"])
    return ModelSpec(
        name=name,
        num_layers=int(cfg["num_hidden_layers"]),
        hidden_size=int(cfg["hidden_size"]),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=int(cfg["qk_nope_head_dim"]) + rope,
        intermediate_size=int(cfg["moe_intermediate_size"]),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        num_experts=int(cfg["n_routed_experts"]),
        num_experts_per_tok=int(cfg["num_experts_per_tok"]),
        num_shared_experts=int(cfg.get("n_shared_experts") or 0),
        first_dense_layers=int(cfg.get("first_k_dense_replace", 0)),
        dense_intermediate_size=int(cfg["intermediate_size"]),
        q_lora_rank=int(cfg.get("q_lora_rank") or 0),
        kv_lora_rank=int(cfg["kv_lora_rank"]),
        qk_rope_head_dim=rope,
        v_head_dim=int(cfg["v_head_dim"]),
        num_mtp_layers=int(cfg.get("num_nextn_predict_layers", 0)),
        index_topk=int(cfg.get("index_topk") or 0),
        index_num_heads=int(cfg.get("index_n_heads") or 0) if cfg.get("index_topk") else 0,
        index_head_dim=int(cfg.get("index_head_dim") or 0) if cfg.get("index_topk") else 0,
    )


def _from_minimax_m2(name: str, cfg: dict) -> ModelSpec:
    """MiniMax-M2 / M2.5 / M2.7: GQA attention in every layer (``attn_type_list`` all 1; a 0,
    MiniMax-01's lightning linear attention, is refused), a MoE of ``num_local_experts`` experts
    of ``intermediate_size`` (top ``num_experts_per_tok``) in every layer, no shared expert.
    Its q/k RMSNorm spans all heads (``qk_norm_type`` per_layer: ``qk_norm_across_heads``, whose
    variance is all-reduced over TP), its router gate fp32 (``router_fp32``, as both engines
    build it), its weights counted as per-head (about 0.4M too few in 229B); the rotary part
    of a head (``rotary_dim``) does not change a cost; the MTP modules are recorded, not
    counted."""
    layers = int(cfg["num_hidden_layers"])
    if any(int(t) != 1 for t in (cfg.get("attn_type_list") or [])[:layers]):
        raise ValueError("MiniMax with linear-attention layers (attn_type_list 0) is not modelled")
    if int(cfg.get("shared_intermediate_size") or 0):
        raise ValueError("MiniMax-M2 with a shared expert (shared_intermediate_size > 0) is not "
                         "modelled")
    return ModelSpec(
        name=name, **_common_fields(cfg, max_positions=196608, rope_theta=5000000.0),
        intermediate_size=int(cfg["intermediate_size"]),
        num_experts=int(cfg["num_local_experts"]),
        num_experts_per_tok=int(cfg["num_experts_per_tok"]),
        qk_norm=bool(cfg.get("use_qk_norm", False)),
        qk_norm_across_heads=bool(cfg.get("use_qk_norm", False))
        and cfg.get("qk_norm_type", "per_layer") == "per_layer",
        router_fp32=True,
        num_mtp_layers=int(cfg.get("num_mtp_modules") or 0) if cfg.get("use_mtp") else 0,
    )


def _from_gpt_oss(name: str, cfg: dict) -> ModelSpec:
    """gpt-oss: alternating sliding-window and full attention (``layer_types``), attention
    sinks, a MoE of ``num_local_experts`` (top ``num_experts_per_tok``) in every layer."""
    layers = int(cfg["num_hidden_layers"])
    types = cfg.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention"
                                       for i in range(layers)]
    sliding = sum(t == "sliding_attention" for t in types)
    return ModelSpec(
        name=name, **_common_fields(cfg, max_positions=131072, rope_theta=150000.0),
        intermediate_size=int(cfg["intermediate_size"]),
        qkv_bias=bool(cfg.get("attention_bias", True)),
        num_experts=int(cfg["num_local_experts"]),
        num_experts_per_tok=int(cfg.get("num_experts_per_tok") or cfg["experts_per_token"]),
        sliding_window=int(cfg["sliding_window"]) if sliding else None,
        sliding_window_layers=sliding, attention_sinks=True,
    )


#: Bytes of a linear-attention layer's recurrent-state value by ``mamba_ssm_dtype`` (the
#: model config's, or an engine's ``--mamba-ssm-dtype``).
SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def _from_qwen_hybrid(name: str, cfg: dict) -> ModelSpec:
    """Qwen3-Next and Qwen3.5 (dense and MoE): ``layer_types`` (else every
    ``full_attention_interval``-th layer full) mixes Gated DeltaNet layers (``linear_*`` shapes)
    with gated full attention (``attn_output_gate``, on by default: Qwen3-Next always gates);
    the MoE's every layer sparse with one shared expert of ``shared_expert_intermediate_size``.
    The recurrent state's bytes follow ``mamba_ssm_dtype`` as SGLang reads it (float32 unless
    the config says otherwise); the MTP module is recorded, not counted."""
    layers = int(cfg["num_hidden_layers"])
    interval = int(cfg.get("full_attention_interval") or 4)
    types = list(cfg.get("layer_types") or ["full_attention" if (i + 1) % interval == 0
                                            else "linear_attention" for i in range(layers)])[:layers]
    unknown = sorted(set(types) - {"full_attention", "linear_attention"})
    if unknown:
        raise ValueError(f"layer_types {unknown} are not modelled")
    if int(cfg.get("decoder_sparse_step", 1)) != 1 or cfg.get("mlp_only_layers"):
        raise ValueError("a hybrid Qwen MoE with dense layers (decoder_sparse_step != 1 or "
                         "mlp_only_layers) is not modelled")
    experts = int(cfg.get("num_experts") or 0)
    ffn = int(cfg["moe_intermediate_size"]) if experts else int(cfg["intermediate_size"])
    shared = int(cfg.get("shared_expert_intermediate_size") or 0) if experts else 0
    if shared % ffn:
        raise ValueError(f"shared_expert_intermediate_size {shared} is not a whole number of "
                         f"experts of {ffn}")
    ssm = str(cfg.get("mamba_ssm_dtype") or "float32")
    fields = _common_fields(cfg, max_positions=262144, rope_theta=10000000.0)
    rope = cfg.get("rope_parameters") or {}
    if "rope_theta" not in cfg and rope.get("rope_theta"):
        fields["rope_theta"] = float(rope["rope_theta"])
    return ModelSpec(
        name=name, **fields, intermediate_size=ffn, qk_norm=True,
        num_experts=experts, num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0) if experts else 0,
        num_shared_experts=shared // ffn,
        num_mtp_layers=int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0),
        linear_attention_layers=types.count("linear_attention"),
        linear_num_key_heads=int(cfg["linear_num_key_heads"]),
        linear_num_value_heads=int(cfg["linear_num_value_heads"]),
        linear_key_head_dim=int(cfg["linear_key_head_dim"]),
        linear_value_head_dim=int(cfg["linear_value_head_dim"]),
        linear_conv_kernel=int(cfg["linear_conv_kernel_dim"]),
        linear_state_bytes=SSM_DTYPE_BYTES.get(ssm, 4),
        attn_output_gate=bool(cfg.get("attn_output_gate", True)),
    )


def _from_llama4(name: str, cfg: dict) -> ModelSpec:
    """Llama 4's text model (the vision encoder is not served here): a MoE of
    ``num_local_experts`` (top ``num_experts_per_tok``) plus a shared expert in every layer,
    the rotary layers attending within ``attention_chunk_size`` chunks (held as a window)."""
    if int(cfg.get("interleave_moe_layer_step", 1)) != 1:
        raise ValueError("Llama 4 with dense layers between the MoE ones (interleave_moe_layer_step "
                         "!= 1, Maverick) is not modelled")
    layers = int(cfg["num_hidden_layers"])
    rope = cfg.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
    chunk = int(cfg.get("attention_chunk_size") or 0)
    local = sum(1 for r in rope[:layers] if r) if chunk else 0
    return ModelSpec(
        name=name, **_common_fields(cfg, max_positions=131072, rope_theta=500000.0),
        intermediate_size=int(cfg["intermediate_size"]),
        num_experts=int(cfg["num_local_experts"]), num_experts_per_tok=int(cfg["num_experts_per_tok"]),
        num_shared_experts=1,
        sliding_window=chunk if local else None, sliding_window_layers=local,
    )


def _from_opt(name: str, cfg: dict) -> ModelSpec:
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    if int(cfg.get("word_embed_proj_dim", hidden)) != hidden:
        raise ConfigError(
            f"model: OPT config with word_embed_proj_dim != hidden_size (opt-350m style) "
            f"is not supported"
        )
    max_pos = int(cfg.get("max_position_embeddings", 2048))
    return ModelSpec(
        name=name,
        num_layers=int(cfg["num_hidden_layers"]),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=int(cfg["ffn_dim"]),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=max_pos,
        gated_mlp=False,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        linear_bias=bool(cfg.get("enable_bias", True)),
        norm="layernorm",
        learned_position_rows=max_pos + 2,  # OPT's learned positions are offset by 2
    )
