"""Loading a scenario: YAML files and ``--set`` overrides merged over the defaults. Every bad
file or override is one ConfigError line naming the file (and line) or the key."""

from __future__ import annotations

import pytest

from sim.config import DEFAULTS, build_config, build_scenario, load_yaml, parse_override
from sim.errors import ConfigError
from sim.scenario import Scenario


def _one_line(fn, *args) -> str:
    with pytest.raises(ConfigError) as exc:
        fn(*args)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_yaml_file_then_overrides_then_seed(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("model: smollm2-135m\nkv_cache:\n  block_size: 32\nseed: 4\n")
    cfg = build_config(f, ["kv_cache.block_size=8"], seed=9)
    assert (cfg["model"], cfg["kv_cache"]["block_size"], cfg["seed"]) == ("smollm2-135m", 8, 9)
    assert cfg["kv_cache"]["max_model_len"] == DEFAULTS["kv_cache"]["max_model_len"]
    sc = build_scenario(f, ["kv_cache.block_size=8"], seed=9)
    assert isinstance(sc, Scenario) and sc.to_dict() == cfg


@pytest.mark.parametrize("content,needle", [
    (b"model: [\n", "c.yaml:2"),
    (b"- a\n- b\n", "the top level must be a mapping"),
    (b"\x00\x01\x02binary", "binary file"),
    (b"\xff\xfe\xfa", "not a UTF-8 text file"),
    (b"kv_cache: 3\n", "kv_cache: expected a mapping"),
    (b"kv_cache:\n  blocksize: 3\n", "unknown config key 'kv_cache.blocksize'"),
    (b"kv_cache:\n  block_size: .nan\n", "kv_cache.block_size: expected an integer"),
    (b"slo:\n  ttft_ms: .inf\n", "slo.ttft_ms: expected a finite number"),
])
def test_bad_files_are_one_line_errors(tmp_path, content, needle):
    f = tmp_path / "c.yaml"
    f.write_bytes(content)
    assert needle in _one_line(build_config, f)


def test_missing_file_and_directory(tmp_path):
    assert "not found" in _one_line(load_yaml, tmp_path / "none.yaml")
    assert "is a directory" in _one_line(load_yaml, tmp_path)
    (tmp_path / "empty.yaml").write_text("")
    assert "empty" in _one_line(load_yaml, tmp_path / "empty.yaml")  # a truncated file is a mistake


@pytest.mark.parametrize("item,needle", [
    ("kv_cache.block_size", "expected key=value"), ("=3", "empty key"),
    ("kv_cache.block_size=abc", "kv_cache.block_size: expected an integer"),
    ("kv_cache=3", "kv_cache: expected a mapping"),
    ("scheduler.policy=fastest", "scheduler.policy: 'fastest' is not one of static, orca, vllm_v0, chunked"),
])
def test_bad_overrides(item, needle):
    assert needle in _one_line(build_config, None, [item])


def test_parse_override_reads_yaml_values():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=[0.5, 0.5]") == (["a"], [0.5, 0.5])
    assert parse_override("a=") == (["a"], None)


def test_a_trace_drops_the_default_synthetic_workload():
    cfg = build_config(None, ["workload.trace=t.csv"])
    assert cfg["workload"] == {"trace": "t.csv"}
    cfg = build_config(None, ["workload.arrival.process=constant", "workload.arrival.rate=2"])
    assert cfg["workload"]["arrival"] == {"process": "constant", "rate": 2}


def test_set_flags_apply_in_any_order():
    """A new arrival process (or length distribution) replaces its section's defaults, but
    never what another ``--set`` gave: the flags are one override, whatever their order."""
    closed = ["workload.arrival.process=closed", "workload.arrival.concurrency=8"]
    for items in (closed, closed[::-1]):
        cfg = build_config(None, items)
        assert cfg["workload"]["arrival"] == {"process": "closed", "concurrency": 8}
    lengths = ["workload.input_len.mean=300", "workload.input_len.dist=fixed"]
    assert build_config(None, lengths)["workload"]["input_len"] == {"dist": "fixed", "mean": 300}
    assert build_config(None, ["kv_cache.block_size=8", "kv_cache.block_size=32"])["kv_cache"]["block_size"] == 32


def test_a_file_arrival_still_gives_way_to_a_new_process(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("workload:\n  arrival:\n    process: poisson\n    rate: 5\n")
    cfg = build_config(f, ["workload.arrival.concurrency=4", "workload.arrival.process=closed"])
    assert cfg["workload"]["arrival"] == {"process": "closed", "concurrency": 4}
