"""Engines run without CUDA graphs, or with fewer: vLLM's ``engine.enforce_eager`` and
``engine.cudagraph_mode``, SGLang's ``sglang.disable_cuda_graph``. A forward outside graphs waits
for the host to issue its ops (``eager_host_seconds``), whichever pricer prices the kernels."""

from __future__ import annotations

import pytest

from sim.api import resolve_deployment, simulate
from sim.errors import ConfigError
from sim.policies.step import StepShape
from sim.pricing import table_data
from sim.pricing.operator_tables import eager_host_seconds

PACKAGE = table_data.package_tables_root()
tables = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")

DECODE_ONE = StepShape(num_decode_seqs=1, decode_context_tokens=600)


@pytest.fixture
def package_tables(monkeypatch):
    """The installed package's tables (the suite prices with the roofline by default)."""
    monkeypatch.delenv(table_data.ENV_TABLES, raising=False)


@tables
def test_enforce_eager_prices_the_measured_eager_decode(package_tables):
    """vllm-project/vllm-omni#7960: Qwen2.5-7B's 28 layers on one A800 decoded a token in 22-23 ms
    with --enforce-eager and 13 ms with CUDA graphs. kvplan, on the A100-80GB's tables (the
    A800 is an A100 with slower NVLink, unused at TP 1): the same two regimes."""
    base = {"model": "qwen2.5-7b", "hardware": "a100-80gb", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}}
    graphs = resolve_deployment(base).cost_model
    eager = resolve_deployment({**base, "engine": {"enforce_eager": True}}).cost_model
    host = 28 * 0.8e-3
    assert eager_host_seconds(eager.model, 1) == pytest.approx(host)
    assert 22e-3 <= eager.price(DECODE_ONE) <= 24e-3
    assert graphs.price(DECODE_ONE) < 14e-3
    # A long prefill is GPU-bound either way: within the host floor's reach only below it.
    long = StepShape(num_prefill_tokens=8192, num_prefill_seqs=1, prefill_attention_work=8192 * 8193 // 2)
    assert eager.price(long) > host and eager.price(long) == pytest.approx(graphs.price(long), rel=0.05)
    assert "no cuda graphs (enforce_eager" in eager.describe()
    assert eager.capture_sizes == []


def test_the_roofline_gets_the_same_host_floor():
    base = {"model": "qwen2.5-7b", "hardware": "a100-80gb", "dtype": "bfloat16",
            "cost_model": {"source": "roofline"}}
    graphs = resolve_deployment(base).cost_model
    eager = resolve_deployment({**base, "engine": {"enforce_eager": True}}).cost_model
    host = 28 * 0.8e-3
    assert graphs.price(DECODE_ONE) < host <= eager.price(DECODE_ONE)
    assert eager.breakdown(DECODE_ONE)["eager_host_wait"] == pytest.approx(host - graphs.price(DECODE_ONE))
    assert eager.price(StepShape()) == 0.0  # an idle step costs nothing
    cols = {"num_decode_seqs": [1, 0], "decode_context_tokens": [600, 0]}
    assert list(eager.price_columns(cols)) == [eager.price(DECODE_ONE), 0.0]
    assert eager.decode_context_pricer(DECODE_ONE)(600) == eager.price(DECODE_ONE)
    assert "every forward eager" in eager.describe()


def test_enforce_eager_end_to_end_slows_decode_and_names_itself_in_the_summary():
    sets = ["model=qwen2.5-7b", "hardware=a100-80gb", "cost_model.source=roofline",
            "workload.num_requests=40", "workload.arrival.rate=2"]
    fast = simulate(None, overrides=sets, seed=0).summary
    slow = simulate(None, overrides=sets + ["engine.enforce_eager=true"], seed=0).summary
    assert slow["completed"] == fast["completed"] == 40
    assert slow["mean_tpot_ms"] >= 22.4 > fast["mean_tpot_ms"]
    assert "every forward eager" in slow["cost_model"]["description"]


@tables
def test_sglang_disable_cuda_graph_runs_decode_batches_eagerly(package_tables):
    """--disable-cuda-graph turns SGLang's decode graphs off; its piecewise extend graphs are a
    separate switch (0.5.14: on), so a small extend keeps its price."""
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}, "engine": {"name": "sglang", "version": "0.5.14"}}
    on = resolve_deployment(base).cost_model
    off = resolve_deployment({**base, "sglang": {"disable_cuda_graph": True}}).cost_model
    host = eager_host_seconds(on.model, 1)
    assert on.price(DECODE_ONE) < host / 2 and off.price(DECODE_ONE) >= host
    extend = StepShape(num_prefill_tokens=64, num_prefill_seqs=1, prefill_attention_work=64 * 65 // 2)
    assert off.extend_graph_tokens == on.extend_graph_tokens == 8192
    assert off.price(extend) == pytest.approx(on.price(extend), rel=1e-12)
    assert "decode batches eager (--disable-cuda-graph)" in off.describe()


def test_each_engine_refuses_the_others_flag():
    with pytest.raises(ConfigError, match="engine.enforce_eager: a vLLM flag; SGLang's is sglang.disable_cuda_graph"):
        resolve_deployment({"engine": {"name": "sglang", "enforce_eager": True}})


@tables
def test_cudagraph_modes_choose_which_steps_replay_graphs(package_tables):
    """vLLM's cudagraph_mode on Llama-3.1-8B / H100: FULL_AND_PIECEWISE (the default) replays a
    decode batch in one full graph and a small mixed step piecewise; FULL_DECODE_ONLY runs the
    mixed step outside graphs (the compiled step's 0.8 ms a layer); PIECEWISE prices a decode like
    a mixed step, FULL a mixed step like a decode; NONE runs every step outside graphs but still
    compiled, where enforce_eager issues every op; a prompt above the capture size is priced
    alike in all of them."""
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}}

    def pricer(mode: str = "auto", **engine):
        return resolve_deployment({**base, "engine": {"cudagraph_mode": mode, **engine}}).cost_model

    dec = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 600)
    mix = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 600, num_prefill_tokens=200,
                    num_prefill_seqs=1, prefill_attention_work=200 * 201 // 2)
    big = StepShape(num_prefill_tokens=2000, num_prefill_seqs=1, prefill_attention_work=2000 * 2001 // 2)
    auto, fpw = pricer(), pricer("FULL_AND_PIECEWISE")
    host = 32 * 0.8e-3
    assert [auto.price(s) for s in (dec, mix, big)] == [fpw.price(s) for s in (dec, mix, big)]
    decode_only = pricer("FULL_DECODE_ONLY")
    assert decode_only.price(dec) == auto.price(dec) and decode_only.price(mix) >= host > 2 * auto.price(mix)
    piecewise, full = pricer("PIECEWISE"), pricer("FULL")
    assert piecewise.price(dec) == pytest.approx(auto.price(dec), rel=0.01) and piecewise.price(dec) < host / 2
    assert full.price(mix) == pytest.approx(auto.price(mix), rel=0.01) and full.price(mix) < host / 2
    none = pricer("NONE")
    assert none.capture_sizes == [] and host <= none.price(dec) <= pricer(enforce_eager=True).price(dec)
    # At TP 2 the eager forward issues two all-reduces a layer more than the measured dense
    # layer's ops; the compiled one keeps 0.8 ms a layer.
    tp2 = {**base, "parallel": {"tensor_parallel_size": 2}}
    none2 = resolve_deployment({**tp2, "engine": {"cudagraph_mode": "NONE"}}).cost_model
    eager2 = resolve_deployment({**tp2, "engine": {"enforce_eager": True}}).cost_model
    assert none2.price(dec) < eager2.price(dec)
    assert len({round(p.price(big), 12) for p in (auto, decode_only, piecewise, full, none)}) == 1
    assert "(FULL_DECODE_ONLY)" in decode_only.describe() and "cudagraph_mode NONE" in none.describe()
    with pytest.raises(ConfigError, match="engine.cudagraph_mode: a vLLM setting"):
        resolve_deployment({"engine": {"name": "sglang", "cudagraph_mode": "PIECEWISE"}})
