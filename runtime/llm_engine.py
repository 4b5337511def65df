"""The engine loop: ``sim.policies`` decides, the model computes, the wall clock advances.

    plan = scheduler.schedule(now)          # who computes which tokens; KV blocks allocated
    logits = runner.execute(prepare(plan))  # one packed forward over all of them
    tokens = sampler(logits)                # one token per request that reached its end
                                            # (1 + accepted drafts with speculative decoding)
    finished = scheduler.update(plan, StepResult(tokens, stopped), now)
    drafts = proposer.propose(...)          # n-gram drafts for the next step, if enabled

The scheduler and allocator are the simulator's own objects (``make_scheduler`` /
``make_allocator``); nothing here re-decides batching, admission, preemption or block
placement. The engine owns what the policy cannot know: token ids, stop conditions, sampling,
text, and the wall clock every timestamp is read from.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Optional, Sequence, Union, cast

import torch

from runtime.args import EngineArgs
from runtime.kv_cache import (HostKVOffload, HostSwapSpace, allocate_kv_cache, block_bytes, num_blocks_for_budget,
                              num_blocks_for_gpu)
from runtime.model_runner import ModelRunner, PreparedStep
from runtime.outputs import RequestOutput, request_output
from runtime.sampling import Sampler, SamplingParams
from runtime.speculative import NgramProposer
from runtime.tracing import StepTracer
from runtime.weights import LoadedModel, load_model
from sim.errors import ConfigError
from sim.policies import Request, ScheduledRequest, StepPlan, StepResult
from sim.policies.kv import KVAllocator, OffloadTiers, make_allocator
from sim.policies.schedulers import Scheduler, make_scheduler
from sim.scenario import offload_tiers, swap_space_blocks

#: Where each offload tier keeps its bytes (runtime.kv_cache.HostKVOffload).
OFFLOAD_TIER_KINDS = {"cpu": "memory", "ssd": "disk"}
#: Nominal read bandwidths (bytes/s) of the tiers: a host memcpy / PCIe-class link, and a
#: PCIe 4.0 NVMe drive (the simulator's default, kv_cache.ssd_offload_bandwidth_gbs).
OFFLOAD_NOMINAL_BANDWIDTH = {"cpu": 25e9, "ssd": 6e9}

DEFAULT_CPU_KV_BYTES = 512 * 2**20


@dataclass
class _Live:
    """Engine-side state of a request the scheduler is serving."""

    request: Request
    params: SamplingParams
    stop_ids: frozenset[int]
    prompt: Optional[str]


class LLMEngine:
    def __init__(self, loaded: LoadedModel, args: EngineArgs) -> None:
        self.args = args
        self.loaded = loaded
        self.config = loaded.config
        self.tokenizer = loaded.tokenizer
        self.device = next(loaded.model.parameters()).device
        self.dtype = next(loaded.model.parameters()).dtype
        self.max_model_len = args.max_model_len or self.config.max_position_embeddings
        if self.max_model_len > self.config.max_position_embeddings:
            raise ConfigError(
                f"max_model_len {self.max_model_len} exceeds the model's "
                f"max_position_embeddings {self.config.max_position_embeddings}"
            )
        num_blocks = self._num_kv_blocks()
        self.kv_cache = allocate_kv_cache(self.config, num_blocks, args.block_size, self.dtype, self.device)
        self.allocator, self.scheduler = self._make_policy(num_blocks)
        self.runner = ModelRunner(loaded.model, self.kv_cache, self.device, args.attention_backend)
        self.swap_space = HostSwapSpace(self.kv_cache)
        self.kv_offload: Optional[HostKVOffload] = None
        tiers = getattr(self.allocator, "offload", None)
        if tiers is not None:
            tiers.journal = []
            self.kv_offload = HostKVOffload(self.kv_cache, [OFFLOAD_TIER_KINDS[t.name] for t in tiers.tiers],
                                            args.kv_offload_dir)
        self.sampler = Sampler()
        self.proposer: Optional[NgramProposer] = None
        if args.num_speculative_tokens:
            self.proposer = NgramProposer(args.num_speculative_tokens, args.prompt_lookup_min,
                                          args.prompt_lookup_max)
        self._drafts: dict[str, list[int]] = {}
        self.reset_spec_stats()
        self.tracer = StepTracer(args.trace_path)
        self.eos_token_ids = self._eos_ids()
        self._live: dict[str, _Live] = {}
        #: SGLang's ``--scheduler-recv-interval`` (``sim.policies.schedulers.sglang.RecvSkipper``,
        #: the simulator's object): requests added while the engine is busy wait here until
        #: the loop polls after a step; an idle engine takes them at once.
        self._recv_skipper = getattr(self.scheduler, "recv_skipper", None)
        self._unreceived: list[Request] = []
        self._ids = itertools.count()
        self._t0 = time.perf_counter()

    @classmethod
    def from_args(cls, args: EngineArgs) -> "LLMEngine":
        if args.num_threads:
            torch.set_num_threads(args.num_threads)
        device = args.torch_device()
        loaded = load_model(args.model, args.torch_dtype(device), device, seed=args.seed)
        return cls(loaded, args)

    # --- setup ------------------------------------------------------------------------------
    def _make_policy(self, num_blocks: int) -> tuple[KVAllocator, Scheduler]:
        """The simulator's allocator and scheduler over a pool of ``num_blocks`` blocks."""
        a = self.args
        swap_slots = 0
        if a.preemption_mode == "swap":
            per_block = block_bytes(self.config, a.block_size, self.dtype)
            # GiB -> whole blocks, by the function the simulator uses (sim.scenario)
            swap_slots = swap_space_blocks(a.swap_space, per_block) * a.block_size
        if a.kv_allocator == "radix":  # SGLang's token pool and radix cache: pages of block_size
            allocator = make_allocator("radix", num_slots=num_blocks * a.block_size, block_size=a.block_size,
                                       prefix_caching=a.enable_prefix_caching)
        else:
            allocator = make_allocator("paged", num_slots=num_blocks * a.block_size, block_size=a.block_size,
                                       prefix_caching=a.enable_prefix_caching, max_model_len=self.max_model_len,
                                       swap_slots=swap_slots, offload=self._offload_tiers())
        try:
            scheduler = make_scheduler(a.policy(), allocator, max_model_len=self.max_model_len,
                                       max_num_seqs=a.max_num_seqs,
                                       max_num_batched_tokens=a.max_num_batched_tokens,
                                       preemption=a.preemption_mode,
                                       num_speculative_tokens=a.num_speculative_tokens,
                                       emit_block_tables=True,  # the model runner reads them
                                       sglang=a.sglang_options)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        return allocator, scheduler

    def _offload_tiers(self) -> Optional[OffloadTiers]:
        """The allocator's KV offload tiers (``kv_offload_cpu_gb``, ``kv_offload_ssd_gb``) in
        whole blocks, as the simulator sizes them (``sim.scenario.offload_tiers``); None
        when both are off. Bandwidths are nominal (they weight the traced ``num_swap_tokens`` of
        a load and the tiers' load_s statistic): the engine's own time is measured."""
        a = self.args
        return offload_tiers(
            [(name, f"kv_offload_{name}_gb", gib, OFFLOAD_NOMINAL_BANDWIDTH[name])
             for name, gib in (("cpu", a.kv_offload_cpu_gb), ("ssd", a.kv_offload_ssd_gb))],
            block_bytes(self.config, a.block_size, self.dtype), a.block_size, OFFLOAD_NOMINAL_BANDWIDTH["cpu"])

    def _num_kv_blocks(self) -> int:
        a = self.args
        if a.num_kv_blocks is not None:
            return a.num_kv_blocks
        if self.device.type == "cuda" and a.kv_cache_bytes is None:
            self._profile_peak_step()
            return num_blocks_for_gpu(self.config, a.block_size, self.dtype,
                                      a.gpu_memory_utilization, self.device)
        budget = a.kv_cache_bytes if a.kv_cache_bytes is not None else DEFAULT_CPU_KV_BYTES
        return num_blocks_for_budget(self.config, a.block_size, self.dtype, budget)

    def _profile_peak_step(self) -> None:
        """Run the largest step the scheduler can plan (one prefill of its whole token budget)
        on a throwaway pool, so the CUDA peak-memory counter includes activations before the KV
        pool takes the rest (vLLM's profiling run)."""
        bs = self.args.block_size
        budget = self._make_policy(1)[1].budget
        n = min(budget, self.max_model_len)
        blocks = -(-n // bs)
        allocator, _ = self._make_policy(blocks)
        req = Request("profile", 0.0, n, 1, prompt_token_ids=[0] * n)
        allocator.allocate(req, n)
        cache = allocate_kv_cache(self.config, blocks, bs, self.dtype, self.device)
        runner = ModelRunner(self.loaded.model, cache, self.device, self.args.attention_backend)
        torch.cuda.reset_peak_memory_stats(self.device)
        step = ScheduledRequest(req, n, 0, is_prefill=True, block_table=list(allocator.block_table(req)))
        runner.execute(runner.prepare(StepPlan(scheduled=[step])))
        torch.cuda.synchronize(self.device)
        del runner, cache
        torch.cuda.empty_cache()  # else mem_get_info counts the freed throwaway pool as used

    def _eos_ids(self) -> tuple[int, ...]:
        ids = set(self.config.eos_token_ids)
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if tok_eos is not None:
            ids.add(int(tok_eos))
        return tuple(sorted(ids))

    # --- clock --------------------------------------------------------------------------------
    def now(self) -> float:
        """Engine clock: seconds since the engine was built (every timestamp uses it)."""
        return time.perf_counter() - self._t0

    # --- requests -------------------------------------------------------------------------
    def add_request(self, prompt: Union[str, Sequence[int], None] = None,
                    params: Optional[SamplingParams] = None, request_id: Optional[str] = None,
                    arrival_time: Optional[float] = None) -> Request:
        """Tokenise and queue one request. A request that can never be served (longer than
        max_model_len, or than the whole KV pool) comes back with state REJECTED and a
        ``reject_reason``; it is not queued."""
        params = params or SamplingParams()
        text: Optional[str] = None
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ConfigError("prompt: this model has no tokenizer; pass prompt_token_ids")
            text = prompt
            ids = list(self.tokenizer.encode(prompt))
        elif prompt is None:
            raise ConfigError("prompt: give a prompt string or prompt token ids")
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ConfigError("prompt: empty prompt")
        bad = [t for t in ids if not 0 <= t < self.config.vocab_size]
        if bad:
            raise ConfigError(f"prompt: token id {bad[0]} is outside the vocabulary (size {self.config.vocab_size})")
        rid = request_id if request_id is not None else str(next(self._ids))
        if rid in self._live:
            raise ConfigError(f"request id {rid!r} is already in flight")
        now = self.now()
        req = Request(request_id=rid, arrival_time=now if arrival_time is None else arrival_time,
                      prompt_len=len(ids), max_output_tokens=params.max_tokens, prompt_token_ids=ids)
        if self.proposer is not None:
            req.num_draft_tokens = 0  # nothing proposed until its first token is sampled
        held = self._recv_skipper is not None and self.scheduler.has_unfinished()
        if held:
            self._unreceived.append(req)  # the scheduler sees it at the next poll (``_poll``)
        if held or self.scheduler.add_request(req, now):
            self._live[rid] = _Live(req, params, params.stop_ids(self.eos_token_ids), text)
        return req

    def _poll(self) -> list[RequestOutput]:
        """The loop reads what arrived since its last poll; a request the scheduler cannot
        serve comes back rejected."""
        held, self._unreceived = self._unreceived, []
        now = self.now()
        return [self._retire(req) for req in held if not self.scheduler.add_request(req, now)]

    def abort(self, request_id: str) -> Optional[RequestOutput]:
        """Stop a request wherever it is; its KV blocks go back to the pool now."""
        self._unreceived = [r for r in self._unreceived if r.request_id != request_id]
        req = self.scheduler.abort(request_id, self.now())
        live = self._live.pop(request_id, None)
        self._drafts.pop(request_id, None)
        self.swap_space.drop(request_id)
        self.sampler.forget(request_id)
        if req is None or live is None:
            return None
        return self._output(req, live.prompt, live.params)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or bool(self._unreceived)

    @property
    def num_unfinished(self) -> int:
        return len(self._live)

    # --- the step -----------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduler step; return the requests that finished (or were rejected) in it."""
        polled: list[RequestOutput] = []
        if self._unreceived and not self.scheduler.has_unfinished():
            polled = self._poll()  # an idle loop polls at once
        t_sched = self.now()
        plan = self.scheduler.schedule(t_sched)
        start = self.now()
        self._move_kv(plan)
        done: list[RequestOutput] = polled + [self._retire(r) for r in plan.rejected]
        if not plan.scheduled:
            if not plan.shape.is_empty:
                # Padding only: a static batch whose live members were all preempted. Nothing to
                # compute (padding rows are skipped), but the policy ends the batch in update;
                # without this call its finished members would wait for ever.
                for req in self.scheduler.update(plan, StepResult(), self.now()):
                    done.append(self._retire(req))
                return done
            if self.scheduler.running or not self.has_unfinished():
                return done
            raise RuntimeError(
                f"scheduler made no progress with {len(self.scheduler.waiting)} waiting requests "
                f"and an idle pool of {self.allocator.num_free_slots} free slots"
            )
        prepared = self.runner.prepare(plan, self._drafts)
        logits = self.runner.execute(prepared)
        emitted = self._sample(prepared, logits)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        end = self.now()
        self.tracer.record(plan, start, end - start, start - t_sched, self.allocator.num_free_slots
                           // self.allocator.block_size, len(self.scheduler.waiting),
                           len(self.scheduler.running))
        stopped: set[str] = set()
        for rid, toks in emitted.items():
            stop_ids = self._live[rid].stop_ids
            cut = next((i for i, t in enumerate(toks) if t in stop_ids), None)
            if cut is not None:  # tokens after a stop are never emitted
                emitted[rid] = toks[:cut + 1]
                stopped.add(rid)
        result = StepResult(sampled_token_ids=emitted, stopped=stopped)
        for req in self.scheduler.update(plan, result, end):
            done.append(self._retire(req))
        skipper = self._recv_skipper
        if skipper is not None and skipper.handle(1, plan.shape.num_prefill_tokens > 0):
            done.extend(self._poll())
        if self.proposer is not None:
            self._propose(prepared.sample_requests)
        return done

    def _sample(self, prepared: PreparedStep, logits: torch.Tensor) -> dict[str, list[int]]:
        """Emitted token ids per sampling request: one, or 1 + accepted drafts when verifying."""
        reqs, counts = prepared.sample_requests, prepared.sample_counts
        rids = [s.request.request_id for s in reqs]
        params = [self._live[r].params for r in rids]
        if all(c == 1 for c in counts):
            return {rid: [tok] for rid, tok in zip(rids, self.sampler(logits, rids, params))}
        out: dict[str, list[int]] = {}
        row = 0
        for s, rid, p, count in zip(reqs, rids, params, counts):
            rows = logits[row:row + count]
            if count == 1:
                out[rid] = self.sampler(rows, [rid], [p])
            else:
                out[rid] = self.sampler.verify(rows, rid, p, self._drafts[rid][:s.num_spec_tokens])
                accepted = len(out[rid]) - 1
                for j in range(min(accepted + 1, s.num_spec_tokens)):
                    self.spec_judged[j] += 1
                    self.spec_accepted_at[j] += j < accepted
            row += count
        return out

    def reset_spec_stats(self) -> None:
        """Forget speculation statistics (e.g. those of a warm-up)."""
        k = self.args.num_speculative_tokens
        # Per draft position j: how often it was judged (drafts < j all accepted) and accepted.
        self.spec_judged = [0] * k
        self.spec_accepted_at = [0] * k
        # How many drafts the proposer found (0..k) each time a request asked for its next step.
        self.spec_draft_counts = [0] * (k + 1)

    def acceptance_table(self) -> list[float]:
        """P(draft j accepted | drafts before it accepted), per position: the simulator's
        ``speculative.acceptance_table`` measured on this model and workload."""
        return [a / n if n else 0.0 for a, n in zip(self.spec_accepted_at, self.spec_judged)]

    def draft_availability(self) -> list[float]:
        """P(the proposer found exactly m drafts), m = 0..k: the simulator's
        ``speculative.draft_availability`` (n-gram lookup often finds fewer than k)."""
        total = sum(self.spec_draft_counts)
        return [c / total if total else 0.0 for c in self.spec_draft_counts]

    def _propose(self, sampled: list[ScheduledRequest]) -> None:
        """Fresh n-gram drafts for every request that just got a token and is still running."""
        for s in sampled:
            req = s.request
            rid = req.request_id
            if rid not in self._live or req.is_finished:
                continue
            drafts = cast(NgramProposer, self.proposer).propose(req.all_token_ids())  # called only when set
            self._drafts[rid] = drafts
            self.spec_draft_counts[len(drafts)] += 1
            req.num_draft_tokens = len(drafts)

    def _retire(self, req: Request) -> RequestOutput:
        live = self._live.pop(req.request_id, None)
        self._drafts.pop(req.request_id, None)
        self.sampler.forget(req.request_id)
        params = live.params if live else SamplingParams()
        return self._output(req, live.prompt if live else None, params)

    def _output(self, req: Request, prompt: Optional[str], params: SamplingParams) -> RequestOutput:
        text = ""
        if self.tokenizer is not None and req.output_token_ids:
            text = self.tokenizer.decode(req.output_token_ids, skip_special_tokens=params.skip_special_tokens)
        return request_output(req, prompt, text)

    def _move_kv(self, plan: StepPlan) -> None:
        """Host <-> device copies the schedule decided, before anything writes the cache, in the
        order the schedule made them: swap-outs (preemption, first), the offload tiers' journal
        (evictions of cached blocks and loads back, during admission), then swap-ins."""
        journal = self.allocator.offload.journal if self.kv_offload is not None else None  # type: ignore[attr-defined]
        if not (plan.swap_out_blocks or plan.swap_in_blocks or journal):
            return
        if plan.swap_out_blocks:
            self.swap_space.apply(plan.swap_out_blocks, {})
        if journal:
            assert self.kv_offload is not None
            self.kv_offload.apply(journal)
            journal.clear()
        if plan.swap_in_blocks:
            self.swap_space.apply({}, plan.swap_in_blocks)

    # --- health ---------------------------------------------------------------------------------
    def num_leaked_blocks(self) -> int:
        """Blocks held although no request is live (0 after every run: tests check it)."""
        if self.has_unfinished():
            raise RuntimeError("requests are still in flight")
        self.allocator.check_invariants()
        if self.kv_offload is not None:
            tiers = self.allocator.offload  # type: ignore[attr-defined]
            # Journal entries left by the last schedule's update (discards) are replayed first.
            self.kv_offload.apply(tiers.journal)
            tiers.journal.clear()
            self.kv_offload.check([len(t) for t in tiers.tiers])
        return (self.allocator.num_slots - self.allocator.num_free_slots) // self.allocator.block_size

    def close(self) -> None:
        self.tracer.close()
        if self.kv_offload is not None:
            self.kv_offload.close()

