"""benchmarks/silicon_matrix.py: the AIConfigurator silicon row -> kvplan config mapping on
hand-written rows (dense FP8 on H100, MoE NVFP4 on B200, DP attention + EP, a nightly build, a
row without a version, gpt-oss's MXFP4), the skip reasons, the stratified sample, and a tiny
end-to-end replay of three rows built here (the CSV is only checked to be found when the
package is installed)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sim.errors import ConfigError, DoesNotFitError



from tests.benchmark_module import load_benchmark  # noqa: E402

sm = load_benchmark("silicon_matrix")

BLOCK_FP8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
MXFP4 = {"quant_method": "mxfp4"}


def row(**kw) -> dict:
    """A vLLM agg row as csv.DictReader gives it (strings; empty where the CSV is empty)."""
    base = {"id": "r", "silicon_data_source": "", "backend": "vllm", "backend_version": "0.15.1",
            "model_path": "meta-llama/Llama-3.1-70B", "system": "h100_sxm", "precision": "fp8",
            "mode": "agg", "isl": "1024", "osl": "128", "gemm_quant_mode": "fp8",
            "moe_quant_mode": "fp8", "batch_size": "8.0", "tp_size": "4.0", "pp_size": "1.0",
            "attention_dp_size": "1.0", "moe_tp_size": "4.0", "moe_ep_size": "1.0",
            "silicon_ttft_ms": "100.0", "silicon_tpot_ms": "10.0"}
    base.update({k: str(v) for k, v in kw.items()})
    return base


def write_csv(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a silicon_sample.csv-shaped file."""
    import csv

    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def point(r: dict, quant=None, moe=None, **kw):
    """row_to_point with the package look-ups replaced: the checkpoint's quantization_config
    and whether kvplan's model is a MoE."""
    return sm.row_to_point(r, checkpoint_quant=lambda m: quant, is_moe=lambda m: moe, **kw)


def test_dense_fp8_on_h100():
    p = point(row(), quant=None, moe=False, phases="spread")
    c = p.config
    assert c["model"] == "meta-llama/Llama-3.1-70B" and c["hardware"] == "h100-sxm"
    assert c["quantization"] == {"weights": "fp8"}  # a bf16 checkpoint under --quantization fp8
    assert c["dtype"] == "bfloat16" and c["engine"] == {"name": "vllm", "version": "0.15.1"}
    assert c["parallel"] == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1,
                             "data_parallel_size": 1, "enable_expert_parallel": False}
    w = c["workload"]
    assert w["arrival"] == {"process": "closed", "concurrency": 8, "think_time_s": 0}
    assert w["input_len"] == {"dist": "fixed", "mean": 1024, "min": 1024, "max": 1024}
    assert w["output_len"]["mean"] == 128 and w["output_len"]["max"] == 128
    assert c["kv_cache"]["max_model_len"] >= 1024 + 128
    # 2N warm-up, then 10N measured (the genai-perf convention of NVIDIA's scripts).
    assert p.warmup == 16 and w["num_requests"] == 16 + 80
    assert p.partition == ("h100_sxm", "meta-llama/Llama-3.1-70B", "fp8")
    assert p.silicon_ttft_ms == 100.0 and p.silicon_tpot_ms == 10.0
    assert p.notes == ["no silicon_concurrency recorded: N = batch_size x attention DP = 8"]
    q = point(row(), moe=False, requests_per_client=3, warmup_per_client=1, phases="spread")
    assert q.warmup == 8 and q.config["workload"]["num_requests"] == 32


def test_block_fp8_checkpoint_and_no_quant_mode():
    r = row(model_path="MiniMaxAI/MiniMax-M2.5", system="h200_sxm", moe_tp_size=4)
    assert point(r, quant=BLOCK_FP8, moe=True).config["quantization"]["weights"] == "fp8_block"
    bf16 = row(model_path="Qwen/Qwen3-32B", precision="", gemm_quant_mode="", moe_quant_mode="",
               moe_tp_size="0.0", moe_ep_size="0.0", attention_dp_size="")
    p = point(bf16, moe=False)
    assert p.config["quantization"]["weights"] == "none" and p.partition[2] == "bf16"
    assert p.config["parallel"]["data_parallel_size"] == 1  # moe columns of a dense model ignored


def test_moe_nvfp4_on_b200():
    r = row(model_path="moonshotai/Kimi-K2.5", system="b200_sxm", precision="fp4",
            gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size=8, moe_tp_size=8,
            backend_version="0.17.0", batch_size=32)
    c = point(r, quant={"quant_method": "compressed-tensors"}, moe=True).config
    assert c["hardware"] == "b200" and c["quantization"]["weights"] == "nvfp4"
    assert c["parallel"]["tensor_parallel_size"] == 8 and not c["parallel"]["enable_expert_parallel"]
    int4 = row(model_path="moonshotai/Kimi-K2.5", system="h200_sxm", precision="int4",
               gemm_quant_mode="int4_wo", moe_quant_mode="int4_wo", tp_size=8, moe_tp_size=8)
    assert point(int4, moe=True).config["quantization"]["weights"] == "int4"


def test_gpt_oss_labelled_nvfp4_is_its_mxfp4_checkpoint():
    r = row(model_path="openai/gpt-oss-120b", system="h200_sxm", precision="fp4",
            gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size=2, moe_tp_size=2)
    p = point(r, quant=MXFP4, moe=True)
    assert p.config["quantization"]["weights"] == "mxfp4"
    assert any("MXFP4" in n for n in p.notes)
    assert p.partition[2] == "fp4"  # reported under the row's own label
    assert "moe_activations" not in p.config["quantization"]  # Hopper: BF16 activations only


def test_gpt_oss_on_blackwell_runs_mxfp8_activations():
    r = row(model_path="openai/gpt-oss-120b", system="b200_sxm", precision="fp4",
            gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size=1, moe_tp_size=1)
    p = point(r, quant=MXFP4, moe=True)
    assert p.config["quantization"] == {"weights": "mxfp4", "moe_activations": "mxfp8"}
    assert any("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8" in n for n in p.notes)
    # SGLang's default is MXFP8 already: its rows keep the engine default.
    assert "moe_activations" not in point(dict(r, backend="sglang", backend_version="0.5.6"),
                                          quant=MXFP4, moe=True).config["quantization"]


def test_dp_attention_with_expert_parallel():
    # TP 2 x attention DP 4, experts EP 8: batch_size is per DP rank and the client
    # concurrency (silicon_concurrency) is 4x it.
    r = row(model_path="MiniMaxAI/MiniMax-M2.5", system="b300_sxm", tp_size=2, attention_dp_size=4,
            moe_tp_size=1, moe_ep_size=8, batch_size=128, backend_version="0.19.0",
            silicon_data_source="db-dump/2026-04-27; config_id=734; silicon_concurrency=512; "
                                "measured=2026-04-17T00:00:00.000Z; vllm/vllm-openai:v0.19.0-cu130")
    p = point(r, quant=BLOCK_FP8, moe=True, phases="spread")
    assert p.config["parallel"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                                    "data_parallel_size": 4, "enable_expert_parallel": True}
    assert p.config["workload"]["arrival"]["concurrency"] == 512
    assert p.warmup == 1024
    # More clients than the genai-perf runner's 256 threads: said in a note.
    assert [n for n in p.notes if "--max-threads 256" in n] == p.notes and len(p.notes) == 1
    # Without silicon_concurrency: batch_size x attention DP.
    r["silicon_data_source"] = ""
    assert point(r, quant=BLOCK_FP8, moe=True).config["workload"]["arrival"]["concurrency"] == 512
    # EP without DP: TP 2, experts over the same 2 GPUs.
    ep = row(model_path="MiniMaxAI/MiniMax-M2.5", tp_size=2, moe_tp_size=1, moe_ep_size=2)
    assert point(ep, quant=BLOCK_FP8, moe=True).config["parallel"]["enable_expert_parallel"] is True


