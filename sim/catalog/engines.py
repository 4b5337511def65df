"""Serving engines and their releases: which engine kvplan models, and what each release does by
default that changes a step's time or a batch's size.

Why a table of releases: a planner is asked about the vLLM a team runs, and vLLM's defaults moved
under users between releases (async scheduling, CUDA-graph modes, batch limits by GPU class). The
measured operator tables are versioned too (``sim.pricing.table_data`` reads the version folder
nearest ``engine.version``). Each behaviour below cites the vLLM change that set it; a version
outside the modelled range is refused in one line rather than silently priced as another.

Layer L0 (no simulator imports): the scenario validates ``engine.name`` / ``engine.version``
against this module, the pricers and the scheduler builder read the resolved defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from sim.catalog.hardware import MiB
from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareSpec

#: Engines kvplan models (``engine.name``).
ENGINE_NAMES: tuple[str, ...] = ("vllm", "sglang")
#: ``engine.cudagraph_mode``: auto (the release's) or one of vLLM's ``CUDAGraphMode`` names that
#: a serving config sets (vllm/config/compilation.py).
VLLM_CUDAGRAPH_MODES: tuple[str, ...] = ("auto", "FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY",
                                          "FULL", "NONE")

#: The oldest and newest vLLM releases whose behaviour kvplan models. 0.11.0 made
#: ``FULL_AND_PIECEWISE`` CUDA graphs the default (below); 0.24.0 is the newest release the
#: measured tables of ``aiconfigurator-core`` 0.12 were collected under.
VLLM_OLDEST: tuple[int, int, int] = (0, 11, 0)
VLLM_NEWEST: tuple[int, int, int] = (0, 24, 0)
#: ``engine.version``'s default: the newest modelled release.
DEFAULT_VLLM_VERSION = "0.24.0"

#: The SGLang releases kvplan models: 0.5.0 (the overlap scheduler, page-1 radix cache and the
#: GPU-memory defaults below are all in place) to 0.5.16, the newest release the SGLang tables
#: of ``aiconfigurator-core`` 0.12 were collected under.
SGLANG_OLDEST: tuple[int, int, int] = (0, 5, 0)
SGLANG_NEWEST: tuple[int, int, int] = (0, 5, 16)
#: SGLang's default release: 0.5.14, the newest with every table (GEMM, attention, MoE, MLA,
#: all-reduce) measured on H100, H200, B200 and B300.
DEFAULT_SGLANG_VERSION = "0.5.14"

#: ``engine.version`` when the config leaves it out, per engine.
DEFAULT_VERSIONS: dict[str, str] = {"vllm": DEFAULT_VLLM_VERSION, "sglang": DEFAULT_SGLANG_VERSION}
#: Per engine: its name in messages, and the oldest and newest releases modelled (any patch
#: release of the newest minor is accepted).
_MODELLED: dict[str, tuple[str, tuple[int, int, int], tuple[int, int, int]]] = {
    "vllm": ("vLLM", VLLM_OLDEST, VLLM_NEWEST), "sglang": ("SGLang", SGLANG_OLDEST, SGLANG_NEWEST)}

GIB = 1 << 30


def parse_version(text: object, key: str = "engine.version") -> tuple[int, int, int]:
    """``"0.15.1"`` -> ``(0, 15, 1)``; also ``v0.15.1``, ``0.15`` and suffixes like
    ``0.15.1rc1`` / ``0.15.1+cu129`` (the release they belong to). ConfigError naming ``key``
    otherwise."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?(?:rc|post|dev|\+)?[0-9a-zA-Z.+-]*)?",
                     str(text).strip())
    if not m:
        raise ConfigError(f"{key}: {text!r} is not a version (expected e.g. {DEFAULT_VLLM_VERSION})")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def version_text(v: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in v)


#: vLLM V1's engine-core CPU time per step and per sequence (see ``EngineRelease``).
V1_CPU_STEP_S = 0.5e-3
V1_CPU_PER_SEQ_S = 20e-6


