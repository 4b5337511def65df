"""SGLang ``bench_serving --output-file`` JSONL read by ``kvplan validate --real``
(``calibration.sglang_bench``), on the hand-made ``data/sglang_bench.jsonl``:

- line 1: ``--backend sglang``, random dataset, 4 req/s open loop, ``--output-details`` (12 requests);
- line 2: ``request_rate`` inf (``Infinity``) with ``max_concurrency`` 4, no details: a closed
  loop whose lengths follow the random dataset's rule (its totals are those of bench_serving's
  draw with ``--seed 1``);
- line 3: sharegpt, 2 req/s capped at 8 in flight, no details: the means.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from calibration.real_runs import RealRunError, read_run
from calibration.sglang_bench import engine_of, is_sglang_bench, to_vllm_bench
from sim.catalog.engines import ENGINE_NAMES
from tests.calibration.helpers import run_kvplan
from tests.calibration.test_real_runs import _roofline, make_vllm_bench

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data" / "sglang_bench.jsonl"
#: Line 2's lengths: numpy's legacy generator seeded 1, 16 inputs in [128, 256], then 16 outputs
#: in [16, 32] (bench_serving's random dataset, --random-input-len 256 --random-output-len 32
#: --random-range-ratio 0.5).
DRAWN_IN = [165, 200, 207, 199, 153, 148, 229, 178, 196, 224, 214, 135, 191, 189, 150, 185]
DRAWN_OUT = [17, 16, 24, 29, 31, 26, 24, 23, 19, 22, 19, 20, 27, 28, 32, 29]


def _records() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def _write(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


# --- detection ----------------------------------------------------------------------------


def test_detection(tmp_path):
    assert is_sglang_bench(DATA) and read_run(DATA).format == "sglang-bench"
    # Another name: the first line decides. One line alone would pass vllm bench's own test
    # (completed, mean_ttft_ms): SGLang's keys send it here first.
    one = _write(tmp_path / "result.json", _records()[:1])
    assert is_sglang_bench(one) and read_run(one).format == "sglang-bench"
    vllm = make_vllm_bench(tmp_path / "bench.json")
    assert not is_sglang_bench(vllm) and read_run(vllm).format == "vllm-bench"
    folder = tmp_path / "runs_h100"
    folder.mkdir()
    _write(folder / "sglang_0101_1000_256_24.jsonl", _records())
    assert read_run(folder).format == "sglang-bench"  # a folder holding the one JSONL


def test_engine_from_backend(tmp_path):
    assert read_run(DATA).engine_name == "sglang"
    assert [engine_of(b) for b in ("sglang", "sglang-native", "sglang-oai", "sglang-oai-chat",
                                   "vllm", "vllm-chat", "lmdeploy", "trt")] == \
        ["sglang"] * 4 + ["vllm"] * 2 + ["lmdeploy", "trt"]
    vllm = _write(tmp_path / "vllm.jsonl", [{**r, "backend": "vllm"} for r in _records()])
    run = read_run(vllm)
    assert run.engine_name == "vllm" and run.format == "sglang-bench"
    assert not any("SGLang 0.5.4" in n for n in run.notes)  # server_info's version is SGLang's


# --- field mapping ------------------------------------------------------------------------


def test_field_mapping_to_vllm_names():
    rec = _records()[0]
    doc = to_vllm_bench(rec, "runs.jsonl:1", [])
    # Each number as written on line 1 of the fixture, under vllm bench serve's name.
    expected = {
        "mean_e2el_ms": 239.0, "median_e2el_ms": 241.5, "std_e2el_ms": 48.27, "p99_e2el_ms": 309.56,
        "mean_ttft_ms": 31.0, "median_ttft_ms": 30.5, "std_ttft_ms": 2.04, "p99_ttft_ms": 34.89,
        "mean_tpot_ms": 12.0, "median_tpot_ms": 12.0, "p99_tpot_ms": 12.0,
        "mean_itl_ms": 12.0, "p95_itl_ms": 12.0, "p99_itl_ms": 12.0,
        "request_throughput": 3.6923, "input_throughput": 715.69, "output_throughput": 67.69,
        "total_token_throughput": 783.38, "duration": 3.25, "completed": 12, "failed": 0,
        "num_prompts": 12, "total_input_tokens": 2326, "total_output_tokens": 220,
        "request_rate": 4.0, "max_concurrency": None, "model_id": "meta-llama/Llama-2-7b-hf",
        "tensor_parallel_size": 1, "max_model_len": 4096, "max_num_seqs": 128,
        "max_num_batched_tokens": 8192,
    }
    assert {k: doc.get(k, "absent") for k in expected} == expected
    assert "mean_e2e_latency_ms" not in doc and "dtype" not in doc  # server_info dtype "auto"
    assert to_vllm_bench({**rec, "p90_ttft_ms": 33.0, "p90_e2e_latency_ms": 290.0}, "x:1", [])["p90_e2el_ms"] == 290.0

    run = read_run(DATA)
    m = run.measured[0]
    assert (m.index, m.sent, m.completed, m.failures) == (0, 12, 12, 0)
    assert m.e2el_ms == {"mean": 239.0, "p90": None, "p99": 309.56}
    assert m.ttft_ms == {"mean": 31.0, "p90": None, "p99": 34.89}
    assert m.tpot_ms == 12.0 and m.request_throughput == 3.6923
    assert [x.e2el_ms["mean"] for x in run.measured] == [239.0, 340.62, 801.0]
    assert run.model == "meta-llama/Llama-2-7b-hf"
    assert run.server == {"tensor_parallel_size": 1, "max_model_len": 4096, "max_num_seqs": 128,
                          "max_num_batched_tokens": 8192}


# --- load mode ----------------------------------------------------------------------------


def test_open_and_closed_loop_stages(tmp_path):
    st = read_run(DATA).stages
    assert [(s.process, s.num_requests, s.concurrency) for s in st] == [
        ("poisson", 12, None), ("closed", 16, 4), ("poisson", 10, 8)]
    assert st[0].rate == 4.0 and st[0].cv == 1.0 and st[2].rate == 2.0
    assert st[1].rate == pytest.approx(16 / 1.9) and st[1].duration_s == 1.9  # as measured
    line2 = _records()[1]
    for rate in (float("inf"), "inf"):  # no cap: everything at once
        burst = read_run(_write(tmp_path / "b.jsonl", [{**line2, "request_rate": rate, "max_concurrency": None}]))
        assert burst.stages[0].process == "burst" and burst.stages[0].num_requests == 16


# --- lengths ------------------------------------------------------------------------------


def test_lengths_details_then_random_rule_then_means(tmp_path):
    run = read_run(DATA)
    line1 = _records()[0]
    assert run.prompt_lens[:12] == line1["input_lens"] and run.output_lens[:12] == line1["output_lens"]
    assert run.prompt_lens[12:28] == DRAWN_IN and run.output_lens[12:28] == DRAWN_OUT
    assert sum(DRAWN_IN) == _records()[1]["total_input_tokens"]  # the run's own lengths back
    assert run.prompt_lens[28:] == [340] * 10 and run.output_lens[28:] == [64] * 10  # 3400 / 10, 640 / 10
    assert any("random dataset's rule, uniform in [128, 256] in and [16, 32] out" in n for n in run.notes)
    # A failed request (output 0 in --output-details) is replayed with the mean output and counted.
    failed = dict(line1, completed=11, output_lens=[0 if i == 3 else v for i, v in enumerate(line1["output_lens"])],
                  errors=["" if i != 3 else "timeout" for i in range(12)])
    run = read_run(_write(tmp_path / "f.jsonl", [failed]))
    m = run.measured[0]
    assert (m.sent, m.completed, m.failures) == (12, 11, 1)
    assert run.output_lens[3] == round((220 - 16) / 11)


# --- malformed input: one line naming file:line ---------------------------------------------


def _broken(kind: str) -> list:
    recs: list = _records()
    if kind == "not_json":
        recs[2] = '{"backend": "sglang", '
    elif kind == "missing":
        del recs[1]["request_rate"]
    elif kind == "not_object":
        recs[1] = "[1, 2]"
    elif kind == "lists":
        recs[0]["input_lens"] = recs[0]["input_lens"][:5]
    elif kind == "trace":
        recs[0]["request_rate"] = "trace"
    elif kind == "negative":
        recs[1]["request_rate"] = -1
    elif kind == "two_engines":
        recs[2]["backend"] = "vllm"
    return recs


@pytest.mark.parametrize("kind,needle", [
    ("not_json", "runs.jsonl:3: not JSON"),
    ("missing", "runs.jsonl:2: missing field request_rate"),
    ("not_object", "runs.jsonl:2: not a JSON object"),
    ("lists", "runs.jsonl:1: input_lens, output_lens"),
    ("trace", "runs.jsonl:1: request_rate 'trace'"),
    ("negative", "runs.jsonl:2: request_rate: expected a positive"),
    ("two_engines", "runs.jsonl:3: backend vllm, but line 1 measured sglang"),
])
def test_malformed_lines_are_one_line_errors(tmp_path, capsys, kind, needle):
    path = _write(tmp_path / "runs.jsonl", _broken(kind))
    with pytest.raises(RealRunError, match=needle.replace(".", r"\.").replace("[", r"\[")):
        read_run(path)
    code, _, err = run_kvplan(["validate", "--real", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


# --- the engine the scenario gets -----------------------------------------------------------


def _scenario_engine(monkeypatch, run) -> tuple[dict, list]:
    """What ``validate_real.build_config`` asks of the scenario (before the scenario checks it)."""
    import sim.config as config_mod
    from calibration.validate_real import build_config

    monkeypatch.setattr(config_mod, "build_config", lambda cfg, extra: cfg)
    cfg, notes = build_config(run, hardware="h100-sxm")
    return cfg.get("engine", {}), notes


@pytest.mark.skipif("sglang" not in ENGINE_NAMES, reason="engine.name sglang is not in sim/catalog/engines.py yet")
def test_sglang_backend_asks_for_the_sglang_engine(monkeypatch, tmp_path):
    engine, _ = _scenario_engine(monkeypatch, read_run(DATA))
    assert engine == {"name": "sglang"}
    vllm = read_run(_write(tmp_path / "v.jsonl", [{**r, "backend": "vllm"} for r in _records()]))
    assert _scenario_engine(monkeypatch, vllm)[0].get("name", "vllm") == "vllm"


@pytest.mark.skipif("sglang" in ENGINE_NAMES, reason="engine.name sglang is modelled")
def test_without_the_sglang_engine_the_run_is_priced_as_vllm(monkeypatch):
    engine, notes = _scenario_engine(monkeypatch, read_run(DATA))
    assert engine.get("name", "vllm") == "vllm"
    assert any("served by sglang, which this kvplan does not model: priced as vLLM" in n for n in notes)


# --- end to end ---------------------------------------------------------------------------


def _sglang_engine_builds() -> bool:
    """Whether a scenario with ``engine.name: sglang`` builds here (the name can be in
    ``ENGINE_NAMES`` before all its parts are: its radix allocator landed separately)."""
    from sim.config import build_config
    from sim.errors import ConfigError

    try:
        build_config(None, ["engine.name=sglang"])
        return True
    except ConfigError:
        return False


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif("sglang" in ENGINE_NAMES and not _sglang_engine_builds(),
                    reason="engine.name sglang is named but its scenario does not build in this tree yet")
def test_cli_validate_real_on_the_fixture(tmp_path):
    out = tmp_path / "out"
    proc = _cli("validate", "--real", str(DATA), "--hardware", "h100-sxm", "--out", str(out), *_roofline())
    assert proc.returncode == 0, proc.stderr + proc.stdout
    for row in ("stage0_mean_ttft_ms", "stage1_mean_e2el_ms", "stage2_request_throughput"):
        assert row in proc.stdout
    assert "replayed as a closed loop of 4 clients" in proc.stdout
    doc = json.loads((out / "validation.json").read_text())
    assert doc["source"]["format"] == "sglang-bench" and len(doc["source"]["stages"]) == 3
    assert [s["concurrency"] for s in doc["source"]["stages"]] == [None, 4, 8]


def test_cli_fixture_priced_as_vllm(tmp_path):
    """``--set engine.name=vllm`` prices the SGLang run as a vLLM server would serve it."""
    out = tmp_path / "out"
    proc = _cli("validate", "--real", str(DATA), "--hardware", "h100-sxm", "--out", str(out),
                "--set", "engine.name=vllm", *_roofline())
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "stage0_mean_e2el_ms" in proc.stdout and "stage2_mean_tpot_ms" in proc.stdout
    assert json.loads((out / "validation.json").read_text())["source"]["format"] == "sglang-bench"


def test_vllm_backend_lines_validate_in_process(tmp_path, capsys):
    path = _write(tmp_path / "vllm.jsonl", [{**r, "backend": "vllm"} for r in _records()])
    code, stdout, err = run_kvplan(["validate", "--real", str(path), "--hardware", "h100-sxm",
                                    "--out", str(tmp_path / "o"), *_roofline()], capsys)
    assert code == 0, err
    assert "stage2_mean_e2el_ms" in stdout and "priced as vLLM" not in stdout


def test_server_info_stream_interval_reaches_the_engine(monkeypatch, tmp_path):
    """``server_info.stream_interval`` (``--stream-interval``) becomes ``engine.stream_interval``
    next to the engine's name; a server that streamed every token sets nothing."""
    recs = [{**r, "server_info": {**r.get("server_info", {}), "stream_interval": 10}} for r in _records()]
    run = read_run(_write(tmp_path / "s.jsonl", recs))
    assert run.server["stream_interval"] == 10
    engine, _ = _scenario_engine(monkeypatch, run)
    assert engine["stream_interval"] == 10 and engine["name"] == "sglang"
    assert "stream_interval" not in _scenario_engine(monkeypatch, read_run(DATA))[0]
