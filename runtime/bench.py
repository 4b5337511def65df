"""Offline throughput of the runtime on a ShareGPT-like workload: ``kvplan bench runtime``
and ``benchmarks/runtime_vs_hf.py`` both measure with these functions.

Lengths are lognormal around the vLLM paper's ShareGPT means (161 prompt / 338 output tokens)
times ``scale`` (CPUs need short requests), or resampled from a length table such as
``../shared/traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv``. Prompts are random token
ids: throughput does not depend on which tokens they are. Every request generates exactly its
drawn output length (greedy, EOS ignored), and all arrive at t=0, like ``vllm bench throughput``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from runtime.llm import LLM
from runtime.sampling import SamplingParams
from sim.workload.lengths import Lognormal

SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT = 161, 338  # vLLM paper (SOSP'23), Table 1


@dataclass
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def num_output_tokens(self) -> int:
        return sum(self.output_lens)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    def describe(self) -> str:
        return (f"{len(self.prompts)} requests, prompt mean {self.num_prompt_tokens / len(self.prompts):.0f} / "
                f"output mean {self.num_output_tokens / len(self.prompts):.0f} tokens")


def sharegpt_like(num_requests: int, scale: float, vocab_size: int, max_len: int, seed: int = 0,
                  lengths_csv: Optional[str] = None) -> Workload:
    """Prompt and output lengths each capped at ``max_len // 2`` so any request fits alone."""
    rng = np.random.default_rng(seed)
    cap = max(2, max_len // 2)
    if lengths_csv:
        from sim.workload.traces import read_length_table

        trace = read_length_table(lengths_csv)
        rows = rng.integers(0, len(trace), size=num_requests)
        ins = np.clip(np.rint(np.asarray(trace.input_lens)[rows] * scale), 1, cap).astype(int)
        outs = np.clip(np.rint(np.asarray(trace.output_lens)[rows] * scale), 1, cap).astype(int)
    else:
        ins = Lognormal(mean=SHAREGPT_MEAN_IN * scale, cv=1.0, min=2, max=cap).sample(num_requests, rng)
        outs = Lognormal(mean=SHAREGPT_MEAN_OUT * scale, cv=0.8, min=2, max=cap).sample(num_requests, rng)
    prompts = [rng.integers(3, vocab_size, size=int(k)).tolist() for k in ins]
    return Workload(prompts, [int(k) for k in outs])


def run_throughput(llm: LLM, work: Workload, progress: bool = False) -> dict[str, Any]:
    """Generate the whole workload once; vLLM-bench-style throughput numbers."""
    params = [SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True) for o in work.output_lens]
    engine = llm.engine
    first_step = len(engine.tracer.records)
    preempt0 = engine.scheduler.num_preemptions
    t0, c0 = time.perf_counter(), time.process_time()
    outs = llm.generate(prompt_token_ids=work.prompts, sampling_params=params, use_tqdm=progress)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    got = sum(len(o.token_ids) for o in outs)
    proposed = sum(o.metrics.num_spec_proposed for o in outs)
    accepted = sum(o.metrics.num_spec_accepted for o in outs)
    if got != work.num_output_tokens:
        raise RuntimeError(f"runtime produced {got} output tokens, expected {work.num_output_tokens}")
    steps = engine.tracer.records[first_step:]
    return {
        "num_requests": len(work.prompts),
        "duration_s": seconds,
        # CPU time of all our threads: on a shared box it moves far less than wall time.
        "cpu_seconds": cpu_seconds,
        "request_throughput": len(work.prompts) / seconds,
        "output_throughput": work.num_output_tokens / seconds,
        "total_token_throughput": (work.num_output_tokens + work.num_prompt_tokens) / seconds,
        "num_steps": len(steps),
        "mean_step_ms": 1000 * sum(s["seconds"] for s in steps) / max(len(steps), 1),
        "mean_batch_size": sum(s["batch_size"] for s in steps) / max(len(steps), 1),
        "preemptions": engine.scheduler.num_preemptions - preempt0,
        "spec_proposed": proposed,
        "spec_accepted": accepted,
        "spec_acceptance_rate": accepted / proposed if proposed else None,
        "spec_acceptance_table": engine.acceptance_table() if proposed else None,
        "spec_draft_availability": engine.draft_availability() if proposed else None,
    }
