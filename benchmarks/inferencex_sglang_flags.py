"""SGLang server flags of InferenceX's single-node benchmark scripts, by the date a row was measured.

Why: ``silicon_sample.csv`` rows measured by InferenceX (SemiAnalysis) record the model, GPU,
precision, parallel layout, ISL/OSL and concurrency, but no server flags. The server ran whatever
``benchmarks/[single_node/[fixed_seq_len/]]<model>_<precision>_<gpu>.sh`` said on the day of the
sweep, and those scripts changed often (max running requests, chunked prefill, memory fraction,
the scheduler's recv interval ...). A replay that uses SGLang's defaults instead misprices queueing
and admission, so this module returns the kvplan config keys that the script in force on the
measured date set (the last commit to the script on main on or before that UTC date, with its
``if`` branches on TP / ISL / OSL / CONC resolved), plus notes saying where each came from and
which flags kvplan cannot express.

The table was read off the InferenceX repository's history (``git log --first-parent`` of main;
commit dates in UTC). ``to_date`` is the day before the next commit that changed the script's server
command (not counting commits that only touched eval-only arguments, logging or the model path);
``None`` means no later change was found in the history read (through 2026-06). No script of these
versions passes ``--enable-dp-attention`` (all run ``--data-parallel-size=1``): a DP-attention row
was not produced by them, so it gets no flags. Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Union

REPO = "SemiAnalysisAI/InferenceX"


@dataclass(frozen=True)
class Point:
    """What a script's ``if`` branches read: the sweep point's ISL, OSL, CONC, TP, EP and the
    attention DP size (``DP_ATTENTION`` in the scripts)."""

    isl: int
    osl: int
    clients: int
    tp: int
    ep: int
    dp: int


#: A flag value: a constant, or a rule of the sweep point (the script's shell conditionals).
Value = Union[int, float, bool, str, Callable[[Point], object]]
#: kvplan keys: bare names are ``sglang.<name>``; dotted ones name their section (``kv_cache.dtype``).
Flags = Mapping[str, Value]


@dataclass(frozen=True)
class Version:
    """One version of one script, in force on main from ``from_date`` to ``to_date`` (inclusive,
    UTC dates). ``flags`` maps kvplan keys to values or rules; ``branch`` (optional) resolves the
    script's TP/ISL/OSL branches into more keys, or returns None where the script exits
    (``exit 1``). ``not_modelled`` lists the flags and environment kvplan cannot express;
    ``caveat`` says what is uncertain about the attribution."""

    family: str
    system: str
    precision: str
    from_date: str
    to_date: Optional[str]
    flags: Flags
    not_modelled: tuple[str, ...]
    source: str
    branch: Optional[Callable[[Point], Optional[Flags]]] = None
    caveat: str = ""


# ---------------------------------------------------------------------------------------------
# Rules: the scripts' shell conditionals.
# ---------------------------------------------------------------------------------------------

def recv_30_from_16_clients(p: Point) -> int:
    """``SCHEDULER_RECV_INTERVAL=30`` at CONC >= 16, else 10 (the DeepSeek-R1 and Qwen3.5
    Blackwell scripts: poll for new requests every 30 decode steps once the batch is large)."""
    return 30 if p.clients >= 16 else 10


def concurrency(p: Point) -> int:
    """``--max-running-requests $CONC``: the batch cap equals the sweep's client count."""
    return p.clients


def dsr1_fp8_blackwell_tp(p: Point) -> Optional[Flags]:
    """``dsr1_fp8_b200.sh`` (from #411) and ``dsr1_fp8_b300.sh``: TP 8 runs 128 requests with
    0.82 of memory and 32k prefill chunks, recv 30/10 by CONC; TP 4 (8k/1k only) runs 32 requests
    with 0.95 and 8k chunks, recv 10; anything else exits."""
    if p.tp == 8:
        return {"max_running_requests": 128, "mem_fraction_static": 0.82,
                "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
                "scheduler_recv_interval": recv_30_from_16_clients(p), "cuda_graph_max_bs": 128}
    if p.tp == 4 and (p.isl, p.osl) == (8192, 1024):
        return {"max_running_requests": 32, "mem_fraction_static": 0.95,
                "chunked_prefill_size": 8192, "max_prefill_tokens": 8192,
                "scheduler_recv_interval": 10, "cuda_graph_max_bs": 32}
    return None


