"""Step pricing: what a scheduler step costs, behind one interface (``StepPricer``).

Sources, each registered under a kind for ``make_pricer``:

- ``roofline`` (``RooflineCostModel``): datasheet peaks x efficiencies fitted per GPU
  (``sim.pricing.efficiency``); any GPU, model, dtype and parallelism (``docs/cost_model.md``).
- ``operator_tables`` (``OperatorTableCostModel``): kernel timings measured under vLLM on
  A100, H100, H200 and L40S (AIConfigurator's tables), composed into a step with vLLM V1's
  CUDA graphs, launch gaps and async scheduling; the default where tables are found.
- ``profile`` (``ProfileCostModel``): a calibration profile, a linear model of step features
  fitted to a real engine on one machine (``docs/calibration.md``); it records that machine
  (``machine``) and warns when used on a different one.

The simulator calls ``price`` per step (alias ``step_time``) and ``price_many`` for many.
No torch here: this is the simulator's light core.
"""

from sim.pricing.base import (
    PRICERS, SHAPE_FIELDS, ShapeColumns, StepPricer, make_pricer, register_pricer,
)
from sim.pricing.machine import machine_fingerprint, machine_mismatch
from sim.pricing.profile import ProfileCostModel
from sim.pricing.profile_file import FORMAT, Profile, ProfileError, load_profile
from sim.pricing.roofline import A100_EFFICIENCY, BREAKDOWN_KEYS, Efficiency, RooflineCostModel
from sim.pricing.operator_tables import OperatorTableCostModel, TablesNotCovering

__all__ = [
    "A100_EFFICIENCY", "BREAKDOWN_KEYS", "Efficiency", "FORMAT", "OperatorTableCostModel",
    "PRICERS", "Profile", "TablesNotCovering",
    "ProfileCostModel", "ProfileError", "RooflineCostModel", "SHAPE_FIELDS", "ShapeColumns",
    "StepPricer", "load_profile", "machine_fingerprint", "machine_mismatch", "make_pricer",
    "register_pricer",
]
