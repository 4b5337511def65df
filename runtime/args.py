"""Engine knobs, named as vLLM users know them (``block_size``, ``max_num_seqs``,
``max_num_batched_tokens``, ``enable_prefix_caching``, ``gpu_memory_utilization``...)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import torch

from sim.errors import ConfigError

ATTENTION_BACKENDS = ("auto", "triton", "sdpa", "torch")

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class EngineArgs:
    model: Optional[str] = None  # see runtime.weights.load_model; None = packaged SmolLM2
    dtype: str = "auto"  # auto: float32 on CPU, bfloat16 on CUDA
    device: str = "auto"  # auto: cuda when available
    seed: int = 0  # random weights, and unseeded sampling
    block_size: int = 16
    #: KV pool size on CPU (and on CUDA when set); default 512 MiB on CPU.
    kv_cache_bytes: Optional[int] = None
    gpu_memory_utilization: float = 0.9
    #: Exact pool size in blocks; overrides both budgets (tests use it to force preemption).
    num_kv_blocks: Optional[int] = None
    max_model_len: Optional[int] = None  # default: the model's max_position_embeddings
    max_num_seqs: int = 256
    max_num_batched_tokens: Optional[int] = None  # None: the scheduler's default
    #: "chunked" | "vllm_v0" | "orca" | "static"; None picks from enable_chunked_prefill.
    scheduling_policy: Optional[str] = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    #: "recompute" (vLLM v1) or "swap" (vLLM v0: the victim's KV goes to host memory).
    preemption_mode: str = "recompute"
    swap_space: float = 4.0  # GiB of host memory for swapped KV (vLLM's name and default)
    trace_path: Optional[str] = None  # JSONL step trace
    num_threads: Optional[int] = None  # torch intra-op threads on CPU
    attention_backend: str = "auto"  # auto (Triton on CUDA, sdpa on CPU) | triton | sdpa | torch
    #: Speculative decoding (runtime/speculative.py): up to this many draft tokens per decode
    #: step, proposed by n-gram prompt lookup of prompt_lookup_max..prompt_lookup_min tokens.
    num_speculative_tokens: int = 0
    prompt_lookup_max: int = 3
    prompt_lookup_min: int = 1

    @classmethod
    def from_kwargs(cls, model: Optional[str], kwargs: dict[str, Any]) -> "EngineArgs":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"engine: unknown argument {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(model=model, **kwargs)

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {self.block_size}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes < 1:
            raise ConfigError(f"kv_cache_bytes must be positive, got {self.kv_cache_bytes}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.dtype != "auto" and self.dtype not in _DTYPES:
            raise ConfigError(f"dtype must be auto or one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ConfigError(f"device must be auto, cpu or cuda[:N], got {self.device!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ConfigError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, "
                              f"got {self.attention_backend!r}")
        if self.num_speculative_tokens < 0:
            raise ConfigError(f"num_speculative_tokens must be >= 0, got {self.num_speculative_tokens}")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ConfigError(f"prompt_lookup_min/max must satisfy 1 <= min <= max, got "
                              f"{self.prompt_lookup_min}/{self.prompt_lookup_max}")
        if self.preemption_mode not in ("recompute", "swap"):
            raise ConfigError(f"preemption_mode must be recompute or swap, got {self.preemption_mode!r}")
        if self.swap_space < 0:
            raise ConfigError(f"swap_space must be >= 0 GiB, got {self.swap_space}")

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device {self.device!r}: CUDA is not available")
        return torch.device(self.device)

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        if self.dtype == "auto":
            return torch.bfloat16 if device.type == "cuda" else torch.float32
        return _DTYPES[self.dtype]

    def policy(self) -> str:
        if self.scheduling_policy is not None:
            return self.scheduling_policy
        return "chunked" if self.enable_chunked_prefill else "vllm_v0"