def dsr1_fp8_h200_seq(p: Point) -> Optional[Flags]:
    """``dsr1_fp8_h200.sh``: 512 running requests (and CUDA-graph batches) at 1k/1k, else 256."""
    n = 512 if (p.isl, p.osl) == (1024, 1024) else 256
    return {"max_running_requests": n, "cuda_graph_max_bs": n}


# ---------------------------------------------------------------------------------------------
# The table.
# ---------------------------------------------------------------------------------------------

_KV_FP8 = {"kv_cache.dtype": "fp8"}            # --kv-cache-dtype fp8_e4m3
_KV_AUTO = {"kv_cache.dtype": "auto"}          # no --kv-cache-dtype: SGLang's auto, the model dtype
_QWEN_B200_ENV = ("NCCL_NVLS_ENABLE=1", "SGL_ENABLE_JIT_DEEPGEMM=false",
                  "SGLANG_ENABLE_FLASHINFER_GEMM=true")
_QWEN_STP: Flags = {"scheduler_recv_interval": recv_30_from_16_clients, "max_running_requests": 128,
             "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
             "disable_radix_cache": True, "cuda_graph_max_bs": concurrency, "engine.stream_interval": 30}
_QWEN_STP_NM = ("--attention-backend trtllm_mha",
                "--moe-runner-backend flashinfer_trtllm", "--tokenizer-worker-num 6",
                "--context-length ISL+OSL+20") + _QWEN_B200_ENV
_DSR1_FP4: Flags = {"max_running_requests": 256, "mem_fraction_static": 0.85, "chunked_prefill_size": 16384,
             "disable_radix_cache": True, "scheduler_recv_interval": recv_30_from_16_clients,
             "cuda_graph_max_bs": 256, "engine.stream_interval": 10, **_KV_FP8}
_DSR1_FP4_NM = ("--ep-size $EP_SIZE", "--enable-flashinfer-allreduce-fusion",
                "--enable-symm-mem", "--attention-backend trtllm_mla",
                "--moe-runner-backend flashinfer_trtllm")
#: ``--stream-interval 30`` of the DeepSeek-R1 FP8 Blackwell scripts.
_DSR1_FP8_STREAM = {"engine.stream_interval": 30}
_DSR1_FP8_NM = ("--enable-flashinfer-allreduce-fusion",
                "--attention-backend trtllm_mla", "--ep-size $EP_SIZE",
                "--moe-runner-backend flashinfer_trtllm", "SGL_ENABLE_JIT_DEEPGEMM=false",
                "SGLANG_ENABLE_FLASHINFER_GEMM=true")

