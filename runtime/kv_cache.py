"""The paged KV pool: one tensor holding every layer's K and V blocks, sized from a budget.

The pool is pure memory; which request owns which block is decided by the ``sim.policies``
allocator (the same object the simulator uses), whose block ids index dimension 0 of every
layer's cache. Sizing follows vLLM: on CUDA, ``gpu_memory_utilization`` of the device minus
what weights and a warm-up forward already took; on CPU, an explicit byte budget.
"""

from __future__ import annotations

from dataclasses import dataclass

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
            host = self._copies.pop(rid, None)
            if host is None:
                raise RuntimeError(f"request {rid}: swapped in, but no host copy of its KV exists")
            if len(blocks) > host.shape[2]:
                raise RuntimeError(f"request {rid}: {len(blocks)} blocks to restore, {host.shape[2]} saved")
            index = torch.tensor(blocks, dtype=torch.long, device=self.cache.data.device)
            self.cache.data.index_copy_(2, index, host[:, :, :len(blocks)].to(self.cache.data.device,
                                                                            non_blocking=self._pin))
            moved += len(blocks)
        return moved

    def drop(self, request_id: str) -> None:
        """Forget a host copy (the request was aborted or finished while swapped)."""
        self._copies.pop(request_id, None)
