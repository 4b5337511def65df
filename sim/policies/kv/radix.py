"""SGLang's RadixAttention as a KV allocator: a token-to-KV slot pool plus a radix tree over
token content, so any cached prefix is shared at token granularity (issue #26).

What it models, with the SGLang code it follows (``python/sglang/srt/``; behaviour only, none
of its code):

- **The pool** (``mem_cache/allocator.py``: ``TokenToKVPoolAllocator`` for page size 1,
  ``PagedTokenToKVPoolAllocator`` above it): a free list of page ids, one token's KV a slot,
  ``block_size`` slots a page. A request's pages, in token order, are its ``block_table``.
- **The tree** (``mem_cache/radix_cache.py``: ``TreeNode``, ``RadixCache``): a node is an edge
  of content (a run of the sequence between two depths), the pages holding its KV, its
  children, ``lock_ref`` and ``last_access_time``. ``match_prefix`` walks it and splits an edge
  where a match ends inside it (``_match_prefix_helper``, ``_split_node``); with pages of more
  than one token only whole pages match (``_key_match_paged``, ``page_align_keys``).
- **The logits token** (``managers/schedule_batch.py``: ``Req.adjust_max_prefix_ids``): a
  lookup never covers the last known token, which must be computed to produce logits.
- **Sharing and locks**: a request holds its matched path locked (``inc_lock_ref`` /
  ``dec_lock_ref`` up to the root); locked nodes are never evicted. After every step the newly
  computed prompt tokens of a running request go into the tree (``cache_unfinished_req``), so
  that concurrent requests with the same prefix share them; a request that computed content
  the tree already holds gives its duplicate slots back and takes the tree's (its
  ``req_to_token`` row is rewritten there too). When it finishes, is retracted or aborted,
  its computed tokens with known content are inserted and its locks dropped
  (``cache_finished_req``); slots of content not inserted (unknown content, a partial last
  page) are freed.
- **Eviction** (``RadixCache.evict``, called by ``mem_cache/common.py``'s
  ``evict_from_tree_cache`` before ``alloc_token_slots``): when an allocation needs more free
  slots than are free, least-recently-used unlocked leaves go first, whole nodes at a time; a
  parent whose last child went becomes a candidate.

Content is known from real token ids (``prompt_token_ids``, and outputs through
``all_token_ids()`` when the runtime fills them), or from a trace's ``block_hashes`` (one id per
``hash_block_size`` prompt tokens; token ``t``'s content is ``(block_hashes[t // H], t % H)``).
A request with neither never matches and is never inserted. Trace ids say nothing of a partial
last block: its positions match the same id's positions in any other request.

Where it departs from SGLang, and why it does not matter here:

- access times are a logical clock, not ``time.monotonic()``: the same order, reproducible;
- the free list is a stack (SGLang's page-1 pool hands slots out first-freed-first): which
  slot a token gets changes no timing;
- ``cache_full_blocks`` inserts prompt tokens only, where ``cache_unfinished_req`` inserts
  ``fill_ids`` (which also holds the outputs of a retracted request being prefilled again):
  those outputs went into the tree when it was retracted (``free``), so its new prefill hits
  them anyway;
- LRU only (SGLang's default ``--radix-eviction-policy``); no host tier (HiCache), no swap:
  SGLang retracts and recomputes, so ``can_swap_out`` stays False.
"""

from __future__ import annotations

import heapq
from itertools import islice
from typing import Hashable, Iterable, Optional, Sequence

from sim.policies.kv.base import KVAllocator, KVUsage, PrefixHit
from sim.policies.request import Request


class _Content:
    """The known content of one request, compared by position (a node's depth range).

    ``kind`` 0: ``seq`` is token ids, one per position. ``kind`` H > 0: ``seq`` is a trace's
    block ids, each covering H positions, so a run of H tokens compares as one id (an 8k-token
    prompt of 512-token blocks is 16 comparisons, not 8192). ``length``: positions known."""

    __slots__ = ("kind", "seq", "length")

    def __init__(self, kind: int, seq: Sequence[Hashable], length: int) -> None:
        self.kind = kind
        self.seq = seq
        self.length = length


