"""Measured tables from the ``aiconfigurator-core`` package, engine releases and quantised kernels.

What users rely on: a fresh install prices with the package's measured tables (no ../shared), the
summary names the tables it read, ``engine.version`` picks the version folder and the release's
defaults, and every input kvplan cannot use is a one-line error (exit 2) naming the key or file.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.api import cost_model_summary, resolve_deployment  # noqa: E402
from sim.catalog.engines import get_engine  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.pricing import table_data  # noqa: E402
from sim.scenario import Scenario  # noqa: E402
from tests.test_cli import assert_one_line_error, kvplan  # noqa: E402

PACKAGE = table_data.package_tables_root()
needs_package = pytest.mark.skipif(PACKAGE is None, reason="aiconfigurator-core is not installed")


@needs_package
def test_package_data_is_found_without_importing_the_package(no_env):
    assert "aiconfigurator_core" not in sys.modules  # find_spec locates it, nothing imports it
    assert PACKAGE.name == "data" and PACKAGE.parent.name == "systems"
    for system in set(table_data.GPU_TABLE_DIRS.values()):
        assert (PACKAGE / system / "gemm" / "vllm").is_dir(), system
    assert table_data.default_tables_root() == PACKAGE
    assert "aiconfigurator_core" not in sys.modules


@needs_package
def test_env_variable_overrides_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv(table_data.ENV_TABLES, str(tmp_path))
    assert table_data.default_tables_root() == tmp_path


@needs_package
def test_default_scenario_is_priced_from_the_package_and_says_which_tables(no_env):
    summary = cost_model_summary(resolve_deployment(Scenario()))
    assert summary["source"] == "operator_tables"
    tables = summary["tables"]
    assert tables["system"] == "a100_sxm" and tables["backend"] == "vllm"
    assert tables["version"] == "0.14.0"  # the only vLLM folder measured on A100
    assert tables["from"].startswith("aiconfigurator-core ")
    assert tables["tables_read"]["gemm/gemm_perf"] == "0.14.0"
    assert summary["known_error"]["gpu"] == "a100_sxm"
    assert 0 < summary["known_error"]["gemm_mean_abs_pct"] < 50


def test_without_the_package_the_roofline_prices_and_the_summary_says_why(no_env, monkeypatch):
    monkeypatch.setattr(table_data, "package_root", lambda: None)
    summary = cost_model_summary(resolve_deployment(Scenario()))
    assert summary["source"] == "roofline"
    assert "aiconfigurator-core is not installed" in summary["note"]


@needs_package
@pytest.mark.parametrize("hardware,system", [("b200", "b200_sxm"), ("b300", "b300_sxm"),
                                             ("gb200", "gb200"), ("gb300", "gb300"),
                                             ("rtx-pro-6000", "rtx_pro_6000_server"),
                                             ("h100-sxm", "h100_sxm"), ("h200", "h200_sxm")])
def test_every_gpu_with_tables_is_priced_from_them(no_env, hardware, system):
    dep = resolve_deployment(Scenario.from_dict({"hardware": hardware, "dtype": "bfloat16"}))
    assert dep.cost_model_source == "operator_tables"
    assert cost_model_summary(dep)["tables"]["system"] == system


@needs_package
@pytest.mark.parametrize("hardware", ["h100-pcie", "rtx-4090"])
def test_gpus_without_tables_fall_back_to_the_roofline(no_env, hardware):
    dep = resolve_deployment(Scenario.from_dict({"hardware": hardware, "dtype": "bfloat16",
                                                 "model": "llama-3.1-8b"}))
    assert dep.cost_model_source == "roofline"


@needs_package
def test_engine_version_picks_the_nearest_version_folder(no_env):
    def read(version):
        sc = Scenario.from_dict({"hardware": "h200", "dtype": "bfloat16", "model": "llama-3.1-70b",
                                 "parallel": {"tensor_parallel_size": 2},
                                 "engine": {"version": version}})
        return cost_model_summary(resolve_deployment(sc))["tables"]["tables_read"]

    # H200's custom all-reduce is measured under vLLM 0.14, 0.18, 0.19 and 0.24.
    assert read("0.14.1")["comm/custom_allreduce_perf"] == "0.14.0"
    assert read("0.19.1")["comm/custom_allreduce_perf"] == "0.19.0"
    assert read("0.24.0")["comm/custom_allreduce_perf"] == "0.24.0"


@needs_package
def test_fp8_and_nvfp4_gemms_come_from_their_measured_rows(no_env):
    from sim.pricing import make_pricer
    from sim.policies.step import StepShape

    prefill = StepShape(num_prefill_tokens=2048, num_prefill_seqs=1,
                        prefill_attention_work=2048 * 2049 // 2)
    bf16 = make_pricer("operator_tables", "llama-3.1-8b", "b200", dtype="bfloat16")
    fp8 = make_pricer("operator_tables", "llama-3.1-8b", "b200", dtype="bfloat16", weight_dtype="fp8")
    fp4 = make_pricer("operator_tables", "llama-3.1-8b", "b200", dtype="bfloat16", weight_dtype="nvfp4")
    assert (bf16.gemm_dtype, fp8.gemm_dtype, fp4.gemm_dtype) == ("bfloat16", "fp8", "nvfp4")
    # A compute-bound 2k prefill: each halving of the weight width is measured faster. (The
    # kernels, not the step: outside CUDA graphs the FP8 and NVFP4 steps both cost the host's
    # 0.8 ms a layer, which is more than their kernels.)
    rows = lambda p: p.breakdown(prefill)["rows"]
    assert rows(fp4) < rows(fp8) < rows(bf16)
    assert not fp8.warnings() and not fp4.warnings()


@needs_package
def test_fp8_kv_cache_reads_the_fp8_attention_rows(no_env):
    from sim.pricing import make_pricer
    from sim.policies.step import StepShape

    shape = StepShape(num_decode_seqs=64, decode_context_tokens=64 * 4096)
    auto = make_pricer("operator_tables", "llama-3.1-8b", "h100-sxm", dtype="bfloat16")
    fp8 = make_pricer("operator_tables", "llama-3.1-8b", "h100-sxm", dtype="bfloat16",
                      kv_cache_dtype="fp8")
    assert fp8.breakdown(shape)["attn_decode"] != auto.breakdown(shape)["attn_decode"]


@needs_package
def test_mxfp4_experts_on_hopper_are_priced_from_the_w4a16_rows(no_env):
    from sim.pricing import make_pricer

    p = make_pricer("operator_tables", "gpt-oss-120b", "h100-sxm", dtype="bfloat16",
                    weight_dtype="mxfp4")
    assert p.moe_dtype == "w4a16_mxfp4"
    assert not any("GEMM" in w for w in p.warnings())  # gpt-oss quantises its experts only


@needs_package
def test_sliding_window_layers_prefill_at_the_tables_window_rows(no_env):
    """gpt-oss-120b on H200 at TP 1: a fresh 8,192-token prefill's attention is 18 full layers
    at the table's full-attention row plus 18 window layers at its window-128 row (vLLM 0.24's
    FlashAttention 3, 64 x 8 heads of 64, bf16 KV), read straight from the parquet; not 36
    full layers, which the window kernel's block skipping makes ~6x too dear. Decode likewise."""
    import pyarrow.parquet as pq

    from sim.pricing import make_pricer
    from sim.policies.step import StepShape

    p = make_pricer("operator_tables", "gpt-oss-120b", "h200", dtype="bfloat16",
                    weight_dtype="mxfp4", engine=get_engine("vllm", "0.24.0"))
    assert p.window_prefill == "window-128 rows" and "18 sliding-window layers" in p.describe()
    t = pq.read_table(PACKAGE / "h200_sxm/attention/vllm/0.24.0/context_attention_perf.parquet").to_pandas()
    rows = t[(t.num_heads == 64) & (t.num_key_value_heads == 8) & (t.head_dim == 64)
             & (t.batch_size == 1) & (t.isl == 8192) & (t.kv_cache_dtype == "bfloat16")]
    ms = {w: float(rows[rows.window_size == w].latency.median()) for w in (0, 128)}
    assert ms[128] < ms[0] / 4
    n = 8192
    shape = StepShape(num_prefill_tokens=n, num_prefill_seqs=1, prefill_attention_work=n * (n + 1) // 2)
    assert p.breakdown(shape)["attn_prefill"] == pytest.approx(18 * (ms[0] + ms[128]) * 1e-3, rel=1e-9)
    # Decode, 4 sequences of 4,096 KV tokens (the table's ``step`` 4,095 cached + the new one):
    # the window layers at their own measured rows, not the full rows at 128 tokens.
    g = pq.read_table(PACKAGE / "h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet").to_pandas()
    rows = g[(g.num_heads == 64) & (g.num_key_value_heads == 8) & (g.head_dim == 64)
             & (g.batch_size == 4) & (g.step == 4095) & (g.kv_cache_dtype == "bfloat16")]
    ms = {w: float(rows[rows.window_size == w].latency.median()) for w in (0, 128)}
    decode = StepShape(num_decode_seqs=4, decode_context_tokens=4 * 4096)
    # (The grid is made non-decreasing in batch and length; the window rows are flat in
    # length within their noise, so a cell may sit a percent or two above its raw row.)
    assert p.breakdown(decode)["attn_decode"] == pytest.approx(18 * (ms[0] + ms[128]) * 1e-3, rel=0.02)
    assert ms[128] < ms[0] * 0.8
    # Past the longest measured KV length a window layer still reads one window: from 1M to
    # 2M tokens of context only the 18 full layers grow, half of what 36 full layers add.
    from dataclasses import replace

    from sim.catalog.models import get_model

    full = make_pricer("operator_tables", replace(get_model("gpt-oss-120b"), sliding_window_layers=0),
                       "h200", dtype="bfloat16", weight_dtype="mxfp4", engine=get_engine("vllm", "0.24.0"))

    def growth(pricer):
        at = [pricer.breakdown(StepShape(num_decode_seqs=4, decode_context_tokens=4 * c))["attn_decode"]
              for c in (1_000_000, 2_000_000)]
        return at[1] - at[0]
    assert growth(p) == pytest.approx(growth(full) / 2, rel=1e-9)


def test_engine_release_defaults():
    from sim.catalog.hardware import get_hardware

    v15, v13 = get_engine("vllm", "0.15.1"), get_engine("vllm", "0.13.0")
    assert v15.async_default(False) and not v13.async_default(False)
    assert get_engine("vllm", "0.14.0").async_default(False)
    assert not get_engine("vllm", "0.14.0").async_default(True)  # with spec decode from 0.15
    assert v15.async_default(True)
    # vLLM's GPU classes: >= 70 GiB and not an A100 gets the large defaults.
    assert v15.default_max_num_seqs(get_hardware("h100-sxm")) == 1024
    assert v15.default_max_num_batched_tokens(get_hardware("h100-sxm")) == 8192
    assert v15.default_max_num_seqs(get_hardware("a100-80gb")) == 256
    assert v15.default_max_num_batched_tokens(get_hardware("l40s")) == 2048
    assert v15.capture_sizes(256)[-1] == 512 and v15.capture_sizes(8)[-1] == 16


def test_scenario_limits_follow_the_engine_unless_set():
    assert Scenario.from_dict({"hardware": "h100-sxm"}).max_num_seqs == 1024
    assert Scenario.from_dict({"hardware": "h100-sxm"}).max_num_batched_tokens == 8192
    assert Scenario().max_num_seqs == 256 and Scenario().max_num_batched_tokens == 2048
    given = Scenario.from_dict({"hardware": "h100-sxm", "scheduler": {"max_num_seqs": 64,
                                                                      "max_num_batched_tokens": 512}})
    assert (given.max_num_seqs, given.max_num_batched_tokens) == (64, 512)
    # Without chunked prefill the policy's own rule (a whole prompt per step) stands.
    assert Scenario.from_dict({"hardware": "h100-sxm", "scheduler": {"policy": "orca"}}
                              ).max_num_batched_tokens is None


@pytest.mark.parametrize("bad,needle", [("0.9.2", "not modelled"), ("0.99.0", "not modelled"),
                                        ("banana", "is not a version")])
def test_unknown_engine_version_is_one_config_error(bad, needle):
    with pytest.raises(ConfigError, match=needle):
        Scenario.from_dict({"engine": {"version": bad}})


# --- the CLI, as a user meets each error ----------------------------------------------------


def test_cli_unknown_engine_version_is_one_line():
    proc = kvplan("simulate", "--no-progress", "--set", "engine.version=0.3.0")
    assert_one_line_error(proc, "engine.version", "0.3.0")


def test_cli_unknown_engine_is_one_line():
    proc = kvplan("simulate", "--no-progress", "--set", "engine.name=tgi")
    assert_one_line_error(proc, "engine.name", "tgi")


def test_cli_fp4_on_hopper_is_one_line():
    proc = kvplan("simulate", "--no-progress", "--set", "hardware=h100-sxm",
                  "--set", "quantization.weights=nvfp4")
    assert_one_line_error(proc, "quantization.weights", "h100-sxm", "nvfp4")


def test_cli_unknown_gpu_is_one_line():
    proc = kvplan("simulate", "--no-progress", "--set", "hardware=h900")
    assert_one_line_error(proc, "h900")


@needs_package
def test_cli_gpu_without_tables_asked_for_tables_is_one_line(no_env):
    proc = kvplan("simulate", "--no-progress", "--set", "hardware=h100-pcie",
                  "--set", "cost_model.source=operator_tables")
    assert_one_line_error(proc, "h100-pcie")


def _tables_copy(tmp_path: Path) -> Path:
    """A systems folder with A100's vLLM GEMM and attention tables only (a few MB)."""
    root = tmp_path / "systems"
    for op in ("gemm", "attention"):
        src = PACKAGE / "a100_sxm" / op / "vllm"
        shutil.copytree(src, root / "a100_sxm" / op / "vllm")
    return root


@needs_package
def test_cli_missing_parquet_names_the_file(tmp_path):
    root = _tables_copy(tmp_path)
    (root / "a100_sxm" / "attention" / "vllm" / "0.14.0" / "generation_attention_perf.parquet").unlink()
    proc = kvplan("simulate", "--no-progress", "--set", f"cost_model.tables={root}",
                  "--set", "workload.num_requests=20")
    assert_one_line_error(proc, "generation_attention_perf")


@needs_package
def test_cli_corrupt_parquet_names_the_file(tmp_path):
    root = _tables_copy(tmp_path)
    bad = root / "a100_sxm" / "gemm" / "vllm" / "0.14.0" / "gemm_perf.parquet"
    bad.write_bytes(b"PAR1 this is not a parquet file")
    proc = kvplan("simulate", "--no-progress", "--set", f"cost_model.tables={root}",
                  "--set", "workload.num_requests=20")
    assert_one_line_error(proc, str(bad))


@needs_package
def test_cli_summary_names_the_tables(tmp_path, no_env):
    out = tmp_path / "run"
    proc = kvplan("simulate", "--no-progress", "--set", "hardware=h100-sxm", "--set", "dtype=bfloat16",
                  "--set", "engine.version=0.15.1", "--set", "workload.num_requests=50",
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    cm = json.loads((out / "summary.json").read_text())["cost_model"]
    assert cm["source"] == "operator_tables"
    assert cm["tables"]["system"] == "h100_sxm" and cm["tables"]["engine"] == "vllm 0.15.1"
    assert "vllm 0.15.1" in cm["description"]


# --- the real-run readers take the engine's release from the run -----------------------------


def test_engine_version_is_read_from_a_run():
    from calibration.real_runs import engine_version_of

    assert engine_version_of({"vllm_version": "0.19.1"}) == "0.19.1"
    assert engine_version_of({"metadata": {"engine_version": "v0.20.0"}}) == "0.20.0"
    assert engine_version_of({"image": "vllm/vllm-openai:v0.15.1"}) == "0.15.1"
    assert engine_version_of({}, Path("/runs/vllm_0.17.0_h100/run1")) == "0.17.0"
    assert engine_version_of({"image": "nginx:1.2"}, Path("/runs/x")) is None


def test_a_run_of_an_unmodelled_release_is_priced_as_the_nearest(tmp_path):
    from calibration.validate_real import modelled_version

    notes: list[str] = []
    assert modelled_version("0.8.5", notes) == "0.11.0" and "does not model" in notes[-1]
    assert modelled_version("0.15.1", notes) == "0.15.1"


def test_cli_says_in_one_line_when_the_tables_are_not_installed(tmp_path):
    """A fresh install without the ``tables`` extra: one line on stderr, the roofline prices."""
    import os
    import subprocess

    script = ("import importlib.util, sys; real = importlib.util.find_spec\n"
              "importlib.util.find_spec = lambda name, *a: None if name == 'aiconfigurator_core' "
              "else real(name, *a)\n"
              "from kvplan.cli.main import main; sys.argv = ['kvplan', 'simulate', '--no-progress', "
              "'--set', 'workload.num_requests=20', '--json']; main()")
    env = {k: v for k, v in os.environ.items() if k != table_data.ENV_TABLES}
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    notes = [ln for ln in proc.stderr.splitlines() if "aiconfigurator-core is not installed" in ln]
    assert len(notes) == 1 and notes[0].startswith("note: ")
    assert json.loads(proc.stdout)["cost_model"]["source"] == "roofline"
