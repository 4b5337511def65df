"""benchmarks/frontend_costs.py --tokenizer: another vocabulary's encode time over SmolLM2's, each
taken against a reference run made right before it, and the ratios written as the docs quote them."""

from __future__ import annotations

import json

import pytest

from tests.benchmark_module import load_benchmark

fc = load_benchmark("frontend_costs")


def _small_fast_tokenizer(folder):
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=200, special_tokens=["[UNK]"])
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog"] * 50, trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return tok


def test_tokenizers_are_compared_with_the_reference_run_beside_them(tmp_path, monkeypatch):
    reference = _small_fast_tokenizer(tmp_path / "ref")
    other = tmp_path / "other"
    _small_fast_tokenizer(other)
    # The reference: natural 1 us, synthetic 2 us per token; the other: 1.5 / 2.4 / 2.6.
    timings = {id(reference): {"natural": 1.0, "random_ids": 2.0, "consecutive_ids": 2.0}}

    def fake(tok, lengths=(1024, 8192), seed=0):
        per = timings.get(id(tok), {"natural": 1.5, "random_ids": 2.4, "consecutive_ids": 2.6})
        return {str(n): {k: {"median_us_per_token": v} for k, v in per.items()} for n in lengths}

    monkeypatch.setattr(fc, "measure_tokenise_by_text", fake)
    out = tmp_path / "cmp.json"
    assert fc.compare_tokenizers(reference, [str(other)], out) == 0
    row = json.loads(out.read_text())["by_tokenizer"]["other"]
    assert row["natural_over_reference"] == 1.5
    assert row["synthetic_over_reference"] == pytest.approx(1.25)   # median of 1.2 and 1.3
    assert row["synthetic_over_natural"] == pytest.approx(1.67, abs=0.01)  # 2.5 / 1.5

