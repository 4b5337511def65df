"""Throughput: kvplan's runtime (paged KV, continuous batching) vs transformers ``generate``
with static padded batches (the classic serving baseline), same model, same requests, same KV
memory budget.

    .venv/bin/python benchmarks/runtime_vs_hf.py                      # SmolLM2-135M, bf16, CPU, ~4 min
    .venv/bin/python benchmarks/runtime_vs_hf.py --num-requests 128 --dtype float32 --json out.json

Workload: ShareGPT-like lengths (lognormal around the vLLM paper's ShareGPT means, 161 prompt
/ 338 output tokens), scaled by ``--scale`` to fit CPU time, or resampled from a length table
(``--lengths sharegpt.csv``, e.g. ../shared/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv).
Every request generates exactly its sampled output length (greedy, EOS ignored), all arrive at
t=0 (offline throughput, like ``vllm bench throughput``).

Baseline batching: requests in order, each batch as large as the KV budget allows when every
row is padded to the batch's longest prompt + longest output (what a static batch really holds)
- the most generous static policy, since it knows output lengths in advance. Both sides count
only the requested output tokens; the baseline's padding and over-generation are its waste.

Wall-clock throughput is the headline; CPU time (all threads of the process) is printed too,
because on a shared machine it is much less disturbed by other jobs than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tqdm import tqdm  # type: ignore[import-untyped]  # noqa: E402  # no stubs: types-tqdm is no dependency

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runtime import LLM  # noqa: E402
from runtime.bench import Workload, run_throughput, sharegpt_like  # noqa: E402
from runtime.hf_reference import load_hf_reference  # noqa: E402


def static_batches(work: Workload, budget_tokens: int) -> list[list[int]]:
    """Greedy in-order batches whose padded KV (rows x (max prompt + max output)) fits."""
    batches: list[list[int]] = []
    cur: list[int] = []
    longest_in, longest_out = 0, 0
    for i, (p, o) in enumerate(zip(work.prompts, work.output_lens)):
        li, lo = max(longest_in, len(p)), max(longest_out, o)
        if cur and (len(cur) + 1) * (li + lo) > budget_tokens:
            batches.append(cur)
            cur, li, lo = [], len(p), o
        cur.append(i)
        longest_in, longest_out = li, lo
    if cur:
        batches.append(cur)
    return batches


def run_hf(model, work: Workload, budget_tokens: int, pad_id: int) -> tuple[float, float, int]:
    """transformers generate over static left-padded batches; (seconds, CPU seconds, batches)."""
    batches = static_batches(work, budget_tokens)
    device = next(model.parameters()).device
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in tqdm(batches, desc="HF static batches", unit="batch", leave=False):
        width = max(len(work.prompts[i]) for i in batch)
        ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            p = work.prompts[i]
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        new = max(work.output_lens[i] for i in batch)
        with torch.inference_mode():
            model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=new,
                           min_new_tokens=new, do_sample=False, pad_token_id=pad_id)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0, time.process_time() - c0, len(batches)


def machine() -> dict:
    """Where the numbers come from: CPU model, core count, library versions."""
    import platform

    import transformers

    from sim.pricing.machine import cpu_name

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 (default), a .gguf file or an HF directory")
    ap.add_argument("--num-requests", type=int, default=256)
    ap.add_argument("--scale", type=float, default=0.125, help="multiplies ShareGPT lengths (CPU-sized)")
    ap.add_argument("--lengths", default=None, help="length table CSV (ShareGPT/arXiv stats format)")
    ap.add_argument("--kv-budget-mib", type=float, default=48.0, help="KV memory for both engines")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"],
                    help="weights, activations and KV of both engines (bfloat16: the serving dtype; "
                         "AMX CPUs run its GEMMs at nearly the same cost for 1 or 32 rows, as a GPU does)")
    ap.add_argument("--policy", default="chunked", choices=["chunked", "vllm_v0", "orca", "static"],
                    help="the sim.policies scheduler the engine runs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (Triton kernels; transformers on the same GPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-hf", action="store_true", help="time only the runtime")
    ap.add_argument("--json", default=None, help="write the numbers here")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    budget = int(args.kv_budget_mib * 2**20)
    llm = LLM(args.model, kv_cache_bytes=budget, block_size=args.block_size, max_num_seqs=args.max_num_seqs,
              max_num_batched_tokens=args.max_num_batched_tokens, enable_prefix_caching=False,
              device=args.device, dtype=args.dtype, scheduling_policy=args.policy)
    budget_tokens = llm.engine.kv_cache.num_blocks * args.block_size
    work = sharegpt_like(args.num_requests, args.scale, llm.engine.config.vocab_size,
                         min(llm.engine.max_model_len, budget_tokens), args.seed, args.lengths)
    print(f"model {llm.engine.loaded.name}: {work.describe()}; KV budget {args.kv_budget_mib:g} MiB "
          f"= {budget_tokens} tokens ({args.dtype}); {args.threads} threads")

    run_throughput(llm, Workload(work.prompts[:2], [2, 2]))  # warm-up
    rt = run_throughput(llm, work, progress=True)
    rt_tps = rt["output_throughput"]
    print(f"kvplan runtime : {rt['duration_s']:8.2f} s  {rt_tps:8.1f} output tok/s  "
          f"({rt['num_steps']} steps, mean batch {rt['mean_batch_size']:.1f}, preemptions {rt['preemptions']})")
    result = {"model": llm.engine.loaded.name, "dtype": args.dtype, "num_requests": args.num_requests,
              "output_tokens": work.num_output_tokens, "kv_budget_tokens": budget_tokens,
              "threads": args.threads, "machine": machine(), "policy": args.policy,
              "attention_backend": llm.engine.runner.attention_backend, "runtime": rt}
    del llm

    if not args.skip_hf:
        hf = load_hf_reference(args.model, dtype=getattr(torch, args.dtype)).to(args.device)
        pad = hf.config.pad_token_id if hf.config.pad_token_id is not None else 0
        with torch.inference_mode():
            hf.generate(input_ids=torch.tensor([work.prompts[0][:4]], device=args.device), max_new_tokens=2,
                        do_sample=False,
                        pad_token_id=pad)  # warm-up
        hf_s, hf_cpu, n_batches = run_hf(hf, work, budget_tokens, pad)
        hf_tps = work.num_output_tokens / hf_s
        print(f"HF static batch: {hf_s:8.2f} s  {hf_tps:8.1f} output tok/s  ({n_batches} batches, "
              f"mean batch {args.num_requests / n_batches:.1f})")
        speedup, cpu_speedup = rt_tps / hf_tps, hf_cpu / rt["cpu_seconds"]
        print(f"speed-up       : {speedup:.1f}x wall clock, {cpu_speedup:.1f}x CPU time "
              f"({rt['cpu_seconds']:.1f} vs {hf_cpu:.1f} CPU s)")
        result.update(hf_seconds=hf_s, hf_cpu_seconds=hf_cpu, hf_output_throughput=hf_tps,
                      hf_batches=n_batches, speedup=speedup, cpu_time_speedup=cpu_speedup)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
