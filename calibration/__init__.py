"""Calibration: measure the real engine, fit the simulator's step-cost model, check the fit.

The path, in tree order: ``profiler`` (drive ``runtime`` over a grid of batch shapes; its step
trace is the data) -> ``fit`` (weighted non-negative least squares over ``features`` of each
``StepShape``, error on held-out steps) -> the ``kvplan-profile/1`` file, which the simulator
reads and prices steps with (``sim.pricing.profile_file``, ``sim.pricing.profile``: pricing is
the simulator's layer) -> ``validate`` (one workload through the runtime and the simulator,
errors side by side in ``validation.json``).

Only ``profiler`` and ``validate`` import torch (through ``runtime``), and only when called;
the rest is NumPy/SciPy, so the simulator's light core can load a profile.
"""

from sim.pricing.profile import ProfileCostModel
from sim.pricing.profile_file import FORMAT, Profile, ProfileError, load_profile

__all__ = ["FORMAT", "Profile", "ProfileCostModel", "ProfileError", "load_profile"]
