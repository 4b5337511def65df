"""The paged KV pool: one tensor holding every layer's K and V blocks, sized from a budget.

The pool is pure memory; which request owns which block is decided by the ``sim.policies``
allocator (the same object the simulator uses), whose block ids index dimension 0 of every
layer's cache. Sizing follows vLLM: on CUDA, ``gpu_memory_utilization`` of the device minus
what weights and a warm-up forward already took; on CPU, an explicit byte budget.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from runtime.model_config import ModelConfig
from sim.errors import ConfigError, DoesNotFitError


@dataclass
class KVCache:
    """``data[0 | 1, layer]`` is that layer's K | V cache ``[num_blocks, block_size, kv_heads, head_dim]``."""

    data: torch.Tensor

    @property
    def num_blocks(self) -> int:
        return self.data.shape[2]

    @property
    def block_size(self) -> int:
        return self.data.shape[3]

    @property
    def num_bytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(self.data[0, i], self.data[1, i]) for i in range(self.data.shape[1])]


def block_bytes(cfg: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one block across all layers, K and V."""
    return block_size * cfg.kv_bytes_per_token(torch.empty((), dtype=dtype).element_size())


def num_blocks_for_budget(cfg: ModelConfig, block_size: int, dtype: torch.dtype,
                          kv_cache_bytes: int) -> int:
    n = kv_cache_bytes // block_bytes(cfg, block_size, dtype)
    if n < 1:
        raise DoesNotFitError(
            f"kv_cache_bytes: {kv_cache_bytes} bytes hold no block of {block_size} tokens "
            f"({block_bytes(cfg, block_size, dtype)} bytes each)"
        )
    return int(n)


def num_blocks_for_gpu(cfg: ModelConfig, block_size: int, dtype: torch.dtype,
                       gpu_memory_utilization: float, device: torch.device) -> int:
    """vLLM's rule: total * utilisation - (memory in use now + the warm-up's peak activations)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    free, total = torch.cuda.mem_get_info(device)
    stats = torch.cuda.memory_stats(device)
    peak_extra = stats["allocated_bytes.all.peak"] - stats["allocated_bytes.all.current"]
    budget = int(total * gpu_memory_utilization) - (total - free) - peak_extra
    if budget <= 0:
        raise DoesNotFitError(
            f"gpu_memory_utilization {gpu_memory_utilization}: nothing left for the KV cache "
            f"({(total - free) / 2**30:.1f} GiB in use of {total / 2**30:.1f} GiB)"
        )
    return num_blocks_for_budget(cfg, block_size, dtype, budget)


