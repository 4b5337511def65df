"""Profile the real engine on a grid of batch shapes and fit a profile from its step trace.

The engine is driven through its public loop (``add_request`` / ``step``) with random prompt
token ids and fixed output lengths, so the grid decides the shapes:

- **decode**: B sequences at context C. One leader prefills the C-token prompt, then B - 1
  followers with the same prompt hit its cached blocks (a mixed step of B - 1 short prefills
  with context C), then all B decode for a few steps: batch B, context B x (C + i).
- **prefill**: one prompt of P tokens in one step (no cached context).
- **chunked**: one long prompt through an engine whose step budget is a chunk, so chunks read a
  growing cached context.
- **multi-prefill**: k prompts of p tokens in one step, then one decode step of k.
- **mixed**: B short requests decode, then a P-token prompt joins: B decodes + a P chunk.
- **steady**: continuous batching as a server runs it: N requests in flight with ShareGPT-like
  lengths (x 1/8: means 20 in / 42 out), a new one joining whenever one finishes, so the grid
  also holds the steps a served workload is made of (small decode batches with a prompt chunk
  joining every few steps). The lengths are drawn from the profiling seed; validation draws its
  own workload from its own seed.
- **served**: an online replay (wall-clock Poisson arrivals, ``LLM.replay``) at fractions of
  the rate the steady N=16 case served: the steps of a server between idle gaps and bursts,
  which run measurably slower on a CPU than the same shapes back to back (measured: 6-10%).

Every step of every case is a sample (the set-up steps too); a warm-up case runs first and is
dropped. ``runtime`` (and torch) is imported only here, when profiling.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import numpy as np

from calibration.fit import Samples, samples_from_records
from calibration.gemm_profiler import measure_gemm_tables
from sim.pricing.gemm_table import GemmTables
from sim.pricing.machine import cpu_name, machine_fingerprint

@dataclass(frozen=True)
class Case:
    """Batches of (prompt length, output tokens) requests, each batch submitted once the
    previous batch's prompts are fully computed."""

    name: str
    batches: tuple[tuple[tuple[int, int], ...], ...]
    budget: int  # max_num_batched_tokens of the engine that runs it
    shared_prompt: bool = False  # every request of the case uses the same prompt tokens
    #: Draft tokens per step (n-gram speculation); prompts then repeat a motif so drafts exist.
    speculative: int = 0
    #: Closed-loop continuous batching: keep this many requests in flight (``batches[0]`` is
    #: the queue they are drawn from, in order).
    steady: int = 0


@dataclass(frozen=True)
class Grid:
    name: str
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]
    decode_steps: int
    max_decode_kv_tokens: int
    prefill_lens: tuple[int, ...]
    chunked: tuple[tuple[int, int], ...]  # (prompt length, chunk = step budget)
    multi_prefill: tuple[tuple[int, int], ...]  # (sequences, prompt length)
    mixed: tuple[tuple[int, int], ...]  # (decode batch, prefill length)
    speculative: tuple[tuple[int, int, int], ...] = ()  # (decode batch, context, draft tokens k)
    steady: tuple[int, ...] = ()  # requests in flight of each closed-loop served-workload case
    #: Online replays after the grid: fractions of the steady N=16 case's served request rate.
    served_loads: tuple[float, ...] = ()
    served_requests: int = 32
    repeats: int = 1

    @property
    def max_step_rows(self) -> int:
        """The most token rows one step of the grid runs (how far the GEMM table must reach)."""
        return max((*self.prefill_lens, *(n for n, _ in self.chunked), *(k * p for k, p in self.multi_prefill),
                    *(n + p for n, p in self.mixed), *self.decode_batches,
                    *(n * (k + 1) for n, _, k in self.speculative)))

    @property
    def max_sampled_rows(self) -> int:
        """The most rows one step of the grid samples (how far the LM-head table must reach)."""
        return max((32, *self.decode_batches, *(k for k, _ in self.multi_prefill),
                    *(n + 1 for n, _ in self.mixed), *(n * (k + 1) for n, _, k in self.speculative),
                    *self.steady))

    @property
    def budget(self) -> int:
        """The main engine's step budget: the longest single prefill, at least 2048."""
        return max((2048, *self.prefill_lens))

    def cases(self) -> list[Case]:
        b = self.budget
        out: list[Case] = []
        for _ in range(self.repeats):
            for c in self.decode_contexts:
                for n in self.decode_batches:
                    if n * c > self.max_decode_kv_tokens:
                        continue
                    steps = self.decode_steps
                    batches = (((c, steps + 2),),) + ((((c, steps + 1),) * (n - 1),) if n > 1 else ())
                    out.append(Case(f"decode B={n} C={c}", batches, b, shared_prompt=True))
            out += [Case(f"prefill P={p}", (((p, 1),),), b) for p in self.prefill_lens]
            out += [Case(f"chunked L={n} chunk={k}", (((n, 1),),), k) for n, k in self.chunked]
            out += [Case(f"prefill {k}x{p}", (((p, 2),) * k,), b) for k, p in self.multi_prefill]
            out += [Case(f"mixed B={n} + P={p}", (((32, 6),) * n, ((p, 1),)), b) for n, p in self.mixed]
            out += [Case(f"speculative B={n} C={c} k={k}", (((c, 16),) * n,), b,
                         speculative=k) for n, c, k in self.speculative]
            out += [Case(f"steady N={n}", (served_lengths(3 * n + 8, seed=n),), b, steady=n)
                    for n in self.steady]
        return out


