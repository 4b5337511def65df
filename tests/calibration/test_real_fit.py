"""``kvplan calibrate --real``: the two constants' effect (the request overhead shifts TTFT and
E2E exactly; the step scale keeps the fast path exact), the fit recovering known constants from
synthetic "real" runs made by simulating with them, the held-out folds, the profile it writes
and the one-line errors. All on the roofline (tests/conftest.py) and tiny stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from calibration.real_fit import RealFitError, calibrate_real, make_folds, StageObs
from calibration.real_runs import read_run
from calibration.validate_real import compare_run
from sim.api import simulate
from tests.calibration.helpers import run_kvplan

SMALL = {"model": "llama-2-7b", "hardware": "h100-sxm", "seed": 3,
         "cost_model": {"source": "roofline"},
         "workload": {"num_requests": 40, "arrival": {"process": "poisson", "rate": 20.0},
                      "input_len": {"dist": "uniform", "min": 50, "max": 900},
                      "output_len": {"dist": "uniform", "min": 2, "max": 60}}}


def _sim(*sets, fast=True, async_=False):
    over = list(sets) + [f"scheduler.async_scheduling={'true' if async_ else 'false'}"]
    return simulate(SMALL, overrides=over, fast_decode=fast)


# --- the two config keys ------------------------------------------------------------------


@pytest.mark.parametrize("async_", [False, True])
def test_request_overhead_shifts_ttft_and_e2e_exactly(async_):
    a = _sim(async_=async_)
    b = _sim("cost_model.request_overhead_ms=25", async_=async_)
    assert len(a.requests) == len(b.requests) == 40
    for ra, rb in zip(a.requests, b.requests):
        assert rb.ttft - ra.ttft == pytest.approx(0.025, abs=1e-9)
        assert rb.e2el - ra.e2el == pytest.approx(0.025, abs=1e-9)
        assert ra.tpot == pytest.approx(rb.tpot, abs=1e-12) if ra.tpot is not None else rb.tpot is None
        assert rb.arrival_time == ra.arrival_time  # still measured from the arrival
    assert b.summary["cost_model"]["request_overhead_ms"] == pytest.approx(25)
    assert a.summary["mean_ttft_ms"] + 25 == pytest.approx(b.summary["mean_ttft_ms"])


def test_step_scale_multiplies_every_step_and_keeps_the_fast_path_exact():
    base = _sim()
    fast = _sim("cost_model.step_scale=1.37")
    slow = _sim("cost_model.step_scale=1.37", fast=False)
    assert [r.token_times for r in fast.requests] == [r.token_times for r in slow.requests]
    assert fast.steps["duration_s"][0] == pytest.approx(1.37 * base.steps["duration_s"][0], rel=1e-12)
    cm = fast.summary["cost_model"]
    assert cm["step_scale"] == 1.37 and cm["source"] == "roofline" and "x 1.37" in cm["description"]
    assert base.summary["cost_model"]["step_scale"] == 1.0


# --- synthetic "real" runs ----------------------------------------------------------------


def _stats_s(mean_ms: float, p90_ms: float, p99_ms: float) -> dict:
    return {"mean": mean_ms / 1e3, "median": mean_ms / 1e3, "p90": p90_ms / 1e3, "p99": p99_ms / 1e3,
            "min": mean_ms / 2e3, "max": p99_ms / 1e3}


def make_run(root: Path, name: str, hf_model: str, stages=((3.0, 8.0), (6.0, 5.0)),
             output_len: int = 24, step_scale: float = 1.0, overhead_ms: float = 0.0) -> Path:
    """An inference-perf run folder whose measurements are a roofline simulation of itself with
    ``step_scale`` and ``overhead_ms``: a "real" run with known constants."""
    folder = root / name
    (folder / "results").mkdir(parents=True)
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({
        "model": hf_model, "tensor_parallelism": 1, "max_model_len": 4096,
        "max_num_batched_tokens": 2048, "max_num_seqs": 128}))
    sp = {"num_unique_system_prompts": 2, "num_users_per_system_prompt": 3, "system_prompt_len": 64,
          "question_len": 200, "output_len": output_len}
    (folder / "profile.yaml").write_text(yaml.safe_dump({
        "data": {"type": "shared_prefix", "shared_prefix": sp},
        "load": {"type": "constant", "stages": [{"rate": r, "duration": d} for r, d in stages]}}))

    def write(stage_metrics):
        for i, ((r, d), m) in enumerate(zip(stages, stage_metrics)):
            n = int(r * d)
            (folder / "results" / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps({
                "load_summary": {"count": n, "requested_rate": r, "achieved_rate": r},
                "successes": {"count": n, "latency": {
                    "request_latency": _stats_s(m["mean_e2el_ms"], m["p90_e2el_ms"], m["p99_e2el_ms"]),
                    "time_to_first_token": _stats_s(m["mean_ttft_ms"], m["p90_ttft_ms"], m["p99_ttft_ms"])},
                    "throughput": {"requests_per_sec": r},
                    "prompt_len": {"mean": 264.0}, "output_len": {"mean": float(output_len)}},
                "failures": {"count": 0}}))
        (folder / "results" / "summary_lifecycle_metrics.json").write_text(json.dumps(
            {"successes": {"prompt_len": {"mean": 264.0}}}))

    placeholder = {k: 100.0 for k in ("mean_e2el_ms", "p90_e2el_ms", "p99_e2el_ms",
                                      "mean_ttft_ms", "p90_ttft_ms", "p99_ttft_ms")}
    write([placeholder] * len(stages))
    truth = compare_run(read_run(folder), cost_source="roofline",
                        overrides=[f"cost_model.step_scale={step_scale}",
                                   f"cost_model.request_overhead_ms={overhead_ms}"])
    write([s.predicted for s in truth.stages])
    return folder


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """Two models' runs, simulated with step_scale 1.1 and 20 ms of overhead."""
    root = tmp_path_factory.mktemp("real") / "runs_h100"
    root.mkdir()
    make_run(root, "a-llama-2-7b-tp1", "meta-llama/Llama-2-7b-hf", step_scale=1.1, overhead_ms=20)
    make_run(root, "b-llama-2-13b-tp1", "meta-llama/Llama-2-13b-hf", step_scale=1.1, overhead_ms=20)
    return root


