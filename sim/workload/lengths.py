"""Token-length distributions for prompts and outputs.

KV memory waste, batching and preemption all hinge on how long requests are and how much the
lengths vary, so each distribution is parameterised the way a serving engineer states a
workload: a mean and a coefficient of variation (CV = std / mean), bounds, or a real table.
Every sample is an integer array of lengths >= 1, optionally clipped to ``[min, max]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """Base: ``sample`` draws, rounds to integers and clips to ``[min, max]`` (min >= 1)."""

    min: int = 1
    max: Optional[int] = None

    def __post_init__(self) -> None:
        if self.min < 1:
            raise ValueError(f"min must be >= 1, got {self.min}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max {self.max} < min {self.min}")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.clip(self._draw(n, rng))

    def clip(self, lengths: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(lengths, dtype=np.int64), self.min, self.max)

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Fixed(LengthDist):
    """Every request has the same length (the classic fixed-shape benchmark)."""

    value: int

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class Uniform(LengthDist):
    """Integers uniform on ``[low, high]``, both inclusive."""

    low: int
    high: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.low <= self.high:
            raise ValueError(f"need 1 <= low <= high, got low={self.low}, high={self.high}")

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)


@dataclass(frozen=True, kw_only=True)
class Lognormal(LengthDist):
    """Lognormal with the given mean and CV, the usual fit for LLM prompt and output lengths.

    Exact moments: ``sigma^2 = ln(1 + cv^2)``, ``mu = ln(mean) - sigma^2 / 2``, so the continuous
    distribution has exactly this mean and CV before rounding to integers and clipping.
    ``cv = 0`` degenerates to ``round(mean)``. Draws are ``exp(mu + sigma * z)`` from standard
    normals, so changing the mean or CV reshapes the same draws (common random numbers).
    """

    mean: float
    cv: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.mean > 0 and math.isfinite(self.mean)):
            raise ValueError(f"mean must be finite and > 0, got {self.mean}")
        if not (self.cv >= 0 and math.isfinite(self.cv)):
            raise ValueError(f"cv must be finite and >= 0, got {self.cv}")

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log1p(self.cv * self.cv))

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        z = rng.standard_normal(n)
        lengths = np.exp(self.mu + self.sigma * z)
        return np.rint(np.minimum(lengths, 2.0**53)).astype(np.int64)  # no int64 overflow


@dataclass(frozen=True, kw_only=True, eq=False)
class Table(LengthDist):
    """Resample (with replacement) the lengths of a real table, e.g. ShareGPT prompt lengths.

    ``indices`` and ``take`` are separate so that input and output lengths can be drawn from
    the same rows, keeping a real table's input/output correlation.
    """

    values: np.ndarray
    source: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.values) == 0:
            raise ValueError(f"length table {self.source!r} has no rows")

    def indices(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(self.values), size=n)

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self.clip(self.values[rows])

    def _draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.values[self.indices(n, rng)]
