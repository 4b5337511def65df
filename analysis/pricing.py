"""$/GPU-hour table and the cost of a million output tokens.

Why a table the user overrides: list prices change monthly and negotiated prices differ by an
order of magnitude, so the catalog's indicative on-demand prices are only a default. Overrides
are ``--price a100-80gb=1.20`` (any catalog name or alias) or a YAML/JSON file mapping names to
$/GPU-hour.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional, Union, cast

import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

from sim.catalog.hardware import get_hardware, list_hardware
from sim.errors import ConfigError

PriceSpec = Union[None, dict, str, Path, Iterable[str]]


def default_prices() -> dict[str, float]:
    """The hardware catalog's indicative on-demand $/GPU-hour."""
    return {hw.name: float(hw.usd_per_gpu_hour) for hw in list_hardware()}


def price_table(spec: PriceSpec = None) -> dict[str, float]:
    """Catalog defaults overridden by ``spec``: a mapping, a YAML/JSON file path, or
    ``name=price`` strings. Names are resolved through the catalog (aliases allowed)."""
    table = default_prices()
    for name, price in _items(spec):
        try:
            value = float(price)
        except (TypeError, ValueError):
            raise ConfigError(f"--price {name}: expected $/GPU-hour as a number, got {price!r}") from None
        if not value >= 0:
            raise ConfigError(f"--price {name}: must be >= 0, got {value:g}")
        table[_resolve(name)] = value
    return table


def usd_per_gpu_hour(hardware: str, table: Optional[dict[str, float]] = None) -> float:
    table = table if table is not None else default_prices()
    name = _resolve(hardware)
    if name not in table:
        raise ConfigError(f"--price: no $/GPU-hour for hardware {name!r}; pass --price {name}=...")
    return table[name]


def usd_per_million_output_tokens(output_tokens_per_s_per_gpu: float, usd_gpu_hour: float) -> Optional[float]:
    """What one GPU-hour costs divided by the output tokens it produces in that hour."""
    if not output_tokens_per_s_per_gpu or output_tokens_per_s_per_gpu <= 0:
        return None
    return usd_gpu_hour / (output_tokens_per_s_per_gpu * 3600.0) * 1e6


def _items(spec: PriceSpec) -> list[tuple[str, Any]]:  # prices as given: price_table checks them
    if spec is None:
        return []
    if isinstance(spec, dict):
        return list(spec.items())
    if isinstance(spec, (str, Path)) and "=" not in str(spec):
        return list(_load(Path(spec)).items())
    out: list[tuple[str, Any]] = []
    for item in [spec] if isinstance(spec, str) else cast(Iterable[str], spec):  # strings from here on
        if "=" not in item and Path(item).suffix in (".yaml", ".yml", ".json"):
            out.extend(_load(Path(item)).items())
            continue
        for part in filter(None, (p.strip() for p in item.split(","))):
            if "=" not in part:
                raise ConfigError(f"--price {part!r}: expected hardware=usd_per_gpu_hour, e.g. a100-80gb=1.8")
            name, raw = part.split("=", 1)
            out.append((name.strip(), raw.strip()))
    return out


def _load(path: Path) -> dict:
    if not path.is_file():
        raise ConfigError(f"--price {path}: file not found")
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (ValueError, yaml.YAMLError):
        raise ConfigError(f"--price {path}: not valid YAML/JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--price {path}: expected a mapping of hardware name to $/GPU-hour")
    return data


def _resolve(name: str) -> str:
    try:
        return get_hardware(str(name)).name
    except ConfigError as exc:
        raise ConfigError(f"--price: {exc}") from None