VERSIONS: tuple[Version, ...] = (
    # --- DeepSeek-R1 / V3 (the dsr1 scripts) -------------------------------------------------
    Version("deepseek", "b200", "fp4", "2025-10-01", "2025-11-09", _DSR1_FP4,
            ("--enable-ep-moe (EP = TP)", "--enable-flashinfer-allreduce-fusion",
             "--enable-symm-mem", "--attention-backend trtllm_mla", "--enable-flashinfer-trtllm-moe"),
            "benchmarks/dsr1_fp4_b200_docker.sh @4b860b78e (#79)"),
    Version("deepseek", "b200", "fp4", "2025-11-10", "2026-06-22", _DSR1_FP4, _DSR1_FP4_NM,
            "benchmarks/dsr1_fp4_b200_docker.sh @d8fe8f73e (#204); same server flags in "
            "benchmarks/single_node/dsr1_fp4_b200.sh through @64c20b6b5 (#906)",
            caveat="#204 merged 2025-11-10 19:55 UTC; a run earlier that day used @4b860b78e, whose "
                   "kvplan flags are the same (it differs in --enable-ep-moe and the MoE backend flag)"),
    Version("deepseek", "b200", "fp8", "2025-11-10", "2026-01-12",
            {"max_running_requests": 128, "mem_fraction_static": 0.82, "chunked_prefill_size": 32768,
             "max_prefill_tokens": 32768, "disable_radix_cache": True,
             "scheduler_recv_interval": recv_30_from_16_clients, "cuda_graph_max_bs": 128,
             **_DSR1_FP8_STREAM, **_KV_FP8},
            _DSR1_FP8_NM,
            "benchmarks/dsr1_fp8_b200_docker.sh @d8fe8f73e (#204), @d22bf9ca9 (#227); "
            "benchmarks/dsr1_fp8_b200_slurm.sh @ea181ae6d (#379, 2025-12-31) has the same flags"),
    Version("deepseek", "b200", "fp8", "2026-01-13", None,
            {"disable_radix_cache": True, **_DSR1_FP8_STREAM, **_KV_FP8},
            _DSR1_FP8_NM,
            "benchmarks/single_node/dsr1_fp8_b200.sh @64c20b6b5 (#906); TP branches since 1d29967c4 (#411)",
            branch=dsr1_fp8_blackwell_tp),
    Version("deepseek", "b300", "fp4", "2026-04-17", None, _DSR1_FP4, _DSR1_FP4_NM,
            "benchmarks/single_node/dsr1_fp4_b300.sh @9ebeafb4e (#1049)",
            caveat="added 2026-04-17 08:18 UTC, the rows' date"),
    Version("deepseek", "b300", "fp8", "2026-04-17", None,
            {"disable_radix_cache": True, **_DSR1_FP8_STREAM, **_KV_FP8},
            _DSR1_FP8_NM, "benchmarks/single_node/dsr1_fp8_b300.sh @5b302f147 (#1050)",
            branch=dsr1_fp8_blackwell_tp, caveat="added 2026-04-17 09:57 UTC, the rows' date"),
    Version("deepseek", "h200", "fp8", "2026-01-22", None,
            {"chunked_prefill_size": 32768, "max_prefill_tokens": 32768, "mem_fraction_static": 0.82,
             "disable_radix_cache": True, "engine.stream_interval": 10, **_KV_AUTO},
            ("--attention-backend flashinfer", "--decode-log-interval 1", "TORCH_CUDA_ARCH_LIST=9.0"),
            "benchmarks/single_node/dsr1_fp8_h200.sh @41aff0afc (#878); flags unchanged since "
            "b0c4ed21b (#406)", branch=dsr1_fp8_h200_seq),
    # --- GLM-5 ---------------------------------------------------------------------------------
    Version("glm-5", "b200", "fp4", "2026-03-29", "2026-04-08",
            {"max_running_requests": concurrency, "mem_fraction_static": 0.80,
             "chunked_prefill_size": 131072, "disable_radix_cache": False,
             "cuda_graph_max_bs": concurrency, "engine.stream_interval": 30},
            ("--expert-parallel-size 1",
             "--model-loader-extra-config enable_multithread_load",
             "no --kv-cache-dtype (SGLang auto; the NVFP4 checkpoint may declare an FP8 KV cache)"),
            "benchmarks/single_node/glm5_nvfp4_b200.sh @d43805fc3 (#973; renamed glm5_fp4_b200.sh "
            "by #997 unchanged)",
            caveat="merged 2026-03-29 03:54 UTC, the rows' date; no --scheduler-recv-interval "
                   "until 475cc1dbc (#1011, 2026-04-09) set 10"),
    Version("glm-5", "b200", "fp8", "2026-03-20", "2026-05-17",
            {"max_running_requests": concurrency, "mem_fraction_static": 0.85,
             "chunked_prefill_size": 32768, "max_prefill_tokens": 32768,
             "disable_radix_cache": True, "cuda_graph_max_bs": concurrency,
             "engine.stream_interval": 30, **_KV_FP8},
            ("--attention-backend nsa", "--nsa-decode-backend trtllm",
             "--nsa-prefill-backend trtllm", "--moe-runner-backend flashinfer_trtllm",
             "--enable-flashinfer-allreduce-fusion",
             "SGL_ENABLE_JIT_DEEPGEMM=1"),
            "benchmarks/single_node/glm5_fp8_b200.sh @13930ca61 (#915)",
            caveat="added 2026-03-20 17:45 UTC, the rows' date"),
    Version("glm-5", "h200", "fp8", "2026-03-19", "2026-05-18",
            {"mem_fraction_static": 0.85, "disable_radix_cache": False, **_KV_AUTO},
            ("--tool-call-parser glm47 / --reasoning-parser glm45 (no effect on random prompts)",),
            "benchmarks/single_node/glm5_fp8_h200.sh @ebb48d4bc (#914)",
            caveat="added 2026-03-19 06:26 UTC, the rows' date; every other flag is SGLang's default"),
    # --- Qwen3.5-397B-A17B ------------------------------------------------------------------------
    Version("qwen3.5", "b200", "bf16", "2026-02-17", "2026-02-19",
            {"mem_fraction_static": 0.8, **_KV_AUTO}, (),
            "benchmarks/qwen3.5_bf16_b200.sh @521d19951 (#704)"),
    Version("qwen3.5", "b200", "bf16", "2026-02-20", None,
            {**_QWEN_STP, "mem_fraction_static": 0.82, **_KV_AUTO},
            _QWEN_STP_NM + ("--enable-flashinfer-allreduce-fusion",),
            "benchmarks/single_node/qwen3.5_bf16_b200.sh @9dc87a68c (#758)",
            caveat="#758 merged 2026-02-20 05:32 UTC with the same image as #704; a 2026-02-20 "
                   "run before it used #704's script (only --mem-fraction-static 0.8)"),
    Version("qwen3.5", "b200", "fp4", "2026-04-08", "2026-04-30",
            {**_QWEN_STP, "mem_fraction_static": 0.85, "mamba_ssm_dtype": "bfloat16", **_KV_FP8},
            _QWEN_STP_NM + ("--enable-flashinfer-allreduce-fusion (TP 8 only)",
                            "--fp4-gemm-backend flashinfer_cutlass"),
            "benchmarks/single_node/qwen3.5_fp4_b200.sh @48d35c480 (#820)",
            caveat="added 2026-04-08 19:51 UTC, the rows' date"),
    Version("qwen3.5", "b200", "fp8", "2026-03-03", "2026-03-23",
            {**_QWEN_STP, "mem_fraction_static": 0.82, "mamba_ssm_dtype": "bfloat16", **_KV_FP8},
            _QWEN_STP_NM,
            "benchmarks/single_node/qwen3.5_fp8_b200.sh @efd49e50b (#804); unchanged flags "
            "through @64c20b6b5 (#906)",
            caveat="added 2026-03-03 17:20 UTC, the first rows' date"),
    Version("qwen3.5", "b200", "fp8", "2026-03-24", "2026-04-29",
            {**_QWEN_STP, "mem_fraction_static": 0.82, "mamba_ssm_dtype": "bfloat16", **_KV_FP8},
            _QWEN_STP_NM + ("--enable-flashinfer-allreduce-fusion (TP 8 only)",),
            "benchmarks/single_node/qwen3.5_fp8_b200.sh @6a5dad463 (#918)",
            caveat="merged 2026-03-24 00:52 UTC, the rows' date; its kvplan flags equal @efd49e50b's"),
    Version("qwen3.5", "h200", "fp8", "2026-03-04", None,
            {"max_running_requests": 128, "chunked_prefill_size": 16384, "mem_fraction_static": 0.8,
             "disable_radix_cache": True, "cuda_graph_max_bs": concurrency,
             "mamba_ssm_dtype": "bfloat16", "engine.stream_interval": 50, **_KV_FP8},
            ("--enable-flashinfer-allreduce-fusion",
             "--attention-backend flashinfer", "--decode-log-interval 1",
             "--tokenizer-worker-num 6", "--context-length ISL+OSL+20"),
            "benchmarks/single_node/qwen3.5_fp8_h200.sh @f65d6b4b1 (#855)",
            caveat="added 2026-03-04 18:52 UTC, the first rows' date"),
    Version("qwen3.5", "b300", "bf16", "2026-04-18", "2026-05-17",
            {**_QWEN_STP, "mem_fraction_static": 0.82, **_KV_AUTO},
            _QWEN_STP_NM + ("--enable-flashinfer-allreduce-fusion",),
            "benchmarks/single_node/qwen3.5_bf16_b300.sh @32274d6c1 (#1081; #1073 was identical)",
            caveat="added 2026-04-18 01:52 UTC, the rows' date"),
    Version("qwen3.5", "b300", "fp4", "2026-04-18", "2026-05-19",
            {**_QWEN_STP, "mem_fraction_static": 0.8, "mamba_ssm_dtype": "bfloat16", **_KV_FP8},
            _QWEN_STP_NM + ("--enable-flashinfer-allreduce-fusion (TP 8 only)",
                            "--fp4-gemm-backend flashinfer_cutlass",
                            "--mamba-scheduler-strategy no_buffer"),
            "benchmarks/single_node/qwen3.5_fp4_b300.sh @8acbd08b7 (#1072)",
            caveat="added 2026-04-18 01:22 UTC, the rows' date"),
    Version("qwen3.5", "b300", "fp8", "2026-04-17", "2026-05-20",
            {"max_running_requests": concurrency, "chunked_prefill_size": 16384,
             "max_prefill_tokens": 16384, "mem_fraction_static": 0.8, "scheduler_recv_interval": 10,
             "disable_radix_cache": True, "cuda_graph_max_bs": concurrency,
             "mamba_ssm_dtype": "bfloat16", "engine.stream_interval": 50, **_KV_FP8},
            ("--enable-symm-mem", "--attention-backend trtllm_mha",
             "--moe-runner-backend flashinfer_trtllm",
             "--tokenizer-worker-num 6", "--context-length ISL+OSL+20"),
            "benchmarks/single_node/qwen3.5_fp8_b300.sh @c0f62a2ef (#1048)",
            caveat="added 2026-04-17 07:20 UTC, the rows' date"),
)

