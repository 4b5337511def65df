"""A streaming client for OpenAI-compatible servers, open loop or closed: the engine of ``kvplan loadgen``.

Why: the simulator is checked against kvplan's engine in-process (``calibration.validate``) and
against other people's measured runs (``calibration.validate_real``); this client closes the loop
on *any* running server (``kvplan serve``, vLLM, SGLang, TGI, ...) with a kvplan workload, so a
user can measure their own deployment with the very requests the simulator replays.

What it measures, as ``vllm bench serve`` does (so the two tools' numbers mean the same): each
request is sent at its workload arrival time (open loop: a slow server does not delay later
arrivals), streamed, and timed on the client from the moment it is sent: TTFT to the first
chunk that carries output, one inter-token latency per further chunk, E2E to the end of the
stream; token counts from the server's ``usage`` (``stream_options.include_usage``). A request
that fails (an HTTP error, a broken stream) is recorded with its error and the run goes on.

Closed loop (``Clients``): N workers, each sending the next request of the workload when its
last one has finished (after an optional think time), as ``vllm bench serve --max-concurrency N
--request-rate inf`` and GuideLLM's ``concurrent`` profile do; arrival times are not used, and
each request's ``arrival_s`` is its send time. A cap alone (``Clients(closed=False)``) keeps the
open-loop arrivals but holds one that finds N in flight until one finishes (vllm bench's
semaphore); its TTFT is timed from when it is sent.

Bounds: at most ``num_requests`` are sent, none after ``duration_limit`` seconds, and requests
still in flight at the limit are cancelled and recorded as such.

Before the run one short request (not measured; it also warms the server up) finds what the
server accepts: a prompt of token ids (completions API), vLLM's ``ignore_eos`` and
``min_tokens``; what it rejects is dropped, with a note.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from calibration.loadgen_prompts import Prompt
from sim.errors import KvplanError
from sim.policies.request import Request

ENDPOINT_TYPES = ("completions", "chat")
#: How long the probe request may take (a cold CPU server compiles and warms up on it).
PROBE_TIMEOUT_S = 120.0
#: vLLM's extensions the client asks for, in the order they are dropped if the server rejects
#: them: ``min_tokens`` and ``ignore_eos`` make the output as long as asked; ``return_token_ids``
#: makes every chunk say which tokens it carries (servers hold back a token whose text is not
#: final yet, so text alone can hide the first token and merge later ones).
EXTENSIONS = ("min_tokens", "return_token_ids", "ignore_eos")


class LoadgenError(KvplanError):
    """The server cannot be driven (bad URL, unreachable, no model, every probe rejected)."""


@dataclass(frozen=True)
class Target:
    """Where and how requests go: the API base (``http://host:port/v1``), the model name, the
    endpoint type, and what the probe found the server accepts."""

    base_url: str
    model: str
    endpoint_type: str = "completions"
    api_key: Optional[str] = None
    model_root: Optional[str] = None      # /v1/models' ``root`` (vLLM: the weights' path)
    max_model_len: Optional[int] = None   # /v1/models' ``max_model_len`` (vLLM states it)
    token_id_prompts: bool = False
    extensions: tuple[str, ...] = EXTENSIONS

    @property
    def root_url(self) -> str:
        """The server's root (``/health`` and ``/metrics`` live there, not under ``/v1``)."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    @property
    def url(self) -> str:
        return f"{self.base_url}/{'chat/completions' if self.endpoint_type == 'chat' else 'completions'}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class Clients:
    """How many requests the client keeps in flight: ``limit`` closed-loop workers (``closed``;
    each waits ``think_s`` after a finish before its next), or a cap on open-loop arrivals."""

    limit: int
    closed: bool = True
    think_s: float = 0.0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise LoadgenError(f"--concurrency: expected an integer >= 1, got {self.limit}")
        if not self.think_s >= 0:
            raise LoadgenError(f"think time: expected >= 0 seconds, got {self.think_s}")


@dataclass
class RequestResult:
    """One request as the client saw it. Times in seconds; ``start_s`` from the run's start."""

    index: int
    arrival_s: float                   # when the workload says it arrives
    planned_prompt_len: int
    max_tokens: int
    start_s: Optional[float] = None    # when it was sent (None: never sent)
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    e2el_s: float = 0.0
    prompt_tokens: Optional[int] = None    # the server's count (usage)
    output_tokens: Optional[int] = None    # the server's count (usage), else chunks seen
    num_chunks: int = 0
    chunk_tokens: list[int] = field(default_factory=list)  # tokens per chunk, when the server says
    finish_reason: Optional[str] = None
    text: str = ""
    error: str = ""
    status: Optional[int] = None           # the HTTP status (None: no answer)

    @property
    def success(self) -> bool:
        return self.start_s is not None and not self.error and self.num_chunks > 0

    @property
    def input_len(self) -> int:
        """Prompt tokens the server processed when it said so, else the planned count."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.planned_prompt_len

    @property
    def output_len(self) -> int:
        return (self.output_tokens or self.num_chunks) if self.success else 0


@dataclass
class LoadRun:
    """A finished run: every sent request's result (in arrival order) and how it went."""

    target: Target
    results: list[RequestResult]
    duration_s: float
    num_planned: int
    prompt_kind: str
    notes: list[str] = field(default_factory=list)
    metrics_before: Optional[str] = None   # the server's /metrics text before the first request
    metrics_after: Optional[str] = None    # ... and after the last
    clients: Optional[Clients] = None      # a closed loop or an in-flight cap (None: open loop)

    @property
    def completed(self) -> list[RequestResult]:
        return [r for r in self.results if r.success]

    @property
    def failed(self) -> list[RequestResult]:
        return [r for r in self.results if not r.success]

    @property
    def max_send_lag_s(self) -> float:
        """The latest a request was sent after its arrival time (the client's own lag)."""
        return max((r.start_s - r.arrival_s for r in self.results if r.start_s is not None), default=0.0)


# --- the URL and the server's models ------------------------------------------------------


def api_base(url: str) -> str:
    """``http(s)://host[:port][/prefix]/v1`` from what the user typed (``/v1`` added when
    missing, a trailing ``/`` or a full ``.../completions`` path taken off)."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadgenError(f"--endpoint {url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise LoadgenError(f"--endpoint {url!r}: the port is not a number from 0 to 65535") from None
    for tail in ("/chat/completions", "/completions"):
        if text.endswith(tail):
            text = text[: -len(tail)]
    return text if text.endswith("/v1") else text + "/v1"


async def list_models(session: Any, base_url: str, api_key: Optional[str]) -> list[dict]:
    """The server's ``/v1/models`` entries; an unreachable server is one ``LoadgenError``."""
    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(f"{base_url}/models", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=30)) as resp:
            if resp.status != 200:
                raise LoadgenError(f"{base_url}/models: HTTP {resp.status}: {_short(await resp.text())}"
                                   + (" (wrong or missing --api-key?)" if resp.status in (401, 403) else ""))
            data = await resp.json(content_type=None)
    except aiohttp.ClientConnectorError as exc:
        raise LoadgenError(f"cannot reach the server at {base_url}: {_reason(exc)} "
                           f"(is it running and listening there?)") from None
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        raise LoadgenError(f"{base_url}/models: {_reason(exc) or 'no answer in 30 s'}") from None
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise LoadgenError(f"{base_url}/models: not an OpenAI model list (no 'data' array)")
    return [m for m in models if isinstance(m, dict) and isinstance(m.get("id"), str)]


