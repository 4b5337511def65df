"""OpenAI semantics, between the wire and the engine: a validated request becomes token ids and
``SamplingParams`` (``prepare_completion`` / ``prepare_chat``), and the engine's deltas become
text pieces (``Generation``), then response bodies and stream chunks.

Nothing here knows about HTTP (app.py does) or threads (engine_loop.py does).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Union

from runtime.sampling import SamplingParams
from runtime.serve import protocol
from runtime.serve.detokenizer import TextStream
from runtime.serve.engine_loop import DISCONNECTED, Delta, RequestStream
from runtime.serve.protocol import APIError, ChatCompletionRequest, CompletionRequest
from sim.errors import KvplanError


@dataclass(frozen=True)
class ModelInfo:
    """What request validation needs to know about the served model and the server's limits."""

    name: str
    tokenizer: Any  # None for a model without one: token-id prompts only
    vocab_size: int
    max_model_len: int
    pool_tokens: int  # the whole KV pool: a longer request could never run
    max_tokens_limit: int


@dataclass
class Prepared:
    """A request ready for the engine, with what its responses must echo back."""

    kind: str  # "completion" | "chat"
    request_id: str
    model: str
    created: int
    prompt_token_ids: list[int]
    params: SamplingParams
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    return_token_ids: bool = False


# --- requests -> engine input ----------------------------------------------------------------

def prepare_completion(req: CompletionRequest, info: ModelInfo) -> Prepared:
    _check_model(req.model, info)
    prompt = req.single_prompt()
    if isinstance(prompt, str):
        if info.tokenizer is None:
            raise APIError("prompt: this model has no tokenizer; send the prompt as token ids", param="prompt")
        ids = list(info.tokenizer.encode(prompt))  # as LLMEngine.add_request tokenises a string
    else:
        ids = list(prompt)
    return _prepared("completion", "cmpl", req, ids, req.max_tokens, "prompt", info, default_max=16)


def prepare_chat(req: ChatCompletionRequest, info: ModelInfo) -> Prepared:
    _check_model(req.model, info)
    tok = info.tokenizer
    if tok is None or not getattr(tok, "chat_template", None):
        raise APIError("messages: this model has no chat template; use /v1/completions",
                       param="messages", code="no_chat_template")
    messages = [m.as_template_input() for m in req.messages]
    try:
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # jinja's TemplateError and raise_exception() in templates
        raise APIError(f"messages: the chat template refused them: {exc}", param="messages") from None
    ids = list(tok.encode(text, add_special_tokens=False))  # the template holds any BOS (as LLM.chat)
    return _prepared("chat", "chatcmpl", req, ids, req.requested_max_tokens, "messages", info, default_max=None)


def _check_model(model: Optional[str], info: ModelInfo) -> None:
    if model is not None and model != info.name:
        raise APIError(f"model {model!r} does not exist; this server serves {info.name!r}", status=404,
                       param="model", code="model_not_found")


def _prepared(kind: str, prefix: str, req: Union[CompletionRequest, ChatCompletionRequest], ids: list[int],
              max_tokens: Optional[int], prompt_param: str, info: ModelInfo,
              default_max: Optional[int]) -> Prepared:
    if not ids:
        raise APIError(f"{prompt_param}: empty prompt", param=prompt_param)
    bad = next((t for t in ids if not 0 <= t < info.vocab_size), None)
    if bad is not None:
        raise APIError(f"{prompt_param}: token id {bad} is outside the vocabulary (size {info.vocab_size})",
                       param=prompt_param)
    limit = min(info.max_model_len, info.pool_tokens)
    room = limit - len(ids)
    if room < 1:
        raise APIError(f"{prompt_param}: {len(ids)} tokens, but this model takes at most {limit - 1} "
                       f"(max_model_len {info.max_model_len}, one token left for the output)",
                       param=prompt_param, code="context_length_exceeded")
    if max_tokens is None:
        max_tokens = min(room, info.max_tokens_limit, default_max or room)
    if max_tokens > info.max_tokens_limit:
        raise APIError(f"max_tokens: at most {info.max_tokens_limit} on this server, got {max_tokens}",
                       param="max_tokens")
    if len(ids) + max_tokens > limit:
        raise APIError(f"This model's maximum context length is {limit} tokens. However, you requested "
                       f"{len(ids) + max_tokens} tokens ({len(ids)} in the {prompt_param}, {max_tokens} in "
                       f"the completion).", param="max_tokens", code="context_length_exceeded")
    try:
        params = SamplingParams(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k, seed=req.seed,
                                max_tokens=max_tokens, stop_token_ids=list(req.stop_token_ids),
                                ignore_eos=req.ignore_eos)
    except KvplanError as exc:
        raise APIError(str(exc).removeprefix("sampling: ")) from None
    return Prepared(kind, protocol.new_id(prefix), info.name, protocol.now_s(), ids, params,
                    req.stop_strings(), req.stream, req.include_usage, req.return_token_ids)


# --- engine deltas -> text pieces ------------------------------------------------------------

@dataclass
class Piece:
    text: str
    token_ids: list[int]
    finish_reason: Optional[str] = None


