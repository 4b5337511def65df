"""The whole loop on the real model: profile SmolLM2-135M on a tiny grid, fit, write the profile,
validate on a tiny online workload, and read validation.json back as the dashboard does."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from calibration.fit import fit  # noqa: E402
from calibration.profiler import Grid, profile_engine  # noqa: E402
from calibration.validate import run_validation  # noqa: E402
from calibration.validation_file import load_validation  # noqa: E402
from sim.pricing.profile_file import Profile, load_profile  # noqa: E402

TINY = Grid("tiny", decode_batches=(1, 4), decode_contexts=(32,), decode_steps=2,
            max_decode_kv_tokens=1024, prefill_lens=(16, 64), chunked=((64, 32),),
            multi_prefill=((2, 16),), mixed=((2, 32),), speculative=((2, 32, 2),))


@pytest.mark.slow  # ~20 s on a quiet 2-core CPU, minutes when the box is shared
def test_calibrate_and_validate_smollm2(tmp_path):
    run = profile_engine("smollm2", TINY, dtype="bfloat16", num_threads=1,
                         kv_cache_bytes=16 * 2**20)
    assert run.catalog_model == "smollm2-135m" and run.dtype == "bfloat16" and run.device == "cpu"
    assert run.samples.n >= 20 and len(run.records) == run.samples.n
    assert run.machine["logical_cores"] == os.cpu_count() and run.machine["torch_threads"] == 1
    result = fit(run.samples)
    prof = Profile(hardware=run.hardware, device=run.device, model=run.model, dtype=run.dtype,
                   block_size=run.block_size, features=result.features,
                   coefficients=result.coefficients, gemm_knee=result.knee, fit=result.error,
                   source={"kind": "grid", "grid": TINY.name}, num_threads=run.num_threads,
                   catalog_model=run.catalog_model, model_spec="smollm2", machine=run.machine)
    path = prof.save(tmp_path / "smollm2.json")
    assert load_profile(path).coefficients == result.coefficients
    assert load_profile(path).machine == run.machine

    record = run_validation(path, rate=4.0, num_requests=6, out_dir=tmp_path / "val", scale=0.08,
                            kv_cache_bytes=16 * 2**20)
    again = load_validation(tmp_path / "val" / "validation.json")
    assert again == record
    names = {m["name"] for m in record["metrics"]}
    assert {"mean_ttft_ms", "p99_tpot_ms", "median_e2el_ms", "output_throughput", "num_steps",
            "duration_s"} <= names
    assert len(record["samples"]["e2el_ms"]["real"]) == len(record["samples"]["e2el_ms"]["predicted"]) == 6
    assert record["source"]["simulator_model"] == "smollm2-135m"
    assert record["source"]["step_error"].startswith("profile on the replay's own")
    assert "warnings" not in record["source"]  # validated on the machine it was measured on
    steps = (tmp_path / "val" / "runtime_steps.jsonl").read_text().splitlines()
    assert len(steps) == next(m["real"] for m in record["metrics"] if m["name"] == "num_steps")
    assert json.loads((tmp_path / "val" / "sim" / "summary.json").read_text())["completed"] == 6
    assert "num_spec_seqs" in result.features  # the grid's speculative case priced verification

    # With n-gram speculation: the simulator gets the engine's measured acceptance and draft
    # availability, so what a verifying step emits must agree closely.
    spec = run_validation(path, rate=4.0, num_requests=6, out_dir=tmp_path / "val_spec", scale=0.08,
                          kv_cache_bytes=16 * 2**20, num_speculative_tokens=2)
    by_name = {m["name"]: m for m in spec["metrics"]}
    assert 0 < by_name["spec_acceptance_rate"]["real"] <= 1
    assert abs(by_name["spec_tokens_per_step"]["error"]) < 0.25
    assert "n-gram speculation k=2" in spec["source"]["engine"]
