"""Hybrid linear-attention models (Qwen3.5, Qwen3-Next: Gated DeltaNet layers beside gated full
attention): parameter counts against the published sizes, the per-request recurrent state and
the KV bytes of the full-attention layers only, SGLang's state pool (``mamba_full_memory_ratio``
and the third of it that caps running requests) and vLLM's state paged from the KV pool (taken,
held, given back), the GDN kernels read from the measured table, and whole runs that account for
every request."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sim.api import build_replica_scheduler, resolve_deployment, simulate
from sim.catalog.dtypes import resolve_precision
from sim.catalog.engines import sglang_max_running_requests
from sim.catalog.hardware import get_hardware
from sim.catalog.models import get_model, load_hf_config
from sim.errors import ConfigError
from sim.memory_plan import (SGLANG_MAMBA_FULL_MEMORY_RATIO, kv_bytes_per_token, plan_memory,
                             recurrent_state_bytes, split_state_pool)
from sim.policies.kv import PagedAllocator
from sim.policies.request import Request
from sim.policies.step import StepShape
from sim.pricing import table_data
from sim.pricing.roofline import RooflineCostModel
from sim.scenario import Scenario

# A small Qwen3-Next-style config (no layer_types: every 4th layer full attention), the keys
# kvplan reads; 8 layers, 2 of them full attention.
TINY_NEXT = {
    "model_type": "qwen3_next", "_name_or_path": "tiny/qwen3-next", "hidden_size": 1024,
    "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 2048, "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256,
    "num_experts": 16, "num_experts_per_tok": 2, "vocab_size": 32000, "full_attention_interval": 4,
    "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 64,
    "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4, "max_position_embeddings": 32768,
    "rope_theta": 10000000, "tie_word_embeddings": False,
}


@pytest.fixture
def tiny_next(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_NEXT))
    return str(path)


def test_config_layout_and_state_by_hand(tiny_next):
    m = load_hf_config(tiny_next)
    assert (m.num_layers, m.linear_attention_layers, m.num_full_attention_layers) == (8, 6, 2)
    assert m.attn_output_gate and m.num_shared_experts == 1 and m.intermediate_size == 256
    # One layer's state at TP 2: 4 value heads x 64 x 64 floats; the convolution window over
    # q, k, v ((2 x 4 x 64 + 8 x 64) / 2 = 512 channels) of kernel - 1 = 3 inputs.
    assert m.recurrent_state_elements(2) == (4 * 64 * 64, 512 * 3)
    prec = resolve_precision(get_hardware("h100-sxm"), "bfloat16")
    assert recurrent_state_bytes(m, prec, tp=2) == 6 * (4 * 64 * 64 * 4 + 512 * 3 * 2)
    # KV of the 2 full-attention layers only: K and V of one KV head (2 over TP 2) of 128.
    assert kv_bytes_per_token(m, prec, tp=2) == 2 * 2 * 1 * 128 * 2
    # Gated q (2 x 8 heads x 128) + K + V, and the GDN in/out projections, per layer.
    h = 1024
    assert m.attention_params == h * (2 * 1024 + 2 * 256) + 1024 * h
    assert m.linear_attention_params == h * (2 * 256 + 2 * 512 + 2 * 8) + 512 * h


def test_a_config_with_other_layer_types_is_refused(tmp_path):
    bad = dict(TINY_NEXT, layer_types=["linear_attention"] * 7 + ["sliding_attention"])
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="layer_types"):
        load_hf_config(str(path))


@pytest.mark.parametrize("hf_id, total, active", [
    # Qwen's model names: 397B total / 17B active, 122B / 10B, 35B / 3B, 27B dense (the names
    # include the vision encoder, which kvplan does not serve: within 2.5%).
    ("Qwen/Qwen3.5-397B-A17B", 397e9, 17e9), ("Qwen/Qwen3.5-122B-A10B", 122e9, 10e9),
    ("Qwen/Qwen3.5-35B-A3B", 35e9, 3e9), ("Qwen/Qwen3.5-27B", 27e9, 27e9),
])
def test_parameters_match_the_published_sizes(hf_id, total, active):
    try:
        m = get_model(hf_id)
    except ConfigError:
        pytest.skip("aiconfigurator-core (its model configs) not installed")
    assert m.is_hybrid_linear and m.num_full_attention_layers * 3 == m.linear_attention_layers
    assert m.params == pytest.approx(total, rel=0.025)
    assert m.active_params == pytest.approx(active, rel=0.2)


def test_tensor_parallelism_must_split_the_linear_heads(tiny_next):
    with pytest.raises(ConfigError, match="linear-attention heads"):
        plan_memory(load_hf_config(tiny_next), "h100-sxm", "bfloat16", tensor_parallel_size=8)


def test_sglang_state_pool_by_hand(tiny_next):
    sc = Scenario.from_dict({"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
                             "engine": {"name": "sglang"}, "cost_model": {"source": "roofline"}})
    dep = resolve_deployment(sc)
    mem = dep.memory
    per_req = recurrent_state_bytes(dep.model, resolve_precision(get_hardware("h100-sxm"), "bfloat16"))
    assert mem.state_bytes_per_request == per_req
    # Of the memory left after the weights, 0.9 / 1.9 holds whole states, the rest KV tokens.
    rest = mem.kv_pool_bytes + mem.max_state_requests * per_req
    assert mem.max_state_requests == int(rest * 0.9 / 1.9 // per_req)
    assert mem.num_kv_slots == int(mem.kv_pool_bytes // mem.kv_bytes_per_token)
    # Running requests: at most a third of the state slots (the rest keep finished states).
    sched = build_replica_scheduler(sc, mem.num_kv_slots, memory=mem)
    assert sched.config.max_num_seqs == min(mem.max_state_requests // 3,
                                            sglang_max_running_requests(mem.num_kv_slots, sc.kv_cache.max_model_len))
    # The ratio is a config key: a smaller one leaves more KV and fewer states.
    small = resolve_deployment(Scenario.from_dict({**sc.to_dict(), "sglang": {"mamba_full_memory_ratio": 0.1}}))
    assert small.memory.max_state_requests < mem.max_state_requests
    assert small.memory.num_kv_slots > mem.num_kv_slots


def test_sglang_state_pool_size_fixed_by_the_server(tiny_next):
    """SGLang's ``handle_max_mamba_cache`` branches: ``--max-mamba-cache-size`` states, else
    ``--max-running-requests`` of them with the radix cache off (one state a running request and
    nothing cached), each split over the DP-attention ranks; the KV pool takes the rest of the
    same memory. With the radix cache on, the ratio decides whatever the request cap."""
    base = {"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
            "engine": {"name": "sglang"}, "cost_model": {"source": "roofline"}}
    ratio = resolve_deployment(base).memory
    per_req = ratio.state_bytes_per_request
    rest = ratio.kv_pool_bytes + ratio.max_state_requests * per_req
    off = resolve_deployment({**base, "sglang": {"disable_radix_cache": True,
                                                 "max_running_requests": 48}})
    assert off.memory.max_state_requests == 48
    assert off.memory.kv_pool_bytes == pytest.approx(rest - 48 * per_req)
    assert off.memory.num_kv_slots == int((rest - 48 * per_req) // ratio.kv_bytes_per_token)
    assert build_replica_scheduler(Scenario.from_dict({**base, "sglang": {
        "disable_radix_cache": True, "max_running_requests": 48}}), off.memory.num_kv_slots,
        memory=off.memory).config.max_num_seqs == 48
    # Radix cache on: max_running_requests caps the batch but the pool is the ratio's.
    on = resolve_deployment({**base, "sglang": {"max_running_requests": 48}}).memory
    assert on.max_state_requests == ratio.max_state_requests
    # An explicit pool size wins over both, and DP attention splits it (and the request cap).
    fixed = resolve_deployment({**base, "sglang": {"max_mamba_cache_size": 100}}).memory
    assert fixed.max_state_requests == 100
    assert fixed.kv_pool_bytes == pytest.approx(rest - 100 * per_req)
    dp = resolve_deployment({**base, "parallel": {"data_parallel_size": 2},
                             "sglang": {"max_mamba_cache_size": 100}}).memory
    assert dp.max_state_requests == 50
    # A pool larger than the memory left is a one-line error naming the keys.
    with pytest.raises(ConfigError, match="sglang.max_mamba_cache_size"):
        resolve_deployment({**base, "sglang": {"max_mamba_cache_size": int(rest // per_req) + 1}})


def test_sglang_mamba_ssm_dtype_halves_the_state(tiny_next):
    """``--mamba-ssm-dtype bfloat16``: the recurrent state in 2-byte values (the convolution
    window stays in the activation dtype), so the ratio branch holds about twice the states and
    the running-request cap (a third of them) doubles; vLLM ignores the SGLang key."""
    base = {"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
            "engine": {"name": "sglang"}, "cost_model": {"source": "roofline"}}
    fp32 = resolve_deployment(base).memory
    bf16 = resolve_deployment({**base, "sglang": {"mamba_ssm_dtype": "bfloat16"}}).memory
    # 6 GDN layers at TP 1: 8 value heads x 64 x 64 values, conv (2 x 4 x 64 + 8 x 64) x 3 bf16.
    assert fp32.state_bytes_per_request == 6 * (8 * 64 * 64 * 4 + 1024 * 3 * 2)
    assert bf16.state_bytes_per_request == 6 * (8 * 64 * 64 * 2 + 1024 * 3 * 2)
    rest = fp32.kv_pool_bytes + fp32.max_state_requests * fp32.state_bytes_per_request
    assert bf16.max_state_requests == int(rest * 0.9 / 1.9 // bf16.state_bytes_per_request)
    assert bf16.max_state_requests > 1.8 * fp32.max_state_requests
    # A float32 key is the default; the key means nothing to vLLM.
    assert resolve_deployment({**base, "sglang": {"mamba_ssm_dtype": "float32"}}).memory == fp32
    vllm = {k: v for k, v in base.items() if k != "engine"}
    assert (resolve_deployment({**vllm, "sglang": {"mamba_ssm_dtype": "bfloat16"}}).memory
            == resolve_deployment(vllm).memory)
    with pytest.raises(ConfigError, match="sglang.mamba_ssm_dtype"):
        Scenario.from_dict({**base, "sglang": {"mamba_ssm_dtype": "fp8"}})


def test_split_state_pool_leaves_a_model_without_state_alone():
    plan = plan_memory("llama-3.1-8b", "h100-sxm", "bfloat16")
    assert split_state_pool(plan, SGLANG_MAMBA_FULL_MEMORY_RATIO) is plan


def test_sglang_caps_running_requests_at_a_third_of_the_state_pool(tiny_next):
    # A tiny state pool: 30 states, so at most 10 requests run at once under 40 clients; every
    # request still completes and no slot leaks. No API server: its per-request work would pace
    # the tiny model's requests in slower than the engine finishes them.
    cfg = {"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
           "engine": {"name": "sglang", "frontend": "none"},
           "cost_model": {"source": "roofline"},
           "workload": {"num_requests": 120, "arrival": {"process": "closed", "concurrency": 40},
                        "input_len": {"dist": "fixed", "mean": 300}, "output_len": {"dist": "fixed", "mean": 40}}}
    dep = resolve_deployment(cfg)
    per_req = dep.memory.state_bytes_per_request
    # mem_fraction_static such that the pool left after the weights holds 30 states at ratio 1
    # (half of it states, half KV: about 6,000 tokens, room for 10 requests of 340).
    frac = (dep.memory.weights_bytes + 60 * per_req + 1.0) / dep.memory.memory_bytes
    cfg["sglang"] = {"mem_fraction_static": frac, "mamba_full_memory_ratio": 1.0}
    dep = resolve_deployment(cfg)
    assert dep.memory.max_state_requests == 30
    res = simulate(cfg)
    assert res.summary["completed"] == 120
    assert all(r.num_preemptions == 0 for r in res.requests)  # no retraction: running = admitted
    # Never more than 10 requests between their first scheduled step and their finish.
    events = sorted([(r.first_scheduled_time, 1) for r in res.requests]
                    + [(r.finish_time, -1) for r in res.requests], key=lambda e: (e[0], e[1]))
    live = peak = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    assert peak == 10


def test_vllm_pages_each_request_state_from_the_kv_pool():
    # 100 blocks of 16 tokens; a request's state is 50 slots = 4 blocks (rounded up).
    pool = PagedAllocator(1600, block_size=16, state_slots=50)
    assert pool.state_blocks == 4
    a = Request("a", 0.0, prompt_len=40, max_output_tokens=10)
    assert pool.can_allocate(a, 40)
    assert pool.allocate(a, 40)
    assert pool.pool.num_free == 100 - 3 - 4  # 40 tokens in 3 blocks, and the state's 4
    assert pool.num_held_slots(a) == 3 * 16  # the state is not the request's token slots
    a.num_computed_tokens = 40
    assert pool.allocate(a, 1)  # decode growth takes no second state
    assert pool.pool.num_free == 100 - 3 - 4
    pool.check_invariants()
    pool.free(a)
    assert pool.pool.num_free == 100
    pool.check_invariants()
    # A request whose tokens fit but whose state does not waits.
    tight = PagedAllocator(16 * 6, block_size=16, state_slots=50)
    b = Request("b", 0.0, prompt_len=40, max_output_tokens=10)
    assert not tight.can_allocate(b, 40)
    assert not tight.allocate(b, 40)
    assert tight.pool.num_free == 6


def test_vllm_page_size_by_hand(tiny_next):
    """vLLM's hybrid pages: one layer's state (8 value heads x 64 x 64 floats + 1,024 conv
    channels x 3 bf16 = 137,216 bytes) over one token's K and V in a layer (2 heads x 128 x 2 x 2
    bytes = 1,024): 16 x cdiv(137216, 16 x 1024) = 144-token blocks, and 6 state layers in groups
    of the 2 attention layers: 3 pages a request."""
    from sim.run_parts import vllm_hybrid_pages

    sc = Scenario.from_dict({"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
                             "cost_model": {"source": "roofline"}})
    dep = resolve_deployment(sc)
    assert vllm_hybrid_pages(dep.model, dep.memory, 16) == (144, 3 * 144)
    assert vllm_hybrid_pages(dep.model, dep.memory, 256)[0] == 256  # the configured size aligns
    sched = build_replica_scheduler(sc, dep.memory.num_kv_slots, memory=dep.memory)
    assert sched.allocator.block_size == 144 and sched.allocator.state_blocks == 3


def test_vllm_run_accounts_for_every_request(tiny_next):
    res = simulate({"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
                    "cost_model": {"source": "roofline"}, "kv_cache": {"num_gpu_blocks": 400},
                    "workload": {"num_requests": 80, "arrival": {"process": "poisson", "rate": 50.0},
                                 "input_len": {"dist": "fixed", "mean": 400},
                                 "output_len": {"dist": "fixed", "mean": 60}}})
    assert res.summary["completed"] == 80
    assert all(r.finish_time is not None for r in res.requests)


def test_block_counts_are_the_engines_own(tiny_next):
    """``kv_cache.num_gpu_blocks`` and the summary's ``num_gpu_blocks`` count blocks as each engine
    does: vLLM's hybrid pages of the raised attention block (144 tokens here); SGLang's KV pool
    of ``block_size`` tokens (its page size, 1 by default), its state pool sized from memory beside it (the blocks asked for
    are KV tokens, not carved up for states)."""
    base = {"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "roofline"}, "workload": {"num_requests": 4}}
    free = resolve_deployment(base)
    res = simulate(base)
    assert res.summary["scenario"]["attention_block_size"] == 144
    assert res.summary["num_gpu_blocks"] == free.memory.num_kv_slots // 144
    fixed = resolve_deployment({**base, "kv_cache": {"num_gpu_blocks": 400}})
    assert fixed.memory.num_kv_slots == 400 * 144
    sg = {**base, "engine": {"name": "sglang"}}
    sized = resolve_deployment(sg).memory
    pinned = resolve_deployment({**sg, "kv_cache": {"num_gpu_blocks": 400}}).memory
    assert pinned.num_kv_slots == 400 * Scenario.from_dict(sg).kv_cache.block_size
    assert pinned.max_state_requests == sized.max_state_requests
    assert simulate({**sg, "kv_cache": {"num_gpu_blocks": 400}}).summary["num_gpu_blocks"] == 400


def test_prefix_caching_is_off_for_a_hybrid_model(tiny_next):
    sc = Scenario.from_dict({"model": tiny_next, "hardware": "h100-sxm", "dtype": "bfloat16",
                             "cost_model": {"source": "roofline"}, "kv_cache": {"prefix_caching": True}})
    sched = build_replica_scheduler(sc, 16 * 1000)
    assert not sched.allocator.caches_prefixes


def test_roofline_prices_the_linear_layers_apart(tiny_next):
    m = load_hf_config(tiny_next)
    cm = RooflineCostModel(m, "h100-sxm", dtype="bfloat16")
    dec = StepShape(num_decode_seqs=8, decode_context_tokens=8 * 1000)
    parts = cm.breakdown(dec)
    # Six layers' recurrent steps; attention only over the two full-attention layers.
    assert parts["linear_attention"] == pytest.approx(6 * cm.linear_attention_time(0, 0, 8))
    assert parts["attn_decode"] == pytest.approx(2 * cm.attn_decode_time(8, 8000))
    assert sum(v for k, v in parts.items()) == pytest.approx(cm.price(dec), rel=1e-9)
    # Decode reads each sequence's state once: linear in the batch above the fixed latency.
    one, two = cm.linear_attention_time(0, 0, 8), cm.linear_attention_time(0, 0, 16)
    lat = cm.efficiency.attention_latency_s
    assert two - lat == pytest.approx(2 * (one - lat))


# --- the measured GDN table ------------------------------------------------------------------

def test_gdn_kernels_are_the_measured_rows(installed_tables):
    import pyarrow.parquet as pq

    try:
        dep = resolve_deployment({"model": "Qwen/Qwen3.5-397B-A17B", "hardware": "b200",
                                  "engine": {"name": "sglang"}, "parallel": {"tensor_parallel_size": 4},
                                  "quantization": {"weights": "fp8_block"}, "kv_cache": {"dtype": "fp8"}})
    except ConfigError:
        pytest.skip("aiconfigurator-core (Qwen3.5 config) not installed")
    cm = dep.cost_model
    assert dep.cost_model_source == "operator_tables" and "linear-attention" in cm.describe()
    path = table_data.gpu_dir(cm.tables, "b200") / "linear_attention" / "sglang" / cm.tables_read[
        "linear_attention/gdn_perf"] / "gdn_perf.parquet"
    rows = [r for r in pq.read_table(path).to_pylist()
            if r["num_k_heads"] == 4 and r["num_v_heads"] == 16 and r["d_model"] == 4096]

    def ms(kernel: str, batch: int, seq: int) -> float:
        vals = [r["latency"] for r in rows if r["kernel_source"] == kernel
                and r["batch_size"] == batch and r["seq_len"] == seq]
        return float(np.median(vals))

    # Decode of 32: the convolution update and the recurrent step at batch 32, 45 layers.
    dec = cm.breakdown(StepShape(num_decode_seqs=32, decode_context_tokens=32 * 1000))
    step = [k for k in {r["kernel_source"] for r in rows if r["phase"] == "generation"}
            if k != "causal_conv1d_update"][0]
    want = 45 * (ms("causal_conv1d_update", 32, 1) + ms(step, 32, 1)) * 1e-3
    assert dec["linear_attention"] == pytest.approx(want, rel=1e-6)
    # A 4096-token prompt: the convolution and the chunked rule at (1, 4096); the table is
    # made monotone, so at least the raw rows there.
    pre = cm.breakdown(StepShape(num_prefill_seqs=1, num_prefill_tokens=4096,
                                 prefill_attention_work=4096 * 4097 // 2))
    raw = 45 * (ms("causal_conv1d_fn", 1, 4096) + ms("chunk_gated_delta_rule", 1, 4096)) * 1e-3
    assert raw <= pre["linear_attention"] <= 1.25 * raw
    # Head width 256 read from its own attention rows, not scaled from 128.
    assert not any("head_dim 128" in w for w in cm.warnings())


def test_vllm_prices_its_own_gdn_kernels(installed_tables):
    """vLLM's B200 table names its chunked rule ``chunk_gated_delta_rule_flashinfer``: read as
    the chunked rule, so a vLLM deployment is priced from vLLM's GDN rows, not the roofline."""
    try:
        dep = resolve_deployment({"model": "Qwen/Qwen3.5-397B-A17B", "hardware": "b200",
                                  "parallel": {"tensor_parallel_size": 4},
                                  "quantization": {"weights": "fp8_block"}, "kv_cache": {"dtype": "fp8"}})
    except ConfigError:
        pytest.skip("aiconfigurator-core (Qwen3.5 config) not installed")
    assert dep.cost_model_source == "operator_tables"
    assert "chunk_gated_delta_rule_flashinfer" in dep.cost_model.describe()
    assert dep.cost_model.tables_read["linear_attention/gdn_perf"].startswith("0.")
