"""Autoscaling policy: how many replicas a fleet should have, from what it observes.

Pure policy (no simpy): ``sim.autoscale`` replays it over a simulated day, and a real
controller could call the same ``decide``. The rule is the Kubernetes Horizontal Pod
Autoscaler's, on a Knative-style per-replica target (docs/cluster.md, Autoscaling):

- **metric**: ``concurrency`` (outstanding requests per ready replica: waiting + running, KServe
  / Knative's ``autoscaling.knative.dev/target``) or ``queue`` (waiting requests per ready
  replica, KEDA's queue-length trigger);
- **raw desired** = ``ceil(ready x observed / target)`` = ``ceil(total / target)``, kept at the
  current count while ``|observed / target - 1| <= tolerance`` (HPA's 10% dead band);
- **scale up** at once (HPA's default scale-up stabilisation is 0), clamped to ``max_replicas``;
  the new replicas take ``scale_up_delay_s`` (the model load time, ``model_load_time_s``) before
  they serve;
- **scale down** only to the highest raw desired of the last ``scale_down_stabilization_s``
  (HPA's stabilisation window, 300 s by default): a dip shorter than the window never removes a
  replica, so a steady load does not flap; clamped to ``min_replicas``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

METRICS = ("concurrency", "queue")

#: Bytes per second a replica reads its weights at when it starts (each GPU its own shard, in
#: parallel): 2 GB/s, a local NVMe read of safetensors into GPU memory with some overhead. A
#: network volume or object store is slower (0.2-1 GB/s); a page-cached file faster.
DEFAULT_LOAD_BANDWIDTH = 2e9
#: Seconds a replica takes to start besides reading weights: container and Python start, CUDA
#: context, KV-cache profiling and CUDA-graph capture, the first health check (vLLM's cold start
#: of a small model on a warm node is about half a minute).
DEFAULT_STARTUP_S = 30.0
#: HPA's defaults: tolerance 0.1, scale-down stabilisation 300 s, a 15 s sync period.
DEFAULT_TOLERANCE = 0.1
DEFAULT_STABILIZATION_S = 300.0
DEFAULT_INTERVAL_S = 15.0


def model_load_time_s(weights_bytes_per_gpu: float, bandwidth: float = DEFAULT_LOAD_BANDWIDTH,
                      startup_s: float = DEFAULT_STARTUP_S) -> float:
    """Seconds from a replica's start to its first request: its GPU's share of the weights over
    ``bandwidth`` (bytes/s) plus a fixed ``startup_s``."""
    if not bandwidth > 0:
        raise ValueError(f"load bandwidth must be > 0, got {bandwidth!r}")
    if not startup_s >= 0:
        raise ValueError(f"startup seconds must be >= 0, got {startup_s!r}")
    return weights_bytes_per_gpu / bandwidth + startup_s


@dataclass(frozen=True)
class AutoscalerConfig:
    """The policy's settings (field names are the CLI's options, dashes for underscores)."""

    metric: str = "concurrency"
    #: Per-ready-replica value of ``metric`` the policy aims at.
    target: float = 8.0
    min_replicas: int = 1
    max_replicas: int = 8
    #: Seconds from a scale-up decision to the new replica serving (the model load time).
    scale_up_delay_s: float = 60.0
    scale_down_stabilization_s: float = DEFAULT_STABILIZATION_S
    tolerance: float = DEFAULT_TOLERANCE
    #: Seconds between decisions.
    interval_s: float = DEFAULT_INTERVAL_S

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric: must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if not self.target > 0:
            raise ValueError(f"target: must be > 0, got {self.target!r}")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"min_replicas / max_replicas: need 1 <= min <= max, got "
                             f"{self.min_replicas} / {self.max_replicas}")
        for name, value in (("scale_up_delay_s", self.scale_up_delay_s),
                            ("scale_down_stabilization_s", self.scale_down_stabilization_s),
                            ("tolerance", self.tolerance)):
            if not value >= 0:
                raise ValueError(f"{name}: must be >= 0, got {value!r}")
        if not self.interval_s > 0:
            raise ValueError(f"interval_s: must be > 0, got {self.interval_s!r}")


class Autoscaler:
    """Decides the desired replica count every interval (``decide``); keeps the raw
    recommendations of the stabilisation window, nothing else."""

    def __init__(self, config: AutoscalerConfig) -> None:
        self.config = config
        self._history: deque[tuple[float, int]] = deque()

    def raw_desired(self, ready: int, current: int, total: float) -> int:
        """HPA's formula: ``ceil(ready x (total / ready) / target)``, the current count inside
        the tolerance band (or with no ready replica to measure)."""
        cfg = self.config
        if ready <= 0:
            return current
        ratio = (total / ready) / cfg.target
        if abs(ratio - 1.0) <= cfg.tolerance + 1e-9:
            return current
        return math.ceil(ready * ratio - 1e-9)

    def decide(self, now: float, ready: int, starting: int, total: float) -> int:
        """Desired replicas (ready + starting) at ``now``, given ``ready`` serving replicas,
        ``starting`` ones still loading and ``total``, the metric summed over the ready ones."""
        cfg = self.config
        current = ready + starting
        raw = min(max(self.raw_desired(ready, current, total), cfg.min_replicas), cfg.max_replicas)
        hist = self._history
        hist.append((now, raw))
        while hist and hist[0][0] < now - cfg.scale_down_stabilization_s:
            hist.popleft()
        if raw >= current:
            return raw
        # Scale down no further than the highest recommendation of the window.
        return min(current, max(r for _, r in hist))