@dataclass(frozen=True)
class EngineRelease:
    """What one engine release does by default, as kvplan prices and schedules it.

    - ``async_scheduling``: vLLM V1 schedules step N+1 while the GPU runs step N. Default on
      from 0.14.0 (vllm-project/vllm#27614, "use async scheduling by default"); with
      speculative decoding (EAGLE/MTP) on from 0.15.0 (#31998), off before.
    - ``cudagraph_mode``: ``FULL_AND_PIECEWISE`` since 0.11.0 (#25444): a decode-only batch of
      at most ``max_cudagraph_capture_size`` tokens replays a full graph, a mixed batch runs
      piecewise graphs with attention eager (``sim.pricing.operator_tables``).
    - ``capture_sizes``: ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` with
      ``max = min(2 * max_num_seqs, 512)`` (``VllmConfig._set_cudagraph_sizes``, the
      ``max_cudagraph_capture_size`` rule since 0.11.0).
    - ``max_num_batched_tokens`` / ``max_num_seqs`` defaults by GPU class, as the API server
      sets them (``EngineArgs._set_default_args``): on a GPU with >= 70 GiB that is not an
      A100, 8192 tokens and 1024 sequences (#17885 kept A100 out: large budgets lowered its
      throughput); elsewhere 2048 and 256. Unchanged from 0.11 to 0.24.
    - ``prefix_hash``: the prefix cache's block hash, ``sha256`` by default
      (``CacheConfig.prefix_caching_hash_algo``; ``xxhash`` and the CBOR variants are options,
      vllm/utils/hashing.py). Recorded, not priced: a few microseconds per block on the engine
      core's CPU at admission, under 0.5 ms for a 2k-token prompt.
    - ``cpu_step_s`` + ``cpu_per_seq_s`` x sequences: the engine core's CPU time per step
      (schedule, prepare inputs, sample bookkeeping, update from the output), which the GPU
      waits for unless scheduling is asynchronous. Every modelled release runs vLLM's V1 engine
      core (persistent batch, outputs processed in the API server's process): the V1 loop's gap
      between two decode steps was measured at 5-6 ms with 256 sequences (Llama-2-7B, TP1;
      vllm-project/vllm#10634, the baseline of #11133), so 0.5 ms + 20 us per sequence. Both
      pricers take them (the roofline, built without an engine, keeps Vidur's V0 constants,
      1 ms + 40 us per sequence, from its ``Efficiency``). SGLang's
      Python scheduler loop is taken as the same (no per-sequence measurement of it found);
      with its overlap scheduler on it is hidden behind the GPU in most steps.
    """

    name: str
    version: tuple[int, int, int]
    async_scheduling: bool
    async_with_speculative: bool
    cudagraph_mode: str
    prefix_hash: str = "sha256"
    cpu_step_s: float = V1_CPU_STEP_S
    cpu_per_seq_s: float = V1_CPU_PER_SEQ_S

    @property
    def label(self) -> str:
        return f"{self.name} {version_text(self.version)}"

    def capture_sizes(self, max_num_seqs: int, hw: Optional["HardwareSpec"] = None,
                      tensor_parallel_size: int = 1, max_capture: Optional[int] = None) -> list[int]:
        """The release's CUDA-graph capture sizes. vLLM: ``[1, 2, 4] + range(8, 256, 8)
        + range(256, max + 1, 16)`` with ``max = min(2 * max_num_seqs, 512)``, or ``max_capture``
        where ``--max-cudagraph-capture-size`` sets it (``VllmConfig._set_cudagraph_sizes`` takes
        it as given, without the ``2 x max_num_seqs`` cap; mixed and prefill steps up to it run
        in piecewise graphs). SGLang (decode batches only): ``[1, 2, 4, 8, 12] + range(16, 257,
        8) + range(272, max + 1, 16)`` up to ``cuda_graph_max_bs``: ``max_capture`` where
        ``--cuda-graph-max-bs`` sets it (SGLang's docs, "CUDA Graph Capture": it cuts or extends
        the internal list to N; larger batches run eagerly), else ``sglang_cuda_graph_max_bs``
        (by GPU memory and TP)."""
        if self.name == "sglang":
            top = max_capture if max_capture else sglang_cuda_graph_max_bs(hw, tensor_parallel_size)
            sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, top + 1, 16))
        else:
            top = max_capture if max_capture else min(2 * max_num_seqs, 512)
            sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
        return sorted(s for s in set(sizes) if s <= top) or [1]

    def async_default(self, speculative: bool) -> bool:
        """Whether this release schedules asynchronously by default."""
        return self.async_with_speculative if speculative else self.async_scheduling

    @staticmethod
    def large_gpu(hw: "HardwareSpec") -> bool:
        """vLLM's "H100 and MI300x class": >= 70 GiB of device memory, not an A100."""
        return hw.memory_bytes >= 70 * GIB and not hw.name.startswith("a100")

    def default_max_num_batched_tokens(self, hw: "HardwareSpec") -> int:
        """vLLM's ``max_num_batched_tokens``; SGLang's ``chunked_prefill_size``."""
        if self.name == "sglang":
            return sglang_chunked_prefill_size(hw)
        return 8192 if self.large_gpu(hw) else 2048

    def default_max_num_seqs(self, hw: "HardwareSpec") -> int:
        """vLLM's ``max_num_seqs``. SGLang sizes ``max_running_requests`` from its KV pool once
        the memory plan is known (``sglang_max_running_requests``); before that, its ceiling:
        the request-to-token pool's 4096 rows."""
        if self.name == "sglang":
            return SGLANG_MAX_REQ_POOL
        return 1024 if self.large_gpu(hw) else 256

    def to_dict(self) -> dict:
        return {"name": self.name, "version": version_text(self.version),
                "async_scheduling_default": self.async_scheduling,
                "cudagraph_mode": self.cudagraph_mode, "prefix_hash": self.prefix_hash,
                "cpu_step_ms": self.cpu_step_s * 1e3, "cpu_per_seq_us": self.cpu_per_seq_s * 1e6}


