"""Who sends when, on the client side: closed-loop clients and a cap on requests in flight.

Why its own module: an open arrival process says when each request is *offered*; a load tool
that limits what it has in flight decides when each is *sent*, and that depends on when earlier
ones finish, which only the simulator knows. ``vllm bench serve --max-concurrency N`` wraps every
request in an ``asyncio.Semaphore(N)``: a request whose arrival finds N in flight waits for a
slot, and its TTFT is timed from when it is actually sent (in ``vllm/benchmarks/serve.py``,
``benchmark()``'s ``limited_request_func`` acquires the semaphore and only then calls the
request function, which takes its start time, ``st = time.perf_counter()``, itself). With
``--request-rate inf`` every request is offered at t=0, which makes it a closed loop of N clients
(GuideLLM's ``concurrent`` profile, ``synchronous`` = 1; inference-perf's ``concurrent`` load).

One description covers both (``ClientGroup``), and ``sim.simulation.Simulation`` holds the
requests back with the same machinery it uses for the later turns of a conversation
(``sim.workload.sessions``): a held request is released when a request that finished frees its
slot, plus the client's think time.

Semantics (docs/workloads.md, "Closed loop and concurrency caps"):

- ``workload.arrival.process: closed`` with ``concurrency: N`` and ``think_time_s: t`` (default 0):
  every request is ready at t=0; N clients each send one, and each sends its next ``t`` seconds
  after its last one finished (its last token arrived). The first N start at t=0, or with
  ``ramp_up_s: r`` one by one, client k at k x r / N (a load tool's ramp-up; it also sets the
  clients' phases: N identical clients started together stay in step for ever, their prefills
  colliding every cycle, which a real benchmark's clients need not).
- ``workload.max_concurrency: N`` under an open process: each request is ready at its arrival
  time; it is sent then if fewer than N are in flight, else when one finishes (first come, first
  served).
- A request's ``arrival_time`` becomes its send time: TTFT and E2E count from it, as the load
  tools time them; what it waited before, on the client, is in no latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.workload.config import WorkloadSpec


@dataclass(frozen=True)
class ClientGroup:
    """Requests ``first .. last - 1`` of the arrival stream (in arrival order), of which at most
    ``limit`` are in flight (sent, last token not yet received) at any time.

    ``closed``: every request of the group is ready at the group's start (the first request's
    arrival time), and each of the ``limit`` clients sends its next one ``think_s`` seconds
    after its last one finished; the slot stays the client's while it thinks. Not closed: each
    request is ready at its own arrival time and waits for a free slot (``think_s`` is 0)."""

    first: int
    last: int
    limit: int
    think_s: float = 0.0
    closed: bool = False
    #: A closed loop's ramp-up: client k sends its first request ``k x ramp_s / limit`` seconds
    #: after the group's start (load tools' ramp-up; 0: all at once).
    ramp_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last:
            raise ValueError(f"client group: bad request range {self.first}..{self.last}")
        if self.limit < 1:
            raise ValueError(f"client group: limit must be >= 1, got {self.limit}")
        if not self.think_s >= 0:
            raise ValueError(f"client group: think time must be >= 0, got {self.think_s}")
        if self.think_s and not self.closed:
            raise ValueError("client group: a think time needs a closed loop (every request ready at once)")
        if not self.ramp_s >= 0 or (self.ramp_s and not self.closed):
            raise ValueError(f"client group: a ramp-up needs a closed loop and >= 0 seconds, got {self.ramp_s}")


def clients_of(spec: WorkloadSpec, num_requests: int) -> Optional[ClientGroup]:
    """The workload's clients over its ``num_requests`` requests: a closed loop
    (``arrival.process: closed``), a cap (``max_concurrency``), or None (open loop, no cap).
    A cap at or above a closed loop's concurrency changes nothing (the config allows no less)."""
    a = spec.arrival
    if a.process == "closed":
        assert a.concurrency is not None  # parse_workload requires it
        return ClientGroup(0, num_requests, a.concurrency, a.think_time_s, closed=True,
                           ramp_s=a.ramp_up_s)
    if spec.max_concurrency is not None:
        return ClientGroup(0, num_requests, spec.max_concurrency)
    return None


__all__ = ["ClientGroup", "clients_of"]
