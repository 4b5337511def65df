"""The operator-table pricer: interpolation, CUDA-graph padding, TP all-reduce, source choice,
summary fields and bad table folders. Pure-logic tests run on a tiny synthetic table written
to tmp_path; tests on the real AIConfigurator tables skip when ../shared is absent."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

from sim.api import resolve_deployment, simulate  # noqa: E402
from sim.errors import ConfigError, KvplanError  # noqa: E402
from sim.policies.step import StepShape  # noqa: E402
from sim.catalog.engines import get_engine  # noqa: E402
from sim.pricing.operator_tables import (  # noqa: E402
    OperatorTableCostModel, TablesNotCovering, _Curve, _Grid, capture_sizes,
)
from sim.pricing.table_data import TableError, package_tables_root  # noqa: E402

# The measured tables users have: the aiconfigurator-core package's (``make install``).
SHARED = package_tables_root() or Path("/nonexistent")
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="aiconfigurator-core not installed")

MS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
NK = [1024, 4096, 16384, 65536]


def _write(path: Path, cols: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)


def synthetic_tables(root: Path, gpu: str = "h100_sxm") -> Path:
    """A tiny systems folder: GEMM latency = 2 us + m*n*k / 400 TFLOP/s-ish, attention
    linear in tokens, all-reduce linear in size; all monotone."""
    d = root / gpu
    rows = [(m, n, k) for m in MS for n in NK for k in NK]
    m, n, k = (np.array(x, dtype=np.int64) for x in zip(*rows))
    lat = 0.002 + np.maximum(2.0 * m * n * k / 4e11, 2.0 * n * k / 3e9)  # ms
    _write(d / "gemm/vllm/0.14.0/gemm_perf.parquet",
           {"gemm_dtype": ["bfloat16"] * len(m), "m": m, "n": n, "k": k, "latency": lat})
    att = []
    for h, kv in [(8, 8), (32, 8), (32, 32), (16, 2), (8, 1)]:
        for b in [1, 2, 4, 8, 16, 32, 64, 128, 256]:
            for s in [0, 15, 127, 1023, 8191]:
                att.append((b, s, h, kv))
    b, s, h, kv = (np.array(x, dtype=np.int64) for x in zip(*att))
    common = {"batch_size": b, "num_heads": h, "num_key_value_heads": kv,
              "head_dim": np.full(len(b), 128), "kv_cache_dtype": ["bfloat16"] * len(b)}
    _write(d / "attention/vllm/0.14.0/generation_attention_perf.parquet",
           {**common, "step": s, "isl": np.ones(len(b), dtype=np.int64),
            "latency": 0.01 + b * (s + 1) * kv * 512 / 3e9})
    isl = np.maximum(s, 1)
    _write(d / "attention/vllm/0.14.0/context_attention_perf.parquet",
           {**common, "step": np.zeros(len(b), dtype=np.int64), "isl": isl,
            "latency": 0.01 + b * isl * isl * h * 128 * 2 / 4e11})
    sizes = np.array([2 ** i for i in range(7, 30)], dtype=np.int64)
    ar = {"backend": [], "num_gpus": [], "message_size": [], "latency": []}
    for be, base in [("vllm_graph", 0.005), ("vllm_eager", 0.02)]:
        for g in (2, 4, 8):
            ar["backend"] += [be] * len(sizes)
            ar["num_gpus"] += [g] * len(sizes)
            ar["message_size"] += sizes.tolist()
            ar["latency"] += (base + sizes * 2 / 2e8).tolist()
    _write(d / "comm/vllm/0.14.0/custom_allreduce_perf.parquet", ar)
    nc = {"op_name": [], "nccl_dtype": [], "num_gpus": [], "message_size": [], "latency": []}
    for g in (2, 4, 8):
        nc["op_name"] += ["all_reduce"] * len(sizes)
        nc["nccl_dtype"] += ["half"] * len(sizes)
        nc["num_gpus"] += [g] * len(sizes)
        nc["message_size"] += sizes.tolist()
        nc["latency"] += (0.03 + sizes * 2 / 1.5e8).tolist()
    _write(d / "comm/nccl/2.27.3/nccl_perf.parquet", nc)
    return root


@pytest.fixture()
def tables(tmp_path: Path) -> Path:
    return synthetic_tables(tmp_path / "systems")


def pricer(tables: Path, tp: int = 1, **kw) -> OperatorTableCostModel:
    return OperatorTableCostModel("llama-2-7b", "h100-sxm", "float16", tp, tables=tables,
                                  max_num_seqs=128, **kw)


def test_without_window_rows_window_layers_prefill_as_full_attention_and_say_so(tables):
    """Tables without ``window_size`` rows (older releases): a sliding-window model's window
    layers keep the full-attention price for a fresh prefill (an upper bound), with a warning;
    their decode still reads at most the window."""
    from dataclasses import replace

    from sim.catalog.models import get_model

    base = get_model("llama-2-7b")
    windowed = replace(base, sliding_window=128, sliding_window_layers=16)
    full = OperatorTableCostModel(base, "h100-sxm", "float16", 1, tables=tables, max_num_seqs=128)
    win = OperatorTableCostModel(windowed, "h100-sxm", "float16", 1, tables=tables, max_num_seqs=128)
    assert win.window_prefill == "full-attention rows" and full.window_prefill is None
    assert any("no context-attention rows at window 128" in w for w in win.warnings())
    n = 4000
    fresh = StepShape(num_prefill_tokens=n, num_prefill_seqs=1, prefill_attention_work=n * (n + 1) // 2)
    assert win.breakdown(fresh)["attn_prefill"] == full.breakdown(fresh)["attn_prefill"]
    decode = StepShape(num_decode_seqs=8, decode_context_tokens=8 * 4000)
    assert win.breakdown(decode)["attn_decode"] < full.breakdown(decode)["attn_decode"]


# --- interpolation ------------------------------------------------------------------------------

def test_curve_reproduces_points_and_is_monotone():
    xs, ys = [1, 2, 4, 8, 16], [1.0, 1.0, 1.5, 3.0, 6.5]
    c = _Curve(xs, ys)
    assert [c.at(float(x)) for x in xs] == ys
    grid = np.linspace(1, 64, 500)
    v = c.at_array(grid)
    assert np.all(np.diff(v) >= 0)
    assert [c.at(float(x)) for x in grid] == v.tolist()
    assert c.at(32.0) == pytest.approx(6.5 * 2)  # proportional past the last point


def test_grid_reproduces_points():
    xs, ys = [1, 2, 4], [1, 10, 100]
    z = np.array([[1.0, 2.0, 5.0], [2.0, 3.0, 9.0], [4.0, 6.0, 20.0]])
    g = _Grid(xs, ys, z)
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            assert g.at(float(x), float(y)) == z[i, j]


def test_gemm_curve_exact_at_measured_shape_and_monotone(tables):
    p = pricer(tables)
    n, k = 4096, 4096
    assert p.gemm_shapes["o_proj"] == (n, k)
    c = pq.read_table(tables / "h100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet").to_pydict()
    measured = {m: lat for m, nn, kk, lat in zip(c["m"], c["n"], c["k"], c["latency"])
                if nn == n and kk == k}
    assert p._gemm_ms["o_proj"].tolist() == [measured[m] for m in MS]
    for op in p._gemm_ms:
        assert np.all(np.diff(p._gemm_ms[op]) >= 0)
    rows = np.arange(1, 9000, 7, dtype=float)
    v = p._eager.at_array(rows)
    assert np.all(np.diff(v) >= 0)


def _random_shapes(n: int, seed: int = 0) -> list[StepShape]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        P = int(rng.integers(0, 4))
        N = int(rng.integers(P, P * 700 + 1)) if P else 0
        D = int(rng.integers(0, 300))
        ctx = int(rng.integers(0, 2000)) * P
        work = (N * ctx // max(P, 1) + N * (N + 1) // 2) if P else 0
        out.append(StepShape(num_prefill_tokens=N, num_prefill_seqs=P, num_decode_seqs=D,
                             decode_context_tokens=D * int(rng.integers(1, 3000)),
                             prefill_context_tokens=ctx, prefill_attention_work=work,
                             num_spec_tokens=int(rng.integers(0, 3)) * (D > 0)))
    out.append(StepShape())
    return out


@pytest.mark.parametrize("tp", [1, 2])
def test_scalar_equals_vectorised_exactly(tables, tp):
    p = pricer(tables, tp)
    shapes = _random_shapes(400, seed=tp)
    scalar = [p.price(s) for s in shapes]
    assert p.price_many(shapes).tolist() == scalar
    assert scalar[-1] == 0.0
    assert all(t > 0 for t in scalar[:-1] if t is not None)


@pytest.mark.parametrize("tp,async_scheduling", [(1, True), (2, False)])
def test_decode_window_prices_are_bit_identical_to_price(tables, tp, async_scheduling):
    """The decode window's pricer computes the context-free terms once; every later step's
    price must still be ``price`` of that step's own shape, to the bit."""
    p = pricer(tables, tp, async_scheduling=async_scheduling)
    for s in _random_shapes(300, seed=10 + tp):
        f = p.decode_context_pricer(s)
        step = max(s.num_decode_seqs, 1)
        for i in (0, 1, 2, 9, 250, 4000):
            c = s.decode_context_tokens + i * step
            assert f(c) == p.price(s.with_decode_context(c)), (s, i)


