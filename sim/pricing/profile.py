"""The calibration-profile step pricer: a step's price from a profile fitted to a real engine.

Why: on the machine it was measured on, a profile prices that engine's steps far better than
a roofline can (it includes the CPU overheads and kernels the datasheets do not describe). The
price is linear in the step's features (``sim.pricing.features``), evaluated by one function on
a ``StepShape`` and on columns alike, so scalar and vectorised prices agree bit for bit. Steps
with no work cost 0, like the roofline's. Used elsewhere it is a guess: ``warnings`` says when
the machine here differs from the profile's (``sim.pricing.machine``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

import numpy as np

from sim.policies.step import StepShape
from sim.pricing import features as feat
from sim.pricing.base import ShapeColumns, StepPricer, register_pricer
from sim.pricing.machine import machine_fingerprint, machine_mismatch
from sim.pricing.profile_file import Profile, ProfileError, load_profile


@register_pricer
class ProfileCostModel(StepPricer):
    """Step time = sum over the profile's features of coefficient x feature value."""

    kind = "profile"

    def __init__(self, profile: Union[Profile, str, Path]) -> None:
        if not isinstance(profile, Profile):
            profile = load_profile(profile)
        if profile.base is not None:
            raise ProfileError(f"{profile.path or 'profile'}: fitted to real runs over the {profile.base} "
                               f"pricer (no coefficients): use it as a scenario's cost_model.profile")
        self.profile = profile
        self.features = tuple(profile.features)
        self.knee = profile.gemm_knee
        self.tables = profile.gemm_tables
        self._coefs = tuple(profile.coefficients[f] for f in self.features)

    @property
    def provenance(self) -> dict:
        """What ``kvplan report`` prints as the cost model's origin."""
        p = self.profile
        return {"calibration profile": p.path or "(in memory)", "hardware": p.hardware,
                "model": p.model, "dtype": p.dtype, "created": p.created,
                "held-out MAPE": f"{100 * p.fit['heldout_mape']:.1f}%",
                "held-out p90 error": f"{100 * p.fit['heldout_p90_ape']:.1f}%"}

    def price(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape`` (0 for an empty step)."""
        return feat.linear_time(shape, self.features, self._coefs, self.knee, max, self.tables)

    step_time = price

    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        """Vectorised ``price`` (see ``StepPricer.price_columns``); bit-identical to it."""
        sc = ShapeColumns(columns, "step_times")
        return feat.linear_time(sc, self.features, self._coefs, self.knee, np.maximum, self.tables)

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per feature term; they sum to ``price(shape)``."""
        if shape.is_empty:
            return dict.fromkeys(self.features, 0.0)
        vals = feat.feature_values(shape, self.features, self.knee, max, self.tables)
        return {f: c * v for f, c, v in zip(self.features, self._coefs, vals)}

    def describe(self) -> str:
        return f"profile {self.profile.path or '(in memory)'}"

    def warnings(self, current: Optional[dict] = None) -> list[str]:
        """One line when the profile's machine is unknown or differs from this one (or from
        ``current``, a ``machine_fingerprint``); the profile may then be far off here."""
        p = self.profile
        name = f"profile {p.path or '(in memory)'}"
        if p.machine is None:
            return [f"{name} does not record its machine; its step times hold only on the "
                    f"machine it was measured on ({p.hardware})"]
        if current is None:
            current = machine_fingerprint(with_gpus=p.device != "cpu")
        diffs = machine_mismatch(p.machine, current, device=p.device)
        if not diffs:
            return []
        return [f"{name} was measured on a different machine ({'; '.join(diffs)}); its step "
                f"times may be far off here (run kvplan calibrate on this machine)"]

    def __repr__(self) -> str:
        p = self.profile
        return f"ProfileCostModel({p.model}, {p.dtype}, {p.hardware}, {p.path or 'in memory'})"
