"""Block identity for the prefix cache: a hash chain over full blocks.

A block's hash covers its parent's hash and its own content, so equal hashes mean equal
prefixes, not just equal blocks. Content is either real token ids (runtime) or, when only
lengths are known, a trace's prefix ids (Mooncake ``hash_ids``: one id per ``hash_block_size``
tokens) plus the block's offset inside them. Python's hash of ints and tuples is not salted, so
hashes are reproducible across runs.
"""

from __future__ import annotations

from typing import Optional

from sim.policies.request import Request

NO_PARENT = -1


def has_block_content(req: Request) -> bool:
    """Whether any block of ``req`` can be hashed: a length-only request (no token ids, no trace
    ids) has nothing to look up or publish, so the prefix cache skips it outright."""
    return req.prompt_token_ids is not None or req.block_hashes is not None


def block_content_key(req: Request, index: int, block_size: int) -> Optional[tuple]:
    """What makes block ``index`` of ``req`` unique, or None when it is not known (not full,
    not covered by trace ids, or a length-only request)."""
    start = index * block_size
    end = start + block_size
    if req.prompt_token_ids is not None:
        if end > req.num_tokens:
            return None
        if end <= req.prompt_len:
            return tuple(req.prompt_token_ids[start:end])
        return tuple(req.all_token_ids()[start:end])
    if req.block_hashes is None or end > req.prompt_len:
        return None
    hbs = req.hash_block_size
    first, last = start // hbs, (end - 1) // hbs
    if last >= len(req.block_hashes):
        return None
    return (tuple(req.block_hashes[first:last + 1]), start % hbs)


def chain_hash(parent: int, content: tuple) -> int:
    return hash((parent, content))


def request_block_hashes(req: Request, num_blocks: int, block_size: int) -> list[int]:
    """Hashes of the first ``num_blocks`` full blocks of ``req`` (fewer when content runs out).

    Memoised on the request, since lookups repeat every time a waiting request is considered.
    """
    cache: list[int] = req.block_hash_cache
    if req.block_hash_size != block_size:
        cache.clear()
        req.block_hash_size = block_size
    while len(cache) < num_blocks:
        content = block_content_key(req, len(cache), block_size)
        if content is None:
            break
        parent = cache[-1] if cache else NO_PARENT
        cache.append(chain_hash(parent, content))
    return cache[:num_blocks]
