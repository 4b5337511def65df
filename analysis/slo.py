"""Latency SLOs as capacity planners state them (``ttft_p99_ms=500,tpot_p99_ms=50``).

Why its own module: the capacity search, the sweep and the dashboard must agree on what
"meets the SLO" means. A run meets an SLO when every named statistic of the run is within its
bound (``ttft_p99_ms=500``: the 99th percentile TTFT over the run's requests <= 500 ms) and,
when ``attainment`` is given, when at least that fraction of requests meets the per-request
TTFT and TPOT bounds (DistServe-style goodput).
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Optional

from sim.errors import ConfigError

METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p90", "p99")


@dataclass(frozen=True)
class SLO:
    """Bounds on run statistics, keyed by ``vllm bench serve``'s flat names (``p99_ttft_ms``)."""

    bounds: dict[str, float] = field(default_factory=dict)
    attainment: Optional[float] = None

    def __post_init__(self) -> None:
        if not self.bounds:
            raise ConfigError("--slo: give at least one bound, e.g. ttft_p99_ms=500")

    @property
    def ttft_ms(self) -> Optional[float]:
        """The per-request TTFT bound used for goodput: the tightest TTFT bound given."""
        return _tightest(self.bounds, "ttft")

    @property
    def tpot_ms(self) -> Optional[float]:
        return _tightest(self.bounds, "tpot")

    def check(self, summary: dict) -> tuple[bool, list[str]]:
        """(met, violations); a statistic that could not be measured (no completed request)
        counts as a violation, never as a pass."""
        bad = []
        for name, bound in self.bounds.items():
            value = summary.get(name)
            if value is None or value > bound:
                shown = "n/a" if value is None else f"{value:.1f}"
                bad.append(f"{name} {shown} > {bound:g}")
        if self.attainment is not None:
            got = summary.get("slo_attainment")
            if got is None or got < self.attainment:
                bad.append(f"slo_attainment {0 if got is None else got:.3f} < {self.attainment:g}")
        return not bad, bad

    def overrides(self) -> list[str]:
        """Config overrides that make the simulator count per-request goodput."""
        return [f"slo.ttft_ms={_yaml(self.ttft_ms)}", f"slo.tpot_ms={_yaml(self.tpot_ms)}"]

    def to_dict(self) -> dict:
        return {"bounds": dict(self.bounds), "attainment": self.attainment}

    @classmethod
    def from_dict(cls, data: dict) -> "SLO":
        return cls(dict(data["bounds"]), data.get("attainment"))

    def __str__(self) -> str:
        parts = [f"{_friendly(k)}<={v:g}" for k, v in self.bounds.items()]
        if self.attainment is not None:
            parts.append(f"attainment>={self.attainment:g}")
        return ", ".join(parts)


def parse_slo(text: str) -> SLO:
    """``"ttft_p99_ms=500,tpot_p99_ms=50"`` -> SLO. Accepts ``metric_stat_ms`` (the issue's
    spelling) and ``stat_metric_ms`` (vllm's), plus ``attainment=0.9``."""
    bounds: dict[str, float] = {}
    attainment = None
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        if "=" not in item:
            raise ConfigError(f"--slo {item!r}: expected key=value, e.g. ttft_p99_ms=500")
        key, raw = (s.strip() for s in item.split("=", 1))
        value = _number(key, raw)
        if key == "attainment":
            if not 0 < value <= 1:
                raise ConfigError(f"--slo attainment: {value:g} is outside (0, 1]")
            attainment = value
            continue
        if value <= 0:
            raise ConfigError(f"--slo {key}: must be > 0 ms, got {raw}")
        bounds[canonical(key)] = value
    return SLO(bounds, attainment)


def canonical(key: str) -> str:
    """``ttft_p99_ms`` or ``p99_ttft_ms`` -> ``p99_ttft_ms`` (the summary's flat name)."""
    parts = key.strip().lower().split("_")
    if len(parts) == 3 and parts[2] == "ms":
        a, b = parts[:2]
        if a in METRICS and b in STATS:
            return f"{b}_{a}_ms"
        if b in METRICS and a in STATS:
            return f"{a}_{b}_ms"
    raise ConfigError(f"--slo {key!r}: unknown bound; use metric_stat_ms with metric in "
                      f"{', '.join(METRICS)} and stat in {', '.join(STATS)} "
                      f"(e.g. ttft_p99_ms, tpot_p99_ms)")


def _friendly(flat: str) -> str:
    stat, metric, _ = flat.split("_")
    return f"{metric}_{stat}_ms"


def _tightest(bounds: dict[str, float], metric: str) -> Optional[float]:
    values = [v for k, v in bounds.items() if k.split("_")[1] == metric]
    return min(values) if values else None


def _number(key: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"--slo {key}: expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"--slo {key}: expected a finite number, got {raw!r}")
    return value


def _yaml(v: Optional[float]) -> str:
    return "null" if v is None else repr(float(v))
