"""The vLLM server flags InferenceX's benchmark scripts passed when a silicon row was measured,
as kvplan config keys.

Why: ``aiconfigurator-core``'s ``systems/silicon_sample.csv`` replays end-to-end rows, most of
the vLLM ones measured by InferenceX's single-node sweeps
(``benchmarks/single_node/fixed_seq_len/<model>_<precision>_<gpu>.sh`` in
SemiAnalysisAI/InferenceX; before 2026-01-22 ``benchmarks/<model>_<precision>_<gpu>_{docker,slurm}.sh``,
before 2026-02-19 ``benchmarks/<...>.sh``). The rows record no server flags, but the scripts set
many (token budgets of 2 x ISL, ``--no-enable-prefix-caching``, fp8 KV caches, memory fractions)
and changed them often between the rows' measured dates. Replaying a row with vLLM's defaults
instead of the flags it ran with mis-states its prefill chunking and KV capacity.

How: ``RECIPES`` is one table, one record per script version that changed a flag, each valid on
``[from_date, to_date)``. Dates are the UTC dates of the commits on InferenceX's main history
(the rows' ``measured=`` stamps are UTC midnights); a row takes the version of the last commit on
or before its measured date, so a commit on the measured day is assumed to be in force (many
rows were measured by the sweep that commit triggered; the notes say so). Two exceptions, both
noted: rows measured while a script was still on its PR branch (MiniMax-M2.5 fp4 B200 on
2026-04-03, PR #996's commit 08bcde8f1 with the nightly image those rows name), and the Llama
scripts, deleted by #149 at 2025-10-30 02:18 UTC. The table covers script versions up to
``TABULATED_UNTIL``; it has no B300 record before 2026-04-17 because no B300 single-node vLLM
script existed on main or on a PR branch before then (the CSV's B300 rows dated 2026-04-03 get
an empty config and a note).

Values that depend on the row (``--max-num-batched-tokens "$((ISL * 2))"``,
``--max-num-seqs $CONC``, ``--max-model-len $MAX_MODEL_LEN`` from the workflow or computed in
the script) are written as rule names in the table and resolved by ``RULES``. Flags kvplan
cannot express (explicit CUDA-graph modes, compilation passes, most kernel-selecting environment
variables) are listed in a ``not modelled`` note, as are quirks of the
scripts' parallel flags. Stdlib only: ``silicon_matrix`` imports it by path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

#: The tables hold every script version up to (not including) this date; later rows get a note.
TABULATED_UNTIL = "2026-05-12"

REPO = "SemiAnalysisAI/InferenceX"


@dataclass(frozen=True)
class Recipe:
    """One script version's server flags, in force on ``[from_date, to_date)`` (UTC dates)."""

    family: str                 # model family, see ``model_family``
    system: str                 # AIConfigurator system folder: b200_sxm, b300_sxm, h100_sxm, h200_sxm
    precision: str              # fp4 / fp8 / int4
    from_date: str              # first UTC day this version is in force (its commit's day)
    to_date: Optional[str]      # first UTC day it is not (the next change), None = TABULATED_UNTIL
    script: str                 # path in the InferenceX repo at that commit
    source: str                 # short commit and PR that set these flags
    flags: Mapping[str, Any]    # "section.key" -> value, or a rule name from ``RULES``
    not_modelled: tuple[str, ...] = ()
    parallel: str = "ep>1"      # how the script maps the layout to flags, see ``_parallel_notes``
    extra_notes: tuple[str, ...] = field(default=())


# --- row-dependent values -----------------------------------------------------------------------

def workflow_max_model_len(isl: int, osl: int, measured: str) -> int:
    """``$MAX_MODEL_LEN`` the sweep workflow exported: isl + osl (the 2025 workflow files'
    2048 / 9216), + 200 from 2025-12-05 (93e1b3ca1, #251: 2248 / 9416, later
    ``generate_sweep_configs.py``), + 256 from 2026-04-20 (f34a83b25, #1100)."""
    if measured < "2025-12-05":
        return isl + osl
    if measured < "2026-04-20":
        return isl + osl + 200
    return isl + osl + 256


