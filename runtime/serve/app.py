"""The ASGI app (Starlette): routes, and the HTTP-side safety rails around them.

    POST /v1/completions, /v1/chat/completions   (stream or not)
    GET  /v1/models, /health, /metrics

Rails, in the order a request meets them: API key (401), draining or a dead engine (503),
concurrent requests (429), body size (413), then protocol.py's validation (400) and the
model's limits (serving.py: 400, 404). A stream's client that disconnects has its engine request
aborted, so its KV blocks return at once. On SIGTERM (server.py calls ``begin_drain``) new
requests get 503 while those in flight finish, up to ``drain_timeout_s``; then the rest are
aborted and ``on_drained`` tells the server to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from runtime.llm_engine import LLMEngine
from runtime.serve import protocol, serving
from runtime.serve.engine_loop import EngineLoop
from runtime.serve.metrics import ServerMetrics
from runtime.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest

log = logging.getLogger("kvplan.serve")


@dataclass
class ServeConfig:
    """The server's limits (``kvplan serve`` flags of the same names)."""

    model_name: str
    api_key: Optional[str] = None
    max_tokens_limit: int = 4096
    max_concurrent_requests: int = 256
    max_body_bytes: int = 1 << 20
    drain_timeout_s: float = 30.0
    #: ``--stream-interval``: tokens a streamed chunk carries after the first (1: every token).
    stream_interval: int = 1