def test_decode_step_pads_to_capture_size(tables):
    p = pricer(tables)
    assert capture_sizes(128)[-1] == 256 and 8 in p.capture_sizes and 5 not in p.capture_sizes
    b = lambda d: p.breakdown(StepShape(num_decode_seqs=d, decode_context_tokens=d * 100))
    assert b(5)["rows"] == b(8)["rows"]           # 5 decodes replay the graph of 8
    assert b(8)["rows"] < b(9)["rows"]
    # Past the largest capture size the batch runs eagerly and pays launches.
    eager = b(300)
    assert eager["gpu"] >= p._eager_launch
    assert p.price(StepShape(num_decode_seqs=300, decode_context_tokens=300 * 100)) > \
        p.price(StepShape(num_decode_seqs=256, decode_context_tokens=256 * 100))


def test_a_step_outside_the_graphs_costs_at_least_the_hosts_time_to_issue_it(tables):
    """Above the largest capture size (256 here) a step runs without graphs: it lasts the larger
    of its kernels and the host's 0.8 ms a layer (EAGER_HOST_S_PER_LAYER, vllm-omni#7960's
    eager decode), so a 600-token prompt on Llama-2-7B's 32 layers costs 25.6 ms of host time
    beside 22.5 ms of kernels in these synthetic tables, while an 8k prompt's kernels exceed it
    and set the price."""
    from sim.pricing.operator_tables import EAGER_HOST_S_PER_LAYER

    p = pricer(tables)
    floor = 32 * EAGER_HOST_S_PER_LAYER
    assert EAGER_HOST_S_PER_LAYER == 0.8e-3 and p._eager_launch == pytest.approx(floor)
    for n in (600, 8192):
        b = p.breakdown(StepShape(num_prefill_tokens=n, num_prefill_seqs=1,
                                  prefill_attention_work=n * (n + 1) // 2))
        kernels = b["rows"] + b["attn_prefill"]
        assert b["gpu"] == pytest.approx(max(kernels, floor), rel=1e-12)
        assert (kernels < floor) == (n == 600)
    # Inside the graphs (256 tokens, piecewise) the floor does not apply.
    b = p.breakdown(StepShape(num_prefill_tokens=256, num_prefill_seqs=1, prefill_attention_work=256 * 257 // 2))
    assert b["gpu"] < floor


def test_a_larger_capture_limit_puts_a_prompt_back_inside_the_graphs(tables):
    """``engine.max_cudagraph_capture_size`` (vLLM's ``--max-cudagraph-capture-size``, which
    InferenceX's gpt-oss, MiniMax and Kimi scripts set to 2048): vLLM's size pattern up to the
    given limit, taken as given (no ``2 x max_num_seqs`` cap), so a 600-token prompt runs in
    piecewise graphs, padded to 608, and pays no eager floor; decode batches are unchanged."""
    from sim.catalog.engines import get_engine as engine_of

    sizes = engine_of("vllm").capture_sizes(128, max_capture=2048)
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 2048 and 608 in sizes and 600 not in sizes
    assert all(b - a == 16 for a, b in zip(sizes[sizes.index(256):], sizes[sizes.index(256) + 1:]))
    base, big = pricer(tables), pricer(tables, max_capture_size=2048)
    assert base.max_capture == 256 and big.max_capture == 2048
    shape = StepShape(num_prefill_tokens=600, num_prefill_seqs=1, prefill_attention_work=600 * 601 // 2)
    eager, graphed = base.breakdown(shape), big.breakdown(shape)
    assert eager["gpu"] >= base._eager_launch > graphed["gpu"]
    # Padded to the next captured size: the same price as a 608-token prompt's rows.
    padded = big.breakdown(StepShape(num_prefill_tokens=608, num_prefill_seqs=1,
                                     prefill_attention_work=608 * 609 // 2))
    assert graphed["rows"] == pytest.approx(padded["rows"], rel=1e-12)
    dec = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 500)
    assert big.price(dec) == pytest.approx(base.price(dec), rel=1e-12)
    from sim.config import build_scenario
    with pytest.raises(ConfigError, match="engine.max_cudagraph_capture_size: a vLLM flag"):
        build_scenario({"engine": {"name": "sglang", "max_cudagraph_capture_size": 2048}})



def test_the_eager_host_time_counts_each_blocks_ops_at_the_dense_layers_time_per_op():
    """80 us an op (0.8 ms over the measured dense layer's 10 ops). DeepSeek-V3 at TP 8, by
    hand: 3 dense layers of MLA (11) + MLP (4) + 2 all-reduces, 58 of MLA + MoE with a shared
    expert (7 + 3) + 2: 51 + 1334 = 1385 ops, 110.8 ms (sglang#14918 measured 115 ms mean TTFT
    for its eager 1k-token prefill). Llama-3.1-8B: 10 ops a layer alone, 12 under TP."""
    from sim.catalog.models import get_model
    from sim.pricing.operator_tables import eager_host_seconds

    assert eager_host_seconds(get_model("deepseek-ai/DeepSeek-R1"), 8) == pytest.approx(1385 * 80e-6)
    llama = get_model("meta-llama/Llama-3.1-8B-Instruct")
    assert eager_host_seconds(llama, 1) == pytest.approx(32 * 10 * 80e-6)
    assert eager_host_seconds(llama, 8) == pytest.approx(32 * 12 * 80e-6)
    # Qwen3-32B: q/k norms add one op to each attention block.
    assert eager_host_seconds(get_model("Qwen/Qwen3-32B"), 2) == pytest.approx(64 * 13 * 80e-6)
    # Qwen3.5-397B: 45 Gated DeltaNet layers (9) and 15 attention layers with q/k norms (7),
    # all 60 MoE with a shared expert (10), 2 all-reduces: 405 + 105 + 600 + 120 = 1230 ops.
    qwen35 = get_model("Qwen/Qwen3.5-397B-A17B")
    assert qwen35.multimodal and not get_model("deepseek-ai/DeepSeek-R1").multimodal
    assert eager_host_seconds(qwen35, 4) == pytest.approx(1230 * 80e-6)

def test_tp_adds_allreduce(tables):
    one, two = pricer(tables, 1), pricer(tables, 2)
    s = StepShape(num_prefill_tokens=1024, num_prefill_seqs=2, prefill_attention_work=2 * 512 * 513 // 2)
    # Same per-shard work halves the GEMMs; the all-reduce is what TP adds back.
    ar = two._allreduce_ms(np.array([1024.0 * 4096]), graph=False)[0]
    assert ar > 0
    assert one._allreduce_ms(np.array([1024.0 * 4096]), graph=False)[0] == 0
    no_ar = two._rows_part(np.array([1024.0]), sum(g for g in two._gemm_ms.values())[10:11],
                           np.zeros(1))[0]
    assert two.breakdown(s)["rows"] == pytest.approx(no_ar + 32 * 2 * ar * 1e-3, rel=1e-9)
    assert one.price(s) > two.price(s) > 0


def test_allreduce_tables_are_priced_by_their_lower_envelope(tmp_path):
    """A larger message never prices cheaper than a smaller one: a slow reading (B200's TP 8
    graph curve reads 26 us at 128-256k values, 16.7 us at 512k) gives way to the fastest at its
    size or above, as a collective's one-sided noise says; a monotone curve is untouched."""
    root = synthetic_tables(tmp_path / "systems")
    f = root / "h100_sxm/comm/vllm/0.14.0/custom_allreduce_perf.parquet"
    t = pq.read_table(f).to_pydict()
    line = lambda size: 0.005 + size * 2 / 2e8  # noqa: E731  (the synthetic graph curve)
    spike = {2 ** 17: 0.026, 2 ** 18: 0.026}
    t["latency"] = [spike.get(size, lat) if be == "vllm_graph" and g == 2 else lat
                    for be, g, size, lat in zip(t["backend"], t["num_gpus"], t["message_size"], t["latency"])]
    _write(f, t)
    two = pricer(root, 2)
    at = lambda size, graph: two._allreduce_ms(np.array([float(size)]), graph=graph)[0]  # noqa: E731
    assert at(2 ** 17, True) == pytest.approx(line(2 ** 19)) and at(2 ** 18, True) == pytest.approx(line(2 ** 19))
    assert at(2 ** 16, True) == pytest.approx(line(2 ** 16)) and at(2 ** 19, True) == pytest.approx(line(2 ** 19))
    sizes = [2.0 ** i for i in range(8, 22)]
    for graph in (True, False):
        curve = [at(b, graph) for b in sizes]
        assert all(b >= a for a, b in zip(curve, curve[1:]))
    # Untouched where the table was already monotone: the eager curve is the synthetic line.
    assert at(2 ** 17, False) == pytest.approx(0.02 + 2 ** 17 * 2 / 2e8)


# --- source choice, summary, errors -----------------------------------------------------------

def _cfg(tables: Path | None, **extra) -> list[str]:
    over = ["model=llama-2-7b", "hardware=h100-sxm", "workload.num_requests=20",
            "scheduler.max_num_seqs=32"]
    if tables is not None:
        over.append(f"cost_model.tables={tables}")
    return over + [f"{k.replace('__', '.')}={v}" for k, v in extra.items()]


def test_auto_picks_tables_when_present(tables):
    dep = resolve_deployment(simulate(None, overrides=_cfg(tables)).scenario)
    assert dep.cost_model_source == "operator_tables"


def test_auto_falls_back_to_roofline_when_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPLAN_GPU_TABLES", str(tmp_path / "nothing"))
    res = simulate(None, overrides=_cfg(None))
    assert res.summary["cost_model"]["source"] == "roofline"
    # The roofline's own known error: its constants' operator error where they were fitted.
    known = res.summary["cost_model"]["known_error"]
    assert known["measured_on"] in ("a100-80gb", "h100-sxm") and known["operator_mape_pct"]["gemm"] > 0
    # A GPU with no tables in a folder that has some: roofline too.
    res = simulate(None, overrides=_cfg(None, hardware="a100-40gb"))
    assert res.summary["cost_model"]["source"] == "roofline"


def test_explicit_missing_tables_is_one_line_error(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as e:
        simulate(None, overrides=_cfg(Path("/nonexistent/tables")))
    assert "cost_model.tables" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("KVPLAN_GPU_TABLES", str(tmp_path / "nothing"))
    with pytest.raises(ConfigError) as e:
        simulate(None, overrides=_cfg(None, cost_model__source="operator_tables"))
    assert "\n" not in str(e.value)


def test_summary_has_cost_model_and_blocks(tables):
    s = simulate(None, overrides=_cfg(tables)).summary
    cm = s["cost_model"]
    assert cm["source"] == "operator_tables"
    assert "operator tables" in cm["description"]
    assert cm["known_error"]["gemm_mean_abs_pct"] >= 0
    assert isinstance(s["num_gpu_blocks"], int) and s["num_gpu_blocks"] > 0
    r = simulate(None, overrides=_cfg(tables, cost_model__source="roofline")).summary
    assert r["cost_model"]["source"] == "roofline"
    assert r["num_gpu_blocks"] == s["num_gpu_blocks"]


def test_missing_parquet_is_one_line_error(tables):
    (tables / "h100_sxm/gemm/vllm/0.14.0/gemm_perf.parquet").unlink()
    with pytest.raises(KvplanError) as e:
        pricer(tables)
    assert "gemm_perf" in str(e.value) and "\n" not in str(e.value)


def test_corrupt_parquet_is_one_line_error(tables):
    f = tables / "h100_sxm/attention/vllm/0.14.0/generation_attention_perf.parquet"
    f.write_bytes(b"not a parquet file at all")
    with pytest.raises(TableError) as e:
        pricer(tables)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_pipeline_parallel_not_covered(tables):
    with pytest.raises(TablesNotCovering):
        OperatorTableCostModel("llama-2-7b", "h100-sxm", "float16", 1, 2, tables=tables)


# --- memory plan fact (no tables needed) -------------------------------------------------------

def test_num_gpu_blocks_llama2_7b_h100_matches_vllm():
    """vLLM 0.15.1 reported 7,463 blocks for this deployment (../shared/real_runs README)."""
    s = simulate(None, overrides=[
        "model=llama-2-7b", "hardware=h100-sxm", "dtype=float16",
        "kv_cache.gpu_memory_utilization=0.9", "scheduler.policy=chunked",
        "scheduler.max_num_batched_tokens=2048", "kv_cache.max_model_len=4096",
        "cost_model.source=roofline", "workload.num_requests=5"]).summary
    assert abs(s["num_gpu_blocks"] - 7463) / 7463 < 0.01


# --- the real tables ---------------------------------------------------------------------------

@needs_shared
@pytest.mark.parametrize("hw", ["a100-80gb", "h100-sxm", "h200", "l40s"])
def test_real_tables_build_and_price_fast(hw):
    p = OperatorTableCostModel("llama-2-7b", hw, "float16", 1, tables=SHARED, max_num_seqs=128,
                               engine=get_engine("vllm", "0.15.1"))
    # The version folder nearest vLLM 0.15.1 (A100 and L40S have 0.14.0; the package holds
    # only 0.24.0 GEMMs for H100 and H200).
    folders = sorted(x.name for x in (p.gpu_dir / "gemm" / "vllm").iterdir())
    assert p.version == ("0.14.0" if "0.14.0" in folders else folders[0])
    shapes = _random_shapes(200, seed=3)
    scalar = [p.price(s) for s in shapes]
    assert p.price_many(shapes).tolist() == scalar
    s = shapes[0]
    t0 = time.perf_counter()
    for _ in range(2000):
        p.price(s)
    per = (time.perf_counter() - t0) / 2000
    assert per < 100e-6  # a few microseconds in practice; generous for slow CI
    err = p.known_error()
    assert err["gemm_mean_abs_pct"] < 25 and err["decode_attention_mean_abs_pct"] < 25


@needs_shared
def test_real_tables_tp_and_gqa():
    p = OperatorTableCostModel("llama-2-70b", "h100-sxm", "float16", 4, tables=SHARED,
                               max_num_seqs=128)
    d = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 700)
    assert 5e-3 < p.price(d) < 60e-3


@needs_shared
def test_reading_tables_reads_the_same_arrays_without_importing_pandas():
    """The table reader builds NumPy arrays itself: pyarrow's own conversion imports pandas
    (130 ms of every simulate process); the arrays must be the ones pyarrow would give."""
    import os
    import subprocess
    import sys

    from sim.pricing.table_data import _to_numpy

    path = next(SHARED.glob("a100_sxm/gemm/**/*.parquet"))
    t = pq.read_table(path)
    for name in t.column_names:
        ours, theirs = _to_numpy(t.column(name)), t.column(name).to_numpy(zero_copy_only=False)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), name
    code = ("import sys; from sim.api import simulate; "
            "simulate(overrides=['workload.num_requests=20', 'cost_model.source=operator_tables']); "
            "print('pandas' in sys.modules, 'pyarrow.dataset' in sys.modules)")
    env = {**os.environ, "KVPLAN_GPU_TABLES": str(SHARED)}
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


@needs_shared
def test_mixtral_prices_its_experts_from_the_measured_moe_table():
    """Mixtral TP 2 on H100: the experts come from AIConfigurator's fused-MoE table (exact at a
    measured token count), the rest as for a dense model; scalar and vectorised agree."""
    from sim.api import resolve_deployment
    from sim.config import build_scenario

    sc = build_scenario({"model": "mixtral-8x7b", "hardware": "h100-sxm", "dtype": "bfloat16",
                         "parallel": {"tensor_parallel_size": 2},
                         "cost_model": {"source": "operator_tables", "tables": str(SHARED),
                                        "moe_routing": "balanced"}})
    p = resolve_deployment(sc).cost_model
    assert "experts" in p._gemm_ms and "mlp_up" not in p.gemm_shapes
    shapes = [StepShape(num_decode_seqs=b, decode_context_tokens=300 * b) for b in (1, 4, 16, 64, 200)]
    shapes += [StepShape(num_prefill_tokens=n, num_prefill_seqs=1, prefill_attention_work=n * (n + 1) // 2)
               for n in (17, 512, 2048)]
    scalar = [p.price(s) for s in shapes]
    assert p.price_many(shapes).tolist() == scalar
    decode = scalar[:5]
    assert all(a < b for a, b in zip(decode, decode[1:]))
    # at a measured token count the experts' curve is the table's row (balanced routing, TP 2)
    from sim.pricing.table_data import read_columns, table_file

    path, _ = table_file(SHARED / "h100_sxm" / "moe" / "vllm", "moe_perf")
    c = read_columns(path, ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk",
                            "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency"))
    sel = ((c["moe_dtype"] == "bfloat16") & (c["num_tokens"] == 64) & (c["hidden_size"] == 4096)
           & (c["inter_size"] == 14336) & (c["num_experts"] == 8) & (c["topk"] == 2)
           & (c["moe_tp_size"] == 2) & (c["moe_ep_size"] == 1) & (c["distribution"] == "balanced"))
    i = int(np.flatnonzero(p._gemm_m == 64)[0])
    assert p._gemm_ms["experts"][i] >= float(c["latency"][sel][0]) - 1e-12


@needs_shared
def test_moe_routing_picks_the_table_rows(monkeypatch):
    """``cost_model.moe_routing`` chooses the measured rows: a skewed router (power law) makes
    the experts of a 64-token decode dearer than balanced routing on Mixtral at TP 2."""
    from sim.api import resolve_deployment
    from sim.config import build_scenario

    def price(routing: str) -> float:
        sc = build_scenario({"model": "mixtral-8x7b", "hardware": "h100-sxm", "dtype": "bfloat16",
                             "parallel": {"tensor_parallel_size": 2},
                             "cost_model": {"source": "operator_tables", "tables": str(SHARED),
                                            "moe_routing": routing}})
        p = resolve_deployment(sc).cost_model
        assert routing in p.describe()
        return p.price(StepShape(num_decode_seqs=64, decode_context_tokens=64 * 300))

    assert price("power_law_1.01") > price("balanced")
    with pytest.raises(KvplanError, match="moe_routing"):
        build_scenario({"cost_model": {"moe_routing": "zipf"}})


def test_a_uniform_router_touches_fewer_experts_than_a_balanced_row():
    """AIConfigurator's balanced rows touch min(E, T x k) experts; a router drawing each token's
    k experts at random touches E x (1 - (1 - k/E)^T). By hand: Mixtral (8 experts, top-2) at
    4 tokens touches 8 x (1 - 0.75^4) = 5.46875 of the 8 a balanced row reads; gpt-oss-120b
    (128, top-4) at 32 tokens 128 x (1 - (31/32)^32) of 128; one token touches its k either
    way, and a prefill chunk touches every expert either way."""
    from sim.pricing.experts import uniform_over_balanced

    mixtral = uniform_over_balanced(8, 2, np.array([1, 2, 4, 64]))
    assert mixtral == pytest.approx([1.0, 8 * (1 - 0.75 ** 2) / 4, 5.46875 / 8, 1 - 0.75 ** 64], rel=1e-9)
    gpt_oss = uniform_over_balanced(128, 4, np.array([0, 32, 8192]))
    assert gpt_oss == pytest.approx([1.0, 1 - (31 / 32) ** 32, 1.0], rel=1e-9)


@needs_shared
def test_uniform_routing_is_the_balanced_rows_scaled_to_the_experts_touched():
    """The default ``uniform`` routing prices gpt-oss-120b's experts (B200, MXFP4) from the
    balanced rows times the touched-experts factor: a 32-sequence decode's experts cost
    (1 - (31/32)^32) of the balanced row's, an 8k-token prefill exactly the balanced row's."""
    from sim.api import resolve_deployment
    from sim.config import build_scenario
    from sim.pricing.experts import uniform_over_balanced

    def pricer(routing: str) -> OperatorTableCostModel:
        sc = build_scenario({"model": "openai/gpt-oss-120b", "hardware": "b200", "dtype": "bfloat16",
                             "quantization": {"weights": "mxfp4"}, "engine": {"version": "0.15.1"},
                             "cost_model": {"source": "operator_tables", "tables": str(SHARED),
                                            "moe_routing": routing}})
        return resolve_deployment(sc).cost_model

    uniform, balanced = pricer("uniform"), pricer("balanced")
    assert "uniform routing" in uniform.describe()
    rows = np.array([32.0, 8192.0])
    u, b = uniform._moe_curve(rows), balanced._moe_curve(rows)
    factor = uniform_over_balanced(128, 4, rows)
    assert u[0] == pytest.approx(b[0] * (1 - (31 / 32) ** 32), rel=1e-9)
    assert u[1] == pytest.approx(b[1], rel=1e-12) and factor[1] == pytest.approx(1.0, rel=1e-12)
    decode = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 1500)
    assert uniform.price(decode) < balanced.price(decode)


@needs_shared
def test_uniform_routing_without_balanced_rows_reads_the_mildest_power_law_and_says_so():
    """A100's MoE tables hold power-law rows only: a uniform router is priced from the
    ``power_law_1.01`` rows as measured (not scaled), and the pricer says so, rather than the
    whole model falling back to the roofline."""
    from sim.api import resolve_deployment
    from sim.config import build_scenario

    sc = build_scenario({"model": "qwen3-30b-a3b", "hardware": "a100-80gb", "dtype": "bfloat16",
                         "cost_model": {"source": "operator_tables", "tables": str(SHARED)}})
    p = resolve_deployment(sc).cost_model
    assert p.moe_rows_routing == "power_law_1.01"
    assert "power_law_1.01 rows as measured" in p.describe()
    assert any("no balanced MoE rows" in w for w in p.warnings())
    explicit = resolve_deployment(build_scenario(
        {"model": "qwen3-30b-a3b", "hardware": "a100-80gb", "dtype": "bfloat16",
         "cost_model": {"source": "operator_tables", "tables": str(SHARED),
                        "moe_routing": "power_law_1.01"}})).cost_model
    rows = np.array([1.0, 32.0, 4096.0])
    assert p._moe_curve(rows).tolist() == explicit._moe_curve(rows).tolist()


@needs_shared
def test_moe_shapes_the_tables_do_not_cover_fall_back_or_fail_in_one_line(tmp_path, monkeypatch):
    """Experts no table measured (4 experts, top-1): ``auto`` prices them with the roofline,
    an explicit ``operator_tables`` says which rows are missing, in one line."""
    from sim.api import resolve_deployment
    from sim.config import build_scenario

    cfg = {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 2816,
           "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
           "vocab_size": 32000, "num_local_experts": 4, "num_experts_per_tok": 1}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("KVPLAN_GPU_TABLES", str(SHARED))
    base = {"model": str(tmp_path), "hardware": "h100-sxm", "dtype": "bfloat16"}
    assert resolve_deployment(build_scenario(base)).cost_model_source == "roofline"
    with pytest.raises(KvplanError) as exc:
        resolve_deployment(build_scenario({**base, "cost_model": {"source": "operator_tables"}}))
    assert "MoE rows" in str(exc.value) and "\n" not in str(exc.value)


def test_an_explicit_async_scheduling_reaches_the_table_pricer(tables):
    """``scheduler.async_scheduling: false`` on a release that defaults it on (0.24) prices the
    CPU's per-step work as added to the GPU's, not overlapped; ``auto`` keeps the release's."""
    base = {"model": "llama-2-7b", "hardware": "h100-sxm", "dtype": "float16",
            "cost_model": {"source": "operator_tables", "tables": str(tables)}}
    shape = StepShape(num_decode_seqs=32, decode_context_tokens=32 * 512)
    prices = {}
    for value in ("auto", True, False):
        dep = resolve_deployment({**base, "scheduler": {"async_scheduling": value}})
        assert dep.cost_model.async_scheduling is (value if value != "auto" else True)
        prices[value] = dep.cost_model.price(shape)
    assert prices["auto"] == prices[True]
    parts = resolve_deployment({**base, "scheduler": {"async_scheduling": False}}).cost_model.breakdown(shape)
    # Synchronous: the CPU's work adds to the step instead of hiding under the GPU's.
    assert 0 < prices[False] - prices[True] <= parts["cpu"] * (1 + 1e-9)


def test_the_engine_cores_cpu_is_v1s_not_the_rooflines_v0_figure(tables):
    """Every modelled vLLM release runs the V1 engine core: its CPU time per step is 0.5 ms +
    20 us per sequence (the V1 loop's 5-6 ms gap at 256 sequences, vllm-project/vllm#10634),
    not Vidur's V0 1 ms + 40 us that the roofline keeps. A 0.11 release schedules
    synchronously, so the whole term adds to a 64-sequence decode step: 0.5 + 64 x 0.02 =
    1.78 ms (it was 1 + 64 x 0.04 = 3.56 ms)."""
    release = get_engine("vllm", "0.11.0")
    assert (release.cpu_step_s, release.cpu_per_seq_s) == (0.5e-3, 20e-6)
    assert release.to_dict()["cpu_per_seq_us"] == pytest.approx(20.0)
    dep = resolve_deployment({"model": "llama-2-7b", "hardware": "h100-sxm", "dtype": "float16",
                              "engine": {"name": "vllm", "version": "0.11.0"},
                              "cost_model": {"source": "operator_tables", "tables": str(tables)}})
    assert dep.cost_model.async_scheduling is False
    shape = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 512)
    parts = dep.cost_model.breakdown(shape)
    assert parts["cpu"] == pytest.approx(1.78e-3)
    assert dep.cost_model.price(shape) == pytest.approx(parts["gpu"] + parts["lm_head"] + parts["swap"] + 1.78e-3)


def test_mla_rows_take_the_kernel_measured_at_each_length():
    """AIConfigurator's MLA module tables measure different kernels over disjoint lengths, as
    vLLM dispatches them (Hopper: FLASH_ATTN_MLA for 1-512-token chunks, FLASH_ATTN for 1,024
    up). Each length takes the kernel with the most rows there, not one kernel for every
    length (which priced 8k prompts by extrapolating the short-chunk kernel)."""
    from sim.pricing.operator_tables import _kernel_per_length

    kernels = np.array(["FLASH_ATTN_MLA"] * 4 + ["FLASH_ATTN"] * 3 + ["FLASHMLA", "FLASH_ATTN"])
    lengths = np.array([1, 256, 512, 512, 1024, 8192, 8192, 2048, 2048])
    sel = np.ones(kernels.size, dtype=bool)
    sel[3] = False  # a row outside the selection counts for nothing
    keep = _kernel_per_length(kernels, lengths, sel)
    # At 2,048 one row each: the kernel with more rows overall (FLASH_ATTN, 4) wins; FlashMLA
    # is preferred only when that ties too.
    assert keep.tolist() == [True, True, True, False, True, True, True, False, True]
    tie = _kernel_per_length(np.array(["FLASHMLA", "OTHER"]), np.array([64, 64]), np.ones(2, bool))
    assert tie.tolist() == [True, False]
