"""Staged load with shared system prompts: the workload of a benchmark run described by its
load generator (inference-perf's ``shared_prefix`` data + ``constant`` load stages, or one
stage per ``vllm bench serve`` / GuideLLM benchmark).

Why its own module: to replay a measured run, the simulator must see the same requests the
server saw, and for prefix caching that means the same *content*, not only the same lengths.

How inference-perf builds them (``inference_perf/datagen/shared_prefix_datagen.py`` and
``loadgen/load_timer.py``, the 2025 releases that wrote ``num_groups`` /
``num_prompts_per_group`` into ``results/config.yaml``):

- ``num_groups`` random system prompts of ``system_prompt_len`` tokens; per group
  ``num_prompts_per_group`` random questions of ``question_len`` tokens; prompt = system prompt
  + question. The ``num_groups x num_prompts_per_group`` prompts are shuffled once.
- Request ``n`` of a stage (``n`` restarts at 0 every stage) sends prompt ``n % len(prompts)``:
  a prompt repeats, whole, every ``len(prompts)`` requests, so vLLM's prefix cache can hit the
  whole prompt, and always hits the group's system prompt.
- ``constant`` load: ``int(rate * duration)`` requests per stage, exponential gaps rescaled so
  they sum to exactly ``duration``. The next stage starts after every request of this one has
  finished plus ``load.interval`` (1 s) plus a 1 s start delay; ``stage_gap_s`` stands for that
  idle time (the simulated server is idle then either way, so its length only matters once it
  is shorter than the drain).

Content is carried as block hashes (one id per ``hash_block_size`` tokens, ``sim.workload.prefix``):
a group's full system-prompt blocks share ids; every later block (including the one that
straddles the system prompt and the question) is the prompt's own, identical on each repeat.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from sim.errors import ConfigError
from sim.policies.request import Request
from sim.workload import arrivals
from sim.workload.clients import ClientGroup
from sim.workload.prefix import num_blocks
from sim.workload.prompt_pool import PromptPool, entry_hashes, entry_order

#: Processes a stage's arrivals can follow.
STAGE_PROCESSES = ("rescaled_poisson", "poisson", "constant", "burst", "closed")
#: Seconds between one stage's last arrival and the next stage's first (see module docstring).
DEFAULT_STAGE_GAP_S = 30.0


@dataclass(frozen=True)
class Stage:
    """One load stage: ``num_requests`` arrivals over ``duration_s`` at ``rate`` req/s.

    ``process``: ``rescaled_poisson`` (inference-perf's constant load: exponential gaps scaled
    to sum to the duration), ``poisson`` (a gamma renewal process with ``cv``; vllm bench's
    burstiness b is cv = 1/sqrt(b)), ``constant`` (evenly spaced; GuideLLM's constant),
    ``burst`` (all at the stage start: rate inf) or ``closed`` (a closed loop of
    ``concurrency`` clients, ``sim.workload.clients``: every request ready at the stage start,
    each client sending its next when its last finishes; ``rate`` is then only what was
    measured, and ``duration_s`` how long the stage ran, which places the next stage).

    ``concurrency`` under an open process: the load tool's cap on requests in flight (vllm
    bench serve's ``--max-concurrency``); a request that finds it reached waits on the client.
    """

    rate: float
    duration_s: float
    num_requests: int
    process: str = "rescaled_poisson"
    cv: float = 1.0
    concurrency: Optional[int] = None

    @staticmethod
    def of_rate(rate: float, duration_s: float, process: str = "rescaled_poisson") -> "Stage":
        """inference-perf's rule: ``int(rate * duration)`` requests."""
        return Stage(rate, duration_s, int(rate * duration_s), process)


@dataclass(frozen=True)
class SharedPrefix:
    """inference-perf's ``data.shared_prefix``, resolved."""

    num_groups: int
    prompts_per_group: int
    system_prompt_len: int
    question_len: int
    output_len: int

    @property
    def num_prompts(self) -> int:
        return self.num_groups * self.prompts_per_group

    @property
    def prompt_len(self) -> int:
        return self.system_prompt_len + self.question_len


def stage_arrivals(stages: Sequence[Stage], rng: np.random.Generator,
                   gap_s: float = DEFAULT_STAGE_GAP_S) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Arrival times of every stage laid end to end, the stage index of each request, and each
    stage's start time. Stage ``k + 1`` starts ``gap_s`` after stage ``k``'s window ends."""
    times: list[np.ndarray] = []
    index: list[np.ndarray] = []
    starts: list[float] = []
    t0 = 0.0
    for k, st in enumerate(stages):
        _check_stage(st, k)
        starts.append(t0)
        n = st.num_requests
        if st.process == "rescaled_poisson":
            gaps = rng.exponential(1.0, n)
            rel = np.cumsum(gaps) * (st.duration_s / gaps.sum()) if n else np.zeros(0)
        elif st.process in ("burst", "closed"):
            rel = np.zeros(n)
        elif st.process == "constant":
            rel = arrivals.constant_arrivals(n, st.rate)
        else:
            rel = arrivals.gamma_arrivals(n, st.rate, st.cv, rng)
        times.append(t0 + rel)
        index.append(np.full(n, k, dtype=np.int64))
        span = max(st.duration_s, float(rel[-1]) if n else 0.0)
        t0 += span + gap_s
    if not times:
        return np.zeros(0), np.zeros(0, dtype=np.int64), []
    return np.concatenate(times), np.concatenate(index), starts


def shared_prefix_requests(sp: SharedPrefix, stages: Sequence[Stage], seed: int = 0, *,
                           gap_s: float = DEFAULT_STAGE_GAP_S, hash_block_size: int = 16,
                           ) -> tuple[list[Request], np.ndarray, list[float]]:
    """Requests of an inference-perf shared-prefix run: ``(requests sorted by arrival, stage
    index per request, stage start times)``. Every request has exactly ``output_len`` outputs
    (the runs set ``ignore_eos``)."""
    for name in ("num_groups", "prompts_per_group", "system_prompt_len", "question_len", "output_len"):
        if getattr(sp, name) < (0 if name == "system_prompt_len" else 1):
            raise ConfigError(f"shared_prefix.{name}: {getattr(sp, name)!r} must be >= 1")
    rng_arr, rng_perm = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    times, stage_of, starts = stage_arrivals(stages, rng_arr, gap_s)
    prompt_hashes = _prompt_hashes(sp, hash_block_size)
    order = rng_perm.permutation(sp.num_prompts)  # the datagen's one shuffle
    # Request n of a stage (n restarts every stage) sends prompt order[n % num_prompts].
    within = np.concatenate([np.arange(st.num_requests) for st in stages] or [np.zeros(0, dtype=np.int64)])
    reqs = [Request(request_id=str(i), arrival_time=float(times[i]), prompt_len=sp.prompt_len,
                    max_output_tokens=sp.output_len,
                    block_hashes=prompt_hashes[int(order[int(within[i]) % sp.num_prompts])],
                    hash_block_size=hash_block_size)
            for i in range(len(times))]
    return _sorted(reqs, stage_of, starts)


def staged_requests(stages: Sequence[Stage], prompt_lens: Sequence[int], output_lens: Sequence[int],
                    seed: int = 0, *, gap_s: float = DEFAULT_STAGE_GAP_S,
                    ) -> tuple[list[Request], np.ndarray, list[float]]:
    """Requests with given lengths (one per request, in stage order) and no shared content:
    the workload of a vllm bench / GuideLLM run, whose prompts kvplan cannot see."""
    total = sum(st.num_requests for st in stages)
    if len(prompt_lens) != total or len(output_lens) != total:
        raise ConfigError(f"workload: {len(prompt_lens)} prompt and {len(output_lens)} output "
                          f"lengths for {total} requests")
    rng = np.random.default_rng(seed)
    times, stage_of, starts = stage_arrivals(stages, rng, gap_s)
    reqs = [Request(request_id=str(i), arrival_time=float(times[i]),
                    prompt_len=max(1, int(prompt_lens[i])), max_output_tokens=max(1, int(output_lens[i])))
            for i in range(total)]
    return _sorted(reqs, stage_of, starts)


def pooled_requests(pool: PromptPool, stages: Sequence[Stage], entry_prompt_lens: Sequence[int],
                    entry_output_lens: Sequence[int], seed: int = 0, *, gap_s: float = DEFAULT_STAGE_GAP_S,
                    ) -> tuple[list[Request], np.ndarray, list[float]]:
    """Requests of a run whose load tool drew every prompt from a pool (aiperf's
    ``--num-dataset-entries``): request ``i`` of all stages together (in send order) sends entry
    ``entry_order(...)[i]``, its lengths and its block ids, so a repeat hits the prefix cache."""
    if len(entry_prompt_lens) != pool.entries or len(entry_output_lens) != pool.entries:
        raise ConfigError(f"prompt_pool: {len(entry_prompt_lens)} prompt and {len(entry_output_lens)} "
                          f"output lengths for {pool.entries} entries")
    times, stage_of, starts = stage_arrivals(stages, np.random.default_rng(seed), gap_s)
    which = entry_order(len(times), pool, np.random.default_rng([seed, 1]))
    hashes = entry_hashes(np.asarray(entry_prompt_lens), pool.hash_block_size)
    reqs = [Request(request_id=str(i), arrival_time=float(times[i]),
                    prompt_len=max(1, int(entry_prompt_lens[e])),
                    max_output_tokens=max(1, int(entry_output_lens[e])),
                    block_hashes=hashes[e], hash_block_size=pool.hash_block_size)
            for i, e in enumerate(which.tolist())]
    return _sorted(reqs, stage_of, starts)


def _prompt_hashes(sp: SharedPrefix, block_size: int) -> list[list[int]]:
    """Block ids of each of the ``num_prompts`` prompts (group-major, as the datagen builds
    them): the group's full system-prompt blocks shared, the rest the prompt's own."""
    full = sp.system_prompt_len // block_size
    total = num_blocks(sp.prompt_len, block_size)
    next_id = sp.num_groups * full
    out = []
    for g in range(sp.num_groups):
        for _ in range(sp.prompts_per_group):
            out.append(list(range(g * full, (g + 1) * full)) + list(range(next_id, next_id + total - full)))
            next_id += total - full
    return out


def _sorted(reqs: list[Request], stage_of: np.ndarray, starts: list[float]):
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].arrival_time)
    out = []
    for new_id, i in enumerate(order):
        r = reqs[i]
        r.request_id = str(new_id)
        out.append(r)
    return out, np.asarray(stage_of, dtype=np.int64)[order] if len(order) else np.zeros(0, int), starts


def _check_stage(st: Stage, k: int) -> None:
    where = f"stages[{k}]"
    if st.process not in STAGE_PROCESSES:
        raise ConfigError(f"{where}.process: {st.process!r} is not one of {', '.join(STAGE_PROCESSES)}")
    if st.num_requests < 0:
        raise ConfigError(f"{where}: {st.num_requests} requests")
    if st.process not in ("burst", "closed") and not (st.rate > 0 and math.isfinite(st.rate)):
        raise ConfigError(f"{where}.rate: {st.rate!r} must be a positive finite number of req/s")
    if st.process == "closed" and st.concurrency is None:
        raise ConfigError(f"{where}.concurrency: required for a closed-loop stage (its number of clients)")
    if st.concurrency is not None and st.concurrency < 1:
        raise ConfigError(f"{where}.concurrency: {st.concurrency!r} must be >= 1")
    if not (st.duration_s >= 0 and math.isfinite(st.duration_s)):
        raise ConfigError(f"{where}.duration: {st.duration_s!r} must be >= 0 seconds")
    if st.process == "rescaled_poisson" and st.num_requests and st.duration_s <= 0:
        raise ConfigError(f"{where}.duration: must be > 0 for {st.num_requests} requests")


def stage_slices(stage_of: np.ndarray, num_stages: int) -> list[np.ndarray]:
    """Indices (into the sorted request list) of each stage's requests."""
    return [np.flatnonzero(stage_of == k) for k in range(num_stages)]


def stage_clients(stages: Sequence[Stage], stage_of: np.ndarray) -> list[ClientGroup]:
    """The client groups of the stages that limit what is in flight (a closed loop, or an open
    stage with a ``concurrency`` cap), over each stage's requests in the sorted list (``_sorted``
    keeps a stage's requests together: stages follow each other in time); what
    ``sim.api.simulate(clients=...)`` replays them with."""
    groups = []
    for k, idx in enumerate(stage_slices(stage_of, len(stages))):
        st = stages[k]
        if st.concurrency is None or not len(idx):
            continue
        first, last = int(idx[0]), int(idx[-1]) + 1
        if last - first != len(idx):
            raise ConfigError(f"stages[{k}]: its requests interleave with another stage's")
        groups.append(ClientGroup(first, last, st.concurrency, closed=st.process == "closed"))
    return groups


__all__ = ["DEFAULT_STAGE_GAP_S", "STAGE_PROCESSES", "SharedPrefix", "Stage", "pooled_requests",
           "shared_prefix_requests", "stage_arrivals", "stage_clients", "stage_slices", "staged_requests"]