def _mismatch(a: Sequence[Hashable], b: Sequence[Hashable], lo: int, hi: int) -> int:
    """First index in ``[lo, hi)`` where ``a`` and ``b`` differ, or ``hi``.

    Compares slices (C speed) and bisects on a difference instead of looping per element in
    Python: a shared system prompt of thousands of tokens costs a few slice comparisons."""
    if a is b or a[lo:hi] == b[lo:hi]:
        return hi
    ok, bad = lo, hi  # a[lo:ok] == b[lo:ok]; the first difference is before bad
    while bad - ok > 16:
        mid = (ok + bad) // 2
        if a[ok:mid] == b[ok:mid]:
            ok = mid
        else:
            bad = mid
    while ok < bad and a[ok] == b[ok]:
        ok += 1
    return ok


def _common(a: _Content, b: _Content, lo: int, hi: int) -> int:
    """Depth where ``a`` and ``b`` stop agreeing in ``[lo, hi)`` (both known up to ``hi``)."""
    kind = a.kind
    if kind != b.kind:
        return lo
    if kind == 0:
        return _mismatch(a.seq, b.seq, lo, hi)
    first, last = lo // kind, (hi - 1) // kind + 1
    k = _mismatch(a.seq, b.seq, first, last)
    if k == last:
        return hi
    return max(lo, k * kind)