# --- one request --------------------------------------------------------------------------


def payload(target: Target, prompt: Prompt, max_tokens: int) -> dict:
    """The JSON body: streamed, greedy, usage in the last chunk, plus the accepted extensions."""
    body: dict[str, Any] = {"model": target.model, "max_tokens": max_tokens, "temperature": 0.0,
                            "stream": True, "stream_options": {"include_usage": True}}
    if target.endpoint_type == "chat":
        content = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        body["messages"] = [{"role": "user", "content": content}]
    else:
        body["prompt"] = prompt
    if "ignore_eos" in target.extensions:
        body["ignore_eos"] = True
    if "min_tokens" in target.extensions:
        body["min_tokens"] = max_tokens
    if "return_token_ids" in target.extensions:
        body["return_token_ids"] = True
    return body


async def send(session: Any, target: Target, prompt: Prompt, result: RequestResult, t0: float,
               timeout_s: Optional[float] = None) -> RequestResult:
    """Send one streamed request and fill ``result`` (its error too: this never raises, except
    ``CancelledError``, after marking the result cancelled)."""
    import aiohttp

    result.start_s = time.perf_counter() - t0
    start = t0 + result.start_s
    last = start
    pieces: list[str] = []
    try:
        async with session.post(target.url, json=payload(target, prompt, result.max_tokens),
                                headers=target.headers(),
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            result.status = resp.status
            if resp.status != 200:
                result.error = f"HTTP {resp.status}: {_short(await resp.text())}"
                return result
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue  # blank lines, ": keep-alive" comments, "event:" lines
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if isinstance(chunk.get("error"), (dict, str)):
                    err = chunk["error"]
                    result.error = "stream error: " + _short(err.get("message", err) if isinstance(err, dict) else err)
                    break
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    result.prompt_tokens = _int_or_none(usage.get("prompt_tokens"), result.prompt_tokens)
                    result.output_tokens = _int_or_none(usage.get("completion_tokens"), result.output_tokens)
                text, n_tokens = _output_of(chunk, target.endpoint_type)
                if text is None:
                    continue
                if result.num_chunks == 0:
                    result.ttft_s = now - start
                else:
                    result.itl_s.append(now - last)
                last = now
                result.num_chunks += 1
                if n_tokens is not None:
                    result.chunk_tokens.append(n_tokens)
                pieces.append(text)
                fr = chunk["choices"][0].get("finish_reason")
                result.finish_reason = fr or result.finish_reason
            result.e2el_s = time.perf_counter() - start
            if not result.error and result.num_chunks == 0:
                result.error = "the stream ended without any output"
    except asyncio.CancelledError:
        result.error = result.error or "cancelled"
        raise
    except asyncio.TimeoutError:
        result.error = f"no complete answer in {timeout_s:g} s"
    except aiohttp.ClientError as exc:
        result.error = f"{type(exc).__name__}: {_reason(exc)}"
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        result.error = f"malformed stream chunk: {_short(str(exc))}"
    result.text = "".join(pieces)
    return result


def _output_of(chunk: dict, endpoint_type: str) -> tuple[Optional[str], Optional[int]]:
    """(text, tokens) a chunk carries; text None for a chunk that carries no output (usage
    only, a chat role announcement, a finish marker). Tokens: how many, when the chunk lists
    its ``token_ids`` (``return_token_ids``), else None. A completions chunk with empty text
    counts as output, as vllm bench serve counts it (a token whose text is not final yet)."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None
    c = choices[0]
    ids = c.get("token_ids")
    n = len(ids) if isinstance(ids, list) else None
    if endpoint_type == "chat":
        text = (c.get("delta") or {}).get("content")
        text = text if isinstance(text, str) else ""
        has_output = bool(text) or bool(n)
    else:
        text = c.get("text") if isinstance(c.get("text"), str) else ""
        if n is not None:
            has_output = n > 0 or bool(text)
        else:
            has_output = bool(text) or not c.get("finish_reason")
    return (text, n) if has_output else (None, None)


# --- the probe ----------------------------------------------------------------------------


async def probe(session: Any, target: Target, try_token_ids: bool) -> tuple[Target, list[str]]:
    """One short request per variant until the server accepts one: a token-id prompt (completions
    only) before text, and all of vLLM's extensions, then fewer (``EXTENSIONS`` order), then
    none. A refusal other than 400/422 ends the search. Returns the target with what was
    accepted, and notes on what was dropped."""
    from dataclasses import replace

    token_ids = [True, False] if try_token_ids and target.endpoint_type == "completions" else [False]
    variants = [(tok, EXTENSIONS[k:]) for tok in token_ids for k in range(len(EXTENSIONS) + 1)]
    errors: list[str] = []
    for tok, ext in variants:
        t = replace(target, token_id_prompts=tok, extensions=ext)
        prompt: Prompt = list(range(20, 36)) if tok else "the cat sat on the mat and the dog ran to see"
        r = RequestResult(index=-1, arrival_s=0.0, planned_prompt_len=16, max_tokens=2)
        await send(session, t, prompt, r, time.perf_counter(), timeout_s=PROBE_TIMEOUT_S)
        if r.success and tok and r.prompt_tokens not in (None, len(prompt)):
            errors.append(f"token-id prompt of 16 ids counted as {r.prompt_tokens} tokens")
            continue
        if r.success:
            notes = []
            if tok is False and try_token_ids and target.endpoint_type == "completions":
                notes.append(f"the server rejects token-id prompts ({errors[0] if errors else '?'}): text prompts")
            dropped = [e for e in EXTENSIONS if e not in ext]
            if "ignore_eos" in dropped:
                notes.append("the server rejects vLLM's ignore_eos: sent without; outputs may end early at "
                             "EOS (the measured lengths are what the server generated)")
            if "return_token_ids" in dropped:
                notes.append("the server rejects vLLM's return_token_ids: chunks are counted by their text "
                             "(a token whose text is held back arrives with the next one)")
            if r.prompt_tokens is None or r.output_tokens is None:
                notes.append("the server sends no usage in the stream: token counts are counted chunks "
                             "and planned prompt lengths")
            return t, notes
        errors.append(r.error)
        if r.status not in (400, 422):
            break  # not a rejected field (unreachable, unauthorised, no such model): no variant helps
    raise LoadgenError(f"the server at {target.url} did not accept a 2-token request from model "
                       f"{target.model!r}: {errors[-1] if errors else 'no answer'}")


# --- the open-loop run --------------------------------------------------------------------


async def drive(session: Any, target: Target, prompts: Sequence[Prompt], results: Sequence[RequestResult],
                duration_limit: float, on_done: Optional[Callable[[RequestResult], None]] = None,
                clients: Optional[Clients] = None) -> float:
    """Send each request at its ``arrival_s`` (results must be in arrival order), or, with
    closed-loop ``clients``, as workers free; stop sending at ``duration_limit`` seconds, cancel
    what is still in flight then; returns the run's duration (from the start to the last
    answer, or to the limit)."""
    t0 = time.perf_counter()
    tasks: list[asyncio.Task] = []
    cap = asyncio.Semaphore(clients.limit) if clients is not None and not clients.closed else None

    async def one(prompt: Prompt, res: RequestResult) -> None:
        if cap is None:
            await send(session, target, prompt, res, t0)
        else:  # vllm bench serve's semaphore: sent (and timed) only once a slot is free
            async with cap:
                if time.perf_counter() - t0 >= duration_limit:
                    return
                await send(session, target, prompt, res, t0)
        if on_done is not None:
            on_done(res)

    if clients is not None and clients.closed:
        tasks = _closed_loop(session, target, prompts, results, duration_limit, on_done, clients, t0)
    else:
        for prompt, res in zip(prompts, results):
            if res.arrival_s >= duration_limit:
                break
            delay = res.arrival_s - (time.perf_counter() - t0)
            if delay > 0:
                await asyncio.sleep(delay)
            if time.perf_counter() - t0 >= duration_limit:
                break
            tasks.append(asyncio.create_task(one(prompt, res)))
    left = duration_limit - (time.perf_counter() - t0)
    pending: set = set()
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=max(left, 0.0))
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
        for res in results:
            if res.error == "cancelled":
                res.error = f"cancelled at the time limit ({duration_limit:g} s)"
    return time.perf_counter() - t0


def _closed_loop(session: Any, target: Target, prompts: Sequence[Prompt], results: Sequence[RequestResult],
                 duration_limit: float, on_done: Optional[Callable[[RequestResult], None]],
                 clients: Clients, t0: float) -> list[asyncio.Task]:
    """``clients.limit`` workers, each taking the next request (in workload order) when its
    last one has finished plus the think time; none is sent after ``duration_limit``. A
    request's ``arrival_s`` becomes its send time (a closed loop has no arrival schedule)."""
    order = iter(range(len(results)))  # shared: whichever worker is free takes the next

    async def worker() -> None:
        for i in order:
            if time.perf_counter() - t0 >= duration_limit:
                return
            res = results[i]
            res.arrival_s = time.perf_counter() - t0  # taken now, sent now: no schedule to lag
            await send(session, target, prompts[i], res, t0)
            if on_done is not None:
                on_done(res)
            if clients.think_s:
                await asyncio.sleep(clients.think_s)

    return [asyncio.create_task(worker()) for _ in range(min(clients.limit, len(results)))]