def test_squared_ep_labels_replay_as_the_ep_deployment():
    # vLLM: TP 4 x DP 4 / EP 16 is how the CSV labels TP 4 with EP 4 on 4 GPUs (the same
    # points measure the same TTFT / TPOT); batch_size is clients / 4 as labelled.
    r = row(model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm", tp_size=4, attention_dp_size=4,
            moe_tp_size=1, moe_ep_size=16, batch_size=4, backend_version="0.18.0")
    p = point(r, quant=BLOCK_FP8, moe=True)
    assert p.config["parallel"] == {"tensor_parallel_size": 4, "pipeline_parallel_size": 1,
                                    "data_parallel_size": 1, "enable_expert_parallel": True}
    assert p.config["workload"]["arrival"]["concurrency"] == 16
    assert any("EP 4 deployment on 4 GPUs" in n for n in p.notes)
    # SGLang: TP 16 labelled as MoE TP 4 x EP 4 is EP 4 on 4 GPUs.
    fixed, note = sm.relabel_squared_ep(row(backend="sglang", tp_size=16, attention_dp_size="",
                                            moe_tp_size=4, moe_ep_size=4))
    assert (fixed["tp_size"], fixed["moe_tp_size"], fixed["moe_ep_size"]) == ("4", "1", "4")
    assert note and "EP 4 deployment on 4 GPUs" in note
    # Not squared (a real DP layout, or SGLang's TP x EP within a node): unchanged.
    for r in (row(tp_size=2, attention_dp_size=4, moe_tp_size=1, moe_ep_size=8),
              row(backend="sglang", tp_size=8, moe_tp_size=2, moe_ep_size=4),
              row(tp_size=4, attention_dp_size=4, moe_tp_size=4, moe_ep_size=4)):
        assert sm.relabel_squared_ep(r) == (r, None)


def test_nightly_and_missing_versions():
    r = row(backend_version="nightly-5b8c30d62b754b57",
            silicon_data_source="image=vllm/vllm-openai:nightly-5b8c; measured=2026-04-03T00:00:00.000Z")
    p = point(r, moe=False)
    # A nightly names a commit: the newest release out on its measured day (v0.19.0 was in
    # InferenceX's configs from 2026-04-03), or the default where the day is unknown.
    assert p.config["engine"]["version"] == "0.19.0"
    assert any("nightly" in n and "newest release out that day" in n for n in p.notes)
    assert sm.vllm_release_out("2026-04-02") == "0.18.0" and sm.vllm_release_out("2026-03-10") is None
    undated_nightly = point(row(backend_version="nightly-5b8c30d62b754b57"), moe=False)
    assert undated_nightly.config["engine"]["version"] == sm.DEFAULT_VLLM_VERSION
    assert any("nightly" in n and "default" in n for n in undated_nightly.notes)
    old = point(row(backend_version="", silicon_data_source="measured=2025-10-29T00:00:00.000Z"), moe=False)
    assert old.config["engine"]["version"] == "0.11.0" and any("before vLLM 0.14" in n for n in old.notes)
    undated = point(row(backend_version=""), moe=False)
    assert undated.config["engine"]["version"] == sm.DEFAULT_VLLM_VERSION


def test_sglang_rows_without_a_version_measured_before_default_piecewise_graphs_run_0_5_9():
    # InferenceX's November 2025 SGLang rows carry no backend_version; SGLang made piecewise
    # CUDA graphs its default on 2026-03-02 (first released in 0.5.10): they ran extends eagerly.
    old = point(row(backend="sglang", backend_version="",
                    silicon_data_source="measured=2025-11-10T00:00:00.000Z"), moe=False)
    assert old.config["engine"]["version"] == "0.5.9"
    assert any("before SGLang made piecewise CUDA graphs its default" in n for n in old.notes)
    for late in ("measured=2026-03-02T00:00:00.000Z", ""):
        p = point(row(backend="sglang", backend_version="", silicon_data_source=late), moe=False)
        assert p.config["engine"]["version"] == sm.DEFAULT_SGLANG_VERSION
    assert point(row(backend="sglang", backend_version="0.5.6.post2"),
                 moe=False).config["engine"]["version"] == "0.5.6.post2"


def test_sglang_nightly_builds_run_the_release_of_their_build_date():
    """A nightly image's tag carries its build day: before the piecewise-graph default
    (2026-03-02) it is 0.5.9's code, until v0.5.10 was out (InferenceX's first v0.5.10 image,
    2026-04-14) 0.5.10's; later, or with no date in the tag, kvplan's default release."""
    def nightly(image: str, version: str = "nightly-dev"):
        return row(backend="sglang", backend_version=version,
                   silicon_data_source=f"source_file=a.csv; measured=2026-04-08T00:00:00Z; image={image}")

    feb = point(nightly("lmsysorg/sglang:nightly-dev-20260216-d3bae71e"), moe=False)
    assert feb.config["engine"]["version"] == "0.5.9"
    assert any("nightly built 2026-02-16" in n and "priced as 0.5.9" in n for n in feb.notes)
    assert sm.nightly_build_date(nightly("lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448")) == "2026-03-17"
    march = point(nightly("lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448"), moe=False)
    assert march.config["engine"]["version"] == "0.5.10"
    # The date in backend_version counts too; a build once 0.5.10 was out, or undated, is not placed.
    assert point(nightly("", version="nightly-dev-20260402-d7256eb6"), moe=False).config["engine"]["version"] == "0.5.10"
    late = point(nightly("lmsysorg/sglang:nightly-dev-20260422-de962f32"), moe=False)
    assert late.config["engine"]["version"] == sm.DEFAULT_SGLANG_VERSION
    undated = point(row(backend="sglang", backend_version="nightly-dev"), moe=False)
    assert undated.config["engine"]["version"] == sm.DEFAULT_SGLANG_VERSION


def test_rows_kvplan_cannot_say_are_refused_with_a_reason():
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(system="mi300x"), moe=False)
    assert e.value.kind == "hardware not mapped"
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(gemm_quant_mode="w4afp8", moe_quant_mode="w4afp8"), moe=False)
    assert e.value.kind == "quantisation mode not mapped"
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(gemm_quant_mode="fp8", moe_quant_mode="nvfp4"), moe=True)
    assert e.value.kind == "mixed GEMM / MoE quantisation"
    with pytest.raises(sm.RowNotExpressible) as e:  # MoE TP x EP hybrid
        point(row(tp_size=4, moe_tp_size=2, moe_ep_size=2), moe=True)
    assert e.value.kind == "parallel layout not expressible"
    # Attention DP inferred (attention_dp_size empty), experts TP-split over every GPU: vLLM's
    # DP without --enable-expert-parallel.
    dp = point(row(tp_size=1, attention_dp_size="", moe_tp_size=2, moe_ep_size=1), moe=True)
    assert dp.config["parallel"] == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                                     "data_parallel_size": 2, "enable_expert_parallel": False}
    assert any("attention_dp_size empty" in n for n in dp.notes)
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(backend_version="0.9.2"), moe=False)
    assert e.value.kind == "engine release not modelled"


def test_skip_kinds_of_kvplan_errors():
    assert sm.skip_kind(DoesNotFitError("model x in fp8 weights needs 100 GB ...")) == "does not fit in GPU memory"
    assert sm.skip_kind(ConfigError("model: unknown model 'acme/x'; allowed: ...")) == "unknown model"
    assert sm.skip_kind(ConfigError("quantization.weights: h100-sxm cannot run nvfp4 ...")) \
        == "unsupported quantisation on this GPU"
    assert sm.skip_kind(ConfigError("kv_cache.block_size: bad")) == "ConfigError: kv_cache.block_size"