class Generation:
    """One request on the HTTP side: its engine stream, its text, and how it ended.

    A disconnect watcher (an awaitable that returns when the client has gone) puts a sentinel in
    the stream's queue; whatever way iteration ends (finished, stop string, disconnect, the
    response task cancelled), ``close`` aborts the engine request if it is still running."""

    def __init__(self, p: Prepared, stream: RequestStream, tokenizer: Any,
                 disconnected: Callable[[], Awaitable[None]]) -> None:
        self.p = p
        self.stream = stream
        self.text = TextStream(tokenizer, p.stop, p.params.skip_special_tokens)
        self.token_ids: list[int] = []
        self.finish_reason: Optional[str] = None
        self.client_gone = False
        self._watcher = asyncio.create_task(self._watch(disconnected))

    async def _watch(self, disconnected: Callable[[], Awaitable[None]]) -> None:
        await disconnected()
        self.stream.queue.put_nowait(Delta(finish_reason=DISCONNECTED))

    def close(self) -> None:
        self._watcher.cancel()
        self.stream.abort()

    async def pieces(self) -> AsyncIterator[Piece]:
        """Text and token ids as they become final; the last piece carries the finish reason.
        Raises ``APIError`` if the engine refused or failed the request."""
        try:
            while self.finish_reason is None:
                delta = await self.stream.next()
                if delta.finish_reason == DISCONNECTED:
                    self.client_gone = True
                    return
                if delta.finish_reason == "rejected":
                    raise APIError(delta.error or "rejected by the engine")
                if delta.finish_reason == "error":
                    raise APIError(delta.error or "engine failure", status=500, type="server_error",
                                   code="engine_error")
                self.token_ids += delta.token_ids
                text = self.text.push(delta.token_ids, final=delta.finished)
                reason = delta.finish_reason
                if self.text.stopped_by is not None:
                    self.stream.abort()  # a stop string: the engine need not go on
                    reason = "stop"
                self.finish_reason = reason
                if text or reason or (self.p.return_token_ids and delta.token_ids):
                    yield Piece(text, list(delta.token_ids), reason)
        finally:
            self.close()

    def usage(self) -> dict:
        return protocol.usage(len(self.p.prompt_token_ids), len(self.token_ids))


async def collect(gen: Generation) -> Optional[dict]:
    """The whole (non-streamed) response body; None if the client went away first."""
    async for _ in gen.pieces():
        pass
    if gen.client_gone:
        return None
    p = gen.p
    if p.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": gen.text.text},
                  "logprobs": None, "finish_reason": gen.finish_reason}
        body = {"id": p.request_id, "object": "chat.completion", "created": p.created, "model": p.model}
    else:
        choice = {"index": 0, "text": gen.text.text, "logprobs": None, "finish_reason": gen.finish_reason}
        body = {"id": p.request_id, "object": "text_completion", "created": p.created, "model": p.model}
    if gen.text.stopped_by is not None:
        choice["stop_reason"] = gen.text.stopped_by  # vLLM's extension: which stop string
    if p.return_token_ids:
        choice["token_ids"] = list(gen.token_ids)
        body["prompt_token_ids"] = list(p.prompt_token_ids)
    return {**body, "choices": [choice], "usage": gen.usage()}


async def coalesced(gen: Generation, stream_interval: int) -> AsyncIterator[Piece]:
    """``gen``'s pieces regrouped as ``--stream-interval N`` streams them (vLLM's output
    processor: send when nothing has been sent yet or N tokens have gathered; the last piece
    always): the first token alone, then a chunk every N tokens, the rest with the finish
    reason. N = 1 passes every piece through. Why: fewer, larger chunks cut the server's
    per-token work, and a client measures one ITL a chunk (``sim.metrics.chunk_times`` is the
    simulator's side of it). Tokens are counted on the generation (a token whose text is held
    back makes no piece of its own). A reader that lags gets the steps it missed merged
    (``RequestStream.next``), so its chunk can hold more than N, as vLLM's collector merges."""
    if stream_interval <= 1:
        async for piece in gen.pieces():
            yield piece
        return
    sent = 0
    text, ids = "", []
    async for piece in gen.pieces():
        text += piece.text
        ids += piece.token_ids
        if sent == 0 or len(gen.token_ids) - sent >= stream_interval or piece.finish_reason:
            yield Piece(text, ids, piece.finish_reason)
            sent = len(gen.token_ids)
            text, ids = "", []


async def chunks(gen: Generation, stream_interval: int = 1) -> AsyncIterator[dict]:
    """The stream's chunk objects in order (the SSE framing and ``[DONE]`` are app.py's), one
    every ``stream_interval`` tokens after the first (``coalesced``). An engine failure
    mid-stream becomes one ``{"error": ...}`` chunk."""
    p = gen.p
    obj = "chat.completion.chunk" if p.kind == "chat" else "text_completion"
    head = {"id": p.request_id, "object": obj, "created": p.created, "model": p.model}
    extra = {"usage": None} if p.include_usage else {}
    if p.kind == "chat":  # OpenAI opens a chat stream with the role
        first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                 "finish_reason": None}
        if p.return_token_ids:
            first["token_ids"] = []
        yield {**head, "choices": [first], **extra,
               **({"prompt_token_ids": list(p.prompt_token_ids)} if p.return_token_ids else {})}
    sent_prompt_ids = p.kind == "chat"
    try:
        async for piece in coalesced(gen, stream_interval):
            if p.kind == "chat":
                delta = {"content": piece.text} if piece.text or not piece.finish_reason else {}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None,
                                          "finish_reason": piece.finish_reason}
            else:
                choice = {"index": 0, "text": piece.text, "logprobs": None, "finish_reason": piece.finish_reason}
            if piece.finish_reason and gen.text.stopped_by is not None:
                choice["stop_reason"] = gen.text.stopped_by
            chunk = {**head, "choices": [choice], **extra}
            if p.return_token_ids:
                choice["token_ids"] = piece.token_ids
                if not sent_prompt_ids:
                    chunk["prompt_token_ids"] = list(p.prompt_token_ids)
                    sent_prompt_ids = True
            yield chunk
    except APIError as exc:
        yield exc.body()
        return
    if p.include_usage and not gen.client_gone:
        yield {**head, "choices": [], "usage": gen.usage()}