def script_max_model_len(isl: int, osl: int, measured: str) -> int:
    """``CALCULATED_MAX_MODEL_LEN`` some scripts computed (since eb282d8f6, #66): isl + osl + 20 at
    1k / 1k, isl + osl + 200 where either is 8192 (+ 256 from f34a83b25, #1100, 2026-04-20), else
    the workflow's value."""
    if isl == 1024 and osl == 1024:
        return isl + osl + 20
    if isl == 8192 or osl == 8192:
        return isl + osl + (256 if measured >= "2026-04-20" else 200)
    return workflow_max_model_len(isl, osl, measured)


@dataclass(frozen=True)
class _Row:
    isl: int
    osl: int
    clients: int
    measured: str


#: Rule names the table uses for values that depend on the row.
RULES: dict[str, Callable[[_Row], int]] = {
    "2*ISL": lambda r: 2 * r.isl,                     # --max-num-batched-tokens "$((ISL * 2 ))"
    "CONC": lambda r: r.clients,                      # --max-num-seqs $CONC
    "MAX_MODEL_LEN": lambda r: workflow_max_model_len(r.isl, r.osl, r.measured),
    "CALCULATED_MAX_MODEL_LEN": lambda r: script_max_model_len(r.isl, r.osl, r.measured),
}


# --- the table ----------------------------------------------------------------------------------

_SN = "benchmarks/single_node/"
# Flag sets shared by several versions (kvplan keys -> value or rule).
_LLAMA_B200 = {"kv_cache.dtype": "fp8", "scheduler.async_scheduling": True,
               "kv_cache.prefix_caching": False, "scheduler.max_num_batched_tokens": 8192,
               "kv_cache.gpu_memory_utilization": 0.9, "scheduler.max_num_seqs": 512}
#: ``--compilation-config {..., "cudagraph_mode": "FULL_DECODE_ONLY"}``: the mode is modelled
#: (``engine.cudagraph_mode``), the fusion passes and custom ops are not.
_FULL_DECODE_ONLY = {"engine.cudagraph_mode": "FULL_DECODE_ONLY"}
_PIECEWISE = {"engine.cudagraph_mode": "PIECEWISE"}
_LLAMA_B200_NM = ('--compilation-config {"pass_config": {"enable_fi_allreduce_fusion", "enable_attn_fusion", '
                  '"enable_noop"}, "custom_ops": ["+quant_fp8", "+rms_norm"]} (its cudagraph_mode is modelled)',
                  "VLLM_FLASHINFER_ALLREDUCE_FUSION_THRESHOLDS_MB")
_LLAMA_HOPPER = {"kv_cache.dtype": "fp8", "scheduler.async_scheduling": True,
                 "kv_cache.prefix_caching": False, "scheduler.max_num_batched_tokens": 8192,
                 "kv_cache.gpu_memory_utilization": 0.9, "scheduler.max_num_seqs": "CONC"}
_GPTOSS_HOPPER = {"scheduler.async_scheduling": True, "kv_cache.prefix_caching": False,
                  "scheduler.max_num_batched_tokens": 8192, "kv_cache.gpu_memory_utilization": 0.9,
                  "scheduler.max_num_seqs": "CONC"}
