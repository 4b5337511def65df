"""A fused-MoE table row is never priced faster than streaming the weights of the experts its
tokens are routed to, at the GPU's own measured streaming rate.

What a user relies on: DeepSeek-V3's decode steps are not priced with rows whose collector
routed every token to half the experts (DeepSeek's group-limited top-k on tied logits), and
a model whose rows are physically possible prices exactly as the rows say.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.engines import get_engine
from sim.catalog.models import get_model
from sim.pricing import make_pricer, table_data
from sim.pricing.operator_tables import MOE_WEIGHT_BYTES, weight_streaming_rate
from sim.pricing.table_data import read_columns

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")
ENGINE = get_engine("vllm", "0.24.0")


def test_streaming_rate_is_the_fastest_large_weight_read_of_the_gemm_table():
    mib = 2**20
    table = {  # (n x k bf16 weights at m rows, ms): 128 MiB in 0.04 ms, 64 MiB in 0.025, small
        "gemm_dtype": np.array(["bfloat16", "bfloat16", "bfloat16", "fp8", "bfloat16"]),
        "m": np.array([1, 8, 1, 1, 64]),
        "n": np.array([8192, 4096, 1024, 8192, 8192]),
        "k": np.array([8192, 8192, 1024, 8192, 8192]),
        "latency": np.array([0.04, 0.025, 0.0001, 0.001, 0.001]),
    }
    # Only bf16 rows of at most 16 rows and 64 MiB of weights count (the 2 MiB one sits in L2,
    # the fp8 and m=64 ones read other bytes): 128 MiB / 40 us.
    assert weight_streaming_rate(table) == pytest.approx(128 * mib / 40e-6)
    table["m"] = np.array([32, 32, 1, 1, 64])
    assert weight_streaming_rate(table) is None


@needs_package
def test_deepseek_decode_rows_are_raised_to_the_weights_they_must_read(no_env):
    p = make_pricer("operator_tables", "deepseek-v3", "h200", dtype="bfloat16", tensor_parallel_size=8,
                    weight_dtype="fp8_block", engine=ENGINE)
    m = get_model("deepseek-v3")
    rate = p.streaming_bytes_per_s
    assert 0.8 * 4.8e12 < rate < 4.8e12  # H200's HBM3e peak, as its own GEMM rows stream it
    assert any("faster than streaming the weights" in w for w in p.warnings())
    expert_bytes = 3 * m.hidden_size * m.intermediate_size / 8 * MOE_WEIGHT_BYTES["fp8_block"]
    rows = np.asarray(p._gemm_m)
    for tokens in (32, 64, 256):
        k = int(np.searchsorted(rows, tokens))
        assert rows[k] == tokens
        priced_s = float(p._gemm_ms["experts"][k]) / (m.num_moe_layers / m.num_layers) * 1e-3
        # The curve is the floored row scaled to a uniform router's touched experts.
        uniform = m.num_experts * (1 - (1 - m.num_experts_per_tok / m.num_experts) ** tokens)
        assert priced_s >= uniform * expert_bytes / rate * (1 - 1e-9)
    # The measured 0.24 row at 64 tokens is below that floor: 256 experts' shards in 0.27 ms.
    c = read_columns(PACKAGE / "h200_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet",
                     ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "num_experts", "topk",
                      "moe_tp_size", "moe_ep_size", "distribution", "latency"))
    sel = ((c["moe_dtype"] == "fp8_block") & (c["num_tokens"] == 64) & (c["hidden_size"] == 7168)
           & (c["inter_size"] == 2048) & (c["num_experts"] == 256) & (c["moe_tp_size"] == 8)
           & (c["moe_ep_size"] == 1) & (c["distribution"] == "balanced"))
    assert float(c["latency"][sel].min()) * 1e-3 < 256 * expert_bytes / rate


@needs_package
def test_rows_above_the_floor_price_as_measured_and_below_it_by_hand(no_env):
    """Mixtral's experts on H100 at TP 2 (8 large experts, top 2): every measured row reads at
    least its weights' time, so nothing is raised and no warning is given; a row below the floor
    is raised to exactly the touched experts' shards at the GPU's streaming rate."""
    p = make_pricer("operator_tables", "mixtral-8x7b", "h100-sxm", dtype="bfloat16", tensor_parallel_size=2,
                    engine=ENGINE)
    assert not any("faster than streaming" in w for w in p.warnings())
    shard = 3 * 4096 * 14336 / 2 * 2.0  # bytes of one expert's bf16 shard
    tokens = np.array([1.0, 2.0, 64.0])
    floor_ms = np.array([2, 4, 8]) * shard / p.streaming_bytes_per_s * 1e3  # min(8, 2T) experts
    slow = floor_ms * 1.5
    assert np.array_equal(p._floor_moe_rows(tokens, slow, np.array(["bfloat16"] * 3), 2, 1), slow)
    fast = floor_ms * 0.5
    assert p._floor_moe_rows(tokens, fast, np.array(["bfloat16"] * 3), 2, 1) == pytest.approx(floor_ms)
    # Under expert parallelism the rows' local routing is not known: left as measured.
    assert np.array_equal(p._floor_moe_rows(tokens, fast, np.array(["bfloat16"] * 3), 1, 2), fast)
