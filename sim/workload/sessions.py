"""Conversations: multi-turn sessions in which every turn re-sends the conversation so far.

Why its own module: chat traffic is where prefix caching and session affinity pay, and only
because turn k's prompt *starts with* turn k-1's. Independent requests with long prompts show
neither effect; a session does, and its turns cannot all be scheduled up front, because a user
answers only after reading the reply (a closed loop per session).

Semantics (docs/workloads.md, "Sessions"):

- A session's first turn is a request of the workload as configured (its arrival process,
  lengths, shared prefix, priority); with ``workload.sessions`` the workload's ``num_requests``
  counts sessions, and the first turns are exactly the requests the workload has without it.
- Turn k >= 2: prompt = turn k-1's prompt + turn k-1's output + a new message; a new output.
  It arrives ``think_time_s`` after turn k-1 *finishes* (``sim.simulation`` holds it until
  then), so its ``arrival_time`` here is only a lower bound (as if turn k-1 took no time);
  a rejected turn ends its session (the later turns are rejected too).
- Prefix identity: prompts carry block hashes (one id per ``hash_block_size`` tokens). Turn k
  keeps turn k-1's ids for the full blocks of turn k-1's prompt and gets fresh ids for the
  rest, so a prefix cache holding turn k-1's prompt hits it. Turn k-1's output blocks are not
  hit: the simulator knows output lengths, not content (vLLM would hit them too, so hit rates
  here are a little low for long replies).

Conversations from a trace: a CSV trace with a ``session_id`` column (a kvplan trace, i.e. a
length table with ``arrived_at``, or Azure) groups its rows into sessions, ordered by a ``turn``
column when present, else by row order. Each row's input length is that turn's new message (the
first row's: the whole first prompt), its output length the turn's output; growth as above.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from sim.errors import TraceFormatError
from sim.policies.request import Request
from sim.workload.config import ThinkTimeSpec
from sim.workload.prefix import num_blocks
from sim.workload.traces import Trace

#: Trace columns that carry conversation structure.
SESSION_COLUMN = "session_id"
TURN_COLUMN = "turn"
#: A kvplan trace's measured end-to-end latency (``calibration.bench_format``), in ms.
E2EL_COLUMN = "e2el_ms"


class SessionLinks:
    """A workload's conversation structure, by request id: the turn after each request and
    the think time before it (``next_turn``), each request's session (``session_of``) and turn
    number (``turn_of``, from 1). What ``sim.simulation.Simulation`` needs to hold turns back
    and the router needs for session affinity."""

    def __init__(self) -> None:
        self.next_turn: dict[str, tuple[str, float]] = {}
        self.session_of: dict[str, str] = {}
        self.turn_of: dict[str, int] = {}

    @property
    def num_sessions(self) -> int:
        return len(set(self.session_of.values()))

    def summary(self, requests: Sequence[Request]) -> dict:
        """``summary["sessions"]``: sessions, turns per session, and how the turns ended."""
        turns: dict[str, int] = {}
        completed: dict[str, int] = {}
        for r in requests:
            sid = self.session_of.get(r.request_id)
            if sid is None:
                continue
            turns[sid] = turns.get(sid, 0) + 1
            if r.state.value == "finished":
                completed[sid] = completed.get(sid, 0) + 1
        n = len(turns)
        full = sum(1 for sid, t in turns.items() if completed.get(sid, 0) == t)
        counts = np.fromiter(turns.values(), dtype=np.int64, count=n) if n else np.zeros(0)
        return {
            "num_sessions": n,
            "num_turns": int(counts.sum()) if n else 0,
            "mean_turns": float(counts.mean()) if n else 0.0,
            "max_turns": int(counts.max()) if n else 0,
            "completed_sessions": full,
        }


class SessionRequests(list):
    """A workload's requests (a plain list: first turns in arrival order, each followed by its
    session's later turns) and its conversation structure, ``links``."""

    def __init__(self, requests: Sequence[Request], links: SessionLinks) -> None:
        super().__init__(requests)
        self.links = links


