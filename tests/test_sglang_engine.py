"""``engine.name: sglang`` as a user sets it: SGLang's defaults by GPU (server_args), its memory
plan (``mem_fraction_static``), its CUDA graphs and overlap scheduler in the step price, its
tables with their fallback, and whole runs (every request accounted for, the radix cache's
token-granular hits, DP attention with EP)."""

from __future__ import annotations

import numpy as np
import pytest

from sim.api import resolve_deployment, simulate
from sim.catalog.engines import (DEFAULT_SGLANG_VERSION, get_engine, sglang_chunked_prefill_size,
                                 sglang_cuda_graph_max_bs, sglang_max_running_requests,
                                 sglang_mem_fraction_static)
from sim.catalog.hardware import get_hardware
from sim.errors import ConfigError
from sim.policies.step import StepShape
from sim.pricing import table_data
from sim.scenario import Scenario

SG = {"engine": {"name": "sglang"}}


PACKAGE = table_data.package_tables_root()
tables = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")


@pytest.fixture
def package_tables(monkeypatch):
    """The installed package's tables (the suite prices with the roofline by default)."""
    monkeypatch.delenv(table_data.ENV_TABLES, raising=False)


# --- defaults from server_args ---------------------------------------------------------------

@pytest.mark.parametrize("gpu, chunk, graph_bs_tp1, graph_bs_tp4", [
    ("l4", 2048, 24, 80),          # 24 GiB
    ("l40s", 4096, 32, 160),       # 48 GiB
    ("h100-sxm", 8192, 256, 512),  # 80 GiB
    ("h200", 8192, 256, 512),      # 141 GiB
    ("b200", 16384, 512, 512),     # 180 GiB
])
def test_gpu_memory_defaults(gpu, chunk, graph_bs_tp1, graph_bs_tp4):
    hw = get_hardware(gpu)
    assert sglang_chunked_prefill_size(hw) == chunk
    assert sglang_cuda_graph_max_bs(hw, 1) == graph_bs_tp1
    assert sglang_cuda_graph_max_bs(hw, 4) == graph_bs_tp4
    assert get_engine("sglang").default_max_num_batched_tokens(hw) == chunk
    sizes = get_engine("sglang").capture_sizes(0, hw, 1)
    assert sizes[:6] == [1, 2, 4, 8, 12, 16] and sizes[-1] == graph_bs_tp1


def test_mem_fraction_static_by_hand():
    h100 = get_hardware("h100-sxm")  # 81920 MiB: reserved 9.5 + tp x pp / 2 GiB
    assert sglang_mem_fraction_static(h100, 1) == round((81920 - 10.0 * 1024) / 81920, 3) == 0.875
    assert sglang_mem_fraction_static(h100, 8) == round((81920 - 13.5 * 1024) / 81920, 3)
    assert sglang_mem_fraction_static(h100, 1, speculative=True) == round((81920 - 12.0 * 1024) / 81920, 3)
    assert sglang_mem_fraction_static(h100, 2, dp_attention=True) == round((81920 - 14.5 * 1024) / 81920, 3)
    b200 = get_hardware("b200")  # above 160 GiB: 32 GiB reserved whatever the TP
    assert sglang_mem_fraction_static(b200, 8) == round((180 * 1024 - 32 * 1024) / (180 * 1024), 3)


def test_max_running_requests_default():
    # Half the pool, at most the request pool's rows: max(pool / context x 512, 2048) <= 4096.
    assert sglang_max_running_requests(100_000, 4096) == 4096   # rows 12500 -> 4096; pool/2 50000
    assert sglang_max_running_requests(10_000, 4096) == 2048    # rows 1250 -> 2048; pool/2 5000
    assert sglang_max_running_requests(3_000, 4096) == 1500     # rows 2048; pool/2 1500


