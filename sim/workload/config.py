"""The ``workload`` section of a kvplan config, checked into typed specs before anything runs.

Every mistake is reported as a ``ConfigError`` that names the full dotted key and what is
allowed, because a capacity study that silently ignored a misspelt ``arival.rate`` would answer
a different question. Keys that exist but do not apply to the chosen option (``cv`` for a
``fixed`` length, ``cv`` for a Poisson process) are ignored, so that ``--set`` overrides on top
of a default scenario keep working.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from sim.catalog.frontends import PROMPT_TEXTS
from sim.errors import ConfigError
from sim.workload.prompt_pool import SAMPLINGS, PromptPool

PROCESSES = ("poisson", "gamma", "constant", "trace", "closed")
DISTS = ("fixed", "uniform", "lognormal", "table")
ZERO_OUTPUT = ("error", "clamp")
TOP_KEYS = (
    "num_requests",
    "arrival",
    "input_len",
    "output_len",
    "trace",
    "prefix",
    "priority",
    "zero_output",
    "sessions",
    "max_concurrency",
    "prompt_pool",
    "prompt_text",
)
ARRIVAL_KEYS = ("process", "rate", "cv", "time_scale", "concurrency", "think_time_s", "ramp_up_s")
LENGTH_KEYS = ("dist", "mean", "cv", "min", "max", "path", "column")
PREFIX_KEYS = ("num_prefixes", "length", "hash_block_size")
PRIORITY_KEYS = ("levels", "weights")
PROMPT_POOL_KEYS = ("entries", "sampling", "hash_block_size")
SESSION_KEYS = ("num_turns", "think_time_s", "new_message_len", "output_len", "hash_block_size")
THINK_KEYS = ("dist", "mean", "cv", "min", "max")
#: Think-time distributions (seconds, >= 0).
THINK_DISTS = ("fixed", "uniform", "lognormal", "exponential")
# Upper bounds: beyond them a value is a typo, and honouring it would exhaust memory before the
# first step (``num_requests=10**12`` allocates terabytes of arrival times).
MAX_REQUESTS = 10_000_000
MAX_TOKENS = 2**24  # per request (prompt or output); as sim.scenario bounds context lengths
MAX_LEVELS = 1000


@dataclass(frozen=True)
class ArrivalSpec:
    process: Optional[str]  # None: the trace's own timing if the trace is timed, else poisson
    rate: Optional[float]
    cv: Optional[float]
    time_scale: Optional[float]
    #: ``closed`` only: the number of clients, each sending its next request when its last one
    #: finished (plus ``think_time_s``); ``sim.workload.clients``.
    concurrency: Optional[int] = None
    think_time_s: float = 0.0
    #: ``closed`` only: client k sends its first request k x ramp_up_s / concurrency seconds in.
    ramp_up_s: float = 0.0


@dataclass(frozen=True)
class LengthSpec:
    dist: Optional[str]  # None: lengths come from workload.trace (only min/max apply)
    mean: Optional[float] = None
    cv: Optional[float] = None
    min: int = 1
    max: Optional[int] = None
    path: Optional[Path] = None
    column: Optional[str] = None


@dataclass(frozen=True)
class PrefixSpec:
    num_prefixes: int
    length: int
    hash_block_size: int = 16


@dataclass(frozen=True)
class PrioritySpec:
    levels: int
    weights: Optional[tuple[float, ...]] = None


@dataclass(frozen=True)
class ThinkTimeSpec:
    """Seconds a user takes between a reply and the next message (``sim.workload.sessions``)."""

    dist: str
    mean: float = 0.0
    cv: float = 0.0
    min: float = 0.0
    max: Optional[float] = None


@dataclass(frozen=True)
class SessionSpec:
    """``workload.sessions``: multi-turn conversations (``sim.workload.sessions``). All
    optional here; which are required depends on the workload (a trace with a ``session_id``
    column gives turns and messages itself), checked when the requests are built."""

    num_turns: Optional[LengthSpec] = None
    think_time_s: Optional[ThinkTimeSpec] = None
    new_message_len: Optional[LengthSpec] = None
    output_len: Optional[LengthSpec] = None
    hash_block_size: int = 16


@dataclass(frozen=True)
class WorkloadSpec:
    num_requests: Optional[int]
    arrival: ArrivalSpec
    input_len: Optional[LengthSpec]
    output_len: Optional[LengthSpec]
    trace: Optional[Path]
    prefix: Optional[PrefixSpec]
    priority: Optional[PrioritySpec]
    zero_output: str = "error"
    sessions: Optional[SessionSpec] = None
    #: Requests in flight at most, under any arrival process: one whose arrival finds this many
    #: in flight waits on the client side (``sim.workload.clients``).
    max_concurrency: Optional[int] = None
    #: The load tool's pool of distinct prompts, each request one of them
    #: (``sim.workload.prompt_pool``); None: every prompt is new.
    prompt_pool: Optional[PromptPool] = None
    #: What the prompts' text is (``sim.catalog.frontends.PROMPT_TEXTS``): the API server's
    #: tokenising cost.
    prompt_text: str = "natural"


def parse_workload(
    workload: Mapping[str, Any],
    *,
    base_dir: Union[str, os.PathLike, None] = None,
    key: str = "workload",
) -> WorkloadSpec:
    """Check the workload mapping's keys and value types (not yet the files it names)."""
    cfg = _section(workload, key, TOP_KEYS)
    trace = _path(cfg.get("trace"), f"{key}.trace", base_dir)
    zero_output = cfg.get("zero_output", "error")
    _choice(zero_output, f"{key}.zero_output", ZERO_OUTPUT)
    prompt_text = cfg.get("prompt_text", "natural")
    _choice(prompt_text, f"{key}.prompt_text", PROMPT_TEXTS)
    num = cfg.get("num_requests")
    arrival = _arrival(cfg.get("arrival"), f"{key}.arrival")
    cap = cfg.get("max_concurrency")
    cap = None if cap is None else _int(cap, f"{key}.max_concurrency", minimum=1, maximum=MAX_REQUESTS)
    sessions = _sessions(cfg.get("sessions"), f"{key}.sessions", base_dir)
    _check_clients(arrival, cap, sessions is not None, key)
    return WorkloadSpec(
        num_requests=None if num is None else _int(num, f"{key}.num_requests", minimum=1, maximum=MAX_REQUESTS),
        arrival=arrival,
        input_len=_length(cfg.get("input_len"), f"{key}.input_len", base_dir),
        output_len=_length(cfg.get("output_len"), f"{key}.output_len", base_dir),
        trace=trace,
        prefix=_prefix(cfg.get("prefix"), f"{key}.prefix"),
        priority=_priority(cfg.get("priority"), f"{key}.priority"),
        zero_output=zero_output,
        sessions=sessions,
        max_concurrency=cap,
        prompt_pool=_prompt_pool(cfg.get("prompt_pool"), f"{key}.prompt_pool"),
        prompt_text=prompt_text,
    )


