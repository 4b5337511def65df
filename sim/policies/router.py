"""Routers: which replica serves an arriving request.

Pure policy (no simpy): the simulator and a multi-engine runtime use the same objects. Each
replica exposes ``num_unfinished`` (outstanding requests: waiting + running + swapped),
``kv_free_fraction`` and ``cached_prefix_tokens(req)`` (a read-only probe of its prefix cache).

Policies (docs/cluster.md has the formulas and why):

- ``round_robin``: replicas in turn.
- ``least_outstanding``: fewest outstanding requests.
- ``least_kv``: most free KV memory.
- ``prefix_aware``: llm-d's weighted scorers (the Gateway API Inference Extension's endpoint
  picker): for every replica, ``w_prefix * prefix + w_load * load + w_kv * kv``, each score in
  [0, 1], the highest total wins:

  - prefix = cached prompt tokens there / prompt tokens (llm-d's prefix-cache scorer: matched
    blocks over the request's blocks);
  - load = (max_q - q) / (max_q - min_q) over the replicas' outstanding requests q, 1 when all
    are equal (llm-d's queue scorer, min-max normalised);
  - kv = free KV fraction (llm-d's kv-cache-utilization scorer, 1 - usage).

  Default weights 3 / 2 / 2: llm-d's inference-scheduling profile (prefix-cache-scorer 3,
  queue-scorer 2, kv-cache-utilization-scorer 2), which lets a full prefix match (worth 3)
  outweigh the widest load gap (2) but not load and memory pressure together (4).

Session affinity (any policy): every turn of a session goes to the replica that served its
previous turn, unless that replica is overloaded by a clear margin, SGLang router's
``cache_aware`` imbalance test: ``q_sticky - q_min > abs_threshold`` **and**
``q_sticky > rel_threshold * q_min`` (defaults 64 and 1.5, SGLang's). Then the policy picks,
and the session moves there.

Every choice is deterministic: ties go to the lowest replica index.
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence

from sim.policies.request import Request

ROUTERS = ("round_robin", "least_outstanding", "least_kv", "prefix_aware")

#: llm-d's inference-scheduling scorer weights (prefix-cache 3, queue 2, kv-cache-utilization 2).
DEFAULT_PREFIX_WEIGHT = 3.0
DEFAULT_LOAD_WEIGHT = 2.0
DEFAULT_KV_WEIGHT = 2.0
#: SGLang router's cache_aware imbalance thresholds (--balance-abs-threshold, --balance-rel-threshold).
DEFAULT_AFFINITY_ABS_THRESHOLD = 64
DEFAULT_AFFINITY_REL_THRESHOLD = 1.5


class Routable(Protocol):
    @property
    def num_unfinished(self) -> int: ...

    @property
    def kv_free_fraction(self) -> float: ...

    def cached_prefix_tokens(self, req: Request) -> int:
        """Leading prompt tokens of ``req`` this replica's prefix cache holds (read-only)."""
        ...


class Router:
    """Picks a replica per request. ``policy`` one of ``ROUTERS``; the weights are
    ``prefix_aware``'s (ignored by the others); ``session_affinity`` keeps a session's turns on
    one replica (``route(..., session=...)``), with the two thresholds deciding when that
    replica is too loaded to keep."""

    def __init__(self, policy: str = "round_robin", *, prefix_weight: float = DEFAULT_PREFIX_WEIGHT,
                 load_weight: float = DEFAULT_LOAD_WEIGHT, kv_weight: float = DEFAULT_KV_WEIGHT,
                 session_affinity: bool = False,
                 affinity_abs_threshold: int = DEFAULT_AFFINITY_ABS_THRESHOLD,
                 affinity_rel_threshold: float = DEFAULT_AFFINITY_REL_THRESHOLD) -> None:
        if policy not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {policy!r}")
        for name, w in (("prefix_weight", prefix_weight), ("load_weight", load_weight),
                        ("kv_weight", kv_weight)):
            if not w >= 0:
                raise ValueError(f"router {name} must be >= 0, got {w!r}")
        if affinity_abs_threshold < 0 or not affinity_rel_threshold >= 1:
            raise ValueError("session affinity thresholds: abs must be >= 0 and rel >= 1")
        self.policy = policy
        self.prefix_weight = prefix_weight
        self.load_weight = load_weight
        self.kv_weight = kv_weight
        self.session_affinity = session_affinity
        self.affinity_abs_threshold = affinity_abs_threshold
        self.affinity_rel_threshold = affinity_rel_threshold
        self._next = 0
        #: session -> replica of its latest turn (session affinity only).
        self._session_replica: dict[str, int] = {}
        #: Turns sent to their session's replica / turns of a known session sent elsewhere
        #: because it was overloaded.
        self.num_affinity_hits = 0
        self.num_affinity_fallbacks = 0

    def route(self, req: Request, replicas: Sequence[Routable],
              session: Optional[str] = None) -> int:
        """Index of the replica that gets ``req`` (``session``: the conversation it belongs
        to, if any). Ties go to the lowest index (deterministic)."""
        if len(replicas) == 1:
            return 0
        if session is None or not self.session_affinity:
            return self._pick(req, replicas)
        sticky = self._session_replica.get(session)
        if sticky is not None and sticky < len(replicas):
            if not self.overloaded(sticky, replicas):
                self.num_affinity_hits += 1
                return sticky
            self.num_affinity_fallbacks += 1
        i = self._pick(req, replicas)
        self._session_replica[session] = i
        return i

    def overloaded(self, i: int, replicas: Sequence[Routable]) -> bool:
        """Whether replica ``i`` carries clearly more than the least loaded one (SGLang's test:
        both the absolute and the relative gap exceed their thresholds)."""
        q = replicas[i].num_unfinished
        q_min = min(r.num_unfinished for r in replicas)
        return (q - q_min > self.affinity_abs_threshold
                and q > self.affinity_rel_threshold * q_min)

    def _pick(self, req: Request, replicas: Sequence[Routable]) -> int:
        n = len(replicas)
        if self.policy == "round_robin":
            i = self._next % n
            self._next += 1
            return i
        if self.policy == "least_outstanding":
            return min(range(n), key=lambda i: (replicas[i].num_unfinished, i))
        if self.policy == "least_kv":
            return max(range(n), key=lambda i: (replicas[i].kv_free_fraction, -i))
        scores = self.scores(req, replicas)
        return max(range(n), key=lambda i: (scores[i], -i))

    def scores(self, req: Request, replicas: Sequence[Routable]) -> list[float]:
        """``prefix_aware``'s total score of every replica (the highest wins)."""
        queues = [r.num_unfinished for r in replicas]
        q_min, q_max = min(queues), max(queues)
        span = q_max - q_min
        prompt = max(req.prompt_len, 1)
        out: list[float] = []
        for r, q in zip(replicas, queues):
            prefix = r.cached_prefix_tokens(req) / prompt if self.prefix_weight else 0.0
            load = 1.0 if span == 0 else (q_max - q) / span
            out.append(self.prefix_weight * prefix + self.load_weight * load
                       + self.kv_weight * r.kv_free_fraction)
        return out
