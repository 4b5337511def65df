"""The serving front end: the work an OpenAI-compatible API server does around the engine, which a
benchmark's TTFT and TPOT include and a step pricer does not.

Why: every figure users compare against (``vllm bench serve``, GuideLLM, inference-perf, genai-perf)
is measured by a client over HTTP. Between the client and vLLM's engine core sit the API server
process (uvicorn/FastAPI: HTTP and JSON, request validation, tokenising the prompt, the engine-core
round trip over ZMQ) and, for each token, incremental detokenisation and one SSE chunk per request
per step. Left out, TTFT comes out 6-17 ms low on every real H100 run kvplan has
(``benchmarks/sim_vs_real_vllm.py``), at every load.

The model (``FrontEnd``), three terms, from vLLM's structure:

- ``request_s``: per request, fixed: HTTP, validation, the engine-core IPC both ways, the first
  chunk's delivery and the client's own parsing. **Fitted** to the shared vLLM 0.15.1 H100 runs
  (16 runs, 4 models, inference-perf clients; ``python benchmarks/sim_vs_real_vllm.py
  --fit-frontend``, their inference-perf prompts tokenised as synthetic text): 6.96 ms on all
  four; fitted on three and tested on the fourth, 6.1-9.9 ms, and mean TTFT MAPE 10.9% held out
  (18.6% without the term). Llama-2-7B's gap is the smallest
  (about 6 ms) and Mixtral's the largest (9-17 ms): part of what the term absorbs grows with the
  model, so it is not all API server.
- ``tokenize_s_per_token``: per prompt token. **Measured** on a server-class CPU
  (``benchmarks/frontend_costs.py``: a Rust fast tokenizer's encode, one request at a time), for
  natural prose; ``SYNTHETIC_TOKENIZE_FACTOR`` times that for prompts decoded from synthetic
  token ids (``workload.prompt_text: synthetic``, what benchmark clients' random datasets send).
- ``stream_s_per_chunk``: per chunk streamed (incremental detokenise + JSON + SSE framing).
  **Measured** by the same script. A request streams one chunk per step, or, under
  ``engine.stream_interval N`` (vLLM's and SGLang's ``--stream-interval``), its first token at
  once and then one chunk every N tokens: vLLM's output processor sends when nothing was sent
  yet or N tokens have gathered (``vllm/v1/engine/output_processor.py``, #27869), SGLang's
  scheduler when ``len(output_ids) % N == 1`` (``stream_output_generation``). TTFT is unchanged;
  the server's per-step work falls N-fold.

How the simulator uses them (``sim.simulation.Simulation``): each replica has its own API server,
and requests pass a server one at a time (one event loop): a request reaches the scheduler
``request_s + tokenize_s_per_token x prompt`` after the first free server is done with the
requests sent to it before, so a burst of sends (a closed
loop's clients all finishing in one step) queues and spreads out as it does on a real server.
Streaming competes for that same core: a step's outputs cannot be delivered faster than
``stream_s_per_chunk`` x the requests in it, which the step pricer takes as a floor on the step's
time (``sim.pricing.adjusted.FrontEndFloor``): invisible at today's batch sizes on a large model,
the bound for a small model at high concurrency.

``engine.frontend: none`` (an offline ``LLM.generate`` benchmark, or kvplan's in-process validation)
leaves all three out. ``engine.frontend_*`` keys override each term.

Layer L0: no simulator imports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

from sim.errors import ConfigError


#: What the prompts' text is (``workload.prompt_text``), for the tokenising cost: ``natural`` prose
#: (real traffic, ShareGPT, GuideLLM's and aiperf's corpus-drawn prompts); ``synthetic`` text
#: decoded from made-up token ids (``vllm bench serve --dataset-name random``, InferenceX,
#: inference-perf's random and shared-prefix data, SGLang's ``bench_serving`` random), which a BPE
#: tokenizer encodes about twice as slowly; ``token_ids``: prompts sent as lists of token ids
#: (``kvplan loadgen``'s token-id prompts, SGLang's ``random-ids`` dataset), not tokenised at all.
PROMPT_TEXTS: tuple[str, ...] = ("natural", "synthetic", "token_ids")


@dataclass(frozen=True)
class FrontEnd:
    """One front end's costs, in seconds; ``source`` says where each number comes from."""

    name: str
    request_s: float
    tokenize_s_per_token: float
    stream_s_per_chunk: float
    source: str = ""
    #: ``--stream-interval``: tokens per streamed chunk after the first (1: every token).
    stream_interval: int = 1

    @property
    def active(self) -> bool:
        return self.request_s > 0 or self.tokenize_s_per_token > 0 or self.stream_s_per_chunk > 0

    def ingress_s(self, prompt_len: int) -> float:
        """The API server's time on one request before the scheduler sees it."""
        return self.request_s + self.tokenize_s_per_token * prompt_len

    @property
    def ingress(self) -> Optional[Callable[[int], float]]:
        """``ingress_s``, or None when the front end spends nothing on a request (the
        simulators then skip its queue)."""
        return self.ingress_s if self.request_s > 0 or self.tokenize_s_per_token > 0 else None

    def with_overrides(self, request_ms: Optional[float] = None, tokenize_us: Optional[float] = None,
                       stream_us: Optional[float] = None) -> "FrontEnd":
        """This front end with the ``engine.frontend_*`` keys that are set applied."""
        out = self
        if request_ms is not None:
            out = replace(out, request_s=request_ms / 1e3)
        if tokenize_us is not None:
            out = replace(out, tokenize_s_per_token=tokenize_us / 1e6)
        if stream_us is not None:
            out = replace(out, stream_s_per_chunk=stream_us / 1e6)
        if out is not self:
            out = replace(out, source=out.source + "; overridden by engine.frontend_* keys")
        return out

    def with_stream_interval(self, interval: int) -> "FrontEnd":
        """This front end streaming one chunk every ``interval`` tokens after the first."""
        return self if interval == self.stream_interval else replace(self, stream_interval=int(interval))

    def for_prompt_text(self, prompt_text: str) -> "FrontEnd":
        """This front end tokenising ``prompt_text`` (``workload.prompt_text``): ``synthetic``
        text (decoded from made-up token ids, as benchmark clients' random datasets send) costs
        ``SYNTHETIC_TOKENIZE_FACTOR`` times natural prose's per token: such text has no common
        words, so the BPE merges every piece from bytes and its word cache never hits.
        ``token_ids`` prompts arrive tokenised and cost nothing per token."""
        if prompt_text == "natural" or self.tokenize_s_per_token <= 0:
            return self
        if prompt_text == "token_ids":  # the prompt arrives tokenised: nothing to encode
            return replace(self, tokenize_s_per_token=0.0,
                           source=self.source + "; prompts sent as token ids: no tokenising")
        if prompt_text != "synthetic":
            raise ConfigError(f"workload.prompt_text: {prompt_text!r} is not one of {', '.join(PROMPT_TEXTS)}")
        return replace(self, tokenize_s_per_token=self.tokenize_s_per_token * SYNTHETIC_TOKENIZE_FACTOR,
                       source=self.source + f"; synthetic-token prompts: tokenise x{SYNTHETIC_TOKENIZE_FACTOR:g} "
                                            f"(measured, benchmarks/frontend_costs.py)")

    def summary(self) -> dict:
        """``summary.json`` ``cost_model.frontend``: the terms in ms / us and their source."""
        return {"name": self.name, "request_ms": round(self.request_s * 1e3, 4),
                "tokenize_us_per_token": round(self.tokenize_s_per_token * 1e6, 4),
                "stream_us_per_chunk": round(self.stream_s_per_chunk * 1e6, 3),
                "stream_interval": self.stream_interval, "source": self.source}


