"""The engine's own thread: the only code that touches ``LLMEngine``, which is not thread-safe.

HTTP handlers (on the asyncio thread) talk to it through one command queue (add, abort, call)
and hear back through a per-request ``asyncio.Queue``, fed with ``call_soon_threadsafe``. The
thread drains the commands between steps, so a request that arrives while others are decoding
joins the running batch at the very next step: continuous batching over HTTP. After each step it
sends every live request the tokens it emitted in that step (read from the scheduler's
``Request``, which keeps its output tokens through preemption), and the final ``Delta`` with
the finish reason to those that ended.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from runtime.llm_engine import LLMEngine
from runtime.sampling import SamplingParams
from runtime.serve.metrics import ServerMetrics
from sim.errors import KvplanError
from sim.policies import Request

log = logging.getLogger("kvplan.serve")

#: Finish reason of the sentinel a handler's disconnect watcher puts in its own queue.
DISCONNECTED = "disconnect"


@dataclass
class Delta:
    """What one request's handler hears after a step: its new tokens and, on the last one, why
    it ended ("stop", "length", "abort", "rejected", "error", or DISCONNECTED)."""

    token_ids: list[int] = field(default_factory=list)
    finish_reason: Optional[str] = None
    error: Optional[str] = None  # why it was rejected, or what broke

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestStream:
    """The handler's end of one request: ``await next()`` for tokens, ``abort()`` to give up."""

    def __init__(self, engine_loop: "EngineLoop", request_id: str) -> None:
        self.engine_loop = engine_loop
        self.request_id = request_id
        self.queue: asyncio.Queue[Delta] = asyncio.Queue()
        self.finished = False

    async def next(self) -> Delta:
        """The next delta, merged with any others already queued (a slow reader catches up in
        one chunk instead of falling further behind)."""
        delta = await self.queue.get()
        while not delta.finished and not self.queue.empty():
            more = self.queue.get_nowait()
            delta = Delta(delta.token_ids + more.token_ids, more.finish_reason, more.error)
        if delta.finished and delta.finish_reason != DISCONNECTED:
            self.finished = True
        return delta

    def abort(self) -> None:
        """Stop the request in the engine (its KV blocks return to the pool); idempotent."""
        if not self.finished:
            self.finished = True
            self.engine_loop.abort(self.request_id)


