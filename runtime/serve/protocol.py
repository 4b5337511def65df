"""The OpenAI wire format: request bodies as strict pydantic models, the error body, and the
response and stream-chunk dicts.

Strict, because a client that sends ``"max_tokens": "16"`` or ``"stream": 1`` has a bug it should
hear about (400), not a guess. Fields we do not know are ignored (vLLM does the same: clients
send ``user``, ``metadata``... freely); fields we know but cannot honour (``n > 1``, ``echo``,
``logprobs``, penalties) are refused by name rather than silently dropped.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: At most this many stop strings (OpenAI's limit).
MAX_STOP_STRINGS = 4


class APIError(Exception):
    """An error the client caused (or must wait out), sent as OpenAI's error body."""

    def __init__(self, message: str, status: int = 400, param: Optional[str] = None,
                 code: Optional[str] = None, type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.type = message, status, param, code, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


# --- requests ------------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool = False


class _SamplingRequest(_Strict):
    """What completions and chat completions share: the model, sampling and streaming."""

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)  # extension (vLLM): 0 or -1 = off
    seed: Optional[int] = Field(None, ge=-2**63, lt=2**64)
    n: int = 1
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    stop: Union[str, list[str], None] = None
    # Extensions with vLLM's names.
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    return_token_ids: bool = False
    # Known to OpenAI, accepted only at their neutral value.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[dict[str, float]] = None
    user: Optional[str] = None

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    def check_supported(self) -> None:
        """Refuse, by name, what the engine cannot do."""
        if self.n != 1:
            raise APIError("n: only n=1 is supported", param="n")
        if self.presence_penalty or self.frequency_penalty:
            param = "presence_penalty" if self.presence_penalty else "frequency_penalty"
            raise APIError(f"{param}: penalties are not supported", param=param)
        if self.logit_bias:
            raise APIError("logit_bias is not supported", param="logit_bias")
        if len(self.stop_strings()) > MAX_STOP_STRINGS:
            raise APIError(f"stop: at most {MAX_STOP_STRINGS} stop strings", param="stop")
        if self.stream_options is not None and not self.stream:
            raise APIError("stream_options: only allowed when stream is true", param="stream_options")

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class CompletionRequest(_SamplingRequest):
    prompt: Union[str, list[int], list[str], list[list[int]]]
    echo: bool = False
    best_of: Optional[int] = None
    logprobs: Optional[int] = None
    suffix: Optional[str] = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.echo:
            raise APIError("echo: only echo=false is supported", param="echo")
        if self.best_of not in (None, 1):
            raise APIError("best_of: only best_of=1 is supported", param="best_of")
        if self.logprobs is not None:
            raise APIError("logprobs are not supported", param="logprobs")
        if self.suffix:
            raise APIError("suffix is not supported", param="suffix")

    def single_prompt(self) -> Union[str, list[int]]:
        """The one prompt: a string or token ids (a batch of one is unwrapped)."""
        p: Any = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            if len(p) != 1:
                raise APIError(f"prompt: {len(p)} prompts in one request; send one prompt per request",
                               param="prompt")
            p = p[0]
        if not p:
            raise APIError("prompt: empty prompt", param="prompt")
        return p


class ContentPart(_Strict):
    type: str
    text: Optional[str] = None


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None

    def as_template_input(self) -> dict:
        """``{"role", "content"}`` with text parts joined (chat templates expect a string)."""
        content = self.content
        if isinstance(content, list):
            kinds = {p.type for p in content} - {"text"}
            if kinds:
                raise APIError(f"messages: content parts of type {sorted(kinds)[0]!r} are not supported "
                               f"(text only)", param="messages")
            content = "".join(p.text or "" for p in content)
        out = {"role": self.role, "content": content or ""}
        if self.name:
            out["name"] = self.name
        return out


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    tools: Optional[list[Any]] = None
    tool_choice: Optional[Any] = None
    response_format: Optional[dict] = None

    def check_supported(self) -> None:
        super().check_supported()
        if self.logprobs or self.top_logprobs:
            raise APIError("logprobs are not supported", param="logprobs")
        if self.tools:
            raise APIError("tools are not supported", param="tools")
        if self.response_format not in (None, {"type": "text"}):
            raise APIError("response_format: only text is supported", param="response_format")

    @property
    def requested_max_tokens(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


#: Fields that take several shapes: their validation errors name each shape tried (loc
#: ``("prompt", "list[int]", 1)``); one "expected ..." reads better than four failures.
_UNION_FIELDS = {
    "prompt": "a string, a list of token ids, or a list holding one of these",
    "stop": "a string or a list of strings",
    "content": "a string or a list of text parts",
}


def parse(model: type[_SamplingRequest], body: bytes) -> Any:
    """Validate a JSON body into ``model``; any problem is one 400 naming the field."""
    try:
        req = model.model_validate_json(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        if err["type"] == "json_invalid":
            raise APIError(f"request body is not valid JSON: {err['msg'].removeprefix('Invalid JSON: ')}",
                           code="invalid_json") from None
        loc = [str(x) for x in err["loc"]]
        message = f"{'.'.join(loc) or 'request body'}: {err['msg']}"
        for i, part in enumerate(loc[:-1]):
            if part in _UNION_FIELDS:
                message = f"{'.'.join(loc[:i + 1])}: expected {_UNION_FIELDS[part]}"
                break
        raise APIError(message, param=loc[0] if loc else None) from None
    req.check_supported()
    return req


# --- responses -----------------------------------------------------------------------------

def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def model_card(name: str, created: int, max_model_len: int) -> dict:
    return {"id": name, "object": "model", "created": created, "owned_by": "kvplan",
            "root": name, "max_model_len": max_model_len}
