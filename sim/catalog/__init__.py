"""Hardware and model catalogs: the public numbers (datasheets, HF configs) the roofline cost
model and the memory plan are built from. Slugs are part of the config contract."""

from sim.catalog.hardware import HARDWARE_NAMES, HardwareSpec, get_hardware, list_hardware
from sim.catalog.models import MODEL_NAMES, ModelSpec, get_model, list_models, load_hf_config

__all__ = [
    "HARDWARE_NAMES",
    "HardwareSpec",
    "get_hardware",
    "list_hardware",
    "MODEL_NAMES",
    "ModelSpec",
    "get_model",
    "list_models",
    "load_hf_config",
]
