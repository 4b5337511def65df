"""Turn a ``workload`` config into the simulator's requests: the first stage of the request path.

Randomness: one seed, split into independent child streams (arrivals, input lengths, output
lengths, prefix choice, priority). Changing one part of the workload (say the arrival rate)
leaves every other part's numbers unchanged, so A/B comparisons use common random numbers and
their differences are the policy's, not the dice's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Mapping, Optional, Union, cast

import numpy as np

from sim.errors import ConfigError
from sim.policies.request import Request
from sim.workload import arrivals
from sim.workload.config import (DISTS, MAX_REQUESTS, ArrivalSpec, LengthSpec, WorkloadSpec,
                                  parse_workload)
from sim.workload.lengths import Fixed, LengthDist, Lognormal, Table, Uniform
from sim.workload.prefix import resize_hashes, synthetic_prefix_hashes
from sim.workload.prompt_pool import entry_hashes, entry_order
from sim.workload.sessions import (SESSION_COLUMN, SessionRequests, assemble, think_times,
                                   trace_sessions, trace_think_times)
from sim.workload.traces import Trace, read_trace

# Fixed order: a stream's numbers depend only on its index, so new streams go at the end.
STREAMS = ("arrivals", "input_len", "output_len", "prefix", "priority", "sessions", "pool")
KEY = "workload"


def build_requests(
    workload: Mapping[str, Any], seed: int, *, base_dir: Union[str, os.PathLike, None] = None,
    lazy: bool = False,
) -> Sequence[Request]:
    """Requests sorted by arrival time, ids ``"0"``, ``"1"``, ... in that order: a list, or with
    ``lazy`` a ``RequestStream`` that builds each when asked (the same requests).

    ``workload`` is the config's ``workload`` section (keys in docs/workloads.md); relative
    file paths are taken from ``base_dir`` when given (e.g. the config file's folder).
    Raises ``ConfigError`` naming the dotted key for a bad config, ``TraceFormatError`` naming
    ``file:line`` for a bad trace row.

    Conversations (``workload.sessions``, or a trace with a ``session_id`` column) give a
    ``SessionRequests`` list, never lazy: first turns in arrival order, each followed by its
    session's later turns, whose arrival times the simulator sets (``sim.workload.sessions``).
    """
    spec = parse_workload(workload, base_dir=base_dir, key=KEY)
    rngs = dict(zip(STREAMS, _streams(seed)))
    trace = _load(spec.trace, f"{KEY}.trace", spec.zero_output) if spec.trace else None
    if trace is not None and spec.prompt_pool is not None:
        raise ConfigError(f"{KEY}.prompt_pool: {spec.trace} gives every request's prompt; drop "
                          f"{KEY}.prompt_pool or {KEY}.trace")
    if trace is not None and SESSION_COLUMN in trace.raw_columns:
        return _trace_conversations(spec, trace, rngs)
    n = _count(spec, trace)
    times = _arrival_times(spec.arrival, n, trace, rngs["arrivals"])
    hashes: Optional[list[list[int]]] = None
    block_size = 512
    if spec.prompt_pool is not None:
        inputs, outputs, hashes, block_size = _pooled(spec, n, rngs)
    else:
        inputs, outputs = _lengths(spec, n, trace, rngs)
    if trace is not None and trace.hash_ids is not None:
        block_size = trace.hash_block_size
        hashes = resize_hashes(trace.hash_ids[:n], inputs, block_size)
    if spec.prefix is not None and spec.prompt_pool is None:  # a pool's entries hold their prefix
        if hashes is not None:
            raise ConfigError(
                f"{KEY}.prefix: {spec.trace} already carries prefix hash_ids; drop {KEY}.prefix"
            )
        p = spec.prefix
        choices = rngs["prefix"].integers(0, p.num_prefixes, size=n)
        inputs = inputs + p.length
        block_size = p.hash_block_size
        hashes = synthetic_prefix_hashes(choices, inputs, p.length, block_size, p.num_prefixes)
    priorities = _priorities(spec, n, rngs["priority"])
    if spec.sessions is not None:
        return _conversations(spec, times, inputs, outputs, hashes, block_size, priorities,
                              rngs["sessions"])
    order = np.argsort(times, kind="stable")
    stream = RequestStream(order, times, inputs, outputs, hashes, block_size, priorities)
    if lazy:
        return stream
    return [stream.make(i) for i in range(n)]


def _pooled(spec: WorkloadSpec, n: int, rngs: dict[str, np.random.Generator],
            ) -> tuple[np.ndarray, np.ndarray, list[list[int]], int]:
    """Lengths and block ids of ``n`` requests drawn from ``workload.prompt_pool``: each entry's
    lengths are drawn once (as aiperf draws ISL / OSL per dataset entry), with a shared prefix
    per entry when ``workload.prefix`` is set; request ``i`` (in send order under a closed
    loop, else arrival order) sends entry ``entry_order(...)[i]``."""
    key = f"{KEY}.prompt_pool"
    pool = spec.prompt_pool
    assert pool is not None
    if spec.sessions is not None:
        raise ConfigError(f"{key}: not supported with {KEY}.sessions (a conversation's turns grow "
                          f"their own prompts)")
    m = pool.entries
    ins, outs = _lengths(spec, m, None, rngs)
    if spec.prefix is not None:
        p = spec.prefix
        ins = ins + p.length
        block_size = p.hash_block_size
        choices = rngs["prefix"].integers(0, p.num_prefixes, size=m)
        per_entry = synthetic_prefix_hashes(choices, ins, p.length, block_size, p.num_prefixes)
    else:
        block_size = pool.hash_block_size
        per_entry = entry_hashes(ins, block_size)
    which = entry_order(n, pool, rngs["pool"])
    return ins[which], outs[which], [per_entry[e] for e in which.tolist()], block_size


class RequestStream(Sequence[Request]):
    """The workload's requests, each built when asked for (by index, in arrival order) from
    its length and time columns: a streamed run of millions of requests holds a few dozen
    bytes per request instead of a ``Request`` object each. The last one built is kept, so
    asking twice for the next arrival builds it once."""

    def __init__(self, order: np.ndarray, times: np.ndarray, inputs: np.ndarray,
                 outputs: np.ndarray, hashes: Optional[list[list[int]]], block_size: int,
                 priorities: np.ndarray) -> None:
        self.order = order
        self.times, self.inputs, self.outputs = times, inputs, outputs
        self.hashes, self.block_size, self.priorities = hashes, block_size, priorities
        self._last: tuple[int, Optional[Request]] = (-1, None)

    def __len__(self) -> int:
        return len(self.order)

    def make(self, i: int) -> Request:
        j = int(self.order[i])
        return Request(
            request_id=str(i),
            arrival_time=float(self.times[j]),
            prompt_len=int(self.inputs[j]),
            max_output_tokens=int(self.outputs[j]),
            block_hashes=None if self.hashes is None else self.hashes[j],
            hash_block_size=self.block_size,
            priority=int(self.priorities[j]),
        )

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        last, req = self._last
        if last != i or req is None:
            req = self.make(i)
            self._last = (i, req)
        return req


def _streams(seed: Any) -> list[np.random.Generator]:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed: {seed!r} is not a non-negative integer")
    children = np.random.SeedSequence(int(seed)).spawn(len(STREAMS))
    return [np.random.default_rng(child) for child in children]


def _load(path: Path, key: str, zero_output: str) -> Trace:
    if not path.is_file():
        raise ConfigError(f"{key}: no such file: {path}")
    try:
        return read_trace(path, zero_output=zero_output)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None


def _count(spec: WorkloadSpec, trace: Optional[Trace]) -> int:
    key = f"{KEY}.num_requests"
    if trace is None:
        if spec.num_requests is None:
            raise ConfigError(f"{key}: required when no {KEY}.trace is given")
        return spec.num_requests
    if spec.num_requests is None:
        return len(trace)
    if spec.num_requests > len(trace):
        raise ConfigError(
            f"{key}: {spec.num_requests} is more than the {len(trace)} rows of {trace.path} "
            f"(to resample lengths, use input_len/output_len dist: table instead of {KEY}.trace)"
        )
    return spec.num_requests


def _arrival_times(
    a: ArrivalSpec, n: int, trace: Optional[Trace], rng: np.random.Generator
) -> np.ndarray:
    key = f"{KEY}.arrival"
    timed = trace is not None and trace.timed
    process = a.process or ("trace" if timed else "poisson")
    if process != "trace" and a.time_scale is not None:
        raise ConfigError(f"{key}.time_scale: only applies to process trace, not {process!r}")
    if process == "closed":
        # Every request is ready at t=0; the simulator's clients send them one by one as earlier
        # ones finish (``sim.workload.clients``), and sets each arrival_time to its send time.
        return np.zeros(n)
    if process == "trace":
        times = trace.timestamps if trace is not None else None  # None exactly when not timed
        if times is None:
            what = (
                f"{trace.path} is an untimed length table" if trace else f"no {KEY}.trace is given"
            )
            raise ConfigError(
                f"{key}.process: 'trace' needs {KEY}.trace to be a timed trace "
                f"(Azure CSV or Mooncake JSONL); {what}"
            )
        try:
            return arrivals.trace_arrivals(
                times[:n], rate=a.rate, time_scale=a.time_scale or 1.0
            )
        except ValueError as exc:
            raise ConfigError(f"{key}.rate: {exc}") from None
    if a.rate is None:
        raise ConfigError(
            f"{key}.rate: required for process {process} (requests per second, or inf)"
        )
    if process == "constant":
        return arrivals.constant_arrivals(n, a.rate)
    # gamma: its cv is required when the config is read (``workload.config``)
    cv = 1.0 if process == "poisson" else cast(float, a.cv)
    return arrivals.gamma_arrivals(n, a.rate, cv, rng)


def _lengths(
    spec: WorkloadSpec, n: int, trace: Optional[Trace], rngs: dict[str, np.random.Generator]
) -> tuple[np.ndarray, np.ndarray]:
    """Input and output lengths: from the trace (clipped by min/max), or sampled."""
    specs = {"input_len": spec.input_len, "output_len": spec.output_len}
    if trace is not None:
        for name, s in specs.items():
            if s is not None and s.dist is not None:
                raise ConfigError(
                    f"{KEY}.{name}.dist: {KEY}.trace already gives the lengths; drop "
                    f"{KEY}.{name}.dist or {KEY}.trace (only {KEY}.{name}.min/max may clip "
                    "a trace's lengths)"
                )
        inputs = _clip(spec.input_len, trace.input_lens[:n])
        return inputs, _clip(spec.output_len, trace.output_lens[:n])
    dists = {name: _dist(s, f"{KEY}.{name}", name, spec.zero_output) for name, s in specs.items()}
    d_in, d_out = dists["input_len"], dists["output_len"]
    if isinstance(d_in, Table) and isinstance(d_out, Table) and d_in.source == d_out.source:
        rows = d_in.indices(n, rngs["input_len"])  # same rows: keep the table's correlation
        return d_in.take(rows), d_out.take(rows)
    return d_in.sample(n, rngs["input_len"]), d_out.sample(n, rngs["output_len"])


def _clip(s: Optional[LengthSpec], lengths: np.ndarray) -> np.ndarray:
    if s is None:
        return np.array(lengths, dtype=np.int64)
    return np.clip(lengths, s.min, s.max).astype(np.int64)


def _dist(s: Optional[LengthSpec], key: str, role: str, zero_output: str) -> LengthDist:
    if s is None or s.dist is None:
        raise ConfigError(
            f"{key}.dist: required when no {KEY}.trace is given (one of {', '.join(DISTS)})"
        )
    # The keys each dist needs (fixed: mean; uniform: max; lognormal: mean, cv; table: path)
    # are required when the config is read (``workload.config._length``).
    if s.dist == "fixed":
        value = max(1, int(round(cast(float, s.mean))))
        return Fixed(value=value, min=s.min, max=s.max)
    if s.dist == "uniform":
        return Uniform(low=s.min, high=cast(int, s.max), min=s.min, max=s.max)
    if s.dist == "lognormal":
        return Lognormal(mean=cast(float, s.mean), cv=cast(float, s.cv), min=s.min, max=s.max)
    table = _load(cast(Path, s.path), f"{key}.path", zero_output)
    column = s.column or (table.input_column if role == "input_len" else table.output_column)
    try:
        values = table.int_column(column)
    except KeyError:
        raise ConfigError(
            f"{key}.column: {column!r} is not a column of {table.path} "
            f"(columns: {', '.join(table.columns)})"
        ) from None
    return Table(values=values, source=str(Path(table.path).resolve()), min=s.min, max=s.max)


def _conversations(spec: WorkloadSpec, times: np.ndarray, inputs: np.ndarray, outputs: np.ndarray,
                   hashes: Optional[list[list[int]]], block_size: int, priorities: np.ndarray,
                   rng: np.random.Generator) -> SessionRequests:
    """Synthetic sessions: the workload's requests are the first turns; turn counts, think
    times, new messages and later outputs come from ``workload.sessions`` (one child stream
    each, so changing one leaves the others' numbers unchanged)."""
    key = f"{KEY}.sessions"
    s = spec.sessions
    assert s is not None
    if s.num_turns is None:
        raise ConfigError(f"{key}.num_turns: required (turns per session, a length distribution "
                          f"such as {{dist: uniform, min: 2, max: 8}})")
    if s.think_time_s is None:
        raise ConfigError(f"{key}.think_time_s: required (seconds between a reply and the next "
                          f"message, e.g. {{dist: exponential, mean: 10}} or a number)")
    if s.new_message_len is None:
        raise ConfigError(f"{key}.new_message_len: required (tokens the user adds each turn)")
    r_turns, r_think, r_msg, r_out = rng.spawn(4)
    n = len(times)
    turns = _dist(s.num_turns, f"{key}.num_turns", "input_len", spec.zero_output).sample(n, r_turns)
    follow = int((turns - 1).sum())
    if n + follow > MAX_REQUESTS:
        raise ConfigError(f"{key}.num_turns: {n} sessions make {n + follow:,} requests, more than "
                          f"{MAX_REQUESTS:,}")
    thinks = think_times(s.think_time_s, follow, r_think)
    msgs = _dist(s.new_message_len, f"{key}.new_message_len", "input_len", spec.zero_output).sample(follow, r_msg)
    if s.output_len is not None:
        outs = _dist(s.output_len, f"{key}.output_len", "output_len", spec.zero_output).sample(follow, r_out)
    elif spec.output_len is not None and spec.output_len.dist is not None:
        outs = _dist(spec.output_len, f"{KEY}.output_len", "output_len", spec.zero_output).sample(follow, r_out)
    else:  # a trace's outputs: resample the first turns'
        outs = outputs[r_out.integers(0, n, size=follow)] if follow else np.zeros(0, dtype=np.int64)
    ends = np.cumsum(turns - 1)
    begins = ends - (turns - 1)
    hbs = block_size if hashes is not None else s.hash_block_size
    return assemble(
        times, inputs.tolist(), hashes,
        [msgs[b:e].tolist() for b, e in zip(begins, ends)],
        [[int(outputs[i])] + outs[b:e].tolist() for i, (b, e) in enumerate(zip(begins, ends))],
        [thinks[b:e].tolist() for b, e in zip(begins, ends)],
        priorities.tolist(), hbs)


def _trace_conversations(spec: WorkloadSpec, trace: Trace,
                         rngs: dict[str, np.random.Generator]) -> SessionRequests:
    """Sessions from a trace's ``session_id`` column (``sim.workload.sessions``): rows are
    turns, each row's input length the turn's new message. First turns arrive at their rows'
    times (the trace's timing, rescaled as ``workload.arrival`` says) or, for a synthetic
    arrival process, one session per arrival; think times come from ``workload.sessions.
    think_time_s`` when given, else from the trace's timing."""
    key = f"{KEY}.sessions"
    s = spec.sessions
    if s is not None:
        for name in ("num_turns", "new_message_len", "output_len"):
            if getattr(s, name) is not None:
                raise ConfigError(f"{key}.{name}: {trace.path} gives the conversations (its "
                                  f"{SESSION_COLUMN} column); drop {key}.{name}")
    if spec.arrival.process == "closed" or spec.max_concurrency is not None:
        what = f"{KEY}.arrival.process closed" if spec.arrival.process == "closed" else f"{KEY}.max_concurrency"
        raise ConfigError(f"{what}: not supported with a trace of conversations ({trace.path} has "
                          f"a {SESSION_COLUMN} column) yet")
    if spec.prefix is not None:
        raise ConfigError(f"{KEY}.prefix: not supported with a trace of conversations "
                          f"({trace.path} has a {SESSION_COLUMN} column)")
    n = _count(spec, trace)
    inputs, outputs = _lengths(spec, n, trace, rngs)
    groups = trace_sessions(trace, n)
    timed = (spec.arrival.process or ("trace" if trace.timed else "poisson")) == "trace"
    if timed:  # the trace's own timing (an error naming the key if it has none)
        row_times = _arrival_times(spec.arrival, n, trace, rngs["arrivals"])
        starts = np.array([row_times[g[0]] for g in groups], dtype=np.float64)
    else:  # one session starts per arrival of the process
        starts = _arrival_times(spec.arrival, len(groups), None, rngs["arrivals"])
    if s is not None and s.think_time_s is not None:
        draws = think_times(s.think_time_s, sum(len(g) - 1 for g in groups), rngs["sessions"])
        thinks, at = [], 0
        for g in groups:
            thinks.append(draws[at:at + len(g) - 1].tolist())
            at += len(g) - 1
    elif timed:
        thinks = [trace_think_times(trace, row_times, g) for g in groups]
    else:
        raise ConfigError(f"{key}.think_time_s: required: {trace.path} has no timestamps to take "
                          f"think times from (or use workload.arrival.process trace)")
    priorities = _priorities(spec, len(groups), rngs["priority"])
    hbs = s.hash_block_size if s is not None else 16
    return assemble(starts, [int(inputs[g[0]]) for g in groups], None,
                    [[int(inputs[r]) for r in g[1:]] for g in groups],
                    [[int(outputs[r]) for r in g] for g in groups], thinks, priorities.tolist(), hbs)


def _priorities(spec: WorkloadSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    if spec.priority is None:
        return np.zeros(n, dtype=np.int64)
    p = spec.priority
    if p.weights is None:
        return rng.integers(0, p.levels, size=n)
    weights = np.asarray(p.weights, dtype=np.float64)
    return rng.choice(p.levels, size=n, p=weights / weights.sum())
