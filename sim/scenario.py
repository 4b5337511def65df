"""One typed scenario, validated in one place: what the simulator, the runtime and calibration
all take.

Why: the dotted YAML config (``kv_cache.block_size``, ``scheduler.policy`` ...) is the user's
contract, but code should read typed fields, and a value should be checked once, where every
executor sees the same verdict. ``Scenario.from_dict`` turns the dotted mapping into frozen
dataclasses and raises a one-line ``ConfigError`` naming the dotted key, the bad value and what
is allowed; ``Scenario.to_dict`` gives the mapping back unchanged (it is what ``simulate --out``
writes as ``config.yaml``). Every section checks its own fields in ``__post_init__``, so a
scenario built directly or with ``dataclasses.replace`` is checked the same way.

Every enumeration comes from the module that implements it: scheduler policies from the
scheduler registry, allocators and reserve policies from ``sim.policies.kv``, preemption and
queue policies from the scheduler base, routers from the router, acceptance modes from the
speculative sampler, dtypes from ``sim.catalog.dtypes``.

Loading YAML files and ``--set`` overrides, and merging them over the defaults, is
``sim.config``'s job; this module only knows one complete mapping.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

from sim.catalog.dtypes import DTYPES, KV_DTYPES, QUANT_SCOPES, WEIGHT_QUANT
from sim.catalog.engines import (DEFAULT_SGLANG_VERSION, DEFAULT_VLLM_VERSION, ENGINE_NAMES,
                                 VLLM_CUDAGRAPH_MODES, EngineRelease, get_engine)
from sim.catalog.frontends import FRONTEND_NAMES, FrontEnd, get_frontend
from sim.catalog.links import LINK_NAMES
from sim.catalog.models import SSM_DTYPE_BYTES
from sim.errors import ConfigError
from sim.policies.kv import ALLOCATORS, RESERVE_POLICIES, OffloadTier, OffloadTiers
from sim.policies.router import (DEFAULT_AFFINITY_ABS_THRESHOLD, DEFAULT_AFFINITY_REL_THRESHOLD,
                                  DEFAULT_KV_WEIGHT, DEFAULT_LOAD_WEIGHT, DEFAULT_PREFIX_WEIGHT,
                                  ROUTERS)
from sim.policies.schedulers import (PREEMPTION_MODES, QUEUE_POLICIES, SCHEDULERS,
                                     SGLANG_SCHEDULE_POLICIES)
from sim.policies.speculative import ACCEPTANCE_MODES
from sim.workload.config import WorkloadSpec, parse_workload

#: Scheduler policies: the scheduler registry's names (static, orca, vllm_v0, chunked).
POLICIES: tuple[str, ...] = tuple(SCHEDULERS)
RESERVES: tuple[str, ...] = RESERVE_POLICIES
PREEMPTIONS: tuple[str, ...] = PREEMPTION_MODES
ACCEPTANCE: tuple[str, ...] = ACCEPTANCE_MODES

#: Step pricers a scenario can ask for (``cost_model.source``).
COST_MODEL_SOURCES: tuple[str, ...] = ("auto", "roofline", "operator_tables", "profile")
#: How a mixture of experts' router spreads a step's tokens, for the measured MoE tables:
#: ``uniform`` (each token's experts drawn at random: the ``balanced`` rows scaled to the experts
#: such a router touches) or one of the routing skews the tables hold (AIConfigurator's
#: ``distribution``).
MOE_ROUTINGS: tuple[str, ...] = ("uniform", "balanced", "power_law_1.01", "power_law_1.2")
#: ``quantization.moe_activations``: what MXFP4 experts take as activations (``auto``: the
#: engine's default for the GPU, ``sim.pricing.operator_tables.mxfp4_moe_activations``).
MOE_ACTIVATIONS: tuple[str, ...] = ("auto", "bf16", "mxfp8")
#: ``quantization.moe_kernel``: which fused-MoE kernel runs the experts (``auto``: the engine's
#: default for the format and GPU, ``sim.pricing.operator_tables.DEFAULT_MOE_KERNELS`` and
#: ``VLLM_BLOCK_FP8_TRTLLM``; ``marlin``: Marlin's W4A16 MoE for MXFP4, as
#: ``VLLM_MXFP4_USE_MARLIN=1`` selects; ``triton``: Triton's fused MoE for FP8, as
#: ``VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0`` leave vLLM's oracle).
MOE_KERNELS: tuple[str, ...] = ("auto", "marlin", "triton")
#: ``sglang.mamba_ssm_dtype``: the recurrent-state dtypes SGLang's ``--mamba-ssm-dtype`` takes.
MAMBA_SSM_DTYPES: tuple[str, ...] = ("auto",) + tuple(SSM_DTYPE_BYTES)

#: Bytes in a GiB. ``kv_cache.swap_space_gb`` is in GiB, like vLLM's ``swap_space``; the
#: simulator and the runtime both size the host swap pool with this constant.
GIB: int = 2**30

# Upper bounds that only reject absurd values (a typo of a few extra zeros), never a real setup.
_MAX_SEED = 2**63 - 1
_MAX_TOKENS = 2**24  # 16M tokens: context lengths, token budgets, block sizes
_MAX_BLOCKS = 2**31
_MAX_SEQS = 2**20
_MAX_GPUS = 1024
_MAX_REPLICAS = 100_000
_MAX_SPEC_TOKENS = 128
_MAX_SWAP_GIB = 1e6
_MAX_OFFLOAD_GBS = 1e5  # GB/s of an offload tier's read bandwidth
_MAX_MS = 1e9


def swap_space_blocks(swap_space_gib: float, block_bytes: float) -> int:
    """Whole KV blocks that ``swap_space_gib`` GiB of host memory hold (``block_bytes`` per
    block). The simulator and the runtime both call this, so the same scenario gives both the
    same swap pool."""
    if swap_space_gib <= 0 or block_bytes <= 0:
        return 0
    return int(swap_space_gib * GIB // block_bytes)


def offload_tiers(specs: "list[tuple[str, str, float, float]]", block_bytes: float, block_size: int,
                  link_bandwidth: float) -> Optional[OffloadTiers]:
    """KV offload tiers of one engine in whole blocks, sized as the swap space is
    (``swap_space_blocks``), so the simulator and the runtime give a scenario the same tiers.

    Args:
        specs: per tier ``(name, setting, GiB, read bandwidth in bytes/s)``; ``setting`` names
            the size in an error; a tier of 0 GiB is off.
        block_bytes: one block of one GPU's KV shard.
        block_size: tokens per block.
        link_bandwidth: the host link's bytes/s: a load is priced as host-link swap tokens
            scaled by this over the tier's bandwidth (``OffloadLoad``).

    Returns:
        The tiers, or None when every tier is off.
    """
    tiers = []
    for name, setting, gib, bandwidth in specs:
        if gib <= 0:
            continue
        blocks = swap_space_blocks(gib, block_bytes)
        if blocks < 1:
            raise ConfigError(f"{setting}: {gib!r} GiB holds no whole KV block of "
                              f"{block_bytes / 2**20:.3g} MiB")
        tiers.append(OffloadTier(name, blocks, bandwidth, float(block_bytes), link_bandwidth / bandwidth))
    return OffloadTiers(tiers, block_size) if tiers else None


# --- checks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    """How one field is validated (kept in the dataclass field's metadata)."""

    kind: str  # "choice" | "int" | "float" | "bool" | "auto_bool" | "name" | "probs" | "path" | "dir"
    allowed: tuple = ()
    lo: float = 0
    hi: float = math.inf
    lo_open: bool = False
    optional: bool = False


def _field(default: Any, check: _Check, doc: str = "") -> Any:
    return field(default=default, metadata={"check": check, "doc": doc})


def choice(default: str, allowed: tuple[str, ...], doc: str = "") -> Any:
    return _field(default, _Check("choice", allowed=allowed), doc)


def integer(default: Optional[int], lo: int, hi: int, optional: bool = False, doc: str = "") -> Any:
    return _field(default, _Check("int", lo=lo, hi=hi, optional=optional), doc)


def number(default: Optional[float], lo: float, hi: float, lo_open: bool = False,
           optional: bool = False, doc: str = "") -> Any:
    return _field(default, _Check("float", lo=lo, hi=hi, lo_open=lo_open, optional=optional), doc)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_value(key: str, value: Any, c: _Check) -> Any:
    """``value`` if it passes ``c`` (lists become tuples), else a ConfigError naming ``key``."""
    if value is None and c.optional:
        return None
    if c.kind == "choice":
        if not isinstance(value, str) or value not in c.allowed:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, c.allowed))}")
        return value
    if c.kind == "name":
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{key}: expected a name, got {value!r}")
        return value
    if c.kind == "auto_bool":
        if not isinstance(value, bool) and value != "auto":
            raise ConfigError(f"{key}: expected true, false or auto, got {value!r}")
        return value
    if c.kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if c.kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or not c.lo <= value <= c.hi:
            raise ConfigError(f"{key}: expected an integer >= {c.lo} and <= {c.hi}, got {value!r}")
        return value
    if c.kind == "float":
        if not _is_number(value) or not math.isfinite(value):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        if value < c.lo or value > c.hi or (c.lo_open and value == c.lo):
            bound = f"({c.lo:g}, {c.hi:g}]" if c.lo_open else f"[{c.lo:g}, {c.hi:g}]"
            raise ConfigError(f"{key}: {value!r} is outside {bound}")
        return value
    if c.kind == "probs":
        if (not isinstance(value, (list, tuple)) or not value
                or not all(_is_number(x) and 0 <= x <= 1 for x in value)):
            raise ConfigError(f"{key}: expected a list of probabilities in [0, 1], got {value!r}")
        return tuple(value)
    if c.kind == "dir":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a path to a folder, got {value!r}")
        if not Path(value).is_dir():
            raise ConfigError(f"{key}: {value}: folder not found")
        return value
    if c.kind == "path":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key}: expected a path to a profile file, got {value!r}")
        p = Path(value)
        if not p.is_file():
            raise ConfigError(f"{key}: {p}: profile file not found"
                              + (" (a directory, expected a file)" if p.is_dir() else ""))
        return value
    raise AssertionError(f"unknown check kind {c.kind!r}")


