"""Synthetic steps from a known linear cost model, and a profile built from it."""

from __future__ import annotations

import numpy as np

from calibration.fit import Samples
from sim.pricing.base import SHAPE_FIELDS
from sim.pricing.gemm_table import GemmTables, RowTable
from sim.pricing.profile_file import Profile

#: Seconds per unit, of the order SmolLM2-135M takes on a CPU; every term matters somewhere.
TRUE = {
    "intercept": 0.030,
    "gemm_rows": 2e-5,
    "gemm_rows_over_knee": 4e-4,
    "num_prefill_seqs": 2e-3,
    "num_decode_seqs": 5e-4,
    "decode_context_tokens": 1e-6,
    "prefill_context_tokens": 2e-5,
    "prefill_attention_work": 1e-8,
}
KNEE = 64


def synthetic_samples(n: int = 600, noise: float = 0.01, seed: int = 1) -> Samples:
    """Decode, prefill and mixed steps priced by ``TRUE`` times (1 + noise x N(0, 1))."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)  # 0 prefill, 1 decode, 2 mixed
    P = np.where(kind != 1, rng.integers(1, 2048, n), 0)
    PS = np.where(P > 0, np.minimum(rng.integers(1, 6, n), P), 0)
    # a fifth of the decode batches are a single sequence (one GEMM row), as a real grid has
    D = np.where(kind != 0, np.where(rng.random(n) < 0.2, 1, rng.integers(1, 96, n)), 0)
    PC = np.where(P > 0, rng.integers(0, 2048, n) * (rng.random(n) < 0.5), 0)
    cols = {k: np.zeros(n) for k in SHAPE_FIELDS}
    cols.update(num_prefill_tokens=P, num_prefill_seqs=PS, num_decode_seqs=D,
                decode_context_tokens=D * rng.integers(8, 2048, n), prefill_context_tokens=PC,
                prefill_attention_work=P * PC + P * (P + 1) // 2)
    cols = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    rows = cols["num_prefill_tokens"] + cols["num_decode_seqs"]
    y = TRUE["intercept"] + TRUE["gemm_rows"] * rows + TRUE["gemm_rows_over_knee"] * np.maximum(rows - KNEE, 0)
    for f in ("num_prefill_seqs", "num_decode_seqs", "decode_context_tokens",
              "prefill_context_tokens", "prefill_attention_work"):
        y = y + TRUE[f] * cols[f]
    return Samples(cols, y * (1 + noise * rng.standard_normal(n)))


def nonmonotone_tables() -> GemmTables:
    """GEMM tables shaped like a CPU BLAS's (SmolLM2 fp32, 2-core EPYC): 3 rows cost more than
    4, the LM head jumps at 2, 3, 6 and 7 rows, smooth past a dozen."""
    body_rows = list(range(1, 33)) + [64, 128, 512, 2048]
    body = [0.026 + 0.004 * (r % 4 == 3) + 0.0006 * r for r in body_rows]
    head_rows = list(range(1, 33)) + [64, 256]
    head = [0.007 * (r if r < 4 else 1.5) * (1 + 0.5 * (r % 4 == 3 and r < 12)) + 1e-4 * r
            for r in head_rows]
    return GemmTables(RowTable(tuple(body_rows), tuple(body)), RowTable(tuple(head_rows), tuple(head)),
                      "synthetic")


def table_profile(**changes) -> Profile:
    """A profile pricing GEMMs by ``nonmonotone_tables`` plus attention and a fixed cost."""
    coefs = {"intercept": 0.004, "gemm_table_body": 1.0, "gemm_table_lm_head": 1.0,
             "gemm_rows": 1e-5, "num_decode_seqs": 3e-4, "decode_context_tokens": 1e-6,
             "prefill_attention_work": 1e-8}
    return make_profile(features=list(coefs), coefficients=coefs, gemm_knee=None,
                        gemm_tables=nonmonotone_tables(), **changes)


def make_profile(**changes) -> Profile:
    fields = dict(hardware="Test CPU", device="cpu", model="SmolLM2 135M", dtype="bfloat16",
                  block_size=16, features=list(TRUE), coefficients=dict(TRUE), gemm_knee=KNEE,
                  fit={"heldout_mape": 0.05, "heldout_p90_ape": 0.1, "num_samples": 100, "num_heldout": 20},
                  source={"kind": "synthetic"}, catalog_model="smollm2-135m", model_spec="smollm2")
    fields.update(changes)
    return Profile(**fields)


def run_kvplan(argv: list, capsys) -> tuple:
    """``kvplan argv`` in process: (exit code, stdout, stderr)."""
    from kvplan.cli.main import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
