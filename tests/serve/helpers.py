"""Helpers for the server tests: the tiny model on disk, an in-process server, SSE parsing."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import torch

#: The tokenizer's special tokens, then the 256 byte-level symbols: 261 ids, the model's vocab.
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
EOS = 2
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
#: Engine arguments every test server and every reference LLM uses.
ENGINE_KWARGS = dict(device="cpu", dtype="float32", kv_cache_bytes=4 << 20, block_size=16, max_num_seqs=128)


def byte_level_tokenizer(chat_template: bool) -> Any:
    """A byte-level BPE tokenizer with no merges: every byte is a token, so "é" is two tokens
    and "€" three, which is what incremental detokenisation must get right."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True) for s in SPECIALS])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   chat_template=CHAT_TEMPLATE if chat_template else None)


def save_tiny_chat_model(path: str, chat_template: bool, seed: int = 0) -> None:
    """A random-weight 2-layer Llama (GQA) and its tokenizer, saved as an HF directory."""
    import transformers

    tokenizer = byte_level_tokenizer(chat_template)
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                      num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                                      max_position_embeddings=256, bos_token_id=1, eos_token_id=EOS)
    transformers.LlamaForCausalLM(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)


@dataclass
class RunningServer:
    url: str  # http://127.0.0.1:PORT
    app: Any
    server: Any  # the DrainingServer
    thread: threading.Thread

    @property
    def state(self) -> Any:
        return self.app.state.server

    def on_engine(self, fn, timeout: float = 30.0) -> Any:
        """``fn(engine)`` on the engine thread, between steps."""
        return self.state.engine_loop.call(fn).result(timeout)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until the engine holds no request (aborts of gone clients included)."""
        deadline = time.monotonic() + timeout
        while self.on_engine(lambda e: e.has_unfinished()) or self.state.inflight:
            assert time.monotonic() < deadline, "the engine never went idle"
            time.sleep(0.02)


@contextlib.contextmanager
def run_server(model_dir: str, **config: Any) -> Iterator[RunningServer]:
    """``kvplan serve`` in a thread of this process, on a free loopback port."""
    from runtime import EngineArgs, LLMEngine
    from runtime.serve.app import ServeConfig, create_app
    from runtime.serve.server import DrainingServer, bind

    engine = LLMEngine.from_args(EngineArgs(model=model_dir, **ENGINE_KWARGS))
    app = create_app(engine, ServeConfig(model_name="tiny", **config))
    server = DrainingServer(app)
    sock = bind("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield RunningServer(f"http://127.0.0.1:{sock.getsockname()[1]}", app, server, thread)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        engine.close()


@contextlib.contextmanager
def slow_steps(server: RunningServer, seconds: float) -> Iterator[None]:
    """Every engine step takes ``seconds`` longer: requests stay in flight long enough for a
    test to act while they run, whatever the machine's speed."""
    def install(engine: Any) -> None:
        step = engine.step

        def slow() -> Any:
            time.sleep(seconds)
            return step()
        engine.step = slow

    server.on_engine(install)
    try:
        yield
    finally:
        if server.state.engine_loop.alive:
            server.on_engine(lambda engine: delattr(engine, "step"))
        else:  # the server has stopped, and the engine thread with it
            delattr(server.state.engine, "step")


def sse_events(lines: Iterator[str]) -> Iterator[Any]:
    """The JSON objects of an SSE stream, up to ``data: [DONE]`` (which must come)."""
    for line in lines:
        if not line.startswith("data: "):
            continue
        data = line[len("data: "):]
        if data == "[DONE]":
            return
        yield json.loads(data)
    raise AssertionError("the stream ended without data: [DONE]")
