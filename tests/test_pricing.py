"""The step pricing interface: every pricer prices one shape and many with the same bits, the
registry builds them, and a calibration profile warns when used on a machine other than its own.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from sim.api import simulate
from sim.errors import ConfigError
from sim.policies.step import StepShape
from sim.pricing import (
    PRICERS, SHAPE_FIELDS, ProfileCostModel, RooflineCostModel, StepPricer, make_pricer,
)
from sim.pricing.adjusted import ScaledPricer
from sim.pricing.machine import cpu_flags, machine_fingerprint, machine_mismatch
from tests.calibration.helpers import make_profile, table_profile


def _random_shape(rng: random.Random) -> StepShape:
    p = rng.choice([0, 0, rng.randint(1, 8192)])
    d = rng.choice([0, rng.randint(1, 512)])
    k = rng.choice([0, 0, rng.randint(1, 4) * d])
    return StepShape(
        num_prefill_tokens=p, num_prefill_seqs=min(p, rng.randint(1, 8)) if p else 0,
        num_decode_seqs=d, num_spec_tokens=k, num_spec_seqs=d if k else 0,
        decode_context_tokens=d * rng.randint(1, 8000),
        prefill_context_tokens=rng.randint(0, 4000) if p else 0,
        prefill_attention_work=p * (p + 1) // 2 + (p * rng.randint(0, 4000) if p else 0),
        num_swap_tokens=rng.choice([0, 0, rng.randint(1, 5000)]),
        num_padding_tokens=rng.choice([0, 0, rng.randint(0, 100)]),
    )


PRICERS_UNDER_TEST = [
    RooflineCostModel("llama-3.1-8b", "a100-80gb"),
    RooflineCostModel("llama-2-70b", "h100-sxm", "bf16", tensor_parallel_size=4,
                      pipeline_parallel_size=2, kv_cache_dtype="fp8"),
    RooflineCostModel("qwen2.5-7b", "a10g", weight_dtype="int4"),
    RooflineCostModel("opt-13b", "a100-40gb", "float32"),
    ProfileCostModel(make_profile()),
    ProfileCostModel(make_profile(features=["intercept", "gemm_rows", "num_swap_tokens",
                                            "num_spec_seqs"],
                                  coefficients={"intercept": 0.01, "gemm_rows": 1e-4,
                                                "num_swap_tokens": 3e-6, "num_spec_seqs": 2e-3},
                                  gemm_knee=None)),
    ProfileCostModel(table_profile()),
]


@pytest.mark.parametrize("pricer", PRICERS_UNDER_TEST, ids=repr)
def test_scalar_and_vectorised_prices_are_bit_identical(pricer):
    rng = random.Random(5)
    shapes = [_random_shape(rng) for _ in range(2000)] + [StepShape(), StepShape(num_swap_tokens=9)]
    scalar = [pricer.price(s) for s in shapes]
    assert [pricer.step_time(s) for s in shapes] == scalar  # the old name, same function
    assert pricer.price_many(shapes).tolist() == scalar
    cols = {f: np.array([getattr(s, f) for s in shapes]) for f in SHAPE_FIELDS}
    assert pricer.price_columns(cols).tolist() == scalar
    assert pricer.step_times(**cols).tolist() == scalar
    assert scalar[-2] == 0.0 and all(t >= 0 for t in scalar)


@pytest.mark.parametrize("pricer", PRICERS_UNDER_TEST + [ScaledPricer(PRICERS_UNDER_TEST[0], 1.37)],
                         ids=repr)
def test_decode_window_prices_are_bit_identical_to_price(pricer):
    """A decode window prices its later steps through ``decode_context_pricer``: the same bits
    as pricing each step's own shape."""
    rng = random.Random(11)
    for _ in range(300):
        s = _random_shape(rng)
        f = pricer.decode_context_pricer(s)
        for i in (0, 1, 2, 9, 250, 4000):
            c = s.decode_context_tokens + i * max(s.num_decode_seqs, 1)
            assert f(c) == pricer.price(s.with_decode_context(c)), (s, i)


@pytest.mark.parametrize("pricer", PRICERS_UNDER_TEST, ids=repr)
def test_columns_broadcast_and_reject_unknown_fields(pricer):
    shape = StepShape(num_decode_seqs=8, decode_context_tokens=800)
    many = pricer.price_columns({"num_decode_seqs": 8, "decode_context_tokens": [800, 1600]})
    assert many.tolist() == [pricer.price(shape),
                             pricer.price(replace(shape, decode_context_tokens=1600))]
    assert pricer.price_many([]).shape == (0,)
    with pytest.raises(TypeError, match="unknown StepShape field 'batch'"):
        pricer.price_columns({"batch": [1]})