def test_version_default_and_refusals():
    sc = Scenario.from_dict(SG)
    assert sc.engine.version == DEFAULT_SGLANG_VERSION
    assert sc.scheduler.policy == "sglang" and sc.kv_cache.allocator == "radix"
    assert sc.kv_cache.block_size == 1 and sc.kv_cache.prefix_caching
    assert Scenario.from_dict(sc.to_dict()) == sc   # the rewrite is idempotent
    assert Scenario.from_dict({"engine": {"name": "sglang", "version": "0.5.9"}}).engine.release.version == (0, 5, 9)
    with pytest.raises(ConfigError, match="engine.version: SGLang 0.4.0 is not modelled"):
        Scenario.from_dict({"engine": {"name": "sglang", "version": "0.4.0"}})
    with pytest.raises(ConfigError, match="scheduler.policy"):
        Scenario.from_dict({"engine": {"name": "sglang"}, "scheduler": {"policy": "vllm_v0"}})
    with pytest.raises(ConfigError, match="engine.name sglang"):
        Scenario.from_dict({"scheduler": {"policy": "sglang"}})
    with pytest.raises(ConfigError, match="engine.name sglang"):
        Scenario.from_dict({"kv_cache": {"allocator": "radix"}})
    with pytest.raises(ConfigError, match="sglang.schedule_policy"):
        Scenario.from_dict({"engine": {"name": "sglang"}, "sglang": {"schedule_policy": "sjf"}})
    off = Scenario.from_dict({"engine": {"name": "sglang"}, "sglang": {"disable_radix_cache": True, "page_size": 16}})
    assert not off.kv_cache.prefix_caching and off.kv_cache.block_size == 16


def test_overlap_scheduler_and_decode_only_graphs():
    rel = get_engine("sglang")
    assert rel.async_default(False) and not rel.async_default(True)   # off with speculation
    assert rel.cudagraph_mode == "DECODE_ONLY"


# --- memory plan and price -------------------------------------------------------------------

def test_memory_plan_is_mem_fraction_static_minus_weights():
    dep = resolve_deployment({**SG, "model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
                              "cost_model": {"source": "roofline"}})
    m = dep.memory
    assert m.gpu_memory_utilization == 0.875 and m.activation_reserve_bytes == 0
    assert m.kv_pool_bytes == pytest.approx(0.875 * 80 * 2**30 - m.weights_bytes)
    assert m.num_kv_slots == int(m.kv_pool_bytes // m.kv_bytes_per_token)
    given = resolve_deployment({**SG, "model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
                                "sglang": {"mem_fraction_static": 0.7}, "cost_model": {"source": "roofline"}})
    assert given.memory.kv_pool_bytes == pytest.approx(0.7 * 80 * 2**30 - m.weights_bytes)


@tables
def test_extends_run_eagerly_before_0_5_10_and_in_piecewise_graphs_after(package_tables):
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}}

    def pricer(version: str, **sglang):
        return resolve_deployment({**base, "engine": {"name": "sglang", "version": version},
                                   "sglang": sglang}).cost_model

    old, new = pricer("0.5.9"), pricer("0.5.14")
    vl = resolve_deployment(base).cost_model
    assert old.capture_sizes[-1] == 256 and vl.capture_sizes[-1] == 512
    host = 32 * 0.8e-3  # Llama-3.1-8B's 32 layers at the eager host's 0.8 ms each
    # A small prompt chunk. 0.5.9 runs it eagerly: the host's time to issue 32 layers bounds it.
    shape = StepShape(num_prefill_tokens=8, num_prefill_seqs=1, prefill_attention_work=36)
    assert old.extend_graph_tokens == 0 and old.price(shape) >= host
    # 0.5.14 captures extends up to chunked_prefill_size (8192 on an H100) in piecewise graphs,
    # as vLLM does its mixed batches: far under the host floor, and priced alike.
    assert new.extend_graph_tokens == 8192 and new.price(shape) < host / 2
    # cost_model's description says which, and why not.
    assert "extends in piecewise graphs up to 8192 tokens" in new.describe()
    assert "extends eager: SGLang 0.5.9 runs extends eagerly unless --enable-piecewise-cuda-graph" in old.describe()
    assert new.price(shape) == pytest.approx(vl.price(shape), rel=0.5)
    # Opting in before 0.5.10, or out after, swaps the two.
    assert pricer("0.5.9", enable_piecewise_cuda_graph=True).price(shape) == pytest.approx(new.price(shape))
    assert pricer("0.5.14", disable_piecewise_cuda_graph=True).price(shape) == pytest.approx(old.price(shape))
    # Past the largest captured size an extend runs eagerly again.
    capped = pricer("0.5.14", piecewise_cuda_graph_max_tokens=4)
    assert capped.extend_graph_tokens == 4 and capped.price(shape) == pytest.approx(old.price(shape))
    # Decode batches replay full graphs on every release.
    dec = StepShape(num_decode_seqs=8, decode_context_tokens=8 * 500)
    assert old.price(dec) == pytest.approx(new.price(dec)) and old.price(dec) < host / 2