class ServerState:
    """What every handler shares: the engine thread, the limits, the in-flight count, drain."""

    def __init__(self, engine: LLMEngine, config: ServeConfig) -> None:
        self.engine = engine
        self.config = config
        self.metrics = ServerMetrics(config.model_name)
        self.engine_loop = EngineLoop(engine, self.metrics)
        self.info = serving.ModelInfo(
            name=config.model_name, tokenizer=engine.tokenizer, vocab_size=engine.config.vocab_size,
            max_model_len=engine.max_model_len, pool_tokens=engine.allocator.num_slots,
            max_tokens_limit=config.max_tokens_limit)
        self.created = protocol.now_s()
        self.inflight = 0
        self.draining_since: Optional[float] = None
        #: Called once the drain is over; server.py sets it to stop uvicorn.
        self.on_drained: Callable[[], None] = lambda: None

    # --- rails ----------------------------------------------------------------------------------
    def authorize(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = request.headers.get("authorization", "")
        token = given[7:].strip() if given[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(token.encode(), key.encode()):
            raise APIError("Incorrect or missing API key: send 'Authorization: Bearer <key>'", status=401,
                           code="invalid_api_key")

    def check_open(self) -> None:
        if self.draining_since is not None:
            raise APIError("the server is shutting down", status=503, type="server_error",
                           code="server_shutting_down")
        if not self.engine_loop.alive:
            raise APIError(f"the engine is not running: {self.engine_loop.error or 'stopped'}", status=503,
                           type="server_error", code="engine_dead")

    def acquire(self) -> "Slot":
        if self.inflight >= self.config.max_concurrent_requests:
            raise APIError(f"too many concurrent requests (at most {self.config.max_concurrent_requests}); "
                           f"retry later", status=429, code="too_many_requests")
        self.inflight += 1
        return Slot(self)

    # --- drain ----------------------------------------------------------------------------------
    def begin_drain(self) -> None:
        """Refuse new requests from now on; safe to call from a signal handler."""
        if self.draining_since is None:
            self.draining_since = time.monotonic()

    async def drain_watch(self) -> None:
        """Wait for a drain to start, then for the requests in flight (aborting them at the
        deadline), then call ``on_drained``."""
        while self.draining_since is None:
            await asyncio.sleep(0.05)
        timeout = self.config.drain_timeout_s
        log.info("draining: %d request(s) in flight, waiting up to %g s", self.inflight, timeout)
        deadline = self.draining_since + timeout
        while self.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.inflight:
            log.warning("drain timeout: aborting %d request(s)", self.inflight)
            self.engine_loop.abort_all()
            give_up = time.monotonic() + 2.0
            while self.inflight and time.monotonic() < give_up:
                await asyncio.sleep(0.05)
        log.info("drained; shutting down")
        self.on_drained()


class Slot:
    """One admitted request's place under ``max_concurrent_requests``; release is idempotent."""

    def __init__(self, state: ServerState) -> None:
        self.state: Optional[ServerState] = state

    def release(self) -> None:
        if self.state is not None:
            self.state.inflight -= 1
            self.state = None


class EventStream(StreamingResponse):
    """Server-sent events that always run ``on_close``: at the end, when the client goes away
    (ASGI servers raise OSError on send), or when the task is cancelled. Starlette's own
    StreamingResponse never starts a body iterator whose first send failed, so a cleanup in
    the iterator's ``finally`` would not run then."""

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(events, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.events = events
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for event in self.events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away
        finally:
            with contextlib.suppress(Exception):
                await self.events.aclose()  # type: ignore[attr-defined]
            self.on_close()


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _sse_events(gen: serving.Generation, stream_interval: int) -> AsyncIterator[bytes]:
    async for chunk in serving.chunks(gen, stream_interval):
        yield _sse(chunk)
    if not gen.client_gone:
        yield b"data: [DONE]\n\n"


def _disconnect_waiter(receive: Receive) -> Callable[[], Any]:
    async def wait() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
    return wait


async def _read_body(request: Request, limit: int) -> bytes:
    too_big = APIError(f"request body larger than {limit} bytes", status=413, code="request_too_large")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_big
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise too_big
        parts.append(part)
    return b"".join(parts)


# --- handlers --------------------------------------------------------------------------------

def _state(request: Request) -> ServerState:
    return request.app.state.server


async def _generate(request: Request, model: type, prepare: Callable[[Any, serving.ModelInfo], serving.Prepared]
                    ) -> Response:
    st = _state(request)
    arrival = st.engine.now()  # TTFT and E2E count from here, as a client sees them
    st.authorize(request)
    st.check_open()
    slot = st.acquire()
    handed_off = False
    try:
        body = await _read_body(request, st.config.max_body_bytes)
        p = prepare(protocol.parse(model, body), st.info)
        stream = st.engine_loop.add(p.request_id, p.prompt_token_ids, p.params, arrival)
        gen = serving.Generation(p, stream, st.info.tokenizer, _disconnect_waiter(request.receive))
        if p.stream:
            handed_off = True

            def close() -> None:
                gen.close()
                slot.release()
            return EventStream(_sse_events(gen, st.config.stream_interval), on_close=close)
        try:
            body_out = await serving.collect(gen)
        finally:
            gen.close()
        if body_out is None:  # the client left: nobody to answer
            return Response(status_code=499)
        return JSONResponse(body_out)
    finally:
        if not handed_off:
            slot.release()


async def completions(request: Request) -> Response:
    return await _generate(request, CompletionRequest, serving.prepare_completion)


async def chat_completions(request: Request) -> Response:
    return await _generate(request, ChatCompletionRequest, serving.prepare_chat)


async def models(request: Request) -> Response:
    st = _state(request)
    st.authorize(request)
    card = protocol.model_card(st.config.model_name, st.created, st.info.max_model_len)
    return JSONResponse({"object": "list", "data": [card]})


async def health(request: Request) -> Response:
    st = _state(request)
    if st.draining_since is not None:
        return JSONResponse({"status": "draining", "in_flight": st.inflight}, status_code=503)
    if not st.engine_loop.alive:
        return JSONResponse({"status": "error", "error": st.engine_loop.error or "engine stopped"},
                            status_code=503)
    return JSONResponse({"status": "ok", "in_flight": st.inflight})


async def metrics(request: Request) -> Response:
    return PlainTextResponse(_state(request).metrics.render(), media_type="text/plain; version=0.0.4")


# --- errors as OpenAI bodies -----------------------------------------------------------------

_RETRY = {429: "1", 503: "5"}


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    headers = {"Retry-After": _RETRY[exc.status]} if exc.status in _RETRY else {}
    if exc.status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    err = APIError(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code,
                   code="not_found" if exc.status_code == 404 else None)
    return JSONResponse(err.body(), status_code=exc.status_code, headers=exc.headers)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path, exc_info=exc)
    err = APIError(f"internal server error: {type(exc).__name__}", status=500, type="server_error",
                   code="internal_error")
    return JSONResponse(err.body(), status_code=500)


def create_app(engine: LLMEngine, config: ServeConfig) -> Starlette:
    """The app over ``engine``; the engine thread starts with the app (lifespan) and stops with
    it. ``app.state.server`` is the ``ServerState`` (server.py and tests reach the drain and the
    engine thread through it)."""
    state = ServerState(engine, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state.engine_loop.start()
        watcher = asyncio.create_task(state.drain_watch())
        try:
            yield
        finally:
            watcher.cancel()
            await asyncio.to_thread(state.engine_loop.stop)

    app = Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ],
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.server = state
    return app
