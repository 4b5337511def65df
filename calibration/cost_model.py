"""``ProfileCostModel``: the simulator's step price from a calibration profile.

It implements what ``sim.engine`` and ``sim.api`` call on a cost model (``step_time``), plus the
roofline's vectorised ``step_times`` and ``decode_window_times``; all three use the same float
operations in the same order, so a bulk decode window prices each step exactly as the
step-by-step path does. Steps with no work cost 0, like the roofline's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import numpy as np

from calibration import features as feat
from calibration.profile import Profile, load_profile
from sim.policies.step import StepShape


class ProfileCostModel:
    """Step time = sum over the profile's features of coefficient x feature value."""

    def __init__(self, profile: Union[Profile, str, Path]) -> None:
        if not isinstance(profile, Profile):
            profile = load_profile(profile)
        self.profile = profile
        self.features = tuple(profile.features)
        self.knee = profile.gemm_knee
        self._coefs = tuple(profile.coefficients[f] for f in self.features)

    @property
    def provenance(self) -> dict:
        """What ``kvplan report`` prints as the cost model's origin."""
        p = self.profile
        return {"calibration profile": p.path or "(in memory)", "hardware": p.hardware,
                "model": p.model, "dtype": p.dtype, "created": p.created,
                "held-out MAPE": f"{100 * p.fit['heldout_mape']:.1f}%",
                "held-out p90 error": f"{100 * p.fit['heldout_p90_ape']:.1f}%"}

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape`` (0 for an empty step)."""
        if shape.is_empty:
            return 0.0
        t = 0.0
        for c, v in zip(self._coefs, feat.values(shape, self.features, self.knee)):
            t += c * v
        return t

    def step_times(self, **shape_columns) -> np.ndarray:
        """Vectorised ``step_time``: keyword arrays (or scalars) named as StepShape fields."""
        unknown = set(shape_columns) - set(feat.SHAPE_FIELDS)
        if unknown:
            raise TypeError(f"step_times: unknown StepShape field {sorted(unknown)[0]!r}")
        cols = feat.columns(shape_columns, self.features, self.knee)
        t = np.zeros(np.broadcast(*cols).shape)
        for c, col in zip(self._coefs, cols):
            t = t + c * col
        return np.where(feat.is_busy(shape_columns), t, 0.0)

    def decode_window_times(self, shape: StepShape, num_steps: int,
                            context_growth: Optional[int] = None) -> np.ndarray:
        """Seconds of ``num_steps`` consecutive steps of ``shape`` whose decode context grows by
        ``context_growth`` tokens a step (default one per decode sequence); element i equals
        ``step_time`` of the i-th step exactly."""
        growth = shape.num_decode_seqs if context_growth is None else context_growth
        cols = shape.to_dict()
        cols["decode_context_tokens"] = shape.decode_context_tokens + growth * np.arange(num_steps, dtype=float)
        return self.step_times(**cols)

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per feature term; they sum to ``step_time(shape)``."""
        if shape.is_empty:
            return dict.fromkeys(self.features, 0.0)
        vals = feat.values(shape, self.features, self.knee)
        return {f: c * v for f, c, v in zip(self.features, self._coefs, vals)}

    def __repr__(self) -> str:
        p = self.profile
        return f"ProfileCostModel({p.model}, {p.dtype}, {p.hardware}, {p.path or 'in memory'})"
