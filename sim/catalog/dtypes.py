"""Every dtype name kvplan accepts, defined once: activation dtypes and their aliases, bytes per
element, weight quantisation and KV-cache dtypes.

Why here (layer L0): the scenario config validates these names, the memory plan and the
roofline price them, and the runtime maps them to torch dtypes; all of them read this module,
so a name accepted in one place is accepted everywhere. No torch import: the runtime keeps its
own name -> ``torch.dtype`` table keyed by ``CANONICAL_DTYPES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Optional

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareSpec

# Activation (model) dtypes: the canonical names, then the aliases a config may use.
CANONICAL_DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
DTYPE_ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32",
}
# What the scenario config's ``dtype`` key accepts (canonical names and the short aliases).
DTYPES: tuple[str, ...] = CANONICAL_DTYPES + ("fp16", "bf16", "fp32")
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}
# Which tensor-core peak (``HardwareSpec.flops`` key) a GEMM in that dtype uses. float32 runs
# on plain FP32 units: PyTorch leaves TF32 matmuls off by default.
DTYPE_COMPUTE: dict[str, str] = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
# Short names for file names and tables (``smollm2-135m_bf16_cpu.json``).
DTYPE_SHORT: dict[str, str] = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}

# Weight quantisation. The config key ``quantization.weights`` takes ``WEIGHT_QUANT``
# ("none" = weights in the activation dtype); the memory plan and the roofline take
# ``WEIGHT_DTYPES`` ("auto" = the same thing, vLLM's spelling).
WEIGHT_QUANT: tuple[str, ...] = ("none", "fp8", "fp8_block", "int8", "int4", "int4_awq", "mxfp4",
                                  "nvfp4")
WEIGHT_DTYPES: tuple[str, ...] = ("auto", "int8", "int4", "int4_awq", "fp8", "fp8_block", "mxfp4",
                                  "nvfp4")
#: Spellings of one format: ``int4_awq`` is the int4 (AWQ/GPTQ, W4A16) kvplan has always priced.
WEIGHT_ALIASES: dict[str, str] = {"int4_awq": "int4", "fp8_e4m3": "fp8"}
# fp8_block is DeepSeek-style FP8: one fp32 scale per 128x128 weight block (0.02% more bytes),
# activations quantised per token-group of 128 at run time.
FP8_BLOCK_BYTES = 1.0 + 4 / (128 * 128)
# int4 is AWQ/GPTQ-style: 4-bit weights plus an fp16 scale and a 4-bit zero per group of 128.
INT4_BYTES = 0.5 + (2 + 0.5) / 128
# FP4 (E2M1) weights with a shared scale per block: MXFP4 (OCP microscaling, gpt-oss) one 8-bit
# power-of-two scale per 32 values, NVFP4 one FP8 (E4M3) scale per 16 values (and one fp32 per
# tensor, negligible).
MXFP4_BYTES = (4 + 8 / 32) / 8
NVFP4_BYTES = (4 + 8 / 16) / 8

# KV cache dtypes. ``KV_DTYPES`` is what the config key ``kv_cache.dtype`` accepts;
# ``KV_CACHE_DTYPES`` adds the explicit fp8 variants vLLM's ``--kv-cache-dtype`` accepts.
KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "int8")
KV_CACHE_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "int8")


def resolve_dtype(dtype: str) -> str:
    """Canonical activation dtype name; accepts fp16/bf16/fp32 aliases and ``torch.`` prefixes."""
    key = str(dtype).strip().lower().replace("torch.", "")
    if key not in DTYPE_ALIASES:
        raise ConfigError(
            f"dtype: unknown value {dtype!r}; allowed: {', '.join(CANONICAL_DTYPES)} "
            f"(or fp16, bf16, fp32)"
        )
    return DTYPE_ALIASES[key]


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of an activation dtype (any accepted spelling)."""
    return DTYPE_BYTES[resolve_dtype(dtype)]


