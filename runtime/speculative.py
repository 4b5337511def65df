"""Speculative decoding in the real engine: an n-gram proposer and exact verification.

Proposer (prompt lookup, vLLM's ``ngram`` method): the last ``n`` tokens of a request are
looked up earlier in its own prompt + output, longest ``n`` first, most recent match first; the
``k`` tokens that followed the match are the draft. No draft model, no extra forward pass, and
it pays where outputs repeat their context (summaries, code edits, extraction, quoting).

Verification runs in the target model's normal step: a decode with ``m`` drafts is one query
of ``1 + m`` tokens (its last known token, then the drafts) over its cached context, so the
step yields the target distribution at every draft position. Acceptance is exact:

- greedy: draft ``d_j`` is kept while it equals the target's argmax at its position; the
  target's token at the first mismatch (or after the last draft) is the bonus token, so the
  output is token for token what plain greedy decoding gives;
- sampling: a deterministic proposer's draft has probability 1 under the proposal, so
  speculative sampling (Leviathan et al. 2023; Chen et al. 2023) keeps ``d_j`` with probability
  ``p_j(d_j)`` and on rejection samples from ``p_j`` with ``d_j`` removed, which leaves every
  emitted token distributed exactly as the target model samples it.

The scheduler (``sim.policies``) decides how many drafts each request verifies (``k``, capped
by what the proposer found via ``Request.num_draft_tokens`` and by the tokens left); this module
only proposes and judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch


@dataclass(frozen=True)
class NgramProposer:
    """Prompt-lookup drafts of up to ``k`` tokens from n-grams of ``min_n..max_n`` tokens."""

    k: int
    min_n: int = 1
    max_n: int = 3

    def __post_init__(self) -> None:
        if self.k < 1 or not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"ngram proposer needs k >= 1 and 1 <= min_n <= max_n, got "
                             f"k={self.k}, min_n={self.min_n}, max_n={self.max_n}")

    def propose(self, tokens: Sequence[int]) -> list[int]:
        """Draft continuation of ``tokens`` (may be empty when no n-gram recurs)."""
        size = len(tokens)
        for n in range(min(self.max_n, size - 1), self.min_n - 1, -1):
            suffix = list(tokens[size - n:])
            first = suffix[0]
            # Most recent earlier occurrence whose continuation is non-empty.
            for start in range(size - n - 1, -1, -1):
                if tokens[start] == first and list(tokens[start:start + n]) == suffix:
                    return list(tokens[start + n:start + n + self.k])
        return []


def verify_greedy(target: Sequence[int], drafts: Sequence[int]) -> list[int]:
    """Emitted tokens given the target's argmax at each of the ``len(drafts) + 1`` positions."""
    out: list[int] = []
    for j, d in enumerate(drafts):
        out.append(int(target[j]))
        if target[j] != d:
            return out
    out.append(int(target[len(drafts)]))
    return out


def verify_sampled(probs: torch.Tensor, drafts: Sequence[int], generator: Optional[torch.Generator]) -> list[int]:
    """Speculative sampling against a deterministic draft; ``probs`` ``[len(drafts) + 1, vocab]``
    are the target's (already temperature/top-k/top-p filtered) distributions per position."""
    out: list[int] = []
    for j, d in enumerate(drafts):
        p = probs[j]
        u = torch.rand((), generator=generator, device=p.device)
        if bool(u < p[d]):
            out.append(int(d))
            continue
        residual = p.clone()
        residual[d] = 0.0
        total = residual.sum()
        if float(total) <= 0.0:  # p was a point mass on d, yet u >= 1: cannot happen; keep d
            out.append(int(d))
            continue
        out.append(int(torch.multinomial(residual / total, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(probs[len(drafts)], 1, generator=generator)))
    return out
