"""Prompts of a given token length for ``kvplan loadgen``, in the three forms a server can take.

Why a module of its own: a load test is only comparable with the simulator when each prompt is
as long as the workload says, and requests that share a prefix in the workload share it on the
server too (else the server's prefix cache sees nothing to reuse). How exact a prompt can be
depends on what the client knows about the server's tokenizer:

- ``token-ids``: the completions API takes a list of token ids as the prompt (OpenAI's API and
  vLLM do): exact, and no tokenizer needed. Ids are drawn from ``TOKEN_IDS``, a range inside
  every vocabulary of 256 tokens or more and clear of the special tokens at either end.
- ``text-tokenizer``: text made from those ids with the server's tokenizer (``--tokenizer``),
  re-encoded and trimmed until it encodes to the asked length (as ``vllm bench serve``'s random
  dataset does); the server may add a BOS token, and a chat template adds its own.
- ``text-words``: no tokenizer: common English words, about one token each in BPE vocabularies.
  Approximate; the server's own count (``usage.prompt_tokens``) is what gets recorded.

In every form a request's prompt is a pure function of (seed, the request's index, its prefix
block hashes): blocks with the same hash get the same tokens or words.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np

from sim.policies.request import Request

#: Token ids prompts are drawn from: present in any vocabulary of 256+ tokens (the byte-level
#: ranges of BPE vocabularies), above the low special ids (BOS, EOS, PAD, UNK sit at 0-3 in
#: Llama/SmolLM/Mistral) and far below the high ones (Qwen's and Llama 3's sit at the top).
TOKEN_IDS = (10, 250)
#: About one BPE token each (with the leading space), no punctuation: a prompt of n words
#: encodes to about n tokens in Llama, Qwen, GPT-2 and SmolLM vocabularies.
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "see", "big", "red",
         "sun", "in", "sky", "we", "go", "home", "now", "it", "is", "one", "day", "for", "all",
         "man", "boy", "girl", "tree", "car", "road", "time", "way", "old", "new", "good", "long",
         "little", "great", "small", "water", "house", "world", "life", "hand", "part", "place")
KINDS = ("token-ids", "text-tokenizer", "text-words")
Prompt = Union[str, list[int]]


def prompt_token_ids(req: Request, index: int, seed: int, length: Optional[int] = None) -> list[int]:
    """``length`` (default the request's prompt length) ids; the blocks of ``req.block_hashes``
    come from their hash, so requests that share a prefix share its tokens."""
    n = req.prompt_len if length is None else length
    ids: list[int] = []
    block = max(1, int(req.hash_block_size))
    for h in req.block_hashes or ():
        if len(ids) + block > n:
            break
        ids += _rng(seed, 1, int(h)).integers(*TOKEN_IDS, size=block).tolist()
    if len(ids) < n:
        ids += _rng(seed, 2, index).integers(*TOKEN_IDS, size=n - len(ids)).tolist()
    return ids[:n]


def words_prompt(req: Request, index: int, seed: int) -> str:
    """``req.prompt_len`` words, prefix blocks shared by hash as in :func:`prompt_token_ids`."""
    return " ".join(WORDS[(i - TOKEN_IDS[0]) % len(WORDS)] for i in prompt_token_ids(req, index, seed))


def tokenizer_prompt(req: Request, index: int, seed: int, tokenizer: Any,
                     tries: int = 10) -> tuple[str, int]:
    """Text that ``tokenizer`` encodes (without special tokens) to ``req.prompt_len`` tokens
    when one is found in ``tries`` rounds of decode, re-encode, and trim (too long) or extend
    past the target (too short: the next round trims); returns (text, its length in tokens),
    the closest length seen when no round was exact."""
    target = req.prompt_len
    ids = prompt_token_ids(req, index, seed)
    spare = prompt_token_ids(req, index + 1_000_003, seed, length=2 * target + 16)
    text = tokenizer.decode(ids)
    got = _encode(tokenizer, text)
    best = (abs(len(got) - target), text, len(got))
    for _ in range(tries):
        if len(got) == target:
            return text, target
        got = got[:target] if len(got) > target else got + spare[: target - len(got) + 4]
        text = tokenizer.decode(got)
        got = _encode(tokenizer, text)
        best = min(best, (abs(len(got) - target), text, len(got)))
    return best[1], best[2]


def load_tokenizer(name: Optional[str]) -> Optional[Any]:
    """A transformers tokenizer from a local folder or the local Hugging Face cache (never the
    network), or None when it cannot be loaded (transformers missing, unknown name)."""
    if not name:
        return None
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except Exception:  # noqa: BLE001 - any failure means "no tokenizer": fall back to words
        return None
    finally:
        hf_logging.set_verbosity(verbosity)


def make_prompts(requests: Sequence[Request], kind: str, seed: int,
                 tokenizer: Optional[Any] = None) -> tuple[list[Prompt], list[int]]:
    """Each request's prompt in ``kind`` and its planned length in tokens (the workload's, or
    what the tokenizer encodes the text to)."""
    if kind not in KINDS:
        raise ValueError(f"prompt kind {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "token-ids":
        return [prompt_token_ids(r, i, seed) for i, r in enumerate(requests)], [r.prompt_len for r in requests]
    if kind == "text-words":
        return [words_prompt(r, i, seed) for i, r in enumerate(requests)], [r.prompt_len for r in requests]
    if tokenizer is None:
        raise ValueError("prompt kind text-tokenizer needs a tokenizer")
    made = [tokenizer_prompt(r, i, seed, tokenizer) for i, r in enumerate(requests)]
    return [t for t, _ in made], [n for _, n in made]


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _rng(seed: int, stream: int, key: int) -> np.random.Generator:
    return np.random.default_rng([int(seed) & (2**63 - 1), stream, key & (2**63 - 1)])
