"""DP attention with expert parallelism, priced from the measured operator tables.

What a user relies on: a ``parallel.data_parallel_size`` > 1 deployment of a MoE (vLLM's
``--data-parallel-size`` with ``--enable-expert-parallel``) is priced from the GPU's tables, not
refused to the roofline: one DP rank's attention and dense layers at its TP degree, the experts
from the MoE table's EP rows at every DP rank's tokens, and the NCCL all-gather +
reduce-scatter that moves those tokens over the DP group.
"""

from __future__ import annotations

import numpy as np
import pytest

from sim.api import resolve_deployment
from sim.catalog.engines import get_engine
from sim.policies.step import StepShape
from sim.pricing import make_pricer, table_data
from sim.pricing.operator_tables import TablesNotCovering, _loglog
from sim.pricing.table_data import latest_file, read_columns

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")
MINIMAX = "MiniMaxAI/MiniMax-M2.5"  # 256 experts of 1536, top 8, hidden 3072; block FP8


def _pricer(tp, dp, ep, hw="h100-sxm", version="0.18.0"):
    return make_pricer("operator_tables", MINIMAX, hw, dtype="bfloat16", weight_dtype="fp8_block",
                       tensor_parallel_size=tp, engine=get_engine("vllm", version),
                       max_num_seqs=1024, expert_parallel_size=ep, data_parallel_size=dp)


def _at(p, op, rows):
    i = int(np.searchsorted(p._gemm_m, rows))
    assert p._gemm_m[i] == rows
    return float(p._gemm_ms[op][i])


@needs_package
def test_dispatch_is_the_nccl_allgather_and_reduce_scatter_of_all_ranks_tokens(no_env):
    p = _pricer(4, 4, 16)
    nc = read_columns(latest_file(PACKAGE / "h100_sxm" / "comm" / "nccl", "nccl_perf"),
                      ("op_name", "nccl_dtype", "num_gpus", "message_size", "latency"))
    want = 0.0
    for op in ("all_gather", "reduce_scatter"):
        s = (nc["op_name"] == op) & (nc["nccl_dtype"] == "half") & (nc["num_gpus"] == 4)
        o = np.argsort(nc["message_size"][s])
        xs, ys = nc["message_size"][s][o].astype(float), nc["latency"][s][o].astype(float)
        want += _loglog(xs, ys, 64 * 4 * 3072)  # 64 rows per rank x 4 ranks x hidden
    assert _at(p, "ep_dispatch", 64) == pytest.approx(want, rel=1e-12)
    assert "ep_dispatch" not in _pricer(4, 1, 4)._gemm_ms  # EP inside one TP group: no DP move


@needs_package
def test_experts_come_from_the_ep_rows_at_the_gathered_token_count(no_env):
    p = _pricer(4, 4, 16)
    path = PACKAGE / "h100_sxm" / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
    c = read_columns(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                            "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"))
    sel = ((c["moe_dtype"] == "fp8_block") & (c["hidden_size"] == 3072) & (c["inter_size"] == 1536)
           & (c["num_experts"] == 256) & (c["topk"] == 8) & (c["moe_tp_size"] == 1)
           & (c["moe_ep_size"] == 16) & (c["distribution"] == "balanced") & (c["num_tokens"] == 1024))
    fastest = float(c["latency"][sel].min())
    # 256 rows on this rank stand for 4 x 256 = 1,024 tokens at every expert rank.
    assert _at(p, "experts", 256) == pytest.approx(fastest, rel=0.05)