#: Measured by ``benchmarks/frontend_costs.py`` (results in benchmarks/results/frontend_costs.json).
TOKENIZE_US_PER_TOKEN = 1.0
STREAM_US_PER_CHUNK = 5.5
#: Encoding text decoded from synthetic token ids (random ids, or runs of consecutive ids, as
#: ``vllm bench serve``'s random dataset, InferenceX and inference-perf make prompts) over
#: encoding natural prose, per token, each prompt new to the tokenizer: 2.06-2.33 at 1k and 8k
#: tokens, median 2.21 (``benchmarks/frontend_costs.py``, SmolLM2's byte-level BPE; an earlier run
#: 2.12; tiktoken's BPE on Mistral's 131k Tekken vocabulary measured 2.7-3.4 the same way). A ratio
#: measured within one run, so it holds on another CPU where the absolute figure would not.
SYNTHETIC_TOKENIZE_FACTOR = 2.2
#: Fitted on the shared vLLM 0.15.1 H100 runs (``benchmarks/sim_vs_real_vllm.py --fit-frontend``).
REQUEST_MS = 6.96

FRONTENDS: dict[str, FrontEnd] = {
    "api_server": FrontEnd(
        "api_server", REQUEST_MS / 1e3, TOKENIZE_US_PER_TOKEN / 1e6, STREAM_US_PER_CHUNK / 1e6,
        source=(f"request {REQUEST_MS:g} ms fitted on 16 real vLLM 0.15.1 H100 runs of 4 models "
                f"(held out by model: mean TTFT MAPE 10.9%); tokenise {TOKENIZE_US_PER_TOKEN:g} us/token "
                f"and stream {STREAM_US_PER_CHUNK:g} us/chunk measured on one CPU core "
                f"(benchmarks/frontend_costs.py)")),
    "none": FrontEnd("none", 0.0, 0.0, 0.0, source="engine.frontend none: offline engine, no API server"),
}
FRONTEND_NAMES: tuple[str, ...] = tuple(FRONTENDS)


def get_frontend(name: str) -> FrontEnd:
    try:
        return FRONTENDS[name]
    except KeyError:
        raise ConfigError(f"engine.frontend: unknown front end {name!r}; one of "
                          f"{', '.join(FRONTEND_NAMES)}") from None


__all__ = ["FRONTENDS", "FRONTEND_NAMES", "PROMPT_TEXTS", "FrontEnd", "get_frontend"]