@tables
def test_cuda_graph_max_bs_cuts_or_extends_the_decode_graphs(package_tables):
    """``sglang.cuda_graph_max_bs`` (``--cuda-graph-max-bs``, which InferenceX's DeepSeek, GLM-5
    and Qwen3.5 scripts set): SGLang's capture list cut to N, or extended past 256 by 16s; a
    decode batch above it runs eagerly, at the host's time to issue every layer."""
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}, "engine": {"name": "sglang", "version": "0.5.14"}}

    def pricer(**sglang):
        return resolve_deployment({**base, "sglang": sglang}).cost_model

    default, cut, wide = pricer(), pricer(cuda_graph_max_bs=32), pricer(cuda_graph_max_bs=512)
    assert default.capture_sizes[-1] == 256  # an H100 at TP 1: SGLang's default
    assert cut.capture_sizes == [1, 2, 4, 8, 12, 16, 24, 32]
    assert wide.capture_sizes[-1] == 512 and 272 in wide.capture_sizes and 264 not in wide.capture_sizes
    host = 32 * 0.8e-3  # Llama-3.1-8B's 32 layers at the eager host's 0.8 ms each
    inside = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 500)
    above = StepShape(num_decode_seqs=40, decode_context_tokens=40 * 500)
    assert cut.price(inside) == pytest.approx(default.price(inside), rel=1e-12)
    assert cut.price(above) >= host > 2 * default.price(above)
    # A 300-request batch: eager under the default list, a replayed graph (padded to 304) above it.
    big = StepShape(num_decode_seqs=300, decode_context_tokens=300 * 500)
    assert default.price(big) >= host > wide.price(big)
    assert "cuda graphs up to 32 tokens" in cut.describe()
    # vLLM's key is refused for SGLang, naming SGLang's.
    with pytest.raises(ConfigError, match="sglang.cuda_graph_max_bs"):
        resolve_deployment({**base, "engine": {"name": "sglang", "max_cudagraph_capture_size": 64}})


