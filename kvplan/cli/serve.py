"""``kvplan serve``: the real engine behind an OpenAI-compatible HTTP API (runtime/serve).

Flags are checked before the model loads and the port is bound before it too, so a typo or a
busy port costs one line (exit 2), not a model load. starlette, uvicorn and torch are imported
when the command runs, never at ``kvplan --help``.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import sys
from typing import TYPE_CHECKING, Optional

import typer

from kvplan.cli.common import MODEL_HELP, SPEC_HELP, need_runtime, require
from kvplan.cli.engine import _engine_kwargs

if TYPE_CHECKING:
    import socket

API_KEY_ENV = "KVPLAN_API_KEY"


def serve(
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback unless you say otherwise)."),
    port: int = typer.Option(8000, "--port", help="TCP port; 0 picks a free one (printed at start)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar=API_KEY_ENV, show_envvar=True,
                                          help="Require 'Authorization: Bearer <key>' on /v1/*."),
    served_model_name: Optional[str] = typer.Option(None, "--served-model-name",
                                                    help="The model id clients send (default: the --model string, or smollm2)."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len",
                                                help="Prompt + output tokens per request (default: the model's)."),
    max_tokens_limit: int = typer.Option(4096, "--max-tokens-limit", help="Largest max_tokens a request may ask for."),
    max_concurrent_requests: int = typer.Option(256, "--max-concurrent-requests",
                                                help="Requests in flight at once; more get 429."),
    max_body_bytes: int = typer.Option(1 << 20, "--max-body-bytes", help="Largest request body; larger get 413."),
    stream_interval: int = typer.Option(1, "--stream-interval",
                                        help="Tokens per streamed chunk after the first, which goes out at once "
                                             "(vLLM's and SGLang's --stream-interval; the simulator's "
                                             "engine.stream_interval)."),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout",
                                        help="Seconds SIGTERM waits for requests in flight before aborting them."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    dtype: str = typer.Option("auto", "--dtype", help="auto, float32, float16, bfloat16."),
    kv_cache_mib: Optional[float] = typer.Option(None, "--kv-cache-mib",
                                                 help="KV pool size (default 512 MiB on CPU, 90% of free GPU memory on CUDA)."),
    block_size: int = typer.Option(16, "--block-size"),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens"),
    prefix_caching: bool = typer.Option(True, "--enable-prefix-caching/--no-enable-prefix-caching"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads (default on a CPU: one fewer than the cores, leaving one to the HTTP server and clients; on a GPU: torch's)."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Write the per-step JSONL trace here."),
    num_speculative_tokens: int = typer.Option(0, "--num-speculative-tokens", "-k", help=SPEC_HELP),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level (info shows each request)."),
) -> None:
    """Serve the real engine over an OpenAI-compatible HTTP API (/v1/completions,
    /v1/chat/completions, /v1/models, /health, /metrics)."""
    require("--port", port, 0 <= port <= 65535, "an integer from 0 to 65535")
    require("--max-model-len", max_model_len, max_model_len is None or max_model_len >= 2, "an integer >= 2")
    require("--max-tokens-limit", max_tokens_limit, max_tokens_limit >= 1, "an integer >= 1")
    require("--max-concurrent-requests", max_concurrent_requests, max_concurrent_requests >= 1, "an integer >= 1")
    require("--max-body-bytes", max_body_bytes, max_body_bytes >= 1024, "an integer >= 1024")
    require("--stream-interval", stream_interval, stream_interval >= 1, "an integer >= 1")
    require("--drain-timeout", drain_timeout, 0 <= drain_timeout < math.inf, "a finite number of seconds >= 0")
    require("--api-key", "(hidden)", api_key is None or api_key.strip() != "", "a non-empty key")
    require("--log-level", log_level, log_level in ("critical", "error", "warning", "info", "debug", "trace"),
            "critical, error, warning, info, debug or trace")
    kwargs = _engine_kwargs(device, dtype, kv_cache_mib, block_size, max_num_seqs, max_num_batched_tokens,
                            prefix_caching, threads, trace, num_speculative_tokens)
    kwargs["max_model_len"] = max_model_len
    need_runtime("serve")
    try:
        import runtime.serve.server  # noqa: F401  (starlette, uvicorn, pydantic)
    except ImportError as exc:
        from sim.errors import ConfigError

        raise ConfigError(f"serve needs the serve extra ({exc.name} is missing): "
                          f"pip install 'kvplan[serve]'") from None
    sock = _listen(host, port)
    try:
        _run(sock, host, model, kwargs, log_level, served_model_name,
             dict(api_key=api_key, max_tokens_limit=max_tokens_limit, max_concurrent_requests=max_concurrent_requests,
                  max_body_bytes=max_body_bytes, drain_timeout_s=drain_timeout, stream_interval=stream_interval))
    finally:
        sock.close()


def _run(sock: "socket.socket", host: str, model: Optional[str], engine_kwargs: dict, log_level: str,
         served_model_name: Optional[str], limits: dict) -> None:
    """Load the model, then serve on ``sock`` until a signal's drain ends."""
    from runtime import EngineArgs, LLMEngine
    from runtime.serve.app import ServeConfig, create_app
    from runtime.serve.server import DrainingServer
    from runtime.weights import DEFAULT_MODEL

    if engine_kwargs.get("num_threads") is None:
        engine_kwargs = {**engine_kwargs, "num_threads": serving_threads(engine_kwargs.get("device", "auto"))}
        if engine_kwargs["num_threads"] is not None:
            typer.echo(f"engine: {engine_kwargs['num_threads']} torch thread(s), one core left for the HTTP "
                       f"server and its clients (--threads to change)", err=True)
    engine = LLMEngine.from_args(EngineArgs.from_kwargs(model, engine_kwargs))
    try:
        name = served_model_name or model or DEFAULT_MODEL  # vLLM's default: the --model string
        app = create_app(engine, ServeConfig(model_name=name, **limits))
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        typer.echo(f"serving {name} on http://{shown}:{bound_port}", err=True)
        if limits["api_key"] is None and not _is_loopback(host):
            typer.echo(f"warning: listening on {host} without an API key: anyone who can reach it can use it "
                       f"(set --api-key or {API_KEY_ENV})", err=True)
        DrainingServer(app, log_level=log_level).run(sockets=[sock])
    finally:
        engine.close()


def serving_threads(device: str) -> Optional[int]:
    """torch threads for an engine that serves HTTP on the CPU: one core fewer than this process
    may use (at least one); None on a GPU (torch's default).

    Why: the engine's parallel kernels wait for their slowest thread, so when the HTTP stack or a
    client on the same machine takes a core from one of them, every kernel stalls. Measured on a
    2-core machine (benchmarks/validate_over_http.py): with 2 threads the engine's steps ran 28%
    slower inside the server than in process; with 1 they ran at the in-process speed of 1
    thread (+3%), and faster than 2 threads in the server. vLLM's CPU backend likewise leaves
    cores to its frontend (``VLLM_CPU_NUM_OF_RESERVED_CPU``)."""
    import os

    if device == "cuda":
        return None
    if device == "auto":
        import torch

        if torch.cuda.is_available():
            return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


def _listen(host: str, port: int) -> "socket.socket":
    from runtime.serve.server import bind

    try:
        return bind(host, port)
    except OSError as exc:
        from sim.errors import ConfigError

        raise ConfigError(f"--host {host} --port {port}: cannot listen there: {exc.strerror or exc}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