class _Section:
    """A config section: a frozen dataclass whose fields are the section's keys."""

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            check = f.metadata.get("check")
            if check is not None:
                value = _check_value(f"{self.KEY}.{f.name}", getattr(self, f.name), check)
                object.__setattr__(self, f.name, value)

    @classmethod
    def from_dict(cls, data: Any) -> "_Section":
        if not isinstance(data, Mapping):
            raise ConfigError(f"{cls.KEY}: expected a mapping of keys, got {data!r}")
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        for k in data:
            if k not in names:
                raise ConfigError(f"unknown config key '{cls.KEY}.{k}' "
                                  f"(allowed here: {', '.join(sorted(names))})")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _plain(value: Any) -> Any:
    """The YAML form of a field value (tuples back to lists)."""
    return list(value) if isinstance(value, tuple) else value


def engine_caches_prefixes(engine: str, allocator: str, policy: str, disable_radix_cache: bool = False) -> bool:
    """What ``kv_cache.prefix_caching: auto`` is: whether the engine caches prompt prefixes by
    default. vLLM's V1 engine does (``enable_prefix_caching`` defaults on in V1, and every vLLM
    release kvplan models is V1: the paged allocator under the ``chunked`` scheduler); kvplan's
    other schedulers (``static``, ``orca``, ``vllm_v0``: V0's prefill-first loop, whose default
    was off) and the contiguous allocator do not. SGLang caches in its radix tree unless
    ``--disable-radix-cache``."""
    if engine == "sglang":
        return not disable_radix_cache
    return allocator == "paged" and policy == "chunked"


# --- sections ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class KVCacheConfig(_Section):
    """``kv_cache.*``: the KV pool and how it is handed out."""

    KEY: ClassVar[str] = "kv_cache"
    allocator: str = choice("paged", ALLOCATORS)
    #: How much a contiguous allocation reserves (ignored by the paged allocator).
    reserve: str = choice("max", RESERVES)
    block_size: int = integer(16, 1, _MAX_TOKENS)
    #: ``auto`` (the default) is the engine's own default (``engine_caches_prefixes``): vLLM's V1
    #: engine caches prefixes, SGLang its radix tree unless ``sglang.disable_radix_cache``.
    prefix_caching: Any = _field("auto", _Check("auto_bool"))
    gpu_memory_utilization: float = number(0.9, 0.0, 1.0, lo_open=True)
    max_model_len: int = integer(4096, 2, _MAX_TOKENS)
    dtype: str = choice("auto", KV_DTYPES)
    #: Host memory for swap preemption, in GiB (2**30 bytes) per replica like vLLM's
    #: ``swap_space`` (the key keeps its historical ``_gb`` name).
    swap_space_gb: float = number(4.0, 0.0, _MAX_SWAP_GIB)
    #: Exact KV pool in blocks per replica (vLLM's num_gpu_blocks_override), bypassing the
    #: memory plan's count; validation sets it to the real engine's pool.
    num_gpu_blocks: Optional[int] = integer(None, 1, _MAX_BLOCKS, optional=True)
    #: KV offload tiers under the prefix cache (``sim.policies.kv.offload``; needs
    #: ``prefix_caching``): cached blocks evicted from the GPU move to CPU DRAM, then to a local
    #: SSD, and load back on a hit. Sizes in GiB (2**30 bytes), 0 = tier off, converted to
    #: blocks of one GPU's KV shard exactly as ``swap_space_gb`` (so per GPU under tensor
    #: parallelism); read bandwidths in GB/s (1e9 bytes) a GPU gets from the tier.
    cpu_offload_gb: float = number(0.0, 0.0, _MAX_SWAP_GIB)
    #: None: the hardware's host link (the catalog's ``pcie_bandwidth``, what swap is priced at).
    cpu_offload_bandwidth_gbs: Optional[float] = number(None, 0.0, _MAX_OFFLOAD_GBS, lo_open=True,
                                                        optional=True)
    ssd_offload_gb: float = number(0.0, 0.0, _MAX_SWAP_GIB)
    #: A datacenter PCIe 4.0 NVMe drive reads about 6-7 GB/s sequentially; 6 is the default.
    ssd_offload_bandwidth_gbs: float = number(6.0, 0.0, _MAX_OFFLOAD_GBS, lo_open=True)

    @property
    def swap_space_bytes(self) -> int:
        return int(self.swap_space_gb * GIB)

    @property
    def offload_enabled(self) -> bool:
        """Whether any KV offload tier is on."""
        return self.cpu_offload_gb > 0 or self.ssd_offload_gb > 0


