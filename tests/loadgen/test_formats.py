"""What loadgen writes and builds, without a server: vllm bench serve's JSON (read back by
kvplan's own reader), the trace (replayed by ``workload.trace``), the prompts, /metrics parsing,
and validate --endpoint's default workload (the in-process validation's draws)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from calibration.bench_format import bench_result, summary_lines, write_bench, write_trace
from calibration.loadgen import LoadRun, RequestResult, Target
from calibration.loadgen_prompts import TOKEN_IDS, make_prompts, prompt_token_ids, tokenizer_prompt, words_prompt
from calibration.real_runs import read_run
from calibration.server_metrics import config_info, parse_prometheus, server_latency
from sim.policies.request import Request


def result(i: int, arrival: float, ttft: float, itls: list[float], n_in: int = 10, error: str = "") -> RequestResult:
    r = RequestResult(index=i, arrival_s=arrival, planned_prompt_len=n_in, max_tokens=len(itls) + 1,
                      start_s=arrival + 0.001, ttft_s=ttft, itl_s=list(itls), prompt_tokens=n_in,
                      output_tokens=len(itls) + 1, num_chunks=len(itls) + 1, text="x" * (len(itls) + 1))
    if error:
        r.error, r.num_chunks, r.output_tokens, r.itl_s = error, 0, None, []
    return r


@pytest.fixture
def run() -> LoadRun:
    results = [result(0, 0.0, 0.10, [0.02, 0.02, 0.02], n_in=10),
               result(1, 0.5, 0.20, [0.04, 0.04], n_in=20),
               result(2, 0.9, 0.0, [], n_in=30, error="HTTP 400: too long")]
    return LoadRun(target=Target("http://127.0.0.1:1/v1", "m", model_root="/models/m"), results=results,
                   duration_s=2.0, num_planned=3, prompt_kind="token-ids")


def test_bench_json_has_vllm_fields_and_definitions(run):
    doc = bench_result(run, request_rate=2.0, metadata={"max_model_len": 4096})
    for key in ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
                "max_concurrency", "duration", "completed", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput", "input_lens", "output_lens",
                "ttfts", "itls", "generated_texts", "errors"):
        assert key in doc, key
    for m in ("ttft", "tpot", "itl", "e2el"):
        for s in ("mean", "median", "std", "p99"):
            assert f"{s}_{m}_ms" in doc
    assert doc["backend"] == "openai" and doc["tokenizer_id"] == "/models/m" and doc["max_model_len"] == 4096
    assert (doc["num_prompts"], doc["completed"], doc["failed"]) == (3, 2, 1)
    assert doc["total_input_tokens"] == 30 and doc["total_output_tokens"] == 7  # failed: not counted
    assert doc["output_lens"] == [4, 3, 0] and doc["ttfts"][2] == 0.0 and doc["errors"][2].startswith("HTTP 400")
    assert doc["mean_ttft_ms"] == pytest.approx(150.0)
    assert doc["mean_itl_ms"] == pytest.approx(1000 * np.mean([0.02] * 3 + [0.04] * 2))
    # TPOT per request: (E2E - TTFT) / (n - 1); E2E here is 0 in the fixture, so set it
    run.results[0].e2el_s, run.results[1].e2el_s = 0.16, 0.28
    doc = bench_result(run, request_rate=2.0)
    assert doc["mean_tpot_ms"] == pytest.approx(1000 * np.mean([(0.16 - 0.10) / 3, (0.28 - 0.20) / 2]))
    assert doc["request_throughput"] == pytest.approx(1.0)
    json.dumps(doc, allow_nan=False)  # plain JSON
    lines = summary_lines(doc)
    assert any(line.startswith("Successful requests:") and line.split()[2] == "2" for line in lines)
    assert any(line.startswith("Mean TTFT (ms):") for line in lines)


def test_bench_json_round_trips_through_kvplans_reader(run, tmp_path):
    run.results[0].e2el_s, run.results[1].e2el_s = 0.16, 0.28
    doc = bench_result(run, request_rate=2.0, metadata={"max_model_len": 4096})
    path = write_bench(tmp_path / "bench.json", doc)
    real = read_run(path)
    assert real.format == "vllm-bench" and real.model == "m"
    m = real.measured[0]
    assert (m.sent, m.completed, m.failures) == (3, 2, 1)
    assert m.e2el_ms["mean"] == pytest.approx(doc["mean_e2el_ms"])
    assert m.ttft_ms["p99"] == pytest.approx(doc["p99_ttft_ms"])
    assert m.tpot_ms == pytest.approx(doc["mean_tpot_ms"])
    assert real.prompt_lens == [10, 20, 30] and real.output_lens[:2] == [4, 3]
    assert real.server == {"max_model_len": 4096}
    assert real.stages[0].rate == 2.0 and real.stages[0].num_requests == 3


def test_infinite_rate_is_written_as_vllm_does(run, tmp_path):
    doc = bench_result(run, request_rate=math.inf)
    assert doc["request_rate"] == "inf"
    run.results[0].e2el_s = run.results[1].e2el_s = 0.3
    assert read_run(write_bench(tmp_path / "b.json", bench_result(run, request_rate=math.inf))).stages[0].process == "burst"


def test_trace_csv_replays_as_a_kvplan_workload(run, tmp_path):
    from sim.workload import build_requests, read_trace

    path = write_trace(tmp_path / "trace.csv", run)
    trace = read_trace(path)
    assert trace.format == "length_table" and trace.timed
    assert trace.timestamps.tolist() == pytest.approx([0.0, 0.5, 0.9])
    assert trace.input_lens.tolist() == [10, 20, 30] and trace.output_lens.tolist() == [4, 3, 1]
    assert "ttft_ms" in trace.columns and trace.raw_columns["error"][2] == "HTTP 400: too long"
    reqs = build_requests({"trace": str(path)}, seed=0)
    assert [r.arrival_time for r in reqs] == pytest.approx([0.0, 0.5, 0.9])
    assert [r.prompt_len for r in reqs] == [10, 20, 30]


def test_token_id_prompts_are_exact_and_share_prefix_blocks():
    a = Request("0", 0.0, 40, 4, block_hashes=[7, 8, 100], hash_block_size=16)
    b = Request("1", 0.1, 37, 4, block_hashes=[7, 8, 200], hash_block_size=16)
    c = Request("2", 0.2, 40, 4, block_hashes=[9, 10, 300], hash_block_size=16)
    ia, ib, ic = (prompt_token_ids(r, i, seed=3) for i, r in enumerate((a, b, c)))
    assert (len(ia), len(ib), len(ic)) == (40, 37, 40)
    assert all(TOKEN_IDS[0] <= t < TOKEN_IDS[1] for t in ia + ib + ic)
    assert ia[:32] == ib[:32] and ia[32:37] != ib[32:37]  # two shared blocks, then their own
    assert ia[:16] != ic[:16]
    assert prompt_token_ids(a, 0, seed=3) == ia and prompt_token_ids(a, 0, seed=4) != ia  # seeded
    words = words_prompt(a, 0, seed=3)
    assert len(words.split()) == 40 and words.split()[:32] == words_prompt(b, 1, seed=3).split()[:32]


class CharTokenizer:
    """One token per character, except that "ab" is one token: decode-then-encode changes the
    length, as real BPE tokenizers do."""

    def decode(self, ids):
        return "".join(chr(97 + (i % 3)) for i in ids)

    def encode(self, text, add_special_tokens=False):
        out, i = [], 0
        while i < len(text):
            if text[i:i + 2] == "ab":
                out.append(1000)
                i += 2
            else:
                out.append(ord(text[i]) - 97)
                i += 1
        return out


def test_tokenizer_prompts_reach_the_asked_length():
    tok = CharTokenizer()
    for n in (5, 17, 64):
        text, got = tokenizer_prompt(Request("0", 0.0, n, 1), 0, 1, tok)
        assert got == n and len(tok.encode(text)) == n
    prompts, lens = make_prompts([Request("0", 0.0, 9, 1)], "text-tokenizer", 0, tok)
    assert lens == [9] and isinstance(prompts[0], str)


def test_prometheus_parsing_and_server_latency():
    before = ('# HELP x y\n# TYPE vllm:time_to_first_token_seconds histogram\n'
              'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1\n'
              'vllm:time_to_first_token_seconds_sum{model_name="m"} 0.5\n'
              'vllm:time_to_first_token_seconds_count{model_name="m"} 2\n'
              'vllm:e2e_request_latency_seconds_sum{model_name="m"} 3\n'
              'vllm:e2e_request_latency_seconds_count{model_name="m"} 2\n'
              'vllm:cache_config_info{block_size="16",num_gpu_blocks="7463"} 1\n')
    after = before.replace("} 0.5", "} 1.1").replace("_count{model_name=\"m\"} 2", "_count{model_name=\"m\"} 5") \
        .replace("} 3\n", "} 9\n")
    assert parse_prometheus(before)["vllm:time_to_first_token_seconds_sum"] == 0.5
    lat = server_latency(before, after)
    assert lat is not None and lat.num_requests == 3
    assert lat.mean_ttft_s == pytest.approx(0.2) and lat.mean_e2el_s == pytest.approx(2.0)
    assert config_info(before) == {"block_size": "16", "num_gpu_blocks": "7463"}
    assert server_latency(None, after) is None and server_latency("up 1\n", "up 1\n") is None


def test_validate_endpoint_default_workload_is_the_in_process_one():
    pytest.importorskip("torch")
    from calibration.validate_endpoint import validation_workload
    from runtime.bench import SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT, sharegpt_like
    from sim.workload.arrivals import poisson_arrivals

    from calibration import validate_endpoint as ve

    assert (ve.SHAREGPT_MEAN_IN, ve.SHAREGPT_MEAN_OUT) == (SHAREGPT_MEAN_IN, SHAREGPT_MEAN_OUT)
    reqs = validation_workload(40, 2.0, 0.125, seed=3)
    work = sharegpt_like(40, 0.125, vocab_size=1000, max_len=4096, seed=3)
    assert [r.prompt_len for r in reqs] == [len(p) for p in work.prompts]
    assert [r.max_output_tokens for r in reqs] == work.output_lens
    assert [r.arrival_time for r in reqs] == pytest.approx(poisson_arrivals(40, 2.0, np.random.default_rng(4)).tolist())
