"""Token ids -> text, a few tokens at a time, for streaming.

Two problems a naive ``decode(new_ids)`` gets wrong:
  - one character can span several tokens (byte-level BPE splits "é" or "€" into bytes): a
    token decoded alone is U+FFFD, and sending it would put a replacement character in the
    client's text for ever. Text is released only once it no longer ends in U+FFFD;
  - tokenizers that attach spaces to the following word decode a token differently alone
    than in context. Each new piece is decoded together with the piece released before it,
    and only the difference is released (vLLM's ``detokenize_incrementally``).

``TextStream`` adds stop strings on top: text that could still be the start of a stop string is
held back until it cannot, so a client never sees part of a stop string.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Decodes a window of recent tokens: those of the last released piece (context) and the
    unreleased ones. Text up to a trailing U+FFFD is released; once nothing is pending, the
    window moves on, so each push decodes a few tokens, not the whole output."""

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the window
        self.read_offset = 0  # end of the window's context: tokens before it are all released
        self.released = 0  # characters of the window's text already released

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, new_ids: Sequence[int], final: bool = False) -> str:
        """Add tokens; return the text that became stable (all of it when ``final``)."""
        self.ids.extend(new_ids)
        if self.tokenizer is None or (not new_ids and not final):
            return ""
        text = self._decode(self.ids[self.prefix_offset:])
        stable = text if final else text.rstrip(REPLACEMENT)  # a character may still be incomplete
        delta = stable[self.released:]
        self.released = max(self.released, len(stable))
        if stable == text and len(self.ids) > self.read_offset:  # nothing pending: move the window
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.released = len(self._decode(self.ids[self.prefix_offset:]))
        return delta


class TextStream:
    """Detokenised text of one request, cut at the first stop string."""

    def __init__(self, tokenizer: Any, stop: Sequence[str] = (), skip_special_tokens: bool = True) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens)
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.pending = ""  # decoded, not yet released (may hold the start of a stop string)
        self.text = ""  # released so far
        self.stopped_by: Optional[str] = None

    def push(self, new_ids: Sequence[int], final: bool = False) -> str:
        """Add tokens; return the text to send now. After a stop string is found, ``stopped_by``
        is set, the returned text ends just before it, and later calls return nothing."""
        if self.stopped_by is not None:
            return ""
        self.pending += self.detok.push(new_ids, final)
        hit = self._first_stop()
        if hit is not None:
            at, self.stopped_by = hit
            out, self.pending = self.pending[:at], ""
        elif final or not self.hold:
            out, self.pending = self.pending, ""
        else:
            cut = max(len(self.pending) - self.hold, 0)
            out, self.pending = self.pending[:cut], self.pending[cut:]
        self.text += out
        return out

    def _first_stop(self) -> Optional[tuple[int, str]]:
        found = [(self.pending.find(s), s) for s in self.stop]
        found = [(i, s) for i, s in found if i >= 0]
        return min(found) if found else None
