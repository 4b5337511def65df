"""A bounded load test on loopback: 64 concurrent streams, a quarter of them dropped by their
client mid-stream. Afterwards no KV block is leaked; ``/health`` answered throughout; every
finished stream's tokens equal ``LLM.generate``'s for the same greedy request, and every dropped
one's are a prefix of them."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field

import httpx

from runtime import LLM, SamplingParams
from tests.serve.helpers import ENGINE_KWARGS

NUM_STREAMS = 64
NUM_DROPPED = 16
MAX_TOKENS = 16
DROPPED_MAX_TOKENS = 128  # long enough that the drop surely comes mid-stream
SHARED = "You are a helpful assistant. Answer briefly. "  # a common prefix: prefix-cache hits


@dataclass
class Stream:
    prompt: str
    dropped: bool
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    ttft: float | None = None
    done: bool = False


def prompts() -> list[Stream]:
    out = []
    for i in range(NUM_STREAMS):
        body = f"request {i}: " + "lorem ipsum " * (i % 5)
        out.append(Stream(SHARED + body if i % 2 else body, dropped=i % 4 == 3))
    return out


async def run_stream(client: httpx.AsyncClient, s: Stream) -> None:
    body = {"model": "tiny", "prompt": s.prompt, "temperature": 0, "stream": True, "return_token_ids": True,
            "max_tokens": DROPPED_MAX_TOKENS if s.dropped else MAX_TOKENS, "ignore_eos": s.dropped}
    start = time.perf_counter()
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                s.done = True
                break
            choice = json.loads(line[6:])["choices"][0]
            if choice["token_ids"] and s.ttft is None:
                s.ttft = time.perf_counter() - start
            s.token_ids += choice["token_ids"]
            s.finish_reason = choice["finish_reason"] or s.finish_reason
            if s.dropped and len(s.token_ids) >= 2:
                break  # leaving the block closes the connection mid-stream


async def poll_health(client: httpx.AsyncClient, stop: asyncio.Event, seen: list[tuple[int, float]]) -> None:
    while not stop.is_set():
        start = time.perf_counter()
        r = await client.get("/health")
        seen.append((r.status_code, time.perf_counter() - start))
        await asyncio.sleep(0.02)


async def load(url: str, streams: list[Stream]) -> tuple[float, list[tuple[int, float]]]:
    limits = httpx.Limits(max_connections=NUM_STREAMS + 4, max_keepalive_connections=NUM_STREAMS + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        stop, health = asyncio.Event(), []
        poller = asyncio.create_task(poll_health(client, stop, health))
        start = time.perf_counter()
        try:
            await asyncio.gather(*(run_stream(client, s) for s in streams))
        finally:
            wall = time.perf_counter() - start
            stop.set()
            await poller
    return wall, health


def test_64_streams_with_a_quarter_dropped(server, chat_model_dir):
    streams = prompts()
    metrics_before = httpx.get(server.url + "/metrics").text
    wall, health = asyncio.run(load(server.url, streams))

    # nothing leaked: the dropped streams' requests were aborted and their blocks freed
    server.wait_idle()
    assert server.on_engine(lambda e: e.num_leaked_blocks()) == 0
    assert _abort_count(httpx.get(server.url + "/metrics").text) - _abort_count(metrics_before) == NUM_DROPPED

    # /health answered throughout, promptly
    assert len(health) >= 3 and all(code == 200 for code, _ in health), health
    assert max(t for _, t in health) < 2.0, health

    # greedy parity with LLM.generate, token for token
    finished = [s for s in streams if not s.dropped]
    dropped = [s for s in streams if s.dropped]
    assert len(dropped) == NUM_DROPPED and all(s.done and s.finish_reason in ("stop", "length") for s in finished)
    llm = LLM(chat_model_dir, **ENGINE_KWARGS)
    try:
        ref = llm.generate([s.prompt for s in finished], SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        ref_dropped = llm.generate([s.prompt for s in dropped], SamplingParams(
            temperature=0, max_tokens=DROPPED_MAX_TOKENS, ignore_eos=True))
    finally:
        llm.engine.close()
    for s, r in zip(finished, ref):
        assert s.token_ids == r.token_ids and s.finish_reason == r.finish_reason, s.prompt
    for s, r in zip(dropped, ref_dropped):
        assert not s.done and 2 <= len(s.token_ids) < DROPPED_MAX_TOKENS
        assert s.token_ids == r.token_ids[:len(s.token_ids)], s.prompt

    tokens = sum(len(s.token_ids) for s in streams)
    ttfts = sorted(s.ttft for s in streams if s.ttft is not None)
    print(f"\n{NUM_STREAMS} streams ({NUM_DROPPED} dropped): {tokens} tokens in {wall:.2f} s = "
          f"{tokens / wall:.0f} tok/s; TTFT p50 {statistics.median(ttfts) * 1e3:.0f} ms, "
          f"max {ttfts[-1] * 1e3:.0f} ms; /health max {max(t for _, t in health) * 1e3:.0f} ms "
          f"over {len(health)} polls")


def _abort_count(metrics: str) -> float:
    line = next(ln for ln in metrics.splitlines() if 'finished_reason="abort"' in ln)
    return float(line.rsplit(" ", 1)[1])
