"""Fixtures for the server tests: a tiny random-weight Llama with a real byte-level tokenizer
(so text, multi-byte characters and a chat template all take the real code paths), and servers
on free loopback ports in this process.

Everything is local (HF_HUB_OFFLINE=1) and torch uses one thread, as in tests/runtime.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.serve.helpers import run_server, save_tiny_chat_model  # noqa: E402

torch.set_num_threads(1)

if not torch.cuda.is_available():  # as tests/runtime/conftest.py: fix Triton's mode first
    from kernels.interpreter import import_triton_interpreted

    import_triton_interpreted()


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("tiny_chat"))
    save_tiny_chat_model(path, chat_template=True)
    return path


@pytest.fixture(scope="session")
def plain_model_dir(tmp_path_factory) -> str:
    """The same weights and tokenizer without a chat template."""
    path = str(tmp_path_factory.mktemp("tiny_plain"))
    save_tiny_chat_model(path, chat_template=False)
    return path


@pytest.fixture(scope="module")
def server(chat_model_dir):
    """A default server (no API key, generous limits) over the tiny chat model."""
    with run_server(chat_model_dir) as s:
        yield s


@pytest.fixture(scope="module")
def strict_server(plain_model_dir):
    """An API key, two concurrent requests, 4 KiB bodies, and a model without a chat template."""
    with run_server(plain_model_dir, api_key="sekret", max_concurrent_requests=2, max_body_bytes=4096) as s:
        yield s
