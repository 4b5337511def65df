"""Readers of real benchmark results, the staged shared-prefix workload, and
``kvplan validate --real`` end to end (on tiny synthetic files; on the shared runs when present).

Simulator numbers here are pinned with ``cost_model.source=roofline`` where the key exists, so
they do not change when operator tables are found."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibration.real_runs import RealRunError, read_run
from sim.workload.shared_prefix import SharedPrefix, Stage, shared_prefix_requests, stage_arrivals
from tests.calibration.helpers import run_kvplan

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "real_runs" / "vllm_0.15.1_h100"
GENERAL_7B = SHARED / "20260217-231439-llama-2-7b-tp1-general"
needs_shared = pytest.mark.skipif(not GENERAL_7B.is_dir(), reason="../shared/real_runs absent")


def _roofline() -> list[str]:
    from sim.scenario import DEFAULTS

    return ["--set", "cost_model.source=roofline"] if "source" in DEFAULTS["cost_model"] else []


# --- synthetic inputs -----------------------------------------------------------------------


def _stats(mean: float) -> dict:
    return {"mean": mean, "median": mean, "p90": mean * 1.1, "p99": mean * 1.2, "min": mean / 2, "max": mean * 2}


def make_inference_perf(root: Path, name: str = "20260101-000000-llama-2-7b-tp1-general_h100",
                        stages=((2, 10),), failures: int = 0) -> Path:
    """A tiny inference-perf run folder (stage files in seconds)."""
    folder = root / name
    (folder / "results").mkdir(parents=True)
    (folder / "exp-config.yaml").write_text(yaml.safe_dump({
        "model": "meta-llama/Llama-2-7b-hf", "tensor_parallelism": 1, "max_model_len": 4096,
        "max_num_batched_tokens": 2048, "max_num_seqs": 128, "app": "inference-perf"}))
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 3, "num_users_per_system_prompt": 2, "system_prompt_len": 64,
        "question_len": 100, "output_len": 20}},
        "load": {"type": "constant", "stages": [{"rate": r, "duration": d} for r, d in stages]}}
    (folder / "profile.yaml").write_text(json.dumps(profile))
    for i, (r, d) in enumerate(stages):
        n = int(r * d)
        (folder / "results" / f"stage_{i}_lifecycle_metrics.json").write_text(json.dumps({
            "load_summary": {"count": n, "requested_rate": r, "achieved_rate": r},
            "successes": {"count": n - failures, "latency": {
                "request_latency": _stats(0.5), "time_to_first_token": _stats(0.03)},
                "throughput": {"requests_per_sec": r * 0.99},
                "prompt_len": _stats(170.0), "output_len": _stats(19.0)},
            "failures": {"count": failures}}))
    (folder / "results" / "summary_lifecycle_metrics.json").write_text(json.dumps(
        {"successes": {"prompt_len": _stats(170.0)}}))
    return folder


def make_vllm_bench(path: Path, detailed: bool = True) -> Path:
    """A `vllm bench serve --save-result [--save-detailed]` file (field names of vllm/benchmarks/serve.py)."""
    n = 12
    doc = {"date": "20260101-000000", "endpoint_type": "openai", "backend": "openai", "label": None,
           "model_id": "meta-llama/Llama-2-7b-hf", "tokenizer_id": "meta-llama/Llama-2-7b-hf",
           "num_prompts": n, "request_rate": 3.0, "burstiness": 1.0, "max_concurrency": None,
           "duration": 5.0, "completed": n, "failed": 0, "total_input_tokens": 200 * n,
           "total_output_tokens": 30 * n, "request_throughput": 2.4, "output_throughput": 72.0,
           "mean_ttft_ms": 25.0, "median_ttft_ms": 24.0, "std_ttft_ms": 3.0, "p99_ttft_ms": 40.0,
           "mean_tpot_ms": 8.0, "median_tpot_ms": 8.0, "std_tpot_ms": 0.5, "p99_tpot_ms": 9.0,
           "mean_itl_ms": 8.0, "median_itl_ms": 8.0, "std_itl_ms": 1.0, "p99_itl_ms": 12.0,
           "mean_e2el_ms": 260.0, "median_e2el_ms": 255.0, "std_e2el_ms": 10.0, "p99_e2el_ms": 300.0,
           "tensor_parallel_size": "1", "hardware": "h100-sxm"}
    if detailed:
        doc.update(input_lens=[190 + i for i in range(n)], output_lens=[30] * n,
                   ttfts=[0.025] * n, itls=[[0.008] * 29] * n, errors=[""] * n)
    path.write_text(json.dumps(doc))
    return path


def make_guidellm(path: Path) -> Path:
    """A GuideLLM report (0.7 layout: benchmarks[].config.strategy, metrics.*.successful)."""
    def dist(mean):
        return {"successful": {"mean": mean, "median": mean, "count": 10,
                               "percentiles": {"p50": mean, "p90": mean * 1.1, "p99": mean * 1.3}}}

    bench = lambda kind, rate: {  # noqa: E731
        "type_": "generative_benchmark",
        "config": {"strategy": {"type_": kind, "rate": rate}, "backend": {"model": "meta-llama/Llama-2-7b-hf"}},
        "scheduler_metrics": {"measure_start_time": 100.0, "measure_end_time": 110.0},
        "metrics": {"request_totals": {"successful": 10, "errored": 0, "incomplete": 0, "total": 10},
                    "request_latency": dist(0.4), "time_to_first_token_ms": dist(30.0),
                    "time_per_output_token_ms": dist(9.0), "prompt_token_count": dist(150.0),
                    "output_token_count": dist(40.0), "requests_per_second": dist(1.0)}}
    doc = {"metadata": {"version": 2}, "benchmarks": [bench("synchronous", None), bench("constant", 1.0),
                                                      bench("poisson", 2.0)]}
    path.write_text(json.dumps(doc))
    return path


# --- readers ------------------------------------------------------------------------------


def test_inference_perf_reader(tmp_path):
    run = read_run(make_inference_perf(tmp_path, stages=((2, 10), (4, 5))))
    assert run.format == "inference-perf" and run.model == "meta-llama/Llama-2-7b-hf"
    assert run.server["max_num_seqs"] == 128 and run.server["tensor_parallel_size"] == 1
    assert [s.num_requests for s in run.stages] == [20, 20]
    sp = run.shared_prefix
    assert (sp.num_groups, sp.prompts_per_group, sp.system_prompt_len, sp.output_len) == (3, 2, 64, 20)
    assert sp.question_len == 170 - 64  # the re-tokenised prompt length the server saw
    m = run.measured[1]
    assert m.e2el_ms["mean"] == pytest.approx(500.0) and m.ttft_ms["p90"] == pytest.approx(33.0)
    assert m.tpot_ms == pytest.approx((500.0 - 30.0) / 19)  # (E2E - TTFT) / (output_len - 1)


def test_vllm_bench_reader(tmp_path):
    run = read_run(make_vllm_bench(tmp_path / "bench.json"))
    assert run.format == "vllm-bench" and run.server == {"tensor_parallel_size": 1}
    assert run.hardware == "h100-sxm"
    st = run.stages[0]
    assert st.num_requests == 12 and st.rate == 3.0 and st.process == "poisson" and st.cv == 1.0
    assert run.prompt_lens[:3] == [190, 191, 192] and run.output_lens == [30] * 12
    m = run.measured[0]
    assert m.e2el_ms == {"mean": 260.0, "p90": None, "p99": 300.0} and m.tpot_ms == 8.0
    means = read_run(make_vllm_bench(tmp_path / "plain.json", detailed=False))
    assert means.prompt_lens == [200] * 12 and any("no per-request lengths" in n for n in means.notes)


def test_readers_say_what_the_prompts_are_made_of(tmp_path):
    """inference-perf's shared-prefix data decodes random token ids: synthetic text, and the
    replay's config says so (the API server's tokenising priced for it); a vLLM bench file says
    by its ``dataset_name`` (random: synthetic; sharegpt: prose), and a file that does not say
    leaves the natural default."""
    from calibration.real_runs import dataset_prompt_text
    from calibration.validate_real import build_config

    ip = read_run(make_inference_perf(tmp_path, stages=((2, 10),)))
    assert ip.prompt_text == "synthetic"
    config, notes = build_config(ip, hardware="h100-sxm")
    assert config["workload"]["prompt_text"] == "synthetic"
    assert any("synthetic token ids" in n for n in notes)
    plain = read_run(make_vllm_bench(tmp_path / "bench.json"))
    assert plain.prompt_text is None
    assert build_config(plain)[0]["workload"].get("prompt_text", "natural") == "natural"
    doc = json.loads((tmp_path / "bench.json").read_text())
    for name, want in (("random", "synthetic"), ("sharegpt", "natural"), ("prefix_repetition", "synthetic")):
        (tmp_path / f"{name}.json").write_text(json.dumps({**doc, "dataset_name": name}))
        assert read_run(tmp_path / f"{name}.json").prompt_text == want
    assert dataset_prompt_text(None) is None and dataset_prompt_text("RANDOM") == "synthetic"
    assert dataset_prompt_text("random-ids") == "token_ids"  # SGLang sends the ids themselves


def test_guidellm_reader(tmp_path):
    run = read_run(make_guidellm(tmp_path / "benchmarks.json"))
    assert run.format == "guidellm" and run.model == "meta-llama/Llama-2-7b-hf"
    # synchronous is a closed loop of one client (tests/calibration/test_real_runs_closed.py)
    assert [(s.process, s.rate, s.num_requests) for s in run.stages] == [
        ("closed", 1.0, 10), ("constant", 1.0, 10), ("poisson", 2.0, 10)]
    assert run.stages[0].concurrency == 1 and not any("skipped" in n for n in run.notes)
    m = run.measured[1]
    assert m.e2el_ms["mean"] == pytest.approx(400.0) and m.ttft_ms["p99"] == pytest.approx(39.0)
    assert m.tpot_ms == pytest.approx((400.0 - 30.0) / 39)
    assert run.prompt_lens == [150] * 30


@needs_shared
def test_shared_runs_read():
    runs = [read_run(p) for p in sorted(SHARED.iterdir()) if p.is_dir()]
    assert len(runs) == 16
    run = read_run(GENERAL_7B)
    m = run.measured[1]
    assert m.e2el_ms["mean"] == pytest.approx(4158.1, abs=0.1) and m.ttft_ms["mean"] == pytest.approx(51.9, abs=0.1)
    assert m.tpot_ms == pytest.approx(16.6, abs=0.05) and m.failures == 0
    assert [s.num_requests for s in run.stages] == [4800, 12000]


# --- bad input: one line naming the file (and field), exit 2 --------------------------------


def _cli(argv, capsys):
    return run_kvplan(argv, capsys)


@pytest.mark.parametrize("breakage,needle", [
    ("missing_stage", "stage_1_lifecycle_metrics.json: missing"),
    ("malformed", "stage_0_lifecycle_metrics.json: not valid JSON"),
    ("unknown", "unknown format"),
    ("empty_dir", "nothing kvplan reads"),
    ("bad_field", "successes.latency.request_latency"),
])
def test_bad_input_is_one_line(tmp_path, capsys, breakage, needle):
    if breakage in ("missing_stage", "malformed", "bad_field"):
        path = make_inference_perf(tmp_path, stages=((2, 10), (4, 5)))
        stage0 = path / "results" / "stage_0_lifecycle_metrics.json"
        if breakage == "missing_stage":
            (path / "results" / "stage_1_lifecycle_metrics.json").unlink()
        elif breakage == "malformed":
            stage0.write_text('{"successes": ')
        else:
            d = json.loads(stage0.read_text())
            del d["successes"]["latency"]["request_latency"]
            stage0.write_text(json.dumps(d))
    elif breakage == "unknown":
        path = tmp_path / "x.json"
        path.write_text('{"hello": 1}')
    else:
        path = tmp_path / "empty"
        path.mkdir()
    with pytest.raises(RealRunError, match=needle.replace(".", r"\.")):
        read_run(path)
    code, _, err = _cli(["validate", "--real", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


# --- workload -----------------------------------------------------------------------------


def test_stages_have_exactly_rate_times_duration_requests():
    rng = np.random.default_rng(0)
    stages = [Stage.of_rate(8, 60), Stage.of_rate(20, 30), Stage.of_rate(2.5, 7)]
    times, stage_of, starts = stage_arrivals(stages, rng, gap_s=5.0)
    assert np.bincount(stage_of).tolist() == [480, 600, 17]
    for k, st in enumerate(stages):
        t = times[stage_of == k] - starts[k]
        assert t.min() > 0 and t.max() == pytest.approx(st.duration_s)  # gaps rescaled to the stage


def test_shared_prefix_blocks_and_cache_hits():
    from sim.api import simulate

    sp = SharedPrefix(num_groups=3, prompts_per_group=4, system_prompt_len=64, question_len=50, output_len=8)
    reqs, stage_of, _ = shared_prefix_requests(sp, [Stage.of_rate(4, 10)], seed=1)
    assert len(reqs) == 40 and all(r.max_output_tokens == 8 and r.prompt_len == 114 for r in reqs)
    heads = {tuple(r.block_hashes[:4]) for r in reqs}
    assert len(heads) == 3  # the 4 full system-prompt blocks: one set per group
    cfg = {"model": "llama-2-7b", "hardware": "h100-sxm", "kv_cache": {"prefix_caching": True}}
    overrides = ["cost_model.source=roofline"] if _roofline() else []
    res = simulate(cfg, overrides=overrides, requests=reqs)
    assert res.summary["kv_cache"]["prefix_cache_hit_rate"] > 0
    assert sum(r.num_cached_tokens for r in res.requests) > 0


# --- validate --real end to end -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["inference-perf", "vllm-bench", "guidellm"])
def test_validate_real_synthetic(tmp_path, capsys, kind):
    if kind == "inference-perf":
        path = make_inference_perf(tmp_path)
        extra = []
    elif kind == "vllm-bench":
        path = make_vllm_bench(tmp_path / "b.json")
        extra = []
    else:
        path = make_guidellm(tmp_path / "g.json")
        extra = ["--hardware", "h100-sxm"]
    out = tmp_path / "out"
    code, stdout, err = _cli(["validate", "--real", str(path), "--out", str(out), *extra, *_roofline()], capsys)
    assert code == 0, err
    doc = json.loads((out / "validation.json").read_text())
    names = [m["name"] for m in doc["metrics"]]
    assert "stage0_overloaded" in names and "stage0_mean_e2el_ms" in names and "stage0_mean_tpot_ms" in names
    assert doc["source"]["format"] == kind and doc["source"]["stages"][0]["overloaded"] == "real no, predicted no"
    assert "stage0_mean_ttft_ms" in stdout


def test_validate_real_overloaded_stage_is_not_scored(tmp_path, capsys):
    path = make_inference_perf(tmp_path, failures=3)
    out = tmp_path / "out"
    code, stdout, err = _cli(["validate", "--real", str(path), "--out", str(out), *_roofline()], capsys)
    assert code == 0, err
    doc = json.loads((out / "validation.json").read_text())
    assert [m["name"] for m in doc["metrics"]] == ["stage0_overloaded"]
    assert "overloaded: real yes" in stdout and "not scored on latency" in stdout


@needs_shared
def test_validate_real_shared_run(tmp_path, capsys):
    out = tmp_path / "out"
    code, stdout, err = _cli(["validate", "--real", str(GENERAL_7B), "--out", str(out),
                              "--stage-seconds", "20", *_roofline()], capsys)
    assert code == 0, err
    from calibration.validation_file import load_validation

    record = load_validation(out / "validation.json")
    assert {"stage0_mean_e2el_ms", "stage1_mean_tpot_ms"} <= {m["name"] for m in record["metrics"]}
    assert record["source"]["hardware"] == "h100-sxm" and record["source"]["dtype"] == "float16"


@needs_shared
def test_mixtral_run_is_validated(tmp_path, capsys):
    """Mixtral is modelled: its run is scored, its model read from the run's config.json."""
    mixtral = next(SHARED.glob("*mixtral*general"))
    out = tmp_path / "o"
    code, _, err = _cli(["validate", "--real", str(mixtral), "--out", str(out),
                         "--stage-seconds", "20", *_roofline()], capsys)
    assert code == 0, err
    from calibration.validation_file import load_validation

    record = load_validation(out / "validation.json")
    assert "stage0_mean_tpot_ms" in {m["name"] for m in record["metrics"]}


def test_unmodelled_moe_run_is_skipped_in_one_line(tmp_path, capsys):
    """A mixture of experts of a kind kvplan does not price yet (Qwen2-MoE) is refused by name."""
    import shutil

    if not GENERAL_7B.is_dir():
        pytest.skip("../shared real runs absent")
    root = tmp_path / "runs_h100"
    run = root / "x-qwen1.5-moe-tp1-general"
    shutil.copytree(GENERAL_7B, run)
    cfg = yaml.safe_load((run / "exp-config.yaml").read_text())
    cfg["model"] = "Qwen/Qwen1.5-MoE-A2.7B"
    (run / "exp-config.yaml").write_text(yaml.safe_dump(cfg))
    mc = root / "model_configs" / "Qwen1.5-MoE-A2.7B"
    mc.mkdir(parents=True)
    (mc / "config.json").write_text(json.dumps({"model_type": "qwen2_moe", "num_experts": 60}))
    code, _, err = _cli(["validate", "--real", str(run), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "mixture-of-experts" in err
