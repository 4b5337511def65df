"""Speculative decoding control: how many draft tokens a verification step accepts.

Acceptance is either i.i.d. with a constant rate ``alpha`` or a per-position table (the
probability that draft token j is accepted given tokens < j were). Expected emitted tokens per
step with k drafts and i.i.d. acceptance is (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al.).
"""

from __future__ import annotations

import random
from typing import Optional, Sequence

#: How acceptance is modelled (config key ``speculative.acceptance``): an i.i.d. constant rate,
#: or a per-position table.
ACCEPTANCE_MODES: tuple[str, ...] = ("constant", "table")


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Mean tokens emitted by one verification step (accepted drafts + the bonus token)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


class AcceptanceSampler:
    """Draws the number of accepted draft tokens, reproducibly from one seeded generator.

    ``draft_availability`` (optional) models a proposer that may find fewer than k drafts, such
    as n-gram prompt lookup: entry m is the probability that it has exactly m drafts ready for a
    decode step (m = 0..k). Without it the proposer is a draft model that always fills k.
    """

    def __init__(self, alpha: float = 0.7, table: Optional[Sequence[float]] = None,
                 seed: int = 0, draft_availability: Optional[Sequence[float]] = None) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"acceptance rate must be in [0, 1], got {alpha}")
        self.alpha = alpha
        self.table = list(table) if table else None
        self.rng = random.Random(seed)
        self.draft_availability = list(draft_availability) if draft_availability else None

    def sample_drafts(self) -> int:
        """How many drafts the proposer has ready for one request's next decode step."""
        availability = self.draft_availability
        assert availability is not None  # only asked when the config gives one
        u, acc = self.rng.random(), 0.0
        for m, p in enumerate(availability):
            acc += p
            if u < acc:
                return m
        return len(availability) - 1

    def position_prob(self, j: int) -> float:
        if self.table is None:
            return self.alpha
        return self.table[min(j, len(self.table) - 1)]

    def sample(self, k: int) -> int:
        """Accepted drafts out of ``k``: stops at the first rejection."""
        rand = self.rng.random
        for j in range(k):
            if rand() >= self.position_prob(j):
                return j
        return k