@needs_package
def test_dp_ep_step_costs_more_than_one_tp_group_of_the_same_rows(no_env):
    """A DP rank's step moves and computes four ranks' tokens through its experts: dearer than
    the same rows on a TP-4 replica by the dispatch and the experts' extra tokens, and by
    nothing in attention."""
    dpep, tp = _pricer(4, 4, 16), _pricer(4, 1, 1)
    prefill = StepShape(num_prefill_tokens=4096, num_prefill_seqs=1,
                        prefill_attention_work=4096 * 4097 // 2)
    a, b = dpep.breakdown(prefill), tp.breakdown(prefill)
    assert a["attn_prefill"] == b["attn_prefill"]
    L = dpep.model.num_layers
    extra = L * (_at(dpep, "ep_dispatch", 4096) + _at(dpep, "experts", 4096)
                 - _at(tp, "experts", 4096)) * 1e-3
    assert a["rows"] - b["rows"] == pytest.approx(extra, rel=1e-6)
    assert a["total"] > b["total"]


@needs_package
def test_ep_groups_must_tile_tp_times_dp(no_env):
    with pytest.raises(TablesNotCovering, match="MoE TP x EP = tp x dp"):
        _pricer(4, 2, 3)


@needs_package
def test_moe_tp_x_ep_reads_the_split_rows(no_env):
    """SGLang's ``--ep-size`` below tp x dp (``parallel.expert_parallel_size``): Mixtral-8x7B on
    4 B200s as 2 EP groups of 2, each expert split in two: the MoE table's rows at MoE TP 2 x EP
    2, at 4,096 tokens (every expert touched, so the uniform router's scaling is 1)."""
    p = make_pricer("operator_tables", "mixtral-8x7b", "b200", dtype="bfloat16",
                    tensor_parallel_size=4, engine=get_engine("sglang"), max_num_seqs=256,
                    expert_parallel_size=2, expert_tensor_parallel_size=2)
    assert "ep=2, moe_tp=2" in p.describe()
    path = PACKAGE / "b200_sxm" / "moe" / "sglang" / p.tables_read["moe/moe_perf"] / "moe_perf.parquet"
    c = read_columns(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                            "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"))
    sel = ((c["moe_dtype"] == "bfloat16") & (c["hidden_size"] == 4096) & (c["inter_size"] == 14336)
           & (c["num_experts"] == 8) & (c["topk"] == 2) & (c["moe_tp_size"] == 2)
           & (c["moe_ep_size"] == 2) & (c["distribution"] == "balanced") & (c["num_tokens"] == 4096))
    assert sel.any()
    assert _at(p, "experts", 4096) == pytest.approx(float(c["latency"][sel].min()), rel=1e-9)
    # Not the pure-TP or pure-EP rows: the three layouts price differently.
    tp_only = make_pricer("operator_tables", "mixtral-8x7b", "b200", dtype="bfloat16",
                          tensor_parallel_size=4, engine=get_engine("sglang"), max_num_seqs=256)
    ep_only = make_pricer("operator_tables", "mixtral-8x7b", "b200", dtype="bfloat16",
                          tensor_parallel_size=4, engine=get_engine("sglang"), max_num_seqs=256,
                          expert_parallel_size=4)
    vals = {_at(x, "experts", 4096) for x in (p, tp_only, ep_only)}
    assert len(vals) == 3


@needs_package
def test_scenarios_with_dp_attention_are_priced_by_the_tables(no_env):
    dep = resolve_deployment({"model": MINIMAX, "hardware": "h100-sxm", "dtype": "bfloat16",
                              "quantization": {"weights": "fp8_block"},
                              "engine": {"name": "vllm", "version": "0.18.0"},
                              "parallel": {"tensor_parallel_size": 4, "data_parallel_size": 4,
                                           "enable_expert_parallel": True}})
    assert dep.cost_model_source == "operator_tables"
    assert "dp=4, ep=16" in dep.cost_model.describe()
    dense = resolve_deployment({"model": "llama-3.1-8b", "hardware": "h100-sxm",
                                "dtype": "bfloat16", "parallel": {"data_parallel_size": 2}})
    one = resolve_deployment({"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16"})
    assert dense.cost_model_source == "operator_tables"
    shape = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 1000)
    assert dense.cost_model.price(shape) == one.cost_model.price(shape)  # a dense DP rank is a replica
