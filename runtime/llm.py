"""``LLM``: the vLLM-style front door. Offline ``generate`` (everything queued at once) and
online ``replay`` (requests arriving over wall-clock time, as a workload trace says)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from runtime.args import EngineArgs
from runtime.llm_engine import LLMEngine
from runtime.outputs import RequestOutput, request_output
from runtime.sampling import SamplingParams
from sim.errors import ConfigError

Prompt = Union[str, Sequence[int]]


@dataclass
class TimedRequest:
    """One request of an online replay: it is submitted ``arrival`` seconds after the start."""

    arrival: float
    prompt: Prompt
    params: SamplingParams
    request_id: Optional[str] = None


class LLM:
    """``LLM(model, **engine_args)``; see ``EngineArgs`` for the knobs and
    ``runtime.weights.load_model`` for the model strings."""

    def __init__(self, model: Optional[str] = None, **engine_args: Any) -> None:
        self.engine = LLMEngine.from_args(EngineArgs.from_kwargs(model, engine_args))

    @classmethod
    def from_engine(cls, engine: LLMEngine) -> "LLM":
        llm = cls.__new__(cls)
        llm.engine = engine
        return llm

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    # --- offline ---------------------------------------------------------------------------
    def generate(self, prompts: Union[Prompt, Sequence[Prompt], None] = None,
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 prompt_token_ids: Optional[Sequence[Sequence[int]]] = None,
                 use_tqdm: bool = False) -> list[RequestOutput]:
        """Queue every prompt now, run until all finish; outputs in input order. Rejected
        prompts come back with ``finish_reason == "rejected"`` and a ``reject_reason``.
        ``use_tqdm`` shows finished requests and output tokens/s on stderr."""
        items = _normalise_prompts(prompts, prompt_token_ids)
        params = _per_prompt(sampling_params, len(items))
        return self._run([TimedRequest(0.0, p, sp) for p, sp in zip(items, params)], online=False,
                         use_tqdm=use_tqdm)

    def chat(self, messages: Union[list[dict], list[list[dict]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None) -> list[RequestOutput]:
        """Apply the model's chat template (from the GGUF or tokenizer_config) and generate."""
        tok = self.engine.tokenizer
        if tok is None or not getattr(tok, "chat_template", None):
            raise ConfigError("chat: this model has no chat template")
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        # The template already holds any BOS: tokenise without adding special tokens again.
        ids = [tok.encode(p, add_special_tokens=False) for p in prompts]
        return self.generate(prompt_token_ids=ids, sampling_params=sampling_params)

    # --- online ----------------------------------------------------------------------------
    def replay(self, requests: Sequence[TimedRequest], use_tqdm: bool = False) -> list[RequestOutput]:
        """Submit each request at its arrival offset (wall clock) while the engine keeps
        stepping; arrival_time is the scheduled arrival, so TTFT includes any lateness of the
        engine in picking it up, as a real server's would. Outputs in input order."""
        return self._run(list(requests), online=True, use_tqdm=use_tqdm)

    def _run(self, requests: list[TimedRequest], online: bool, use_tqdm: bool = False) -> list[RequestOutput]:
        from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs: types-tqdm is no dependency

        engine = self.engine
        bar = tqdm(total=len(requests), desc="requests", unit="req", disable=not use_tqdm, leave=False)
        out_tokens = 0
        order = sorted(range(len(requests)), key=lambda i: requests[i].arrival) if online else list(range(len(requests)))
        base = engine.now()
        outputs: dict[str, RequestOutput] = {}
        ids: list[str] = []
        rid_of: dict[int, str] = {}
        pending = 0
        while pending < len(order) or engine.has_unfinished():
            now = engine.now()
            while pending < len(order) and (not online or base + requests[order[pending]].arrival <= now):
                i = order[pending]
                r = requests[i]
                req = engine.add_request(r.prompt, r.params, r.request_id,
                                         arrival_time=base + r.arrival if online else None)
                rid_of[i] = req.request_id
                if req.reject_reason is not None:
                    outputs[req.request_id] = request_output(req, r.prompt if isinstance(r.prompt, str) else None, "")
                pending += 1
            if engine.has_unfinished():
                for out in engine.step():
                    outputs[out.request_id] = out
                    out_tokens += len(out.token_ids)
                    bar.update(1)
                    bar.set_postfix_str(f"{out_tokens / max(engine.now() - base, 1e-9):.0f} out tok/s", refresh=False)
            elif pending < len(order):
                time.sleep(max(0.0, base + requests[order[pending]].arrival - engine.now()))
        bar.close()
        ids = [rid_of[i] for i in range(len(requests))]
        return [outputs[r] for r in ids]


def _normalise_prompts(prompts: Any, prompt_token_ids: Any) -> list[Prompt]:
    if prompts is not None and prompt_token_ids is not None:
        raise ConfigError("generate: give prompts or prompt_token_ids, not both")
    if prompt_token_ids is not None:
        return [list(p) for p in prompt_token_ids]
    if prompts is None:
        raise ConfigError("generate: no prompts")
    if isinstance(prompts, str):
        return [prompts]
    prompts = list(prompts)
    if prompts and all(isinstance(t, int) for t in prompts):
        return [prompts]  # one prompt given as token ids
    return prompts


def _per_prompt(sp: Any, n: int) -> list[SamplingParams]:
    if sp is None:
        return [SamplingParams() for _ in range(n)]
    if isinstance(sp, SamplingParams):
        return [sp] * n
    sp = list(sp)
    if len(sp) != n:
        raise ConfigError(f"generate: {len(sp)} sampling params for {n} prompts")
    return sp
