"""Serving policies shared by the simulator and the real runtime.

Pure Python: nothing here imports simpy or torch. ``runtime/`` imports these very objects, so
the simulator's predictions and the real engine's behaviour come from one source of truth.
"""

from sim.policies.request import Request, RequestState
from sim.policies.step import ScheduledRequest, StepPlan, StepResult, StepShape

__all__ = [
    "Request",
    "RequestState",
    "ScheduledRequest",
    "StepPlan",
    "StepResult",
    "StepShape",
]
