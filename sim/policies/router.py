"""Routers: which replica serves an arriving request.

Pure policy (no simpy): the simulator and a multi-engine runtime use the same objects. Each
replica exposes ``num_unfinished`` and ``kv_free_fraction`` for load-aware routing.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from sim.policies.request import Request

ROUTERS = ("round_robin", "least_outstanding", "least_kv")


class Routable(Protocol):
    @property
    def num_unfinished(self) -> int: ...

    @property
    def kv_free_fraction(self) -> float: ...


class Router:
    def __init__(self, policy: str = "round_robin") -> None:
        if policy not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {policy!r}")
        self.policy = policy
        self._next = 0

    def route(self, req: Request, replicas: Sequence[Routable]) -> int:
        """Index of the replica that gets ``req``. Ties go to the lowest index (deterministic)."""
        if len(replicas) == 1:
            return 0
        if self.policy == "round_robin":
            i = self._next % len(replicas)
            self._next += 1
            return i
        if self.policy == "least_outstanding":
            return min(range(len(replicas)), key=lambda i: (replicas[i].num_unfinished, i))
        return max(range(len(replicas)), key=lambda i: (replicas[i].kv_free_fraction, -i))