@pytest.mark.parametrize("pricer", PRICERS_UNDER_TEST, ids=repr)
def test_breakdown_sums_to_the_price_and_describe_names_the_source(pricer):
    rng = random.Random(8)
    for s in [_random_shape(rng) for _ in range(300)]:
        parts = pricer.breakdown(s)
        assert all(v >= 0 for v in parts.values())
        assert sum(parts.values()) == pytest.approx(pricer.price(s), rel=1e-9, abs=1e-15)
    assert isinstance(pricer, StepPricer)
    kind = "roofline" if isinstance(pricer, RooflineCostModel) else "profile"
    assert pricer.describe().startswith(kind) and pricer.kind == kind


def test_registry_builds_each_source(tmp_path):
    assert set(PRICERS) >= {"roofline", "profile"}
    roof = make_pricer("roofline", "llama-3.1-8b", "a100-80gb")
    shape = StepShape(num_decode_seqs=4, decode_context_tokens=4000)
    assert roof.price(shape) == RooflineCostModel("llama-3.1-8b", "a100-80gb").price(shape)
    path = make_profile().save(tmp_path / "p.json")
    prof = make_pricer("profile", path)
    assert prof.describe() == f"profile {prof.profile.path}"
    assert prof.price(shape) == ProfileCostModel(make_profile()).price(shape)
    with pytest.raises(ConfigError, match="unknown kind 'tables'"):
        make_pricer("tables")


def test_the_roofline_prices_no_warnings():
    assert RooflineCostModel("llama-3.1-8b", "a100-80gb").warnings() == []


# -- machine fingerprint --------------------------------------------------------------------

def test_fingerprint_reads_this_machine_without_importing_torch():
    import sys

    had_torch = "torch" in sys.modules
    fp = machine_fingerprint()
    assert ("torch" in sys.modules) == had_torch
    assert fp["cpu"] and isinstance(fp["cpu_flags"], list) and fp["logical_cores"] >= 1
    assert fp["cpu_flags"] == cpu_flags() == sorted(fp["cpu_flags"])
    assert isinstance(fp["gpus"], list)
    assert "gpus" not in machine_fingerprint(with_gpus=False)


def test_mismatch_names_each_difference():
    there = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "logical_cores": 2, "torch_threads": 2,
             "cpu_flags": ["amx_bf16", "amx_tile", "avx2", "avx512_bf16", "avx512f", "fma"],
             "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "550.54"}]}
    assert machine_mismatch(there, dict(there)) == []
    here = {"cpu": "Intel(R) Xeon(R) Gold 6226R", "logical_cores": 16, "torch_threads": None,
            "cpu_flags": ["avx2", "avx512f", "fma", "avx512_vnni"], "gpus": []}
    diffs = machine_mismatch(there, here)
    assert diffs == [
        "CPU 'Intel(R) Xeon(R) Platinum 8480+' there, 'Intel(R) Xeon(R) Gold 6226R' here",
        "CPU flags amx_bf16, amx_tile, avx512_bf16 there, not here",
        "CPU flags avx512_vnni here, not there",
        "2 logical cores there, 16 here",  # torch threads unknown here: not compared
        "GPU NVIDIA H100 80GB HBM3 (driver 550.54) there, none here",
    ]
    assert not any("GPU" in d for d in machine_mismatch(there, here, device="cpu"))


def _other_machine() -> dict:
    """This machine's fingerprint with one speed flag toggled: amx_bf16."""
    fp = machine_fingerprint()
    flags = set(fp["cpu_flags"])
    flags ^= {"amx_bf16"}
    return {**fp, "cpu_flags": sorted(flags)}


def test_a_profile_from_another_machine_warns_in_the_summary(tmp_path):
    over = ["model=smollm2-135m", "workload.num_requests=20", "workload.arrival.rate=4"]
    other = make_profile(machine=_other_machine()).save(tmp_path / "other.json")
    s = simulate(None, overrides=over + [f"cost_model.profile={other}"]).summary
    [warning] = s["warnings"]
    assert str(other) in warning and "different machine" in warning and "amx_bf16" in warning

    same = make_profile(machine=machine_fingerprint()).save(tmp_path / "same.json")
    assert "warnings" not in simulate(None, overrides=over + [f"cost_model.profile={same}"]).summary

    old = make_profile().save(tmp_path / "old.json")  # made before profiles recorded it
    [warning] = simulate(None, overrides=over + [f"cost_model.profile={old}"]).summary["warnings"]
    assert "does not record its machine" in warning

    assert "warnings" not in simulate(None, overrides=over).summary  # the roofline: none


def test_a_cpu_profile_ignores_gpus_and_a_gpu_profile_compares_them():
    here = machine_fingerprint()
    gpu_there = {**here, "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "driver": "535.0"}]}
    cpu_prof = ProfileCostModel(make_profile(machine=gpu_there, device="cpu"))
    assert cpu_prof.warnings(current={**here, "gpus": []}) == []
    gpu_prof = ProfileCostModel(make_profile(machine=gpu_there, device="cuda"))
    [warning] = gpu_prof.warnings(current={**here, "gpus": []})
    assert "GPU NVIDIA A100-SXM4-80GB (driver 535.0) there, none here" in warning
