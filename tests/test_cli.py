"""End-to-end runs of the ``kvplan`` command, as a user types it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def kvplan(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_help_lists_commands():
    proc = kvplan("--help")
    assert proc.returncode == 0
    assert "simulate" in proc.stdout


def test_simulate_default_scenario_writes_outputs(tmp_path):
    out = tmp_path / "run"
    proc = kvplan("simulate", "--set", "workload.num_requests=200", "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "Time to first token" in proc.stdout and "token states" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    for key in ("completed", "rejected", "duration_s", "request_throughput", "output_throughput",
                "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "p90_itl_ms", "p99_e2el_ms"):
        assert key in summary
    for key in ("token_states", "reserved", "internal_fragmentation", "external_fragmentation",
                "preemptions", "prefix_cache_hit_rate"):
        assert key in summary["kv_cache"]
    assert summary["ttft_ms"]["p99"] == summary["p99_ttft_ms"]
    rows = (out / "requests.csv").read_text().splitlines()
    assert len(rows) == 201 and rows[0].startswith("request_id,")
    assert (out / "steps.csv").read_text().startswith("replica,start_s,duration_s")


def test_config_file_with_overrides_and_json(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: opt-13b\nhardware: a100-40gb\nkv_cache: {max_model_len: 2048, allocator: contiguous}\n"
                   "scheduler: {policy: orca}\nworkload: {num_requests: 100}\nslo: {ttft_ms: 1000}\n")
    proc = kvplan("simulate", str(cfg), "--set", "kv_cache.reserve=pow2", "--json", "--seed", "5")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["scenario"]["allocator"] == "contiguous" and s["scenario"]["reserve"] == "pow2"
    assert "goodput" in s and s["scenario"]["seed"] == 5


def test_same_seed_same_output(tmp_path):
    a = kvplan("simulate", "--set", "workload.num_requests=100", "--json", "--seed", "11")
    b = kvplan("simulate", "--set", "workload.num_requests=100", "--json", "--seed", "11")
    assert a.returncode == 0 and a.stdout == b.stdout


@pytest.mark.parametrize("args,needles", [
    (["--set", "scheduler.polcy=orca"], ["scheduler.polcy", "policy"]),
    (["--set", "scheduler.policy=fifo"], ["scheduler.policy", "chunked", "vllm_v0"]),
    (["--set", "kv_cache.block_size=0"], ["kv_cache.block_size"]),
    (["--set", "model=gpt-17"], ["model", "llama-2-7b"]),
    (["--set", "hardware=tpu"], ["hardware", "h100-sxm"]),
    (["--set", "model=llama-2-70b", "--set", "hardware=a100-40gb"], ["llama-2-70b", "GB"]),
    (["--set", "workload.arrival.process=poison"], ["workload.arrival.process", "poisson"]),
    (["missing.yaml"], ["missing.yaml", "not found"]),
])
def test_bad_input_is_one_line_exit_2(args, needles):
    assert_one_line_error(kvplan("simulate", *args, "--no-progress"), *needles)


def test_bad_trace_row_names_file_and_line(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:47.6805900,abc,44\n")
    proc = kvplan("simulate", "--set", f"workload.trace={trace}", "--no-progress")
    assert_one_line_error(proc, f"{trace}:3")


def test_bad_yaml_names_file_and_line(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model: opt-13b\nkv_cache: [unclosed\n")
    assert_one_line_error(kvplan("simulate", str(cfg)), "bad.yaml:")


def test_real_azure_trace_runs():
    trace = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"
    if not trace.exists():
        pytest.skip("shared traces not present")
    proc = kvplan("simulate", "--set", f"workload.trace={trace}", "--set", "workload.num_requests=300",
                  "--set", "kv_cache.max_model_len=8192", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed"] == 300


# ---------------------------------------------------------------- defects a new user hit (issue 9)

AZURE = ROOT.parent / "shared" / "traces" / "AzureLLMInferenceTrace_conv_2023.csv"


def _trace_prefix(tmp_path: Path, real: bool) -> Path:
    """200 requests: the head of the real Azure conversation trace (never committed), or a
    synthetic file in its format where the shared traces are absent."""
    path = tmp_path / "trace.csv"
    if real:
        if not AZURE.exists():
            pytest.skip("shared traces not present")
        with open(AZURE) as fh:
            path.write_text("".join(next(fh) for _ in range(201)))
    else:
        rows = [f"2023-11-16 18:15:{i // 10:02d}.{i % 10}000000,{100 + 7 * i},{10 + i % 50}" for i in range(200)]
        path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("real", [True, False], ids=["azure-prefix", "synthetic"])
def test_whole_trace_replays_without_num_requests(tmp_path, real):
    """Without workload.num_requests the progress bar has no total; `if bar:` on such a tqdm
    raised TypeError after the run. Progress stays on (the default) so the bar is created."""
    trace = _trace_prefix(tmp_path, real)
    out = tmp_path / "run"
    proc = kvplan("simulate", "--set", f"workload.trace={trace}", "--set", "kv_cache.max_model_len=8192",
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Time to first token" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] + summary["rejected"] == 200


def test_missing_trace_is_one_line_exit_2():
    proc = kvplan("simulate", "--set", "workload.trace=/nonexistent/file.csv")
    assert_one_line_error(proc, "/nonexistent/file.csv")


def test_trace_reader_raises_a_user_error_for_a_missing_file(tmp_path):
    from sim.errors import KvplanError, TraceFormatError
    from sim.workload.traces import read_azure, read_trace

    for reader in (read_trace, read_azure):
        with pytest.raises(TraceFormatError, match="nope.csv: not found") as exc:
            reader(tmp_path / "nope.csv")
        assert isinstance(exc.value, KvplanError)
    with pytest.raises(TraceFormatError, match="is a directory"):
        read_trace(tmp_path)


HEAVY = ("torch", "streamlit", "plotly", "pandas", "simpy")


def test_help_imports_nothing_heavy():
    """`kvplan --help` stays fast and works in the light core: the commands import their
    libraries (the simulator, torch, streamlit ...) only when they run."""
    script = ("import sys, kvplan.cli.main\n"
              f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
              "try:\n    kvplan.cli.main.main(['--help'])\nexcept SystemExit:\n    pass\n"
              f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "[]" and lines[-1] == "[]", proc.stdout


def test_version_needs_no_command():
    proc = kvplan("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("kvplan "), proc.stderr


def _main(argv, capsys):
    from kvplan.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def test_internal_error_is_not_blamed_on_the_user(monkeypatch, capsys):
    """A broken invariant is kvplan's bug: exit 1 and one line saying so (not `error:` + exit 2);
    KVPLAN_DEBUG=1 keeps the traceback."""
    import sim.api

    def broken(*args, **kwargs):
        raise AssertionError("block pool lost a block")

    monkeypatch.setattr(sim.api, "simulate", broken)
    monkeypatch.delenv("KVPLAN_DEBUG", raising=False)
    code, err = _main(["simulate", "--no-progress", "--set", "workload.num_requests=5"], capsys)
    lines = err.strip().splitlines()
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith("internal error (a bug in kvplan, please report)") and "lost a block" in lines[0]
    monkeypatch.setenv("KVPLAN_DEBUG", "1")
    from kvplan.cli.main import main

    with pytest.raises(AssertionError, match="lost a block"):
        main(["simulate", "--no-progress", "--set", "workload.num_requests=5"])


@pytest.mark.parametrize("exc,needle", [
    (FileNotFoundError(2, "No such file or directory", "/data/x.csv"), "/data/x.csv: not found"),
    (IsADirectoryError(21, "Is a directory", "/data"), "/data: is a directory"),
    (PermissionError(13, "Permission denied", "/root/x.yaml"), "/root/x.yaml: permission denied"),
])
def test_os_errors_on_user_paths_are_one_line_exit_2(monkeypatch, capsys, exc, needle):
    import sim.api

    def fail(*args, **kwargs):
        raise exc

    monkeypatch.setattr(sim.api, "simulate", fail)
    code, err = _main(["simulate", "--no-progress", "--set", "workload.num_requests=5"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith(f"error: {needle}"), err


def test_usage_errors_are_one_line_exit_2():
    assert_one_line_error(kvplan("simulate", "--bogus"), "--bogus")
    assert_one_line_error(kvplan("capacity", "--slo", "ttft_p99_ms=500", "--seeds", "many"), "--seeds")


def test_a_server_that_cannot_keep_up_is_said_in_plain_words(tmp_path):
    """summary.json's ``overload`` and the CLI's red line: arrivals, served rate, queue growing
    (the What-if page shows the same sentence above its tiles); nothing at a light load."""
    from sim.api import simulate

    heavy = simulate(None, overrides=["workload.num_requests=600", "workload.arrival.rate=40"])
    o = heavy.summary["overload"]
    assert o["overloaded"] and o["arrival_rate"] > 30 and o["served_rate"] < 0.8 * o["arrival_rate"]
    assert o["message"].startswith("overloaded: arrivals") and "queue growing" in o["message"]
    assert o["ttft_last_fifth_ms"] > 2 * o["ttft_first_fifth_ms"]
    light = simulate(None, overrides=["workload.num_requests=200", "workload.arrival.rate=2"])
    assert light.summary["overload"]["overloaded"] is False and light.summary["overload"]["message"] is None
    proc = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "simulate", "--no-progress", "--set",
                           "workload.num_requests=600", "--set", "workload.arrival.rate=40"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "overloaded: arrivals" in proc.stderr


def test_summary_table_scales_latency_units():
    """Millions of ms read as minutes, tens of thousands as seconds, the rest stays in ms."""
    from sim.summary_table import latency_unit

    assert latency_unit([12.5, 40.0, None])[0] == "ms"
    assert latency_unit([900.0, 25_000.0])[0] == "s"
    assert latency_unit([576_531.7, 1_305_857.0])[0] == "min"
    assert latency_unit([None, None])[0] == "ms"
    # 1,000 requests at 100 req/s: TTFT p99 of 30-50 s whichever pricer (tables or roofline)
    proc = subprocess.run([sys.executable, "-m", "kvplan.cli.main", "simulate", "--no-progress", "--set",
                           "workload.num_requests=1000", "--set", "workload.arrival.rate=100"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0
    assert "Time to first token (s)" in proc.stdout and "Time per output token (ms)" in proc.stdout