def get_engine(name: str = "vllm", version: Optional[str] = None) -> EngineRelease:
    """The release ``name`` ``version`` (default: the engine's default release); ConfigError
    naming the key for an engine or a release kvplan does not model."""
    if name not in ENGINE_NAMES:
        raise ConfigError(f"engine.name: unknown engine {name!r}; modelled: {', '.join(ENGINE_NAMES)}")
    label, oldest, newest = _MODELLED[name]
    v = parse_version(version if version is not None else DEFAULT_VERSIONS[name])
    if not oldest <= v <= newest[:2] + (10**6,):
        raise ConfigError(
            f"engine.version: {label} {version_text(v)} is not modelled; kvplan models {label} "
            f"{version_text(oldest)} to {version_text(newest[:2])}.x")
    if name == "sglang":
        return _sglang_release(v)
    return EngineRelease(
        name=name, version=v,
        async_scheduling=v >= (0, 14, 0),
        async_with_speculative=v >= (0, 15, 0),
        cudagraph_mode="FULL_AND_PIECEWISE",
    )


# --- SGLang ------------------------------------------------------------------------------------
# Defaults from SGLang's ``python/sglang/srt/server_args.py`` (0.5.x): ``_handle_gpu_memory_settings``
# picks ``chunked_prefill_size`` and ``cuda_graph_max_bs`` by the GPU's memory, and
# ``_handle_mem_fraction_static`` sets ``mem_fraction_static = (gpu_mem - reserved) / gpu_mem``
# with a reserve that grows with the GPU class and ``tp_size x pp_size``. The KV pool is what that
# fraction leaves after the weights (``ModelRunner.profile_max_num_token``); requests per batch
# are ``min(max_total_num_tokens // 2, req_to_token pool)`` (``Scheduler.init_memory_pool_and_cache``).

#: The request-to-token pool's rows: ``max(int(max_total_num_tokens / context_len * 512), 2048)``,
#: at most 4096 (``ModelRunner.init_memory_pool``).
SGLANG_MIN_REQ_POOL = 2048
SGLANG_MAX_REQ_POOL = 4096


def _gpu_mib(hw: Optional["HardwareSpec"]) -> Optional[float]:
    """The GPU's memory in MiB, as ``get_device_memory_capacity`` reports it (None: unknown)."""
    return None if hw is None else hw.usable_memory_bytes / MiB


