"""transformers' own model for the same weights: the parity reference in the tests and the
static-batching baseline in ``benchmarks/runtime_vs_hf.py``.

It is loaded by transformers' loaders, not ours (for GGUF, transformers' own dequantisation and
Q/K un-permutation), so agreement checks our loader as well as our model.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import torch

from runtime.weights import DEFAULT_ALIASES, smollm2_gguf_path
from sim.errors import ConfigError


def load_hf_reference(model: Optional[str] = None, dtype: torch.dtype = torch.float32) -> Any:
    """A transformers ``*ForCausalLM`` (eval mode, CPU) for an HF directory or a GGUF file
    (None / "smollm2" = the packaged SmolLM2)."""
    spec = (model or "smollm2").strip()
    if spec.lower() in DEFAULT_ALIASES:
        spec = smollm2_gguf_path()
    if spec.endswith(".gguf"):
        return _load_gguf(spec, dtype)
    if os.path.isdir(spec):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, local_files_only=True).eval()
    raise ConfigError(f"model: no transformers reference for {spec!r} (HF directory or .gguf only)")


def _load_gguf(path: str, dtype: torch.dtype) -> Any:
    """transformers' GGUF path without ``accelerate``: its config and tensor conversion, then a
    meta-device model filled with ``load_state_dict(assign=True)``."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    parsed = load_gguf_checkpoint(path, return_tensors=False)
    cfg_dict = dict(parsed["config"])
    config = AutoConfig.for_model(cfg_dict.pop("model_type"), **cfg_dict)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tensors = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    # Buffers are not in the checkpoint: rebuild the rotary module on the CPU.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)
    missing = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    if missing:
        raise RuntimeError(f"transformers' GGUF conversion left {missing[0]} unset")
    return model.eval()
