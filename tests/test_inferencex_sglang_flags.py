"""InferenceX SGLang script flags by measured date: cases checked by hand against the scripts in
SemiAnalysisAI/InferenceX at the cited commits."""

from __future__ import annotations

import pytest

from tests.benchmark_module import load_benchmark

m = load_benchmark("inferencex_sglang_flags")

R1 = "deepseek-ai/DeepSeek-R1-0528"
R1_FP4 = "nvidia/DeepSeek-R1-0528-FP4"
QWEN = "Qwen/Qwen3.5-397B-A17B"


def flags(model, precision, system, measured, isl=1024, osl=1024, clients=32, tp=8, ep=1, dp=1):
    return m.script_flags(model, precision, system, measured, isl, osl, clients, tp, ep, dp)


def test_b200_dsr1_recv_interval_by_clients_and_none_with_dp_attention():
    # benchmarks/single_node/dsr1_fp4_b200.sh @64c20b6b5: 30 at CONC >= 16, else 10.
    cfg, notes = flags(R1_FP4, "fp4", "b200_sxm", "2026-03-25", clients=32)
    assert cfg["sglang"]["scheduler_recv_interval"] == 30
    assert flags(R1_FP4, "fp4", "b200_sxm", "2026-03-25", clients=8)[0]["sglang"][
        "scheduler_recv_interval"] == 10
    assert flags(R1_FP4, "fp4", "b200_sxm", "2026-03-25", clients=16)[0]["sglang"][
        "scheduler_recv_interval"] == 30
    cfg, notes = flags(R1_FP4, "fp4", "b200_sxm", "2026-03-25", clients=32, dp=8)
    assert cfg == {} and "DP attention" in notes[0]


def test_b200_dsr1_fp4_flags_and_notes():
    cfg, notes = flags(R1_FP4, "fp4", "b200_sxm", "2025-11-02", isl=8192, osl=1024, clients=4)
    assert cfg == {"sglang": {"max_running_requests": 256, "mem_fraction_static": 0.85,
                              "chunked_prefill_size": 16384, "disable_radix_cache": True,
                              "scheduler_recv_interval": 10, "cuda_graph_max_bs": 256},
                   "engine": {"stream_interval": 10}, "kv_cache": {"dtype": "fp8"}}
    assert "@4b860b78e" in notes[0] and "engine.stream_interval=10" in notes[0]
    assert any(n.startswith("not modelled:") and "--cuda-graph-max-bs" not in n
               and "--attention-backend trtllm_mla" in n and "--stream-interval" not in n for n in notes)
    assert "@d8fe8f73e" in flags(R1_FP4, "fp4", "b200_sxm", "2025-11-10")[1][0]


def test_deepseek_v3_uses_the_dsr1_scripts():
    assert flags("deepseek-ai/DeepSeek-V3", "fp4", "b200_sxm", "2026-03-25")[0] == \
        flags(R1_FP4, "fp4", "b200_sxm", "2026-03-25")[0]


def test_b200_dsr1_fp8_tp_branches():
    # 2025-11-18: one branch (MRR 128, 0.82, 32k chunks, recv 30/10).
    s = flags(R1, "fp8", "b200_sxm", "2025-11-18", clients=8)[0]["sglang"]
    assert (s["max_running_requests"], s["mem_fraction_static"], s["scheduler_recv_interval"]) == (128, 0.82, 10)
    assert s["max_prefill_tokens"] == 32768
    # 2026-03-25: TP 4 (8k/1k only) runs 32 requests, 0.95 memory, 8k chunks, recv 10 at any CONC,
    # and captures decode batches up to 32 (--cuda-graph-max-bs 32); TP 8 up to 128.
    s = flags(R1, "fp8", "b200_sxm", "2026-03-25", isl=8192, osl=1024, clients=64, tp=4)[0]["sglang"]
    assert s == {"disable_radix_cache": True, "max_running_requests": 32, "mem_fraction_static": 0.95,
                 "chunked_prefill_size": 8192, "max_prefill_tokens": 8192, "scheduler_recv_interval": 10,
                 "cuda_graph_max_bs": 32}
    s = flags(R1, "fp8", "b200_sxm", "2026-03-25", clients=64, tp=8)[0]["sglang"]
    assert (s["max_running_requests"], s["scheduler_recv_interval"], s["cuda_graph_max_bs"]) == (128, 30, 128)
    cfg, notes = flags(R1, "fp8", "b200_sxm", "2026-03-25", isl=1024, osl=1024, tp=4)
    assert cfg == {} and "exits" in notes[0]


def test_h200_qwen35_fp8_max_running_requests_128_and_hopper_recv_default():
    # benchmarks/single_node/qwen3.5_fp8_h200.sh @f65d6b4b1 (#855).
    cfg, notes = flags(QWEN, "fp8", "h200_sxm", "2026-03-04", clients=64, ep=8)
    assert cfg["sglang"] == {"max_running_requests": 128, "chunked_prefill_size": 16384,
                             "mem_fraction_static": 0.8, "disable_radix_cache": True,
                             "cuda_graph_max_bs": 64,  # --cuda-graph-max-bs $CONC
                             "mamba_ssm_dtype": "bfloat16"}
    assert cfg["kv_cache"] == {"dtype": "fp8"}
    assert "@f65d6b4b1" in notes[0]
    assert not any("--mamba-ssm-dtype" in n for n in notes)  # replayed, not listed as not modelled
    assert flags(QWEN, "fp8", "h200_sxm", "2026-03-09", clients=64, ep=8)[0] == cfg