@dataclass(frozen=True)
class SchedulerConfig(_Section):
    """``scheduler.*``: batching policy and its limits."""

    KEY: ClassVar[str] = "scheduler"
    policy: str = choice("chunked", POLICIES)
    #: Sequences per step; None: the engine release's default for the GPU (vLLM: 1024 on a GPU
    #: with >= 70 GiB that is not an A100, else 256; ``Scenario.max_num_seqs``).
    max_num_seqs: Optional[int] = integer(None, 1, _MAX_SEQS, optional=True)
    #: Token budget per step; None: with chunked prefill the engine release's default for the
    #: GPU (vLLM: 8192 / 2048 by the same GPU class), else the policy's (``step_token_budget``).
    max_num_batched_tokens: Optional[int] = integer(None, 1, _MAX_TOKENS, optional=True)
    preemption: str = choice("recompute", PREEMPTIONS)
    queue_policy: str = choice("fcfs", QUEUE_POLICIES)
    #: vLLM V1's async scheduling (on by default since vLLM 0.14): step N+1 is scheduled while
    #: step N runs, so a request arriving during step N first runs in step N+2. ``auto``: on when
    #: the steps are priced as a vLLM server's (operator tables), off for the roofline and for a
    #: calibration profile of kvplan's own (synchronous) engine.
    async_scheduling: Any = _field("auto", _Check("auto_bool"))


