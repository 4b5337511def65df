"""InferenceX vLLM script flags at a row's measured date: cases checked by hand against the
scripts' history in SemiAnalysisAI/InferenceX (commits named in each test)."""

from __future__ import annotations

import itertools

import pytest

from tests.benchmark_module import load_benchmark

m = load_benchmark("inferencex_vllm_flags")

ALLOWED = {
    "scheduler": {"max_num_batched_tokens", "max_num_seqs", "async_scheduling"},
    "kv_cache": {"gpu_memory_utilization", "block_size", "prefix_caching", "dtype", "max_model_len"},
    "quantization": {"moe_kernel"},
    "parallel": {"enable_expert_parallel"},
    "engine": {"max_cudagraph_capture_size", "cudagraph_mode", "stream_interval"},
}

MM = "MiniMaxAI/MiniMax-M2.5"


def flags(model, precision, system, measured, isl=1024, osl=1024, clients=64, tp=4, ep=1, dp=1):
    return m.script_flags(model, precision, system, measured, isl, osl, clients, tp, ep, dp)


def test_minimax_b200_fp8_token_budget_from_pr_947():
    # 0f78cf4eb (#966): prefix caching off, no token budget; bddbf4031 (#947, 2026-04-03): 2 x ISL.
    before, _ = flags(MM, "fp8", "b200_sxm", "2026-03-28", isl=8192)
    assert "max_num_batched_tokens" not in before.get("scheduler", {})
    assert before["kv_cache"] == {"gpu_memory_utilization": 0.95, "max_model_len": 8192 + 1024 + 200,
                                  "block_size": 32, "prefix_caching": False, "dtype": "auto"}
    after, notes = flags(MM, "fp8", "b200_sxm", "2026-04-03", isl=8192)
    assert after["scheduler"]["max_num_batched_tokens"] == 16384
    assert after["kv_cache"]["dtype"] == "fp8" and after["kv_cache"]["gpu_memory_utilization"] == 0.90
    assert any("#947" in n for n in notes)
    # --max-cudagraph-capture-size 2048: modelled (engine.max_cudagraph_capture_size), no longer a note.
    assert after["engine"] == {"max_cudagraph_capture_size": 2048, "stream_interval": 20}
    assert not any("capture-size" in n for n in notes if n.startswith("not modelled:"))
    assert any("measured day" in n for n in notes)  # #947 merged on 2026-04-03 itself


def test_minimax_b200_fp8_first_version_keeps_prefix_caching_default():
    config, notes = flags(MM, "fp8", "b200_sxm", "2026-03-11", tp=2)
    assert "prefix_caching" not in config["kv_cache"]
    # VLLM_USE_FLASHINFER_MOE_FP8=0 VLLM_MOE_USE_DEEP_GEMM=0: Triton's fused MoE, modelled now.
    assert config["quantization"] == {"moe_kernel": "triton"}
    assert not any("VLLM_MOE_USE_DEEP_GEMM=0" in n for n in notes if n.startswith("not modelled:"))
    # #947 dropped both variables: vLLM's oracle picks the experts' kernel again.
    after, _ = flags(MM, "fp8", "b200_sxm", "2026-04-03", tp=2)
    assert "quantization" not in after
    assert any("-ge 1" in n for n in notes)  # the script always passed --enable-expert-parallel


def test_minimax_fp8_scripts_without_kv_flag_serve_the_checkpoints_bf16_cache():
    """No ``--kv-cache-dtype`` in the script: vLLM's ``auto`` keeps the model dtype, since
    MiniMax-M2.5's block-FP8 quantization_config declares no KV-cache scheme. The Hopper scripts
    and the B200 FP8 script before bddbf4031 (#947) pass none; from #947 on it passes fp8."""
    for system, date in (("h100_sxm", "2026-03-28"), ("h200_sxm", "2026-03-13"), ("b200_sxm", "2026-03-11")):
        config, notes = flags(MM, "fp8", system, date)
        assert config["kv_cache"]["dtype"] == "auto", system
        assert any("declares no KV-cache scheme" in n for n in notes), system
    after, notes = flags(MM, "fp8", "b200_sxm", "2026-04-22")
    assert after["kv_cache"]["dtype"] == "fp8"
    assert not any("declares no KV-cache scheme" in n for n in notes)
    # NVFP4 exports declare an FP8 cache: the rule does not touch them, nor other families.
    fp4, _ = flags(MM, "fp4", "b200_sxm", "2026-04-10", tp=2)
    assert fp4["kv_cache"]["dtype"] == "fp8"
    kimi, _ = flags("moonshotai/Kimi-K2.5", "int4", "h200_sxm", "2026-03-10", tp=8)
    assert "dtype" not in kimi.get("kv_cache", {})