#: ShareGPT means (vLLM paper: 161 in / 338 out) scaled as ``kvplan validate`` scales them.
SERVED_SCALE = 0.125


def served_lengths(num_requests: int, seed: int) -> tuple[tuple[int, int], ...]:
    """(prompt, output) lengths of a ShareGPT-like served workload at ``SERVED_SCALE``."""
    from sim.workload.lengths import Lognormal

    rng = np.random.default_rng(10_000 + seed)
    ins = Lognormal(mean=161 * SERVED_SCALE, cv=1.0, min=2, max=512).sample(num_requests, rng)
    outs = Lognormal(mean=338 * SERVED_SCALE, cv=0.8, min=2, max=512).sample(num_requests, rng)
    return tuple((int(i), int(o)) for i, o in zip(ins, outs))


GRIDS: dict[str, Grid] = {
    # About 40 steps: SmolLM2-135M in bfloat16 on an idle 2-core CPU profiles in ~15 s.
    "quick": Grid("quick", decode_batches=(1, 8, 24), decode_contexts=(64, 384), decode_steps=3,
                  max_decode_kv_tokens=8192, prefill_lens=(16, 128, 512), chunked=((512, 128),),
                  multi_prefill=((4, 32),), mixed=((8, 128),), speculative=((8, 64, 4),)),
    "full": Grid("full", decode_batches=(1, 2, 4, 8, 16, 32, 48, 64),
                 decode_contexts=(32, 128, 512, 1024), decode_steps=6, max_decode_kv_tokens=32768,
                 prefill_lens=(8, 16, 32, 64, 128, 256, 512, 1024, 2048),
                 chunked=((2048, 256), (2048, 512), (1024, 128)),
                 multi_prefill=((4, 16), (4, 64), (8, 32), (16, 16), (4, 256), (16, 64)),
                 mixed=((4, 64), (4, 512), (16, 32), (16, 256), (32, 128), (32, 1024), (64, 512)),
                 speculative=((1, 64, 4), (8, 64, 2), (8, 256, 4), (24, 128, 4), (48, 64, 4)),
                 steady=(1, 2, 4, 8, 16, 32), served_loads=(0.3, 0.7)),
}

WARMUP = Case("warm-up", (((64, 4),) * 4, ((256, 1),)), 2048)


@dataclass
class ProfileRun:
    """What profiling measured: the samples, their raw step records, and the engine's identity."""

    samples: Samples
    records: list[dict]
    model: str
    catalog_model: Optional[str]
    device: str
    hardware: str
    dtype: str
    block_size: int
    num_threads: int
    #: CPU time of this process / (wall time x threads) over the grid: near 1 on an idle machine,
    #: well below when other jobs took the cores (then the timings include their interference).
    cpu_share: float = 1.0
    #: ``machine_fingerprint()`` of the machine measured (the profile records it, and
    #: ``simulate``/``validate`` warn when it differs from theirs).
    machine: Optional[dict] = None
    #: The model's linear layers timed by row count (``calibration.gemm_profiler``).
    gemm_tables: Optional[GemmTables] = None