def sglang_chunked_prefill_size(hw: Optional["HardwareSpec"]) -> int:
    """SGLang's default ``chunked_prefill_size``: 2048 under 35 GiB, 4096 under 60, 8192 under
    160 (H100, H200), 16384 above (B200, B300); 4096 when the memory is unknown."""
    mib = _gpu_mib(hw)
    if mib is None:
        return 4096
    if mib < 35 * 1024:
        return 2048
    if mib < 60 * 1024:
        return 4096
    if mib < 160 * 1024:
        return 8192
    return 16384


def sglang_cuda_graph_max_bs(hw: Optional["HardwareSpec"], tensor_parallel_size: int = 1) -> int:
    """SGLang's default ``cuda_graph_max_bs``: 8 under 20 GiB; 24 / 80 under 35 GiB (TP < 4 /
    >= 4); 32 / 160 under 60; 256 / 512 under 160; 512 above."""
    mib = _gpu_mib(hw)
    small_tp = tensor_parallel_size < 4
    if mib is None:
        return 160
    if mib < 20 * 1024:
        return 8
    if mib < 35 * 1024:
        return 24 if small_tp else 80
    if mib < 60 * 1024:
        return 32 if small_tp else 160
    if mib < 160 * 1024:
        return 256 if small_tp else 512
    return 512


def sglang_mem_fraction_static(hw: Optional["HardwareSpec"], tensor_parallel_size: int = 1,
                               pipeline_parallel_size: int = 1, speculative: bool = False,
                               dp_attention: bool = False) -> float:
    """SGLang's default ``mem_fraction_static``: ``(gpu_mem - reserved) / gpu_mem``, rounded to
    3 places. Reserved (GiB), with ``n = tp x pp``: 2.8 + n/10 under 35 GiB, 9.5 + n/2 under
    90 (H100), 12 + n/2 under 160 (H200), 32 above (B200); +2 with speculative decoding, +4 with
    DP attention. 0.88 when the memory is unknown."""
    mib = _gpu_mib(hw)
    if mib is None:
        return 0.88
    n = tensor_parallel_size * pipeline_parallel_size
    if mib < 35 * 1024:
        reserved = 2.8 + n / 10
    elif mib < 90 * 1024:
        reserved = 9.5 + n / 2
    elif mib < 160 * 1024:
        reserved = 12 + n / 2
    else:
        reserved = 32.0
    reserved += (2.0 if speculative else 0.0) + (4.0 if dp_attention else 0.0)
    return round((mib - reserved * 1024) / mib, 3)


