"""The step features a calibrated cost model is linear in, shared by the fit and the cost model.

A step's time is modelled as ``sum(coefficient[f] * feature[f](shape))`` over the features
below, with every coefficient >= 0 (so more work never costs less):

=========================  ================================================================
``intercept``              1 per non-empty step: launch/dispatch overhead, and the weights a
                           small batch streams once whatever its size
``gemm_rows``              rows through the linear layers (``StepShape.num_tokens``)
``gemm_rows_over_knee``    ``max(0, gemm_rows - knee)``: the extra slope once GEMMs turn
                           compute-bound (on a GPU, or a CPU with AMX, a GEMM costs about the
                           same for 1 or ``knee`` rows); ``knee`` is fitted from a short list
``num_prefill_seqs``       sequences in prefill: one attention call per sequence per layer
``num_decode_seqs``        decoding sequences: per-sequence bookkeeping, sampling, LM head row
``decode_context_tokens``  KV tokens read by decode attention
``prefill_context_tokens`` cached KV tokens read by prefill chunks
``prefill_attention_work`` query-key pairs of causal prefill attention
``num_swap_tokens``        tokens whose KV crosses the host link
``num_spec_seqs``          decodes verifying drafts: beyond the drafts' GEMM rows, each is a
                           multi-token query (its own attention call per layer on a CPU)
=========================  ================================================================

Both ``values`` (one shape, Python floats) and ``columns`` (NumPy arrays) evaluate the features
with the same float operations, so the cost model's scalar and vectorised paths agree bit for bit.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Mapping, Optional, Sequence

import numpy as np

from sim.policies.step import StepShape

FEATURES: tuple[str, ...] = (
    "intercept",
    "gemm_rows",
    "gemm_rows_over_knee",
    "num_prefill_seqs",
    "num_decode_seqs",
    "decode_context_tokens",
    "prefill_context_tokens",
    "prefill_attention_work",
    "num_swap_tokens",
    "num_spec_seqs",
)

#: StepShape field names, the columns of a sample table.
SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StepShape))

def gemm_rows(shape: StepShape) -> int:
    s = shape
    return s.num_prefill_tokens + s.num_decode_seqs + s.num_spec_tokens + s.num_padding_tokens


def values(shape: StepShape, names: Sequence[str], knee: Optional[float]) -> list[float]:
    """Feature values of one (non-empty) step, in ``names`` order."""
    rows = float(gemm_rows(shape))
    out = []
    for name in names:
        if name == "intercept":
            out.append(1.0)
        elif name == "gemm_rows":
            out.append(rows)
        elif name == "gemm_rows_over_knee":
            over = rows - knee
            out.append(over if over > 0.0 else 0.0)
        else:
            out.append(float(getattr(shape, name)))
    return out


def columns(cols: Mapping[str, np.ndarray], names: Sequence[str], knee: Optional[float]
            ) -> list[np.ndarray]:
    """Feature columns of many steps. ``cols`` maps StepShape field names to equal-length
    arrays (or scalars, broadcast); missing fields are 0."""
    n = np.broadcast(*[np.asarray(v) for v in cols.values()]).shape if cols else ()
    f = {k: np.broadcast_to(np.asarray(cols.get(k, 0), dtype=float), n) for k in SHAPE_FIELDS}
    rows = f["num_prefill_tokens"] + f["num_decode_seqs"] + f["num_spec_tokens"] + f["num_padding_tokens"]
    out = []
    for name in names:
        if name == "intercept":
            out.append(np.ones(n))
        elif name == "gemm_rows":
            out.append(rows)
        elif name == "gemm_rows_over_knee":
            out.append(np.maximum(rows - knee, 0.0))
        else:
            out.append(f[name])
    return out


def is_busy(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """True where a step does any work (the cost model prices empty steps at 0)."""
    z = np.asarray(0.0)
    rows = sum(np.asarray(cols.get(k, z), dtype=float) for k in
               ("num_prefill_tokens", "num_decode_seqs", "num_spec_tokens", "num_padding_tokens"))
    return (rows > 0) | (np.asarray(cols.get("num_swap_tokens", z), dtype=float) > 0)