#: Why a (system) has no single-node script before some date, for the note.
NO_SCRIPT_BEFORE = {
    "b300": ("2026-04-17", "runners/launch_b300-nv.sh ran only dynamo-sglang / dynamo-trt (multi-node) "
                           "jobs until the first single-node B300 scripts (#1048, 2026-04-17); "
                           "the repository holds no script for earlier B300 SGLang rows"),
    "gb200": ("9999-12-31", "runners/launch_gb200-nv.sh launches multi-node dynamo jobs only; "
                            "there is no single-node GB200 SGLang script"),
}

FAMILIES = (("deepseek", "deepseek"), ("glm-5", "glm-5"), ("qwen3.5", "qwen3.5"))


def family_of(model_path: str) -> Optional[str]:
    """The script family of a model path (case-insensitive): DeepSeek-R1 and -V3 both ran the
    dsr1 scripts."""
    low = model_path.lower()
    for needle, family in FAMILIES:
        if needle in low:
            return family
    return None


def find_version(family: str, system: str, precision: str, date: str) -> Optional[Version]:
    """The table row in force on ``date`` (None: no script recorded for that date)."""
    for v in VERSIONS:
        if ((v.family, v.system, v.precision) == (family, system, precision)
                and v.from_date <= date and (v.to_date is None or date <= v.to_date)):
            return v
    return None