def test_unknown_model_and_unsupported_quantisation_are_skipped_by_the_replay():
    # The real look-ups (no package needed: an unknown id is unknown either way).
    unknown = sm._replay_row((row(model_path="acme/NoSuchModel-7B", precision="", gemm_quant_mode="",
                                  moe_quant_mode="", tp_size=1), {}, 0))
    assert unknown["status"] == "skipped" and unknown["skip_reason"] == "unknown model"
    nvfp4_h100 = sm._replay_row((row(model_path="meta-llama/Llama-3.1-8B", precision="fp4", gemm_quant_mode="nvfp4",
                                     moe_quant_mode="nvfp4", tp_size=1, moe_tp_size=1), {}, 0))
    assert nvfp4_h100["skip_reason"] == "unsupported quantisation on this GPU"
    huge = sm._replay_row((row(model_path="meta-llama/Llama-3.1-70B", precision="", gemm_quant_mode="",
                               moe_quant_mode="", tp_size=1, moe_tp_size=1), {}, 0))
    assert huge["skip_reason"] == "does not fit in GPU memory" and "GB" in huge["error"]


def test_stratified_sample_covers_every_partition():
    rows = ([row(id=f"a{i}", system="h100_sxm") for i in range(30)]
            + [row(id=f"b{i}", system="h200_sxm") for i in range(8)]
            + [row(id="c0", system="b200_sxm", precision="fp4")])
    got = sm.stratified_sample(rows, 10, seed=1)
    assert len(got) == 10 and len({r["id"] for r in got}) == 10
    parts = [sm.partition_of(r) for r in got]
    assert parts.count(("b200_sxm", "meta-llama/Llama-3.1-70B", "fp4")) == 1
    assert parts.count(("h100_sxm", "meta-llama/Llama-3.1-70B", "fp8")) > parts.count(
        ("h200_sxm", "meta-llama/Llama-3.1-70B", "fp8")) >= 1
    assert sm.stratified_sample(rows, 10, seed=1) == got  # same seed, same rows
    assert len(sm.stratified_sample(rows, 2, seed=1)) == 2


def test_tiny_end_to_end(tmp_path, monkeypatch):
    """Three rows replayed through main(): the roofline prices here (the test session points
    the tables away, tests/conftest.py); a small model, short outputs, few clients."""
    rows = [row(id="dense", model_path="meta-llama/Llama-3.1-8B", precision="", gemm_quant_mode="",
                moe_quant_mode="", tp_size=1, moe_tp_size=1, batch_size=2, isl=256, osl=16,
                silicon_ttft_ms=30.0, silicon_tpot_ms=8.0),
            row(id="fp8tp2", model_path="meta-llama/Llama-3.1-8B", system="h200_sxm", tp_size=2,
                moe_tp_size=2, batch_size=4, isl=128, osl=8, backend_version="nightly-abc",
                silicon_ttft_ms=20.0, silicon_tpot_ms=5.0),
            row(id="nope", model_path="acme/NoSuchModel-7B", tp_size=1, moe_tp_size=1)]
    csv_path = write_csv(tmp_path / "silicon_sample.csv", rows)
    stem = tmp_path / "out"
    assert sm.main(["--csv", str(csv_path), "--out", str(stem), "--requests-per-client", "2",
                    "--warmup-per-client", "1"]) == 0
    rep = json.loads(Path(f"{stem}.json").read_text())
    cov = rep["summary"]["coverage"]
    assert (cov["rows"], cov["replayed"], cov["skipped"]) == (3, 2, 1)
    assert cov["skip_reasons"] == {"unknown model": 1}
    by_id = {r["id"]: r for r in rep["rows"]}
    d = by_id["dense"]
    # --phases burst (the default): the profiling phase alone, 2N requests, all of them counted.
    assert d["status"] == "replayed" and d["pricer"] == "roofline" and d["completed"] == 4
    assert d["measured_requests"] == 4 and d["sim_ttft_ms"] > 0 and d["sim_tpot_ms"] > 0
    assert d["ttft_err"] == pytest.approx(d["sim_ttft_ms"] / 30.0 - 1)
    assert by_id["fp8tp2"]["config"]["engine"]["version"] == sm.DEFAULT_VLLM_VERSION
    # Each row's pricer description is stored once and named by index.
    assert rep["pricer_descriptions"][d["pricer_description_index"]].startswith("roofline")
    # ...and so is each note, in the order the row's notes were written.
    assert "notes" not in d and d["note_indices"]
    assert any("idle server" in rep["notes_table"][i] for i in d["note_indices"])
    o = rep["summary"]["overall"]
    assert o["n"] == 2 and o["ttft_mape"] is not None and o["tpot_mape"] is not None
    assert set(rep["summary"]["by_gpu"]) == {"h100_sxm", "h200_sxm"}
    assert rep["machine"]["cpus"] >= 1 and "silicon_matrix.py" in rep["command"]
    md = Path(f"{stem}.md").read_text()
    assert "unknown model" in md and "TTFT MAPE" in md


def test_what_if_overrides_and_row_selection(tmp_path):
    """``--set`` merges a config override into every row (noted per row), ``--match`` keeps
    the rows whose id contains the text, and such a run writes beside the measurement, not over
    it; a malformed override is a one-line error and exit 2."""
    p = point(row(), moe=False, overrides=("cost_model.moe_routing=balanced", "kv_cache.dtype=fp8"))
    assert p.config["cost_model"] == {"moe_routing": "balanced"}
    assert p.config["kv_cache"]["dtype"] == "fp8" and p.config["kv_cache"]["max_model_len"] >= 1024
    assert "--set cost_model.moe_routing=balanced" in p.notes
    with pytest.raises(sm.ConfigError, match="mean is a value here"):
        point(row(), moe=False, overrides=("workload.input_len.mean.isl=3",))
    rows = [row(id=f"{name}_h100", model_path="meta-llama/Llama-3.1-8B", precision="", gemm_quant_mode="",
                moe_quant_mode="", tp_size=1, moe_tp_size=1, batch_size=1, isl=64, osl=4)
            for name in ("keep", "drop")]
    csv_path = write_csv(tmp_path / "silicon_sample.csv", rows)
    out = tmp_path / "results"
    import os
    from unittest import mock

    with mock.patch.object(sm, "RESULTS", out):
        assert sm.main(["--csv", str(csv_path), "--match", "KEEP", "--set", "scheduler.max_num_seqs=1",
                        "--requests-per-client", "1"]) == 0
        assert sm.main(["--csv", str(csv_path), "--set", "no_equals_sign"]) == 2
    (json_path,) = [out / f for f in os.listdir(out) if f.endswith(".json")]
    assert "_match-KEEP_set-scheduler.max_num_seqs-1" in json_path.name
    rep = json.loads(json_path.read_text())
    assert [r["id"] for r in rep["rows"]] == ["keep_h100"]
    assert rep["assumptions"]["overrides"] == ["scheduler.max_num_seqs=1"]
    assert rep["rows"][0]["config"]["scheduler"] == {"max_num_seqs": 1}
    assert rep["rows"][0]["status"] == "replayed"


