"""Fit step-cost coefficients to measured steps: weighted non-negative least squares, with the
error measured on steps the fit never saw.

Input is the runtime's step trace (``runtime/tracing.py``: the ``StepShape`` fields, ``start``
and ``seconds`` per step). What is fitted is the **step period**: the executor's ``seconds`` plus
the engine's own bookkeeping until the next step starts (scheduling, update, retiring finished
requests), because the simulator advances its clock by one price per step. Idle waits between
steps (no request in flight) are not work and are replaced by the typical gap.

The fit minimises relative error (each row weighted by 1 / measured time, so a 20 ms decode step
counts as much as a 2 s prefill), keeps every coefficient >= 0 (``scipy.optimize.nnls``), and
holds out a seeded random 20% of the steps: the held-out error is what the profile reports, and
the shipped coefficients are the ones fitted without those steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np
from scipy.optimize import nnls  # type: ignore[import-untyped]  # no stubs: scipy-stubs is no dependency

from calibration.json_lines import json_objects
from sim.errors import KvplanError, TraceFormatError, file_error
from sim.pricing import features as feat
from sim.pricing.base import ShapeColumns
from sim.pricing.gemm_table import GemmTables

#: Candidate GEMM knees (rows); None = no knee term. Chosen by training error.
KNEES: tuple[Optional[int], ...] = (None, 16, 32, 64, 128, 256, 512)
MIN_SAMPLES = 10


class FitError(KvplanError):
    """Too few or unusable measurements to fit a cost model."""


@dataclass
class Samples:
    """Measured steps: StepShape columns and the step period in seconds."""

    cols: dict[str, np.ndarray]
    seconds: np.ndarray
    num_warmup_dropped: int = 0

    @property
    def n(self) -> int:
        return int(self.seconds.size)

    def take(self, idx: np.ndarray) -> "Samples":
        return Samples({k: v[idx] for k, v in self.cols.items()}, self.seconds[idx])

    @classmethod
    def concat(cls, parts: Sequence["Samples"]) -> "Samples":
        parts = [p for p in parts if p.n]
        if not parts:
            return cls({k: np.zeros(0) for k in feat.SHAPE_FIELDS}, np.zeros(0))
        cols = {k: np.concatenate([p.cols[k] for p in parts]) for k in feat.SHAPE_FIELDS}
        return cls(cols, np.concatenate([p.seconds for p in parts]),
                   sum(p.num_warmup_dropped for p in parts))


def step_periods(records: Sequence[dict]) -> np.ndarray:
    """Seconds from each step's start to the next one's, idle waits replaced by the typical gap
    (the last step, with no next, gets the typical gap too)."""
    secs = np.array([float(r["seconds"]) for r in records])
    if not records or any("start" not in r for r in records):
        return secs + np.array([float(r.get("schedule_seconds", 0.0)) for r in records])
    start = np.array([float(r["start"]) for r in records])
    gap = np.clip(np.diff(start) - secs[:-1], 0.0, None)
    typical = float(np.median(gap)) if gap.size else 0.0
    gap = np.where(gap > 3 * typical + 0.002, typical, gap)
    return secs + np.append(gap, typical)


def samples_from_records(records: Sequence[dict], warmup_steps: int = 0) -> Samples:
    """Samples from one engine run's step records, in step order; the first ``warmup_steps``
    are dropped (first calls of a shape pay one-time costs: allocator growth, kernel selection)."""
    records = list(records)
    period = step_periods(records)
    keep = np.arange(len(records)) >= warmup_steps
    cols = {k: np.array([float(r.get(k, 0)) for r in records]) for k in feat.SHAPE_FIELDS}
    keep &= feat.is_busy(ShapeColumns(cols)) & (period > 0)
    idx = np.flatnonzero(keep)
    out = Samples(cols, period).take(idx)
    out.num_warmup_dropped = min(warmup_steps, len(records))
    return out


def read_trace(path: Union[str, Path]) -> list[dict]:
    """Step records of a runtime trace (JSONL). Errors name the file and line."""
    p = Path(path)
    if p.is_dir():
        raise TraceFormatError(f"{p}: is a directory, expected a step trace file (JSONL)")
    if not p.is_file():
        raise TraceFormatError(f"{p}: trace file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise file_error(p, exc, TraceFormatError) from None
    records = []
    for lineno, rec in json_objects(text, str(p), TraceFormatError, "JSON object (one step a line)"):
        for key in ("seconds", "num_prefill_tokens", "num_decode_seqs"):
            v = rec.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TraceFormatError(f"{p}:{lineno}: {key}: expected a number, got {v!r} "
                                       f"(is this a runtime step trace?)")
            if not math.isfinite(v) or v < 0:
                raise TraceFormatError(f"{p}:{lineno}: {key}: expected a finite number >= 0, got {v!r}")
        records.append(rec)
    if not records:
        raise TraceFormatError(f"{p}: no step records")
    return records


@dataclass
class FitResult:
    features: list[str]
    coefficients: dict[str, float]
    knee: Optional[float]
    error: dict
    tables: Optional[GemmTables] = None

    def predict(self, cols: dict[str, np.ndarray]) -> np.ndarray:
        """Seconds per step of ``cols`` (StepShape field columns), as the profile prices them."""
        coefs = [self.coefficients[f] for f in self.features]
        return feat.linear_time(ShapeColumns(cols, "predict"), self.features, coefs, self.knee,
                                np.maximum, self.tables)


def fit(samples: Samples, knees: Iterable[Optional[int]] = KNEES, heldout: float = 0.2,
        seed: int = 0, tables: Optional[GemmTables] = None) -> FitResult:
    """Fit on a random ``1 - heldout`` of the samples, report the error on the rest.

    With ``tables`` (the GEMM times ``kvplan calibrate`` measured beside the grid) the linear
    layers are priced by table lookup: the knee candidates are not tried (the table already
    bends where the kernels do), and the row-count features stay for what scales with rows
    outside the GEMMs (norms, activations, rotary)."""
    n = samples.n
    if n < MIN_SAMPLES:
        raise FitError(f"{n} usable steps; a fit needs at least {MIN_SAMPLES} "
                       f"(profile a larger grid or pass longer traces)")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    n_test = max(1, int(round(heldout * n))) if heldout > 0 else 0
    test, train = samples.take(order[:n_test]), samples.take(order[n_test:])
    best = None
    for knee in ((None,) if tables is not None else knees):
        cand = _fit_one(train, knee, tables)
        if cand is not None and (best is None or cand[2] < best[2] - 1e-12):
            best = cand
    if best is None:
        raise FitError("no candidate fit: give knees including None")
    names, coefs, _, knee = best
    result = FitResult(names, coefs, None if knee is None else float(knee), {}, tables)
    train_ape = _ape(result, train)
    test_ape = _ape(result, test) if test.n else train_ape
    result.error = {
        "heldout_mape": float(test_ape.mean()),
        "heldout_p90_ape": float(np.percentile(test_ape, 90)),
        "heldout_max_ape": float(test_ape.max()),
        "train_mape": float(train_ape.mean()),
        "num_samples": n,
        "num_train": train.n,
        "num_heldout": test.n,
        "heldout_fraction": heldout,
        "seed": seed,
        "num_warmup_dropped": samples.num_warmup_dropped,
        "target": "step period (executor seconds + engine bookkeeping until the next step)",
        "unused_features": [f for f in feat.FEATURES if f not in names
                            and (f not in feat.TABLE_FEATURES or tables is not None)],
    }
    return result


def _fit_one(s: Samples, knee: Optional[int], tables: Optional[GemmTables] = None
             ) -> Optional[tuple]:
    """(feature names, coefficients, mean squared relative training error, knee), or None
    when the knee term would be all zero."""
    names = [f for f in feat.FEATURES if (f != "gemm_rows_over_knee" or knee is not None)
             and (f not in feat.TABLE_FEATURES or tables is not None)]
    X = np.column_stack(feat.columns(s.cols, names, knee, tables))
    used = [i for i, f in enumerate(names) if np.any(X[:, i] != 0)]
    if knee is not None and names.index("gemm_rows_over_knee") not in used:
        return None  # no step has more rows than the knee: same as no knee
    names = [names[i] for i in used]
    X = X[:, used]
    y = s.seconds
    A = X / y[:, None]
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    b, _ = nnls(A / scale, np.ones_like(y), maxiter=50 * len(names))
    b = b / scale
    loss = float(np.mean((X @ b / y - 1.0) ** 2))
    return names, {f: float(v) for f, v in zip(names, b)}, loss, knee


def _ape(result: FitResult, s: Samples) -> np.ndarray:
    return np.abs(result.predict(s.cols) - s.seconds) / s.seconds