def profile_engine(model: Optional[str], grid: Grid, dtype: str = "auto", device: str = "auto",
                   block_size: int = 16, num_threads: Optional[int] = None,
                   kv_cache_bytes: Optional[int] = None, seed: int = 0,
                   progress: Optional[Callable[[str], None]] = None) -> ProfileRun:
    """Run ``grid`` on the real engine; one model load, one engine per step budget."""
    import torch

    from runtime import EngineArgs, LLMEngine
    from runtime.weights import load_model

    args = EngineArgs(model=model, dtype=dtype, device=device, block_size=block_size,
                      num_threads=num_threads, kv_cache_bytes=kv_cache_bytes or _pool_bytes(grid),
                      max_num_batched_tokens=grid.budget, enable_prefix_caching=True)
    if num_threads:
        torch.set_num_threads(num_threads)
    dev = args.torch_device()
    loaded = load_model(args.model, args.torch_dtype(dev), dev, seed=args.seed)
    rng = np.random.default_rng(seed)
    cases = grid.cases()
    engines: dict[tuple[int, int], Any] = {}  # (token budget, speculative tokens) -> engine
    parts: list[Samples] = []
    records: list[dict] = []
    warmup_steps = 0
    served_rate = 0.0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i, case in enumerate([WARMUP] + cases):
        key = (case.budget, case.speculative)
        if key not in engines:
            engines.clear()  # one pool at a time
            engines[key] = LLMEngine(loaded, replace(args, max_num_batched_tokens=case.budget,
                                                     num_speculative_tokens=case.speculative))
        engine = engines[key]
        first = len(engine.tracer.records)
        _run_case(engine, case, rng)
        recs = engine.tracer.records[first:]
        if i == 0:  # the warm-up case is not data
            warmup_steps = len(recs)
        else:
            parts.append(samples_from_records(recs))
            records += recs
        if case.steady == SERVED_REFERENCE and recs:
            served_rate = len(case.batches[0]) / sum(r["seconds"] for r in recs)
        if progress is not None:
            progress(case.name)
    # After the grid (warm allocator and threads), before the served replays' idle gaps.
    tables = measure_gemm_tables(loaded.model, grid.max_step_rows, grid.max_sampled_rows, progress)
    if grid.served_loads and served_rate:
        key = (grid.budget, 0)
        if key not in engines:
            engines.clear()
            engines[key] = LLMEngine(loaded, replace(args, max_num_batched_tokens=grid.budget))
        engine = engines[key]
        for i, fraction in enumerate(grid.served_loads):
            first = len(engine.tracer.records)
            _run_served(engine, fraction * served_rate, grid.served_requests, seed=seed + 100 + i)
            recs = engine.tracer.records[first:]
            parts.append(samples_from_records(recs))
            records += recs
            if progress is not None:
                progress(f"served {fraction:g} x {served_rate:.2f} req/s")
    share = (time.process_time() - cpu0) / ((time.perf_counter() - wall0) * torch.get_num_threads())
    eng = next(iter(engines.values()))
    hardware = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    samples = Samples.concat(parts)
    samples.num_warmup_dropped = warmup_steps
    return ProfileRun(samples, records, loaded.name, catalog_model_of(loaded.config),
                      dev.type, hardware, str(eng.dtype).replace("torch.", ""), block_size,
                      torch.get_num_threads(), round(share, 3),
                      machine_fingerprint(with_gpus=dev.type == "cuda"), tables)


def _run_case(engine: Any, case: Case, rng: np.random.Generator) -> None:
    from runtime import SamplingParams

    vocab = engine.config.vocab_size
    shared: dict[int, list[int]] = {}

    def prompt(n: int) -> list[int]:
        if case.speculative:  # a repeated motif: n-gram lookup finds drafts, as in quoting text
            motif = rng.integers(3, vocab, size=8).tolist()
            return (motif * (n // 8 + 1))[:n]
        if case.shared_prompt:
            return shared.setdefault(n, rng.integers(3, vocab, size=n).tolist())
        return rng.integers(3, vocab, size=n).tolist()

    if case.steady:
        _run_steady(engine, case, prompt)
        return
    pending = list(case.batches)
    live: list[Any] = []
    while pending or engine.has_unfinished():
        if pending and all(r.is_finished or r.num_computed_tokens >= r.prompt_len for r in live):
            live = [engine.add_request(prompt(p), SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True))
                    for p, o in pending.pop(0)]
        engine.step()


def _run_steady(engine: Any, case: Case, prompt: Callable[[int], list[int]]) -> None:
    """Keep ``case.steady`` requests in flight: a new one joins as soon as one finishes."""
    from runtime import SamplingParams

    queue = list(case.batches[0])
    live: list[Any] = []
    while queue or engine.has_unfinished():
        live = [r for r in live if not r.is_finished]
        while queue and len(live) < case.steady:
            p, o = queue.pop(0)
            live.append(engine.add_request(prompt(p), SamplingParams(temperature=0.0, max_tokens=o,
                                                                    ignore_eos=True)))
        engine.step()


#: The steady case whose served request rate sets the online replays' rates.
SERVED_REFERENCE = 16


def _run_served(engine: Any, rate: float, num_requests: int, seed: int) -> None:
    """An online replay: Poisson arrivals at ``rate`` in wall-clock time, ShareGPT-like lengths."""
    from runtime import LLM, SamplingParams, TimedRequest
    from sim.workload.arrivals import poisson_arrivals

    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(num_requests, rate, rng)
    vocab = engine.config.vocab_size
    timed = [TimedRequest(float(t), rng.integers(3, vocab, size=p).tolist(),
                          SamplingParams(temperature=0.0, max_tokens=o, ignore_eos=True))
             for t, (p, o) in zip(arrivals, served_lengths(num_requests, seed=seed))]
    LLM.from_engine(engine).replay(timed)


def _pool_bytes(grid: Grid) -> int:
    """KV pool for the grid: enough blocks that no case preempts (SmolLM2 bf16: 23 KB/token)."""
    tokens = max(grid.budget * 2, 8192)
    return tokens * 64 * 1024  # generous per-token bytes for small models


def catalog_model_of(config: Any) -> Optional[str]:
    """The simulator catalog's slug for a runtime model config with the same shapes, if any."""
    from sim.catalog.models import list_models

    key = (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
           config.num_key_value_heads, config.intermediate_size, config.vocab_size)
    for m in list_models():
        if (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.intermediate_size,
                m.vocab_size) == key:
            return m.name
    return None
