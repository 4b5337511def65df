"""The paged KV pool: one tensor holding every layer's K and V blocks, sized from a budget.

The pool is pure memory; which request owns which block is decided by the ``sim.policies``
allocator (the same object the simulator uses), whose block ids index dimension 0 of every
layer's cache. Sizing follows vLLM: on CUDA, ``gpu_memory_utilization`` of the device minus
what weights and a warm-up forward already took; on CPU, an explicit byte budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.config import ModelConfig
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