#: ``VLLM_MXFP4_USE_MARLIN=1``, exported by the gpt-oss Hopper scripts from 4e52ed4c6 (#327):
#: Marlin's W4A16 MoE instead of OpenAI's Triton kernels.
_MARLIN = {"quantization.moe_kernel": "marlin"}
#: ``VLLM_USE_FLASHINFER_MOE_FP8=0`` with ``VLLM_MOE_USE_DEEP_GEMM=0``, exported by the first
#: MiniMax-M2.5 B200 script (#757) until #947: vLLM's FP8 MoE oracle is left Triton's fused MoE.
_TRITON_MOE = {"quantization.moe_kernel": "triton"}
_GPTOSS_B200 = {"scheduler.async_scheduling": True, "kv_cache.prefix_caching": False,
                "scheduler.max_num_batched_tokens": 8192, "kv_cache.gpu_memory_utilization": 0.9,
                "scheduler.max_num_seqs": 512, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"}
_NO_ASYNC = ("async-scheduling no longer passed (d2c2acb19, #789): the image's default applies",)
_KIMI = {"kv_cache.max_model_len": "MAX_MODEL_LEN", "scheduler.max_num_seqs": "CONC"}
_KIMI_NM = ("--compilation_config.pass_config.fuse_allreduce_rms true",)
#: ``--stream-interval 20`` of the Blackwell MiniMax-M2.5 (and Kimi-K2.5 FP4) scripts.
_STREAM_20 = {"engine.stream_interval": 20}
_MM_B200_V3 = {**_STREAM_20, "kv_cache.gpu_memory_utilization": 0.90, "kv_cache.max_model_len": "MAX_MODEL_LEN",
               "kv_cache.block_size": 32, "kv_cache.dtype": "fp8",
               "scheduler.max_num_batched_tokens": "2*ISL", "kv_cache.prefix_caching": False}
_MM_FP4 = {**_STREAM_20, "kv_cache.gpu_memory_utilization": 0.90, "kv_cache.max_model_len": "MAX_MODEL_LEN",
           "kv_cache.dtype": "fp8", "scheduler.max_num_batched_tokens": "2*ISL",
           "kv_cache.prefix_caching": False}
_MM_HOPPER = {"kv_cache.gpu_memory_utilization": 0.90, "kv_cache.max_model_len": "MAX_MODEL_LEN",
              "scheduler.max_num_seqs": 256}
_MM_H200 = {"kv_cache.gpu_memory_utilization": 0.95, "kv_cache.max_model_len": "MAX_MODEL_LEN"}

#: ``--max-cudagraph-capture-size 2048`` (``--cuda-graph-sizes 2048`` in the 2025 scripts, the
#: same largest size under vLLM 0.10-0.11's single-value form).
_CAPTURE_2048 = {"engine.max_cudagraph_capture_size": 2048}


def _capture_2048(rec: Recipe) -> Recipe:
    """``rec`` with the scripts' CUDA-graph capture limit among its flags."""
    return replace(rec, flags={**rec.flags, **_CAPTURE_2048})


RECIPES: tuple[Recipe, ...] = (
    # Llama-3.x-70B: the 2025 docker/slurm scripts, deleted by 2582bce40 (#149, 2025-10-30 02:18 UTC).
    Recipe("llama-70b", "b200_sxm", "fp4", "2025-10-01", "2025-10-30", "benchmarks/70b_fp4_b200_docker.sh",
           "4b860b78e (#79)", {**_LLAMA_B200, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"} | _FULL_DECODE_ONLY,
           _LLAMA_B200_NM, "none"),
    Recipe("llama-70b", "b200_sxm", "fp8", "2025-10-01", "2025-10-30", "benchmarks/70b_fp8_b200_docker.sh",
           "4b860b78e (#79)", {**_LLAMA_B200, "kv_cache.max_model_len": "MAX_MODEL_LEN"} | _FULL_DECODE_ONLY,
           _LLAMA_B200_NM, "none"),
    Recipe("llama-70b", "h100_sxm", "fp8", "2025-09-23", "2025-10-30",
           "benchmarks/70b_fp8_h100_{docker,slurm}.sh", "af4ccd03f (#43)",
           {**_LLAMA_HOPPER, "kv_cache.max_model_len": 10240}, (), "none"),
    Recipe("llama-70b", "h200_sxm", "fp8", "2025-09-28", "2025-10-30", "benchmarks/70b_fp8_h200_slurm.sh",
           "eb282d8f6 (#66); last touched 9596d23d7 (#148, log handling only)",
           {**_LLAMA_HOPPER, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"}, (), "none"),

    # gpt-oss-120b (MXFP4).
    _capture_2048(Recipe("gpt-oss", "b200_sxm", "fp4", "2025-10-01", "2025-12-05", "benchmarks/gptoss_fp4_b200_docker.sh",
           "4b860b78e (#79)", _GPTOSS_B200,
           ('--compilation-config {"pass_config": {"enable_fi_allreduce_fusion", '
            '"enable_attn_fusion", "enable_noop"}, "custom_ops": ["+rms_norm"], "cudagraph_mode": "FULL_AND_PIECEWISE"}',
            "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1", "VLLM_FLASHINFER_ALLREDUCE_FUSION_THRESHOLDS_MB"), "none")),
    _capture_2048(Recipe("gpt-oss", "b200_sxm", "fp4", "2025-12-05", "2026-02-25", "benchmarks/gptoss_fp4_b200{_docker,}.sh",
           "25506e87c (#273); pass names renamed 4e52ed4c6 (#327)", {**_GPTOSS_B200, "kv_cache.dtype": "fp8"},
           ("--compilation-config fuse_allreduce_rms + eliminate_noops",
            "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1"), "none")),
    _capture_2048(Recipe("gpt-oss", "b200_sxm", "fp4", "2026-02-25", None, _SN + "gptoss_fp4_b200.sh", "d2c2acb19 (#789)",
           {k: v for k, v in {**_GPTOSS_B200, "kv_cache.dtype": "fp8"}.items() if k != "scheduler.async_scheduling"},
           ("--compilation-config fuse_allreduce_rms + eliminate_noops",
            "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1"), "none", _NO_ASYNC)),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2025-09-23", "2025-11-04", "benchmarks/gptoss_fp4_h100_{docker,slurm}.sh",
           "af4ccd03f (#43)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": 10240}, (), "none")),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2025-11-04", "2025-12-05", "benchmarks/gptoss_fp4_h100_{docker,slurm}.sh",
           "7103d6608 (#159)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": 10240} | _PIECEWISE,
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2025-12-05", "2026-01-02", "benchmarks/gptoss_fp4_h100_{docker,slurm}.sh",
           "25506e87c (#273)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": 10240},
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2026-01-02", "2026-02-25", "benchmarks/gptoss_fp4_h100{_docker,_slurm,}.sh",
           "4e52ed4c6 (#327)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": 10240} | _MARLIN,
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2026-02-25", "2026-03-28", _SN + "gptoss_fp4_h100.sh",
           "d2c2acb19 (#789); image v0.18.0 cec542a9a (#960)",
           {k: v for k, v in _GPTOSS_HOPPER.items() if k != "scheduler.async_scheduling"}
           | {"kv_cache.max_model_len": 10240} | _MARLIN,
           (), "none", _NO_ASYNC)),
    _capture_2048(Recipe("gpt-oss", "h100_sxm", "fp4", "2026-03-28", None, _SN + "gptoss_fp4_h100.sh", "626932a11 (#911)",
           {k: v for k, v in _GPTOSS_HOPPER.items() if k != "scheduler.async_scheduling"}
           | {"kv_cache.max_model_len": "MAX_MODEL_LEN"} | _MARLIN,
           (), "none", _NO_ASYNC)),
    _capture_2048(Recipe("gpt-oss", "h200_sxm", "fp4", "2025-09-28", "2025-11-04", "benchmarks/gptoss_fp4_h200_slurm.sh",
           "eb282d8f6 (#66); last touched 9596d23d7 (#148, log handling only)",
           {**_GPTOSS_HOPPER, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"}, (), "none")),
    _capture_2048(Recipe("gpt-oss", "h200_sxm", "fp4", "2025-11-04", "2025-12-05", "benchmarks/gptoss_fp4_h200_slurm.sh",
           "7103d6608 (#159)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"} | _PIECEWISE,
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h200_sxm", "fp4", "2025-12-05", "2026-01-02", "benchmarks/gptoss_fp4_h200_slurm.sh",
           "25506e87c (#273)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"},
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h200_sxm", "fp4", "2026-01-02", "2026-02-25", "benchmarks/gptoss_fp4_h200{_slurm,}.sh",
           "4e52ed4c6 (#327)", {**_GPTOSS_HOPPER, "kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"} | _MARLIN,
           (), "none")),
    _capture_2048(Recipe("gpt-oss", "h200_sxm", "fp4", "2026-02-25", None, _SN + "gptoss_fp4_h200.sh",
           "d2c2acb19 (#789); image v0.18.0 cec542a9a (#960)",
           {k: v for k, v in _GPTOSS_HOPPER.items() if k != "scheduler.async_scheduling"}
           | {"kv_cache.max_model_len": "CALCULATED_MAX_MODEL_LEN"} | _MARLIN,
           (), "none", _NO_ASYNC)),

    # Kimi-K2.5: the scripts pass no expert- or data-parallel flag.
    Recipe("kimi-k2.5", "b200_sxm", "fp4", "2026-03-11", "2026-03-27", _SN + "kimik2.5_fp4_b200.sh",
           "a58dedd5a (#862)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.90}, _KIMI_NM, "none"),
    Recipe("kimi-k2.5", "b200_sxm", "fp4", "2026-03-27", "2026-04-20", _SN + "kimik2.5_fp4_b200.sh",
           "79a42e20a (#926)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.90,
                                "kv_cache.prefix_caching": False}, _KIMI_NM, "none"),
    _capture_2048(Recipe("kimi-k2.5", "b200_sxm", "fp4", "2026-04-20", None, _SN + "kimik2.5_fp4_b200.sh",
           "6c3acebfa (#1047)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.90, "kv_cache.prefix_caching": False,
                                 "kv_cache.dtype": "fp8", "scheduler.max_num_batched_tokens": "2*ISL", **_STREAM_20},
           _KIMI_NM, "none")),
    Recipe("kimi-k2.5", "b200_sxm", "int4", "2026-02-24", "2026-03-24", _SN + "kimik2.5_int4_b200.sh",
           "eb02101ef (#735)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.95}, _KIMI_NM, "none"),
    Recipe("kimi-k2.5", "b200_sxm", "int4", "2026-03-24", None, _SN + "kimik2.5_int4_b200.sh",
           "79ea3651a (#935)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.95},
           _KIMI_NM + ("VLLM_USE_FLASHINFER_MOE_INT4=1",), "none"),
    Recipe("kimi-k2.5", "h200_sxm", "int4", "2026-03-02", "2026-03-27", _SN + "kimik2.5_int4_h200.sh",
           "749096c4c (#847, reland of #839)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.95}, _KIMI_NM, "none"),
    Recipe("kimi-k2.5", "h200_sxm", "int4", "2026-03-27", None, _SN + "kimik2.5_int4_h200.sh",
           "79a42e20a (#926)", {**_KIMI, "kv_cache.gpu_memory_utilization": 0.95, "kv_cache.prefix_caching": False},
           _KIMI_NM, "none"),
    Recipe("kimi-k2.5", "b300_sxm", "fp4", "2026-04-17", None, _SN + "kimik2.5_fp4_b300.sh",
           "a35e53694 (#1056); reverted 13d527ab9 (#1099) and re-added unchanged f34a83b25 (#1100) on 2026-04-20",
           {**_KIMI, "kv_cache.gpu_memory_utilization": 0.90, "kv_cache.prefix_caching": False}, _KIMI_NM, "none"),

    # MiniMax-M2.5.
    Recipe("minimax-m2.5", "b200_sxm", "fp8", "2026-03-11", "2026-03-28", _SN + "minimaxm2.5_fp8_b200.sh",
           "f342df18e (#757)", {"kv_cache.gpu_memory_utilization": 0.95, "kv_cache.max_model_len": "MAX_MODEL_LEN",
                                "kv_cache.block_size": 32} | _TRITON_MOE,
           (), "always-ep"),
    Recipe("minimax-m2.5", "b200_sxm", "fp8", "2026-03-28", "2026-04-03", _SN + "minimaxm2.5_fp8_b200.sh",
           "0f78cf4eb (#966)", {"kv_cache.gpu_memory_utilization": 0.95, "kv_cache.max_model_len": "MAX_MODEL_LEN",
                                "kv_cache.block_size": 32, "kv_cache.prefix_caching": False} | _TRITON_MOE,
           (), "always-ep"),
    _capture_2048(Recipe("minimax-m2.5", "b200_sxm", "fp8", "2026-04-03", "2026-04-22", _SN + "minimaxm2.5_fp8_b200.sh",
           "bddbf4031 (#947)", _MM_B200_V3, ("VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl",))),
    _capture_2048(Recipe("minimax-m2.5", "b200_sxm", "fp8", "2026-04-22", None, _SN + "minimaxm2.5_fp8_b200.sh",
           "41ed82dc1 (#1068)", _MM_B200_V3, ("VLLM_FLOAT32_MATMUL_PRECISION=high",))),
    Recipe("minimax-m2.5", "b200_sxm", "fp4", "2026-04-02", "2026-04-08", _SN + "minimaxm2.5_fp4_b200.sh",
           "08bcde8f1 on PR #996's branch (not yet on main; the nightly-5b8c30d image of the 2026-04-03 rows)",
           {"kv_cache.gpu_memory_utilization": 0.95, "kv_cache.max_model_len": "MAX_MODEL_LEN",
            "kv_cache.block_size": 32, "kv_cache.dtype": "fp8", "kv_cache.prefix_caching": False, **_STREAM_20},
           ("VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl",)),
    _capture_2048(Recipe("minimax-m2.5", "b200_sxm", "fp4", "2026-04-08", "2026-04-22", _SN + "minimaxm2.5_fp4_b200.sh",
           "79bd988e9 (#996)", _MM_FP4, (), "dp-attention")),
    _capture_2048(Recipe("minimax-m2.5", "b200_sxm", "fp4", "2026-04-22", None, _SN + "minimaxm2.5_fp4_b200.sh",
           "13962fcfa (#1069)", _MM_FP4, ("VLLM_FLOAT32_MATMUL_PRECISION=high",), "dp-attention")),
    _capture_2048(Recipe("minimax-m2.5", "b300_sxm", "fp8", "2026-04-17", "2026-04-21", _SN + "minimaxm2.5_fp8_b300.sh",
           "340d7854c (#1054)", _MM_B200_V3, ("VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl",))),
    _capture_2048(Recipe("minimax-m2.5", "b300_sxm", "fp8", "2026-04-21", None, _SN + "minimaxm2.5_fp8_b300.sh",
           "0c2467c15 (#1106)", _MM_B200_V3, ("VLLM_FLOAT32_MATMUL_PRECISION=high",))),
    _capture_2048(Recipe("minimax-m2.5", "b300_sxm", "fp4", "2026-04-17", "2026-04-21", _SN + "minimaxm2.5_fp4_b300.sh",
           "22d0f12f7 (#1055)", _MM_FP4, (), "dp-attention")),
    _capture_2048(Recipe("minimax-m2.5", "b300_sxm", "fp4", "2026-04-21", None, _SN + "minimaxm2.5_fp4_b300.sh",
           "633fd2377 (#1107)", _MM_FP4, ("VLLM_FLOAT32_MATMUL_PRECISION=high",), "dp-attention")),
    Recipe("minimax-m2.5", "h100_sxm", "fp8", "2026-03-03", "2026-03-28", _SN + "minimaxm2.5_fp8_h100.sh",
           "ac0d2a853 (#832); image v0.18.0 1d5cae141 (#958)", _MM_HOPPER | _PIECEWISE, ()),
    Recipe("minimax-m2.5", "h100_sxm", "fp8", "2026-03-28", None, _SN + "minimaxm2.5_fp8_h100.sh",
           "0f78cf4eb (#966)", {**_MM_HOPPER, "kv_cache.prefix_caching": False} | _PIECEWISE, ()),
    Recipe("minimax-m2.5", "h200_sxm", "fp8", "2026-03-01", "2026-03-13", _SN + "minimaxm2.5_fp8_h200.sh",
           "a36346339 (#831)", _MM_H200, (), "none"),
    Recipe("minimax-m2.5", "h200_sxm", "fp8", "2026-03-13", "2026-03-28", _SN + "minimaxm2.5_fp8_h200.sh",
           "5e2c705d3 (#869); image v0.18.0 1d5cae141 (#958)", _MM_H200, (), "always-ep"),
    Recipe("minimax-m2.5", "h200_sxm", "fp8", "2026-03-28", None, _SN + "minimaxm2.5_fp8_h200.sh",
           "0f78cf4eb (#966)", {**_MM_H200, "kv_cache.prefix_caching": False}, (), "always-ep"),
)

#: Benchmark-client defects that make a row measure something other than its label, by
#: (family, system, first day, fix day, the concurrency label the defect wrote, what happened).
#: The fix day is included: a fix committed that day may postdate the run, and the label the
#: defect writes is the defect's own signature (the sweep never reached it), so a row carrying it
#: in the window ran the defective client whatever the hour.
CLIENT_DEFECTS: tuple[tuple[str, str, str, str, int, str], ...] = (
    ("gpt-oss", "h100_sxm", "2025-11-21", "2025-12-08", 512,
     "gptoss_fp4_h100_docker.sh sent --max-concurrency 512 and --num-prompts 10 x CONC whatever the sweep "
     "point CONC (InferenceX d22bf9ca9 #227, fixed by 4e135fd3f #310 on 2025-12-08): all 10 x CONC "
     "requests at once against a server started with --max-num-seqs CONC, labelled c512; CONC is not "
     "recorded, so neither the client nor the server of the row is known"),
)

_FAMILIES = (("minimax-m2.5", "minimax-m2.5"), ("kimi-k2.5", "kimi-k2.5"), ("gpt-oss", "gpt-oss"),
             ("llama-3.1-70b", "llama-70b"), ("llama-3.3-70b", "llama-70b"))


def model_family(model_path: str) -> Optional[str]:
    """The table's family for a model path (case-insensitive), None for a model InferenceX's
    vLLM scripts did not cover."""
    text = model_path.lower()
    for needle, family in _FAMILIES:
        if needle in text:
            return family
    return None


def client_defect(model_path: str, system: str, measured: Optional[str], clients: int) -> Optional[str]:
    """Why a row did not measure its label (``CLIENT_DEFECTS``), or None. Decided from the row's
    model, GPU, date and label alone: never from its measured numbers."""
    family = model_family(model_path)
    if family is None or not measured:
        return None
    for fam, sys_, start, fixed, label, text in CLIENT_DEFECTS:
        if (fam, sys_) == (family, system) and start <= measured <= fixed and clients == label:
            return text
    return None


#: What vLLM's default ``--kv-cache-dtype auto`` gives an InferenceX checkpoint whose script passes
#: no ``--kv-cache-dtype``: the KV-cache dtype its quantisation config declares, else the model's
#: own (bf16). Only the checkpoints where that differs from the replay's default (an FP8 cache for
#: FP8 and NVFP4 weights, ``silicon_matrix.kv_cache_dtype``, AIConfigurator's own assumption) are
#: listed. MiniMaxAI/MiniMax-M2.5's ``quantization_config`` (block FP8: ``quant_method fp8``,
#: ``weight_block_size [128, 128]``, ``activation_scheme dynamic``; the copy in aiconfigurator-core's
#: ``model_configs/MiniMaxAI--MiniMax-M2.5_config.json``) declares no KV-cache scheme, so its
#: Hopper scripts and its B200 FP8 script before bddbf4031 (#947) served a bf16 cache; NVIDIA's
#: NVFP4 exports declare ``kv_cache_quant_algo: FP8`` (``nvidia--MiniMax-M2.5-NVFP4_hf_quant_config
#: .json``), which vLLM's ``auto`` honours, and INT4 / MXFP4 rows already keep the model dtype.
CHECKPOINT_KV_CACHE: dict[tuple[str, str], tuple[str, str]] = {
    ("minimax-m2.5", "fp8"): ("auto", "no --kv-cache-dtype: vLLM's auto keeps the model dtype (bf16) for "
                                      "MiniMaxAI/MiniMax-M2.5, whose block-FP8 quantization_config declares "
                                      "no KV-cache scheme"),
}


def find_recipe(family: str, system: str, precision: str, measured: str) -> Optional[Recipe]:
    """The script version in force on ``measured`` (the last change on or before that day)."""
    for rec in RECIPES:
        if (rec.family, rec.system, rec.precision) != (family, system, precision):
            continue
        if rec.from_date <= measured < (rec.to_date or TABULATED_UNTIL):
            return rec
    return None


def _nest(flat: Mapping[str, Any]) -> dict:
    out: dict = {}
    for key, value in flat.items():
        section, name = key.split(".", 1)
        out.setdefault(section, {})[name] = value
    return out


def _parallel_notes(rec: Recipe, tp: int, ep: int, dp: int) -> list[str]:
    """How the script turned the layout into flags, where that differs from the row's labels."""
    name = rec.script.rsplit("/", 1)[-1]
    if rec.parallel == "none" and (ep > 1 or dp > 1):
        return [f"{name} passes no --enable-expert-parallel / --data-parallel-size: it ran TP {tp} "
                f"with experts TP-sharded whatever the row's EP {ep} / DP {dp}"
                + (" (replayed so)" if dp <= 1 else " (not modelled: the layout comes from the row)")]
    if rec.parallel == "always-ep" and ep <= 1:
        return [f"{name} tests EP_SIZE -ge 1, so it always passed --enable-expert-parallel: experts "
                f"over EP {tp * dp}, not TP-sharded as the row's EP 1 says (replayed so)"]
    if rec.parallel == "dp-attention" and dp > 1:
        return [f"{name} with DP attention: --tensor-parallel-size=1 --data-parallel-size=$TP "
                f"--enable-expert-parallel (not modelled here; the layout comes from the row)"]
    return []


def script_flags(model_path: str, precision: str, system: str, measured: Optional[str],
                 isl: int, osl: int, clients: int, tp: int, ep: int, dp: int) -> tuple[dict, list[str]]:
    """(config, notes) for an InferenceX vLLM row: ``config`` the nested kvplan config sections
    the script's server flags set on the measured date (``{"scheduler": {...}, "kv_cache":
    {...}}``), ``notes`` one line per source, caveat and the flags kvplan cannot express.

    Why: the CSV records no flags, and the scripts changed them between the rows' dates (see the
    module docstring). ``kv_cache.max_model_len`` is the script's own (a row's requests fit in it,
    with ``--ignore-eos`` and lengths up to ISL + OSL); a what-if with longer outputs must raise it.
    Returns ``({}, [reason])`` for an undated row or one no tabulated script version covers."""
    family = model_family(model_path)
    precision = precision.lower()
    if not measured:
        return {}, ["no measured date: the script version (and its flags) is unknown; vLLM defaults"]
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", measured):
        return {}, [f"measured date {measured!r} not YYYY-MM-DD: script flags unknown; vLLM defaults"]
    if family is None:
        return {}, [f"no InferenceX vLLM script for {model_path}: vLLM defaults"]
    if measured >= TABULATED_UNTIL:
        return {}, [f"measured {measured}: script versions are tabulated up to {TABULATED_UNTIL} only; vLLM defaults"]
    rec = find_recipe(family, system, precision, measured)
    if rec is None:
        first = min((r.from_date for r in RECIPES if (r.family, r.system, r.precision) == (family, system, precision)),
                    default=None)
        why = (f"its first vLLM script version dates from {first}" if first and measured < first
               else "no InferenceX vLLM script covers it")
        return {}, [f"{family} {precision} {system} measured {measured}: {why}; server flags unknown, vLLM defaults"]

    row = _Row(isl, osl, clients, measured)
    flat = {key: (RULES[value](row) if isinstance(value, str) and value in RULES else value)
            for key, value in rec.flags.items()}
    # What the script's parallel flags ran, where the row's label says otherwise.
    if rec.parallel == "always-ep" and ep <= 1:
        flat["parallel.enable_expert_parallel"] = True
    if rec.parallel == "none" and ep > 1 and dp <= 1:
        flat["parallel.enable_expert_parallel"] = False
    # The checkpoint's own KV cache where the script passes no --kv-cache-dtype.
    checkpoint_kv = None if "kv_cache.dtype" in rec.flags else CHECKPOINT_KV_CACHE.get((family, precision))
    if checkpoint_kv:
        flat["kv_cache.dtype"] = checkpoint_kv[0]
    config = _nest(flat)
    shown = ", ".join(f"{k}={v}" for k, v in flat.items())
    notes = [f"InferenceX {rec.script} @ {rec.source} (in force {rec.from_date}.."
             f"{rec.to_date or 'tabulated end'}): {shown}"]
    if rec.from_date == measured:
        notes.append(f"script changed on the measured day ({rec.source}): assumed the row ran the new version")
    notes.extend(rec.extra_notes)
    if checkpoint_kv:
        notes.append(checkpoint_kv[1])
    notes.extend(_parallel_notes(rec, tp, ep, dp))
    if rec.not_modelled:
        notes.append("not modelled: " + ", ".join(rec.not_modelled))
    return config, notes
