"""Time a loaded model's own linear layers at each row count: the profile's ``gemm_tables``.

Why these and not a generic GEMM sweep: the kernels a BLAS picks depend on the exact shapes
(rows, in and out features, dtype, threads), and a CPU's non-monotone choices (three rows
slower than four, ``sim.pricing.gemm_table``) are only seen on the model's own shapes. So the
tables are measured on the model's modules, in the order a forward pass runs them (every layer's
QKV, O, gate/up and down projections, then the LM head), with its weights streaming from memory
as they do in a step rather than sitting in cache.

Every row count up to ``DENSE_UP_TO`` is measured (where the kernel choice jumps), then a sparse
ladder up to the step budget (where time grows smoothly); rounds go over all row counts in turn
and the median per row count is kept, so a burst of load from elsewhere spoils one sample, not
a stretch of the table. About ten seconds for SmolLM2-135M on two cores.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional, Sequence

from sim.pricing.gemm_table import GemmTables, RowTable

#: Every row count up to here is measured; beyond, ``SPARSE_ROWS``.
DENSE_UP_TO = 32
SPARSE_ROWS = (40, 48, 56, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024, 2048)
#: Rounds over the row counts (the median is kept); large row counts take fewer.
ROUNDS = 5
LARGE_ROUNDS = 2
LARGE = 256


def row_ladder(max_rows: int) -> list[int]:
    """Row counts to measure for tables used up to ``max_rows`` (the last segment's slope prices
    anything past the largest)."""
    dense = list(range(1, min(DENSE_UP_TO, max_rows) + 1))
    sparse = [r for r in SPARSE_ROWS if DENSE_UP_TO < r <= max_rows]
    if max_rows > DENSE_UP_TO and (not sparse or sparse[-1] < max_rows):
        sparse.append(max_rows)
    return dense + sparse


def measure_gemm_tables(model: Any, max_body_rows: int, max_head_rows: int,
                        progress: Optional[Callable[[str], None]] = None) -> GemmTables:
    """Tables for ``model`` (a ``runtime.model.LlamaForCausalLM`` already on its device and
    dtype): ``body`` up to ``max_body_rows`` token rows, ``lm_head`` up to ``max_head_rows``."""
    import torch

    param = next(model.parameters())
    device, dtype = param.device, param.dtype
    hidden = model.config.hidden_size
    layers = list(model.model.layers)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # A mixture of experts' MLP is timed whole (router, top-k, each touched expert over its
    # tokens): what it costs depends on how many experts ``m`` rows touch, not on ``m`` alone.
    moe = hasattr(layers[0].mlp, "experts_gate_up")

    def body(m: int) -> Callable[[], None]:
        x = torch.randn(m, hidden, device=device, dtype=dtype)
        attn_out = torch.randn(m, layers[0].self_attn.q_size, device=device, dtype=dtype)
        act = torch.randn(m, layers[0].mlp.intermediate_size, device=device, dtype=dtype)

        def run() -> None:
            for layer in layers:
                layer.self_attn.qkv_proj(x)
                layer.self_attn.o_proj(attn_out)
                if moe:
                    layer.mlp(x)
                else:
                    layer.mlp.gate_up_proj(x)
                    layer.mlp.down_proj(act)
        return run

    def head(m: int) -> Callable[[], None]:
        x = torch.randn(m, hidden, device=device, dtype=dtype)
        return lambda: model.compute_logits(x)

    with torch.inference_mode():
        body_rows = row_ladder(max_body_rows)
        head_rows = row_ladder(max_head_rows)
        body_s = _median_times([body(m) for m in body_rows], body_rows, sync)
        if progress is not None:
            progress("GEMM table: decoder layers")
        head_s = _median_times([head(m) for m in head_rows], head_rows, sync)
        if progress is not None:
            progress("GEMM table: LM head")
    threads = torch.get_num_threads() if device.type == "cpu" else None
    method = (f"model's own linear layers{' (MoE layers whole, routed)' if moe else ''}, "
              f"{dtype} on {device.type}"
              + (f" ({threads} threads)" if threads else "")
              + f"; median of {ROUNDS} rounds ({LARGE_ROUNDS} at {LARGE}+ rows), one warm-up call each")
    return GemmTables(RowTable(tuple(body_rows), tuple(body_s)),
                      RowTable(tuple(head_rows), tuple(head_s)), method)


def _median_times(calls: Sequence[Callable[[], None]], rows: Sequence[int],
                  sync: Callable[[], None]) -> list[float]:
    """Median seconds of each call over interleaved rounds (one warm-up call each first)."""
    for call in calls:
        call()
    sync()
    samples: list[list[float]] = [[] for _ in calls]
    for r in range(ROUNDS):
        for i, (call, m) in enumerate(zip(calls, rows)):
            if m >= LARGE and r >= LARGE_ROUNDS:
                continue
            t0 = time.perf_counter()
            call()
            sync()
            samples[i].append(time.perf_counter() - t0)
    return [statistics.median(s) for s in samples]
