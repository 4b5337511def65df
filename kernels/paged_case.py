"""Random paged K/V caches for tests and benchmarks, built the way a block allocator leaves them.

Physical blocks are handed out in shuffled order (so a kernel that assumes contiguous blocks
fails), spare blocks and stale slots hold random data (so a kernel that reads past a sequence's
length fails), and block-table padding points at real but unrelated blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.reference import gather_kv

# (atol, rtol) when comparing attention outputs over N(0, 1) K/V (|out| up to ~5): both sides
# accumulate in float32 and round once to the storage dtype, so may differ by an ulp or two.
TOLERANCE = {torch.float32: (2e-5, 1e-5), torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2)}


@dataclass
class PagedKV:
    """A filled paged cache plus the tables that say which sequence owns which blocks."""

    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor

    @property
    def block_size(self) -> int:
        return self.k_cache.shape[1]

    def dense(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Contiguous ``[seq_len, num_kv_heads, head_dim]`` K and V of sequence ``i``."""
        n = int(self.seq_lens[i])
        return gather_kv(self.k_cache, self.block_tables[i], n), gather_kv(self.v_cache, self.block_tables[i], n)

    def kv_bytes(self) -> int:
        """Bytes of K and V that attention over the whole context must read."""
        per_token = 2 * self.k_cache.shape[2] * self.k_cache.shape[3] * self.k_cache.element_size()
        return int(self.seq_lens.sum()) * per_token


def random_paged_kv(seq_lens: list[int], num_kv_heads: int, head_dim: int, block_size: int,
                    dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                    seed: int = 0, spare_blocks: int = 2, shuffle: bool = True) -> PagedKV:
    """Build a cache holding ``len(seq_lens)`` sequences of random K/V, N(0, 1) entries."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(per_seq) + spare_blocks
    width = max(per_seq, default=0) + 1  # one padding column, as a batch's table usually has
    order = torch.randperm(num_blocks, generator=gen) if shuffle else torch.arange(num_blocks)
    tables = torch.randint(0, num_blocks, (len(seq_lens), width), generator=gen)
    used = 0
    for i, nb in enumerate(per_seq):
        tables[i, :nb] = order[used:used + nb]
        used += nb
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    # Fill on the target device: a 32K-context benchmark cache is gigabytes.
    dev_gen = torch.Generator(device=device).manual_seed(seed + 1)
    k_cache = torch.randn(shape, generator=dev_gen, device=device, dtype=dtype)
    v_cache = torch.randn(shape, generator=dev_gen, device=device, dtype=dtype)
    return PagedKV(k_cache, v_cache, tables.to(device=device, dtype=torch.int32),
                   torch.tensor(seq_lens, dtype=torch.int32, device=device))


def sdpa_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Independent oracle: SDPA on one sequence's contiguous K/V, in float64.

    q ``[q_len, num_heads, head_dim]`` are the *last* q_len positions of the ``[seq_len, ...]``
    K/V, so query ``j`` sees keys ``0 .. seq_len - q_len + j`` (plain causal when they match).
    """
    q_len, num_heads, _ = q.shape
    seq_len, num_kv_heads, _ = k.shape
    group = num_heads // num_kv_heads
    qd = q.double().transpose(0, 1)
    kd = k.double().repeat_interleave(group, dim=1).transpose(0, 1)
    vd = v.double().repeat_interleave(group, dim=1).transpose(0, 1)
    q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)
    visible = torch.arange(seq_len, device=q.device)[None, :] <= q_pos[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, attn_mask=visible, scale=scale)
    return out.transpose(0, 1)
