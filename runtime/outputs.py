"""What ``generate`` hands back, shaped like vLLM's ``RequestOutput`` so callers port over,
plus the per-token timestamps and preemption counts that capacity planning needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from sim.policies import Request


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    #: Engine-clock seconds at which each output token was emitted (same clock as arrival_time).
    token_times: list[float]
    finish_reason: Optional[str]  # "stop" | "length" | "abort" | "rejected"


@dataclass
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: Optional[float]
    first_token_time: Optional[float]
    finish_time: Optional[float]
    ttft: Optional[float]
    tpot: Optional[float]
    e2el: Optional[float]
    num_preemptions: int
    num_cached_tokens: int
    #: Speculative decoding: draft tokens verified, how many were accepted, in how many steps.
    num_spec_proposed: int = 0
    num_spec_accepted: int = 0
    num_spec_steps: int = 0


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    #: Why the request was refused (it never ran), e.g. longer than max_model_len.
    reject_reason: Optional[str] = None
    extra: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def finish_reason(self) -> Optional[str]:
        return self.outputs[0].finish_reason


def request_output(req: Request, prompt: Optional[str], text: str) -> RequestOutput:
    """Snapshot a finished (or rejected, or aborted) policy ``Request``."""
    rejected = req.reject_reason is not None and not req.output_token_ids
    reason = "rejected" if rejected else req.finish_reason
    metrics = RequestMetrics(
        arrival_time=req.arrival_time,
        first_scheduled_time=req.first_scheduled_time,
        first_token_time=req.token_times[0] if req.token_times else None,
        finish_time=req.finish_time,
        ttft=req.ttft,
        tpot=req.tpot,
        e2el=req.e2el,
        num_preemptions=req.num_preemptions,
        num_cached_tokens=req.num_cached_tokens,
        num_spec_proposed=req.num_spec_proposed,
        num_spec_accepted=req.num_spec_accepted,
        num_spec_steps=req.num_spec_steps,
    )
    completion = CompletionOutput(0, text, list(req.output_token_ids), list(req.token_times), reason)
    return RequestOutput(
        request_id=req.request_id,
        prompt=prompt,
        prompt_token_ids=list(req.prompt_token_ids or []),
        outputs=[completion],
        finished=req.is_finished,
        metrics=metrics,
        reject_reason=req.reject_reason,
    )
