"""Scenario configuration: YAML files plus ``--set key=value`` overrides, validated up front.

The dotted key names are a contract (tests outside the repo use them). Every problem is raised as
a ``ConfigError`` naming the key and the allowed values, so the CLI can print one line.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from sim.errors import ConfigError

ALLOCATORS = ("paged", "contiguous")
RESERVES = ("max", "pow2", "oracle")
POLICIES = ("static", "orca", "vllm_v0", "chunked")
PREEMPTIONS = ("recompute", "swap")
QUEUE_POLICIES = ("fcfs", "priority")
DTYPES = ("float16", "bfloat16", "float32", "fp16", "bf16", "fp32")
KV_DTYPES = ("auto", "fp8", "int8")
WEIGHT_QUANT = ("none", "fp8", "int8", "int4")
ROUTERS = ("round_robin", "least_outstanding", "least_kv")
ACCEPTANCE = ("constant", "table")

#: The built-in default scenario (``kvplan simulate`` with no config file).
DEFAULTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "hardware": "a100-80gb",
    "dtype": "float16",
    "seed": 0,
    "kv_cache": {
        "allocator": "paged",
        "reserve": "max",
        "block_size": 16,
        "prefix_caching": False,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 4096,
        "dtype": "auto",
        "swap_space_gb": 4.0,
        # Exact KV pool in blocks per replica (vLLM's num_gpu_blocks_override), bypassing the
        # memory plan's count; validation sets it to the real engine's pool.
        "num_gpu_blocks": None,
    },
    "scheduler": {
        "policy": "chunked",
        "max_num_seqs": 256,
        "max_num_batched_tokens": None,
        "preemption": "recompute",
        "queue_policy": "fcfs",
    },
    "parallel": {
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "num_replicas": 1,
        "router": "round_robin",
    },
    "quantization": {"weights": "none"},
    # A calibration profile (kvplan calibrate) prices steps instead of the roofline when set.
    "cost_model": {"profile": None},
    "speculative": {
        "num_tokens": 0,
        "acceptance": "constant",
        "acceptance_rate": 0.7,
        "acceptance_table": None,
        "draft_cost_ratio": 0.05,
        # P(proposer has exactly m drafts), m = 0..num_tokens; None: always num_tokens (a draft model)
        "draft_availability": None,
    },
    "slo": {"ttft_ms": None, "tpot_ms": None},
    "workload": {
        "num_requests": 1000,
        # ShareGPT-like (vLLM paper means 161 in / 338 out; CVs measured on the ShareGPT table;
        # caps as vllm bench serve's ShareGPT filter, so prompt + output <= 2048).
        "arrival": {"process": "poisson", "rate": 8.0},
        "input_len": {"dist": "lognormal", "mean": 161, "cv": 0.9, "max": 1024},
        "output_len": {"dist": "lognormal", "mean": 338, "cv": 0.6, "max": 1024},
    },
}

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
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p}: not found")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of config keys")
    return data


def build_config(path: Optional[Union[str, Path, dict]] = None, overrides: Optional[list[str]] = None,
                 seed: Optional[int] = None) -> dict:
    """Defaults <- YAML file (or dict) <- ``--set`` overrides <- ``--seed``; then validated."""
    cfg = copy.deepcopy(DEFAULTS)
    if path is not None:
        data = path if isinstance(path, dict) else load_yaml(path)
        cfg = deep_merge(cfg, data)
    for item in overrides or []:
        keys, value = parse_override(item)
        cfg = deep_merge(cfg, nest(keys, value))
    if seed is not None:
        cfg["seed"] = seed
    validate(cfg)
    return cfg


def _choice(cfg: dict, dotted: str, allowed: tuple) -> None:
    value = get(cfg, dotted)
    if value not in allowed:
        raise ConfigError(f"{dotted}: {value!r} is not one of {', '.join(map(str, allowed))}")


def _int(cfg: dict, dotted: str, lo: int = 1, allow_none: bool = False) -> None:
    value = get(cfg, dotted)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{dotted}: expected an integer >= {lo}, got {value!r}")


def _float(cfg: dict, dotted: str, lo: float, hi: float, allow_none: bool = False,
           lo_open: bool = False) -> None:
    value = get(cfg, dotted)
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{dotted}: expected a number, got {value!r}")
    if value < lo or value > hi or (lo_open and value == lo):
        bound = f"({lo}, {hi}]" if lo_open else f"[{lo}, {hi}]"
        raise ConfigError(f"{dotted}: {value} is outside {bound}")


def _profile(cfg: dict, dotted: str) -> None:
    """A calibration profile path: the file must exist and load (checked once per version)."""
    value = get(cfg, dotted)
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{dotted}: expected a path to a profile file, got {value!r}")
    from calibration.profile import ProfileError, load_profile

    try:
        load_profile(value)
    except ProfileError as exc:
        raise ConfigError(f"{dotted}: {exc}") from None


def get(cfg: dict, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def validate(cfg: dict) -> None:
    """Check every value whose meaning does not depend on the catalogs (those are checked when
    the model and hardware are resolved)."""
    for key in ("model", "hardware"):
        if not isinstance(cfg[key], str) or not cfg[key]:
            raise ConfigError(f"{key}: expected a name, got {cfg[key]!r}")
    _choice(cfg, "dtype", DTYPES)
    _int(cfg, "seed", lo=0)
    _choice(cfg, "kv_cache.allocator", ALLOCATORS)
    _choice(cfg, "kv_cache.reserve", RESERVES)
    _int(cfg, "kv_cache.block_size")
    if not isinstance(cfg["kv_cache"]["prefix_caching"], bool):
        raise ConfigError(f"kv_cache.prefix_caching: expected true or false, got {cfg['kv_cache']['prefix_caching']!r}")
    _float(cfg, "kv_cache.gpu_memory_utilization", 0.0, 1.0, lo_open=True)
    _int(cfg, "kv_cache.max_model_len", lo=2)
    _choice(cfg, "kv_cache.dtype", KV_DTYPES)
    _float(cfg, "kv_cache.swap_space_gb", 0.0, 1e6)
    _int(cfg, "kv_cache.num_gpu_blocks", allow_none=True)
    _choice(cfg, "scheduler.policy", POLICIES)
    _int(cfg, "scheduler.max_num_seqs")
    _int(cfg, "scheduler.max_num_batched_tokens", allow_none=True)
    _choice(cfg, "scheduler.preemption", PREEMPTIONS)
    _choice(cfg, "scheduler.queue_policy", QUEUE_POLICIES)
    _int(cfg, "parallel.tensor_parallel_size")
    _int(cfg, "parallel.pipeline_parallel_size")
    _int(cfg, "parallel.num_replicas")
    _choice(cfg, "parallel.router", ROUTERS)
    _choice(cfg, "quantization.weights", WEIGHT_QUANT)
    _profile(cfg, "cost_model.profile")
    _int(cfg, "speculative.num_tokens", lo=0)
    _choice(cfg, "speculative.acceptance", ACCEPTANCE)
    _float(cfg, "speculative.acceptance_rate", 0.0, 1.0)
    _float(cfg, "speculative.draft_cost_ratio", 0.0, 10.0)
    _float(cfg, "slo.ttft_ms", 0.0, 1e9, allow_none=True, lo_open=True)
    _float(cfg, "slo.tpot_ms", 0.0, 1e9, allow_none=True, lo_open=True)
    kv, sched = cfg["kv_cache"], cfg["scheduler"]
    if kv["prefix_caching"] and kv["allocator"] != "paged":
        raise ConfigError("kv_cache.prefix_caching: needs kv_cache.allocator 'paged'")
    if sched["policy"] == "static" and sched["preemption"] != "recompute":
        raise ConfigError("scheduler.preemption: static batching supports only 'recompute'")
    if sched["preemption"] == "swap" and kv["allocator"] != "paged":
        raise ConfigError("scheduler.preemption: 'swap' needs kv_cache.allocator 'paged'")
    mbt = sched["max_num_batched_tokens"]
    if mbt is not None and sched["policy"] in ("orca", "vllm_v0") and mbt < kv["max_model_len"]:
        raise ConfigError(
            f"scheduler.max_num_batched_tokens: {mbt} < kv_cache.max_model_len {kv['max_model_len']}; "
            f"without chunked prefill a whole prompt must fit in one step (use policy 'chunked')")
    table = cfg["speculative"]["acceptance_table"]
    if cfg["speculative"]["acceptance"] == "table":
        if not isinstance(table, list) or not table or not all(
                isinstance(x, (int, float)) and 0 <= x <= 1 for x in table):
            raise ConfigError("speculative.acceptance_table: expected a list of per-position "
                              "acceptance probabilities in [0, 1]")
    avail = cfg["speculative"]["draft_availability"]
    if avail is not None:
        k = cfg["speculative"]["num_tokens"]
        if (not isinstance(avail, list) or len(avail) != k + 1
                or not all(isinstance(x, (int, float)) and 0 <= x <= 1 for x in avail)
                or abs(sum(avail) - 1.0) > 1e-6):
            raise ConfigError(f"speculative.draft_availability: expected {k + 1} probabilities "
                              f"(0..{k} drafts found) summing to 1, got {avail!r}")
    if not isinstance(cfg["workload"], dict):
        raise ConfigError("workload: expected a mapping")


def dump(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