def _check_clients(arrival: ArrivalSpec, cap: Optional[int], sessions: bool, key: str) -> None:
    """What a closed loop or a concurrency cap may not be combined with (yet)."""
    closed = arrival.process == "closed"
    if closed and cap is not None and cap < (arrival.concurrency or 0):
        raise ConfigError(f"{key}.max_concurrency: {cap} is below {key}.arrival.concurrency "
                          f"({arrival.concurrency}): under process closed the clients bound what is in "
                          f"flight; lower {key}.arrival.concurrency instead")
    if sessions and (closed or cap is not None):
        what = f"{key}.arrival.process closed" if closed else f"{key}.max_concurrency"
        raise ConfigError(f"{what}: not supported with {key}.sessions yet (conversations are "
                          f"their own closed loop)")


def _arrival(value: Any, key: str) -> ArrivalSpec:
    cfg = _section(value, key, ARRIVAL_KEYS)
    process = cfg.get("process")
    if process is not None:
        _choice(process, f"{key}.process", PROCESSES)
    rate = cfg.get("rate")
    rate = None if rate is None else _number(rate, f"{key}.rate", positive=True, allow_inf=True)
    time_scale = cfg.get("time_scale")
    if time_scale is not None:
        if process not in (None, "trace"):
            raise ConfigError(f"{key}.time_scale: only applies to process trace, not {process!r}")
        time_scale = _number(time_scale, f"{key}.time_scale", positive=True)
        if rate is not None:
            raise ConfigError(
                f"{key}.time_scale: give either {key}.rate or {key}.time_scale, not both"
            )
    concurrency, think, ramp = _closed_loop(cfg, process, key)
    cv = None
    if process == "gamma":
        if "cv" not in cfg:
            raise ConfigError(f"{key}.cv: required for process gamma (1 = Poisson, > 1 = bursty)")
        cv = _number(cfg["cv"], f"{key}.cv", positive=False)
    if process in ("poisson", "gamma", "constant") and rate is None:
        raise ConfigError(
            f"{key}.rate: required for process {process} (requests per second, or inf)"
        )
    return ArrivalSpec(process=process, rate=rate, cv=cv, time_scale=time_scale,
                       concurrency=concurrency, think_time_s=think, ramp_up_s=ramp)