def sglang_max_running_requests(max_total_num_tokens: int, context_len: int) -> int:
    """SGLang's default ``max_running_requests``: half the KV pool's tokens, at most the
    request-to-token pool's rows (``max(pool / context_len * 512, 2048)``, at most 4096)."""
    rows = max(int(max_total_num_tokens / max(context_len, 1) * 512), SGLANG_MIN_REQ_POOL)
    rows = min(rows, SGLANG_MAX_REQ_POOL)
    return max(1, min(max_total_num_tokens // 2, rows))


def _sglang_release(v: tuple[int, int, int]) -> EngineRelease:
    """An SGLang release. The overlap scheduler (``--disable-overlap-schedule`` turns it off)
    runs the CPU's scheduling of batch N+1 while the GPU runs batch N: kvplan's async
    scheduling. With speculative decoding it is off in 0.5.x (``server_args``: "Overlap
    scheduler is disabled when using speculative decoding" unless the experimental spec v2).
    Full CUDA graphs cover decode batches only (``cudagraph_mode`` ``DECODE_ONLY``); extend
    (prefill) batches run in piecewise graphs where ``sglang_extend_graph_tokens`` says so,
    eagerly otherwise."""
    return EngineRelease(name="sglang", version=v, async_scheduling=True,
                         async_with_speculative=False, cudagraph_mode="DECODE_ONLY",
                         prefix_hash="radix")


#: The first SGLang release that captures extend batches in piecewise CUDA graphs (PCG) by
#: default. sgl-project/sglang#16331 ("Piecewise Cuda Graph set default", merged 2026-03-02)
#: replaced the opt-in ``--enable-piecewise-cuda-graph`` with an opt-out
#: ``--disable-piecewise-cuda-graph``; AIConfigurator's SGLang collector sets both on its mock
#: server arguments, commented "sglang <=0.5.9" and "sglang >=0.5.10"
#: (ai-dynamo/aiconfigurator ``collector/sglang/collect_attn.py``).
SGLANG_PCG_DEFAULT_FROM: tuple[int, int, int] = (0, 5, 10)
#: PCG's largest captured extend for an MLA model when ``--piecewise-cuda-graph-max-tokens`` is
#: not given; other models capture up to ``chunked_prefill_size`` (SGLang's docs,
#: ``advanced_features/piecewise_cuda_graph``, "Server Args").
SGLANG_PCG_MLA_MAX_TOKENS = 2048


def sglang_pcg_capture_sizes(max_tokens: int) -> list[int]:
    """The extend sizes (tokens) SGLang captures piecewise CUDA graphs at, up to ``max_tokens``
    (``ServerArgs._generate_piecewise_cuda_graph_tokens``): every 4 to 32, 16 to 256, 32 to
    512, 64 to 1,024, 256 to 4,096, then 512. An extend runs the graph of the smallest size that
    holds it, padded to it (earlier releases stepped by 128 from 640 to 4,096 and by 256 past
    it: a padding within one step of these)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, max(max_tokens, 0) + 1, 512)))
    return [x for x in sizes if x <= max_tokens]


def sglang_extend_graph_tokens(release: EngineRelease, *, chunked_prefill_size: int,
                               mla: bool = False, multimodal: bool = False,
                               data_parallel_size: int = 1, pipeline_parallel_size: int = 1,
                               enable: bool = False, disable: bool = False,
                               max_tokens: Optional[int] = None) -> tuple[int, str]:
    """The largest extend batch (tokens) SGLang runs in piecewise CUDA graphs, 0 where every
    extend runs eagerly, and why, in words.

    Why it matters: an eager extend costs at least the host's time to issue every op of every
    layer (``eager_host_seconds`` in the pricer), which dominates a short prompt's prefill
    on a large model. PCG is on by default from ``SGLANG_PCG_DEFAULT_FROM`` (before it,
    ``enable`` opts in) and ``disable`` turns it off. ``ServerArgs._handle_piecewise_cuda_graph``
    turns it off for, among others, multimodal architectures (sgl-project/sglang#20747: "Since
    K2.5 is a multimodal model, piecewise CUDA graph is still auto-disabled by default"),
    DP attention and pipeline parallelism; kvplan models those three. Captured sizes run up to
    ``max_tokens`` (default ``chunked_prefill_size``, or ``SGLANG_PCG_MLA_MAX_TOKENS`` for
    MLA); a larger extend runs eagerly."""
    if release.name != "sglang":
        return 0, "not SGLang"
    by_default = release.version >= SGLANG_PCG_DEFAULT_FROM
    if disable:
        return 0, "off (sglang.disable_piecewise_cuda_graph)"
    if not (by_default or enable):
        return 0, (f"off: SGLang {version_text(release.version)} runs extends eagerly unless "
                   f"--enable-piecewise-cuda-graph (on by default from "
                   f"{version_text(SGLANG_PCG_DEFAULT_FROM)})")
    for off, why in ((multimodal, "a multimodal architecture"),
                     (data_parallel_size > 1, "DP attention"),
                     (pipeline_parallel_size > 1, "pipeline parallelism")):
        if off:
            return 0, f"off: SGLang turns piecewise CUDA graphs off for {why}"
    top = max_tokens if max_tokens is not None else (
        SGLANG_PCG_MLA_MAX_TOKENS if mla else chunked_prefill_size)
    return top, f"extends up to {top} tokens in piecewise CUDA graphs"


__all__ = ["ENGINE_NAMES", "VLLM_CUDAGRAPH_MODES", "DEFAULT_VLLM_VERSION", "DEFAULT_SGLANG_VERSION", "DEFAULT_VERSIONS", "EngineRelease", "get_engine", "parse_version",
           "version_text", "sglang_chunked_prefill_size", "sglang_cuda_graph_max_bs",
           "sglang_mem_fraction_static", "sglang_max_running_requests", "sglang_extend_graph_tokens",
           "sglang_pcg_capture_sizes", "SGLANG_PCG_DEFAULT_FROM"]
