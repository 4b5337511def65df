"""Measured linear-layer times by row count: the part of a step that no straight line prices.

Why a table: a CPU BLAS picks its kernel by the number of rows, and the choice is not monotone.
Measured on a 2-core AMD EPYC (AVX-512), SmolLM2's 576 x 49,152 LM head in fp32 takes 7 ms for
one row, 21 ms for three, 10 ms for four and 22 ms for seven; past about a dozen rows it grows
smoothly. A decode batch of three then costs more than a batch of four, which a price linear in
the row count (even with a one-row/many-row switch) cannot say: the static-batching validation
ran 22% slow on exactly those steps. So ``kvplan calibrate`` times the model's own linear layers
at every row count up to 32 and sparsely beyond, and the profile prices a step's GEMMs by
looking the row count up (linear between measured points, the last segment's slope past the
end, or flat if that slope is negative; 0 at 0 rows). This is the CPU twin of the GPU operator tables (``operator_tables``).

Two tables: ``body`` (every decoder layer's projections, at the step's token rows) and
``lm_head`` (the vocabulary projection, at the rows that sample). The lookup has one scalar and
one vectorised path with the same float operations, so the pricer's ``price`` and
``price_columns`` agree bit for bit.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

#: The tables a profile may hold, and the feature each one prices.
TABLE_NAMES = ("body", "lm_head")


class TableError(ValueError):
    """A malformed table (the profile loader turns it into a ``ProfileError`` naming the field)."""


@dataclass(frozen=True)
class RowTable:
    """Seconds at measured row counts; ``(0, 0)`` is implied below the first point."""

    rows: tuple[float, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.rows) != len(self.seconds) or len(self.rows) < 2:
            raise TableError("rows and seconds: expected two equal-length lists of at least 2 points")
        prev = 0.0
        for r, s in zip(self.rows, self.seconds):
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= prev:
                raise TableError(f"rows: expected strictly increasing numbers > 0, got {r!r} after {prev:g}")
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
                raise TableError(f"seconds: expected finite numbers >= 0, got {s!r}")
            prev = r
        xs = (0.0,) + tuple(float(r) for r in self.rows)
        ys = (0.0,) + tuple(float(s) for s in self.seconds)
        slopes = tuple((ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) for i in range(len(xs) - 1))
        # Past the last point: the last segment's slope, never negative (a noisy last point must
        # not make more rows cost less and less, down to a negative price).
        ext = slopes + (max(slopes[-1], 0.0),)
        object.__setattr__(self, "_xs", xs)
        object.__setattr__(self, "_ys", ys)
        object.__setattr__(self, "_slopes", ext)
        object.__setattr__(self, "_xs_arr", np.array(xs))
        object.__setattr__(self, "_ys_arr", np.array(ys))
        object.__setattr__(self, "_slopes_arr", np.array(ext))

    def value(self, x: float) -> float:
        """Seconds at ``x`` rows (a Python number); 0 for ``x <= 0``."""
        if x <= 0:
            return 0.0
        i = min(bisect_right(self._xs, x) - 1, len(self._xs) - 1)  # type: ignore[attr-defined]
        return self._ys[i] + self._slopes[i] * (x - self._xs[i])  # type: ignore[attr-defined]

    def values(self, x: np.ndarray) -> np.ndarray:
        """``value`` over an array, element by element with the same float operations."""
        x = np.asarray(x, dtype=float)
        xs_arr: np.ndarray = self._xs_arr  # type: ignore[attr-defined]  # typed, for searchsorted
        i = np.clip(np.searchsorted(xs_arr, x, side="right") - 1, 0,
                    len(self._xs) - 1)  # type: ignore[attr-defined]
        out = self._ys_arr[i] + self._slopes_arr[i] * (x - xs_arr[i])  # type: ignore[attr-defined]
        return np.where(x > 0, out, 0.0)

    def lookup(self, x: Any) -> Any:
        """``value`` for a number, ``values`` for an array."""
        return self.values(x) if isinstance(x, np.ndarray) else self.value(x)

    def to_dict(self) -> dict:
        return {"rows": list(self.rows), "seconds": list(self.seconds)}


@dataclass(frozen=True)
class GemmTables:
    """The measured tables of one model on one machine (``TABLE_NAMES``)."""

    body: RowTable
    lm_head: RowTable
    #: How they were measured (repeats, statistic, threads): provenance only.
    method: str = ""

    def to_dict(self) -> dict:
        return {"body": self.body.to_dict(), "lm_head": self.lm_head.to_dict(), "method": self.method}

    @classmethod
    def from_dict(cls, data: Any) -> "GemmTables":
        """Parse a profile's ``gemm_tables``; ``TableError`` names the sub-field at fault."""
        if not isinstance(data, Mapping):
            raise TableError(f"expected an object with {' and '.join(TABLE_NAMES)}, got {data!r}")
        tables = {}
        for name in TABLE_NAMES:
            t = data.get(name)
            if not isinstance(t, Mapping) or not isinstance(t.get("rows"), list) \
                    or not isinstance(t.get("seconds"), list):
                raise TableError(f"{name}: expected an object with lists rows and seconds, got {t!r}")
            try:
                tables[name] = RowTable(tuple(t["rows"]), tuple(t["seconds"]))
            except TableError as exc:
                raise TableError(f"{name}.{exc}") from None
        method = data.get("method", "")
        if not isinstance(method, str):
            raise TableError(f"method: expected a string, got {method!r}")
        return cls(tables["body"], tables["lm_head"], method)


def table_of(tables: Optional[GemmTables], name: str) -> RowTable:
    """The named table, or a clear error when a profile uses a table feature without tables."""
    if tables is None:
        raise TableError(f"feature gemm_table_{name} needs the profile's gemm_tables")
    return getattr(tables, name)