def run_load(endpoint: str, requests: Sequence[Request], *, model: Optional[str] = None,
             endpoint_type: str = "completions", api_key: Optional[str] = None,
             duration_limit: float = 600.0, prompt_kind: str = "auto", tokenizer: Optional[str] = None,
             seed: int = 0, on_done: Optional[Callable[[RequestResult], None]] = None,
             clients: Optional[Clients] = None) -> LoadRun:
    """Drive the server at ``endpoint`` with ``requests`` (arrival times and lengths; block
    hashes shape shared prefixes); ``clients``: a closed loop (arrival times unused) or a cap
    on requests in flight. ``prompt_kind``: auto (token ids where the server takes them,
    else text through ``tokenizer`` or the served model's tokenizer when one loads locally, else
    words), token-ids, text. The server's ``/metrics`` page, when it has one, is read right
    before the first request and after the last (``LoadRun.metrics_before``/``metrics_after``)."""
    if endpoint_type not in ENDPOINT_TYPES:
        raise LoadgenError(f"--endpoint-type: expected one of {', '.join(ENDPOINT_TYPES)}, got {endpoint_type!r}")
    if prompt_kind not in ("auto", "token-ids", "text"):
        raise LoadgenError(f"--prompts: expected auto, token-ids or text, got {prompt_kind!r}")
    if prompt_kind == "token-ids" and endpoint_type == "chat":
        raise LoadgenError("--prompts token-ids: only the completions endpoint takes token-id prompts")
    base = api_base(endpoint)
    return asyncio.run(_run(base, list(requests), model, endpoint_type, api_key, duration_limit,
                            prompt_kind, tokenizer, seed, on_done, clients))