@tables
def test_an_extend_in_piecewise_graphs_costs_the_captured_size_that_runs_it(package_tables):
    from sim.catalog.engines import sglang_pcg_capture_sizes

    sizes = sglang_pcg_capture_sizes(8192)
    # ServerArgs._generate_piecewise_cuda_graph_tokens: steps of 4, 16, 32, 64, 256, 512.
    assert sizes[:9] == [4, 8, 12, 16, 20, 24, 28, 32, 48] and len(sizes) == 58
    assert {512, 576, 1024, 1280, 4096, 4608, 8192} <= set(sizes) and 1088 not in sizes
    base = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
            "cost_model": {"source": "operator_tables"}}
    sg = resolve_deployment({**base, "engine": {"name": "sglang", "version": "0.5.14"}}).cost_model
    vl = resolve_deployment(base).cost_model

    def rows(pricer, n):
        return pricer.breakdown(StepShape(num_prefill_tokens=n, num_prefill_seqs=1,
                                          prefill_attention_work=n * (n + 1) // 2))["rows"]

    # 1,000 tokens run the 1,024 graph; 1,025 the 1,280 one: GEMMs over the padded rows.
    assert rows(sg, 1000) == rows(sg, 1024) < rows(sg, 1025) == rows(sg, 1280)
    # vLLM's mixed batches above its capture sizes run at their own rows.
    assert rows(vl, 1000) < rows(vl, 1024) < rows(vl, 1025)
    # A limit between two captured sizes is not captured itself (SGLang lists only its sizes):
    # 3,000 captures up to 2,816, and a 2,900-token extend runs eagerly, above the host floor.
    odd = resolve_deployment({**base, "engine": {"name": "sglang", "version": "0.5.14"},
                              "sglang": {"piecewise_cuda_graph_max_tokens": 3000}}).cost_model
    assert odd.extend_graph_tokens == 2816 and "up to 2816 tokens" in odd.describe()
    assert rows(odd, 2800) == rows(sg, 2816)
    eager = resolve_deployment({**base, "engine": {"name": "sglang", "version": "0.5.14"},
                                "sglang": {"disable_piecewise_cuda_graph": True}}).cost_model
    assert rows(odd, 2900) == rows(eager, 2900) != rows(sg, 2900)
    # price and price_columns agree bit for bit on padded extends.
    cols = {"num_prefill_tokens": np.array([1000, 1025]), "num_prefill_seqs": np.array([1, 1]),
            "num_decode_seqs": np.array([0, 0]),
            "prefill_attention_work": np.array([1000 * 1001 // 2, 1025 * 1026 // 2])}
    assert sg.price_columns(cols).tolist() == [
        sg.price(StepShape(num_prefill_tokens=n, num_prefill_seqs=1, prefill_attention_work=n * (n + 1) // 2))
        for n in (1000, 1025)]


def test_piecewise_graphs_follow_sglangs_release_and_auto_disable_rules():
    from sim.catalog.engines import get_engine, sglang_extend_graph_tokens

    new, old = get_engine("sglang", "0.5.10"), get_engine("sglang", "0.5.9")
    assert sglang_extend_graph_tokens(new, chunked_prefill_size=8192)[0] == 8192
    assert sglang_extend_graph_tokens(new, chunked_prefill_size=8192, mla=True)[0] == 2048
    assert sglang_extend_graph_tokens(old, chunked_prefill_size=8192)[0] == 0
    assert sglang_extend_graph_tokens(old, chunked_prefill_size=8192, enable=True)[0] == 8192
    for off in ({"multimodal": True}, {"data_parallel_size": 2}, {"pipeline_parallel_size": 2},
                {"disable": True}):
        tokens, why = sglang_extend_graph_tokens(new, chunked_prefill_size=8192, **off)
        assert tokens == 0 and why.startswith("off"), off
    assert sglang_extend_graph_tokens(get_engine("vllm"), chunked_prefill_size=8192)[0] == 0


@tables
def test_tables_fall_back_to_vllms_with_a_warning(package_tables):
    # SGLang's DSA module rows hold no FP8-KV rows at GLM-5's 8 heads a rank on 8 B200s.
    dep = resolve_deployment({**SG, "model": "zai-org/GLM-5", "hardware": "b200",
                              "parallel": {"tensor_parallel_size": 8}, "quantization": {"weights": "nvfp4"},
                              "kv_cache": {"max_model_len": 8192, "dtype": "fp8"},
                              "cost_model": {"source": "operator_tables"}})
    assert dep.cost_model.backend == "vllm" and dep.cost_model.engine.name == "sglang"
    assert any("priced from vLLM's tables" in w for w in dep.cost_model.warnings())
    own = resolve_deployment({**SG, "model": "llama-3.1-8b", "hardware": "h100-sxm", "dtype": "bfloat16",
                              "cost_model": {"source": "operator_tables"}})
    assert own.cost_model.backend == "sglang"
    assert set(own.cost_model.tables_read.values()) == {"0.5.14"}


@tables
@pytest.mark.parametrize("gpu, tp, heads, weights", [("h200", 8, 16, "fp8_block"), ("b200", 4, 32, "nvfp4")])
def test_deepseek_reads_sglangs_own_mla_rows_at_its_heads_a_rank(package_tables, gpu, tp, heads, weights):
    """SGLang 0.5.14's op-level MLA tables time the kernel at a head count under the collector's
    own split (16 heads at ``tp_size`` 4); DeepSeek at TP 8 runs the same 16-head kernel, so its
    attention (and every other op) is priced from SGLang's tables, not vLLM's: the decode
    attention at batch 64 and a 2,048-token KV is the table's row at this head count, batch 64
    and ``step`` 2,047 (tokens cached before the new one)."""
    import pyarrow.parquet as pq

    dep = resolve_deployment({**SG, "model": "deepseek-ai/DeepSeek-R1", "hardware": gpu,
                              "parallel": {"tensor_parallel_size": tp},
                              "quantization": {"weights": weights}, "kv_cache": {"max_model_len": 8192},
                              "cost_model": {"source": "operator_tables"}})
    cm = dep.cost_model
    assert cm.backend == "sglang" and not any("vLLM's tables" in w for w in cm.warnings())
    table = PACKAGE / f"{gpu}_sxm" / "mla" / "sglang" / "0.5.14" / "generation_mla_perf.parquet"
    t = pq.read_table(table).to_pydict()
    rows = [t["latency"][i] for i in range(len(t["latency"]))
            if t["num_heads"][i] == heads and t["batch_size"][i] == 64 and t["step"][i] == 2047
            and t["kv_cache_dtype"][i] == ("fp8" if cm.precision.kv_bytes == 1 else "bfloat16")]
    assert rows and all(tp_ != tp for tp_, h in zip(t["tp_size"], t["num_heads"]) if h == heads)
    assert cm._dec.at(64, 2048) == pytest.approx(sorted(rows)[len(rows) // 2] * 1e-3, rel=0.05)


@tables
def test_sglang_all_reduces_through_its_own_custom_all_reduce(package_tables):
    """SGLang's decode all-reduce is its custom all-reduce's graph rows (``sglang_graph``), not
    NCCL's: on 8 B200s a decode step's 8k values take 6-7 us there against NCCL's ~27 us."""
    from sim.pricing.table_data import read_columns

    dep = resolve_deployment({**SG, "model": "llama-3.1-8b", "hardware": "b200", "dtype": "bfloat16",
                              "parallel": {"tensor_parallel_size": 8},
                              "cost_model": {"source": "operator_tables"}})
    cm = dep.cost_model
    assert cm.backend == "sglang"
    elements = 8 * cm.model.hidden_size  # 8 decode rows
    f = cm.gpu_dir / "comm" / "sglang" / cm.tables_read["comm/custom_allreduce_perf"] / "custom_allreduce_perf.parquet"
    c = read_columns(f, ("backend", "num_gpus", "message_size", "latency"))
    sel = (c["backend"] == "sglang_graph") & (c["num_gpus"] == 8) & (c["message_size"] == elements)
    assert sel.sum() == 1  # measured at exactly this size
    assert cm._allreduce_ms(np.array([float(elements)]), graph=True)[0] == pytest.approx(
        float(c["latency"][sel][0]))
    assert cm._allreduce_ms(np.array([float(elements)]), graph=False)[0] > cm._allreduce_ms(
        np.array([float(elements)]), graph=True)[0]


# --- whole runs --------------------------------------------------------------------------------

def _workload(n: int = 80, rate: float = 30.0, **extra) -> dict:
    return {"num_requests": n, "arrival": {"process": "poisson", "rate": rate},
            "input_len": {"dist": "lognormal", "mean": 600, "cv": 0.5, "min": 16, "max": 2000},
            "output_len": {"dist": "lognormal", "mean": 120, "cv": 0.5, "min": 4, "max": 400}, **extra}


def test_a_run_accounts_for_every_request_and_leaks_no_slot():
    res = simulate({**SG, "model": "llama-3.1-8b", "hardware": "a100-80gb", "workload": _workload(),
                    "kv_cache": {"num_gpu_blocks": 6000}, "cost_model": {"source": "roofline"}})
    s = res.summary
    assert s["completed"] + s.get("rejected", 0) == 80
    assert all(r.finish_time is not None for r in res.requests)
    assert s["scenario"]["scheduler"] == "sglang" and s["scenario"]["allocator"] == "radix"


def test_retraction_under_memory_pressure_loses_nobody():
    # A pool of 6000 tokens under 80 requests of ~720 tokens: admission overcommits as the
    # ratio falls, the decode batch runs out, requests are retracted and come back.
    res = simulate({**SG, "model": "llama-3.1-8b", "hardware": "a100-80gb",
                    "workload": _workload(rate=200.0), "kv_cache": {"num_gpu_blocks": 6000},
                    "cost_model": {"source": "roofline"}})
    assert res.summary["completed"] == 80
    assert sum(r.num_preemptions for r in res.requests) > 0


def test_radix_cache_hits_at_token_granularity_where_vllm_hits_whole_blocks():
    # A 1000-token system prompt (not a multiple of vLLM's 16-token blocks) shared by all.
    wl = _workload(n=60, rate=5.0, prefix={"num_prefixes": 1, "length": 1000, "hash_block_size": 1})
    common = {"model": "llama-3.1-8b", "hardware": "a100-80gb", "workload": wl,
              "cost_model": {"source": "roofline"}}
    sg = simulate({**common, **SG}).summary
    vl = simulate({**common, "kv_cache": {"prefix_caching": True}}).summary
    sg_rate, vl_rate = sg["kv_cache"]["prefix_cache_hit_rate"], vl["kv_cache"]["prefix_cache_hit_rate"]
    assert vl_rate > 0.5
    # Every request but the first hits the whole 1000-token prefix in the radix cache; vLLM
    # hits its 62 full 16-token blocks (992 tokens).
    assert sg_rate > vl_rate


def test_dp_attention_with_expert_parallelism():
    res = simulate({**SG, "model": "qwen3-30b-a3b", "hardware": "h100-sxm", "dtype": "bfloat16",
                    "parallel": {"tensor_parallel_size": 2, "data_parallel_size": 2,
                                 "enable_expert_parallel": True},
                    "sglang": {"max_running_requests": 64},
                    "workload": _workload(n=40), "cost_model": {"source": "roofline"}})
    assert res.summary["completed"] == 40
    dep = resolve_deployment({**SG, "model": "qwen3-30b-a3b", "hardware": "h100-sxm", "dtype": "bfloat16",
                              "parallel": {"tensor_parallel_size": 2, "data_parallel_size": 2,
                                           "enable_expert_parallel": True},
                              "cost_model": {"source": "roofline"}})
    # DP attention reserves 4 GiB more: (81920 - (9.5 + 1 + 4) x 1024) / 81920.
    assert dep.memory.gpu_memory_utilization == round((81920 - 14.5 * 1024) / 81920, 3)


def test_same_seed_same_result():
    cfg = {**SG, "model": "llama-3.1-8b", "hardware": "a100-80gb", "workload": _workload(n=40),
           "cost_model": {"source": "roofline"}}
    assert simulate(cfg, seed=3).summary == simulate(cfg, seed=3).summary


# --- --scheduler-recv-interval -----------------------------------------------------------------

def test_recv_skipper_counts_decode_steps_and_polls_after_every_extend():
    """SchedulerRecvSkipper.handle: a decode step weighs 1, an extend batch enough to poll; the
    counter restarts at each poll, and a decode window keeps only its phase."""
    from sim.policies.schedulers.sglang import RecvSkipper

    s = RecvSkipper(3)
    assert [s.handle(1, False) for _ in range(3)] == [False, False, True] and s.counter == 0
    assert s.handle(1, False) is False and s.handle(1, True) is True and s.counter == 0
    assert s.handle(7, False) is True and s.counter == 1  # polled at steps 3 and 6 of the window
    assert s.handle(1, False) is False and s.handle(1, False) is True
    with pytest.raises(ValueError):
        RecvSkipper(0)


def _two_requests(interval: int, arrive_at: float = None, fast_decode: bool = True):
    from sim.policies.request import Request

    cfg = {**SG, "model": "llama-3.1-8b", "hardware": "a100-80gb", "engine": {"name": "sglang", "frontend": "none"},
           "cost_model": {"source": "roofline"}, "sglang": {"scheduler_recv_interval": interval},
           "workload": {"num_requests": 2, "arrival": {"process": "poisson", "rate": 1.0},
                        "input_len": {"dist": "fixed", "mean": 512}, "output_len": {"dist": "fixed", "mean": 64}}}
    reqs = [Request("a", 0.0, 512, 200)]
    if arrive_at is not None:
        reqs.append(Request("b", arrive_at, 512, 10))
    res = simulate(cfg, requests=reqs, fast_decode=fast_decode)
    return {r.request_id: r for r in res.requests}


def test_a_request_waits_for_the_loops_next_poll():
    """With --scheduler-recv-interval 30 a request reaching a decoding server is read after the
    30th decode step since the last extend batch (hand count), then prefilled: its TTFT grows
    by the decode steps it waited; with the default (1) it is read after the step under way.
    The decode fast path gives the same times as step by step."""
    alone = _two_requests(30)["a"]
    arrive = alone.token_times[2] + 1e-4  # during A's third decode step
    polled = _two_requests(30, arrive)
    assert polled["b"].first_scheduled_time == pytest.approx(polled["a"].token_times[30])
    every = _two_requests(1, arrive)
    assert every["b"].first_scheduled_time <= every["a"].token_times[4] + 1e-9
    assert polled["b"].ttft > every["b"].ttft + 25 * (alone.token_times[10] - alone.token_times[9])
    stepwise = _two_requests(30, arrive, fast_decode=False)
    assert stepwise["b"].ttft == pytest.approx(polled["b"].ttft, rel=1e-12)
    assert all(r.finish_time is not None for r in polled.values())
    # An idle server polls at once: a lone request's TTFT does not depend on the interval.
    assert _two_requests(30)["a"].ttft == pytest.approx(_two_requests(1)["a"].ttft)


# --- a closed loop's waves: SGLang puts them back in step, vLLM keeps the split ----------------

def _first_wave_finishes(engine: dict, scheduler: dict) -> list[float]:
    """Finish times of the first wave of 8 fixed-length clients whose 8 x 1,000 prompt tokens
    exceed one step's 4,096-token prefill budget (so the wave is prefilled over two steps); no
    API server, so all 8 reach the engine at t=0."""
    res = simulate({"model": "llama-3.1-8b", "hardware": "h100-sxm",
                    "engine": {**engine, "frontend": "none"}, **scheduler,
                    "workload": {"num_requests": 8,
                                 "arrival": {"process": "closed", "concurrency": 8},
                                 "input_len": {"dist": "fixed", "mean": 1000},
                                 "output_len": {"dist": "fixed", "mean": 50}}}, seed=0)
    assert len(res.requests) == 8 and all(r.finish_time is not None for r in res.requests)
    return sorted(r.finish_time for r in res.requests)


def test_prefill_batches_put_a_wave_back_in_step_under_sglang_not_vllm():
    """Why the silicon matrix replays SGLang's fixed-length rows with exact lengths
    (``cohorts_stay_in_step``): SGLang runs a prefill batch whenever requests wait and pauses
    decoding meanwhile: batch 1 prefills 4 prompts and 96 tokens of the fifth, batch 2 the other
    3,904 tokens, and all 8 start decoding in the same step: with equal lengths they finish
    together. vLLM schedules the first 4 requests' first decode beside batch 2's prefill, so they
    stay one step ahead to the end: 4 finish, then the other 4."""
    sg = _first_wave_finishes({"name": "sglang"}, {"sglang": {"chunked_prefill_size": 4096}})
    assert sg[0] == pytest.approx(sg[-1], abs=1e-9)
    vl = _first_wave_finishes({"name": "vllm"}, {"scheduler": {"max_num_batched_tokens": 4096}})
    assert vl[3] == pytest.approx(vl[0], abs=1e-9) and vl[7] == pytest.approx(vl[4], abs=1e-9)
    assert vl[4] - vl[3] > 1e-3  # one decode step (about 6.6 ms here)
