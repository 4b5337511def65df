"""Ready-made workloads, so the default scenario states its assumptions in one place.

ShareGPT-like lengths: the vLLM paper (SOSP'23, Fig. 11) reports ShareGPT means of 161 input and
338 output tokens, but not their spread. We take the CVs of the real ShareGPT table in
../shared/traces (sarathi-serve's ShareGPT-8k, Llama-2 tokenizer): input CV 0.89, output CV 0.61,
rounded to 0.9 and 0.6. Its means are larger (multi-turn history is folded into the prefill),
so only the shape is borrowed. Caps follow ``vllm bench serve``'s ShareGPT filter
(prompt < 1024, prompt + output < 2048): inputs at most 1024 and outputs at most 1024 tokens,
which clip about 0.3% of inputs and 1.1% of outputs and lower the sampled means to about
160 / 335 (within 1% of the paper's).
"""

from __future__ import annotations

from typing import Any


def sharegpt_like(num_requests: int = 1000, rate: float = 2.0) -> dict[str, Any]:
    """A fresh ``workload`` dict: Poisson arrivals at ``rate`` req/s, ShareGPT-like lengths."""
    return {
        "num_requests": num_requests,
        "arrival": {"process": "poisson", "rate": rate},
        "input_len": {"dist": "lognormal", "mean": 161, "cv": 0.9, "max": 1024},
        "output_len": {"dist": "lognormal", "mean": 338, "cv": 0.6, "max": 1024},
    }