@dataclass(frozen=True)
class _Inbox:
    """Where one request's deltas go: a queue owned by an event loop."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue


class _Outbox:
    """Deltas gathered during one pass of the engine thread and handed over with one wake-up
    per event loop: ``call_soon_threadsafe`` writes to the loop's self-pipe each time, so one
    call per request would be 64 syscalls a step at 64 streams."""

    def __init__(self) -> None:
        self._items: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Delta]]] = {}

    def put(self, inbox: _Inbox, delta: Delta) -> None:
        self._items.setdefault(inbox.loop, []).append((inbox.queue, delta))

    def flush(self) -> None:
        for loop, items in self._items.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # the event loop is closed: nobody is listening any more
                pass
        self._items = {}


def _deliver(items: list[tuple[asyncio.Queue, Delta]]) -> None:
    for q, delta in items:
        q.put_nowait(delta)


@dataclass
class _Live:
    request: Request
    inbox: _Inbox
    sent: int = 0  # output tokens already sent


class EngineLoop:
    """Owns an ``LLMEngine`` on a daemon thread; every public method is thread-safe."""

    def __init__(self, engine: LLMEngine, metrics: ServerMetrics) -> None:
        self.engine = engine
        self.metrics = metrics
        self.error: Optional[str] = None  # set when a step raised: the engine is no longer used
        self._commands: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._live: dict[str, _Live] = {}
        self._outbox = _Outbox()
        self._thread = threading.Thread(target=self._run, name="kvplan-engine", daemon=True)

    # --- the asyncio side -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def add(self, request_id: str, prompt_token_ids: Sequence[int], params: SamplingParams,
            arrival_time: float) -> RequestStream:
        """Queue a request; call from the event loop whose queue will receive its deltas."""
        stream = RequestStream(self, request_id)
        inbox = _Inbox(asyncio.get_running_loop(), stream.queue)
        self._commands.put(("add", (request_id, list(prompt_token_ids), params, arrival_time, inbox)))
        return stream

    def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    def abort_all(self) -> None:
        """End every request now (finish reason "abort"): the drain deadline passed."""
        self._commands.put(("abort_all", None))

    def call(self, fn: Callable[[LLMEngine], Any]) -> concurrent.futures.Future:
        """Run ``fn(engine)`` on the engine thread between two steps (tests, health checks)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._commands.put(("call", (fn, future)))
        return future

    def stop(self, timeout: float = 10.0) -> None:
        """Abort what is left and end the thread."""
        if self._thread.is_alive():
            self._commands.put(("stop", None))
            self._thread.join(timeout)

    # --- the engine thread ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            busy = self.error is None and self.engine.has_unfinished()
            if not self._take_commands(block=not busy):
                break
            if self.error is None and self.engine.has_unfinished():
                self._step()
            self._update_gauges()
            self._outbox.flush()
        for rid in list(self._live):
            self._abort(rid)
        self._outbox.flush()

    def _step(self) -> None:
        try:
            finished = self.engine.step()
        except Exception as exc:  # a bug or a device fault: fail loudly, keep answering
            log.exception("engine step failed; the server now answers 503")
            self._fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
            return
        self._publish({out.request_id: out.finish_reason for out in finished})

    def _take_commands(self, block: bool) -> bool:
        """Apply queued commands (waiting for one when idle); False once told to stop."""
        try:
            cmd = self._commands.get(block=block)
        except queue.Empty:
            return True
        while True:
            kind, payload = cmd
            if kind == "stop":
                return False
            if kind == "add":
                self._add(*payload)
            elif kind == "abort":
                self._abort(payload)
            elif kind == "abort_all":
                for rid in list(self._live):
                    self._abort(rid)
            elif kind == "call":
                fn, future = payload
                try:
                    future.set_result(fn(self.engine))
                except Exception as exc:
                    future.set_exception(exc)
            try:
                cmd = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _add(self, rid: str, ids: list[int], params: SamplingParams, arrival: float, inbox: _Inbox) -> None:
        if self.error is not None:
            self._outbox.put(inbox, Delta(finish_reason="error", error=self.error))
            return
        try:
            req = self.engine.add_request(ids, params, rid, arrival_time=arrival)
        except KvplanError as exc:  # the handler checked first; this is the last line of defence
            self._outbox.put(inbox, Delta(finish_reason="rejected", error=str(exc)))
            return
        if req.reject_reason is not None:
            self._outbox.put(inbox, Delta(finish_reason="rejected", error=req.reject_reason))
            return
        self._live[rid] = _Live(req, inbox)

    def _abort(self, rid: str) -> None:
        live = self._live.pop(rid, None)
        self.engine.abort(rid)
        if live is not None:
            self.metrics.record_finish("abort", None)
            self._outbox.put(live.inbox, Delta(list(live.request.output_token_ids[live.sent:]), "abort"))

    def _publish(self, finished: dict[str, Optional[str]]) -> None:
        """Send each live request its new tokens, and its finish reason if it ended."""
        for rid, live in list(self._live.items()):
            req = live.request
            new = req.output_token_ids[live.sent:]
            reason = finished.get(rid)
            if not new and reason is None:
                continue
            self._record(live, len(new))
            live.sent += len(new)
            if reason is None:
                self._outbox.put(live.inbox, Delta(list(new)))
                continue
            del self._live[rid]
            self.metrics.record_finish(reason, req.e2el)
            self._outbox.put(live.inbox, Delta(list(new), reason, req.reject_reason if reason == "rejected" else None))

    def _record(self, live: _Live, n_new: int) -> None:
        """TTFT with a request's first token, the inter-token gap before each later one."""
        req, start = live.request, live.sent
        times = req.token_times
        ttft = times[0] - req.arrival_time if start == 0 and n_new else None
        gaps = [times[i] - times[i - 1] for i in range(max(start, 1), start + n_new)]
        self.metrics.record_tokens(req.prompt_len, ttft, gaps)

    def _fail_all(self, error: str) -> None:
        self.error = error
        for live in self._live.values():
            self._outbox.put(live.inbox, Delta(finish_reason="error", error=error))
        self._live.clear()

    def _update_gauges(self) -> None:
        e = self.engine
        sched, alloc = e.scheduler, e.allocator
        self.metrics.set_engine_state(
            running=len(sched.running), waiting=len(sched.waiting) + len(sched.swapped),
            kv_usage=1.0 - alloc.num_free_slots / alloc.num_slots,
            prefix_queries=alloc.num_prefix_queries, prefix_hits=alloc.num_prefix_hits,
            preemptions=sched.num_preemptions)
