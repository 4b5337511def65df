"""kvplan's real engine: a Llama-family model on a paged KV cache, scheduled by ``sim.policies``.

The request path, in tree order: ``llm`` (front door: generate, chat, replay) -> ``llm_engine``
(the loop: schedule, execute, sample, update) -> ``model_runner`` (plan -> packed tensors) ->
``model`` + ``attention`` (the forward pass, through ``kernels``) -> ``sampling``; with
``weights`` (HF dir, GGUF, random) and ``kv_cache`` (the pool) set up once, and ``tracing``
(one JSONL line per step, calibration's input).
"""

from runtime.args import EngineArgs
from runtime.llm_engine import LLMEngine
from runtime.llm import LLM, TimedRequest
from runtime.outputs import CompletionOutput, RequestOutput
from runtime.sampling import SamplingParams

__all__ = [
    "LLM",
    "CompletionOutput",
    "EngineArgs",
    "LLMEngine",
    "RequestOutput",
    "SamplingParams",
    "TimedRequest",
]
