"""Every ``kvplan`` command fed malformed input, as a new user types it by mistake.

Unknown keys, wrong types, NaN/inf/negative and absurdly large numbers; missing, empty, binary
and truncated files (configs, traces, profiles, step traces, saved results); a directory where
a file is expected. Every case must end the same way (the policy in ``sim/errors.py``): exit
code 2, exactly one line on stderr that names the field, flag, file or line, no traceback, and
nothing already written overwritten (each ``--out`` target is pre-filled with a sentinel).

Cases run in-process through ``kvplan.cli.main.main`` (fast: most fail before any simulation); each
has a timeout, because "fails fast" is part of the contract (``workload.num_requests=10**12``
must not hang or run out of memory).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "calibration" / "profiles" / "smollm2-135m_bf16_cpu.json"
SENTINEL = "sentinel: a failing command must leave this file alone\n"
HAS_TORCH = importlib.util.find_spec("torch") is not None
BINARY = bytes(range(256)) * 4  # NUL bytes and invalid UTF-8
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
STEP = {"seconds": 0.01, "num_prefill_tokens": 16, "num_decode_seqs": 1}


# ---------------------------------------------------------------- inputs

@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Every malformed input a case can name as ``{key}``, plus sentinel-filled outputs."""
    t = tmp_path

    def text(name: str, content: str) -> str:
        (t / name).write_text(content)
        return str(t / name)

    def raw(name: str, content: bytes) -> str:
        (t / name).write_bytes(content)
        return str(t / name)

    (t / "adir").mkdir()
    (t / "emptyrun").mkdir()
    (t / "badrun").mkdir()
    (t / "badrun" / "summary.json").write_text('{"completed": 3, "ttft_ms": {"p99"')
    (t / "binrun").mkdir()
    (t / "binrun" / "summary.json").write_bytes(BINARY)
    (t / "out_dir").mkdir()
    (t / "out_dir" / "summary.json").write_text(SENTINEL)
    (t / "emptymodel").mkdir()
    profile_text = PROFILE.read_text()
    good_validation = json.dumps({"format": "kvplan-validation/1", "source": {},
                                  "metrics": [{"name": "p99_ttft_ms", "real": 100.0, "predicted": 110.0}]})
    return {
        "tmp": str(t),
        "missing": str(t / "nope.yaml"),
        "missing_csv": str(t / "nope.csv"),
        "missing_json": str(t / "nope.json"),
        "dir": str(t / "adir"),
        # configs
        "empty_yaml": text("empty.yaml", ""),
        "blank_yaml": text("blank.yaml", "\n# only a comment\n"),
        "binary_yaml": raw("binary.yaml", BINARY),
        "truncated_yaml": text("truncated.yaml", "model: opt-13b\nkv_cache: {block_size: 16, alloc"),
        "list_yaml": text("list.yaml", "- model\n- hardware\n"),
        "badkey_yaml": text("badkey.yaml", "schedulr: {policy: orca}\n"),
        "badvalue_yaml": text("badvalue.yaml", "kv_cache: {block_size: -16}\n"),
        "good_a": text("a.yaml", "workload: {num_requests: 10}\n"),
        "good_b": text("b.yaml", "workload: {num_requests: 10}\nscheduler: {policy: vllm_v0}\n"),
        # workload traces
        "empty_csv": text("empty.csv", ""),
        "binary_csv": raw("binary.csv", BINARY),
        "nul_csv": raw("nul.csv", AZURE_HEADER.encode() + b"2023-11-16 18:15:46,\x00\x00,44\n"),
        "truncated_csv": text("truncated.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,37"),
        "header_csv": text("header.csv", AZURE_HEADER),
        "negative_csv": text("negative.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,-374,44\n"),
        "nan_csv": text("nan.csv", AZURE_HEADER + "nan,374,44\n"),
        "huge_csv": text("huge.csv", AZURE_HEADER + "2023-11-16 18:15:46.68,100000000000000000000,44\n"),
        "truncated_jsonl": text("truncated.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5}\n'
                                                   '{"timestamp": 1, "input_len'),
        "empty_table": text("empty_table.csv", "num_prefill_tokens,num_decode_tokens\n"),
        "binary_table": raw("binary_table.csv", BINARY),
        "truncated_table": text("truncated_table.csv", "num_prefill_tokens,num_decode_tokens\n12,4\n13"),
        # calibration profiles
        "empty_profile": text("empty_profile.json", ""),
        "binary_profile": raw("binary_profile.json", BINARY),
        "truncated_profile": text("truncated_profile.json", profile_text[: len(profile_text) // 2]),
        "list_profile": text("list_profile.json", "[]"),
        "nan_profile": text("nan_profile.json", profile_text.replace('"intercept": 0.', '"intercept": NaN, "x": 0.', 1)),
        "good_profile": text("profile.json", profile_text),
        # runtime step traces (calibrate --trace)
        "empty_steps": text("empty_steps.jsonl", ""),
        "binary_steps": raw("binary_steps.jsonl", BINARY),
        "truncated_steps": text("truncated_steps.jsonl", json.dumps(STEP) + "\n" + json.dumps(STEP)[:20]),
        "string_steps": text("string_steps.jsonl", json.dumps({**STEP, "seconds": "fast"}) + "\n"),
        "nan_steps": text("nan_steps.jsonl", json.dumps({**STEP, "seconds": float("nan")}) + "\n"),
        "negative_steps": text("negative_steps.jsonl", json.dumps({**STEP, "num_decode_seqs": -4}) + "\n"),
        "few_steps": text("few_steps.jsonl", (json.dumps(STEP) + "\n") * 3),
        # saved results (report, dashboard)
        "empty_result": text("empty_result.json", ""),
        "binary_result": raw("binary_result.json", BINARY),
        "truncated_result": text("truncated_result.json", good_validation[: len(good_validation) // 2]),
        "list_result": text("list_result.json", "[1, 2, 3]"),
        "capacity_stub": text("capacity_stub.json", '{"kind": "capacity"}'),
        "ab_stub": text("ab_stub.json", '{"kind": "ab", "metrics": 5}'),
        "bad_validation": text("bad_validation.json", json.dumps(
            {"format": "kvplan-validation/1", "metrics": [{"name": "p99_ttft_ms", "real": "abc", "predicted": 1}]})),
        "nan_validation": text("nan_validation.json", json.dumps(
            {"format": "kvplan-validation/1", "metrics": [{"name": "p99_ttft_ms", "real": float("nan"), "predicted": 1}]})),
        "good_validation": text("validation.json", good_validation),
        "emptyrun": str(t / "emptyrun"),
        "badrun": str(t / "badrun"),
        "binrun": str(t / "binrun"),
        # price files (capacity --price)
        "binary_price": raw("binary_price.yaml", BINARY),
        "truncated_price": text("truncated_price.yaml", "a100-80gb: 1.2\nh100-sxm: [3"),
        "list_price": text("list_price.yaml", "- 1\n- 2\n"),
        # models (generate, bench runtime)
        "emptymodel": str(t / "emptymodel"),
        "binary_gguf": raw("binary.gguf", BINARY),
        "truncated_gguf": raw("truncated.gguf", b"GGUF\x03\x00\x00\x00" + bytes(64)),
        # outputs, pre-filled: a failing run must not touch them
        "out_file": text("out.json", SENTINEL),
        "out_html": text("report.html", SENTINEL),
        "out_dir": str(t / "out_dir"),
    }


def _sentinels_intact(f: dict[str, str]) -> None:
    assert Path(f["out_file"]).read_text() == SENTINEL
    assert Path(f["out_html"]).read_text() == SENTINEL
    out_dir = Path(f["out_dir"])
    assert sorted(p.name for p in out_dir.iterdir()) == ["summary.json"]
    assert (out_dir / "summary.json").read_text() == SENTINEL


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    from kvplan.cli.main import main

    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_user_error(code: int, out: str, err: str, needles: list[str]) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, f"exit {code}, stderr: {err}"
    assert "Traceback" not in err
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("error: "), lines[0]
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"


# ---------------------------------------------------------------- the matrix

def case(cid: str, argv: list[str], needles: list[str], torch: bool = False):
    marks = [pytest.mark.skipif(not HAS_TORCH, reason="needs torch")] if torch else []
    return pytest.param(argv, needles, id=cid, marks=marks)


SIM = ["simulate", "--no-progress"]
SIM_CASES = [
    # config files
    case("config-missing", [*SIM, "{missing}"], ["nope.yaml", "not found"]),
    case("config-dir", [*SIM, "{dir}"], ["adir"]),
    case("config-empty", [*SIM, "{empty_yaml}"], ["empty.yaml"]),
    case("config-blank", [*SIM, "{blank_yaml}"], ["blank.yaml"]),
    case("config-binary", [*SIM, "{binary_yaml}"], ["binary.yaml"]),
    case("config-truncated", [*SIM, "{truncated_yaml}"], ["truncated.yaml"]),
    case("config-list", [*SIM, "{list_yaml}"], ["list.yaml"]),
    case("config-unknown-key", [*SIM, "{badkey_yaml}"], ["schedulr"]),
    case("config-bad-value", [*SIM, "{badvalue_yaml}"], ["kv_cache.block_size"]),
    # --set: unknown keys and wrong types
    case("set-unknown-key", [*SIM, "--set", "workload.num_requets=5"], ["num_requets"]),
    case("set-unknown-section", [*SIM, "--set", "schedulr.policy=orca"], ["schedulr"]),
    case("set-no-equals", [*SIM, "--set", "scheduler.policy"], ["scheduler.policy"]),
    case("set-empty-key", [*SIM, "--set", "=3"], ["--set"]),
    case("set-section-scalar", [*SIM, "--set", "scheduler=3"], ["scheduler"]),
    case("set-str-for-int", [*SIM, "--set", "kv_cache.block_size=abc"], ["kv_cache.block_size"]),
    case("set-float-for-int", [*SIM, "--set", "scheduler.max_num_seqs=1.5"], ["scheduler.max_num_seqs"]),
    case("set-list-for-int", [*SIM, "--set", "scheduler.max_num_seqs=[1, 2]"], ["scheduler.max_num_seqs"]),
    case("set-bool-for-int", [*SIM, "--set", "kv_cache.block_size=true"], ["kv_cache.block_size"]),
    case("set-int-for-bool", [*SIM, "--set", "kv_cache.prefix_caching=7"], ["kv_cache.prefix_caching"]),
    case("set-bad-choice", [*SIM, "--set", "scheduler.policy=fifo"], ["scheduler.policy"]),
    # numbers: NaN, inf, negative, zero, absurdly large
    case("num-requests-negative", [*SIM, "--set", "workload.num_requests=-5"], ["workload.num_requests"]),
    case("num-requests-zero", [*SIM, "--set", "workload.num_requests=0"], ["workload.num_requests"]),
    case("num-requests-huge", [*SIM, "--set", "workload.num_requests=1000000000000"], ["workload.num_requests"]),
    case("num-requests-nan", [*SIM, "--set", "workload.num_requests=.nan"], ["workload.num_requests"]),
    case("rate-nan", [*SIM, "--set", "workload.arrival.rate=.nan"], ["workload.arrival.rate"]),
    case("rate-negative", [*SIM, "--set", "workload.arrival.rate=-2"], ["workload.arrival.rate"]),
    case("rate-string", [*SIM, "--set", "workload.arrival.rate=fast"], ["workload.arrival.rate"]),
    case("input-len-nan", [*SIM, "--set", "workload.input_len.mean=.nan"], ["workload.input_len"]),
    case("input-len-negative", [*SIM, "--set", "workload.input_len.mean=-10"], ["workload.input_len"]),
    case("output-len-huge", [*SIM, "--set", "workload.output_len.max=1000000000000"], ["workload.output_len"]),
    case("block-size-negative", [*SIM, "--set", "kv_cache.block_size=-16"], ["kv_cache.block_size"]),
    case("block-size-huge", [*SIM, "--set", "kv_cache.block_size=1000000000000"], ["kv_cache.block_size"]),
    case("max-model-len-zero", [*SIM, "--set", "kv_cache.max_model_len=0"], ["kv_cache.max_model_len"]),
    case("gpu-util-nan", [*SIM, "--set", "kv_cache.gpu_memory_utilization=.nan"], ["kv_cache.gpu_memory_utilization"]),
    case("gpu-util-above-1", [*SIM, "--set", "kv_cache.gpu_memory_utilization=2"], ["kv_cache.gpu_memory_utilization"]),
    case("max-num-seqs-huge", [*SIM, "--set", "scheduler.max_num_seqs=1000000000000000000000"], ["scheduler.max_num_seqs"]),
    case("replicas-zero", [*SIM, "--set", "parallel.num_replicas=0"], ["num_replicas"]),
    case("seed-negative", [*SIM, "--set", "workload.num_requests=5", "--seed", "-1"], ["seed"]),
    case("seed-huge", [*SIM, "--set", "workload.num_requests=5", "--seed", "99999999999999999999999"], ["seed"]),
    case("seed-not-int", [*SIM, "--seed", "abc"], ["--seed"]),
    case("unknown-flag", [*SIM, "--bogus"], ["--bogus"]),
    # workload traces
    case("trace-missing", [*SIM, "--set", "workload.trace={missing_csv}"], ["nope.csv"]),
    case("trace-dir", [*SIM, "--set", "workload.trace={dir}"], ["adir"]),
    case("trace-empty", [*SIM, "--set", "workload.trace={empty_csv}"], ["empty.csv"]),
    case("trace-binary", [*SIM, "--set", "workload.trace={binary_csv}"], ["binary.csv"]),
    case("trace-nul", [*SIM, "--set", "workload.trace={nul_csv}"], ["nul.csv"]),
    case("trace-truncated", [*SIM, "--set", "workload.trace={truncated_csv}"], ["truncated.csv:3"]),
    case("trace-header-only", [*SIM, "--set", "workload.trace={header_csv}"], ["header.csv"]),
    case("trace-negative", [*SIM, "--set", "workload.trace={negative_csv}"], ["negative.csv:2"]),
    case("trace-nan-time", [*SIM, "--set", "workload.trace={nan_csv}"], ["nan.csv:2"]),
    case("trace-huge-length", [*SIM, "--set", "workload.trace={huge_csv}"], ["huge.csv"]),
    case("trace-jsonl-truncated", [*SIM, "--set", "workload.trace={truncated_jsonl}"], ["truncated.jsonl:2"]),
    # calibration profiles
    case("profile-missing", [*SIM, "--set", "cost_model.profile={missing_json}"], ["nope.json"]),
    case("profile-dir", [*SIM, "--set", "cost_model.profile={dir}"], ["adir"]),
    case("profile-empty", [*SIM, "--set", "cost_model.profile={empty_profile}"], ["empty_profile.json"]),
    case("profile-binary", [*SIM, "--set", "cost_model.profile={binary_profile}"], ["binary_profile.json"]),
    case("profile-truncated", [*SIM, "--set", "cost_model.profile={truncated_profile}"], ["truncated_profile.json"]),
    case("profile-list", [*SIM, "--set", "cost_model.profile={list_profile}"], ["list_profile.json"]),
    case("profile-nan", [*SIM, "--set", "cost_model.profile={nan_profile}"], ["nan_profile.json"]),
    # outputs
    case("out-is-a-file", [*SIM, "--set", "workload.num_requests=5", "--out", "{out_file}"], ["out.json"]),
    case("bad-input-keeps-out-dir", [*SIM, "--set", "kv_cache.block_size=0", "--out", "{out_dir}"], ["kv_cache.block_size"]),
]

CAP = ["capacity", "--no-progress", "--seeds", "1", "--confirm", "0", "--out", "{out_file}"]
SLO = ["--slo", "ttft_p99_ms=500"]
CAP_CASES = [
    case("config-missing", [*CAP, *SLO, "{missing}"], ["nope.yaml"]),
    case("config-binary", [*CAP, *SLO, "{binary_yaml}"], ["binary.yaml"]),
    case("config-truncated", [*CAP, *SLO, "{truncated_yaml}"], ["truncated.yaml"]),
    case("set-unknown-key", [*CAP, *SLO, "--set", "kv_cache.blocksize=16"], ["kv_cache.blocksize"]),
    case("set-bad-value", [*CAP, *SLO, "--set", "kv_cache.block_size=-1"], ["kv_cache.block_size"]),
    case("slo-missing", [*CAP], ["--slo"]),
    case("slo-empty", [*CAP, "--slo", ""], ["--slo"]),
    case("slo-no-equals", [*CAP, "--slo", "ttft_p99_ms"], ["ttft_p99_ms"]),
    case("slo-unknown", [*CAP, "--slo", "bogus_p99_ms=5"], ["bogus_p99_ms"]),
    case("slo-string", [*CAP, "--slo", "ttft_p99_ms=fast"], ["ttft_p99_ms"]),
    case("slo-nan", [*CAP, "--slo", "ttft_p99_ms=nan"], ["ttft_p99_ms"]),
    case("slo-inf", [*CAP, "--slo", "ttft_p99_ms=inf"], ["ttft_p99_ms"]),
    case("slo-negative", [*CAP, "--slo", "ttft_p99_ms=-5"], ["ttft_p99_ms"]),
    case("slo-attainment", [*CAP, "--slo", "ttft_p99_ms=500,attainment=2"], ["attainment"]),
    case("duration-nan", [*CAP, *SLO, "--duration", "nan"], ["--duration"]),
    case("duration-inf", [*CAP, *SLO, "--duration", "inf"], ["--duration"]),
    case("duration-negative", [*CAP, *SLO, "--duration", "-60"], ["--duration"]),
    case("duration-string", [*CAP, *SLO, "--duration", "long"], ["--duration"]),
    case("num-requests-zero", [*CAP, *SLO, "--num-requests", "0"], ["--num-requests"]),
    case("num-requests-huge", [*CAP, *SLO, "--num-requests", "1000000000000"], ["--num-requests"]),
    case("seeds-zero", [*CAP, *SLO, "--seeds", "0"], ["--seeds"]),
    case("seeds-huge", [*CAP, *SLO, "--seeds", "1000000000"], ["--seeds"]),
    case("rel-tol-nan", [*CAP, *SLO, "--rel-tol", "nan"], ["--rel-tol"]),
    case("rel-tol-zero", [*CAP, *SLO, "--rel-tol", "0"], ["--rel-tol"]),
    case("target-rate-negative", [*CAP, *SLO, "--target-rate", "-3"], ["--target-rate"]),
    case("target-rate-nan", [*CAP, *SLO, "--target-rate", "nan"], ["--target-rate"]),
    case("start-rate-zero", [*CAP, *SLO, "--start-rate", "0"], ["--start-rate"]),
    case("start-rate-inf", [*CAP, *SLO, "--start-rate", "inf"], ["--start-rate"]),
    case("confirm-nan", [*CAP, *SLO, "--confirm", "nan"], ["--confirm"]),
    case("confirm-negative", [*CAP, *SLO, "--confirm", "-1"], ["--confirm"]),
    case("max-simulations-zero", [*CAP, *SLO, "--max-simulations", "0"], ["--max-simulations"]),
    case("price-string", [*CAP, *SLO, "--price", "a100-80gb=cheap"], ["--price", "a100-80gb"]),
    case("price-negative", [*CAP, *SLO, "--price", "a100-80gb=-1"], ["--price", "a100-80gb"]),
    case("price-nan", [*CAP, *SLO, "--price", "a100-80gb=nan"], ["--price", "a100-80gb"]),
    case("price-unknown-gpu", [*CAP, *SLO, "--price", "tpu-v9=1"], ["tpu-v9"]),
    case("price-file-missing", [*CAP, *SLO, "--price", "{missing}"], ["nope.yaml"]),
    case("price-file-dir", [*CAP, *SLO, "--price", "{dir}"], ["adir"]),
    case("price-file-binary", [*CAP, *SLO, "--price", "{binary_price}"], ["binary_price.yaml"]),
    case("price-file-truncated", [*CAP, *SLO, "--price", "{truncated_price}"], ["truncated_price.yaml"]),
    case("price-file-list", [*CAP, *SLO, "--price", "{list_price}"], ["list_price.yaml"]),
    case("out-is-a-dir", ["capacity", "--no-progress", *SLO, "--out", "{dir}"], ["adir"]),
]

AB = ["ab", "--no-progress", "--seeds", "1", "--num-requests", "10", "--out", "{out_file}"]
AB_CASES = [
    case("a-missing", [*AB, "{missing}", "{good_b}"], ["nope.yaml"]),
    case("b-dir", [*AB, "{good_a}", "{dir}"], ["adir"]),
    case("a-empty", [*AB, "{empty_yaml}", "{good_b}"], ["empty.yaml"]),
    case("b-binary", [*AB, "{good_a}", "{binary_yaml}"], ["binary.yaml"]),
    case("a-truncated", [*AB, "{truncated_yaml}", "{good_b}"], ["truncated.yaml"]),
    case("b-unknown-key", [*AB, "{good_a}", "{badkey_yaml}"], ["schedulr"]),
    case("b-bad-value", [*AB, "{good_a}", "{badvalue_yaml}"], ["kv_cache.block_size"]),
    case("b-missing-arg", [*AB, "{good_a}"], ["config_b"]),
    case("confidence-above-1", [*AB, "{good_a}", "{good_b}", "--confidence", "1.5"], ["--confidence"]),
    case("confidence-nan", [*AB, "{good_a}", "{good_b}", "--confidence", "nan"], ["--confidence"]),
    case("confidence-zero", [*AB, "{good_a}", "{good_b}", "--confidence", "0"], ["--confidence"]),
    case("bootstrap-zero", [*AB, "{good_a}", "{good_b}", "--bootstrap", "0"], ["--bootstrap"]),
    case("bootstrap-huge", [*AB, "{good_a}", "{good_b}", "--bootstrap", "1000000000000"], ["--bootstrap"]),
    case("seeds-zero", [*AB, "{good_a}", "{good_b}", "--seeds", "0"], ["--seeds"]),
    case("num-requests-negative", [*AB, "{good_a}", "{good_b}", "--num-requests", "-4"], ["--num-requests"]),
    case("num-requests-huge", [*AB, "{good_a}", "{good_b}", "--num-requests", "1000000000000"], ["--num-requests"]),
    case("set-unknown-key", [*AB, "{good_a}", "{good_b}", "--set", "slo.ttft=5"], ["slo.ttft"]),
    case("out-is-a-dir", ["ab", "--no-progress", "{good_a}", "{good_b}", "--out", "{dir}"], ["adir"]),
]

SWEEP = ["sweep", "--no-progress", "--num-requests", "10", "--workers", "1", "--out", "{out_file}"]
GRID = ["--grid", "kv_cache.block_size=16,32"]
SWEEP_CASES = [
    case("grid-missing", [*SWEEP], ["--grid"]),
    case("grid-no-equals", [*SWEEP, "--grid", "kv_cache.block_size"], ["kv_cache.block_size"]),
    case("grid-no-key", [*SWEEP, "--grid", "=16,32"], ["--grid"]),
    case("grid-no-values", [*SWEEP, "--grid", "kv_cache.block_size="], ["kv_cache.block_size"]),
    case("grid-unknown-key", [*SWEEP, "--grid", "kv_cache.blocksize=16,32"], ["kv_cache.blocksize"]),
    case("grid-bad-type", [*SWEEP, "--grid", "kv_cache.block_size=abc,16"], ["kv_cache.block_size"]),
    case("grid-negative", [*SWEEP, "--grid", "kv_cache.block_size=-16,16"], ["kv_cache.block_size"]),
    case("grid-nan", [*SWEEP, "--grid", "workload.arrival.rate=.nan,2"], ["workload.arrival.rate"]),
    case("grid-huge", [*SWEEP, "--grid", "workload.num_requests=1000000000000,10"], ["workload.num_requests"]),
    case("grid-twice", [*SWEEP, *GRID, *GRID], ["kv_cache.block_size"]),
    case("config-missing", [*SWEEP, *GRID, "{missing}"], ["nope.yaml"]),
    case("config-binary", [*SWEEP, *GRID, "{binary_yaml}"], ["binary.yaml"]),
    case("seeds-zero", [*SWEEP, *GRID, "--seeds", "0"], ["--seeds"]),
    case("num-requests-zero", [*SWEEP, *GRID, "--num-requests", "0"], ["--num-requests"]),
    case("workers-zero", [*SWEEP, *GRID, "--workers", "0"], ["--workers"]),
    case("backend-unknown", [*SWEEP, *GRID, "--backend", "slurm"], ["--backend"]),
    case("slo-bad", [*SWEEP, *GRID, "--slo", "ttft_p99_ms=-1"], ["ttft_p99_ms"]),
    case("set-unknown-key", [*SWEEP, *GRID, "--set", "kv_cache.blocksize=16"], ["kv_cache.blocksize"]),
    case("csv-is-a-dir", [*SWEEP, *GRID, "--csv", "{dir}"], ["adir"]),
    case("out-is-a-dir", ["sweep", "--no-progress", *GRID, "--out", "{dir}"], ["adir"]),
]

REP = ["report", "--out", "{out_html}"]
REPORT_CASES = [
    case("input-missing", [*REP, "{missing_json}"], ["nope.json"]),
    case("input-none", [*REP], ["inputs"]),
    case("input-empty", [*REP, "{empty_result}"], ["empty_result.json"]),
    case("input-binary", [*REP, "{binary_result}"], ["binary_result.json"]),
    case("input-truncated", [*REP, "{truncated_result}"], ["truncated_result.json"]),
    case("input-list", [*REP, "{list_result}"], ["list_result.json"]),
    case("input-capacity-stub", [*REP, "{capacity_stub}"], ["capacity_stub.json"]),
    case("input-ab-stub", [*REP, "{ab_stub}"], ["ab_stub.json"]),
    case("input-bad-validation", [*REP, "{bad_validation}"], ["bad_validation.json", "real"]),
    case("input-nan-validation", [*REP, "{nan_validation}"], ["nan_validation.json", "real"]),
    case("input-dir-not-a-run", [*REP, "{emptyrun}"], ["emptyrun"]),
    case("input-run-truncated-summary", [*REP, "{badrun}"], ["summary.json"]),
    case("input-run-binary-summary", [*REP, "{binrun}"], ["summary.json"]),
    case("input-good-then-bad", [*REP, "{good_validation}", "{binary_result}"], ["binary_result.json"]),
    case("out-bad-suffix", ["report", "{good_validation}", "--out", "{tmp}/report.txt"], ["report.txt"]),
    case("out-is-a-dir", ["report", "{good_validation}", "--out", "{dir}"], ["adir"]),
    case("markdown-is-a-dir", [*REP, "{good_validation}", "--markdown", "{dir}"], ["adir"]),
]

CALIB = ["calibrate", "--no-progress", "--out", "{out_file}", "--trace"]
CALIBRATE_CASES = [
    case("trace-missing", [*CALIB, "{missing_json}"], ["nope.json"]),
    case("trace-dir", [*CALIB, "{dir}"], ["adir"]),
    case("trace-empty", [*CALIB, "{empty_steps}"], ["empty_steps.jsonl"]),
    case("trace-binary", [*CALIB, "{binary_steps}"], ["binary_steps.jsonl"]),
    case("trace-truncated", [*CALIB, "{truncated_steps}"], ["truncated_steps.jsonl:2"]),
    case("trace-string", [*CALIB, "{string_steps}"], ["string_steps.jsonl:1", "seconds"]),
    case("trace-nan", [*CALIB, "{nan_steps}"], ["nan_steps.jsonl:1", "seconds"]),
    case("trace-negative", [*CALIB, "{negative_steps}"], ["negative_steps.jsonl:1", "num_decode_seqs"]),
    case("trace-too-few-steps", [*CALIB, "{few_steps}"], ["usable steps"]),
    case("warmup-negative", [*CALIB, "{few_steps}", "--warmup-steps", "-1"], ["--warmup-steps"]),
    case("block-size-zero", [*CALIB, "{few_steps}", "--block-size", "0"], ["--block-size"]),
    case("out-is-a-dir", ["calibrate", "--trace", "{few_steps}", "--out", "{dir}"], ["adir"]),
    case("save-trace-is-a-dir", [*CALIB, "{few_steps}", "--save-trace", "{dir}"], ["adir"]),
]

VAL = ["validate", "--no-progress", "--out", "{out_dir}", "--profile"]
VALIDATE_CASES = [
    case("profile-missing", [*VAL, "{missing_json}"], ["nope.json"]),
    case("profile-dir", [*VAL, "{dir}"], ["adir"]),
    case("profile-empty", [*VAL, "{empty_profile}"], ["empty_profile.json"]),
    case("profile-binary", [*VAL, "{binary_profile}"], ["binary_profile.json"]),
    case("profile-truncated", [*VAL, "{truncated_profile}"], ["truncated_profile.json"]),
    case("profile-list", [*VAL, "{list_profile}"], ["list_profile.json"]),
    case("profile-nan", [*VAL, "{nan_profile}"], ["nan_profile.json"]),
    case("profile-flag-missing", ["validate", "--out", "{out_dir}"], ["--profile"]),
    case("rate-nan", [*VAL, "{good_profile}", "--rate", "nan"], ["--rate"]),
    case("rate-negative", [*VAL, "{good_profile}", "--rate", "-2"], ["--rate"]),
    case("rate-inf", [*VAL, "{good_profile}", "--rate", "inf"], ["--rate"]),
    case("num-requests-zero", [*VAL, "{good_profile}", "--num-requests", "0"], ["--num-requests"]),
    case("num-requests-huge", [*VAL, "{good_profile}", "--num-requests", "1000000000000"], ["--num-requests"]),
    case("scale-nan", [*VAL, "{good_profile}", "--scale", "nan"], ["--scale"]),
    case("scale-zero", [*VAL, "{good_profile}", "--scale", "0"], ["--scale"]),
    case("kv-cache-negative", [*VAL, "{good_profile}", "--kv-cache-mib", "-1"], ["--kv-cache-mib"]),
    case("kv-cache-nan", [*VAL, "{good_profile}", "--kv-cache-mib", "nan"], ["--kv-cache-mib"]),
    case("max-num-seqs-zero", [*VAL, "{good_profile}", "--max-num-seqs", "0"], ["--max-num-seqs"]),
    case("threads-zero", [*VAL, "{good_profile}", "--threads", "0"], ["--threads"]),
    case("spec-negative", [*VAL, "{good_profile}", "-k", "-1"], ["--num-speculative-tokens"]),
    case("out-is-a-file", ["validate", "--profile", "{good_profile}", "--out", "{out_file}"], ["out.json"]),
]

GEN = ["generate", "-p", "hello"]
GENERATE_CASES = [
    case("prompt-missing", ["generate"], ["--prompt"]),
    case("max-tokens-zero", [*GEN, "--max-tokens", "0"], ["max_tokens"], torch=True),
    case("max-tokens-negative", [*GEN, "--max-tokens", "-5"], ["max_tokens"], torch=True),
    case("temperature-negative", [*GEN, "--temperature", "-1"], ["--temperature"]),
    case("temperature-nan", [*GEN, "--temperature", "nan"], ["--temperature"]),
    case("top-p-zero", [*GEN, "--top-p", "0"], ["top_p"], torch=True),
    case("top-p-nan", [*GEN, "--top-p", "nan"], ["top_p"], torch=True),
    case("top-k-negative", [*GEN, "--top-k", "-2"], ["top_k"], torch=True),
    case("kv-cache-zero", [*GEN, "--kv-cache-mib", "0"], ["--kv-cache-mib"]),
    case("kv-cache-nan", [*GEN, "--kv-cache-mib", "nan"], ["--kv-cache-mib"]),
    case("kv-cache-inf", [*GEN, "--kv-cache-mib", "inf"], ["--kv-cache-mib"]),
    case("block-size-zero", [*GEN, "--block-size", "0"], ["--block-size"]),
    case("threads-zero", [*GEN, "--threads", "0"], ["--threads"]),
    case("spec-negative", [*GEN, "-k", "-1"], ["--num-speculative-tokens"]),
    case("trace-is-a-dir", [*GEN, "--trace", "{dir}"], ["adir"]),
    case("dtype-unknown", [*GEN, "--dtype", "float8"], ["dtype"], torch=True),
    case("device-unknown", [*GEN, "--device", "tpu"], ["device"], torch=True),
    case("model-missing", [*GEN, "--model", "{missing_json}"], ["nope.json"], torch=True),
    case("model-empty-dir", [*GEN, "--model", "{emptymodel}"], ["emptymodel"], torch=True),
    case("model-binary-gguf", [*GEN, "--model", "{binary_gguf}"], ["binary.gguf"], torch=True),
    case("model-truncated-gguf", [*GEN, "--model", "{truncated_gguf}"], ["truncated.gguf"], torch=True),
    case("model-unknown-random", [*GEN, "--model", "random:gpt-17"], ["gpt-17"], torch=True),
]

BENCH = ["bench", "runtime"]
BENCH_CASES = [
    case("num-requests-zero", [*BENCH, "--num-requests", "0"], ["--num-requests"]),
    case("num-requests-huge", [*BENCH, "--num-requests", "1000000000000"], ["--num-requests"]),
    case("scale-nan", [*BENCH, "--scale", "nan"], ["--scale"]),
    case("scale-inf", [*BENCH, "--scale", "inf"], ["--scale"]),
    case("scale-negative", [*BENCH, "--scale", "-1"], ["--scale"]),
    case("lengths-missing", [*BENCH, "--lengths", "{missing_csv}"], ["nope.csv"]),
    case("lengths-dir", [*BENCH, "--lengths", "{dir}"], ["adir"]),
    case("lengths-empty", [*BENCH, "--lengths", "{empty_csv}"], ["empty.csv"]),
    case("lengths-header-only", [*BENCH, "--lengths", "{empty_table}"], ["empty_table.csv"]),
    case("lengths-binary", [*BENCH, "--lengths", "{binary_table}"], ["binary_table.csv"]),
    case("lengths-truncated", [*BENCH, "--lengths", "{truncated_table}"], ["truncated_table.csv:3"]),
    case("lengths-azure-not-a-table", [*BENCH, "--lengths", "{truncated_csv}"], ["truncated.csv:1"]),
    case("block-size-zero", [*BENCH, "--block-size", "0"], ["--block-size"]),
    case("max-num-seqs-zero", [*BENCH, "--max-num-seqs", "0"], ["--max-num-seqs"]),
    case("max-batched-zero", [*BENCH, "--max-num-batched-tokens", "0"], ["--max-num-batched-tokens"]),
    case("kv-cache-nan", [*BENCH, "--kv-cache-mib", "nan"], ["--kv-cache-mib"]),
    case("seed-string", [*BENCH, "--seed", "x"], ["--seed"]),
    case("trace-is-a-dir", [*BENCH, "--trace", "{dir}"], ["adir"]),
]

ALL_CASES = [
    pytest.param(*p.values, id=f"{cmd}-{p.id}", marks=p.marks)
    for cmd, cases in (("simulate", SIM_CASES), ("capacity", CAP_CASES), ("ab", AB_CASES),
                       ("sweep", SWEEP_CASES), ("report", REPORT_CASES), ("calibrate", CALIBRATE_CASES),
                       ("validate", VALIDATE_CASES), ("generate", GENERATE_CASES), ("bench", BENCH_CASES))
    for p in cases
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv,needles", ALL_CASES)
def test_malformed_input_is_one_line_exit_2(argv, needles, files, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # one line even where the terminal is narrow
    code, out, err = run_cli([a.format(**files) for a in argv], capsys)
    assert_user_error(code, out, err, [n.format(**files) for n in needles])
    _sentinels_intact(files)


# ---------------------------------------------------------------- the dashboard's file inputs

LOADER_CASES = [
    ("missing_json", "nope.json"), ("dir", "adir"), ("empty_result", "empty_result.json"),
    ("binary_result", "binary_result.json"), ("truncated_result", "truncated_result.json"),
    ("list_result", "list_result.json"), ("bad_validation", "bad_validation.json"),
    ("nan_validation", "nan_validation.json"),
]


def _one_line_naming(exc: BaseException, needle: str) -> None:
    text = str(exc)
    assert "\n" not in text.strip(), text
    assert needle in text, text


@pytest.mark.parametrize("key,needle", LOADER_CASES)
def test_dashboard_validation_loader(key, needle, files):
    """The Validation page's path box and upload both go through ``load_validation``."""
    from calibration.validation_file import load_validation
    from sim.errors import KvplanError

    with pytest.raises(KvplanError) as exc:
        load_validation(files[key])
    _one_line_naming(exc.value, needle)
    if Path(files[key]).is_file():  # the upload: the same bytes, named by the upload's name
        with pytest.raises(KvplanError) as exc:
            load_validation(Path(files[key]).read_bytes(), "upload.json")
        _one_line_naming(exc.value, "upload.json")


@pytest.mark.parametrize("key,needle", LOADER_CASES + [
    ("capacity_stub", "capacity_stub.json"), ("ab_stub", "ab_stub.json"),
    ("emptyrun", "emptyrun"), ("badrun", "summary.json"), ("binrun", "summary.json"),
])
def test_dashboard_and_report_record_loader(key, needle, files):
    from analysis.report import load_record
    from sim.errors import KvplanError

    with pytest.raises(KvplanError) as exc:
        load_record(files[key])
    _one_line_naming(exc.value, needle)

