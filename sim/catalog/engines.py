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

from sim.errors import ConfigError

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareSpec

#: Engines kvplan models (``engine.name``). SGLang is a separate issue.
ENGINE_NAMES: tuple[str, ...] = ("vllm",)

#: The oldest and newest vLLM releases whose behaviour kvplan models. 0.11.0 made
#: ``FULL_AND_PIECEWISE`` CUDA graphs the default (below); 0.24.0 is the newest release the
#: measured tables of ``aiconfigurator-core`` 0.12 were collected under.
VLLM_OLDEST: tuple[int, int, int] = (0, 11, 0)
VLLM_NEWEST: tuple[int, int, int] = (0, 24, 0)
#: ``engine.version``'s default: the newest modelled release.
DEFAULT_VLLM_VERSION = "0.24.0"

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
    """

    name: str
    version: tuple[int, int, int]
    async_scheduling: bool
    async_with_speculative: bool
    cudagraph_mode: str
    prefix_hash: str = "sha256"

    @property
    def label(self) -> str:
        return f"{self.name} {version_text(self.version)}"

    def capture_sizes(self, max_num_seqs: int) -> list[int]:
        """vLLM's default CUDA-graph capture sizes for ``max_num_seqs``."""
        top = min(2 * max_num_seqs, 512)
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
        return 8192 if self.large_gpu(hw) else 2048

    def default_max_num_seqs(self, hw: "HardwareSpec") -> int:
        return 1024 if self.large_gpu(hw) else 256

    def to_dict(self) -> dict:
        return {"name": self.name, "version": version_text(self.version),
                "async_scheduling_default": self.async_scheduling,
                "cudagraph_mode": self.cudagraph_mode, "prefix_hash": self.prefix_hash}


def get_engine(name: str = "vllm", version: Optional[str] = None) -> EngineRelease:
    """The release ``name`` ``version`` (default: the newest modelled); ConfigError naming the
    key for an engine or a release kvplan does not model."""
    if name not in ENGINE_NAMES:
        raise ConfigError(f"engine.name: unknown engine {name!r}; modelled: {', '.join(ENGINE_NAMES)}")
    v = parse_version(version if version is not None else DEFAULT_VLLM_VERSION)
    if not VLLM_OLDEST <= v <= VLLM_NEWEST[:2] + (10**6,):
        raise ConfigError(
            f"engine.version: vLLM {version_text(v)} is not modelled; kvplan models vLLM "
            f"{version_text(VLLM_OLDEST)} to {version_text(VLLM_NEWEST[:2])}.x")
    return EngineRelease(
        name=name, version=v,
        async_scheduling=v >= (0, 14, 0),
        async_with_speculative=v >= (0, 15, 0),
        cudagraph_mode="FULL_AND_PIECEWISE",
    )


__all__ = ["ENGINE_NAMES", "DEFAULT_VLLM_VERSION", "EngineRelease", "get_engine", "parse_version",
           "version_text"]
