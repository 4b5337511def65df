"""Workload generation: distributions match their parameters, real traces parse with their
published statistics, bad input is reported by key or by file:line, and seeds reproduce."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError, TraceFormatError
from sim.workload import build_requests, describe, read_trace, sharegpt_like
from sim.workload.arrivals import (
    constant_arrivals,
    gamma_arrivals,
    poisson_arrivals,
    trace_arrivals,
)
from sim.workload.lengths import Fixed, Lognormal, Table, Uniform
from sim.workload.prefix import resize_hashes

N = 20_000
TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
AZURE = TRACES / "AzureLLMInferenceTrace_conv_2023.csv"
MOONCAKE = TRACES / "mooncake_synthetic_trace.jsonl"
SHAREGPT = TRACES / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
ARXIV = TRACES / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"


def needs(path: Path):
    return pytest.mark.skipif(not path.exists(), reason=f"{path.name} not in ../shared/traces")


def cv_of(x: np.ndarray) -> float:
    return float(np.std(x) / np.mean(x))


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def signature(requests) -> list[tuple]:
    return [
        (
            r.request_id,
            r.arrival_time,
            r.prompt_len,
            r.max_output_tokens,
            r.block_hashes,
            r.priority,
        )
        for r in requests
    ]


def synthetic(**over) -> dict:
    workload = {
        "num_requests": 200,
        "arrival": {"process": "poisson", "rate": 4.0},
        "input_len": {"dist": "lognormal", "mean": 100, "cv": 1.0},
        "output_len": {"dist": "lognormal", "mean": 50, "cv": 0.5},
    }
    workload.update(over)
    return workload


# --- arrivals ---------------------------------------------------------------------------------


def test_poisson_gaps_have_mean_one_over_rate_and_cv_one():
    times = poisson_arrivals(N, 5.0, rng())
    gaps = np.diff(times)
    assert times[0] == 0.0 and np.all(gaps >= 0)
    assert np.mean(gaps) == pytest.approx(0.2, rel=0.03)
    assert cv_of(gaps) == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("cv", [0.25, 0.5, 2.0, 3.0])
def test_gamma_gaps_match_requested_cv(cv):
    gaps = np.diff(gamma_arrivals(N, 2.0, cv, rng(1)))
    assert np.mean(gaps) == pytest.approx(0.5, rel=0.05)
    assert cv_of(gaps) == pytest.approx(cv, rel=0.05)


def test_gamma_with_cv_one_is_exactly_poisson():
    assert np.array_equal(gamma_arrivals(500, 3.0, 1.0, rng(7)), poisson_arrivals(500, 3.0, rng(7)))


def test_constant_and_infinite_rate():
    assert np.allclose(constant_arrivals(5, 4.0), [0, 0.25, 0.5, 0.75, 1.0])
    assert np.array_equal(poisson_arrivals(4, math.inf, rng()), np.zeros(4))
    assert np.array_equal(gamma_arrivals(3, 1.0, 0.0, rng()), [0.0, 1.0, 2.0])
    assert len(poisson_arrivals(0, 1.0, rng())) == 0


def test_trace_arrivals_rebase_scale_and_rescale():
    stamps = np.array([10.0, 11.0, 13.0, 20.0])
    assert np.array_equal(trace_arrivals(stamps), [0, 1, 3, 10])
    assert np.array_equal(trace_arrivals(stamps, time_scale=0.5), [0, 0.5, 1.5, 5])
    rescaled = trace_arrivals(stamps, rate=3.0)
    assert (len(rescaled) - 1) / rescaled[-1] == pytest.approx(3.0)
    assert np.allclose(rescaled / rescaled[-1], [0, 0.1, 0.3, 1.0])  # same shape
    with pytest.raises(ValueError):
        trace_arrivals(np.array([1.0, 1.0]), rate=2.0)


# --- lengths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mean,cv", [(161, 0.9), (338, 0.6), (2000, 1.5), (50, 0.3)])
def test_lognormal_matches_mean_and_cv(mean, cv):
    x = Lognormal(mean=mean, cv=cv).sample(N, rng(2))
    assert x.dtype == np.int64 and x.min() >= 1
    assert x.mean() == pytest.approx(mean, rel=0.04)
    assert cv_of(x) == pytest.approx(cv, rel=0.08)


def test_lognormal_parameters_are_exact():
    d = Lognormal(mean=161, cv=0.9)
    assert d.sigma**2 == pytest.approx(math.log(1 + 0.81))
    assert d.mu == pytest.approx(math.log(161) - d.sigma**2 / 2)
    assert math.exp(d.mu + d.sigma**2 / 2) == pytest.approx(161)  # analytic mean


def test_uniform_fixed_and_clipping():
    u = Uniform(low=10, high=20, min=10, max=20).sample(N, rng(3))
    assert u.min() == 10 and u.max() == 20  # both ends inclusive
    assert u.mean() == pytest.approx(15, rel=0.01)
    assert np.all(Fixed(value=7).sample(5, rng()) == 7)
    clipped = Lognormal(mean=100, cv=2.0, min=20, max=300).sample(N, rng(4))
    assert clipped.min() == 20 and clipped.max() == 300
    assert np.all(Lognormal(mean=1, cv=3.0).sample(N, rng()) >= 1)


def test_table_resamples_its_values():
    values = np.array([5, 50, 500])
    x = Table(values=values).sample(N, rng(5))
    assert set(np.unique(x)) == {5, 50, 500}
    assert x.mean() == pytest.approx(values.mean(), rel=0.05)


# --- real traces ------------------------------------------------------------------------------

# (path, format, rows, (input mean, median, p99), (output mean, median, p99)) from traces/README.md
REAL = [
    (AZURE, "azure", 19_366, (1155, 1020, 4142), (211, 129, 601)),
    (MOONCAKE, "mooncake", 3_993, (15326, 11587, 66456), (149, 69, 768)),
    (SHAREGPT, "length_table", 30_731, (2340, 1730, 7434), (439, 415, 998)),
    (ARXIV, "length_table", 28_257, (2588, 2730, 3933), (291, 167, 3271)),
]


@pytest.mark.parametrize("path,fmt,rows,inp,out", REAL, ids=lambda v: getattr(v, "name", None))
def test_real_trace_parses_with_published_statistics(path, fmt, rows, inp, out):
    if not path.exists():
        pytest.skip(f"{path.name} not in ../shared/traces")
    trace = read_trace(path)
    assert trace.format == fmt and len(trace) == rows
    for lengths, (mean, median, p99) in ((trace.input_lens, inp), (trace.output_lens, out)):
        assert lengths.min() >= 1
        assert lengths.mean() == pytest.approx(mean, abs=1)
        assert np.median(lengths) == pytest.approx(median, abs=1)
        assert np.percentile(lengths, 99) == pytest.approx(p99, abs=1)


@needs(AZURE)
def test_azure_timing_is_58_minutes_at_5_5_per_second():
    requests = build_requests({"trace": str(AZURE)}, seed=0)
    summary = describe(requests)
    assert summary["count"] == 19_366
    assert summary["duration_s"] / 60 == pytest.approx(58, abs=1)
    assert summary["request_rate"] == pytest.approx(5.5, abs=0.05)
    assert requests[0].arrival_time == 0.0 and requests[0].block_hashes is None


@needs(MOONCAKE)
def test_mooncake_hash_ids_give_the_published_prefix_reuse():
    requests = build_requests({"trace": str(MOONCAKE)}, seed=0)
    assert describe(requests)["prefix_reuse_fraction"] == pytest.approx(0.640, abs=0.0005)
    assert describe(requests)["duration_s"] / 60 == pytest.approx(17, abs=0.5)
    assert all(len(r.block_hashes) == -(-r.prompt_len // 512) for r in requests)
    assert requests[0].hash_block_size == 512


@needs(AZURE)
def test_trace_rescaled_to_a_target_rate_keeps_its_lengths():
    own = build_requests({"trace": str(AZURE), "num_requests": 1000}, seed=0)
    fast = build_requests(
        {"trace": str(AZURE), "num_requests": 1000, "arrival": {"rate": 20}}, seed=0
    )
    assert describe(fast)["request_rate"] == pytest.approx(20)
    assert [r.prompt_len for r in own] == [r.prompt_len for r in fast]
    ratio = own[-1].arrival_time / fast[-1].arrival_time
    assert [r.arrival_time for r in own] == pytest.approx([r.arrival_time * ratio for r in fast])


@needs(SHAREGPT)
def test_length_table_as_trace_takes_rows_in_order_with_synthetic_times():
    trace = read_trace(SHAREGPT)
    requests = build_requests(
        {
            "trace": str(SHAREGPT),
            "num_requests": 100,
            "arrival": {"process": "gamma", "rate": 5, "cv": 2},
        },
        seed=0,
    )
    assert [r.prompt_len for r in requests] == trace.input_lens[:100].tolist()
    assert [r.max_output_tokens for r in requests] == trace.output_lens[:100].tolist()


# --- bad rows: file:line ----------------------------------------------------------------------

AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZ_OK = "2023-11-16 18:15:46.6805900,374,44\n"
TABLE_HEAD = "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"


def mc(**record) -> str:
    base = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
    base.update(record)
    return json.dumps({k: v for k, v in base.items() if v is not None}) + "\n"


BAD = [
    ("a.csv", AZ_HEAD + AZ_OK + "2023-11-16 18:15:47.1,12\n", 3, "expected 3 columns"),
    (
        "a.csv",
        AZ_HEAD + AZ_OK + "2023-11-16 18:15:47.1,twelve,4\n",
        3,
        "ContextTokens is 'twelve', not an integer",
    ),
    ("a.csv", AZ_HEAD + AZ_OK + AZ_OK + "2023-11-16 18:15:47.1,-3,4\n", 4, "ContextTokens is -3"),
    ("a.csv", AZ_HEAD + AZ_OK + "2023-11-16 18:15:47.1,0,4\n", 3, "ContextTokens is 0"),
    ("a.csv", AZ_HEAD + AZ_OK + "2023-11-16 18:15:47.1,10,0\n", 3, "GeneratedTokens is 0"),
    (
        "a.csv",
        AZ_HEAD + AZ_OK + "2023-11-16 18:15:40.0,10,3\n",
        3,
        "timestamps must not go backwards",
    ),
    ("a.csv", AZ_HEAD + AZ_OK + "yesterday,10,3\n", 3, "TIMESTAMP is 'yesterday'"),
    ("a.csv", AZ_HEAD + AZ_OK + "\n" + "2023-11-16 18:15:47.1,1.5,4\n", 4, "not an integer"),
    ("t.csv", TABLE_HEAD + "10,20,30,0.5\n" + "10,,30,0.5\n", 3, "num_decode_tokens is ''"),
    ("m.jsonl", mc() + '{"timestamp": 5, "input_length": 3\n', 2, "malformed JSON"),
    ("m.jsonl", mc() + mc(timestamp=9) + mc(output_length=None), 3, "missing key(s) output_length"),
    ("m.jsonl", mc(timestamp=9) + mc(timestamp=3), 2, "timestamps must not go backwards"),
    ("m.jsonl", mc() + mc(input_length=2000), 2, "2 hash_ids for input_length 2000; expected 4"),
    ("m.jsonl", mc() + "[1, 2]\n", 2, "expected a JSON object"),
    ("m.jsonl", mc() + mc(output_length="5"), 2, "output_length is '5', not an integer"),
    ("m.jsonl", mc() + mc(hash_ids=None), 2, "missing key hash_ids"),
    ("x.csv", "a,b,c\n1,2,3\n", 1, "unrecognised header"),
    ("e.csv", "\n\n", 1, "empty file"),
]


@pytest.mark.parametrize("name,text,line,what", BAD)
def test_bad_row_names_file_and_line(tmp_path, name, text, line, what):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert what in message and "\n" not in message


def test_bad_row_through_build_requests(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(AZ_HEAD + AZ_OK * 3 + "2023-11-16 18:15:47.1,x,4\n")
    with pytest.raises(TraceFormatError, match=r"a\.csv:5: ContextTokens"):
        build_requests({"trace": str(path)}, seed=0)


def test_zero_output_can_be_clamped_to_one(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text(AZ_HEAD + AZ_OK + "2023-11-16 18:15:47.1,10,0\n")
    requests = build_requests({"trace": str(path), "zero_output": "clamp"}, seed=0)
    assert [r.max_output_tokens for r in requests] == [44, 1]
    assert requests[1].arrival_time == pytest.approx(47.1 - 46.68059)


def test_format_is_detected_from_content_and_numeric_timestamps(tmp_path):
    path = tmp_path / "trace.txt"
    path.write_text(AZ_HEAD + "100.5,10,2\n102.0,20,3\n")
    trace = read_trace(path)
    assert trace.format == "azure" and trace.timestamps.tolist() == [0.0, 1.5]
    timed_table = tmp_path / "vidur.csv"
    timed_table.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,6\n0.25,7,8\n")
    assert read_trace(timed_table).timestamps.tolist() == [0.0, 0.25]
    zoned = tmp_path / "zoned.csv"
    zoned.write_text(AZ_HEAD + "2024-05-10 00:00:00.5+00:00,1,1\n2024-05-10 02:00:01Z,1,1\n")
    assert read_trace(zoned).timestamps.tolist() == [0.0, 7200.5]


def test_edited_trace_is_reread(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TABLE_HEAD + "10,20,30,0.5\n")
    assert len(read_trace(path)) == 1
    path.write_text(TABLE_HEAD + "10,20,30,0.5\n11,21,32,0.5\n")
    assert len(read_trace(path)) == 2


# --- build_requests ---------------------------------------------------------------------------


def test_requests_sorted_with_sequential_ids_and_deterministic():
    a = build_requests(synthetic(), seed=11)
    assert [r.request_id for r in a] == [str(i) for i in range(200)]
    assert all(x.arrival_time <= y.arrival_time for x, y in zip(a, a[1:]))
    assert signature(a) == signature(build_requests(synthetic(), seed=11))
    assert signature(a) != signature(build_requests(synthetic(), seed=12))


def test_common_random_numbers_across_rates_and_distributions():
    base = build_requests(synthetic(), seed=5)
    faster = build_requests(synthetic(arrival={"process": "poisson", "rate": 8.0}), seed=5)
    assert [r.prompt_len for r in base] == [r.prompt_len for r in faster]
    assert [r.max_output_tokens for r in base] == [r.max_output_tokens for r in faster]
    assert [r.arrival_time for r in base] == pytest.approx([2 * r.arrival_time for r in faster])
    other_out = build_requests(synthetic(output_len={"dist": "fixed", "mean": 9}), seed=5)
    assert [r.prompt_len for r in base] == [r.prompt_len for r in other_out]
    assert [r.arrival_time for r in base] == [r.arrival_time for r in other_out]


def test_more_requests_extend_the_same_sequence():
    short = build_requests(synthetic(num_requests=50), seed=3)
    long = build_requests(synthetic(num_requests=80), seed=3)
    assert signature(short) == signature(long)[:50]


def test_sharegpt_like_preset_means():
    requests = build_requests(sharegpt_like(num_requests=N, rate=10.0), seed=0)
    summary = describe(requests)
    assert summary["input_len"]["mean"] == pytest.approx(161, rel=0.02)
    assert summary["output_len"]["mean"] == pytest.approx(338, rel=0.02)
    assert summary["input_len"]["max"] <= 1024 and summary["output_len"]["max"] <= 1024
    assert summary["request_rate"] == pytest.approx(10.0, rel=0.03)


def test_table_dist_samples_rows_jointly(tmp_path):
    path = tmp_path / "t.csv"
    rows = [(10, 1), (20, 2), (30, 3), (40, 4)]
    path.write_text(TABLE_HEAD + "".join(f"{a},{b},{a + b},0\n" for a, b in rows))
    table = {"dist": "table", "path": str(path)}
    requests = build_requests(
        synthetic(num_requests=500, input_len=table, output_len=table), seed=0
    )
    assert {(r.prompt_len, r.max_output_tokens) for r in requests} == set(rows)
    total = build_requests(synthetic(input_len={**table, "column": "num_total_tokens"}), seed=0)
    assert {r.prompt_len for r in total} <= {11, 22, 33, 44}


def test_table_column_that_is_not_a_length_names_its_line(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(TABLE_HEAD + "10,20,30,1\n10,20,30,0.5\n")
    table = {"dist": "table", "path": str(path), "column": "pd_ratio"}
    with pytest.raises(TraceFormatError, match=rf"^{path}:3: pd_ratio is '0.5', not an integer$"):
        build_requests(synthetic(input_len=table), seed=0)


@needs(SHAREGPT)
def test_table_dist_from_the_sharegpt_file():
    table = {"dist": "table", "path": str(SHAREGPT)}
    requests = build_requests(synthetic(num_requests=N, input_len=table, output_len=table), seed=0)
    assert describe(requests)["input_len"]["mean"] == pytest.approx(2340, rel=0.03)
    assert describe(requests)["output_len"]["mean"] == pytest.approx(439, rel=0.03)


def test_synthetic_shared_prefix_block_hashes():
    prefix = {"num_prefixes": 3, "length": 100, "hash_block_size": 16}
    requests = build_requests(synthetic(num_requests=300, prefix=prefix), seed=2)
    plain = build_requests(synthetic(num_requests=300), seed=2)
    full = 100 // 16
    heads = {}
    tails: list[int] = []
    for r, p in zip(requests, plain):
        assert r.prompt_len == p.prompt_len + 100 and r.hash_block_size == 16
        assert len(r.block_hashes) == -(-r.prompt_len // 16)
        heads.setdefault(tuple(r.block_hashes[:full]), 0)
        heads[tuple(r.block_hashes[:full])] += 1
        tails.extend(r.block_hashes[full:])
    assert len(heads) == 3  # three system prompts, each shared by many requests
    assert len(tails) == len(set(tails))  # the rest never matches anything
    assert not set(tails) & {h for head in heads for h in head}


def test_clipping_a_mooncake_style_trace_resizes_its_hashes(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        mc(input_length=1500, hash_ids=[1, 2, 3]) + mc(timestamp=5, input_length=10, hash_ids=[9])
    )
    requests = build_requests({"trace": str(path), "input_len": {"min": 600, "max": 1000}}, seed=0)
    assert [r.prompt_len for r in requests] == [1000, 600]
    assert requests[0].block_hashes == [1, 2]
    assert requests[1].block_hashes == [9, 10]  # a fresh id for the added block
    assert requests[1].arrival_time == pytest.approx(0.005)
    assert resize_hashes([[4]], np.array([1]), 512) == [[4]]


def test_priority_sampling():
    requests = build_requests(
        synthetic(num_requests=4000, priority={"levels": 3, "weights": [1, 0, 3]}), seed=0
    )
    counts = np.bincount([r.priority for r in requests], minlength=3)
    assert counts[1] == 0 and counts[2] / counts[0] == pytest.approx(3, rel=0.15)
    assert {r.priority for r in build_requests(synthetic(), seed=0)} == {0}


# --- config errors ----------------------------------------------------------------------------

ERRORS = [
    (
        synthetic(arrival={"process": "poison", "rate": 1}),
        "workload.arrival.process: 'poison' is not one of poisson, gamma, constant, trace",
    ),
    (
        synthetic(arival={"rate": 1}),
        "workload.arival: unknown key (allowed: num_requests, arrival,",
    ),
    (synthetic(arrival={"process": "poisson", "rat": 1}), "workload.arrival.rat: unknown key"),
    (
        synthetic(arrival={"process": "poisson"}),
        "workload.arrival.rate: required for process poisson",
    ),
    (
        synthetic(arrival={"process": "poisson", "rate": -2}),
        "workload.arrival.rate: -2 must be > 0",
    ),
    (
        synthetic(arrival={"process": "poisson", "rate": "fast"}),
        "workload.arrival.rate: 'fast' is not a number",
    ),
    (
        synthetic(arrival={"process": "gamma", "rate": 1}),
        "workload.arrival.cv: required for process gamma",
    ),
    (
        synthetic(arrival={"process": "trace"}),
        "workload.arrival.process: 'trace' needs workload.trace",
    ),
    (
        synthetic(arrival={"process": "poisson", "rate": 1, "time_scale": 2}),
        "workload.arrival.time_scale: only",
    ),
    (
        synthetic(input_len={"dist": "normal", "mean": 3}),
        "workload.input_len.dist: 'normal' is not one of fixed, uniform, lognormal, table",
    ),
    (
        synthetic(input_len={"dist": "lognormal", "mean": 3}),
        "workload.input_len.cv: required for dist lognormal",
    ),
    (
        synthetic(output_len={"dist": "lognormal", "mean": 3, "cv": 1, "min": 0}),
        "workload.output_len.min: 0 must be >= 1",
    ),
    (
        synthetic(output_len={"dist": "uniform", "min": 5, "max": 2}),
        "workload.output_len.max: 2 must be >= 5",
    ),
    (
        synthetic(output_len={"dist": "uniform", "min": 5}),
        "workload.output_len.max: required for dist uniform",
    ),
    (
        synthetic(output_len={"mean": 5}),
        "workload.output_len.dist: required when workload.output_len sets mean",
    ),
    (synthetic(output_len={"dist": "table"}), "workload.output_len.path: required for dist table"),
    (
        synthetic(output_len={"dist": "table", "path": "/nonexistent/x.csv"}),
        "workload.output_len.path: no such file",
    ),
    (
        synthetic(output_len=None),
        "workload.output_len.dist: required when no workload.trace is given",
    ),
    (
        synthetic(num_requests=None),
        "workload.num_requests: required when no workload.trace is given",
    ),
    (synthetic(num_requests=2.5), "workload.num_requests: 2.5 is not an integer"),
    (synthetic(num_requests=True), "workload.num_requests: True is not an integer"),
    (synthetic(trace="/nonexistent/t.csv"), "workload.trace: no such file"),
    (synthetic(zero_output="drop"), "workload.zero_output: 'drop' is not one of error, clamp"),
    (synthetic(prefix={"num_prefixes": 2}), "workload.prefix.length: required"),
    (
        synthetic(priority={"levels": 2, "weights": [1]}),
        "workload.priority.weights: expected a list of 2",
    ),
    (synthetic(arrival=[1, 2]), "workload.arrival: expected a mapping"),
]


@pytest.mark.parametrize("workload,message", ERRORS)
def test_config_errors_name_the_dotted_key(workload, message):
    with pytest.raises(ConfigError) as err:
        build_requests(workload, seed=0)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("seed", [-1, 1.5, "1", None])
def test_bad_seed(seed):
    with pytest.raises(ConfigError, match="seed: "):
        build_requests(synthetic(), seed=seed)


def test_trace_conflicts(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(mc() + mc(timestamp=1))
    with pytest.raises(
        ConfigError, match="workload.input_len.dist: workload.trace already gives the lengths"
    ):
        build_requests({"trace": str(path), "input_len": {"dist": "fixed", "mean": 4}}, seed=0)
    with pytest.raises(ConfigError, match="workload.num_requests: 3 is more than the 2 rows"):
        build_requests({"trace": str(path), "num_requests": 3}, seed=0)
    with pytest.raises(ConfigError, match="workload.prefix: .* already carries prefix hash_ids"):
        build_requests({"trace": str(path), "prefix": {"num_prefixes": 1, "length": 8}}, seed=0)
    with pytest.raises(ConfigError, match="workload.arrival.rate: cannot rescale"):
        build_requests({"trace": str(_same_time(tmp_path)), "arrival": {"rate": 1}}, seed=0)
    table = tmp_path / "t.csv"
    table.write_text(TABLE_HEAD + "10,20,30,0.5\n")
    with pytest.raises(
        ConfigError,
        match="'trace' needs workload.trace to be a timed trace .* untimed length table",
    ):
        build_requests({"trace": str(table), "arrival": {"process": "trace"}}, seed=0)
    with pytest.raises(ConfigError, match="workload.arrival.rate: required for process poisson"):
        build_requests({"trace": str(table)}, seed=0)
    with pytest.raises(ConfigError, match="workload.input_len.column: 'nope' is not a column of"):
        build_requests(
            synthetic(input_len={"dist": "table", "path": str(table), "column": "nope"}), seed=0
        )


def _same_time(tmp_path: Path) -> Path:
    path = tmp_path / "same.jsonl"
    path.write_text(mc() + mc())
    return path


def test_relative_paths_use_base_dir(tmp_path):
    (tmp_path / "t.csv").write_text(TABLE_HEAD + "10,20,30,0.5\n")
    requests = build_requests({"trace": "t.csv", "arrival": {"rate": 1}}, seed=0, base_dir=tmp_path)
    assert (requests[0].prompt_len, requests[0].max_output_tokens) == (10, 20)


# --- properties -------------------------------------------------------------------------------

lengths = st.one_of(
    st.builds(lambda m: {"dist": "fixed", "mean": m}, st.integers(1, 5000)),
    st.builds(
        lambda a, b: {"dist": "uniform", "min": min(a, b), "max": max(a, b)},
        st.integers(1, 3000),
        st.integers(1, 3000),
    ),
    st.builds(
        lambda m, cv, hi: {"dist": "lognormal", "mean": m, "cv": cv, **({"max": hi} if hi else {})},
        st.floats(0.5, 1e4),
        st.floats(0, 4),
        st.one_of(st.none(), st.integers(1, 4000)),
    ),
)
processes = st.one_of(
    st.builds(lambda r: {"process": "poisson", "rate": r}, st.floats(0.01, 1e4)),
    st.builds(
        lambda r, cv: {"process": "gamma", "rate": r, "cv": cv},
        st.floats(0.01, 1e4),
        st.floats(0, 5),
    ),
    st.builds(lambda r: {"process": "constant", "rate": r}, st.floats(0.01, 1e4)),
    st.just({"process": "poisson", "rate": math.inf}),
)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 60),
    arrival=processes,
    inp=lengths,
    out=lengths,
    seed=st.integers(0, 2**32),
    prefix=st.one_of(
        st.none(), st.builds(dict, num_prefixes=st.integers(1, 4), length=st.integers(1, 300))
    ),
)
def test_any_valid_workload_gives_sane_requests(n, arrival, inp, out, seed, prefix):
    workload = {
        "num_requests": n,
        "arrival": arrival,
        "input_len": inp,
        "output_len": out,
        "prefix": prefix,
    }
    requests = build_requests(workload, seed)
    assert len(requests) == n and [r.request_id for r in requests] == [str(i) for i in range(n)]
    times = [r.arrival_time for r in requests]
    assert times[0] == 0.0 and times == sorted(times) and all(math.isfinite(t) for t in times)
    for r in requests:
        assert r.prompt_len >= 1 and r.max_output_tokens >= 1
        if "max" in inp and prefix is None:
            assert r.prompt_len <= inp["max"]
        if prefix is not None:
            assert r.prompt_len > prefix["length"]
            assert len(r.block_hashes) == -(-r.prompt_len // r.hash_block_size)
    assert signature(requests) == signature(build_requests(workload, seed))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(1, 10**5), st.integers(0, 5000)),
        min_size=1,
        max_size=40,
    ),
    bad=st.data(),
)
def test_csv_roundtrip_and_bad_line_numbers(tmp_path_factory, rows, bad):
    path = tmp_path_factory.mktemp("p") / "a.csv"
    stamps = np.cumsum([g for _, _, g in rows]) / 1000
    lines = [f"{t:.3f},{a},{b}\n" for t, (a, b, _) in zip(stamps, rows)]
    path.write_text(AZ_HEAD + "".join(lines))
    trace = read_trace(path)
    assert trace.input_lens.tolist() == [a for a, _, _ in rows]
    assert trace.timestamps == pytest.approx(stamps - stamps[0])
    index = bad.draw(st.integers(0, len(rows) - 1))
    lines[index] = lines[index].replace(",", ",-", 1)
    path.write_text(AZ_HEAD + "".join(lines))
    with pytest.raises(TraceFormatError, match=rf"a\.csv:{index + 2}: ContextTokens is -"):
        read_trace(path)


def test_a_run_that_leaves_shared_prefixes_uncached_says_so():
    """Shared system prompts (or a trace's hash_ids) run with prefix caching off are prefilled
    in full every time: the summary warns, with the share an unlimited cache would reuse; with
    caching at its default (on, as vLLM's V1 engine and SGLang's radix cache) it does not."""
    from sim.api import simulate

    base = {"model": "smollm2-135m", "hardware": "a100-80gb",
            "workload": {"num_requests": 60, "input_len": {"dist": "fixed", "mean": 64},
                         "output_len": {"dist": "fixed", "mean": 4}, "arrival": {"process": "poisson", "rate": 5},
                         "prefix": {"num_prefixes": 2, "length": 512}}}
    off = ["kv_cache.prefix_caching=false"]
    warned = simulate(base, overrides=off).summary.get("warnings", [])
    assert len(warned) == 1 and "kv_cache.prefix_caching is false" in warned[0]
    share = describe(build_requests(base["workload"], seed=0))["prefix_reuse_fraction"]
    assert f"{share:.0%} of the prompt blocks" in warned[0] and share > 0.8
    assert simulate(base, overrides=["scheduler.policy=vllm_v0"]).summary.get("warnings")  # V0: off
    cached = simulate(base)  # the default: vLLM's V1 engine caches prefixes
    assert not cached.summary.get("warnings") and cached.summary["kv_cache"]["prefix_cache_hit_rate"] > 0.5
    assert not simulate(base, overrides=["engine.name=sglang"]).summary.get("warnings")
    plain = {**base, "workload": {k: v for k, v in base["workload"].items() if k != "prefix"}}
    assert not simulate(plain, overrides=off).summary.get("warnings")