def _closed_loop(cfg: Mapping[str, Any], process: Any, key: str) -> tuple[Optional[int], float, float]:
    """``concurrency``, ``think_time_s`` and ``ramp_up_s`` of a closed loop. They mean nothing under an open
    process, and a user who sets them there most likely wants ``workload.max_concurrency``,
    so that is an error rather than a key silently ignored."""
    given = [name for name in ("concurrency", "think_time_s", "ramp_up_s") if cfg.get(name) is not None]
    if process != "closed":
        if given:
            which = repr(process) if process is not None else "the default process"
            top = key.rsplit(".", 1)[0]
            raise ConfigError(f"{key}.{given[0]}: only applies to process closed, not {which} "
                              f"(to cap requests in flight under an open process use "
                              f"{top}.max_concurrency)")
        return None, 0.0, 0.0
    if cfg.get("concurrency") is None:
        raise ConfigError(f"{key}.concurrency: required for process closed (the number of "
                          f"clients, each sending its next request when its last one finishes)")
    concurrency = _int(cfg["concurrency"], f"{key}.concurrency", minimum=1, maximum=MAX_REQUESTS)
    think, ramp = cfg.get("think_time_s"), cfg.get("ramp_up_s")
    return (concurrency, 0.0 if think is None else _number(think, f"{key}.think_time_s", positive=False),
            0.0 if ramp is None else _number(ramp, f"{key}.ramp_up_s", positive=False))


def _length(value: Any, key: str, base_dir: Union[str, os.PathLike, None]) -> Optional[LengthSpec]:
    if value is None:
        return None
    cfg = _section(value, key, LENGTH_KEYS)
    dist = cfg.get("dist")
    if dist is not None:
        _choice(dist, f"{key}.dist", DISTS)
    lo = _int(cfg.get("min", 1), f"{key}.min", minimum=1, maximum=MAX_TOKENS)
    hi = cfg.get("max")
    hi = None if hi is None else _int(hi, f"{key}.max", minimum=lo, maximum=MAX_TOKENS)
    spec = LengthSpec(dist=dist, min=lo, max=hi)
    if dist is None:
        extra = [name for name in cfg if name not in ("min", "max")]
        if extra:
            raise ConfigError(
                f"{key}.dist: required when {key} sets {', '.join(extra)} "
                f"(one of {', '.join(DISTS)})"
            )
        return spec
    if dist == "fixed":
        mean = _number(_required(cfg, "mean", key, dist), f"{key}.mean", positive=True)
        return LengthSpec(dist=dist, mean=mean, min=lo, max=hi)
    if dist == "uniform":
        if hi is None:
            raise ConfigError(f"{key}.max: required for dist uniform (integers on [min, max])")
        return spec
    if dist == "lognormal":
        mean = _number(_required(cfg, "mean", key, dist), f"{key}.mean", positive=True)
        cv = _number(_required(cfg, "cv", key, dist), f"{key}.cv", positive=False)
        return LengthSpec(dist=dist, mean=mean, cv=cv, min=lo, max=hi)
    if dist == "table":
        path = _path(_required(cfg, "path", key, dist), f"{key}.path", base_dir)
        column = cfg.get("column")
        if column is not None and not isinstance(column, str):
            raise ConfigError(f"{key}.column: {column!r} is not a column name")
        return LengthSpec(dist=dist, min=lo, max=hi, path=path, column=column)
    return spec  # uniform: the bounds are min and max


