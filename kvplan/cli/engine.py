"""``kvplan generate`` and ``kvplan bench runtime``: the real engine from the shell.

The runtime (and torch with it) is imported when a command runs, never at ``kvplan --help``;
without torch installed the commands say so in one line (exit 2).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import List, Optional

import typer

from kvplan.cli.common import MODEL_HELP, SPEC_HELP, check_engine_flags, check_out_file, need_runtime, require

#: More requests than this is a typo, not a benchmark: each prompt is materialised in memory.
MAX_BENCH_REQUESTS = 1_000_000


def _engine_kwargs(device: str, dtype: str, kv_cache_mib: Optional[float], block_size: int,
                   max_num_seqs: int, max_num_batched_tokens: Optional[int], prefix_caching: bool,
                   threads: Optional[int], trace: Optional[str], num_speculative_tokens: int = 0) -> dict:
    """The engine's arguments from the flags, each checked here so that a bad one is named by
    its flag, before the model loads."""
    require("--block-size", block_size, block_size >= 1, "an integer >= 1")
    check_engine_flags(kv_cache_mib, max_num_seqs, max_num_batched_tokens, threads,
                       num_speculative_tokens)
    check_out_file(None if trace is None else Path(trace), "--trace")
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
    dtype: str = typer.Option("auto", "--dtype", help="auto (float32 on CPU; on CUDA bfloat16 where native, else float16), float32, float16, bfloat16."),
    kv_cache_mib: Optional[float] = typer.Option(None, "--kv-cache-mib", help="KV pool size (default 512 MiB on CPU, 90% of free GPU memory on CUDA)."),
    block_size: int = typer.Option(16, "--block-size"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads."),
    trace: Optional[str] = typer.Option(None, "--trace", help="Write the per-step JSONL trace here."),
    num_speculative_tokens: int = typer.Option(0, "--num-speculative-tokens", "-k", help=SPEC_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per prompt (text, token ids, timings)."),
) -> list:
    """Generate text with the real engine and print it."""
    require("--temperature", temperature, 0 <= temperature < math.inf, "a finite number >= 0")
    kwargs = _engine_kwargs(device, dtype, kv_cache_mib, block_size, 256, None, True, threads, trace,
                            num_speculative_tokens)
    need_runtime("generate")
    from runtime import LLM, SamplingParams

    params = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, max_tokens=max_tokens)
    llm = LLM(model, **kwargs)
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
    require("--num-requests", num_requests, 1 <= num_requests <= MAX_BENCH_REQUESTS,
            f"an integer from 1 to {MAX_BENCH_REQUESTS:,}")
    require("--scale", scale, 0 < scale < math.inf, "a positive finite number")
    kwargs = _engine_kwargs(device, dtype, kv_cache_mib, block_size, max_num_seqs,
                            max_num_batched_tokens, False, threads, trace, num_speculative_tokens)
    if lengths:
        from sim.workload.traces import read_length_table

        read_length_table(lengths)  # a bad table fails before the model loads
    need_runtime("bench runtime")
    from runtime import LLM
    from runtime.bench import Workload, run_throughput, sharegpt_like

    llm = LLM(model, **kwargs)
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
