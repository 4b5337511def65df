"""The roofline of a mixture-of-experts MLP layer: compute through the k experts each token is
routed to, weight reads of every expert at least one token was routed to.

Why the number of experts touched matters: a decode step of a few sequences routes its tokens
to a few experts, and only those experts' weights stream from memory; a large batch or a
prefill chunk touches all of them. With uniform routing of T tokens, each to k of E experts, an
expert is missed by a token with probability 1 - k/E, so the expected number touched is
``E x (1 - (1 - k/E)^T)`` (Mixtral, E = 8, k = 2: 2 at one token, 4.4 at 4, all 8 by about 40).
Real routers are skewed, which touches fewer experts and loads some more than others; the
measured MoE tables (``operator_tables``) carry that, this model does not.

The touched count is tabulated for whole token counts by repeated multiplication, and looked up
by index on the scalar and the vectorised path, so both give the same bits (no ``pow``, whose
NumPy and libm versions may differ in the last place).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.pricing.base import Max


def touched_table(num_experts: int, top_k: int, eps: float = 1e-12) -> list[float]:
    """Expected experts touched by 0, 1, 2, ... tokens, up to where it is within ``eps`` of
    all of them (the last entry then stands for every larger count)."""
    miss = 1.0 - top_k / num_experts
    out = [0.0]
    q = 1.0
    while True:
        q *= miss
        out.append(num_experts * (1.0 - q))
        if num_experts * q < eps or len(out) > 1_000_000:
            return out


def uniform_over_balanced(num_experts: int, top_k: int, tokens: np.ndarray) -> np.ndarray:
    """For each token count: the experts a uniform router touches over those AIConfigurator's
    ``balanced`` routing touches, the factor that turns a balanced MoE table row into a uniform
    router's time.

    AIConfigurator's collector routes ``T`` tokens "balanced" by giving token ``i`` the experts
    ``i + j x ceil(E / k)`` (spread further apart when ``T`` is small): no two tokens share an
    expert until every expert has one, so ``min(E, T x k)`` experts are touched, evenly loaded
    (``balanced_logits`` in its ``collector/helper.py``). A router drawing each token's experts
    at random touches ``E x (1 - (1 - k/E)^T)`` (``touched_table``): fewer, where a step's
    weights are what it reads (gpt-oss-120b, 128 experts, top-4, 32 tokens: 82 of the 128 a
    balanced row reads). Scaling the whole row is right where weight reads dominate, and the
    factor is 1 where every expert is touched either way (prefill chunks, large decodes)."""
    table = np.array(touched_table(num_experts, top_k))
    t = np.asarray(tokens, dtype=float)
    touched = np.interp(t, np.arange(table.size, dtype=float), table)  # constant past the end
    balanced = np.minimum(float(num_experts), t * top_k)
    return np.where(t > 0, touched / np.maximum(balanced, 1e-300), 1.0)


@dataclass
class ExpertLayer:
    """One MoE MLP layer on one GPU (experts split over tensor parallelism):

    - ``compute_per_row``: seconds of GEMM FLOPs per token (k experts' up and down projections,
      plus the columns each routed row pays beyond them: ``Efficiency.moe_row_columns``)
    - ``weight_per_expert``: seconds to stream one expert's weight shard, plus the fixed cost of
      each touched expert (``Efficiency.moe_expert_latency_s``)
    - ``memory_per_row``: seconds of activation traffic per token (k experts' inputs/outputs)
    - ``latency``: fixed seconds of the call (``Efficiency.moe_latency_s``; without a fit, two
      grouped-GEMM launches)
    """

    compute_per_row: float
    weight_per_expert: float
    memory_per_row: float
    latency: float
    num_experts: int
    top_k: int
    #: Expert parallelism: each of this GPU's rows stands for ``global_rows`` tokens routed over
    #: all experts (the data-parallel ranks' together), of which this GPU holds the
    #: ``local_share`` (1 / EP): it reads the weights of its touched experts only.
    global_rows: int = 1
    local_share: float = 1.0
    _touched: list[float] = field(init=False, repr=False)
    _touched_arr: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._touched = touched_table(self.num_experts, self.top_k)
        self._touched_arr = np.array(self._touched)

    def touched(self, rows: Any) -> Any:
        """Expected experts touched by ``rows`` tokens (a number or an array of counts)."""
        last = len(self._touched) - 1
        if isinstance(rows, np.ndarray):
            return self._touched_arr[np.minimum(np.maximum(rows, 0), last).astype(np.int64)]
        return self._touched[min(max(int(rows), 0), last)]

    def time(self, rows: Any, mx: Max = max) -> Any:
        """Seconds of the layer for ``rows`` tokens (0 for none); ``mx`` is ``max`` for a
        number and ``np.maximum`` for an array, with the same float operations."""
        if self.global_rows == 1 and self.local_share == 1.0:
            touched = self.touched(rows)
        else:
            touched = self.local_share * self.touched(rows * self.global_rows)
        return self.time_touching(rows, touched, mx)

    def time_touching(self, rows: Any, touched: Any, mx: Max = max) -> Any:
        """Seconds of the layer for ``rows`` tokens routed to ``touched`` experts (``time``'s
        routing, or a table's: balanced rows touch ``min(E, T x k)``)."""
        compute = self.compute_per_row * rows
        memory = self.weight_per_expert * touched + self.memory_per_row * rows
        return (rows > 0) * (mx(compute, memory) + self.latency)