def _prefix(value: Any, key: str) -> Optional[PrefixSpec]:
    if value is None:
        return None
    cfg = _section(value, key, PREFIX_KEYS)
    for name in ("num_prefixes", "length"):
        if name not in cfg:
            raise ConfigError(f"{key}.{name}: required for a synthetic shared prefix")
    return PrefixSpec(
        num_prefixes=_int(cfg["num_prefixes"], f"{key}.num_prefixes", minimum=1, maximum=MAX_REQUESTS),
        length=_int(cfg["length"], f"{key}.length", minimum=1, maximum=MAX_TOKENS),
        hash_block_size=_hash_block_size(cfg, key),
    )


def _hash_block_size(cfg: Mapping[str, Any], key: str) -> int:
    """Tokens per block id (default 16, vLLM's block size: a block-16 cache then sees a hit for
    every shared block)."""
    return _int(cfg.get("hash_block_size", 16), f"{key}.hash_block_size", minimum=1, maximum=MAX_TOKENS)


def _prompt_pool(value: Any, key: str) -> Optional[PromptPool]:
    if value is None:
        return None
    cfg = _section(value, key, PROMPT_POOL_KEYS)
    if "entries" not in cfg:
        raise ConfigError(f"{key}.entries: required (distinct prompts the client reuses, as "
                          f"aiperf's --num-dataset-entries; its default is 100)")
    sampling = cfg.get("sampling", "shuffle")
    _choice(sampling, f"{key}.sampling", SAMPLINGS)
    return PromptPool(
        entries=_int(cfg["entries"], f"{key}.entries", minimum=1, maximum=MAX_REQUESTS),
        sampling=sampling,
        hash_block_size=_hash_block_size(cfg, key),
    )


def _priority(value: Any, key: str) -> Optional[PrioritySpec]:
    if value is None:
        return None
    cfg = _section(value, key, PRIORITY_KEYS)
    if "levels" not in cfg:
        raise ConfigError(f"{key}.levels: required (priorities 0 .. levels-1, 0 served first)")
    levels = _int(cfg["levels"], f"{key}.levels", minimum=1, maximum=MAX_LEVELS)
    weights = cfg.get("weights")
    if weights is None:
        return PrioritySpec(levels=levels)
    if not isinstance(weights, (list, tuple)) or len(weights) != levels:
        raise ConfigError(f"{key}.weights: expected a list of {levels} non-negative numbers")
    parsed = tuple(_number(w, f"{key}.weights", positive=False) for w in weights)
    if sum(parsed) <= 0:
        raise ConfigError(f"{key}.weights: must not all be 0")
    return PrioritySpec(levels=levels, weights=parsed)


def _sessions(value: Any, key: str, base_dir: Union[str, os.PathLike, None]) -> Optional[SessionSpec]:
    if value is None:
        return None
    cfg = _section(value, key, SESSION_KEYS)
    lengths = {}
    for name in ("num_turns", "new_message_len", "output_len"):
        spec = _length(cfg.get(name), f"{key}.{name}", base_dir)
        if spec is not None and spec.dist is None:
            raise ConfigError(f"{key}.{name}.dist: required (one of {', '.join(DISTS)})")
        lengths[name] = spec
    return SessionSpec(
        num_turns=lengths["num_turns"],
        think_time_s=_think(cfg.get("think_time_s"), f"{key}.think_time_s"),
        new_message_len=lengths["new_message_len"],
        output_len=lengths["output_len"],
        hash_block_size=_hash_block_size(cfg, key),
    )