def _child_key(c: _Content, depth: int, page: int) -> Hashable:
    """The key a node's children are found by: the content of the first page at ``depth``.
    (SGLang's ``get_child_key``: the first token id, or the first page's tuple of ids.) Trace
    content is tagged so it can never equal a token id's key."""
    seq = c.seq
    h = c.kind
    if page == 1:
        return seq[depth] if h == 0 else ("h", h, seq[depth // h])
    if h == 0:
        return tuple(seq[depth:depth + page])
    return ("h", h, tuple(seq[depth // h:(depth + page - 1) // h + 1]))


class _Node:
    """A radix-tree node: the content of depths ``[start, end)`` (a slice of ``content``) and
    the pages holding it. A plain class with slots: a long run makes one per cached edge."""

    __slots__ = ("node_id", "parent", "children", "key", "content", "start", "end", "pages",
                 "lock_ref", "last_access", "dead")

    def __init__(self, node_id: int, parent: Optional[_Node], key: Hashable,
                 content: Optional[_Content], start: int, end: int, pages: list[int],
                 last_access: int) -> None:
        self.node_id = node_id
        self.parent = parent
        self.children: dict[Hashable, _Node] = {}
        self.key = key
        self.content = content
        self.start = start
        self.end = end
        self.pages = pages
        #: Requests holding this node (on their locked path): not evictable while > 0.
        self.lock_ref = 0
        self.last_access = last_access
        self.dead = False  # evicted

    def __repr__(self) -> str:
        return (f"_Node(id={self.node_id}, [{self.start}, {self.end}), pages={len(self.pages)}, "
                f"lock_ref={self.lock_ref}, children={len(self.children)})")


class _Held:
    """What one request holds: its pages in token order; the first ``tree_len`` tokens' pages
    belong to the tree along the locked path ending at ``node``, the rest are private.
    ``prompt_known``: prompt tokens with known content (page-aligned), the most that
    ``cache_full_blocks`` can insert."""

    __slots__ = ("pages", "node", "tree_len", "prompt_known")

    def __init__(self, pages: list[int], node: _Node, tree_len: int, prompt_known: int) -> None:
        self.pages = pages
        self.node = node
        self.tree_len = tree_len
        self.prompt_known = prompt_known


class RadixAllocator(KVAllocator):
    """SGLang's token pool and radix prefix cache (see the module docstring).

    Args:
        num_slots: KV slots (tokens) of the pool; whole pages of ``block_size`` are used.
        block_size: SGLang's ``page_size`` (1 by default, as SGLang's): allocations round up
            to whole pages and only whole pages are matched and inserted.
        prefix_caching: False is ``--disable-radix-cache``: a plain token pool.

    ``num_free_slots`` is what an allocation can get: empty slots plus cached slots nobody
    holds (``evictable``), as SGLang's scheduler counts room (``PrefillAdder.rem_total_tokens``:
    ``available_size() + evictable_size()``) and as the paged allocator counts its
    cached-but-free blocks. ``num_unused_slots`` and ``num_evictable_slots`` split it.
    """

    def __init__(self, num_slots: int, block_size: int = 1, prefix_caching: bool = True) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        num_pages = num_slots // block_size
        if num_pages < 1:
            raise ValueError(f"a pool of {num_slots} slots holds no page of {block_size}")
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.num_pages = num_pages
        #: Empty pages; allocation takes from the end (page 0 first on a fresh pool).
        self.free_pages: list[int] = list(range(num_pages - 1, -1, -1))
        self.root = _Node(0, None, None, None, 0, 0, [], 0)
        self._held: dict[str, _Held] = {}
        #: Lazy min-heap of (last_access, node_id, node) over evictable leaves; an entry is
        #: stale once its node is touched, locked, gains a child or is gone (checked on pop).
        self._heap: list[tuple[int, int, _Node]] = []
        self._clock = 0  # logical access time: orders LRU exactly and reproducibly
        self._next_id = 1
        self.num_tree_nodes = 0
        self._tree_pages = 0
        self._evictable_pages = 0  # tree pages with lock_ref 0 (a whole unlocked subtree)
        #: The last lookup's hit and the node it ends at, so ``allocate`` locks it without a
        #: second walk (a scheduler allocates right after it looks up).
        self._last_hit: Optional[tuple[PrefixHit, _Node]] = None
        self.num_prefix_queries = 0
        self.num_prefix_hits = 0
        #: Cached slots evicted to make room.
        self.num_evicted_slots = 0

    # --- sizes ----------------------------------------------------------------------------
    @property
    def num_slots(self) -> int:
        return self.num_pages * self.block_size

    @property
    def num_free_slots(self) -> int:
        """Slots an allocation can get: empty ones plus unlocked cached ones (evicted on
        demand). Cached content nobody holds counts as free, as in the paged allocator."""
        return (len(self.free_pages) + self._evictable_pages) * self.block_size

    @property
    def num_unused_slots(self) -> int:
        """Empty slots (SGLang's ``token_to_kv_pool_allocator.available_size()``)."""
        return len(self.free_pages) * self.block_size

    @property
    def num_evictable_slots(self) -> int:
        """Cached slots no request holds (SGLang's ``tree_cache.evictable_size()``)."""
        return self._evictable_pages * self.block_size

    @property
    def num_cached_slots(self) -> int:
        """Slots in the radix tree, held or not."""
        return self._tree_pages * self.block_size

    def num_held_slots(self, req: Request) -> int:
        held = self._held.get(req.request_id)
        return len(held.pages) * self.block_size if held is not None else 0

    def block_table(self, req: Request) -> list[int]:
        """Page ids in token order (slot ids at page size 1). Live: a duplicate computed
        concurrently is replaced by the tree's page in place when the request is cached."""
        held = self._held.get(req.request_id)
        return held.pages if held is not None else []

    # --- content --------------------------------------------------------------------------
    def _content(self, req: Request, prompt_only: bool) -> Optional[_Content]:
        """What is known of ``req``'s tokens (``prompt_only``: its prompt's), or None."""
        # Lists only: slices of a list and a tuple (or array) never compare equal.
        ids = req.prompt_token_ids
        if ids is not None:
            if not prompt_only and req.output_token_ids:
                ids = req.all_token_ids()
            elif type(ids) is not list:
                ids = list(ids)
            return _Content(0, ids, len(ids))
        hashes = req.block_hashes
        if hashes is not None and req.hash_block_size > 0:
            h = req.hash_block_size
            n = min(req.prompt_len, len(hashes) * h)
            if type(hashes) is not list:
                hashes = list(hashes)
            return _Content(h, hashes, n) if n > 0 else None
        return None

    def _prompt_known(self, req: Request) -> int:
        content = self._content(req, prompt_only=True) if self.prefix_caching else None
        return 0 if content is None else content.length // self.block_size * self.block_size

    # --- the tree -------------------------------------------------------------------------
    def _walk(self, content: _Content, limit: int, touch: bool) -> tuple[_Node, int, list[int]]:
        """Longest cached prefix of ``content`` up to depth ``limit`` (page-aligned):
        (deepest node fully matched, depth matched, pages). ``touch``: as SGLang's
        ``_match_prefix_helper``, split the edge a match ends inside and refresh access times;
        without it nothing changes and the depth may end inside an edge."""
        page = self.block_size
        node = self.root
        depth = 0
        pages: list[int] = []
        now = 0
        if touch:
            self._clock += 1
            now = self._clock
        while depth + page <= limit:
            child = node.children.get(_child_key(content, depth, page))
            if child is None:
                break
            end = child.end
            m = self._agrees_to(child, content, depth, limit)
            if m <= depth:
                break
            if not touch:
                depth = m
                if m < end:
                    break
                node = child
                continue
            if m < end:
                child = self._split(child, m)
            child.last_access = now
            pages.extend(child.pages)
            node = child
            depth = m
            if m < end:
                break
        if touch and node is not self.root:
            self._push_if_evictable(node)
        return node, depth, pages

    def _agrees_to(self, child: _Node, content: _Content, depth: int, limit: int) -> int:
        """How deep ``content`` agrees with ``child``'s edge from ``depth`` (at most ``limit``
        and the edge's end), in whole pages."""
        cc = child.content
        assert cc is not None  # only the root has no content
        end = child.end
        m = _common(cc, content, depth, end if end < limit else limit)
        page = self.block_size
        return m if page == 1 else depth + (m - depth) // page * page

    def _split(self, child: _Node, depth: int) -> _Node:
        """Cut ``child``'s edge at ``depth``: a new node takes the upper part and keeps
        ``child`` (whose end, children and identity do not change) as its one child."""
        page = self.block_size
        k = (depth - child.start) // page
        parent = child.parent
        assert parent is not None and child.content is not None
        upper = _Node(self._next_id, parent, child.key, child.content, child.start, depth,
                      child.pages[:k], child.last_access)
        self._next_id += 1
        upper.lock_ref = child.lock_ref
        child.pages = child.pages[k:]
        child.start = depth
        child.key = _child_key(child.content, depth, page)
        child.parent = upper
        upper.children[child.key] = child
        parent.children[upper.key] = upper
        self.num_tree_nodes += 1
        return upper

    def _insert(self, held: _Held, content: _Content, length: int) -> None:
        """Put ``held``'s tokens ``[tree_len, length)`` into the tree below its locked path
        and extend the lock over them (SGLang's ``insert`` then ``inc_lock_ref`` on the new
        last node). Where the tree already holds that content, the request's own pages are
        freed and the tree's take their place in its table."""
        page = self.block_size
        self._clock += 1
        now = self._clock
        pages = held.pages
        node = held.node
        depth = held.tree_len
        path: list[_Node] = []
        while depth < length:
            key = _child_key(content, depth, page)
            child = node.children.get(key)
            if child is None:
                new = _Node(self._next_id, node, key, content, depth, length,
                            pages[depth // page:length // page], now)
                self._next_id += 1
                node.children[key] = new
                self.num_tree_nodes += 1
                self._tree_pages += len(new.pages)
                self._evictable_pages += len(new.pages)
                path.append(new)
                node = new
                depth = length
                break
            end = child.end
            m = self._agrees_to(child, content, depth, length)
            if m <= depth:  # the key matched a whole first page, so at least that agrees
                raise AssertionError(f"radix tree child key matched but content did not at {depth}")
            if m < end:
                child = self._split(child, m)
            child.last_access = now
            a, b = depth // page, m // page
            self.free_pages.extend(pages[a:b])  # computed twice: keep the tree's copy
            pages[a:b] = child.pages
            path.append(child)
            node = child
            depth = m
        for n in path:
            if n.lock_ref == 0:
                self._evictable_pages -= len(n.pages)
            n.lock_ref += 1
        held.node = node
        held.tree_len = length
        self._touch(held.node.parent, now)  # the rest of the path (SGLang inserts from the root)

    def _touch(self, node: Optional[_Node], now: int) -> None:
        """Refresh the access time of ``node`` and its ancestors. Only for a path its request
        holds locked: a locked node is no eviction candidate, and unlocking pushes it anew."""
        root = self.root
        while node is not None and node is not root:
            node.last_access = now
            node = node.parent

    def _lock(self, node: _Node) -> None:
        """``inc_lock_ref``: one more holder on every node from ``node`` up to the root."""
        root = self.root
        while node is not root:
            if node.lock_ref == 0:
                self._evictable_pages -= len(node.pages)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def _unlock(self, node: _Node) -> None:
        """``dec_lock_ref``: one holder fewer up to the root; freed leaves become candidates."""
        root = self.root
        while node is not root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable_pages += len(node.pages)
                if not node.children:
                    self._push(node)
            node = node.parent  # type: ignore[assignment]

    def _push_if_evictable(self, node: _Node) -> None:
        if node.lock_ref == 0 and not node.children:
            self._push(node)

    def _push(self, node: _Node) -> None:
        heap = self._heap
        heapq.heappush(heap, (node.last_access, node.node_id, node))
        if len(heap) > 2 * self.num_tree_nodes + 1024:
            self._rebuild_heap()  # stale entries outnumber nodes: amortised O(1) a push

    def _rebuild_heap(self) -> None:
        heap = []
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            elif node.lock_ref == 0:
                heap.append((node.last_access, node.node_id, node))
        heapq.heapify(heap)
        self._heap = heap

    def _evict(self, num_pages: int) -> int:
        """Free at least ``num_pages`` cached pages, least recently used unlocked leaves first
        (whole nodes, as ``RadixCache.evict``); returns pages freed. The caller checks that
        enough are evictable."""
        heap = self._heap
        root = self.root
        freed = 0
        while freed < num_pages and heap:
            t, _, node = heapq.heappop(heap)
            if node.dead or node.lock_ref or node.children or node.last_access != t:
                continue  # stale entry
            parent = node.parent
            assert parent is not None
            del parent.children[node.key]
            n = len(node.pages)
            self.free_pages.extend(node.pages)
            node.pages = []
            node.dead = True
            freed += n
            self._evictable_pages -= n
            self._tree_pages -= n
            self.num_tree_nodes -= 1
            if parent is not root and not parent.children and parent.lock_ref == 0:
                self._push(parent)
        self.num_evicted_slots += freed * self.block_size
        if freed < num_pages:
            raise RuntimeError(f"asked to evict {num_pages} pages, only {freed} could go")
        return freed

    def evict(self, num_slots: int) -> int:
        """Evict unlocked cached content, LRU leaves first, until at least ``num_slots`` slots
        are freed or nothing unlocked is left (whole nodes, so possibly more); returns the
        slots freed. Allocation evicts by itself; this is SGLang's ``tree_cache.evict`` for
        callers that want room now (``reset``-like flushes, tests)."""
        page = self.block_size
        want = min(-(-num_slots // page), self._evictable_pages)
        return self._evict(want) * page if want > 0 else 0

    def _room(self, need: int) -> bool:
        """Make ``need`` pages free, evicting if the free list is short; False (nothing
        changed) when even evicting every unlocked page would not do."""
        short = need - len(self.free_pages)
        if short <= 0:
            return True
        if short > self._evictable_pages:
            return False
        self._evict(short)
        return True

    def _take(self, pages: list[int], count: int) -> None:
        """Move ``count`` (> 0: ``free[-0:]`` is the whole list) pages from the free list."""
        assert count > 0
        free = self.free_pages
        taken = free[-count:]
        del free[-count:]
        taken.reverse()  # ascending on a fresh pool: tables read naturally in tests and traces
        pages.extend(taken)

    # --- prefix cache ---------------------------------------------------------------------
    @property
    def caches_prefixes(self) -> bool:
        return self.prefix_caching

    def _lookup_target(self, req: Request) -> Optional[tuple[_Content, int]]:
        """``req``'s content and the deepest match allowed: every known token but the last
        (``adjust_max_prefix_ids``), in whole pages; None when nothing can match."""
        content = self._content(req, prompt_only=False) if self.prefix_caching else None
        if content is None:
            return None
        limit = min(req.num_tokens - 1, content.length) // self.block_size * self.block_size
        return (content, limit) if limit > 0 else None

    def lookup_prefix(self, req: Request) -> PrefixHit:
        """Longest cached prefix at token granularity (whole pages above page size 1), never
        the last known token. Refreshes the matched nodes' access time and splits the edge
        the match ends inside, as SGLang's ``match_prefix``."""
        target = None
        if not req.num_computed_tokens and req.request_id not in self._held:
            target = self._lookup_target(req)
        if target is None:
            return PrefixHit()
        node, depth, pages = self._walk(target[0], target[1], touch=True)
        hit = PrefixHit(pages, depth)
        self._last_hit = (hit, node) if depth else None
        return hit

    def cached_prefix_blocks(self, req: Request) -> int:
        # Read-only (see the base class): no split, no access time, no statistic.
        target = self._lookup_target(req)
        if target is None:
            return 0
        return self._walk(target[0], target[1], touch=False)[1] // self.block_size

    def record_prefix_query(self, req: Request, hit: PrefixHit) -> None:
        if not self.prefix_caching:
            return
        self.num_prefix_queries += req.prompt_len
        self.num_prefix_hits += hit.num_tokens

    def cache_full_blocks(self, req: Request) -> None:
        """SGLang's ``cache_unfinished_req``: insert the request's newly computed prompt tokens
        (whole pages) so concurrent requests share them. Outputs wait for ``free``
        (``cache_finished_req``); a decode step returns after two comparisons."""
        if not self.prefix_caching:
            return
        held = self._held.get(req.request_id)
        if held is None:
            return
        page = self.block_size
        limit = req.num_computed_tokens // page * page
        if limit > held.prompt_known:
            limit = held.prompt_known
        if limit <= held.tree_len:
            return
        content = self._content(req, prompt_only=True)
        assert content is not None  # prompt_known > 0
        self._insert(held, content, limit)

    def _hit_node(self, req: Request, prefix: PrefixHit) -> Optional[_Node]:
        """The node ``prefix`` ends at: the last lookup's, or found again (a hit from an older
        lookup whose content was evicted meanwhile is refused: None)."""
        last = self._last_hit
        if last is not None and last[0] is prefix and not last[1].dead:
            return last[1]
        content = self._content(req, prompt_only=False)
        if content is None:
            return None
        node, depth, pages = self._walk(content, prefix.num_tokens, touch=True)
        if depth != prefix.num_tokens or pages != prefix.block_ids:
            return None
        return node

    # --- allocation -----------------------------------------------------------------------
    def can_allocate(self, req: Request, num_new_tokens: int,
                     prefix: Optional[PrefixHit] = None) -> bool:
        page = self.block_size
        room = len(self.free_pages) + self._evictable_pages
        if prefix is None or not prefix.num_tokens:
            held = self._held.get(req.request_id)
            have = len(held.pages) if held is not None else 0
            return -(-(req.num_computed_tokens + num_new_tokens) // page) - have <= room
        node = self._hit_node(req, prefix)
        if node is None or req.request_id in self._held:
            return False
        total = req.num_computed_tokens + prefix.num_tokens + num_new_tokens
        need = -(-total // page) - len(prefix.block_ids)
        root = self.root
        walk: Optional[_Node] = node
        while walk is not None and walk is not root:  # locking the hit takes its unlocked pages out of the room
            if walk.lock_ref == 0:
                room -= len(walk.pages)
            walk = walk.parent
        return need <= room

    def allocate(self, req: Request, num_new_tokens: int,
                 prefix: Optional[PrefixHit] = None) -> bool:
        if prefix is None or not prefix.num_tokens:  # the hot path: every decode, every step
            return self._grow(req, req.num_computed_tokens + num_new_tokens)
        page = self.block_size
        rid = req.request_id
        if rid in self._held:
            raise ValueError(f"request {rid}: a prefix hit is for its first allocation only")
        node = self._hit_node(req, prefix)
        if node is None:
            return False
        self._lock(node)  # first, so that making room cannot evict the hit
        total = req.num_computed_tokens + prefix.num_tokens + num_new_tokens
        need = -(-total // page) - len(prefix.block_ids)
        if need > 0 and not self._room(need):
            self._unlock(node)
            return False
        held = self._held[rid] = _Held(list(prefix.block_ids), node, prefix.num_tokens,
                                       self._prompt_known(req))
        if need > 0:
            self._take(held.pages, need)
        return True

    def _grow(self, req: Request, num_tokens: int) -> bool:
        """Hold room for ``num_tokens`` tokens of ``req`` (new pages at its end, evicting if
        the free list is short); False, changing nothing, when even eviction cannot."""
        held = self._held.get(req.request_id)
        need = -(-num_tokens // self.block_size) - (len(held.pages) if held is not None else 0)
        if need <= 0:
            return True
        if need > len(self.free_pages) and not self._room(need):
            return False
        if held is None:
            held = self._held[req.request_id] = _Held([], self.root, 0, self._prompt_known(req))
        self._take(held.pages, need)
        return True

    def allocate_decodes(self, reqs: Sequence[Request], start: int, limit: int) -> int:
        # ``allocate(req, 1)`` per request without its prefix-hit dispatch: one call a step.
        grow = self._grow
        count = 0
        for req in islice(reqs, start, start + limit):
            computed = req.num_computed_tokens
            if req.prompt_len + req.num_output_tokens - computed != 1 or not grow(req, computed + 1):
                break
            count += 1
        return count

    def free(self, req: Request) -> None:
        """SGLang's ``cache_finished_req`` (also on retraction and abort): insert the computed
        tokens whose content is known (whole pages), drop the request's locks, free the rest."""
        held = self._held.pop(req.request_id, None)
        if held is None:
            return
        page = self.block_size
        if self.prefix_caching:
            content = self._content(req, prompt_only=False)
            length = 0
            if content is not None:
                length = min(req.num_computed_tokens, content.length, len(held.pages) * page)
                length = length // page * page
            if length > held.tree_len:
                self._insert(held, content, length)  # type: ignore[arg-type]
            elif held.node is not self.root:
                # SGLang's insert touches the whole path even when nothing is new.
                self._clock += 1
                self._touch(held.node, self._clock)
            if held.node is not self.root:
                self._unlock(held.node)
        self.free_pages.extend(held.pages[held.tree_len // page:])

    # --- accounting -----------------------------------------------------------------------
    def usage(self, holders: Iterable[Request], waiting: Optional[Request]) -> KVUsage:
        # Held tree pages count once, as token states; each holder adds its private pages.
        # Unlocked cached pages are free (evictable on demand), as in the paged allocator.
        page = self.block_size
        tokens = (self._tree_pages - self._evictable_pages) * page
        reserved = internal = 0
        get = self._held.get
        for req in holders:
            held = get(req.request_id)
            if held is None:
                continue
            size = len(held.pages) * page
            shared = held.tree_len
            final = req.prompt_len + req.max_output_tokens - 1
            will_use = max(min(size, final), shared)
            computed = min(max(req.num_computed_tokens, shared), will_use)
            tokens += computed - shared
            reserved += will_use - computed
            internal += size - will_use
        return KVUsage(tokens, reserved, internal, 0, self.num_free_slots)

    def check_invariants(self) -> None:
        """Every page exactly once in the free list, a tree node or a request's private tail;
        every lock_ref equal to the requests whose locked path runs through the node; counts,
        child keys, content along every path and the eviction heap consistent."""
        page = self.block_size
        root = self.root
        owner: dict[int, str] = {}

        def own(p: int, where: str) -> None:
            assert 0 <= p < self.num_pages, f"page {p} out of range ({where})"
            assert p not in owner, f"page {p} in {owner[p]} and {where}"
            owner[p] = where

        for p in self.free_pages:
            own(p, "free list")
        holders: dict[int, int] = {}
        for rid, held in self._held.items():
            assert held.tree_len % page == 0 and held.tree_len == held.node.end, rid
            assert not held.node.dead, f"request {rid} holds an evicted node"
            path_pages: list[int] = []
            node = held.node
            while node is not root:
                holders[id(node)] = holders.get(id(node), 0) + 1
                path_pages[:0] = node.pages
                assert node.parent is not None
                node = node.parent
            assert held.pages[:held.tree_len // page] == path_pages, f"request {rid}: table != path"
            for p in held.pages[held.tree_len // page:]:
                own(p, f"request {rid}")
        nodes = tree_pages = evictable = 0
        leaves: list[_Node] = []
        stack: list[tuple[_Node, list[_Node]]] = [(root, [])]
        while stack:
            node, ancestors = stack.pop()
            for key, child in node.children.items():
                assert child.parent is node and not child.dead and child.key == key
                assert child.start == node.end < child.end, child
                assert child.content is not None and child.end <= child.content.length
                assert key == _child_key(child.content, child.start, page), child
                assert (child.end - child.start) % page == 0
                assert len(child.pages) == (child.end - child.start) // page, child
                assert child.lock_ref == holders.get(id(child), 0), \
                    f"{child}: lock_ref != {holders.get(id(child), 0)} holders"
                assert child.lock_ref <= node.lock_ref or node is root
                for a in ancestors + [child]:
                    assert a.content is not None
                    assert _common(a.content, child.content, a.start, a.end) == a.end, \
                        f"{child} disagrees with ancestor {a}"
                for p in child.pages:
                    own(p, f"node {child.node_id}")
                nodes += 1
                tree_pages += len(child.pages)
                if child.lock_ref == 0:
                    evictable += len(child.pages)
                    if not child.children:
                        leaves.append(child)
                stack.append((child, ancestors + [child]))
        assert len(owner) == self.num_pages, f"{self.num_pages - len(owner)} pages leaked"
        assert nodes == self.num_tree_nodes, (nodes, self.num_tree_nodes)
        assert tree_pages == self._tree_pages, (tree_pages, self._tree_pages)
        assert evictable == self._evictable_pages, (evictable, self._evictable_pages)
        if not self.prefix_caching:
            assert nodes == 0
        live = {(t, nid) for t, nid, n in self._heap if not n.dead}
        for leaf in leaves:  # a leaf missing from the heap could never be evicted
            assert (leaf.last_access, leaf.node_id) in live, f"{leaf} has no heap entry"