@dataclass(frozen=True)
class Precision:
    """Bytes per element of each tensor class, and which tensor-core peak the GEMMs use.

    - ``int8`` weights are W8A8 (SmoothQuant-style): int8 tensor cores.
    - ``int4`` weights are W4A16 (AWQ/GPTQ/Marlin): dequantised in the GEMM, 16-bit compute.
    - ``fp8`` weights are W8A8 FP8 where the GPU has FP8 tensor cores (H100, H200, L40S,
      MI300X), else weight-only FP8 with 16-bit compute (what vLLM does on Ampere).
    - ``fp8_block`` weights: FP8 with a scale per 128x128 block (DeepSeek-V3, Qwen3-FP8).
    - ``mxfp4`` weights (4.25 bits) compute at the FP4 tensor-core rate where the GPU has one
      (Blackwell), else they are dequantised in the GEMM with 16-bit compute (what vLLM runs
      gpt-oss with on Hopper: Marlin / Triton W4A16 MoE kernels).
    - ``nvfp4`` weights (4.5 bits) need FP4 tensor cores: any other GPU is a ConfigError.
    Embeddings and the LM head stay in the activation dtype (vLLM does not quantise them).
    """

    dtype: str
    weight_dtype: str
    kv_cache_dtype: str
    act_bytes: int
    weight_bytes: float
    kv_bytes: int
    compute: str
    #: Which linear layers the weight format covers (``quantization.scope``; ``QUANT_SCOPES``):
    #: ``auto`` resolves per model with ``quantized_groups``.
    scope: str = "auto"


def resolve_precision(hw: "HardwareSpec", dtype: str = "float16",
                      weight_dtype: Optional[str] = None,
                      kv_cache_dtype: str = "auto", scope: str = "auto") -> Precision:
    """The bytes and compute of one deployment's dtypes on ``hw``; ``ConfigError`` naming the
    key when a name is unknown or the hardware lacks the dtype. ``scope``: which linear layers
    the weight format covers (``QUANT_SCOPES``)."""
    if scope not in QUANT_SCOPES:
        raise ConfigError(f"quantization.scope: unknown value {scope!r}; allowed: "
                          f"{', '.join(QUANT_SCOPES)}")
    dtype = resolve_dtype(dtype)
    act_bytes = DTYPE_BYTES[dtype]
    act_compute = DTYPE_COMPUTE[dtype]
    if not hw.supports(act_compute):
        raise ConfigError(f"dtype: {hw.name} has no {dtype} support")

    w = "auto" if weight_dtype in (None, "", "none") else str(weight_dtype).strip().lower()
    w = WEIGHT_ALIASES.get(w, w)
    if w in ("auto", dtype) or DTYPE_ALIASES.get(w) == dtype:
        w, weight_bytes, compute = "auto", float(act_bytes), act_compute
    elif w == "int8":
        weight_bytes, compute = 1.0, "int8" if hw.supports("int8") else act_compute
    elif w == "int4":
        weight_bytes, compute = INT4_BYTES, act_compute
    elif w in ("fp8", "fp8_block"):
        weight_bytes = 1.0 if w == "fp8" else FP8_BLOCK_BYTES
        compute = "fp8" if hw.supports("fp8") else act_compute
    elif w in ("mxfp4", "nvfp4"):
        if w == "nvfp4" and not hw.supports("fp4"):
            # NVFP4 (E2M1 with an FP8 scale per 16 values) is Blackwell's tensor-core format;
            # AIConfigurator measures it only on Blackwell and lists no FP4 peak for others.
            raise ConfigError(
                f"quantization.weights: {hw.name} cannot run nvfp4 (no FP4 tensor cores; "
                f"Blackwell GPUs such as b200, b300, gb200, rtx-pro-6000 can); use fp8 or int4")
        weight_bytes = MXFP4_BYTES if w == "mxfp4" else NVFP4_BYTES
        compute = "fp4" if hw.supports("fp4") else act_compute
    else:
        raise ConfigError(
            f"weight_dtype: unknown value {weight_dtype!r}; allowed: {', '.join(WEIGHT_DTYPES)}"
        )

    kv = str(kv_cache_dtype or "auto").strip().lower()
    if kv == "auto":
        kv_bytes = act_bytes
    elif kv in KV_CACHE_DTYPES:
        kv_bytes = 1
    else:
        raise ConfigError(
            f"kv_cache_dtype: unknown value {kv_cache_dtype!r}; allowed: "
            f"{', '.join(KV_CACHE_DTYPES)}"
        )
    return Precision(dtype=dtype, weight_dtype=w, kv_cache_dtype=kv, act_bytes=act_bytes,
                     weight_bytes=weight_bytes, kv_bytes=kv_bytes, compute=compute, scope=scope)