@dataclass(frozen=True)
class ParallelConfig(_Section):
    """``parallel.*``: GPUs per replica and replicas behind a router.

    ``data_parallel_size`` (vLLM's ``--data-parallel-size``): attention ranks inside one
    replica, each with its own scheduler, batch and KV pool (``tensor_parallel_size`` GPUs
    each), requests balanced across them. ``enable_expert_parallel``: a mixture of experts'
    experts are spread whole over the replica's ``data_parallel_size x tensor_parallel_size``
    GPUs, tokens exchanged by all-to-all (vLLM's ``--enable-expert-parallel``; with
    ``data_parallel_size`` the DP-attention + EP deployment vLLM and SGLang use for
    DeepSeek). Without it a MoE with ``data_parallel_size`` > 1 splits every expert over all
    ``data_parallel_size x tensor_parallel_size`` GPUs, the ranks' tokens gathered for the MoE
    (vLLM's ``FusedMoEParallelConfig``: TP flattened across DP; SGLang's MoE TP = its
    ``--tp``, the whole group)."""

    KEY: ClassVar[str] = "parallel"
    tensor_parallel_size: int = integer(1, 1, _MAX_GPUS)
    pipeline_parallel_size: int = integer(1, 1, _MAX_GPUS)
    num_replicas: int = integer(1, 1, _MAX_REPLICAS)
    router: str = choice("round_robin", ROUTERS)
    data_parallel_size: int = integer(1, 1, _MAX_GPUS)
    enable_expert_parallel: bool = _field(False, _Check("bool"))
    #: SGLang's ``--ep-size``: the groups a MoE's experts are spread over whole, each expert
    #: split over the ``tensor_parallel_size x data_parallel_size / expert_parallel_size`` GPUs
    #: of its group (MoE TP x EP). None: every GPU one group with ``enable_expert_parallel``,
    #: else 1 (each expert split over all tp x dp GPUs). vLLM has no such split (EP = tp x dp).
    expert_parallel_size: Optional[int] = integer(None, 1, _MAX_GPUS, optional=True)
    #: ``prefix_aware`` router's scorer weights (docs/cluster.md): cached prompt fraction,
    #: outstanding requests (min-max normalised) and free KV; llm-d's 3 / 2 / 2.
    router_prefix_weight: float = number(DEFAULT_PREFIX_WEIGHT, 0.0, 1000.0)
    router_load_weight: float = number(DEFAULT_LOAD_WEIGHT, 0.0, 1000.0)
    router_kv_weight: float = number(DEFAULT_KV_WEIGHT, 0.0, 1000.0)
    #: Keep every turn of a session (``workload.sessions``) on the replica of its previous turn,
    #: unless that one is overloaded: more than ``session_affinity_abs_threshold`` outstanding
    #: requests above the least loaded replica *and* more than ``session_affinity_rel_threshold``
    #: times its count (SGLang router's imbalance test and defaults, 64 and 1.5).
    session_affinity: bool = _field(False, _Check("bool"))
    session_affinity_abs_threshold: int = integer(DEFAULT_AFFINITY_ABS_THRESHOLD, 0, _MAX_SEQS)
    session_affinity_rel_threshold: float = number(DEFAULT_AFFINITY_REL_THRESHOLD, 1.0, 1e6)

    @property
    def gpus_per_replica(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    @property
    def expert_shards(self) -> int:
        """Groups a MoE's experts are spread over whole (1: each expert split by tensor
        parallelism over every GPU)."""
        if self.expert_parallel_size is not None:
            return self.expert_parallel_size
        if self.enable_expert_parallel:
            return self.data_parallel_size * self.tensor_parallel_size
        return 1

    @property
    def expert_tensor_shards(self) -> int:
        """GPUs each expert is split over within its group (MoE TP): ``tp x dp / ep`` (``tp``
        without DP or EP; every GPU of a DP deployment without EP)."""
        return self.data_parallel_size * self.tensor_parallel_size // self.expert_shards


@dataclass(frozen=True)
class QuantizationConfig(_Section):
    """``quantization.*``: weight quantisation ("none" = weights in the model dtype)."""

    KEY: ClassVar[str] = "quantization"
    weights: str = choice("none", WEIGHT_QUANT)
    #: What an MXFP4 MoE's experts multiply their weights with (gpt-oss on Blackwell, where
    #: FlashInfer's TRT-LLM MoE takes either): ``bf16`` activations or ``mxfp8`` (quantised
    #: per 32-element block before the experts: on B200, gpt-oss-120b's experts 1.3x faster
    #: at 2k tokens and 3.8x at 8k in the measured tables). ``auto``: the engine's default, vLLM ``bf16`` (its ``trtllm`` MXFP4
    #: backend; ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``, or ``--mxfp4-backend trtllm-mxfp8``,
    #: is ``mxfp8``, as vLLM's gpt-oss recipe sets for Blackwell), SGLang ``mxfp8``
    #: (``--flashinfer-mxfp4-moe-precision default``; ``bf16`` is its other choice).
    moe_activations: str = choice("auto", MOE_ACTIVATIONS)
    #: The fused-MoE kernel for MXFP4 experts: ``auto`` (vLLM's ``get_mxfp4_backend``: OpenAI's
    #: Triton kernels on Hopper, FlashInfer's TRT-LLM MoE on Blackwell, Marlin elsewhere) or
    #: ``marlin`` (``VLLM_MXFP4_USE_MARLIN=1``, which InferenceX's gpt-oss Hopper scripts set from
    #: January 2026: the weights dequantised to BF16 inside the GEMM, about half OpenAI's Triton
    #: kernel's FLOP rate on long prefills in the measured tables). INT4 experts run Marlin already.
    #: ``triton`` runs FP8 experts in Triton's fused MoE, where vLLM on Blackwell would run
    #: FlashInfer's TRT-LLM MoE (``VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0``, as
    #: InferenceX's first MiniMax-M2.5 B200 script exported).
    moe_kernel: str = choice("auto", MOE_KERNELS)
    #: Which linear layers the checkpoint quantises (``sim.catalog.dtypes.QUANT_SCOPES``): a
    #: recipe's choice, not the format's. ``auto``: the routed experts only for MXFP4 and INT4
    #: MoEs (gpt-oss, Kimi-K2.5), every MLP but not attention for NVFP4 MoEs (NVIDIA's ModelOpt
    #: exports list ``*self_attn*`` in ``exclude_modules``), every linear layer otherwise.
    #: ``mlp_and_o_proj``: nvidia/DeepSeek-R1-0528-FP4-V2; ``experts_only``: the routed experts
    #: only (nvidia/Qwen3.5-397B-A17B-NVFP4, Kimi-K2.6-NVFP4); ``all``: a checkpoint quantised
    #: throughout (nvidia/Llama-3.3-70B-Instruct-FP4, FP8 releases).
    scope: str = choice("auto", QUANT_SCOPES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scope != "auto" and self.weights == "none":
            raise ConfigError(f"quantization.scope: {self.scope} says which layers a quantised "
                              f"checkpoint covers; quantization.weights is none")
        if self.moe_kernel == "marlin" and self.weights not in ("mxfp4", "int4"):
            raise ConfigError(f"quantization.moe_kernel: marlin runs 4-bit experts (mxfp4, int4); "
                              f"quantization.weights is {self.weights!r}")
        if self.moe_kernel == "triton" and self.weights not in ("fp8", "fp8_block"):
            raise ConfigError(f"quantization.moe_kernel: triton runs FP8 experts (fp8, fp8_block); "
                              f"quantization.weights is {self.weights!r}")
        if self.moe_kernel == "marlin" and self.moe_activations == "mxfp8":
            raise ConfigError("quantization.moe_kernel: marlin takes bf16 activations, not "
                              "quantization.moe_activations mxfp8")
        if self.moe_activations == "mxfp8" and self.weights != "mxfp4":
            raise ConfigError(f"quantization.moe_activations: mxfp8 activations are FlashInfer's "
                              f"MXFP4 MoE kernel's; quantization.weights is {self.weights!r}, "
                              f"not mxfp4")

    @property
    def weight_dtype(self) -> Optional[str]:
        """The memory plan's and roofline's ``weight_dtype`` (None = the activation dtype)."""
        return None if self.weights == "none" else self.weights


@dataclass(frozen=True)
class CostModelConfig(_Section):
    """``cost_model.*``: a calibration profile (``kvplan calibrate``) prices steps instead of
    the roofline when set. Here only its existence is checked; its contents are checked where
    it is loaded (the pricing layer)."""

    KEY: ClassVar[str] = "cost_model"
    profile: Optional[str] = _field(None, _Check("path", optional=True))
    #: Which pricer: ``auto`` = the profile if set, else measured operator tables when found
    #: for the hardware, else the roofline (``sim.api.resolve_deployment``).
    source: str = choice("auto", COST_MODEL_SOURCES)
    #: An AIConfigurator systems folder (default: $KVPLAN_GPU_TABLES, else the installed
    #: aiconfigurator-core package's ``systems/data``).
    tables: Optional[str] = _field(None, _Check("dir", optional=True))
    #: Every step's priced time is multiplied by this: kernels timed in isolation vs inside a
    #: serving process (``kvplan calibrate --real`` fits it to measured runs).
    step_scale: float = number(1.0, 0.0, 10.0, lo_open=True)
    #: Fixed per-request latency outside the engine (HTTP, tokenisation, IPC, streaming the
    #: first chunk), in ms: a request reaches the scheduler this long after it arrives, and
    #: its TTFT and E2E (measured from the arrival) grow by it.
    request_overhead_ms: float = number(0.0, 0.0, 1e6)
    #: How a mixture of experts' router spreads tokens, for the measured MoE tables:
    #: ``uniform`` (the default: each token's experts at random, as the roofline assumes;
    #: Mixtral's routing analysis finds experts about evenly used), ``balanced`` (the tables'
    #: rows as measured: a step's tokens spread over as many experts as they can reach, which a
    #: decode of a few sequences on a many-expert model never does) or a power law (few experts
    #: take most tokens; AIConfigurator's model of skewed routers).
    moe_routing: str = choice("uniform", MOE_ROUTINGS)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source == "profile" and self.profile is None:
            raise ConfigError("cost_model.profile: expected a profile file "
                              "(cost_model.source is 'profile')")


@dataclass(frozen=True)
class EngineConfig(_Section):
    """``engine.*``: which serving engine and release the simulated server runs
    (``sim.catalog.engines``): its defaults (async scheduling, CUDA-graph capture sizes, batch
    limits by GPU class) and the version folder of the measured operator tables read."""

    KEY: ClassVar[str] = "engine"
    name: str = choice("vllm", ENGINE_NAMES)
    version: str = _field(DEFAULT_VLLM_VERSION, _Check("name"))
    #: The API server in front of the engine (``sim.catalog.frontends``): ``api_server`` (an
    #: OpenAI-compatible server, as every HTTP benchmark measures) or ``none`` (an offline engine:
    #: ``LLM.generate`` benchmarks, kvplan's in-process validation).
    frontend: str = choice("api_server", FRONTEND_NAMES)
    #: Overrides of the front end's terms (None: the front end's own).
    frontend_request_ms: Optional[float] = number(None, 0.0, 1e6, optional=True)
    frontend_tokenize_us: Optional[float] = number(None, 0.0, 1e6, optional=True)
    frontend_stream_us: Optional[float] = number(None, 0.0, 1e6, optional=True)
    #: ``--stream-interval`` (vLLM from 0.12, SGLang): after the first token, which goes out at
    #: once, a request's tokens are streamed in chunks of this many. TTFT does not change; the
    #: API server streams N times fewer chunks a step (``sim.catalog.frontends``).
    stream_interval: int = integer(1, 1, 1_000_000)
    #: vLLM's ``--max-cudagraph-capture-size`` (``--cuda-graph-sizes N`` before 0.11): the
    #: largest step, in tokens, run in CUDA graphs (piecewise for mixed and prefill steps).
    #: None: vLLM's default, ``min(2 x max_num_seqs, 512)``. A step above it runs outside graphs
    #: and pays the host's time to issue each layer (``docs/cost_model.md``).
    max_cudagraph_capture_size: Optional[int] = integer(None, 1, _MAX_TOKENS, optional=True)
    #: vLLM's ``--enforce-eager``: no CUDA graphs and no torch.compile; every step waits for the
    #: host to issue each layer's ops one by one (``eager_host_seconds``).
    enforce_eager: bool = _field(False, _Check("bool"))
    #: vLLM's ``--compilation-config '{"cudagraph_mode": ...}'``: which steps replay CUDA graphs.
    #: auto: the release's (FULL_AND_PIECEWISE: decode-only steps one full graph, mixed ones
    #: piecewise); PIECEWISE (every step piecewise, attention eager between the pieces);
    #: FULL_DECODE_ONLY (decode-only steps full, mixed ones outside graphs); FULL (every step up
    #: to the capture size one full graph); NONE (no graphs; still torch.compile'd).
    cudagraph_mode: str = choice("auto", VLLM_CUDAGRAPH_MODES)

    def __post_init__(self) -> None:
        if self.cudagraph_mode != "auto" and self.name == "sglang":
            raise ConfigError("engine.cudagraph_mode: a vLLM setting; SGLang's are sglang.cuda_graph_max_bs, "
                              "sglang.disable_cuda_graph and its piecewise keys")
        if self.enforce_eager and self.name == "sglang":
            raise ConfigError("engine.enforce_eager: a vLLM flag; SGLang's is sglang.disable_cuda_graph")
        if self.max_cudagraph_capture_size is not None and self.name == "sglang":
            raise ConfigError("engine.max_cudagraph_capture_size: a vLLM flag; SGLang's are "
                              "sglang.cuda_graph_max_bs (decode batches) and "
                              "sglang.piecewise_cuda_graph_max_tokens (extends)")
        if isinstance(self.version, (int, float)) and not isinstance(self.version, bool):
            raise ConfigError(f"engine.version: got the number {self.version!r}; quote the version "
                              f"(YAML reads 0.20 as 0.2), e.g. '{DEFAULT_VLLM_VERSION}'")
        if self.name == "sglang" and self.version == DEFAULT_VLLM_VERSION:
            # The key's default is vLLM's release; SGLang has no 0.24, so an SGLang engine left
            # at it takes SGLang's default release.
            object.__setattr__(self, "version", DEFAULT_SGLANG_VERSION)
        super().__post_init__()
        get_engine(self.name, self.version)  # one-line ConfigError for a release not modelled

    @property
    def release(self) -> EngineRelease:
        return get_engine(self.name, self.version)

    @property
    def front_end(self) -> FrontEnd:
        """The front end with any ``frontend_*`` overrides applied."""
        return get_frontend(self.frontend).with_overrides(
            self.frontend_request_ms, self.frontend_tokenize_us,
            self.frontend_stream_us).with_stream_interval(self.stream_interval)


@dataclass(frozen=True)
class SglangConfig(_Section):
    """``sglang.*``: SGLang's own server arguments, under their SGLang names; read when
    ``engine.name`` is ``sglang`` (``sim.policies.schedulers.sglang``, ``sim.policies.kv.radix``).
    None: SGLang's default for the GPU and deployment (``sim.catalog.engines``)."""

    KEY: ClassVar[str] = "sglang"
    #: ``--schedule-policy``: fcfs (SGLang's default), lpm, dfs-weight, lof.
    schedule_policy: str = choice("fcfs", SGLANG_SCHEDULE_POLICIES)
    #: ``--chunked-prefill-size``: prompt tokens per extend batch, chunking longer prompts
    #: (None: 2048 / 4096 / 8192 / 16384 by GPU memory).
    chunked_prefill_size: Optional[int] = integer(None, 1, _MAX_TOKENS, optional=True)
    #: ``--max-prefill-tokens``: prompt tokens per extend batch across requests.
    max_prefill_tokens: int = integer(16384, 1, _MAX_TOKENS)
    #: ``--max-running-requests`` for the whole server (None: half the KV pool's tokens, at
    #: most the request pool's 2048-4096 rows); split over DP-attention ranks as SGLang does.
    max_running_requests: Optional[int] = integer(None, 1, _MAX_SEQS, optional=True)
    #: ``--schedule-conservativeness``: scales the initial ``new_token_ratio`` (0.7).
    schedule_conservativeness: float = number(1.0, 0.0, 100.0, lo_open=True)
    #: ``--mem-fraction-static``: the GPU memory for weights and KV pool (None: SGLang's rule
    #: by GPU memory, TP x PP, speculative decoding and DP attention).
    mem_fraction_static: Optional[float] = number(None, 0.0, 1.0, lo_open=True, optional=True)
    #: ``--enable-mixed-chunk``: running decodes join the extend batch.
    enable_mixed_chunk: bool = _field(False, _Check("bool"))
    #: ``--scheduler-recv-interval``: the scheduler polls for new requests after this many
    #: decode steps (and after every extend batch); 1, SGLang's default, polls every step.
    scheduler_recv_interval: int = integer(1, 1, 1_000_000)
    #: ``--page-size``: tokens per KV page; the radix cache matches whole pages.
    page_size: int = integer(1, 1, 1024)
    #: ``--disable-radix-cache``: no prefix cache.
    disable_radix_cache: bool = _field(False, _Check("bool"))
    #: ``--mamba-full-memory-ratio``: a hybrid linear-attention model's (Qwen3.5) state pool
    #: bytes over its KV pool's, both from the memory left after the weights.
    mamba_full_memory_ratio: float = number(0.9, 0.0, 1000.0, lo_open=True)
    #: ``--mamba-ssm-dtype``: the recurrent (temporal) state's dtype in that pool, float32,
    #: bfloat16 or float16 (auto: the model config's ``mamba_ssm_dtype``, else float32, as SGLang
    #: reads it); bfloat16 halves a request's state, so twice as many fit.
    mamba_ssm_dtype: str = choice("auto", MAMBA_SSM_DTYPES)
    #: ``--max-mamba-cache-size``: request states the pool holds, for the whole server (split
    #: over DP-attention ranks); None: from ``mamba_full_memory_ratio``, or
    #: ``max_running_requests`` when the radix cache is off and that is given (SGLang's rule).
    max_mamba_cache_size: Optional[int] = integer(None, 1, _MAX_SEQS, optional=True)
    #: ``--enable-piecewise-cuda-graph``: releases before 0.5.10 capture extend batches in
    #: piecewise CUDA graphs only with it (later ones by default).
    enable_piecewise_cuda_graph: bool = _field(False, _Check("bool"))
    #: ``--disable-piecewise-cuda-graph``: every extend batch runs eagerly.
    disable_piecewise_cuda_graph: bool = _field(False, _Check("bool"))
    #: ``--piecewise-cuda-graph-max-tokens``: the largest extend captured (None:
    #: ``chunked_prefill_size``, or 2048 for an MLA model).
    piecewise_cuda_graph_max_tokens: Optional[int] = integer(None, 1, _MAX_TOKENS, optional=True)
    #: ``--cuda-graph-max-bs``: the largest decode batch captured in a CUDA graph; SGLang's
    #: capture list is cut (or extended, by 16s past 256) to it, and a larger decode batch runs
    #: eagerly (None: 8 to 512 by GPU memory and TP, ``sglang_cuda_graph_max_bs``).
    cuda_graph_max_bs: Optional[int] = integer(None, 1, _MAX_SEQS, optional=True)
    #: ``--disable-cuda-graph``: decode batches run eagerly too (extends follow the piecewise
    #: keys above, a separate switch in SGLang).
    disable_cuda_graph: bool = _field(False, _Check("bool"))

    def scheduler_options(self) -> dict:
        """``SglangScheduler``'s keyword arguments."""
        return {"schedule_policy": self.schedule_policy,
                "schedule_conservativeness": self.schedule_conservativeness,
                "enable_mixed_chunk": self.enable_mixed_chunk,
                "max_prefill_tokens": self.max_prefill_tokens,
                "scheduler_recv_interval": self.scheduler_recv_interval}


@dataclass(frozen=True)
class SpeculativeConfig(_Section):
    """``speculative.*``: draft tokens per step and how many of them are accepted."""

    KEY: ClassVar[str] = "speculative"
    num_tokens: int = integer(0, 0, _MAX_SPEC_TOKENS)
    acceptance: str = choice("constant", ACCEPTANCE)
    acceptance_rate: float = number(0.7, 0.0, 1.0)
    #: Per-position acceptance probabilities (used when ``acceptance`` is "table").
    acceptance_table: Optional[tuple[float, ...]] = _field(None, _Check("probs", optional=True))
    draft_cost_ratio: float = number(0.05, 0.0, 10.0)
    #: P(proposer has exactly m drafts), m = 0..num_tokens; None: always num_tokens (a draft
    #: model).
    draft_availability: Optional[tuple[float, ...]] = _field(None, _Check("probs", optional=True))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.acceptance == "table" and self.acceptance_table is None:
            raise ConfigError("speculative.acceptance_table: expected a list of per-position "
                              "acceptance probabilities in [0, 1] (speculative.acceptance is 'table')")
        avail = self.draft_availability
        if avail is not None:
            k = self.num_tokens
            if len(avail) != k + 1 or abs(sum(avail) - 1.0) > 1e-6:
                raise ConfigError(f"speculative.draft_availability: expected {k + 1} probabilities "
                                  f"(0..{k} drafts found) summing to 1, got {list(avail)!r}")

    @property
    def table(self) -> Optional[tuple[float, ...]]:
        """The acceptance table the sampler uses (None: constant rate)."""
        return self.acceptance_table if self.acceptance == "table" else None


@dataclass(frozen=True)
class SLOConfig(_Section):
    """``slo.*``: per-request latency bounds for ``slo_attainment`` (None: no bound)."""

    KEY: ClassVar[str] = "slo"
    ttft_ms: Optional[float] = number(None, 0.0, _MAX_MS, lo_open=True, optional=True)
    tpot_ms: Optional[float] = number(None, 0.0, _MAX_MS, lo_open=True, optional=True)


@dataclass(frozen=True)
class DisaggregationConfig(_Section):
    """``disaggregation.*``: disaggregated prefill/decode serving (DistServe, Splitwise, vLLM's
    KV connectors, llm-d P/D). When ``enabled``, a pool of ``prefill_replicas`` instances runs
    prompts only and a pool of ``decode_replicas`` instances runs decodes only, each with its
    own tensor parallelism and hardware (None: ``parallel.tensor_parallel_size`` and
    ``hardware``); each request's KV crosses ``link`` (``sim.catalog.links``; the overrides
    replace its per-GPU bandwidth in GB/s and per-transfer latency in microseconds).
    ``parallel.num_replicas`` is ignored then (docs/cluster.md)."""

    KEY: ClassVar[str] = "disaggregation"
    enabled: bool = _field(False, _Check("bool"))
    prefill_replicas: int = integer(1, 1, _MAX_REPLICAS)
    prefill_tensor_parallel_size: Optional[int] = integer(None, 1, _MAX_GPUS, optional=True)
    prefill_hardware: Optional[str] = _field(None, _Check("name", optional=True))
    decode_replicas: int = integer(1, 1, _MAX_REPLICAS)
    decode_tensor_parallel_size: Optional[int] = integer(None, 1, _MAX_GPUS, optional=True)
    decode_hardware: Optional[str] = _field(None, _Check("name", optional=True))
    link: str = choice("infiniband", LINK_NAMES)
    link_bandwidth_gbs: Optional[float] = number(None, 0.0, 1e5, lo_open=True, optional=True)
    link_latency_us: Optional[float] = number(None, 0.0, 1e9, optional=True)
    #: Where the client's first token comes from: ``decode`` (vLLM's disaggregated-prefill proxy,
    #: llm-d, Dynamo: the prefill request's own token is dropped and the decode instance emits
    #: every token, so TTFT includes the KV transfer, the wait for decode room and one decode
    #: step) or ``prefill`` (DistServe and Splitwise: the prefill instance returns it).
    first_token: str = choice("decode", ("decode", "prefill"))
    #: Whether each request passes the decode instance's own API server too, after its prefill:
    #: true for vLLM's P/D proxy and llm-d's sidecar, which send the whole request to the decode
    #: instance's ``vllm serve`` once the prefill returns; false for a front end that tokenises
    #: once and hands requests to its workers (Dynamo). None: the engine's way, true for vLLM and
    #: false for SGLang, whose router sends the request to the prefill and decode servers at once
    #: (the decode server's pass overlaps the prefill). No effect with ``engine.frontend: none``.
    decode_api_server: Optional[bool] = _field(None, _Check("bool", optional=True))


def default_workload() -> dict[str, Any]:
    """ShareGPT-like (vLLM paper means 161 in / 338 out; CVs measured on the ShareGPT table;
    caps as vllm bench serve's ShareGPT filter, so prompt + output <= 2048)."""
    return {
        "num_requests": 1000,
        "arrival": {"process": "poisson", "rate": 8.0},
        "input_len": {"dist": "lognormal", "mean": 161, "cv": 0.9, "max": 1024},
        "output_len": {"dist": "lognormal", "mean": 338, "cv": 0.6, "max": 1024},
    }


_SECTIONS: dict[str, type[_Section]] = {
    "kv_cache": KVCacheConfig,
    "scheduler": SchedulerConfig,
    "parallel": ParallelConfig,
    "quantization": QuantizationConfig,
    "cost_model": CostModelConfig,
    "engine": EngineConfig,
    "sglang": SglangConfig,
    "speculative": SpeculativeConfig,
    "slo": SLOConfig,
    "disaggregation": DisaggregationConfig,
}


@dataclass(frozen=True)
class Scenario:
    """A whole scenario: deployment (model, hardware, dtype, parallelism, quantisation), KV
    cache, scheduler, speculative decoding, cost model, SLO, workload and seed.

    ``workload`` is the YAML mapping as given (checked by ``sim.workload.parse_workload``;
    relative file paths are resolved against the config file's folder when it is built);
    ``workload_spec`` is its typed form (paths not yet resolved).
    """

    model: str = _field("llama-3.1-8b", _Check("name"))
    hardware: str = _field("a100-80gb", _Check("name"))
    dtype: str = choice("float16", DTYPES)
    seed: int = integer(0, 0, _MAX_SEED)
    kv_cache: KVCacheConfig = field(default_factory=KVCacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)
    cost_model: CostModelConfig = field(default_factory=CostModelConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sglang: SglangConfig = field(default_factory=SglangConfig)
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)
    disaggregation: DisaggregationConfig = field(default_factory=DisaggregationConfig)
    workload: dict[str, Any] = field(default_factory=default_workload)
    workload_spec: WorkloadSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                object.__setattr__(self, f.name, _check_value(f.name, getattr(self, f.name), check))
            elif f.name in _SECTIONS and not isinstance(getattr(self, f.name), _SECTIONS[f.name]):
                raise ConfigError(f"{f.name}: expected a {_SECTIONS[f.name].__name__}")
        if not isinstance(self.workload, Mapping):
            raise ConfigError(f"workload: expected a mapping, got {self.workload!r}")
        object.__setattr__(self, "workload", copy.deepcopy(dict(self.workload)))
        object.__setattr__(self, "workload_spec", parse_workload(self.workload, key="workload"))
        self._apply_engine()
        self._check_combinations()

    @property
    def caches_prefixes(self) -> bool:
        """``kv_cache.prefix_caching`` resolved: ``auto`` is the engine's default
        (``engine_caches_prefixes``)."""
        kv = self.kv_cache
        if kv.prefix_caching == "auto":
            return engine_caches_prefixes(self.engine.name, kv.allocator, self.scheduler.policy,
                                          self.sglang.disable_radix_cache)
        return bool(kv.prefix_caching)

    def _apply_engine(self) -> None:
        """An SGLang engine schedules with SGLang's policy over its radix-cache token pool:
        ``scheduler.policy`` becomes ``sglang`` (from its default ``chunked``) and the KV cache
        the radix allocator with ``sglang.page_size`` pages, caching prefixes unless
        ``sglang.disable_radix_cache``. Idempotent, so a scenario's ``to_dict`` builds it again."""
        sched, kv = self.scheduler, self.kv_cache
        if self.engine.name != "sglang":
            if sched.policy == "sglang":
                raise ConfigError("scheduler.policy: 'sglang' is SGLang's scheduler; set engine.name sglang")
            if kv.allocator == "radix":
                raise ConfigError("kv_cache.allocator: 'radix' is SGLang's radix cache; set engine.name sglang")
            return
        if sched.policy not in ("chunked", "sglang"):
            raise ConfigError(f"scheduler.policy: {sched.policy!r} is not SGLang's scheduler; with "
                              f"engine.name sglang leave it out (or 'sglang')")
        if kv.allocator == "contiguous":
            raise ConfigError("kv_cache.allocator: SGLang pages its KV cache (leave it out with engine.name sglang)")
        if sched.preemption == "swap":
            raise ConfigError("scheduler.preemption: SGLang retracts and recomputes; 'swap' is vLLM's")
        if kv.offload_enabled:
            raise ConfigError("kv_cache.cpu_offload_gb: KV offload tiers are modelled for vLLM only "
                              "(SGLang's HiCache is not); set them to 0 with engine.name sglang")
        sg = self.sglang
        if kv.prefix_caching is True and sg.disable_radix_cache:
            raise ConfigError("kv_cache.prefix_caching: true contradicts sglang.disable_radix_cache "
                              "(SGLang caches prefixes in its radix tree); set only one of them")
        if kv.prefix_caching is False and not sg.disable_radix_cache:  # off, said the engine-neutral way
            sg = replace(sg, disable_radix_cache=True)
            object.__setattr__(self, "sglang", sg)
        object.__setattr__(self, "scheduler", replace(sched, policy="sglang"))
        object.__setattr__(self, "kv_cache", replace(kv, allocator="radix", block_size=sg.page_size,
                                                     prefix_caching=not sg.disable_radix_cache))

    def _check_combinations(self) -> None:
        """Rules that involve more than one key (each error names the key to change)."""
        kv, sched = self.kv_cache, self.scheduler
        par = self.parallel
        if par.expert_parallel_size is not None:
            group = par.tensor_parallel_size * par.data_parallel_size
            if group % par.expert_parallel_size:
                raise ConfigError(f"parallel.expert_parallel_size: {par.expert_parallel_size} does not "
                                  f"divide tensor_parallel_size x data_parallel_size ({group})")
            if self.engine.name == "vllm" and par.expert_parallel_size not in (1, group):
                raise ConfigError(f"parallel.expert_parallel_size: vLLM spreads experts over all "
                                  f"{group} GPUs (enable_expert_parallel) or splits them by TP (1); "
                                  f"MoE TP x EP is SGLang's (engine.name sglang)")
        if kv.prefix_caching is True and kv.allocator not in ("paged", "radix"):
            raise ConfigError("kv_cache.prefix_caching: needs kv_cache.allocator 'paged'")
        if kv.offload_enabled and not self.caches_prefixes:
            key = "kv_cache.cpu_offload_gb" if kv.cpu_offload_gb > 0 else "kv_cache.ssd_offload_gb"
            raise ConfigError(f"{key}: KV offload tiers need kv_cache.prefix_caching true "
                              f"(only cached prefix blocks are offloaded)")
        if sched.policy == "static" and sched.preemption != "recompute":
            raise ConfigError("scheduler.preemption: static batching supports only 'recompute'")
        if sched.preemption == "swap" and kv.allocator != "paged":
            raise ConfigError("scheduler.preemption: 'swap' needs kv_cache.allocator 'paged'")
        mbt = sched.max_num_batched_tokens
        if mbt is not None and sched.policy in ("orca", "vllm_v0") and mbt < kv.max_model_len:
            raise ConfigError(
                f"scheduler.max_num_batched_tokens: {mbt} < kv_cache.max_model_len {kv.max_model_len}; "
                f"without chunked prefill a whole prompt must fit in one step (use policy 'chunked')")

    # --- the dotted mapping ----------------------------------------------------------------
    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> "Scenario":
        """The typed scenario of a config mapping (``sim.config.build_config``'s output, or
        any part of it: a missing key takes its default; the ``workload`` section is taken
        whole, not merged). Raises ``ConfigError`` naming the first bad key."""
        if not isinstance(cfg, Mapping):
            raise ConfigError(f"config: expected a mapping of config keys, got {cfg!r}")
        names = [f.name for f in fields(cls) if f.init]
        for k in cfg:
            if k not in names:
                raise ConfigError(f"unknown config key '{k}' (allowed here: {', '.join(sorted(names))})")
        kwargs: dict[str, Any] = {}
        for k, v in cfg.items():
            kwargs[k] = _SECTIONS[k].from_dict(v) if k in _SECTIONS else v
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The dotted mapping (the YAML form), keys in the documented order."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if isinstance(value, _Section):
                out[f.name] = value.to_dict()
            elif f.name == "workload":
                out[f.name] = copy.deepcopy(value)
            else:
                out[f.name] = value
        return out

    def override(self, values: Mapping[str, Any]) -> "Scenario":
        """A copy with dotted keys set (``{"kv_cache.num_gpu_blocks": 512}``), checked again.
        For facts learnt after the scenario was built, such as the real engine's pool size."""
        cfg = self.to_dict()
        for dotted, value in values.items():
            *path, last = dotted.split(".")
            node = cfg
            for part in path:
                if not isinstance(node.get(part), dict):
                    raise ConfigError(f"unknown config key '{dotted}'")
                node = node[part]
            if last not in node and path[:1] != ["workload"]:
                raise ConfigError(f"unknown config key '{dotted}'")
            node[last] = value
        return Scenario.from_dict(cfg)

    # --- derived values the executors share -----------------------------------------------
    @property
    def gpus_per_replica(self) -> int:
        return self.parallel.gpus_per_replica

    @property
    def max_num_seqs(self) -> int:
        """``max_num_seqs_given``, or the engine release's default on this GPU."""
        from sim.catalog.hardware import get_hardware

        given = self.max_num_seqs_given
        return given if given is not None else \
            self.engine.release.default_max_num_seqs(get_hardware(self.hardware))

    @property
    def max_num_seqs_given(self) -> Optional[int]:
        """The batch's request limit the config sets: ``scheduler.max_num_seqs``, under SGLang
        ``sglang.max_running_requests`` first; None when neither is set."""
        if self.engine.name == "sglang" and self.sglang.max_running_requests is not None:
            return self.sglang.max_running_requests
        return self.scheduler.max_num_seqs

    @property
    def front_end(self) -> FrontEnd:
        """The engine's front end (``EngineConfig.front_end``) tokenising this workload's prompt
        text (``workload.prompt_text``); an explicit ``engine.frontend_tokenize_us`` is taken as
        measured for these prompts and left as given."""
        fe = self.engine.front_end
        if self.engine.frontend_tokenize_us is not None:
            return fe
        return fe.for_prompt_text(self.workload_spec.prompt_text)

    @property
    def max_num_batched_tokens(self) -> Optional[int]:
        """``scheduler.max_num_batched_tokens``, or with chunked prefill the engine release's
        default on this GPU (None: the policy's own rule, ``step_token_budget``)."""
        from sim.catalog.hardware import get_hardware

        given = self.scheduler.max_num_batched_tokens
        if self.engine.name == "sglang" and self.sglang.chunked_prefill_size is not None:
            given = self.sglang.chunked_prefill_size
        if given is not None or not SCHEDULERS[self.scheduler.policy].chunked_prefill:
            return given
        return self.engine.release.default_max_num_batched_tokens(get_hardware(self.hardware))


def field_keys() -> list[str]:
    """Every dotted key of the scenario except inside ``workload`` (documented in
    docs/workloads.md), in the documented order."""
    keys: list[str] = []
    for f in fields(Scenario):
        if not f.init or f.name == "workload":
            continue
        if f.name in _SECTIONS:
            section: Any = _SECTIONS[f.name]  # a dataclass (``_Section`` itself is not one to mypy)
            keys += [f"{f.name}.{g.name}" for g in fields(section)]
        else:
            keys.append(f.name)
    return keys


def field_check(dotted: str) -> Optional[_Check]:
    """How the key ``dotted`` is validated (tests and docs read it)."""
    section, _, name = dotted.rpartition(".")
    cls: Any = _SECTIONS[section] if section else Scenario
    for f in fields(cls):
        if f.name == name:
            return f.metadata.get("check")
    raise KeyError(dotted)


#: The built-in default scenario as a dotted mapping (``kvplan simulate`` with no config file).
DEFAULTS: dict[str, Any] = Scenario().to_dict()