async def _run(base: str, requests: list[Request], model: Optional[str], endpoint_type: str,
               api_key: Optional[str], duration_limit: float, prompt_kind: str, tokenizer: Optional[str],
               seed: int, on_done, clients: Optional[Clients] = None) -> LoadRun:
    import aiohttp

    from calibration.loadgen_prompts import load_tokenizer, make_prompts
    from calibration.server_metrics import scrape

    connector = aiohttp.TCPConnector(limit=0, force_close=False)  # limit=0: no cap, open loop
    async with aiohttp.ClientSession(connector=connector, trust_env=False,
                                     timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)) as session:
        models = await list_models(session, base, api_key)
        if model is None:
            if not models:
                raise LoadgenError(f"{base}/models lists no model: pass --model")
            entry = models[0]
        else:
            entry = next((m for m in models if m["id"] == model), {"id": model})
        target = Target(base_url=base, model=entry["id"], endpoint_type=endpoint_type, api_key=api_key,
                        model_root=entry.get("root") if isinstance(entry.get("root"), str) else None,
                        max_model_len=_int_or_none(entry.get("max_model_len"), None))
        try:
            target, notes = await probe(session, target, try_token_ids=prompt_kind in ("auto", "token-ids"))
        except LoadgenError:
            listed = [m["id"] for m in models]
            if model is not None and listed and model not in listed:
                raise LoadgenError(f"--model {model}: not served at {base} (it serves "
                                   f"{', '.join(listed[:5])})") from None
            raise
        if prompt_kind == "token-ids" and not target.token_id_prompts:
            raise LoadgenError(f"--prompts token-ids: the server at {target.url} does not take token-id prompts")
        if target.token_id_prompts:
            kind, tok = "token-ids", None
        else:
            tok = load_tokenizer(tokenizer) or (None if tokenizer else
                                                load_tokenizer(target.model_root) or load_tokenizer(target.model))
            if tokenizer and tok is None:
                raise LoadgenError(f"--tokenizer {tokenizer}: cannot be loaded (a local folder or a model in "
                                   f"the local Hugging Face cache; transformers must be installed)")
            kind = "text-tokenizer" if tok is not None else "text-words"
        notes.append(_PROMPT_NOTES[kind])
        prompts, planned = make_prompts(requests, kind, seed, tok)
        results = [RequestResult(index=i, arrival_s=float(r.arrival_time), planned_prompt_len=n,
                                 max_tokens=int(r.max_output_tokens))
                   for i, (r, n) in enumerate(zip(requests, planned))]
        before = await scrape(session, target.root_url, api_key)
        duration = await drive(session, target, prompts, results, duration_limit, on_done, clients)
        after = await scrape(session, target.root_url, api_key) if before is not None else None
    sent = [r for r in results if r.start_s is not None]
    if len(sent) < len(results):
        why = ("the clients had not reached them" if clients is not None and clients.closed
               else "they arrive after")
        notes.append(f"{len(results) - len(sent)} of {len(results)} requests not sent: {why} "
                     f"the time limit ({duration_limit:g} s)")
    if clients is not None:
        notes.append(f"closed loop: {clients.limit} clients, each sending its next request when its "
                     f"last one finished" + (f" plus {clients.think_s:g} s" if clients.think_s else "")
                     if clients.closed else
                     f"at most {clients.limit} requests in flight (one that finds them all taken "
                     f"waits; TTFT from its send)")
    return LoadRun(target=target, results=sent, duration_s=duration, num_planned=len(results),
                   prompt_kind=kind, notes=notes, metrics_before=before, metrics_after=after,
                   clients=clients)


_PROMPT_NOTES = {
    "token-ids": "prompts: token ids (exactly the workload's input lengths)",
    "text-tokenizer": "prompts: text sized with the model's tokenizer (the server may add a BOS token "
                      "or a chat template; its own count is recorded)",
    "text-words": "prompts: repeated common words, about one token each (no tokenizer known: pass "
                  "--tokenizer for exact lengths); the server's own count is recorded",
}


def _int_or_none(v: Any, default: Optional[int]) -> Optional[int]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else default


def _reason(exc: BaseException) -> str:
    """The OS reason of an aiohttp connection error (``connection refused``), else its text."""
    import os

    os_error = getattr(exc, "os_error", None)
    if isinstance(os_error, OSError) and os_error.errno:
        return os.strerror(os_error.errno).lower()
    return " ".join(str(exc).split())


def _short(text: Any, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


__all__ = ["ENDPOINT_TYPES", "Clients", "LoadRun", "LoadgenError", "RequestResult", "Target", "api_base", "drive",
           "list_models", "payload", "probe", "run_load", "send"]