def test_fit_recovers_known_constants(synthetic):
    res = calibrate_real([synthetic], stage_seconds=None, cost_source="roofline",
                         start_grid=(1.0, 1.1, 1.2), refine=False)
    assert res.base == "roofline" and res.held_out_by == "model"
    assert res.fit.step_scale == pytest.approx(1.1, abs=2e-3)
    assert res.fit.request_overhead_ms == pytest.approx(20.0, abs=0.5)
    # every fold (one model held out) recovers them too, so the held-out error is ~0
    for fold in res.folds:
        assert fold.fit.step_scale == pytest.approx(1.1, abs=2e-3)
    for m, v in res.mape("heldout").items():
        assert v < 0.01, m
    assert res.mape("uncalibrated")["mean_ttft_ms"] > 0.05  # the constants mattered


def test_lomo_folds_never_train_on_the_held_out_model():
    obs = [StageObs(run, model, 0, 1.0, {}) for run, model in
           [("r1", "A"), ("r2", "A"), ("r3", "B"), ("r4", "C"), ("r5", "C")]]
    by, folds = make_folds(obs)
    assert by == "model" and [f[0] for f in folds] == ["A", "B", "C"]
    model_of = {o.run: o.model for o in obs}
    for held, train, test in folds:
        assert all(model_of[r] != held for r in train)
        assert sorted(test) == sorted(r for r, m in model_of.items() if m == held)
        assert sorted(train + test) == sorted(model_of)
    by, folds = make_folds(obs[:2])  # one model: leave one run out
    assert by == "run" and [(f[1], f[2]) for f in folds] == [(["r2"], ["r1"]), (["r1"], ["r2"])]
    assert make_folds(obs[:1]) == ("none", [])


# --- the command --------------------------------------------------------------------------


