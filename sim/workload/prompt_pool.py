"""A load tool's pool of distinct prompts, reused until the run ends (``workload.prompt_pool``).

Why: aiperf and genai-perf do not send a fresh prompt per request. They build
``--num-dataset-entries`` distinct payloads (default 100; aiperf's
``common/config/config_defaults.py``: ``NUM_DATASET_ENTRIES = 100``) and draw every request from
them, by default in ``shuffle`` order for synthetic data (each pass through the pool in a new
random order; ``random`` draws with replacement, ``sequential`` cycles in order; aiperf's
``--dataset-sampling-strategy``). A request that repeats an entry repeats its whole prompt, so a
server with prefix caching on (vLLM's default, SGLang's radix cache) serves all of it but the
last partial block from cache. A run of 20 x N requests over 100 entries is then mostly cache
hits, and its measured TTFT and throughput say little about prefill. kvplan replays such a run
only if it knows the pool.

An entry is a prompt with its own lengths (drawn once, as the tool draws ISL and OSL per
entry); its block ids are its own (``entry_hashes``), shared with nothing but its repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.workload.prefix import num_blocks

#: aiperf's ``--dataset-sampling-strategy`` values (``shuffle`` is its default for synthetic data).
SAMPLINGS = ("shuffle", "random", "sequential")
#: aiperf's and genai-perf's ``--num-dataset-entries`` default.
DEFAULT_ENTRIES = 100


@dataclass(frozen=True)
class PromptPool:
    """``entries`` distinct prompts; each request is one of them, drawn by ``sampling``."""

    entries: int
    sampling: str = "shuffle"
    hash_block_size: int = 16


def entry_order(n: int, pool: PromptPool, rng: np.random.Generator) -> np.ndarray:
    """The entry each of ``n`` requests sends, in send order.

    ``shuffle``: consecutive passes, each a fresh permutation of all entries (every entry once per
    pass); ``random``: independent uniform draws; ``sequential``: 0, 1, ..., entries - 1, 0, ...
    """
    k = pool.entries
    if pool.sampling == "sequential":
        return np.arange(n, dtype=np.int64) % k
    if pool.sampling == "random":
        return rng.integers(0, k, size=n, dtype=np.int64)
    if pool.sampling != "shuffle":
        raise ValueError(f"sampling {pool.sampling!r} is not one of {', '.join(SAMPLINGS)}")
    passes = -(-n // k) if n else 0
    order = np.concatenate([rng.permutation(k) for _ in range(passes)]) if passes else np.zeros(0, np.int64)
    return order[:n].astype(np.int64)


def entry_hashes(prompt_lens: np.ndarray, block_size: int, first_id: int = 0) -> list[list[int]]:
    """Block ids of each entry's prompt: fresh ids per entry (nothing shared between entries),
    so two requests match exactly when they send the same entry."""
    out: list[list[int]] = []
    next_id = first_id
    for length in np.asarray(prompt_lens).tolist():
        total = num_blocks(int(length), block_size)
        out.append(list(range(next_id, next_id + total)))
        next_id += total
    return out


def hit_bound(order: np.ndarray, prompt_lens: np.ndarray, block_size: int) -> int:
    """Prompt blocks an unlimited prefix cache serves: each repeat of an entry hits every full
    block before its last token (a partial block is never cached, and the last prompt token is
    always computed, for its logits: vLLM's ``max_cache_hit_length = prompt_len - 1``)."""
    full = (np.asarray(prompt_lens, dtype=np.int64) - 1) // block_size
    seen = np.zeros(len(full), dtype=bool)
    hits = 0
    for e in np.asarray(order).tolist():
        if seen[e]:
            hits += int(full[e])
        seen[e] = True
    return hits


__all__ = ["DEFAULT_ENTRIES", "PromptPool", "SAMPLINGS", "entry_hashes", "entry_order", "hit_bound"]