def _nest(flat: Mapping[str, object]) -> dict:
    """``{"max_running_requests": 8, "kv_cache.dtype": "fp8"}`` -> kvplan's nested config."""
    out: dict = {}
    for key, value in flat.items():
        section, _, name = key.rpartition(".")
        out.setdefault(section or "sglang", {})[name] = value
    return out


def _flag_text(flat: Mapping[str, object]) -> str:
    """``sglang.max_running_requests=128, kv_cache.dtype=fp8`` for a note."""
    return ", ".join(f"{k if '.' in k else 'sglang.' + k}={v}" for k, v in flat.items())


def script_flags(model_path: str, precision: str, system: str, measured: Optional[str],
                 isl: int, osl: int, clients: int, tp: int, ep: int, dp: int
                 ) -> tuple[dict, list[str]]:
    """``(config, notes)`` for an InferenceX SGLang row: the kvplan config keys its benchmark
    script set on the measured date (nested: ``{"sglang": {...}, "kv_cache": {...}}``), and one-line
    notes naming the script and commit and listing what kvplan cannot express. ``({}, [reason])``
    when the row is undated, the model has no script family, no script was in force, the script
    exits for this point, or the row used DP attention (which no recorded version enables)."""
    family = family_of(model_path)
    gpu = system.lower().removesuffix("_sxm")
    precision = precision.lower()
    if not measured:
        return {}, ["undated row: the script version in force is unknown, no InferenceX flags applied"]
    date = measured[:10]
    if family is None:
        return {}, [f"no InferenceX SGLang script family for {model_path}"]
    version = find_version(family, gpu, precision, date)
    if version is None:
        cutoff, why = NO_SCRIPT_BEFORE.get(gpu, ("", ""))
        reason = why if date < cutoff else "no single-node script version recorded for that date"
        return {}, [f"no InferenceX flags for {family} {precision} {gpu} on {date}: {reason}"]
    src = f"{REPO} {version.source}"
    if dp > 1:
        return {}, [f"DP attention {dp} but {src} runs --data-parallel-size=1 without "
                    "--enable-dp-attention: not this script's run, no flags applied"]
    point = Point(isl, osl, clients, tp, ep, dp)
    flat = {k: (v(point) if callable(v) else v) for k, v in version.flags.items()}
    if version.branch is not None:
        extra = version.branch(point)
        if extra is None:
            return {}, [f"{src} exits for TP {tp} ISL/OSL {isl}/{osl}: no flags applied"]
        flat.update(extra)
    notes = [f"InferenceX script on {date}: {src}: {_flag_text(flat)}"]
    if version.not_modelled:
        notes.append("not modelled: " + ", ".join(version.not_modelled))
    if version.caveat:
        notes.append(f"caveat: {version.caveat}")
    return _nest(flat), notes
