"""kvplan's public Python API: the README's question from Python.

    from kvplan import plan, simulate, capacity

    result = simulate(overrides=["hardware=h100-sxm"])          # one scenario (sim.api.simulate)
    cap = capacity(None, parse_slo("ttft_p99_ms=500"), target_rate=50)   # analysis.capacity
    most = capacity_in_clients(None, parse_slo("ttft_p99_ms=500")).planning_clients  # closed loop
    best = plan(None, parse_slo("ttft_p99_ms=500,tpot_p99_ms=50"), 100,
                hardware=["h100-sxm", "h200"]).best            # analysis.plan

The names are loaded on first use, so ``import kvplan`` stays as light as the simulator's core
(no torch, no plotting). The command line lives in ``kvplan.cli``; the packages under it
(``sim``, ``runtime``, ``kernels``, ``calibration``, ``dashboards``) keep their own names.
"""

from __future__ import annotations

from typing import Any

#: Public name -> (module, attribute).
_EXPORTS = {
    "simulate": ("sim.api", "simulate"),
    "capacity": ("analysis.capacity", "find_capacity"),
    "capacity_in_clients": ("analysis.client_capacity", "find_client_capacity"),
    "plan": ("analysis.plan", "plan"),
    "parse_slo": ("analysis.slo", "parse_slo"),
    "SLO": ("analysis.slo", "SLO"),
    "resolve_deployment": ("sim.api", "resolve_deployment"),
    "KvplanError": ("sim.errors", "KvplanError"),
    "ConfigError": ("sim.errors", "ConfigError"),
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from sim import __version__

        return __version__
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'kvplan' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