def _cli(argv, capsys):
    return run_kvplan(argv, capsys)


def test_calibrate_real_end_to_end(synthetic, tmp_path, capsys):
    prof_path = tmp_path / "real.json"
    code, out, err = _cli(["calibrate", "--real", str(synthetic), "--out", str(prof_path),
                           "--stage-seconds", "0", "--no-progress"], capsys)
    assert code == 0, err
    assert "leave-one-model-out" in out and "wrote" in out
    from sim.pricing.profile_file import load_profile

    prof = load_profile(prof_path)
    assert prof.base == "roofline" and prof.features == [] and prof.source["kind"] == "real_runs"
    assert len(prof.source["runs"]) == 2 and prof.fit["held_out_by"] == "model"
    assert {f["held_out"] for f in prof.fit["folds"]} == {"meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf"}
    s, o = prof.step_scale, prof.request_overhead_ms
    assert 1.0 < s < 1.2 and 10 < o < 30
    # the profile applies: the base pricer for this scenario, scaled, plus the overhead
    res = simulate(SMALL, overrides=["cost_model.source=auto", f"cost_model.profile={prof_path}",
                                     "scheduler.async_scheduling=false"])
    ref = _sim(f"cost_model.step_scale={s!r}", f"cost_model.request_overhead_ms={o!r}")
    assert [r.e2el for r in res.requests] == pytest.approx([r.e2el for r in ref.requests], rel=1e-9)
    cm = res.summary["cost_model"]
    assert cm["source"] == "profile" and cm["base"] == "roofline" and cm["step_scale"] == s
    assert cm["request_overhead_ms"] == pytest.approx(o) and "fitted to real runs" in cm["description"]
    assert cm["known_error"]["held_out_by"] == "model"
    # and through the command line
    out_dir = tmp_path / "sim"
    code, _, err = _cli(["simulate", "--set", f"cost_model.profile={prof_path}", "--set", "workload.num_requests=8",
                         "--out", str(out_dir)], capsys)
    assert code == 0, err
    assert json.loads((out_dir / "summary.json").read_text())["cost_model"]["base"] == "roofline"


def test_real_profile_is_checked_on_load(tmp_path):
    from sim.pricing.profile_file import ProfileError, load_profile, parse_profile

    doc = {"format": "kvplan-profile/1", "hardware": "h100-sxm", "device": "cuda", "model": "m",
           "dtype": "float16", "block_size": 16, "base": "operator_tables",
           "adjustments": {"step_scale": 1.02, "request_overhead_ms": 9.0},
           "fit": {"heldout_mape": 0.05, "heldout_p90_ape": 0.1, "num_samples": 3, "num_heldout": 3},
           "source": {"kind": "real_runs"}}
    prof = parse_profile(doc)
    assert prof.features == [] and prof.step_scale == 1.02 and prof.to_dict()["base"] == "operator_tables"
    for bad, needle in [({"base": "magic"}, "base: 'magic'"),
                        ({"adjustments": {"step_scale": 0}}, "adjustments.step_scale"),
                        ({"adjustments": {"step_scale": 1, "speed": 2}}, "adjustments.speed: unknown"),
                        ({"features": ["intercept"], "coefficients": {"intercept": 0.1}}, "has no coefficients")]:
        with pytest.raises(ProfileError, match=needle.replace(".", r"\.").replace("(", r"\(")):
            parse_profile({**doc, **bad})
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    from sim.pricing.profile import ProfileCostModel

    with pytest.raises(ProfileError, match="fitted to real runs"):
        ProfileCostModel(load_profile(path))


