"""Measured GEMM tables: the lookup interpolates and extrapolates as documented with the same bits
on one step and many, a profile carries them through save and load (and refuses malformed ones
in one line), the fit prices a non-monotone BLAS that a row-linear model cannot, and
``kvplan calibrate`` measures them on the model's own layers."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from calibration.fit import Samples, fit
from sim.policies.step import StepShape
from sim.pricing import ProfileCostModel
from sim.pricing.base import SHAPE_FIELDS
from sim.pricing.gemm_table import GemmTables, RowTable, TableError
from sim.pricing.profile_file import ProfileError, load_profile, parse_profile
from tests.calibration.helpers import make_profile, nonmonotone_tables, table_profile


def test_lookup_is_exact_at_points_linear_between_and_extends_the_last_slope():
    t = RowTable((1, 2, 4), (0.010, 0.030, 0.020))  # two rows dearer than four, as a BLAS can be
    assert t.value(0) == 0.0 and t.value(-3) == 0.0
    assert t.value(0.5) == pytest.approx(0.005)  # from the implied (0, 0)
    assert (t.value(1), t.value(2), t.value(4)) == (0.010, 0.030, 0.020)
    assert t.value(3) == pytest.approx(0.025)
    assert t.value(3) > t.value(4)  # the table keeps what no straight line can
    assert t.value(100) == 0.020  # past the end a falling last segment is held flat, never < 0
    rising = RowTable((1, 2, 4), (0.010, 0.012, 0.020))
    assert rising.value(8) == pytest.approx(0.020 + 4 * 0.004)  # the last segment's slope


def test_scalar_and_array_lookups_are_bit_identical():
    t = nonmonotone_tables().lm_head
    rng = random.Random(3)
    xs = [0.0, 1.0, 3.0, 32.0, 256.0, 300.0, 1e5] + [rng.uniform(0, 400) for _ in range(500)] \
        + [float(rng.randint(1, 400)) for _ in range(500)]
    assert t.values(np.array(xs)).tolist() == [t.value(x) for x in xs]


@pytest.mark.parametrize("rows, seconds, match", [
    ((1,), (0.1,), "at least 2"),
    ((1, 2), (0.1,), "equal-length"),
    ((2, 1), (0.1, 0.2), "strictly increasing"),
    ((0, 1), (0.1, 0.2), "strictly increasing"),
    ((1, 2), (0.1, -0.2), ">= 0"),
    ((1, 2), (0.1, float("nan")), ">= 0"),
])
def test_bad_tables_are_refused(rows, seconds, match):
    with pytest.raises(TableError, match=match):
        RowTable(rows, seconds)


def test_a_profile_keeps_its_tables_through_save_and_load(tmp_path):
    prof = table_profile()
    path = prof.save(tmp_path / "p.json")
    loaded = load_profile(path)
    assert loaded.gemm_tables == prof.gemm_tables
    shapes = [StepShape(num_decode_seqs=b, decode_context_tokens=100 * b) for b in range(1, 9)]
    assert [ProfileCostModel(loaded).price(s) for s in shapes] == \
        [ProfileCostModel(prof).price(s) for s in shapes]
    # a profile without tables is written as before: no gemm_tables key at all
    assert "gemm_tables" not in json.loads(make_profile().save(tmp_path / "q.json").read_text())


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["gemm_tables"]["body"].update(rows=[1, 1]), "gemm_tables.body.rows"),
    (lambda d: d["gemm_tables"].pop("lm_head"), "gemm_tables.lm_head"),
    (lambda d: d["gemm_tables"]["lm_head"].update(seconds=[0.1, "x"] + [0.1] * 32), "gemm_tables.lm_head.seconds"),
    (lambda d: d.update(gemm_tables=[1, 2]), "gemm_tables"),
    (lambda d: d.pop("gemm_tables"), "features: gemm_table_body needs gemm_tables"),
])
def test_a_malformed_table_is_one_line_naming_the_field(edit, field):
    data = table_profile().to_dict()
    edit(data)
    with pytest.raises(ProfileError) as exc:
        parse_profile(data, "p.json")
    assert str(exc.value).startswith(f"p.json: {field}") and "\n" not in str(exc.value)


def test_the_priced_step_follows_the_table_not_the_row_count():
    pricer = ProfileCostModel(table_profile())
    decode = [pricer.price(StepShape(num_decode_seqs=b, decode_context_tokens=64 * b)) for b in range(1, 9)]
    assert decode[2] > decode[3] and decode[6] > decode[7]  # 3 rows dearer than 4, 7 than 8
    parts = pricer.breakdown(StepShape(num_decode_seqs=3, decode_context_tokens=192))
    assert parts["gemm_table_lm_head"] == nonmonotone_tables().lm_head.value(3)
    assert sum(parts.values()) == pytest.approx(decode[2])


def _table_truth_samples(n: int = 800, seed: int = 2) -> Samples:
    """Decode and prefill steps whose true time is the tables plus attention and a fixed cost."""
    rng = np.random.default_rng(seed)
    tables = nonmonotone_tables()
    decode = rng.random(n) < 0.7
    D = np.where(decode, rng.integers(1, 40, n), 0)
    P = np.where(decode, 0, rng.integers(1, 1500, n))
    PS = np.where(P > 0, 1, 0)
    cols = {k: np.zeros(n) for k in SHAPE_FIELDS}
    cols.update(num_prefill_tokens=P, num_prefill_seqs=PS, num_decode_seqs=D,
                decode_context_tokens=D * rng.integers(8, 600, n), prefill_attention_work=P * (P + 1) // 2)
    cols = {k: np.asarray(v, dtype=float) for k, v in cols.items()}
    y = (0.004 + tables.body.values(P + D) + tables.lm_head.values(D + PS)
         + 1e-6 * cols["decode_context_tokens"] + 1e-8 * cols["prefill_attention_work"])
    return Samples(cols, y * (1 + 0.01 * rng.standard_normal(n)))


def test_the_fit_with_tables_prices_a_nonmonotone_blas_that_a_linear_fit_cannot():
    samples = _table_truth_samples()
    with_tables = fit(samples, tables=nonmonotone_tables())
    assert with_tables.knee is None and "gemm_table_body" in with_tables.features
    assert with_tables.coefficients["gemm_table_body"] == pytest.approx(1.0, rel=0.1)
    assert with_tables.coefficients["gemm_table_lm_head"] == pytest.approx(1.0, rel=0.15)
    assert with_tables.error["heldout_mape"] < 0.015
    without = fit(samples)
    assert not set(without.features) & {"gemm_table_body", "gemm_table_lm_head"}
    assert without.error["heldout_mape"] > 3 * with_tables.error["heldout_mape"]


def test_calibrate_measures_tables_on_the_models_own_layers():
    torch = pytest.importorskip("torch")
    from calibration.gemm_profiler import measure_gemm_tables, row_ladder
    from runtime.model_config import ModelConfig
    from runtime.weights import random_model

    assert row_ladder(40) == list(range(1, 33)) + [40]
    assert row_ladder(45)[-3:] == [32, 40, 45] and row_ladder(8) == list(range(1, 9))
    cfg = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    model = random_model(cfg, seed=0).model.to(torch.float32)
    seen: list[str] = []
    tables = measure_gemm_tables(model, max_body_rows=50, max_head_rows=8, progress=seen.append)
    assert tables.body.rows == tuple(row_ladder(50)) and tables.lm_head.rows == tuple(range(1, 9))
    assert all(s > 0 for s in tables.body.seconds + tables.lm_head.seconds)
    assert len(seen) == 2 and "float32 on cpu" in tables.method
    assert GemmTables.from_dict(json.loads(json.dumps(tables.to_dict()))) == tables


def test_a_mixture_of_experts_is_timed_whole_with_its_routing():
    """A MoE layer's cost depends on how many experts its rows touch: the table times the
    model's own MoE module (router, top-k, experts), so one row costs less than many."""
    torch = pytest.importorskip("torch")
    from calibration.gemm_profiler import measure_gemm_tables
    from runtime.model_config import ModelConfig
    from runtime.weights import random_model

    cfg = ModelConfig(vocab_size=64, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=8,
                      num_experts_per_tok=2, model_type="mixtral")
    model = random_model(cfg, seed=0).model.to(torch.float32)
    calls = []
    real = type(model.model.layers[0].mlp).forward

    def counting(self, x):
        calls.append(x.shape[0])
        return real(self, x)

    type(model.model.layers[0].mlp).forward = counting
    try:
        tables = measure_gemm_tables(model, max_body_rows=16, max_head_rows=2)
    finally:
        type(model.model.layers[0].mlp).forward = real
    assert "MoE layers whole" in tables.method
    assert set(calls) == set(range(1, 17))   # the MoE module itself ran at every row count
    body = dict(zip(tables.body.rows, tables.body.seconds))
    assert body[16] > body[1]