#: Weight formats that quantise a mixture of experts' routed experts only: attention, the
#: router, shared experts, dense MLPs, embeddings and LM head stay in the activation dtype.
#: ``mxfp4``: vLLM's ``Mxfp4Config`` gives every linear layer ``UnquantizedLinearMethod`` and
#: only ``FusedMoE`` the MXFP4 method (gpt-oss's ``modules_to_not_convert``: self_attn, router,
#: embed_tokens, lm_head). ``int4``: the W4A16 MoE checkpoints quantise their experts
#: (Kimi-K2.5's compressed-tensors ``ignore``: lm_head, ``.*self_attn.*``,
#: ``.*shared_experts.*``, ``mlp.(gate|up|gate_up|down)_proj``, the dense layers' MLP).
EXPERTS_ONLY_WEIGHTS: tuple[str, ...] = ("mxfp4", "int4")


def experts_only(weight_dtype: Optional[str], is_moe: bool) -> bool:
    """Whether ``weight_dtype`` quantises only the routed experts of a MoE (``is_moe``)."""
    w = WEIGHT_ALIASES.get(str(weight_dtype or "").lower(), str(weight_dtype or "").lower())
    return bool(is_moe) and w in EXPERTS_ONLY_WEIGHTS


#: The groups of linear layers a checkpoint may quantise or leave in the activation dtype:
#: ``attention_in`` (q/k/v; MLA's q and kv down- and up-projections; a linear-attention
#: layer's input projections), ``attention_out`` (the output projection of either),
#: ``dense_mlp`` (a dense model's MLP, a MoE's dense-first layers), ``shared_experts``,
#: ``experts`` (a MoE's routed experts). The MoE router, embeddings and LM head are never
#: quantised here (vLLM and SGLang keep them 16-bit).
GEMM_GROUPS: tuple[str, ...] = ("attention_in", "attention_out", "dense_mlp", "shared_experts",
                                "experts")
#: ``quantization.scope``: which groups the weight format covers. A checkpoint's quantisation
#: recipe decides this, not the format: NVIDIA's ModelOpt NVFP4 exports of MoE models leave
#: attention in BF16 (``exclude_modules`` lists ``*self_attn*`` for every layer in
#: nvidia/DeepSeek-R1-0528-NVFP4, nvidia/MiniMax-M2.5-NVFP4, nvidia/GLM-4.7-NVFP4), while its
#: dense exports (nvidia/Llama-3.3-70B-Instruct-FP4) quantise every linear layer.
#:
#: - ``all``: every group (a dense or FP8 checkpoint).
#: - ``mlp_only``: every MLP (routed and shared experts, dense MLPs); attention 16-bit
#:   (nvidia/DeepSeek-R1-0528-NVFP4 and -FP4 v1).
#: - ``mlp_and_o_proj``: ``mlp_only`` plus the attention output projection
#:   (nvidia/DeepSeek-R1-0528-FP4-V2: "additionally quantizes the wo module").
#: - ``experts_only``: the routed experts only (nvidia/Qwen3.5-397B-A17B-NVFP4 and
#:   nvidia/Kimi-K2.6-NVFP4 exclude attention and the shared experts; gpt-oss's MXFP4;
#:   Kimi-K2.5's INT4).
#: - ``auto``: ``experts_only`` for MXFP4 and INT4 on a MoE (``EXPERTS_ONLY_WEIGHTS``),
#:   ``mlp_only`` for NVFP4 on a MoE (what every NVIDIA MoE export above shares: attention
#:   16-bit), ``all`` otherwise.
QUANT_SCOPES: tuple[str, ...] = ("auto", "all", "mlp_only", "mlp_and_o_proj", "experts_only")
_SCOPE_GROUPS: dict[str, frozenset[str]] = {
    "all": frozenset(GEMM_GROUPS),
    "mlp_only": frozenset({"dense_mlp", "shared_experts", "experts"}),
    "mlp_and_o_proj": frozenset({"attention_out", "dense_mlp", "shared_experts", "experts"}),
    "experts_only": frozenset({"experts"}),
}
#: kvplan's GEMM op names (both pricers' breakdowns) -> their group. The router is absent: it
#: stays 16-bit whatever the scope.
GEMM_OP_GROUP: dict[str, str] = {
    "qkv_proj": "attention_in", "q_proj": "attention_in", "q_a_proj": "attention_in",
    "q_b_proj": "attention_in", "kv_a_proj": "attention_in", "kv_b_proj": "attention_in",
    "gdn_in_proj": "attention_in", "gdn_ba_proj": "attention_in",
    "o_proj": "attention_out", "gdn_out_proj": "attention_out",
    "mlp_up": "dense_mlp", "mlp_down": "dense_mlp",
    "shared_up": "shared_experts", "shared_down": "shared_experts",
    "experts": "experts",
}


