"""What the What-if page says beyond its default run: the overload message only when the
server falls behind, latencies in units that read, the summary as a table, GPU utilisation
and the memory split."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "dashboards" / "views" / "what_if.py"


def run(block_size: int = 16, **numbers) -> AppTest:
    at = AppTest.from_file(str(PAGE), default_timeout=180)
    at.run()  # build the widgets, then set them
    at.text_input(key="wi.curve.rates").set_value("4")
    at.sidebar.selectbox(key="wi.kv_cache.block_size").set_value(block_size)
    for key, value in numbers.items():
        at.sidebar.number_input(key=f"wi.{key}").set_value(value)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def tile(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_overload_is_said_above_the_tiles_only_when_the_queue_grows():
    calm = run()
    assert not [e for e in calm.main.error if "overloaded" in e.value]
    busy = run(**{"workload.arrival.rate": 60.0, "workload.num_requests": 600})
    said = [e.value for e in busy.main.error if "overloaded" in e.value]
    assert said and said[0].startswith("overloaded: arrivals") and "queue growing" in said[0]
    # ... and its TTFT reads in seconds or minutes, not a seven-digit number of ms
    assert tile(busy, "TTFT p99").endswith((" s", " min"))


def test_summary_tab_is_a_table_with_the_json_behind_an_expander():
    at = run()
    frames = [d.value for d in at.dataframe]
    summary = next(df for df in frames if list(df.columns) == ["section", "metric", "value"])
    assert {"Requests", "Time to first token (ms)"} <= set(summary["section"])
    assert "completed / rejected" in set(summary["metric"])
    assert any(e.label == "summary.json" for e in at.expander)


def test_gpu_utilisation_and_memory_split_are_shown():
    at = run()
    mfu = float(tile(at, "Model FLOPs utilisation").rstrip("%"))
    mbu = float(tile(at, "Memory bandwidth utilisation").rstrip("%"))
    assert 0 < mfu < 100 and 0 < mbu < 100
    assert tile(at, "Weights per GPU") == "16.1 GB"  # Llama 3.1 8B in fp16


def test_block_size_changes_what_the_kv_tab_shows():
    small, large = run(block_size=16), run(block_size=128)
    frag = lambda at: float(tile(at, "Fragmentation of memory in use").rstrip("%"))
    blocks = lambda at: int(tile(at, "KV blocks per replica").replace(",", ""))
    assert frag(large) > frag(small)
    assert 0 <= blocks(small) - 8 * blocks(large) < 8  # the same pool in blocks 8x larger


def test_synthetic_prompt_text_reaches_the_front_end():
    """The Workload panel's "Prompt text": synthetic prompts (random datasets' decoded ids) are
    tokenised at the measured factor, and TTFT grows by it."""
    import json

    from sim.catalog.frontends import SYNTHETIC_TOKENIZE_FACTOR, TOKENIZE_US_PER_TOKEN

    def front_end(at: AppTest) -> dict:
        docs = [json.loads(j.value) if isinstance(j.value, str) else j.value for j in at.json]
        return next(d for d in docs if "cost_model" in d)["cost_model"]["frontend"]

    natural = run()
    at = AppTest.from_file(str(PAGE), default_timeout=180)
    at.run()
    at.text_input(key="wi.curve.rates").set_value("4")
    at.sidebar.selectbox(key="wi.workload.prompt_text").set_value("synthetic")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert front_end(natural)["tokenize_us_per_token"] == pytest.approx(TOKENIZE_US_PER_TOKEN)
    assert front_end(at)["tokenize_us_per_token"] == pytest.approx(TOKENIZE_US_PER_TOKEN * SYNTHETIC_TOKENIZE_FACTOR)


def test_quantisation_scope_is_a_what_if_that_moves_the_weights():
    """An NVFP4 MoE checkpoint with its attention in BF16 (the default for NVIDIA's exports)
    holds more weight bytes than one quantised throughout: the tile says so."""
    def weights(scope: str) -> float:
        at = AppTest.from_file(str(PAGE), default_timeout=180)
        at.run()
        at.text_input(key="wi.curve.rates").set_value("2")
        at.sidebar.selectbox(key="wi.model").set_value("qwen3-30b-a3b")
        at.sidebar.selectbox(key="wi.hardware").set_value("b200")
        at.sidebar.selectbox(key="wi.dtype").set_value("bfloat16")
        at.sidebar.selectbox(key="wi.quantization.weights").set_value("nvfp4")
        at.sidebar.selectbox(key="wi.quantization.scope").set_value(scope)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return float(tile(at, "Weights per GPU").split()[0])

    assert weights("auto") > weights("all")
