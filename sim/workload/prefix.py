"""Prefix identity as block hashes, for prefix-caching studies without token ids.

A request's ``block_hashes`` has one id per ``hash_block_size`` prompt tokens (the last block
may be partial), and equal ids at equal positions mean a shared prefix, exactly like
Mooncake's ``hash_ids``. Ids are plain integers, unique per (content, position) chain, so a
prefix cache can key blocks by them directly.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def num_blocks(length: int, block_size: int) -> int:
    """Blocks covering ``length`` tokens, counting a partial last block (Mooncake's rule)."""
    return -(-length // block_size)


def synthetic_prefix_hashes(
    choices: np.ndarray,
    prompt_lens: np.ndarray,
    prefix_len: int,
    block_size: int,
    num_prefixes: int,
) -> list[list[int]]:
    """Block hashes for prompts that start with one of ``num_prefixes`` shared system prompts.

    Request ``i`` starts with prefix ``choices[i]`` of ``prefix_len`` tokens. Its first
    ``prefix_len // block_size`` blocks (the full blocks inside the prefix) get that prefix's
    shared ids; every later block, including one that straddles the end of the prefix, holds
    request-specific tokens and gets a fresh id. Prefix ids are ``p * full + j``; fresh ids
    start after the last prefix id.
    """
    full = prefix_len // block_size
    next_id = num_prefixes * full
    result: list[list[int]] = []
    for choice, length in zip(choices.tolist(), prompt_lens.tolist()):
        total = num_blocks(length, block_size)
        ids = list(range(choice * full, choice * full + full))
        ids.extend(range(next_id, next_id + total - full))
        next_id += total - full
        result.append(ids)
    return result


def resize_hashes(
    hashes: Sequence[Sequence[int]], lengths: np.ndarray, block_size: int
) -> list[list[int]]:
    """Fit trace hashes to prompt lengths changed by clipping: drop ids past the new end, and
    give blocks added by a raised minimum fresh ids (new tokens share nothing)."""
    next_id = 1 + max((max(h) for h in hashes if h), default=-1)
    result: list[list[int]] = []
    for ids, length in zip(hashes, lengths.tolist()):
        total = num_blocks(length, block_size)
        fitted = list(ids[:total])
        added = total - len(fitted)
        if added > 0:
            fitted.extend(range(next_id, next_id + added))
            next_id += added
        result.append(fitted)
    return result