def test_burst_replays_the_profiling_phase_from_an_idle_server():
    """The default ``--phases burst``: genai-perf / aiperf drain the warm-up before profiling, so
    the replay is the 10N profiled requests alone (none dropped), every client sending at t=0 (no
    ramp), output lengths spread by BURST_DESYNC_CV around osl (bounded, mean osl) so the clients
    drift apart after the first wave; an explicit --output-cv replaces the spread."""
    p = point(row(), quant=None, moe=False)
    assert p.phases == "burst" and p.warmup == 0
    w = p.config["workload"]
    assert w["num_requests"] == 80 and "ramp_up_s" not in w["arrival"]
    assert w["output_len"] == {"dist": "lognormal", "mean": 128, "cv": sm.BURST_DESYNC_CV,
                               "min": 120, "max": 136}
    assert p.config["kv_cache"]["max_model_len"] == 1024 + 136
    assert any("idle server" in n for n in p.notes) and not any("sensitivity" in n for n in p.notes)
    q = point(row(), quant=None, moe=False, output_cv=0.05)
    assert q.config["workload"]["output_len"]["cv"] == 0.05 and any("sensitivity" in n for n in q.notes)
    # The first wave queues: its mean TTFT over all requests exceeds a spread loop's.
    dense = row(model_path="meta-llama/Llama-3.1-8B", precision="", gemm_quant_mode="", moe_quant_mode="",
                tp_size=1, moe_tp_size=1, batch_size=16, isl=2048, osl=32)
    runs = {ph: sm.replay(point(dense, moe=False, phases=ph, requests_per_client=3)) for ph in ("burst", "spread")}
    assert runs["burst"]["sim_ttft_ms"] > 1.1 * runs["spread"]["sim_ttft_ms"]  # 1.14x (roofline)
    # E2E as the clients would compute it, on both sides, and its error.
    r = runs["burst"]
    assert r["sim_e2el_ms"] == pytest.approx(r["sim_ttft_ms"] + 31 * r["sim_tpot_ms"])
    assert r["silicon_e2el_ms"] == pytest.approx(100.0 + 31 * 10.0)
    assert r["e2el_err"] == pytest.approx(r["sim_e2el_ms"] / r["silicon_e2el_ms"] - 1)


def test_burst_keeps_sglang_fixed_lengths_exact_unless_chunks_are_mixed():
    """SGLang without mixed chunking puts each wave back in step (its prefill batches pause
    decoding: tests/test_sglang_engine.py), so its fixed-length rows replay the measured exact
    lengths; with ``--enable-mixed-chunk`` (the generator's flags, or a --set) it keeps drift as
    vLLM does and gets the spread. InferenceX's rows keep their own length spread."""
    sg = row(backend="sglang", backend_version="0.5.9", tp_size=1, moe_tp_size=1,
             model_path="Qwen/Qwen3-32B", precision="bf16", gemm_quant_mode="", moe_quant_mode="")
    exact = point(sg, moe=False)
    assert exact.config["workload"]["output_len"] == {"dist": "fixed", "mean": 128, "min": 128, "max": 128}
    assert exact.config["kv_cache"]["max_model_len"] == 1024 + 128
    assert any("lengths exact" in n for n in exact.notes)
    for kw in ({"server": "aic-benchmark"}, {"overrides": ["sglang.enable_mixed_chunk=true"]}):
        mixed = point(sg, moe=False, **kw)
        assert mixed.config["workload"]["output_len"]["cv"] == sm.BURST_DESYNC_CV, kw
    off = point(sg, moe=False, overrides=["sglang.enable_mixed_chunk=false"])
    assert off.config["workload"]["output_len"]["dist"] == "fixed"
    assert sm.cohorts_stay_in_step("sglang", "scripts") and not sm.cohorts_stay_in_step("vllm", "scripts")
    # A vLLM row of the same shape keeps the spread (test_burst_replays_...).
    assert point(dict(sg, backend="vllm", backend_version="0.15.1"), moe=False
                 ).config["workload"]["output_len"]["cv"] == sm.BURST_DESYNC_CV


def test_the_package_csv_is_found_when_installed():
    if importlib.util.find_spec("aiconfigurator_core") is None:
        pytest.skip("aiconfigurator-core is not installed")
    path = sm.silicon_csv()
    assert path is not None and path.name == "silicon_sample.csv"
    rows = sm.read_rows(path, "vllm")
    assert rows and all(r["backend"] == "vllm" and r["mode"] == "agg" for r in rows)


def test_sglang_rows_replay_with_engine_sglang():
    r = row(backend="sglang", backend_version="0.5.9", model_path="deepseek-ai/DeepSeek-R1",
            system="h200_sxm", gemm_quant_mode="fp8", moe_quant_mode="fp8_block", tp_size="8",
            moe_tp_size="8", moe_ep_size="1")
    p = point(r, quant=BLOCK_FP8, moe=True)
    assert p.config["engine"] == {"name": "sglang", "version": "0.5.9"}
    # A block-FP8 checkpoint: its dense GEMMs labelled fp8 and its experts fp8_block are one format.
    assert p.config["quantization"] == {"weights": "fp8_block"}
    # A nightly whose tag names no date: kvplan's default release (a dated one: its date's).
    nightly = point(row(backend="sglang", backend_version="nightly-dev"), moe=False)
    assert nightly.config["engine"]["version"] == sm.DEFAULT_SGLANG_VERSION
    assert any("SGLang" in n and "default" in n for n in nightly.notes)
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(backend="sglang", backend_version="glm5-hopper"), moe=False)
    assert e.value.kind == "engine release not modelled"
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(backend="sglang", backend_version="0.4.6"), moe=False)
    assert e.value.kind == "engine release not modelled"
    # A model kvplan cannot resolve is said first, before its quantisation or layout.
    with pytest.raises(sm.RowNotExpressible) as e:
        point(row(backend="sglang", gemm_quant_mode="fp8", moe_quant_mode="fp8_block"), moe=None)
    assert e.value.kind in ("unknown model", "model not modelled")


def test_nvfp4_rows_carry_their_checkpoints_quantisation_scope():
    """InferenceX's DeepSeek-R1 FP4 checkpoint (nvidia/DeepSeek-R1-0528-FP4-V2, not in the
    package) quantises the attention output projection besides the MLPs (its model card)."""
    fp4 = dict(backend="sglang", backend_version="0.5.9", system="b200_sxm", precision="fp4",
               gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="8", moe_tp_size="8")
    for path in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3"):
        p = point(row(model_path=path, **fp4), moe=True)
        assert p.config["quantization"] == {"weights": "nvfp4", "scope": "mlp_and_o_proj"}
        assert any("FP4-V2" in n for n in p.notes)
    fp8 = point(row(model_path="deepseek-ai/DeepSeek-R1", backend="sglang", backend_version="0.5.9",
                    gemm_quant_mode="fp8", moe_quant_mode="fp8_block"), quant=BLOCK_FP8, moe=True)
    assert "scope" not in fp8.config["quantization"]


def test_a_checkpoints_exclude_list_names_the_groups_it_keeps_16_bit():
    # nvidia/MiniMax-M2.5-NVFP4's patterns: attention whole, the router (16-bit anyway).
    assert sm.checkpoint_excluded_groups(["lm_head", "model.layers.0.block_sparse_moe.gate",
                                          "model.layers.0.self_attn*"]) == {"attention_in", "attention_out"}
    # nvidia/DeepSeek-V3.1-NVFP4's: the MLA q/kv projections, not o_proj; layer 61 is MTP.
    assert sm.checkpoint_excluded_groups([
        "model.layers.61*", "model.layers.3.self_attn.q_a_proj", "model.layers.3.self_attn.q_b_proj",
        "model.layers.3.self_attn.kv_a_proj_with_mqa", "model.layers.3.self_attn.kv_b_proj"]) == {"attention_in"}
    # nvidia/Qwen3.5-397B-A17B-NVFP4's: both attention kinds and the shared expert.
    assert sm.checkpoint_excluded_groups([
        "*.mlp.shared_expert.*", "model.language_model.layers.0.linear_attn*",
        "model.language_model.layers.3.self_attn*", "model.language_model.layers.0.mlp.shared_expert_gate",
    ]) == {"attention_in", "attention_out", "shared_experts"}
    assert sm.checkpoint_excluded_groups(["lm_head", "vision_tower*", "mtp.layers.0*"]) == set()


