"""One JSON line per engine step: the step's shape, its measured seconds, who was in it.

This is calibration's input: ``calibration/`` fits the simulator's cost model to
(``StepShape`` fields -> ``seconds``) pairs. ``seconds`` times the executor only (input
preparation, forward pass, sampling; synchronised on CUDA), the part the simulator's cost model
predicts; ``schedule_seconds`` is the policy's own CPU time, recorded apart.
"""

from __future__ import annotations

import json
from typing import IO, Any, Optional

from sim.policies import StepPlan


class StepTracer:
    """Writes to ``path`` (JSONL) when given, and keeps the records in ``records`` when ``keep``."""

    def __init__(self, path: Optional[str] = None, keep: bool = True) -> None:
        self.path = path
        self.keep = keep
        self.records: list[dict[str, Any]] = []
        self._file: Optional[IO[str]] = open(path, "w", encoding="utf-8", buffering=1) if path else None
        self._step = 0

    def record(self, plan: StepPlan, start: float, seconds: float, schedule_seconds: float,
               free_blocks: int, num_waiting: int, num_running: int) -> dict[str, Any]:
        shape = plan.shape
        rec: dict[str, Any] = {
            "step": self._step,
            "start": start,
            "seconds": seconds,
            "schedule_seconds": schedule_seconds,
            **shape.to_dict(),
            "batch_size": shape.batch_size,
            "num_tokens": shape.num_tokens,
            "num_preempted": len(plan.preempted),
            "free_kv_blocks": free_blocks,
            "num_waiting": num_waiting,
            "num_running": num_running,
            # [request id, new tokens, context before, is_prefill] per scheduled request
            "requests": [[s.request.request_id, s.num_new_tokens, s.context_before, s.is_prefill]
                         for s in plan.scheduled],
        }
        self._step += 1
        if self.keep:
            self.records.append(rec)
        if self._file is not None:
            self._file.write(json.dumps(rec) + "\n")
        return rec

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
