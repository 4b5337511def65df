"""Engine knobs, named as vLLM users know them (``block_size``, ``max_num_seqs``,
``max_num_batched_tokens``, ``enable_prefix_caching``, ``gpu_memory_utilization``...).

``EngineArgs.from_scenario`` builds them from the simulator's ``Scenario``, so one scenario
drives both executors (see its docstring for the key-by-key mapping). Dtype names and
preemption modes are the shared definitions (``sim.catalog.dtypes``, ``sim.policies``); only
the attention backends are the runtime's own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Optional

import torch

from sim.catalog.dtypes import CANONICAL_DTYPES, DTYPE_ALIASES
from sim.errors import ConfigError
from sim.policies.schedulers import PREEMPTION_MODES, SCHEDULERS

if TYPE_CHECKING:
    from sim.scenario import Scenario

#: How attention is computed (runtime only; the simulator prices a step, not a kernel).
ATTENTION_BACKENDS = ("auto", "triton", "sdpa", "torch")

#: The canonical dtype names (``sim.catalog.dtypes.CANONICAL_DTYPES``) as torch dtypes.
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
assert set(_DTYPES) == set(CANONICAL_DTYPES), "runtime dtype table out of step with sim.catalog.dtypes"


@dataclass
class EngineArgs:
    model: Optional[str] = None  # see runtime.weights.load_model; None = packaged SmolLM2
    dtype: str = "auto"  # auto: float32 on CPU; bfloat16 on CUDA if supported, else float16
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
    #: "chunked" | "vllm_v0" | "orca" | "static" (the scheduler registry,
    #: ``sim.policies.schedulers.SCHEDULERS``); None picks from enable_chunked_prefill. Unlike
    #: vLLM's flag of the same name, this picks the batching policy, not FCFS/priority order.
    scheduling_policy: Optional[str] = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    #: "recompute" (vLLM v1) or "swap" (vLLM v0: the victim's KV goes to host memory).
    preemption_mode: str = "recompute"
    #: GiB (2**30 bytes) of host memory for swapped KV (vLLM's name, unit and default); the
    #: scenario's ``kv_cache.swap_space_gb`` is the same number in the same unit.
    swap_space: float = 4.0
    #: KV offload tiers under the prefix cache (``sim.policies.kv.offload``, the scenario's
    #: ``kv_cache.cpu_offload_gb`` / ``ssd_offload_gb``, GiB): prefix blocks evicted from the
    #: device pool are kept in host memory, then in files under ``kv_offload_dir`` (a temporary
    #: directory when None), and loaded back on a hit. 0 = tier off; needs prefix caching.
    kv_offload_cpu_gb: float = 0.0
    kv_offload_ssd_gb: float = 0.0
    kv_offload_dir: Optional[str] = None
    trace_path: Optional[str] = None  # JSONL step trace
    num_threads: Optional[int] = None  # torch intra-op threads on CPU
    attention_backend: str = "auto"  # auto (Triton on CUDA, sdpa on CPU) | triton | sdpa | torch
    #: Speculative decoding (runtime/speculative.py): up to this many draft tokens per decode
    #: step, proposed by n-gram prompt lookup of prompt_lookup_max..prompt_lookup_min tokens.
    num_speculative_tokens: int = 0
    prompt_lookup_max: int = 3
    prompt_lookup_min: int = 1
    #: The KV allocator: ``paged`` (vLLM's block pool) or ``radix`` (SGLang's token pool and
    #: radix cache, ``sim.policies.kv.radix``; ``block_size`` is its page size).
    kv_allocator: str = "paged"
    #: The ``sglang`` scheduling policy's own knobs (``SglangScheduler``'s keyword arguments).
    sglang_options: Optional[dict] = None

    @classmethod
    def from_kwargs(cls, model: Optional[str], kwargs: dict[str, Any]) -> "EngineArgs":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(f"engine: unknown argument {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(model=model, **kwargs)

    @classmethod
    def from_scenario(cls, scenario: "Scenario", model: Optional[str] = None,
                      **overrides: Any) -> "EngineArgs":
        """The engine arguments that run ``scenario`` on the real engine.

        ``model`` is what ``runtime.weights.load_model`` loads (an HF directory, a GGUF file,
        ``random:<catalog model>``...; None: the packaged SmolLM2): the scenario's ``model`` is a
        simulator catalog name, which the runtime cannot always load. ``overrides`` set any
        other ``EngineArgs`` field last (``device``, ``kv_cache_bytes``, ``num_threads``...).

        ==============================  ==========================
        scenario key                    EngineArgs (vLLM's name)
        ==============================  ==========================
        seed                            seed
        dtype                           dtype (canonical name)
        kv_cache.block_size             block_size
        kv_cache.prefix_caching         enable_prefix_caching
        kv_cache.gpu_memory_utilization gpu_memory_utilization
        kv_cache.max_model_len          max_model_len
        kv_cache.swap_space_gb          swap_space (both GiB)
        kv_cache.cpu_offload_gb         kv_offload_cpu_gb (both GiB)
        kv_cache.ssd_offload_gb         kv_offload_ssd_gb (both GiB)
        kv_cache.num_gpu_blocks         num_kv_blocks
        scheduler.policy                scheduling_policy, enable_chunked_prefill
        scheduler.max_num_seqs          max_num_seqs
        scheduler.max_num_batched_tokens max_num_batched_tokens
        scheduler.preemption            preemption_mode
        speculative.num_tokens          num_speculative_tokens (n-gram proposer)
        engine.name sglang              kv_allocator radix, scheduling_policy sglang,
                                        sglang_options (``sglang.*``), block_size = page size
        ==============================  ==========================

        Refused with a ``ConfigError`` naming the key, because the runtime does not implement
        them: ``kv_cache.allocator`` other than paged, ``kv_cache.dtype`` other than auto,
        ``quantization.weights`` other than none, ``scheduler.queue_policy`` other than fcfs,
        ``scheduler.async_scheduling`` true (the engine's loop is synchronous), and more than one GPU or replica (``parallel.*``). Simulator-only keys are not used:
        ``model``, ``hardware``, ``kv_cache.reserve``, ``cost_model``, the acceptance model
        (``speculative.acceptance*``, ``draft_cost_ratio``, ``draft_availability``: the runtime
        measures these), the offload tiers' bandwidths (measured too), ``slo`` and ``workload``.
        """
        kv, sched, par = scenario.kv_cache, scenario.scheduler, scenario.parallel
        sglang = scenario.engine.name == "sglang"
        unsupported = [
            ("kv_cache.allocator", kv.allocator, "radix" if sglang else "paged"),
            ("kv_cache.dtype", kv.dtype, "auto"),
            ("quantization.weights", scenario.quantization.weights, "none"),
            ("scheduler.queue_policy", sched.queue_policy, "fcfs"),
            ("parallel.tensor_parallel_size", par.tensor_parallel_size, 1),
            ("parallel.pipeline_parallel_size", par.pipeline_parallel_size, 1),
            ("parallel.num_replicas", par.num_replicas, 1),
        ]
        for key, value, supported in unsupported:
            if value != supported:
                raise ConfigError(f"{key}: the runtime supports only {supported!r}, got {value!r}")
        if sched.async_scheduling is True:  # auto resolves to off for kvplan's own engine
            raise ConfigError("scheduler.async_scheduling: the runtime's loop is synchronous "
                              "(false or auto), got true")
        mapped: dict[str, Any] = {
            "seed": scenario.seed,
            "dtype": DTYPE_ALIASES[scenario.dtype],
            "block_size": kv.block_size,
            "enable_prefix_caching": scenario.caches_prefixes,
            "gpu_memory_utilization": kv.gpu_memory_utilization,
            "max_model_len": kv.max_model_len,
            "swap_space": kv.swap_space_gb,
            "kv_offload_cpu_gb": kv.cpu_offload_gb,
            "kv_offload_ssd_gb": kv.ssd_offload_gb,
            "num_kv_blocks": kv.num_gpu_blocks,
            "scheduling_policy": sched.policy,
            "enable_chunked_prefill": SCHEDULERS[sched.policy].chunked_prefill,
            # None: the runtime's own default (kvplan's engine is not a vLLM server, so the
            # simulated server's GPU-class defaults do not apply to it).
            "max_num_seqs": sched.max_num_seqs if sched.max_num_seqs is not None else 256,
            "max_num_batched_tokens": sched.max_num_batched_tokens,
            "kv_allocator": kv.allocator,
            "sglang_options": scenario.sglang.scheduler_options() if sglang else None,
            "preemption_mode": sched.preemption,
            "num_speculative_tokens": scenario.speculative.num_tokens,
        }
        return cls.from_kwargs(model, {**mapped, **overrides})

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ConfigError(f"block_size must be >= 1, got {self.block_size}")
        if self.kv_cache_bytes is not None and self.kv_cache_bytes < 1:
            raise ConfigError(f"kv_cache_bytes must be positive, got {self.kv_cache_bytes}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ConfigError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise ConfigError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.dtype != "auto":
            if self.dtype not in DTYPE_ALIASES:
                raise ConfigError(f"dtype must be auto or one of {', '.join(CANONICAL_DTYPES)}, "
                                  f"got {self.dtype!r}")
            self.dtype = DTYPE_ALIASES[self.dtype]  # bf16 -> bfloat16, as the simulator reads it
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
        if self.scheduling_policy is not None and self.scheduling_policy not in SCHEDULERS:
            raise ConfigError(f"scheduling_policy must be one of {', '.join(SCHEDULERS)}, "
                              f"got {self.scheduling_policy!r}")
        if self.kv_allocator not in ("paged", "radix"):
            raise ConfigError(f"kv_allocator must be paged or radix, got {self.kv_allocator!r}")
        if self.kv_allocator == "radix" and (self.kv_offload_cpu_gb or self.kv_offload_ssd_gb
                                             or self.preemption_mode == "swap"):
            raise ConfigError("kv_allocator radix (SGLang's) has no KV offload tiers and no swap")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ConfigError(f"preemption_mode must be one of {', '.join(PREEMPTION_MODES)}, "
                              f"got {self.preemption_mode!r}")
        if not 0 <= self.swap_space < float("inf"):  # also NaN
            raise ConfigError(f"swap_space must be >= 0 GiB and finite, got {self.swap_space}")
        for name in ("kv_offload_cpu_gb", "kv_offload_ssd_gb"):
            gib = getattr(self, name)
            if not 0 <= gib < float("inf"):
                raise ConfigError(f"{name} must be >= 0 GiB and finite, got {gib}")
            if gib > 0 and not self.enable_prefix_caching:
                raise ConfigError(f"{name}: KV offload tiers need enable_prefix_caching (only cached "
                                  f"prefix blocks are offloaded)")

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device {self.device!r}: CUDA is not available")
        return torch.device(self.device)

    def torch_dtype(self, device: torch.device) -> torch.dtype:
        """``dtype`` as torch's. ``auto`` never picks bfloat16 where the device has no native
        bf16 (emulated bf16 ran a CPU step 8x slower): float32 on CPU, bfloat16 on a CUDA GPU
        that supports it, else float16."""
        if self.dtype == "auto":
            if device.type != "cuda":
                return torch.float32
            return torch.bfloat16 if _native_bf16(device) else torch.float16
        return _DTYPES[self.dtype]

    def policy(self) -> str:
        if self.scheduling_policy is not None:
            return self.scheduling_policy
        return "chunked" if self.enable_chunked_prefill else "vllm_v0"


def _native_bf16(device: torch.device) -> bool:
    """Whether the current CUDA device computes bf16 natively (Ampere and newer, or ROCm);
    torch's ``is_bf16_supported`` counts emulation as support unless told not to."""
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # torch < 2.3: no emulation check, native support only
        return torch.cuda.is_bf16_supported()
