"""The engine on the Triton kernels (what runs on a GPU), here through Triton's CPU
interpreter: same greedy tokens as transformers, on a tiny model and short generations."""

from __future__ import annotations

import random

import pytest

from kernels.interpreter import interpreter_ready
from runtime import LLM, SamplingParams
from tests.runtime.helpers import VOCAB, hf_greedy


@pytest.fixture
def interpret(monkeypatch):
    if not interpreter_ready():
        pytest.skip("needs triton imported with TRITON_INTERPRET=1 (not installed, or imported compiled first)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_triton_kernels_keep_greedy_parity(hf_models, interpret):
    path, model = hf_models["gqa"]
    rng = random.Random(7)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 9, 6)]
    llm = LLM(path, device="cpu", attention_backend="triton", block_size=4, num_kv_blocks=32,
              max_num_batched_tokens=8)
    outs = llm.generate(prompt_token_ids=prompts, sampling_params=SamplingParams(temperature=0, max_tokens=4))
    assert [o.token_ids for o in outs] == [hf_greedy(model, p, 4) for p in prompts]
    assert llm.engine.num_leaked_blocks() == 0
