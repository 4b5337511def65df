"""A small OpenAI-compatible streaming server with known delays, for testing the load generator.

It runs an aiohttp application on its own event loop in a thread, on a free loopback port.
Every request waits ``ttft_s`` before its first chunk and ``itl_s`` between chunks (one token
each, or ``tokens_per_chunk``); ``serial`` makes it answer one request at a time (a slow server:
later requests queue inside it while the client keeps sending on schedule). It records when each
request arrived, and exports vLLM's TTFT/E2E histograms (sum and count) at ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from aiohttp import web

MODEL = "fake-model"
KNOWN_FIELDS = {"model", "prompt", "messages", "max_tokens", "temperature", "stream", "stream_options"}


@dataclass
class FakeServer:
    ttft_s: float = 0.05
    itl_s: float = 0.01
    tokens_per_chunk: int = 1
    serial: bool = False
    strict: bool = False            # 400 on any field beyond the OpenAI API's (ignore_eos, ...)
    token_id_prompts: bool = True   # False: 400 on a prompt given as token ids
    fail_max_tokens: Optional[int] = None  # 400 for requests asking exactly this many tokens
    role_chunk: bool = True         # chat: an empty role chunk first, as vLLM sends
    metrics: bool = True
    received: list[tuple[float, dict]] = field(default_factory=list)
    port: int = 0

    def __post_init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional[web.AppRunner] = None
        self._lock: Optional[asyncio.Lock] = None
        self._ttft_sum = self._e2e_sum = 0.0
        self._count = 0

    # --- lifecycle --------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "FakeServer":
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fake server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._loop is not None and self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)

    def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._lock = asyncio.Lock()
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._generate)
        app.router.add_post("/v1/chat/completions", self._generate)
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()
        self._loop.run_forever()
        self._loop.close()

    # --- handlers ---------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": MODEL, "object": "model", "root": "/nonexistent/fake-model", "max_model_len": 4096}]})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _metrics(self, request: web.Request) -> web.Response:
        text = (f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="1000"}} 1.0\n'
                f'vllm:time_to_first_token_seconds_sum{{model_name="{MODEL}"}} {self._ttft_sum}\n'
                f'vllm:time_to_first_token_seconds_count{{model_name="{MODEL}"}} {self._count}\n'
                f'vllm:e2e_request_latency_seconds_sum{{model_name="{MODEL}"}} {self._e2e_sum}\n'
                f'vllm:e2e_request_latency_seconds_count{{model_name="{MODEL}"}} {self._count}\n')
        return web.Response(text=text)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        t_in = time.perf_counter()
        body = await request.json()
        self.received.append((t_in, body))
        chat = request.path.endswith("chat/completions")
        if self.strict and set(body) - KNOWN_FIELDS:
            return _error(400, f"unknown fields: {sorted(set(body) - KNOWN_FIELDS)}")
        if body.get("model") not in (None, MODEL):
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        prompt = body.get("prompt")
        if isinstance(prompt, list) and not self.token_id_prompts:
            return _error(400, "prompt must be a string")
        n_out = int(body.get("max_tokens") or 16)
        if self.fail_max_tokens is not None and n_out == self.fail_max_tokens:
            return _error(400, f"max_tokens {n_out} is not allowed here")
        n_in = len(prompt) if isinstance(prompt, list) else len(
            (prompt if prompt is not None else body["messages"][-1]["content"]).split())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if self._lock is not None and self.serial:
            await self._lock.acquire()
        try:
            t_start = time.perf_counter()
            if chat and self.role_chunk:
                await _send(resp, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                "finish_reason": None}]})
            await asyncio.sleep(self.ttft_s)
            first = time.perf_counter()
            sent = 0
            while sent < n_out:
                k = min(self.tokens_per_chunk, n_out - sent)
                sent += k
                text = " tok" * k
                done = "length" if sent == n_out else None
                choice = ({"index": 0, "delta": {"content": text}, "finish_reason": done} if chat
                          else {"index": 0, "text": text, "finish_reason": done})
                await _send(resp, {"choices": [choice]})
                if sent < n_out:
                    await asyncio.sleep(self.itl_s)
            if (body.get("stream_options") or {}).get("include_usage"):
                await _send(resp, {"choices": [], "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                                                            "total_tokens": n_in + n_out}})
            await resp.write(b"data: [DONE]\n\n")
            end = time.perf_counter()
            self._ttft_sum += first - t_start
            self._e2e_sum += end - t_start
            self._count += 1
        finally:
            if self._lock is not None and self.serial:
                self._lock.release()
        return resp


async def _send(resp: web.StreamResponse, obj: dict) -> None:
    await resp.write(f"data: {json.dumps(obj)}\n\n".encode())


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "BadRequestError", "code": status}},
                             status=status)
