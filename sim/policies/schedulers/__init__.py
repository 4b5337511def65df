"""Schedulers behind one interface (``schedule() -> StepPlan``, ``update(plan, result, now)``).

- ``static``: HF-generate-like fixed batches;
- ``orca``: iteration-level batching, whole prompts;
- ``vllm_v0``: prefill-prioritising, prefill and decode never mixed, recompute or swap;
- ``chunked``: Sarathi-Serve / vLLM v1 token budget with chunked prefill;
- ``sglang``: SGLang's prefill-first extend batches, one chunked request, admission that
  reserves future decode tokens (``new_token_ratio``) and retraction (``engine.name: sglang``).
"""

from __future__ import annotations

from typing import Optional

from sim.policies.kv.base import KVAllocator
from sim.policies.schedulers.base import PREEMPTION_MODES, QUEUE_POLICIES, Scheduler, SchedulerConfig
from sim.policies.schedulers.chunked import ChunkedScheduler
from sim.policies.schedulers.orca import OrcaScheduler
from sim.policies.schedulers.sglang import SGLANG_SCHEDULE_POLICIES, SglangScheduler
from sim.policies.schedulers.static import StaticScheduler
from sim.policies.schedulers.vllm_v0 import VllmV0Scheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "static": StaticScheduler,
    "orca": OrcaScheduler,
    "vllm_v0": VllmV0Scheduler,
    "chunked": ChunkedScheduler,
    "sglang": SglangScheduler,
}


def make_scheduler(policy: str, allocator: KVAllocator, max_model_len: int = 2048,
                   max_num_seqs: int = 256, max_num_batched_tokens: Optional[int] = None,
                   preemption: str = "recompute", queue_policy: str = "fcfs",
                   num_speculative_tokens: int = 0, emit_block_tables: bool = False,
                   sglang: Optional[dict] = None) -> Scheduler:
    """Build a scheduler from vLLM-named knobs. ``emit_block_tables``: fill every
    ``ScheduledRequest.block_table`` (for an executor that addresses KV memory, the runtime).
    ``sglang``: the ``sglang`` policy's own knobs (``SglangScheduler``'s keyword arguments:
    schedule_policy, schedule_conservativeness, enable_mixed_chunk, max_prefill_tokens,
    scheduler_recv_interval)."""
    if policy not in SCHEDULERS:
        raise ValueError(f"scheduler policy must be one of {', '.join(SCHEDULERS)}, got {policy!r}")
    config = SchedulerConfig(
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        preemption=preemption,
        queue_policy=queue_policy,
        num_speculative_tokens=num_speculative_tokens,
    )
    if policy == "sglang":
        return SglangScheduler(allocator, config, emit_block_tables=emit_block_tables, **(sglang or {}))
    return SCHEDULERS[policy](allocator, config, emit_block_tables=emit_block_tables)


__all__ = [
    "PREEMPTION_MODES",
    "QUEUE_POLICIES",
    "SCHEDULERS",
    "SGLANG_SCHEDULE_POLICIES",
    "SglangScheduler",
    "Scheduler",
    "SchedulerConfig",
    "make_scheduler",
]