def _think(value: Any, key: str) -> Optional[ThinkTimeSpec]:
    if value is None:
        return None
    if not isinstance(value, Mapping):  # a bare number: a fixed think time
        return ThinkTimeSpec(dist="fixed", mean=_number(value, key, positive=False))
    cfg = _section(value, key, THINK_KEYS)
    dist = cfg.get("dist")
    if dist is None:
        raise ConfigError(f"{key}.dist: required (one of {', '.join(THINK_DISTS)})")
    _choice(dist, f"{key}.dist", THINK_DISTS)
    lo = _number(cfg.get("min", 0.0), f"{key}.min", positive=False)
    hi = cfg.get("max")
    hi = None if hi is None else _number(hi, f"{key}.max", positive=False)
    if hi is not None and hi < lo:
        raise ConfigError(f"{key}.max: {hi!r} must be >= {key}.min ({lo!r})")
    if dist == "uniform":
        if hi is None:
            raise ConfigError(f"{key}.max: required for dist uniform (seconds uniform on [min, max])")
        return ThinkTimeSpec(dist=dist, min=lo, max=hi)
    if dist == "fixed":
        mean = _number(_required(cfg, "mean", key, dist), f"{key}.mean", positive=False)
        return ThinkTimeSpec(dist=dist, mean=mean, min=lo, max=hi)
    mean = _number(_required(cfg, "mean", key, dist), f"{key}.mean", positive=True)
    cv = 1.0
    if dist == "lognormal":
        cv = _number(_required(cfg, "cv", key, dist), f"{key}.cv", positive=False)
    return ThinkTimeSpec(dist=dist, mean=mean, cv=cv, min=lo, max=hi)


# --- value checks ----------------------------------------------------------------------------


def _section(value: Any, key: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key}: expected a mapping with keys {', '.join(allowed)}, got {value!r}"
        )
    for name in value:
        if name not in allowed:
            raise ConfigError(f"{key}.{name}: unknown key (allowed: {', '.join(allowed)})")
    return value


def _required(cfg: Mapping[str, Any], name: str, key: str, dist: str) -> Any:
    if cfg.get(name) is None:
        raise ConfigError(f"{key}.{name}: required for dist {dist}")
    return cfg[name]


def _choice(value: Any, key: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(allowed)}")


def _number(value: Any, key: str, *, positive: bool, allow_inf: bool = False) -> float:
    """A real number (numeric strings such as "2.5" or "inf" from ``--set`` are accepted)."""
    number: Optional[float] = None
    if not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    if number is None or math.isnan(number):
        raise ConfigError(f"{key}: {value!r} is not a number")
    if math.isinf(number) and not (allow_inf and number > 0):
        raise ConfigError(f"{key}: {value!r} must be finite")
    if positive and number <= 0:
        raise ConfigError(f"{key}: {value!r} must be > 0")
    if number < 0:
        raise ConfigError(f"{key}: {value!r} must be >= 0")
    return number


def _int(value: Any, key: str, *, minimum: int, maximum: Optional[int] = None) -> int:
    number = None if isinstance(value, bool) else _as_int(value)
    if number is None:
        raise ConfigError(f"{key}: {value!r} is not an integer")
    if number < minimum:
        raise ConfigError(f"{key}: {value!r} must be >= {minimum}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{key}: {value!r} must be <= {maximum:,}")
    return number


def _as_int(value: Any) -> Optional[int]:
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def _path(value: Any, key: str, base_dir: Union[str, os.PathLike, None]) -> Optional[Path]:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(f"{key}: {value!r} is not a file path")
    path = Path(value).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    return path