def think_times(spec: ThinkTimeSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` think times in seconds (>= 0), clipped to ``[min, max]``."""
    if spec.dist == "fixed":
        t = np.full(n, spec.mean)
    elif spec.dist == "uniform":
        hi = spec.min if spec.max is None else spec.max  # the config requires max here
        t = rng.uniform(spec.min, hi, size=n)
    elif spec.dist == "exponential":
        t = rng.exponential(spec.mean, size=n)
    else:  # lognormal with exactly this mean and CV (as the length distributions)
        sigma2 = float(np.log1p(spec.cv * spec.cv))
        mu = float(np.log(spec.mean)) - sigma2 / 2
        t = np.exp(mu + np.sqrt(sigma2) * rng.standard_normal(n))
    return np.clip(t, spec.min, spec.max)


def assemble(starts: np.ndarray, first_prompts: Sequence[int],
             first_hashes: Optional[Sequence[Optional[Sequence[int]]]], messages: Sequence[Sequence[int]],
             outputs: Sequence[Sequence[int]], thinks: Sequence[Sequence[float]],
             priorities: Sequence[int], hash_block_size: int) -> SessionRequests:
    """Requests of sessions ``s`` = 0, 1, ... (taken in order of ``starts``, ties by index):
    turn 1 arrives at ``starts[s]`` with ``first_prompts[s]`` tokens (and ``first_hashes[s]``
    when given, else fresh ids); turn k >= 2 adds ``outputs[s][k-2]`` and ``messages[s][k-2]``
    to the previous prompt, outputs ``outputs[s][k-1]`` tokens and follows ``thinks[s][k-2]``
    seconds after turn k-1 finishes. Ids are ``"0"``, ``"1"``, ... session by session."""
    hbs = hash_block_size
    next_id = 0
    if first_hashes is not None:
        next_id = 1 + max((max(h) for h in first_hashes if h), default=-1)
    links = SessionLinks()
    reqs: list[Request] = []
    for s in np.argsort(np.asarray(starts, dtype=np.float64), kind="stable").tolist():
        prompt = int(first_prompts[s])
        hashes: list[int]
        given = first_hashes[s] if first_hashes is not None else None
        if given is None:
            hashes = list(range(next_id, next_id + num_blocks(prompt, hbs)))
            next_id += len(hashes)
        else:
            hashes = list(given)
        arrival = float(starts[s])
        prev: Optional[Request] = None
        for k, out in enumerate(outputs[s]):
            if prev is not None:
                prompt = prev.prompt_len + prev.max_output_tokens + int(messages[s][k - 1])
                keep = prev.prompt_len // hbs  # full blocks of the previous prompt
                total = num_blocks(prompt, hbs)
                hashes = hashes[:keep] + list(range(next_id, next_id + total - keep))
                next_id += total - keep
                arrival += float(thinks[s][k - 1])
            req = Request(request_id=str(len(reqs)), arrival_time=arrival, prompt_len=prompt,
                          max_output_tokens=int(out), block_hashes=hashes, hash_block_size=hbs,
                          priority=int(priorities[s]))
            if prev is not None:
                links.next_turn[prev.request_id] = (req.request_id, float(thinks[s][k - 1]))
            links.session_of[req.request_id] = str(s)
            links.turn_of[req.request_id] = k + 1
            reqs.append(req)
            prev = req
    return SessionRequests(reqs, links)


def trace_sessions(trace: Trace, n: int) -> list[list[int]]:
    """Rows ``0 .. n-1`` of ``trace`` grouped into sessions by its ``session_id`` column, each
    a list of row indices in turn order (the ``turn`` column when present, else row order);
    sessions in order of their first row. Raises ``TraceFormatError`` naming ``file:line`` for
    an empty session id, a turn that is not a positive integer, or a turn given twice."""
    ids = trace.raw_columns[SESSION_COLUMN]
    turns = trace.raw_columns.get(TURN_COLUMN)
    lines = trace.line_numbers
    groups: dict[str, list[int]] = {}
    for row in range(n):
        sid = ids[row].strip()
        if not sid:
            raise TraceFormatError(f"{trace.path}:{int(lines[row])}: {SESSION_COLUMN} is empty")
        groups.setdefault(sid, []).append(row)
    if turns is None:
        return list(groups.values())
    out = []
    for rows in groups.values():
        seen: dict[int, int] = {}
        for row in rows:
            text = turns[row].strip()
            try:
                t = int(float(text))
                ok = float(text) == t and t >= 1
            except ValueError:
                ok = False
            if not ok:
                raise TraceFormatError(f"{trace.path}:{int(lines[row])}: {TURN_COLUMN} is "
                                       f"{text!r}, not a positive integer")
            if t in seen:
                raise TraceFormatError(f"{trace.path}:{int(lines[row])}: {TURN_COLUMN} {t} of "
                                       f"session {ids[row].strip()!r} already on line {seen[t]}")
            seen[t] = int(lines[row])
        out.append(sorted(rows, key=lambda r: int(float(turns[r]))))
    return out


def trace_think_times(trace: Trace, times: np.ndarray, rows: Sequence[int]) -> list[float]:
    """Think times before turns 2.. of a trace session (``rows`` in turn order), from its
    arrival ``times``: the gap between consecutive turns' arrivals less the earlier turn's
    measured ``e2el_ms`` when the trace has it (a kvplan trace does), never below 0. Without
    that column the whole gap is taken, so the replay runs later than the trace."""
    e2el = trace.raw_columns.get(E2EL_COLUMN)
    out = []
    for a, b in zip(rows, rows[1:]):
        gap = float(times[b] - times[a])
        if e2el is not None:
            try:
                gap -= float(e2el[a]) / 1000
            except ValueError:  # an empty cell: a failed request, nothing measured
                pass
        out.append(max(gap, 0.0))
    return out