def test_undated_row_gets_empty_config_and_reason():
    config, notes = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", None)
    assert config == {} and len(notes) == 1 and "no measured date" in notes[0]


def test_hopper_gpt_oss_runs_marlin_experts_from_january_2026():
    # cec542a9a (#960, 2026-03-27): VLLM_MXFP4_USE_MARLIN=1 since 4e52ed4c6 (#327), now
    # quantization.moe_kernel marlin; async-scheduling dropped by d2c2acb19 (#789); max-model-len
    # still 10240 until #911.
    config, notes = flags("openai/gpt-oss-120b", "fp4", "h100_sxm", "2026-03-27", clients=32, tp=2)
    assert config["scheduler"] == {"max_num_batched_tokens": 8192, "max_num_seqs": 32}
    assert config["kv_cache"] == {"prefix_caching": False, "gpu_memory_utilization": 0.9, "max_model_len": 10240}
    assert config["quantization"] == {"moe_kernel": "marlin"}
    assert config["engine"] == {"max_cudagraph_capture_size": 2048}
    # Both the Marlin variable and the capture limit are modelled now: nothing left unmodelled.
    assert not [n for n in notes if n.startswith("not modelled:")]
    # The day before #327 the same script ran OpenAI's Triton kernels (vLLM's Hopper default).
    before, _ = flags("openai/gpt-oss-120b", "fp4", "h200_sxm", "2026-01-01", clients=32, tp=2)
    assert "quantization" not in before
    after, _ = flags("openai/gpt-oss-120b", "fp4", "h200_sxm", "2026-01-02", clients=32, tp=2)
    assert after["quantization"] == {"moe_kernel": "marlin"}


def test_gpt_oss_hopper_2025_had_async_scheduling_and_no_marlin():
    config, notes = flags("openai/gpt-oss-120b", "fp4", "h200_sxm", "2025-11-02", isl=8192, tp=8, clients=16)
    assert config["scheduler"]["async_scheduling"] is True
    assert config["kv_cache"]["max_model_len"] == 8192 + 1024 + 200  # CALCULATED_MAX_MODEL_LEN
    assert not any("MARLIN" in n for n in notes) and "quantization" not in config