def test_h200_dsr1_and_glm5_leave_kv_cache_auto():
    cfg = flags(R1, "fp8", "h200_sxm", "2026-03-25", isl=1024, osl=1024)[0]
    assert cfg["kv_cache"] == {"dtype": "auto"} and cfg["sglang"]["max_running_requests"] == 512
    assert cfg["sglang"]["cuda_graph_max_bs"] == 512
    s = flags(R1, "fp8", "h200_sxm", "2026-03-25", isl=8192, osl=1024)[0]["sglang"]
    assert s["max_running_requests"] == s["cuda_graph_max_bs"] == 256
    cfg = flags("zai-org/GLM-5", "fp8", "h200_sxm", "2026-03-19")[0]
    assert cfg == {"sglang": {"mem_fraction_static": 0.85, "disable_radix_cache": False},
                   "kv_cache": {"dtype": "auto"}}


def test_glm5_b200():
    # glm5_nvfp4_b200.sh @d43805fc3: MRR = CONC, no recv interval yet (10 came with #1011 on 04-09).
    s = flags("zhipuai/GLM-5", "fp4", "b200_sxm", "2026-03-29", clients=16)[0]["sglang"]
    assert s == {"max_running_requests": 16, "mem_fraction_static": 0.80,
                 "chunked_prefill_size": 131072, "disable_radix_cache": False, "cuda_graph_max_bs": 16}
    cfg = flags("zai-org/GLM-5", "fp8", "b200_sxm", "2026-03-20", clients=64)[0]
    assert cfg["sglang"]["max_running_requests"] == 64 and "scheduler_recv_interval" not in cfg["sglang"]


def test_qwen35_versions_by_date():
    # bf16 B200: #704 (only mem 0.8) before 2026-02-20, #758 from then on.
    assert flags(QWEN, "bf16", "b200_sxm", "2026-02-18")[0] == {
        "sglang": {"mem_fraction_static": 0.8}, "kv_cache": {"dtype": "auto"}}
    s = flags(QWEN, "bf16", "b200_sxm", "2026-03-09", clients=4)[0]["sglang"]
    assert (s["max_running_requests"], s["scheduler_recv_interval"], s["mem_fraction_static"]) == (128, 10, 0.82)
    # fp8 B300 (#1048): MRR = CONC, 16k chunks, recv 10 at any CONC.
    s = flags(QWEN, "fp8", "b300_sxm", "2026-04-17", clients=64, tp=4)[0]["sglang"]
    assert (s["max_running_requests"], s["chunked_prefill_size"], s["scheduler_recv_interval"]) == (64, 16384, 10)
    s = flags(QWEN, "fp4", "b300_sxm", "2026-04-18", clients=32, tp=4)[0]["sglang"]
    assert (s["mem_fraction_static"], s["scheduler_recv_interval"]) == (0.8, 30)
    # --mamba-ssm-dtype bfloat16 in every Qwen3.5 FP8 / FP4 script, none of the BF16 ones.
    assert s["mamba_ssm_dtype"] == "bfloat16"
    assert flags(QWEN, "fp8", "b200_sxm", "2026-03-25", tp=4)[0]["sglang"]["mamba_ssm_dtype"] == "bfloat16"
    assert "mamba_ssm_dtype" not in flags(QWEN, "bf16", "b200_sxm", "2026-03-09")[0]["sglang"]


def test_no_script_and_undated():
    cfg, notes = flags(QWEN, "bf16", "b200_sxm", None)
    assert cfg == {} and len(notes) == 1 and "undated" in notes[0]
    cfg, notes = flags(QWEN, "fp8", "b300_sxm", "2026-04-03")
    assert cfg == {} and "launch_b300-nv.sh" in notes[0]
    cfg, notes = flags("meta-llama/Llama-3.1-8B-Instruct", "fp8", "h200_sxm", "2026-03-25")
    assert cfg == {} and notes
    assert flags(R1, "fp8", "b200_sxm", "2026-03-25T00:00:00.000Z")[0]


@pytest.mark.parametrize("v", m.VERSIONS, ids=lambda v: f"{v.family}-{v.system}-{v.precision}-{v.from_date}")
def test_table_is_consistent(v):
    assert v.to_date is None or v.from_date <= v.to_date
    assert "@" in v.source and "(#" in v.source
    others = [w for w in m.VERSIONS if (w.family, w.system, w.precision) == (v.family, v.system, v.precision)
              and w is not v]
    for w in others:  # ranges of one script do not overlap
        assert (v.to_date is not None and v.to_date < w.from_date) or \
               (w.to_date is not None and w.to_date < v.from_date)