def allocate_kv_cache(cfg: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype,
                      device: torch.device) -> KVCache:
    shape = (2, cfg.num_hidden_layers, num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
    return KVCache(torch.zeros(shape, dtype=dtype, device=device))


class HostSwapSpace:
    """Host copies of swapped-out requests' KV blocks (vLLM v0's swap preemption).

    The ``sim.policies`` allocator decides who is swapped and counts host blocks; this class only
    moves bytes. ``apply`` must run before the step's forward pass: a swapped-out request's
    device blocks are free in the allocator already and may be handed to another request in
    this very step, so they are copied out first; then swapped-in requests' host copies go into
    the fresh device blocks the allocator gave them. On CUDA the host side is pinned memory.
    """

    def __init__(self, cache: KVCache) -> None:
        self.cache = cache
        self._copies: dict[str, torch.Tensor] = {}  # request id -> [2, layers, blocks, bs, heads, dim]
        self._pin = cache.data.device.type == "cuda"

    def __len__(self) -> int:
        return len(self._copies)

    def apply(self, swap_out: dict[str, list[int]], swap_in: dict[str, list[int]]) -> int:
        """Copy out, then in; returns the blocks moved."""
        moved = 0
        for rid, blocks in swap_out.items():
            index = torch.tensor(blocks, dtype=torch.long, device=self.cache.data.device)
            host = self.cache.data.index_select(2, index).to("cpu")
            self._copies[rid] = host.pin_memory() if self._pin else host
            moved += len(blocks)
        for rid, blocks in swap_in.items():
            saved = self._copies.pop(rid, None)
            if saved is None:
                raise RuntimeError(f"request {rid}: swapped in, but no host copy of its KV exists")
            if len(blocks) > saved.shape[2]:
                raise RuntimeError(f"request {rid}: {len(blocks)} blocks to restore, {saved.shape[2]} saved")
            index = torch.tensor(blocks, dtype=torch.long, device=self.cache.data.device)
            self.cache.data.index_copy_(2, index, saved[:, :, :len(blocks)].to(self.cache.data.device,
                                                                             non_blocking=self._pin))
            moved += len(blocks)
        return moved

    def drop(self, request_id: str) -> None:
        """Forget a host copy (the request was aborted or finished while swapped)."""
        self._copies.pop(request_id, None)


class HostKVOffload:
    """The bytes behind the ``sim.policies`` KV offload tiers: prefix blocks evicted from the
    device pool kept in host memory (tier ``cpu``) and in files on a local disk (tier ``ssd``),
    loaded back into device blocks on a prefix hit (LMCache's local CPU and disk backends, vLLM's
    offloading connector).

    The allocator's ``OffloadTiers`` decides every movement and records it in its ``journal``;
    ``apply`` replays the journal in order before the step's forward pass: an evicted block's
    device copy is still intact then (it was only handed to its new owner in this schedule), and
    a loaded block must hold its KV before attention reads it. ``tier_kinds[i]`` says where tier
    ``i`` keeps bytes: ``"memory"`` or ``"disk"`` (one file per block under ``directory``).
    """

    def __init__(self, cache: KVCache, tier_kinds: list[str], directory: Optional[str] = None) -> None:
        if any(k not in ("memory", "disk") for k in tier_kinds):
            raise ValueError(f"offload tier kinds must be memory or disk, got {tier_kinds}")
        self.cache = cache
        self.tier_kinds = tier_kinds
        self._pin = cache.data.device.type == "cuda"
        self._memory: dict[int, torch.Tensor] = {}  # block hash -> [2, layers, bs, heads, dim]
        self._on_disk: set[int] = set()
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        if "disk" in tier_kinds and directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kvplan-kv-offload-")
            directory = self._tmp.name
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.num_blocks_out = 0  # device -> host copies
        self.num_blocks_in = 0  # host -> device copies
        self.num_disk_writes = 0
        self.num_disk_reads = 0

    @property
    def num_resident(self) -> dict[str, int]:
        """Blocks held now, per place (the tiers' LRUs must agree: ``check``)."""
        return {"memory": len(self._memory), "disk": len(self._on_disk)}

    def apply(self, journal: list[tuple[str, int, int]]) -> int:
        """Replay ``journal`` (then the caller clears it); returns the blocks copied to or
        from the device."""
        moved = 0
        for kind, h, where in journal:
            if kind == "out":
                self._put(h, 0, self.cache.data[:, :, where].to("cpu", copy=True))
                moved += 1
                self.num_blocks_out += 1
            elif kind == "move":
                self._put(h, where, self._take(h))
            elif kind == "in":
                block = self._take(h).to(self.cache.data.device, non_blocking=self._pin)
                self.cache.data[:, :, where].copy_(block)
                moved += 1
                self.num_blocks_in += 1
            elif kind in ("drop", "discard"):
                self._take(h)
            else:
                raise RuntimeError(f"KV offload journal: unknown entry {kind!r}")
        return moved

    def check(self, resident_per_tier: list[int]) -> None:
        """Every hash the tiers hold has its bytes here, and nothing else is kept."""
        want = {"memory": 0, "disk": 0}
        for kind, n in zip(self.tier_kinds, resident_per_tier):
            want[kind] += n
        if want != self.num_resident:
            raise AssertionError(f"KV offload: tiers hold {want} blocks, host keeps {self.num_resident}")

    def _put(self, h: int, tier: int, block: torch.Tensor) -> None:
        if self.tier_kinds[tier] == "memory":
            self._memory[h] = block.pin_memory() if self._pin else block
            return
        assert self.directory is not None
        torch.save(block, self.directory / f"{h & 0xFFFFFFFFFFFFFFFF:016x}.pt")
        self._on_disk.add(h)
        self.num_disk_writes += 1

    def _take(self, h: int) -> torch.Tensor:
        block = self._memory.pop(h, None)
        if block is not None:
            return block
        if h not in self._on_disk:
            raise RuntimeError(f"KV offload: block hash {h} has no host copy")
        assert self.directory is not None
        path = self.directory / f"{h & 0xFFFFFFFFFFFFFFFF:016x}.pt"
        block = torch.load(path)
        path.unlink()
        self._on_disk.discard(h)
        self.num_disk_reads += 1
        return block

    def close(self) -> None:
        """Remove the disk tier's files (a temporary directory is removed whole)."""
        for h in list(self._on_disk):
            if self.directory is not None:
                (self.directory / f"{h & 0xFFFFFFFFFFFFFFFF:016x}.pt").unlink(missing_ok=True)
        self._on_disk.clear()
        self._memory.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