@pytest.mark.parametrize("breakage,needle", [
    ("no_runs", "no runs found"),
    ("malformed", "not valid JSON"),
    ("overloaded", "every stage was overloaded"),
    ("moe", "mixture-of-experts"),
])
def test_bad_input_is_one_line(tmp_path, capsys, breakage, needle):
    root = tmp_path / "runs_h100"
    root.mkdir()
    if breakage != "no_runs":
        folder = make_run(root, "x-llama-2-7b", "meta-llama/Llama-2-7b-hf", stages=((2.0, 3.0),))
        stage0 = folder / "results" / "stage_0_lifecycle_metrics.json"
        if breakage == "malformed":
            stage0.write_text('{"successes": ')
        elif breakage == "overloaded":
            d = json.loads(stage0.read_text())
            d["failures"]["count"] = 2
            stage0.write_text(json.dumps(d))
        elif breakage == "moe":
            cfg = yaml.safe_load((folder / "exp-config.yaml").read_text())
            cfg["model"] = "Qwen/Qwen1.5-MoE-A2.7B"  # a mixture of experts kvplan does not price yet
            (folder / "exp-config.yaml").write_text(yaml.safe_dump(cfg))
            mc = root / "model_configs" / "Qwen1.5-MoE-A2.7B"
            mc.mkdir(parents=True)
            (mc / "config.json").write_text(json.dumps({"model_type": "qwen2_moe", "num_experts": 60}))
    code, _, err = _cli(["calibrate", "--real", str(root), "--out", str(tmp_path / "p.json"), "--no-progress"],
                        capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
    with pytest.raises(Exception, match=needle):
        calibrate_real([root])


# --- the shipped profile ------------------------------------------------------------------

SHIPPED = Path(__file__).resolve().parents[2] / "calibration" / "profiles" / "vllm-0.15.1_h100_real.json"
from sim.pricing.table_data import package_tables_root  # noqa: E402

TABLES = package_tables_root() or Path("/nonexistent")  # aiconfigurator-core's tables


@pytest.mark.skipif(not SHIPPED.is_file(), reason="profile not written yet")
def test_shipped_real_profile_loads_and_applies(capsys):
    from sim.pricing.profile_file import load_profile

    prof = load_profile(SHIPPED)
    assert prof.base == "operator_tables" and prof.fit["held_out_by"] == "model"
    assert len(prof.fit["folds"]) == 4 and all(f["held_out"] not in f["train_models"] for f in prof.fit["folds"])
    sets = [f"cost_model.profile={SHIPPED}", "workload.num_requests=8"]
    if not TABLES.is_dir():  # its base pricer needs the tables: one line says so
        with pytest.raises(Exception, match="adjusts the operator_tables pricer"):
            simulate({"model": "llama-2-7b", "hardware": "h100-sxm"}, overrides=sets)
        return
    res = simulate({"model": "llama-2-7b", "hardware": "h100-sxm"},
                   overrides=sets + [f"cost_model.tables={TABLES}"])
    cm = res.summary["cost_model"]
    assert cm["base"] == "operator_tables" and cm["step_scale"] == prof.step_scale
    assert res.summary["scenario"]["async_scheduling"] is True  # priced as a vLLM server


RUNS = Path(__file__).resolve().parents[2].parent / "shared" / "real_runs" / "vllm_0.15.1_h100"


@pytest.mark.skipif(not (RUNS.is_dir() and TABLES.is_dir()), reason="../shared runs or tables absent")
def test_calibrate_real_on_the_shared_runs(tmp_path, capsys, monkeypatch):
    """End to end on two real runs of two models (short stages for speed): the fit lands in the
    physically plausible range, and each model's error is reported held out."""
    monkeypatch.setenv("KVPLAN_GPU_TABLES", str(TABLES))
    runs = [next(RUNS.glob("*-llama-2-7b-tp1-codegen")), next(RUNS.glob("*-codellama-34b-tp2-roleplay"))]
    prof_path = tmp_path / "h100.json"
    code, out, err = _cli(["calibrate", *sum((["--real", str(r)] for r in runs), []), "--out", str(prof_path),
                           "--stage-seconds", "30", "--no-progress"], capsys)
    assert code == 0, err
    from sim.pricing.profile_file import load_profile

    prof = load_profile(prof_path)
    assert prof.base == "operator_tables" and len(prof.fit["folds"]) == 2
    assert 0.7 < prof.step_scale < 1.3 and 0 <= prof.request_overhead_ms < 50
    assert "leave-one-model-out" in out
