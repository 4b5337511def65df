"""Scenario configuration files: YAML plus ``--set key=value`` overrides, merged over the
defaults.

The dotted key names are a contract (tests outside the repo use them). This module loads and
merges; ``sim.scenario.Scenario`` holds the typed result and does every check, raising a
``ConfigError`` that names the key and the allowed values, so the CLI can print one line.
``build_config`` returns the checked mapping (what most callers pass around and what
``config.yaml`` holds); ``build_scenario`` returns the typed ``Scenario``.

The enumerations below are re-exported from the modules that define them (``sim.scenario``,
the policies, ``sim.catalog.dtypes``) for callers that imported them from here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional, Union

import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

from sim.catalog.dtypes import DTYPES, KV_DTYPES, WEIGHT_QUANT
from sim.errors import ConfigError
from sim.policies.kv import ALLOCATORS
from sim.policies.router import ROUTERS
from sim.policies.schedulers import QUEUE_POLICIES
from sim.scenario import ACCEPTANCE, DEFAULTS, POLICIES, PREEMPTIONS, RESERVES, Scenario

__all__ = [
    "ACCEPTANCE", "ALLOCATORS", "DEFAULTS", "DTYPES", "KV_DTYPES", "POLICIES", "PREEMPTIONS",
    "QUEUE_POLICIES", "RESERVES", "ROUTERS", "WEIGHT_QUANT", "Scenario", "build_config",
    "build_scenario", "combined_overrides", "deep_merge", "dump", "get", "load_yaml", "merge_workload", "nest",
    "parse_override", "validate",
]

# Leaves whose value may be a dict/list (not descended into by the key check).
_OPAQUE = {"workload", "speculative.acceptance_table", "speculative.draft_availability"}


def deep_merge(base: dict, override: dict, prefix: str = "") -> dict:
    """Merge ``override`` into a copy of ``base``; unknown keys are an error."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        dotted = f"{prefix}{key}"
        if key not in base:
            allowed = ", ".join(sorted(base))
            raise ConfigError(f"unknown config key '{dotted}' (allowed here: {allowed})")
        if dotted in _OPAQUE:
            if dotted == "workload":
                out[key] = merge_workload(base[key], value)
            else:
                out[key] = value
        elif isinstance(base[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{dotted}: expected a mapping of keys, got {value!r}")
            out[key] = deep_merge(base[key], value, dotted + ".")
        else:
            out[key] = value
    return out


def merge_workload(base: dict, override: Any) -> dict:
    """Workload keys are validated by ``sim.workload``; here they are only merged. A trace
    replaces the default synthetic lengths and arrivals, and a new arrival process replaces the
    default arrival settings, so defaults never leak into a different kind of workload."""
    if not isinstance(override, dict):
        raise ConfigError("workload: expected a mapping")
    out = copy.deepcopy(base)
    if override.get("trace"):
        for k in ("input_len", "output_len", "arrival", "num_requests"):
            out.pop(k, None)
    for k, v in override.items():
        cur = out.get(k)
        if isinstance(v, dict) and isinstance(cur, dict):
            if k == "arrival" and "process" in v and v["process"] != cur.get("process"):
                out[k] = dict(v)
            elif k in ("input_len", "output_len") and "dist" in v and v["dist"] != cur.get("dist"):
                out[k] = dict(v)
            else:
                out[k] = {**cur, **v}
        else:
            out[k] = v
    return out


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (['a','b','c'], value) with the value parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"--set {item!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def nest(path: list[str], value: Any) -> dict:
    out: Any = value
    for part in reversed(path):
        out = {part: out}
    return out


def load_yaml(path: Union[str, Path]) -> dict:
    """A config file's top-level mapping; any problem is one ``ConfigError`` naming the file
    (and the line, for a YAML syntax error)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p}: is a directory, expected a file")
    if not p.is_file():
        raise ConfigError(f"config file {p}: not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {p}: not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(f"config file {p}: {exc.strerror or exc}") from None
    if "\x00" in text:
        raise ConfigError(f"config file {p}: a binary file, expected YAML text")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}: {problem}") from None
    if data is None:  # an empty (or truncated-to-nothing) file is a mistake, not "use defaults"
        raise ConfigError(f"config file {p}: empty, no config keys (omit the file for the defaults)")
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of config keys")
    return data


def combined_overrides(items: list[str]) -> dict:
    """All ``--set`` items as one nested mapping (a later item wins on the same key), applied to
    the config at once: the order of the flags does not matter. Applied one by one, ``--set
    workload.arrival.concurrency=8 --set workload.arrival.process=closed`` lost the clients,
    because a new arrival process replaces the arrival section (``merge_workload``)."""
    out: dict = {}
    for item in items:
        keys, value = parse_override(item)
        node = out
        for part in keys[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[keys[-1]] = value
    return out


def merged_config(path: Optional[Union[str, Path, dict]] = None,
                  overrides: Optional[list[str]] = None, seed: Optional[int] = None) -> dict:
    """Defaults <- YAML file (or dict) <- ``--set`` overrides <- ``--seed``; not yet checked."""
    cfg = copy.deepcopy(DEFAULTS)
    if path is not None:
        data = path if isinstance(path, dict) else load_yaml(path)
        cfg = deep_merge(cfg, data)
    if overrides:
        cfg = deep_merge(cfg, combined_overrides(overrides))
    if seed is not None:
        cfg["seed"] = seed
    return cfg


def build_scenario(path: Optional[Union[str, Path, dict]] = None,
                   overrides: Optional[list[str]] = None, seed: Optional[int] = None) -> Scenario:
    """The typed, checked scenario of ``build_config``'s arguments."""
    return Scenario.from_dict(merged_config(path, overrides, seed))


def build_config(path: Optional[Union[str, Path, dict]] = None, overrides: Optional[list[str]] = None,
                 seed: Optional[int] = None) -> dict:
    """Defaults <- YAML file (or dict) <- ``--set`` overrides <- ``--seed``; then checked (by
    ``Scenario.from_dict``). Returns the mapping; ``build_scenario`` returns the Scenario."""
    cfg = merged_config(path, overrides, seed)
    validate(cfg)
    return cfg


def get(cfg: dict, dotted: str) -> Any:
    """The value at a dotted key of a config mapping."""
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def validate(cfg: dict) -> Scenario:
    """Check a whole config mapping; returns its Scenario (every check lives there)."""
    return Scenario.from_dict(cfg)


def dump(cfg: Union[dict, Scenario]) -> str:
    """The YAML text of a config mapping or Scenario (``config.yaml`` of a result)."""
    if isinstance(cfg, Scenario):
        cfg = cfg.to_dict()
    return yaml.safe_dump(cfg, sort_keys=False)