def scope_groups(scope: str) -> frozenset[str]:
    """The ``GEMM_GROUPS`` a preset ``quantization.scope`` (not ``auto``) quantises."""
    return _SCOPE_GROUPS[scope]


def resolved_scope(scope: str, weight_dtype: Optional[str], is_moe: bool) -> str:
    """``quantization.scope`` with ``auto`` resolved for the format and model (``QUANT_SCOPES``)."""
    if scope != "auto":
        return scope
    if experts_only(weight_dtype, is_moe):
        return "experts_only"
    if is_moe and str(weight_dtype or "").lower() == "nvfp4":
        return "mlp_only"
    return "all"


def quantized_groups(prec: Precision, is_moe: bool) -> frozenset[str]:
    """The ``GEMM_GROUPS`` whose weights ``prec``'s format quantises (none for unquantised
    weights); the others run in the activation dtype, at its tensor-core rate."""
    if prec.weight_dtype in ("auto", prec.dtype):
        return frozenset()
    groups = _SCOPE_GROUPS[resolved_scope(prec.scope, prec.weight_dtype, is_moe)]
    return groups if is_moe else groups - {"shared_experts", "experts"}


def scope_note(prec: Precision, ops: Iterable[str], is_moe: bool) -> Optional[str]:
    """What a partial scope leaves unquantised, for ``describe`` ("scope mlp_only: attention_in,
    attention_out in bfloat16"), among the groups of the model's GEMM ``ops`` (its routed
    experts too, for a MoE); None when the format covers all of them (or the weights are
    unquantised)."""
    groups = quantized_groups(prec, is_moe)
    present = [GEMM_OP_GROUP[op] for op in ops if op in GEMM_OP_GROUP] + (["experts"] if is_moe else [])
    kept = [g for g in dict.fromkeys(present) if g not in groups]
    if not groups or not kept:
        return None
    return (f"scope {resolved_scope(prec.scope, prec.weight_dtype, is_moe)}: "
            f"{', '.join(kept)} in {prec.dtype}")


def gemm_quantized(op: str, prec: Precision, is_moe: bool) -> bool:
    """Whether kvplan's GEMM ``op`` (``GEMM_OP_GROUP``) runs with quantised weights."""
    group = GEMM_OP_GROUP.get(op)
    return group is not None and group in quantized_groups(prec, is_moe)


__all__ = [
    "CANONICAL_DTYPES", "DTYPE_ALIASES", "DTYPES", "DTYPE_BYTES", "DTYPE_COMPUTE", "DTYPE_SHORT",
    "WEIGHT_QUANT", "WEIGHT_DTYPES", "WEIGHT_ALIASES", "FP8_BLOCK_BYTES", "INT4_BYTES", "MXFP4_BYTES", "NVFP4_BYTES", "KV_DTYPES", "KV_CACHE_DTYPES",
    "resolve_dtype", "dtype_bytes", "Precision", "resolve_precision", "EXPERTS_ONLY_WEIGHTS",
    "experts_only", "GEMM_GROUPS", "QUANT_SCOPES", "GEMM_OP_GROUP", "resolved_scope",
    "quantized_groups", "gemm_quantized", "scope_note", "scope_groups",
]
