"""The step features a calibrated cost model is linear in, shared by the fit and the cost model.

A step's time is modelled as ``sum(coefficient[f] * feature[f](shape))`` over the features
below, with every coefficient >= 0 (so more work never costs less):

=========================  ================================================================
``intercept``              1 per non-empty step: launch/dispatch overhead, and the weights a
                           small batch streams once whatever its size
``gemm_rows``              rows through the linear layers (``StepShape.num_tokens``)
``gemm_multi_row``         1 when a step has 2 rows or more: one row runs the linear layers as
                           matrix-vector products, more rows switch to blocked GEMM kernels
                           with a fixed packing cost per layer (on a 2-core AVX-512 CPU,
                           SmolLM2 fp32: 38 ms for one decode, 58-62 ms for two to eight)
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
``num_padding_tokens``     padding rows of a static batch (finished members and short prompts
                           padded to the longest), priced only if the engine computes them
``gemm_table_body``        measured seconds of the decoder layers' projections at the step's
                           token rows (``sim.pricing.gemm_table``: a CPU BLAS is not monotone
                           in the rows, 3 rows can cost more than 4)
``gemm_table_lm_head``     measured seconds of the LM head at the rows that sample
                           (``sampled_rows``)
=========================  ================================================================

The two table features exist only in profiles that carry ``gemm_tables`` (``kvplan calibrate``
measures them); their coefficients are fitted like the others (near 1 when the table holds).

Each feature is defined once, in ``feature_values``, over plain ``+ -`` and a ``max`` it is
handed, so it evaluates a ``StepShape`` (Python numbers) and a ``ShapeColumns`` (arrays) with
the same float operations: the pricer's scalar and vectorised paths agree bit for bit, and the
fit's design matrix (``columns``) is the same numbers.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from sim.pricing.base import SHAPE_FIELDS, Max, ShapeColumns
from sim.pricing.gemm_table import GemmTables, table_of

FEATURES: tuple[str, ...] = (
    "intercept",
    "gemm_rows",
    "gemm_multi_row",
    "gemm_rows_over_knee",
    "num_prefill_seqs",
    "num_decode_seqs",
    "decode_context_tokens",
    "prefill_context_tokens",
    "prefill_attention_work",
    "num_swap_tokens",
    "num_spec_seqs",
    "num_padding_tokens",
    "gemm_table_body",
    "gemm_table_lm_head",
)

#: Features priced by a measured table (``sim.pricing.gemm_table``) rather than a shape field.
TABLE_FEATURES = {"gemm_table_body": "body", "gemm_table_lm_head": "lm_head"}

__all__ = ["FEATURES", "SHAPE_FIELDS", "TABLE_FEATURES", "columns", "feature_values", "gemm_rows",
           "is_busy", "linear_time", "sampled_rows"]


def gemm_rows(s: Any) -> Any:
    """Rows of live tokens through the linear layers of a ``StepShape`` or ``ShapeColumns``.
    Padding rows of a static batch are their own feature (``num_padding_tokens``): an engine
    that computes them pays for them, kvplan's runtime skips them (measured: one live decode
    among finished members of a static batch costs what a lone decode does)."""
    return s.num_prefill_tokens + s.num_decode_seqs + s.num_spec_tokens


def sampled_rows(s: Any) -> Any:
    """Rows whose logits the engine computes (every pricer's LM head): one per prefilling
    sequence, one per decoding sequence, one per draft token verified (a prompt chunk that does not finish its prompt
    samples nothing in the engine; counting it is the approximation, small where chunks are
    rare)."""
    return s.num_prefill_seqs + s.num_decode_seqs + s.num_spec_tokens


def is_busy(s: Any) -> Any:
    """True where a step does any work (empty steps are priced at 0), for a ``StepShape`` or
    a ``ShapeColumns``."""
    return (gemm_rows(s) > 0) | (s.num_swap_tokens > 0) | (s.num_padding_tokens > 0)


def feature_values(s: Any, names: Sequence[str], knee: Optional[float], mx: Max = max,
                   tables: Optional[GemmTables] = None) -> list:
    """Feature values of step(s) ``s`` in ``names`` order: numbers for a ``StepShape`` (with
    ``mx=max``), arrays for a ``ShapeColumns`` (``mx=np.maximum``; ``intercept`` stays 1.0).
    ``tables`` are the profile's measured GEMM tables (needed by the ``gemm_table_*`` features)."""
    return _values(s, gemm_rows(s), names, knee, mx, tables)


def _values(s: Any, rows: Any, names: Sequence[str], knee: Optional[float], mx: Max,
            tables: Optional[GemmTables] = None) -> list:
    out = []
    for name in names:
        if name == "intercept":
            out.append(1.0)
        elif name == "gemm_rows":
            out.append(rows)
        elif name == "gemm_multi_row":  # indicator(rows >= 2) with + - and max only
            out.append(mx(rows - 1.0, 0.0) - mx(rows - 2.0, 0.0))
        elif name == "gemm_rows_over_knee":
            out.append(mx(rows - knee, 0.0))
        elif name == "gemm_table_body":
            out.append(table_of(tables, "body").lookup(rows))
        elif name == "gemm_table_lm_head":
            out.append(table_of(tables, "lm_head").lookup(sampled_rows(s)))
        else:
            out.append(getattr(s, name))
    return out


def linear_time(s: Any, names: Sequence[str], coefs: Sequence[float], knee: Optional[float],
                mx: Max = max, tables: Optional[GemmTables] = None) -> Any:
    """The profile's price: ``sum(coef x feature)`` in ``names`` order, 0 for an empty step."""
    rows = gemm_rows(s)
    t = 0.0
    for c, v in zip(coefs, _values(s, rows, names, knee, mx, tables)):
        t = t + c * v
    return ((rows > 0) | (s.num_swap_tokens > 0) | (s.num_padding_tokens > 0)) * t


def columns(cols: Mapping[str, Any], names: Sequence[str], knee: Optional[float],
            tables: Optional[GemmTables] = None) -> list[np.ndarray]:
    """Feature columns of many steps (the fit's design matrix). ``cols`` maps StepShape field
    names to equal-length arrays (or scalars, broadcast); missing fields are 0."""
    sc = ShapeColumns(cols, "columns")
    return [np.broadcast_to(v, sc.shape).astype(float)
            for v in feature_values(sc, names, knee, np.maximum, tables)]
