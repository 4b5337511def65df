"""Fixtures for the load generator's end-to-end tests: a tiny random-weight model that
``kvplan serve`` loads in seconds, with SmolLM2's real tokenizer (so text prompts, chat
templates and GuideLLM's synthetic data work as against a real model), and the server itself
in a subprocess on a free loopback port. Everything is local (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_gc_pauses():
    """The fake server runs in a thread of the test process, so a pause of that process stalls
    client and server together and every timing assertion fails at once. The largest such pause
    under our control is a full garbage collection late in a long suite (CI saw five requests
    meant for 0.0-0.4 s all reach the server within 3 ms): collect before each test and keep
    the collector off during it."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer Llama (hidden 64) with SmolLM2's vocabulary, saved with save_pretrained, and
    SmolLM2's tokenizer (converted from the packaged GGUF) beside it."""
    pytest.importorskip("torch")
    import torch
    import transformers

    from runtime.weights import gguf_tokenizer, smollm2_gguf_path

    cache = tmp_path_factory.mktemp("kvplan_cache")
    old = os.environ.get("KVPLAN_CACHE")
    os.environ["KVPLAN_CACHE"] = str(cache)  # not the user's home
    try:
        tok = gguf_tokenizer(smollm2_gguf_path())
    finally:
        if old is None:
            os.environ.pop("KVPLAN_CACHE", None)
        else:
            os.environ["KVPLAN_CACHE"] = old
    path = tmp_path_factory.mktemp("tiny")
    config = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@dataclass
class Served:
    url: str           # the API base, .../v1
    model: str         # its /v1/models id
    model_dir: Path
    log: Path


@pytest.fixture(scope="module")
def kvplan_server(tiny_model, tmp_path_factory):
    """``kvplan serve --model <tiny> --port 0`` in a subprocess; stopped with SIGTERM."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "kvplan.cli.main", "serve", "--model", str(tiny_model),
                                 "--port", "0", "--threads", "1", "--max-model-len", "1024"],
                                cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    try:
        url = None
        deadline = time.monotonic() + 90
        while url is None and time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"kvplan serve exited: {log.read_text()[-2000:]}")
            m = re.search(r"serving (.+) on (http://\S+)", log.read_text())
            if m:
                url = m.group(2)
            else:
                time.sleep(0.2)
        if url is None:
            pytest.fail(f"kvplan serve did not start in 90 s: {log.read_text()[-2000:]}")
        yield Served(url=f"{url}/v1", model=m.group(1), model_dir=tiny_model, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