@pytest.mark.skipif(sm.package_root() is None, reason="aiconfigurator-core is not installed")
def test_nvfp4_rows_run_the_scope_of_nvidias_export_as_the_package_ships_it():
    fp4 = dict(backend="vllm", backend_version="0.19.0", system="b200_sxm", precision="fp4",
               gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", tp_size="8", moe_tp_size="8")
    want = {"moonshotai/Kimi-K2.5": "mlp_only",          # self_attn* excluded, shared expert FP4
            "Qwen/Qwen3.5-397B-A17B": "experts_only",    # attention and shared expert excluded
            "MiniMaxAI/MiniMax-M2.5": "mlp_only"}
    for path, scope in want.items():
        p = point(row(model_path=path, **fp4), moe=True)
        assert p.config["quantization"]["scope"] == scope, path
        assert any(f"nvidia/{path.split('/')[-1]}-NVFP4" in n for n in p.notes), path
    dense = point(row(model_path="meta-llama/Llama-3.1-70B", **fp4), moe=False)
    assert "scope" not in dense.config["quantization"]  # no NVFP4 export shipped: auto


def test_sglang_qwen35_rows_block_fp8_and_moe_tp_x_ep():
    """The Qwen3.5 rows name the bf16 checkpoint with gemm fp8 / moe fp8_block: block-FP8
    experts mean a block-FP8 checkpoint, priced fp8_block throughout (with a note); SGLang's MoE
    TP 2 x EP 2 on 4 GPUs is ``parallel.expert_parallel_size`` 2. vLLM rows with the same split
    stay refused (vLLM has no MoE TP x EP)."""
    r = row(backend="sglang", backend_version="0.5.10.post1", model_path="Qwen/Qwen3.5-397B-A17B",
            system="b300_sxm", gemm_quant_mode="fp8", moe_quant_mode="fp8_block", tp_size="4",
            moe_tp_size="2", moe_ep_size="2")
    p = point(r, quant=None, moe=True)
    assert p.config["quantization"] == {"weights": "fp8_block"}
    assert any("block-FP8 checkpoint" in n for n in p.notes)
    assert p.config["parallel"]["expert_parallel_size"] == 2
    assert p.config["parallel"]["tensor_parallel_size"] == 4
    with pytest.raises(sm.RowNotExpressible) as e:
        point(dict(r, backend="vllm", backend_version="0.15.1"), quant=None, moe=True)
    assert e.value.kind == "parallel layout not expressible"
    # A TP 64 / MoE 8 x 8 label on B200 is the EP 8 deployment on 8 GPUs.
    wide = point(dict(r, system="b200_sxm", tp_size="64", moe_tp_size="8", moe_ep_size="8"), quant=None, moe=True)
    assert wide.config["parallel"]["tensor_parallel_size"] == 8
    assert wide.config["parallel"]["enable_expert_parallel"] is True
    assert "expert_parallel_size" not in wide.config["parallel"]
    assert any("replayed as TP 8 with EP 8" in n for n in wide.notes)
    # GLM-5's rows name its old Hub org; the package's config is under zai-org.
    glm = point(row(backend="sglang", backend_version="nightly-dev", model_path="zhipuai/GLM-5",
                    system="b200_sxm", gemm_quant_mode="fp8", moe_quant_mode="fp8_block", tp_size="8",
                    moe_tp_size="8", moe_ep_size="1"), quant=None, moe=True)
    assert glm.config["model"] == "zai-org/GLM-5"
    assert any("simulated as zai-org/GLM-5" in n for n in glm.notes)


def test_fp8_and_nvfp4_rows_run_an_fp8_kv_cache():
    """The CSV records no KV-cache dtype: FP8 and NVFP4 rows replay with an FP8 cache, as
    AIConfigurator's own model resolves a quantised checkpoint (and its generator passes it to
    vLLM); MXFP4, INT4 and bf16 rows keep the model dtype."""
    def kv(**kw):
        r = row(model_path="MiniMaxAI/MiniMax-M2.5", system="b200_sxm", backend_version="0.19.0",
                tp_size=1, moe_tp_size=1, **kw)
        return sm.row_to_point(r, checkpoint_quant=lambda m: None, is_moe=lambda m: True)

    p = kv(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
    assert p.config["kv_cache"]["dtype"] == "fp8"
    assert kv(gemm_quant_mode="fp8", moe_quant_mode="fp8").config["kv_cache"]["dtype"] == "fp8"
    assert kv(gemm_quant_mode="", moe_quant_mode="").config["kv_cache"]["dtype"] == "auto"
    assert kv(gemm_quant_mode="int4_wo", moe_quant_mode="int4_wo").config["kv_cache"]["dtype"] == "auto"
    gpt = sm.row_to_point(row(model_path="openai/gpt-oss-120b", gemm_quant_mode="nvfp4",
                              moe_quant_mode="nvfp4", tp_size=1, moe_tp_size=1),
                          checkpoint_quant=lambda m: MXFP4, is_moe=lambda m: True)
    assert gpt.config["quantization"]["weights"] == "mxfp4" and gpt.config["kv_cache"]["dtype"] == "auto"


def test_server_seats_cover_the_clients_beyond_vllms_default():
    # 2,048 clients on one B300 rank: vLLM's default of 1,024 seats would queue half of them.
    r = row(model_path="MiniMaxAI/MiniMax-M2.5", system="b300_sxm", tp_size=2, moe_tp_size=1,
            moe_ep_size=2, batch_size=2048, backend_version="0.19.0")
    p = point(r, quant=BLOCK_FP8, moe=True)
    assert p.config["scheduler"] == {"max_num_seqs": 2048}
    assert any(n.startswith("max_num_seqs 2048") for n in p.notes)
    # Up to the default nothing changes, and the seats are per DP rank (4 ranks x 512 clients).
    assert "scheduler" not in point(dict(r, batch_size=1024), quant=BLOCK_FP8, moe=True).config
    dp = dict(r, attention_dp_size=4, batch_size=512, tp_size=2, moe_ep_size=8)
    assert "scheduler" not in point(dp, quant=BLOCK_FP8, moe=True).config
    assert sm.server_seats("vllm", "0.19.0", "b300", 4 * 1100, 4) == 1100
    assert sm.server_seats("sglang", "0.5.6", "b300", 4096, 1) is None


def test_data_source_names_the_collection():
    src = lambda s: sm.data_source(row(silicon_data_source=s))  # noqa: E731
    assert src("db-dump/2026-04-27; config_id=734; silicon_concurrency=512") == "db-dump/2026-04-27"
    assert src("source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=512") == "2026-04-06.csv"
    assert src("source_file=/Users/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/a.csv; m=1") \
        == "aic-auto-gap-analysis"
    assert src("") == "?"
    p = point(row(silicon_data_source="source_file=kimi-k2.5-gap-analysis.csv; measured=2026-01-01"), moe=False)
    assert p.source == "kimi-k2.5-gap-analysis.csv"


def test_report_has_a_table_by_data_source():
    def result(source, err):
        return {"status": "replayed", "system": "b200_sxm", "model": "m", "precision": "fp8", "source": source,
                "ttft_err": err, "tpot_err": err, "ttft_all_err": err, "wall_s": 1.0, "pricer": "operator_tables"}
    s = sm.summarize([result("a.csv", 0.1), result("a.csv", -0.3), result("db-dump/x", 0.05)], [])
    assert s["by_source"]["a.csv"]["n"] == 2 and s["by_source"]["a.csv"]["ttft_mape"] == pytest.approx(0.2)
    assert s["by_source"]["db-dump/x"]["tpot_bias"] == pytest.approx(0.05)


def test_e2e_latency_is_ttft_plus_the_tokens_after_the_first():
    assert sm.e2el_ms(100.0, 10.0, 128) == pytest.approx(100.0 + 127 * 10.0)
    assert sm.e2el_ms(None, 10.0, 128) is None
    s = sm.summarize([{"status": "replayed", "system": "b200_sxm", "model": "m", "precision": "fp8",
                       "source": "a", "ttft_err": 0.5, "tpot_err": -0.2, "ttft_all_err": 0.5,
                       "e2el_err": -0.04, "wall_s": 1.0, "pricer": "operator_tables"}], [])
    assert s["overall"]["e2el_mape"] == pytest.approx(0.04) and s["overall"]["e2el_bias"] == pytest.approx(-0.04)


def test_repeat_spread_compares_collections_measuring_the_same_point():
    def result(source, ttft, tpot, clients=4, tp=8):
        return {"status": "replayed", "system": "b200_sxm", "model": "m", "precision": "fp4", "source": source,
                "silicon_ttft_ms": ttft, "silicon_tpot_ms": tpot,
                "config": {"engine": {"version": "0.17.0"},
                           "parallel": {"tensor_parallel_size": tp, "data_parallel_size": 1},
                           "workload": {"input_len": {"mean": 1024}, "output_len": {"mean": 1024},
                                        "arrival": {"concurrency": clients}}}}
    rows = [result("dump", 74.0, 7.0), result("a.csv", 148.0, 7.7),          # a repeat: 100% / 10%
            result("b.csv", 74.0, 7.0, clients=8), result("c.csv", 74.0034, 7.0049, clients=8),  # a copy (2 decimals)
            result("dump", 50.0, 5.0, tp=4)]                                   # measured once
    rep = sm.repeat_spread(rows)
    assert rep["points"] == 1
    assert rep["ttft_spread_mean"] == pytest.approx(1.0) and rep["tpot_spread_median"] == pytest.approx(0.1)
    assert sm.repeat_spread(rows[2:])["points"] == 0 and sm.repeat_spread([])["ttft_spread_mean"] is None
    # Every measurement counts, whatever the rows' order (a collection may hold the point twice).
    twice = rows + [result("dump", 80.0, 7.0)]
    assert sm.repeat_spread(twice) == sm.repeat_spread(list(reversed(twice)))
    assert sm.repeat_spread(twice)["ttft_spread_mean"] == pytest.approx(1.0)


def test_inferencex_rows_replay_with_its_clients_lengths():
    """InferenceX's sweep (its three ISL / OSL pairs, every collection but aic-auto-gap-analysis)
    is measured by its benchmark_serving.py with --random-range-ratio 0.8: lengths uniform on
    [int(0.8 L), L], 10N prompts after a drained warm-up. That spread, not a stand-in, drifts the
    clients apart; ``client="fixed"`` keeps the old fixed-length reading."""
    ix = row(isl=8192, osl=1024, silicon_data_source="source_file=2026-04-06.csv; silicon_concurrency=8")
    assert sm.client_of(ix) == "inferencex"
    p = point(ix, moe=False)
    w = p.config["workload"]
    assert w["input_len"] == {"dist": "uniform", "mean": (6553 + 8192) / 2, "min": 6553, "max": 8192}
    assert w["output_len"] == {"dist": "uniform", "mean": (819 + 1024) / 2, "min": 819, "max": 1024}
    assert w["num_requests"] == 80 and p.warmup == 0
    assert p.config["kv_cache"]["max_model_len"] == 8192 + 1024
    assert any("InferenceX" in n for n in p.notes) and not any("CV" in n for n in p.notes)
    # Its prompts are decoded from runs of consecutive token ids: tokenised as synthetic text.
    assert w["prompt_text"] == "synthetic"
    # The drawn lengths are the client's: inside the range, about 0.9 L on average.
    res = sm.replay(point(dict(ix, model_path="meta-llama/Llama-3.1-8B", precision="", gemm_quant_mode="",
                                 moe_quant_mode="", tp_size=1, moe_tp_size=1), moe=False,
                          requests_per_client=2))
    assert res["status"] == "replayed" and res["completed"] == 16
    fixed = point(ix, moe=False, client="fixed")
    assert fixed.config["workload"]["input_len"]["dist"] == "fixed"
    assert "prompt_text" not in fixed.config["workload"]  # genai-perf's corpus prompts: prose
    assert fixed.config["workload"]["output_len"]["cv"] == sm.BURST_DESYNC_CV
    # Shapes outside the sweep, and the AIConfigurator project's own runs, keep fixed lengths.
    assert sm.client_of(row(isl=1024, osl=128, silicon_data_source="source_file=2026-04-06.csv")) == "genai-perf"
    gap = "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/a.csv"
    assert sm.client_of(row(isl=1024, osl=1024, silicon_data_source=gap)) == "genai-perf"


def test_aiperf_pool_reading_reuses_aiperfs_default_prompts_on_the_genai_perf_rows_only():
    """``--client aiperf-pool`` (a sensitivity reading): the aic-auto-gap-analysis rows as aiperf
    sends them without --num-dataset-entries, 100 prompts reused, the 2N warm-up simulated on
    the same pool and dropped, prefix caching on; InferenceX's rows keep their own client."""
    gap = row(isl=1000, osl=100, batch_size=8, model_path="meta-llama/Llama-3.1-8B", precision="",
              gemm_quant_mode="", moe_quant_mode="", tp_size=1, moe_tp_size=1,
              silicon_data_source="source_file=/Users/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/a.csv")
    p = point(gap, moe=False, client="aiperf-pool", requests_per_client=20)
    w = p.config["workload"]
    assert w["prompt_pool"] == {"entries": 100, "sampling": "shuffle"}
    assert p.config["kv_cache"]["prefix_caching"] is True
    assert p.warmup == 16 and w["num_requests"] == 16 + 160
    res = sm.replay(p)
    assert res["status"] == "replayed" and res["completed"] == 176 and res["measured_requests"] == 160
    plain = sm.replay(point(gap, moe=False, requests_per_client=20))
    # Sends 100 to 175 repeat an entry (76 of the 160 measured): their prefill is a cache hit.
    assert res["sim_ttft_ms"] < 0.8 * plain["sim_ttft_ms"]
    ix = point(row(isl=8192, osl=1024, silicon_data_source="source_file=2026-04-06.csv"), moe=False,
               client="aiperf-pool")
    assert "prompt_pool" not in ix.config["workload"] and ix.warmup == 0


def test_generator_flags_are_aiconfigurators_rules():
    """--server aic-benchmark / aic-generator: the flags AIConfigurator's generator writes
    (rule_plugin/benchmark/vllm.rule, vllm.rule, sglang.rule): seats, vLLM's token budget =
    seats + isl + 1500, SGLang's max-prefill-tokens = isl + 1500 with mixed chunking."""
    assert sm.generator_flags("vllm", "defaults", 8, 1024, 1024) == {}
    assert sm.generator_flags("vllm", "aic-benchmark", 8, 1024, 1024) == {
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 8 + 1024 + 1500},
        "kv_cache": {"max_model_len": 1024 + 1024 + 1500}}
    assert sm.generator_flags("vllm", "aic-generator", 8, 8192, 1024)["scheduler"] == {
        "max_num_seqs": 512, "max_num_batched_tokens": 512 + 8192 + 1500}
    assert sm.generator_flags("vllm", "aic-generator", 600, 1024, 1024)["scheduler"]["max_num_seqs"] == 1200
    assert sm.generator_flags("sglang", "aic-benchmark", 64, 1024, 8192)["sglang"] == {
        "max_running_requests": 64, "max_prefill_tokens": 2524, "enable_mixed_chunk": True}
    # Applied per DP rank for vLLM, recorded in the notes, and the config stays valid.
    r = row(batch_size=16)
    p = point(r, moe=False, server="aic-benchmark")
    assert p.config["scheduler"] == {"max_num_seqs": 16, "max_num_batched_tokens": 16 + 1024 + 1500}
    assert any("aic-benchmark" in n for n in p.notes)
    res = sm.replay(point(dict(r, model_path="meta-llama/Llama-3.1-8B", precision="", gemm_quant_mode="",
                                 moe_quant_mode="", tp_size=1, moe_tp_size=1, batch_size=4), moe=False,
                          server="aic-benchmark", requests_per_client=2))
    assert res["status"] == "replayed" and res["completed"] == 8


def test_inferencex_sweep_caps_by_date():
    """The yaml's search spaces as tabulated: a version from its commit's day on, 0 for a shape it
    dropped (#911 removed 1k / 8k on 2026-03-28), no record before the yaml existed. On the day
    of a change (the rows carry days, not times) the version before it still counts: 1k / 8k
    was in the sweep until 06:38 UTC on 2026-03-28, and gone the day after."""
    import inferencex_sweeps as sw

    assert sw.config_key("deepseek-ai/DeepSeek-R1-0528", "fp8", "b200_sxm", "sglang") == "dsr1-fp8-b200-sglang"
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-25", 1024, 1024)[0] == 64
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-25", 8192, 1024)[0] == 32
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-27", 1024, 8192)[0] == 64
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-28", 1024, 8192) == (64, "1d29967c4")
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-29", 1024, 8192)[0] == 0
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2026-03-28", 8192, 1024)[0] == 32  # kept by both
    # MiniMax-M2.5 FP8 on H100: the 1k / 8k rows stamped 2026-03-28 are its sweep's, 64 clients.
    assert sw.outside_sweep("MiniMaxAI/MiniMax-M2.5", "fp8", "h100_sxm", "vllm", "2026-03-28", 1024, 8192, 64) is None
    assert "did not run it" in sw.outside_sweep("MiniMaxAI/MiniMax-M2.5", "fp8", "h100_sxm", "vllm", "2026-03-29",
                                                1024, 8192, 64)
    assert sw.sweep_cap("dsr1-fp8-b200-sglang", "2025-10-29", 1024, 1024) is None
    assert sw.outside_sweep("openai/gpt-oss-120b", "fp4", "h100_sxm", "vllm", "2026-03-27", 1024, 1024, 64) is None
    assert "went to 64" in sw.outside_sweep("openai/gpt-oss-120b", "fp4", "h100_sxm", "vllm", "2026-03-27",
                                            1024, 1024, 512)


def test_inferencex_rows_replay_their_scripts_flags_at_the_measured_date():
    """--server scripts (the default): an InferenceX row runs the flags its script passed on the
    row's measured date (SGLang DeepSeek-R1 FP8 on B200, 2026-03-25: --max-running-requests 128,
    --chunked-prefill-size 32768, --mem-fraction-static 0.82, --scheduler-recv-interval 30 at 16
    clients or more; vLLM MiniMax-M2.5 on B200: a token budget of 2 x ISL from 2026-04-03, none
    before). ``--server defaults`` and rows InferenceX did not measure keep the release's defaults."""
    def sglang_row(n: int, measured: str = "2026-03-25"):
        return row(backend="sglang", backend_version="0.5.9", system="b200_sxm", isl=1024, osl=1024,
                   model_path="deepseek-ai/DeepSeek-R1-0528", tp_size=8, moe_tp_size=8, batch_size=n,
                   silicon_data_source=f"source_file=2026-04-06.csv; measured={measured}; silicon_concurrency={n}")

    p = point(sglang_row(32), quant=None, moe=True)
    assert p.config["sglang"] == {"max_running_requests": 128, "mem_fraction_static": 0.82,
                                  "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
                                  "disable_radix_cache": True, "scheduler_recv_interval": 30,
                                  "cuda_graph_max_bs": 128}
    assert p.config["kv_cache"]["dtype"] == "fp8"
    assert any("not modelled" in n and "--attention-backend trtllm_mla" in n for n in p.notes)
    assert point(sglang_row(8), quant=None, moe=True).config["sglang"]["scheduler_recv_interval"] == 10
    assert "sglang" not in point(sglang_row(32), quant=None, moe=True, server="defaults").config
    # InferenceX's sweep of this config went to 64 clients at 1k / 1k (nvidia-master.yaml): a row
    # at 512 is another harness's, replayed with SGLang's defaults.
    beyond = point(sglang_row(512), quant=None, moe=True)
    assert "sglang" not in beyond.config
    assert any("outside InferenceX's sweep" in n and "went to 64 clients" in n for n in beyond.notes)

    def minimax(measured: str):
        return row(backend_version="0.19.0", system="b200_sxm", isl=8192, osl=1024, batch_size=64,
                   model_path="MiniMaxAI/MiniMax-M2.5", tp_size=2, moe_tp_size=2,
                   silicon_data_source=f"source_file=2026-04-27.csv; measured={measured}; silicon_concurrency=64")

    after = point(minimax("2026-04-08"), quant={"quant_method": "fp8"}, moe=True).config
    assert after["scheduler"]["max_num_batched_tokens"] == 2 * 8192
    assert after["kv_cache"]["max_model_len"] >= 8192 + 1024
    before = point(minimax("2026-03-28"), quant={"quant_method": "fp8"}, moe=True).config
    assert "max_num_batched_tokens" not in before.get("scheduler", {})
    # Labelled TP 2 x attention DP 2 / EP 4: the script's DP-attention branch (two ranks, a budget
    # each) replayed as one scheduler over both ranks, so it gets their summed budget.
    dp_row = row(backend_version="0.19.0", system="b300_sxm", isl=1024, osl=1024, batch_size=512,
                 precision="fp4", model_path="nvidia/MiniMax-M2.5-NVFP4", tp_size=2, attention_dp_size=2,
                 moe_tp_size=1, moe_ep_size=4,
                 silicon_data_source="source_file=a.csv; measured=2026-04-21; silicon_concurrency=1024")
    dp_point = point(dp_row, quant={"quant_method": "modelopt_fp4"}, moe=True)
    assert dp_point.config["scheduler"]["max_num_batched_tokens"] == 2 * (2 * 1024)
    assert any("per DP rank x 2 ranks" in n for n in dp_point.notes)
    undated = point(row(isl=1024, osl=1024, silicon_data_source="silicon_concurrency=8"), moe=False)
    assert "scheduler" not in undated.config and any("measured date" in n for n in undated.notes)
    gap = point(row(isl=1000, osl=500, silicon_data_source="source_file=x/aic-auto-gap-analysis/r.csv; "
                                                      "measured=2026-04-08"), moe=False)
    assert "scheduler" not in gap.config and not any("InferenceX" in n and "script" in n for n in gap.notes)


def test_rows_of_inferencex_defective_h100_client_are_skipped_with_the_reason():
    """From d22bf9ca9 (#227, 2025-11-21) to 4e135fd3f (#310, 2025-12-08) InferenceX's gpt-oss H100
    docker script sent --max-concurrency 512 for every sweep point: its rows carry c512 but ran
    10 x CONC requests at once against --max-num-seqs CONC. The rule reads the model, GPU, date
    and label only; the same point on the day after the fix, or at a swept label, replays."""
    def gptoss(measured: str, n: int = 512):
        return row(backend_version="0.11.2", model_path="openai/gpt-oss-120b", precision="fp4",
                   gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4", isl=1024, osl=1024, batch_size=n,
                   tp_size=4, moe_tp_size=4,
                   silicon_data_source=f"source_file=2026-04-06.csv; measured={measured}; silicon_concurrency={n}")

    for day in ("2025-12-05", "2025-12-08"):
        with pytest.raises(sm.RowNotExpressible) as info:
            point(gptoss(day), quant=MXFP4, moe=True)
        assert info.value.kind == "client defect: label not what ran"
        assert "#227" in str(info.value) and "--max-num-seqs CONC" in str(info.value)
    assert point(gptoss("2025-12-09"), quant=MXFP4, moe=True).config["workload"]["arrival"]["concurrency"] == 512
    assert point(gptoss("2025-12-05", 64), quant=MXFP4, moe=True).config["workload"]["arrival"]["concurrency"] == 64
    other_gpu = gptoss("2025-12-05") | {"system": "h200_sxm"}
    assert point(other_gpu, quant=MXFP4, moe=True).config["hardware"] == "h200"


def test_rows_of_inferencex_mtp_config_are_skipped_with_their_copies():
    """InferenceX's qwen3.5-fp8-b200-sglang-mtp config (35d4bb367, 2026-03-20 22:08 UTC) ran
    EAGLE speculative decoding with image lmsysorg/sglang:v0.5.9-cu130 at TP 4 x EP 1, an image
    and layout its base config never ran (cu129-amd64, then cu130-amd64; TP 8 x EP 1 and TP 4 x
    EP 4). Its rows are told apart by those labels; their acceptance is not recorded, so they are
    skipped. A collection that recorded neither date nor image re-files the same measurement:
    the same labels and means to the files' rounding are skipped with it; other points are not."""
    def qwen(image: str, tp: int = 4, ep: int = 1, measured: str = "2026-03-20T22:08:23Z", ttft: str = "2205.12",
             rid: str = "mtp"):
        return row(id=rid, backend="sglang", backend_version="0.5.9", system="b200_sxm", isl=1024, osl=8192,
                   precision="fp8", gemm_quant_mode="fp8", moe_quant_mode="fp8_block", batch_size=256,
                   model_path="Qwen/Qwen3.5-397B-A17B-FP8", tp_size=tp, moe_tp_size=tp // ep, moe_ep_size=ep,
                   silicon_ttft_ms=ttft, silicon_tpot_ms="37.526",
                   silicon_data_source=f"source_file=2026-03-25.csv; model=Qwen3.5-397B; silicon_concurrency=256; "
                                       f"measured={measured}; wip=False; image={image}")

    mtp = qwen("lmsysorg/sglang:v0.5.9-cu130")
    assert sm.image_of(mtp) == "lmsysorg/sglang:v0.5.9-cu130"
    assert "qwen3.5-fp8-b200-sglang-mtp" in sm.spec_decode_reason(mtp)
    with pytest.raises(sm.RowNotExpressible) as info:
        point(mtp, quant=BLOCK_FP8, moe=True)
    assert info.value.kind == "speculative decoding run, acceptance not recorded"
    assert "EAGLE" in str(info.value)
    # The base config's own image, or its layout, or a day before the MTP config: not an MTP run.
    assert sm.spec_decode_reason(qwen("lmsysorg/sglang:v0.5.9-cu130-amd64")) is None
    assert sm.spec_decode_reason(qwen("lmsysorg/sglang:v0.5.9-cu130", tp=4, ep=4)) is None
    assert sm.spec_decode_reason(qwen("lmsysorg/sglang:v0.5.9-cu130", measured="2026-03-19")) is None
    # The database dump names the image as a bare field.
    dump = dict(mtp, silicon_data_source="db-dump/2026-04-27; config_id=1; silicon_concurrency=256; "
                                         "measured=2026-03-20T00:00:00.000Z; workflow_run_id=2; "
                                         "lmsysorg/sglang:v0.5.9-cu130")
    assert sm.image_of(dump) == "lmsysorg/sglang:v0.5.9-cu130" and sm.spec_decode_reason(dump)
    # A re-filed copy (no date, no image; rounded to 2 decimals) goes with it; a different
    # measurement of the same labels does not.
    copy = dict(mtp, id="copy", silicon_ttft_ms="2205.13", silicon_tpot_ms="37.53",
                silicon_data_source="source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=256")
    other = dict(copy, id="other", silicon_ttft_ms="2400.0")
    found = sm.spec_decode_copies([mtp, copy, other])
    assert set(found) == {"mtp", "copy"} and "re-filed" in found["copy"]
    with pytest.raises(sm.RowNotExpressible):
        point(copy, quant=BLOCK_FP8, moe=True, spec_decode=found)
    assert point(other, quant=BLOCK_FP8, moe=True, spec_decode=found).config["engine"]["name"] == "sglang"
    # DeepSeek-R1 FP8 on B200 from 2026-03-25: both configs ran v0.5.9-cu130 at TP 8; the base
    # swept 4-64 clients at 1k / 1k and 4 at 8k / 1k on TP 8, the MTP config 4-512. Only the
    # points the base did not run are told apart; at the others the CSV files both runs under
    # one label, so a row there has no one deployment and is skipped as such.
    def dsr1(isl: int, osl: int, n: int):
        return row(backend="sglang", backend_version="0.5.9", system="b200_sxm", isl=isl, osl=osl,
                   model_path="deepseek-ai/DeepSeek-R1-0528", tp_size=8, moe_tp_size=8, batch_size=n,
                   silicon_data_source=f"source_file=2026-03-25.csv; silicon_concurrency={n}; "
                                       f"measured=2026-03-25T20:00:00Z; image=lmsysorg/sglang:v0.5.9-cu130")

    assert "did not run that point" in sm.spec_decode_reason(dsr1(8192, 1024, 16))
    assert "dsr1-fp8-b200-sglang-mtp" in sm.spec_decode_reason(dsr1(1024, 1024, 128))
    for shared in (dsr1(8192, 1024, 4), dsr1(1024, 1024, 64)):
        assert sm.spec_decode_reason(shared).startswith("base or speculative decoding: dsr1-fp8-b200-sglang and")
        with pytest.raises(sm.RowNotExpressible) as info:
            point(shared, quant=BLOCK_FP8, moe=True)
        assert info.value.kind == "base or speculative-decoding run, not recorded which"
    # The base's 8k / 1k at TP 4 was never the MTP config's layout: a base run, replayed.
    assert sm.spec_decode_reason(dsr1(8192, 1024, 4) | {"tp_size": 4, "moe_tp_size": 4}) is None


def test_an_undated_copy_of_a_dated_measurement_is_replayed_as_that_run():
    """``qwen3.5-397b-gap-analysis.csv`` re-files InferenceX's points without date or image and
    with the release as nightly-dev. A row there whose labels and both means equal a dated row's
    (to the files' rounding) is that measurement: it takes the original's date, image and
    release, so the same script flags; a different measurement of the same labels does not."""
    def dsr1(**kw):
        labels = dict(backend="sglang", backend_version="0.5.9", system="b200_sxm", isl=1024, osl=1024,
                      model_path="deepseek-ai/DeepSeek-R1-0528", tp_size=8, moe_tp_size=8, batch_size=16,
                      silicon_ttft_ms="402.4567", silicon_tpot_ms="13.1834",
                      silicon_data_source="source_file=2026-03-25.csv; silicon_concurrency=16; "
                                          "measured=2026-03-24T20:00:00Z; image=lmsysorg/sglang:v0.5.9-cu130")
        return row(**{**labels, **kw})  # the day before the MTP config shared the base's image

    original = dsr1(id="orig")
    copy = dsr1(id="copy", backend_version="nightly-dev", silicon_ttft_ms="402.46", silicon_tpot_ms="13.18",
                silicon_data_source="source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=16")
    other = dict(copy, id="other", silicon_ttft_ms="450.0")
    dated = sm.dated_copies([original, copy, other])
    assert set(dated) == {"copy"} and dated["copy"]["id"] == "orig"
    a = point(original, quant=BLOCK_FP8, moe=True)
    b = point(copy, quant=BLOCK_FP8, moe=True, dated=dated)
    c = point(other, quant=BLOCK_FP8, moe=True, dated=dated)
    assert b.config["engine"] == a.config["engine"] and b.config.get("sglang") == a.config.get("sglang")
    assert b.config["engine"]["version"] == "0.5.9" and a.config.get("sglang")
    assert any("the same measurement as orig" in n for n in b.notes)
    assert b.source == "qwen3.5-397b-gap-analysis.csv"  # still reported with its own collection
    assert c.config["engine"]["version"] != "0.5.9" and not c.config.get("sglang")
    # Matched as deployed: a dated row labelled tp 16 = MoE TP 4 x EP 4 (the EP 4 run on 4 GPUs)
    # is the original of a copy labelled TP 4 / EP 4.
    squared = dsr1(id="squared", tp_size=16, moe_tp_size=4, moe_ep_size=4)
    plain = dict(copy, id="plain", tp_size="4", moe_tp_size="1", moe_ep_size="4")
    assert sm.dated_copies([squared, plain]) == {"plain": squared}