def test_the_scripts_cudagraph_mode_is_replayed():
    """--compilation-config's cudagraph_mode: PIECEWISE in the gpt-oss Hopper scripts of
    7103d6608 (#159, 2025-11-04 to 12-05) and in the MiniMax-M2.5 H100 scripts; FULL_DECODE_ONLY
    in the 2025 Llama-70B B200 scripts (whose fusion passes stay unmodelled)."""
    assert flags("openai/gpt-oss-120b", "fp4", "h100_sxm", "2025-11-20", tp=8)[0]["engine"] == {
        "max_cudagraph_capture_size": 2048, "cudagraph_mode": "PIECEWISE"}
    assert "cudagraph_mode" not in flags("openai/gpt-oss-120b", "fp4", "h100_sxm", "2025-12-10", tp=8)[0]["engine"]
    config, notes = flags("MiniMaxAI/MiniMax-M2.5", "fp8", "h100_sxm", "2026-04-01", tp=4)
    assert config["engine"] == {"cudagraph_mode": "PIECEWISE"}
    assert not any("cudagraph_mode" in n for n in notes if n.startswith("not modelled:"))
    config, notes = flags("meta-llama/Llama-3.3-70B-Instruct-FP8", "fp8", "b200_sxm", "2025-10-15", tp=8)
    assert config["engine"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert any(n.startswith("not modelled:") and "pass_config" in n for n in notes)


def test_gpt_oss_h100_docker_client_defect_by_date_and_label():
    # d22bf9ca9 (#227, 2025-11-21) sent --max-concurrency 512 whatever CONC; 4e135fd3f (#310) fixed
    # it on 2025-12-08 at 22:20 UTC, so a c512 row of that day still ran the defective client.
    oss = "openai/gpt-oss-120b"
    assert "--max-concurrency 512" in m.client_defect(oss, "h100_sxm", "2025-12-05", 512)
    assert m.client_defect(oss, "h100_sxm", "2025-12-08", 512) is not None
    assert m.client_defect(oss, "h100_sxm", "2025-11-20", 512) is None
    assert m.client_defect(oss, "h100_sxm", "2025-12-09", 512) is None
    assert m.client_defect(oss, "h100_sxm", "2025-12-05", 64) is None  # a swept label: not the defect's
    assert m.client_defect(oss, "h200_sxm", "2025-12-05", 512) is None
    assert m.client_defect("meta-llama/Llama-3.1-70B", "h100_sxm", "2025-12-05", 512) is None
    assert m.client_defect(oss, "h100_sxm", None, 512) is None
    # The script flags themselves no longer carry it as a note: the row is skipped instead.
    _, notes = flags(oss, "fp4", "h100_sxm", "2025-12-05", tp=2)
    assert not any("--max-concurrency 512" in n for n in notes)


def test_kimi_fp4_b200_versions():
    first, _ = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", "2026-03-11", clients=16, ep=4)
    assert first == {"kv_cache": {"max_model_len": 2248, "gpu_memory_utilization": 0.90},
                     "scheduler": {"max_num_seqs": 16}, "parallel": {"enable_expert_parallel": False}}
    no_prefix, _ = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", "2026-03-27")
    assert no_prefix["kv_cache"]["prefix_caching"] is False
    assert "max_num_batched_tokens" not in no_prefix["scheduler"]
    latest, notes = flags("nvidia/Kimi-K2.5-NVFP4", "fp4", "b200_sxm", "2026-04-20", isl=8192, clients=4)
    assert latest["scheduler"] == {"max_num_seqs": 4, "max_num_batched_tokens": 16384}
    assert latest["kv_cache"]["dtype"] == "fp8"
    assert any("#1047" in n for n in notes)
    assert latest["engine"]["stream_interval"] == 20  # --stream-interval 20, now modelled
    assert not any("--stream-interval" in n for n in notes if n.startswith("not modelled:"))


def test_kimi_scripts_pass_no_expert_parallel_flag():
    config, notes = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", "2026-03-11", ep=4)
    assert any("passes no --enable-expert-parallel" in n and "replayed so" in n for n in notes)
    assert config["parallel"] == {"enable_expert_parallel": False}  # TP 4, experts TP-sharded
    # Attention DP in the label is not turned into a layout here: a note, no flag.
    dp, notes = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", "2026-03-11", tp=1, ep=4, dp=4)
    assert "parallel" not in dp and any("not modelled" in n for n in notes if "passes no" in n)
    unlabelled, _ = flags("moonshotai/Kimi-K2.5", "fp4", "b200_sxm", "2026-03-11", ep=1)
    assert "parallel" not in unlabelled


def test_kimi_int4_b200_never_disabled_prefix_caching():
    # #926 disabled prefix caching in the fp4 B200 and int4 H200 scripts, not in int4 B200.
    config, notes = flags("moonshotai/Kimi-K2.5", "int4", "b200_sxm", "2026-03-24", tp=8)
    assert config["kv_cache"] == {"max_model_len": 2248, "gpu_memory_utilization": 0.95}
    assert any("VLLM_USE_FLASHINFER_MOE_INT4=1" in n for n in notes)
    h200, _ = flags("moonshotai/Kimi-K2.5", "int4", "h200_sxm", "2026-03-27", tp=8)
    assert h200["kv_cache"]["prefix_caching"] is False
    h200_first, _ = flags("moonshotai/Kimi-K2.5", "int4", "h200_sxm", "2026-03-02", tp=8)
    assert "prefix_caching" not in h200_first["kv_cache"]


def test_minimax_fp4_b200_pr_branch_then_merged():
    # 2026-04-03 rows ran PR #996's branch (08bcde8f1, nightly image): no token budget yet.
    branch, notes = flags(MM, "fp4", "b200_sxm", "2026-04-03", tp=2)
    assert "scheduler" not in branch
    assert branch["kv_cache"]["gpu_memory_utilization"] == 0.95 and branch["kv_cache"]["block_size"] == 32
    assert any("PR #996's branch" in n for n in notes)
    merged, _ = flags(MM, "fp4", "b200_sxm", "2026-04-08", tp=2)
    assert merged["scheduler"]["max_num_batched_tokens"] == 2048
    assert "block_size" not in merged["kv_cache"]


def test_b300():
    mm, _ = flags(MM, "fp8", "b300_sxm", "2026-04-17", isl=8192, tp=2)
    assert mm["scheduler"]["max_num_batched_tokens"] == 16384
    fp4, _ = flags(MM, "fp4", "b300_sxm", "2026-04-21", tp=2, ep=2, dp=2)
    assert fp4["scheduler"]["max_num_batched_tokens"] == 2048
    early, notes = flags("moonshotai/Kimi-K2.5", "fp4", "b300_sxm", "2026-04-03")
    assert early == {} and "2026-04-17" in notes[0]
    kimi, _ = flags("moonshotai/Kimi-K2.5", "fp4", "b300_sxm", "2026-04-20", isl=8192)
    assert kimi["kv_cache"]["prefix_caching"] is False
    assert kimi["kv_cache"]["max_model_len"] == 8192 + 1024 + 256  # f34a83b25 (#1100)


def test_minimax_hopper():
    h100, _ = flags(MM, "fp8", "h100_sxm", "2026-03-27", ep=4)
    assert h100 == {"kv_cache": {"gpu_memory_utilization": 0.90, "max_model_len": 2248, "dtype": "auto"},
                    "scheduler": {"max_num_seqs": 256}, "engine": {"cudagraph_mode": "PIECEWISE"}}
    h200, notes = flags(MM, "fp8", "h200_sxm", "2026-03-28", tp=8)
    assert h200["kv_cache"] == {"gpu_memory_utilization": 0.95, "max_model_len": 2248, "prefix_caching": False,
                                "dtype": "auto"}
    assert any("-ge 1" in n for n in notes)
    # The script passed --enable-expert-parallel whatever the label: the replay runs EP.
    assert h200["parallel"] == {"enable_expert_parallel": True}
    first, notes = flags(MM, "fp8", "h200_sxm", "2026-03-01")
    assert not any("-ge 1" in n for n in notes) and "parallel" not in first
    # A row labelled with EP already runs it: nothing to add.
    labelled, _ = flags(MM, "fp8", "h200_sxm", "2026-03-28", tp=8, ep=8)
    assert "parallel" not in labelled


def test_llama_2025_10_29():
    b200, _ = flags("nvidia/Llama-3.1-70B-Instruct-FP8", "fp8", "b200_sxm", "2025-10-29", tp=1)
    assert b200["kv_cache"]["max_model_len"] == 2048  # the workflow's MAX_MODEL_LEN then
    assert b200["scheduler"] == {"async_scheduling": True, "max_num_batched_tokens": 8192, "max_num_seqs": 512}
    h200, _ = flags("meta-llama/Llama-3.1-70B", "fp8", "h200_sxm", "2025-10-29", clients=8, tp=2)
    assert h200["kv_cache"] == {"dtype": "fp8", "prefix_caching": False, "gpu_memory_utilization": 0.9,
                                "max_model_len": 2068}
    assert h200["scheduler"]["max_num_seqs"] == 8
    h100, _ = flags("meta-llama/Llama-3.3-70B-Instruct", "fp8", "h100_sxm", "2025-10-29", isl=8192)
    assert h100["kv_cache"]["max_model_len"] == 10240
    gone, _ = flags("meta-llama/Llama-3.1-70B", "fp8", "h200_sxm", "2025-11-02")
    assert gone == {}


def test_unknown_model_and_late_dates():
    assert flags("Qwen/Qwen3-32B", "fp8", "h100_sxm", "2026-01-23")[0] == {}
    config, notes = flags(MM, "fp8", "b200_sxm", "2026-06-01")
    assert config == {} and "tabulated" in notes[0]


def test_table_is_well_formed():
    for rec in m.RECIPES:
        assert rec.from_date < (rec.to_date or m.TABULATED_UNTIL), rec
        for key, value in rec.flags.items():
            section, name = key.split(".", 1)
            assert name in ALLOWED[section], key
            if isinstance(value, str) and key not in ("kv_cache.dtype", "quantization.moe_kernel",
                                                      "engine.cudagraph_mode"):
                assert value in m.RULES, (key, value)
    key = lambda r: (r.family, r.system, r.precision)
    for _, group in itertools.groupby(sorted(m.RECIPES, key=lambda r: (key(r), r.from_date)), key=key):
        group = list(group)
        for a, b in zip(group, group[1:]):
            assert a.to_date == b.from_date, (a, b)  # contiguous, no overlap


@pytest.mark.parametrize("rec", m.RECIPES, ids=lambda r: f"{r.family}-{r.system}-{r.precision}-{r.from_date}")
def test_every_version_resolves(rec):
    model = {"llama-70b": "meta-llama/Llama-3.1-70B", "gpt-oss": "openai/gpt-oss-120b",
             "kimi-k2.5": "moonshotai/Kimi-K2.5", "minimax-m2.5": MM}[rec.family]
    config, notes = flags(model, rec.precision, rec.system, rec.from_date, isl=8192, clients=32)
    assert config and notes[0].startswith("InferenceX ")
    for section, values in config.items():
        assert set(values) <= ALLOWED[section]
        assert all(not isinstance(v, str) or v in ("fp8", "auto", "marlin", "triton", "PIECEWISE", "FULL_DECODE_ONLY")
                   for v in values.values())
