"""A run collection's ``experiments.json`` and the server's ``vllm.log`` (the layout of
inference-sim's sim-to-real ground truth): what they say reaches the replayed server, and a
malformed entry is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.real_runs import read_run
from calibration.run_manifest import ManifestError, server_facts
from calibration.validate_real import base_checkpoint, build_config
from tests.calibration.test_real_runs import _cli, _roofline, make_inference_perf

ENTRY = {"id": 35, "model": "Llama-2-7b", "precision": "FP16", "hw": "H100", "workload": "general",
         "mbt": 2048, "cpu_offload": False, "gpu_mem": 0.95, "tp": 1, "dp": 2, "safe": "safe",
         "done": True, "notes": ""}


def collection(root: Path, entry: dict, log: str = "", legacy: bool = False) -> Path:
    """A one-run collection: ``experiments.json`` beside the run folder ``<id>-<slug>``."""
    run = make_inference_perf(root, name=f"{entry['id']}-llama-2-7b-tp1-general")
    if legacy:  # the collection's older runs wrote their results here
        (run / "results").rename(run / "inference-perf-data")
    (root / "experiments.json").write_text(json.dumps([{"id": 1, "hw": "A100"}, entry]))
    if log:
        (run / "vllm.log").write_text(log)
    return run


def test_manifest_entry_sets_the_server_the_exp_config_does_not_name(tmp_path):
    run = read_run(collection(tmp_path, {**ENTRY, "precision": "FP8", "cpu_offload": True}))
    assert run.hardware == "h100-sxm"
    # The manifest's dp counts servers (the collection's evaluators replay it as instances), not
    # vLLM's data-parallel ranks.
    assert run.server["num_replicas"] == 2 and "data_parallel_size" not in run.server
    assert run.server["gpu_memory_utilization"] == 0.95
    assert run.weights == "fp8"
    assert run.cpu_offload_gb is None  # on, but no log to size it
    assert any("size is not recorded" in n for n in run.notes)
    assert any("2 servers behind a round-robin router" in n for n in run.notes)
    config, notes = build_config(run)
    assert config["parallel"]["num_replicas"] == 2
    assert config["parallel"].get("data_parallel_size", 1) == 1
    assert config["kv_cache"]["gpu_memory_utilization"] == 0.95
    assert config["quantization"]["weights"] == "fp8"
    assert config["hardware"] == "h100-sxm"


def test_a_run_the_manifest_marks_unsafe_is_validated_with_a_note(tmp_path):
    run = read_run(collection(tmp_path, {**ENTRY, "safe": "unsafe"}))
    assert any("marks this run 'unsafe'" in n for n in run.notes)


def test_a_run_outside_any_manifest_keeps_its_own_record(tmp_path):
    run = read_run(make_inference_perf(tmp_path, name="20260101-000000-llama-2-7b-tp1-general_h100"))
    assert "data_parallel_size" not in run.server and run.weights is None
    assert run.server["gpu_memory_utilization"] == 0.9
    other = collection(tmp_path / "c", {**ENTRY, "id": 7})
    (tmp_path / "c" / "experiments.json").write_text(json.dumps([ENTRY]))  # lists 35, not 7
    assert "data_parallel_size" not in read_run(other).server


def test_vllm_log_launch_args_kv_pool_and_offload(tmp_path):
    log = ("INFO 02-17 15:54:40 [api_server.py:1839] vLLM API server version 0.15.1\n"
           "INFO api_server.py: non-default args: {'model': 'meta-llama/Llama-2-7b-hf', "
           "'data_parallel_size': 4, 'gpu_memory_utilization': 0.9, 'quantization': 'fp8', "
           "'stream_interval': 20}\n"
           "INFO kv_cache_utils.py: GPU KV cache size: 119,408 tokens\n"
           "INFO kv_cache_utils.py: GPU KV cache size: 118,992 tokens\n"
           "INFO gpu_worker.py: kv_connector_extra_config={'cpu_bytes_to_use': 8589934592.0}\n")
    run = read_run(collection(tmp_path, ENTRY, log))
    # The log is what the server printed: one server with 4 data-parallel ranks, not the
    # manifest's 2 servers.
    assert run.server["data_parallel_size"] == 4 and run.server["gpu_memory_utilization"] == 0.9
    assert "num_replicas" not in run.server
    assert any("not the manifest's 2 servers" in n for n in run.notes)
    assert run.weights == "fp8" and run.kv_cache_tokens == 118_992 and run.cpu_offload_gb == 8.0
    assert run.engine_version == "0.15.1"  # the folder names no release: the log does
    config, _ = build_config(run)
    assert config["kv_cache"]["cpu_offload_gb"] == 8.0
    assert run.server["stream_interval"] == 20  # --stream-interval 20 as launched
    assert config["engine"]["stream_interval"] == 20 and config["engine"]["version"]


def test_a100_memory_profile_picks_the_40_gb_part(tmp_path):
    log = "INFO Memory profiling takes 5 s; total_gpu_memory (39.39GiB) x gpu_memory_utilization (0.90)\n"
    facts = server_facts(collection(tmp_path, {**ENTRY, "hw": "A100"}, log))
    assert facts.hardware == "a100-40gb" and facts.gpu_memory_gib == 39.39
    assert server_facts(collection(tmp_path / "b", {**ENTRY, "hw": "A100"})).hardware == "a100-80gb"


def test_exp_config_wins_over_the_manifest_with_a_note(tmp_path):
    run_dir = collection(tmp_path, {**ENTRY, "mbt": 8192})
    run = read_run(run_dir)
    assert run.server["max_num_batched_tokens"] == 2048  # exp-config.yaml says 2048
    assert any("max_num_batched_tokens 2048 kept over the collection's 8192" in n for n in run.notes)


def test_legacy_results_folder_is_read(tmp_path):
    run = read_run(collection(tmp_path, ENTRY, legacy=True))
    assert len(run.measured) == 1 and run.measured[0].completed == 20


@pytest.mark.parametrize("field, value, needle", [
    ("hw", "TPUv5", "hw 'TPUv5' is not a GPU kvplan knows"),
    ("dp", 1.5, "dp 1.5: expected a whole number"),
    ("precision", "INT3", "precision 'INT3'"),
    ("gpu_mem", 1.5, "gpu_mem 1.5"),
    ("cpu_offload", "yes", "cpu_offload 'yes'"),
])
def test_malformed_entry_is_one_line_naming_file_and_field(tmp_path, capsys, field, value, needle):
    run = collection(tmp_path, {**ENTRY, field: value})
    with pytest.raises(ManifestError, match="experiments.json"):
        read_run(run)
    code, _, err = _cli(["validate", "--real", str(run), "--out", str(tmp_path / "o")], capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert needle in err and "experiments.json (id 35)" in err


def test_quantised_checkpoint_names_resolve_to_their_base_model():
    assert base_checkpoint("RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic") == ("llama-4-scout", "fp8")
    assert base_checkpoint("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8") == ("llama-3.1-8b", "fp8")
    assert base_checkpoint("nvidia/Llama-3.1-8B-Instruct-FP8") == ("llama-3.1-8b", "fp8")
    assert base_checkpoint("meta-llama/Llama-3.1-8B-Instruct") is None  # not a quantised name
    assert base_checkpoint("someone/Unknown-Model-FP8") is None


def test_fp8_checkpoint_run_is_simulated_with_fp8_weights(tmp_path, capsys):
    import yaml

    run_dir = make_inference_perf(tmp_path)
    cfg = yaml.safe_load((run_dir / "exp-config.yaml").read_text())
    cfg["model"] = "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic"
    (run_dir / "exp-config.yaml").write_text(yaml.safe_dump(cfg))
    config, notes = build_config(read_run(run_dir))
    assert config["model"] == "llama-3.1-8b" and config["quantization"]["weights"] == "fp8"
    assert any("FP8 checkpoint of llama-3.1-8b" in n for n in notes)


def test_validate_reports_the_kv_pool_against_the_log(tmp_path, capsys):
    log = "INFO kv_cache_utils.py: GPU KV cache size: 119,408 tokens\n"
    run = collection(tmp_path, {**ENTRY, "dp": 1, "gpu_mem": 0.9}, log)
    out = tmp_path / "out"
    code, stdout, err = _cli(["validate", "--real", str(run), "--out", str(out), *_roofline()], capsys)
    assert code == 0, err
    doc = json.loads((out / "validation.json").read_text())
    assert doc["source"]["hardware"] == "h100-sxm"
    assert any(n.startswith("KV pool per engine core: vLLM logged 119,408 tokens")
               and n.endswith("the replay runs the logged pool") for n in doc["source"]["notes"])
    # The replay ran vLLM's pool: 119,408 tokens in blocks of 16 (the shared README's 7,463).
    assert doc["source"]["num_gpu_blocks"] == 7463
    config, _ = build_config(read_run(run), overrides=["kv_cache.num_gpu_blocks=5000"])
    assert config["kv_cache"]["num_gpu_blocks"] == 5000  # --set wins


def test_launch_args_with_unreadable_values_keep_the_plain_pairs(tmp_path):
    """vLLM 0.15 prints config objects in ``non-default args`` (``KVTransferConfig(...)``), which
    Python cannot read back: the plain pairs still count."""
    from calibration.run_manifest import launch_args

    line = ("{'model_tag': 'meta-llama/Llama-2-7b-hf', 'max_num_batched_tokens': 2048, "
            "'gpu_memory_utilization': 0.95, 'enable_prefix_caching': False, 'kv_cache_dtype': 'fp8_e4m3', "
            "'kv_transfer_config': KVTransferConfig(kv_connector='OffloadingConnector', "
            "kv_connector_extra_config={'cpu_bytes_to_use': 4294967296.0}), 'data_parallel_size': 2}")
    args = launch_args(line)
    assert args["max_num_batched_tokens"] == 2048 and args["gpu_memory_utilization"] == 0.95
    assert args["data_parallel_size"] == 2 and args["enable_prefix_caching"] is False
    log = f"INFO 02-17 15:54:51 [utils.py:253] non-default args: {line}\n"
    run = read_run(collection(tmp_path, ENTRY, log))
    assert run.server["data_parallel_size"] == 2 and run.kv_cache_dtype == "fp8"
    assert run.prefix_caching is False and run.cpu_offload_gb == 4.0
    config, notes = build_config(run)
    assert config["kv_cache"]["dtype"] == "fp8" and config["kv_cache"]["prefix_caching"] is False
    assert config["kv_cache"].get("cpu_offload_gb", 0) == 0  # offload needs the prefix cache
    assert any("CPU KV offload left out" in n for n in notes)
    assert config["engine"]["enforce_eager"] is False


def test_a_server_launched_eager_is_replayed_eager(tmp_path):
    """``--enforce-eager`` in vLLM's logged launch arguments (or ``enforce_eager: true`` in the
    experiment file) replays the run with ``engine.enforce_eager``, with the engine release the
    log names kept."""
    line = "{'model_tag': 'meta-llama/Llama-2-7b-hf', 'enforce_eager': True, 'max_num_batched_tokens': 2048}"
    log = (f"INFO 02-17 15:54:50 [api_server.py:1] vLLM API server version 0.15.1\n"
           f"INFO 02-17 15:54:51 [utils.py:253] non-default args: {line}\n")
    run = read_run(collection(tmp_path, ENTRY, log))
    assert run.enforce_eager is True
    config, notes = build_config(run)
    assert config["engine"]["enforce_eager"] is True and config["engine"]["version"] == "0.15.1"
    assert any(n.startswith("enforce_eager") for n in notes)


def test_a_collection_folder_stands_for_its_runs(tmp_path, capsys):
    """``validate --real <collection>``: every run folder in it, in id order, the manifest
    itself not taken for a run (it is the folder's only JSON)."""
    from calibration.real_fit import find_runs
    from calibration.real_runs import expand_run_paths

    collection(tmp_path, {**ENTRY, "id": 10, "dp": 1, "gpu_mem": 0.9})
    make_inference_perf(tmp_path, name="9-llama-2-7b-tp1-general")
    (tmp_path / "experiments.json").write_text(json.dumps([{**ENTRY, "id": 9, "dp": 1},
                                                           {**ENTRY, "id": 10, "dp": 1}]))
    assert [p.name for p in expand_run_paths([tmp_path])] == ["9-llama-2-7b-tp1-general",
                                                             "10-llama-2-7b-tp1-general"]
    assert all(p.name != "experiments.json" for p in find_runs([tmp_path]))
    out = tmp_path / "out"
    code, _, err = _cli(["validate", "--real", str(tmp_path), "--out", str(out), "--stage-seconds", "5",
                         *_roofline()], capsys)
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["10-llama-2-7b-tp1-general", "9-llama-2-7b-tp1-general",
                                                     "summary.json"]
    # The collection's verdict: each stage metric's MAPE and bias over both runs' scored stages.
    summary = json.loads((out / "summary.json").read_text())
    per_run = [json.loads((out / d / "validation.json").read_text())["metrics"]
               for d in ("9-llama-2-7b-tp1-general", "10-llama-2-7b-tp1-general")]
    ttft = [m["error"] for ms in per_run for m in ms if m["name"] == "stage0_mean_ttft_ms"]
    assert summary["runs"] == 2 and summary["metrics"]["mean_ttft_ms"]["stages"] == 2
    assert summary["metrics"]["mean_ttft_ms"]["mape"] == pytest.approx(sum(map(abs, ttft)) / 2)
    assert summary["metrics"]["mean_ttft_ms"]["bias"] == pytest.approx(sum(ttft) / 2)
    assert "overloaded" not in summary["metrics"]


def test_inference_perf_poisson_load_is_replayed_as_sent(tmp_path, capsys):
    """``load.type: poisson``: unscaled exponential gaps at the stage's rate, as many requests as
    the stage file says were sent (not int(rate x duration))."""
    run_dir = make_inference_perf(tmp_path, stages=((2, 10),))
    profile = json.loads((run_dir / "profile.yaml").read_text())
    profile["load"]["type"] = "poisson"
    (run_dir / "profile.yaml").write_text(json.dumps(profile))
    stage0 = run_dir / "results" / "stage_0_lifecycle_metrics.json"
    data = json.loads(stage0.read_text())
    data["load_summary"]["count"] = 23
    stage0.write_text(json.dumps(data))
    run = read_run(run_dir)
    assert run.stages[0].process == "poisson" and run.stages[0].num_requests == 23
    code, _, err = _cli(["validate", "--real", str(run_dir), "--out", str(tmp_path / "o"), *_roofline()], capsys)
    assert code == 0, err


def test_exp_config_spellings_of_data_parallelism_and_fp8(tmp_path):
    import yaml

    run_dir = make_inference_perf(tmp_path)
    cfg = yaml.safe_load((run_dir / "exp-config.yaml").read_text())
    cfg.update(data_parallelism=2, quantization="fp8")
    (run_dir / "exp-config.yaml").write_text(yaml.safe_dump(cfg))
    run = read_run(run_dir)
    assert run.server["data_parallel_size"] == 2 and run.weights == "fp8"


def test_an_unknown_model_without_a_config_is_one_line(tmp_path, capsys):
    """Neither in the catalog, nor a quantised name of a catalog model, nor a model_configs
    config.json beside the run: a one-line error asking for --model."""
    import yaml

    run_dir = make_inference_perf(tmp_path)
    cfg = yaml.safe_load((run_dir / "exp-config.yaml").read_text())
    cfg["model"] = "someone/Unknown-Model-7B"
    (run_dir / "exp-config.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = _cli(["validate", "--real", str(run_dir), "--out", str(tmp_path / "o")], capsys)
    assert code != 0 and len(err.strip().splitlines()) == 1
    assert "'someone/Unknown-Model-7B' is neither in kvplan's catalog" in err and "--model" in err
