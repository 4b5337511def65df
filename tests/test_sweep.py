"""Sweeps: grid parsing, the Pareto frontier, and the same numbers from every backend."""

from __future__ import annotations

import csv
import json

import pytest
import typer
from typer.testing import CliRunner

from kvplan.cli import analysis as cli_analysis
from analysis.pareto import pareto_mask
from analysis.slo import parse_slo
from analysis.sweep import grid_points, parse_grid, point_overrides, run_sweep
from sim.errors import ConfigError

SMALL = ["workload.num_requests=60", "workload.output_len.mean=48", "workload.arrival.rate=12"]
GRID = parse_grid(["scheduler.max_num_seqs=4,64"])


def numbers(result):
    return [(r["label"], r["output_throughput_per_gpu"], r["tokens_per_s_per_user"], r["pareto"])
            for r in result.rows]


@pytest.fixture(scope="module")
def serial():
    return run_sweep(None, GRID, overrides=SMALL, workers=1)


def test_parse_grid_values_are_yaml():
    g = parse_grid(["kv_cache.block_size=8,16", "kv_cache.prefix_caching=true,false",
                    "scheduler.max_num_batched_tokens=null,512", "model=llama-3.1-8b"])
    assert g == {"kv_cache.block_size": [8, 16], "kv_cache.prefix_caching": [True, False],
                 "scheduler.max_num_batched_tokens": [None, 512], "model": ["llama-3.1-8b"]}
    points = grid_points(g)
    assert len(points) == 8 and points[0] == {"kv_cache.block_size": 8, "kv_cache.prefix_caching": True,
                                              "scheduler.max_num_batched_tokens": None, "model": "llama-3.1-8b"}
    assert point_overrides(points[0]) == ("kv_cache.block_size=8", "kv_cache.prefix_caching=true",
                                          "scheduler.max_num_batched_tokens=null", "model=llama-3.1-8b")


@pytest.mark.parametrize("items,needle", [([], "at least one"), (["a.b"], "key=v1"),
                                          (["a=1", "a=2"], "twice"), (["a="], "key=v1")])
def test_parse_grid_errors(items, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_grid(items)


def test_pareto_mask():
    xs, ys = [1, 2, 3, 2, None, 3], [3, 2, 1, 1, 9, 1]
    assert pareto_mask(xs, ys) == [True, True, True, False, False, True]


def test_serial_sweep_rows_and_frontier(serial):
    assert [r["label"] for r in serial.rows] == ["scheduler.max_num_seqs=4", "scheduler.max_num_seqs=64"]
    small, big = serial.rows
    # a bigger batch: more tokens per GPU, each user slower; both on the frontier
    assert big["output_throughput_per_gpu"] > small["output_throughput_per_gpu"]
    assert big["tokens_per_s_per_user"] < small["tokens_per_s_per_user"]
    assert small["pareto"] and big["pareto"]
    assert len(serial.runs) == 2 and serial.frontier[0] is small


def test_process_pool_gives_the_same_numbers(serial):
    seen = []
    pooled = run_sweep(None, GRID, overrides=SMALL, workers=2, on_done=lambda d, t: seen.append(d))
    assert pooled.workers == 2 and seen == [1, 2]
    assert numbers(pooled) == numbers(serial)


def test_ray_backend_on_a_local_instance_gives_the_same_numbers(serial):
    pytest.importorskip("ray")
    on_ray = run_sweep(None, GRID, overrides=SMALL, backend="ray", workers=2)
    assert on_ray.backend == "ray"
    assert numbers(on_ray) == numbers(serial)


def test_invalid_point_fails_before_anything_runs():
    with pytest.raises(ConfigError, match="--grid point kv_cache.block_size=0"):
        run_sweep(None, parse_grid(["kv_cache.block_size=16,0"]), overrides=SMALL, workers=1)
    with pytest.raises(ConfigError, match="--backend"):
        run_sweep(None, GRID, backend="slurm")


def test_a_point_that_does_not_fit_is_reported_and_the_sweep_goes_on():
    r = run_sweep(None, parse_grid(["model=llama-3.1-8b,llama-3.1-70b"]), overrides=SMALL + ["hardware=a100-40gb"],
                  workers=1)
    ok, bad = r.rows
    assert ok["error"] is None and ok["pareto"]
    assert bad["error"] and not bad["pareto"] and bad["output_throughput_per_gpu"] is None
    assert any("llama-3.1-70b" in n for n in r.notes)


def test_slo_limits_the_frontier():
    r = run_sweep(None, GRID, overrides=SMALL, workers=1, slo=parse_slo("tpot_p99_ms=0.001"))
    assert not any(row["meets_slo"] for row in r.rows)
    assert not any(row["pareto"] for row in r.rows)


def test_cli_sweep_writes_csv_and_json(tmp_path):
    app = typer.Typer()
    app.command()(cli_analysis.sweep)
    args = ["--grid", "scheduler.max_num_seqs=4,64", "--workers", "1", "--no-progress",
            "--csv", str(tmp_path / "s.csv"), "--out", str(tmp_path / "s.json")]
    for item in SMALL:
        args += ["--set", item]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "Pareto" in res.output
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert [r["label"] for r in rows] == ["scheduler.max_num_seqs=4", "scheduler.max_num_seqs=64"]
    assert json.loads((tmp_path / "s.json").read_text())["kind"] == "sweep"


# --- the frontier at equal load, the ranking under the SLO, re-ranking without simulating ------

def _row(label, rate, x, y, ttft, error=None):
    return {"point": {}, "label": label, "error": error, "seeds": 1, "offered_rate": rate,
            "output_throughput_per_gpu": x, "tokens_per_s_per_user": y, "p99_ttft_ms": ttft,
            "p99_tpot_ms": 1000.0 / y if y else None}


def test_the_frontier_compares_points_only_at_the_same_offered_load():
    from analysis.sweep import rerank

    rows = [_row("a4", 4, 100, 50, 200), _row("b4", 4, 120, 40, 300), _row("c4", 4, 90, 45, 250),
            _row("a16", 16, 400, 20, 45000), _row("b16", 16, 380, 25, 800)]
    rerank(rows, None)
    by = {r["label"]: r for r in rows}
    # c4 is dominated by a4; at 16 req/s neither dominates the other; and a 16 req/s point does
    # not push the 4 req/s points off (it would dominate them on tokens/GPU alone).
    assert [by[k]["pareto"] for k in ("a4", "b4", "c4", "a16", "b16")] == [True, True, False, True, True]
    for r in rows:  # nothing on the frontier is dominated by a point at its own load
        if r["pareto"]:
            assert not any(o is not r and o["offered_rate"] == r["offered_rate"]
                           and o["output_throughput_per_gpu"] >= r["output_throughput_per_gpu"]
                           and o["tokens_per_s_per_user"] >= r["tokens_per_s_per_user"]
                           and (o["output_throughput_per_gpu"], o["tokens_per_s_per_user"])
                           != (r["output_throughput_per_gpu"], r["tokens_per_s_per_user"])
                           for o in rows)


def test_the_ranking_respects_the_slo_and_a_new_slo_only_reranks(monkeypatch):
    from analysis import sweep as sweep_mod
    from analysis.slo import parse_slo
    from analysis.sweep import SweepResult, rerank

    rows = [_row("a4", 4, 100, 50, 200), _row("b4", 4, 120, 40, 300), _row("a16", 16, 400, 20, 45000),
            _row("b16", 16, 380, 25, 800), _row("bad", 4, None, None, None, error="does not fit")]
    res = SweepResult({}, {}, [0], rerank(rows, parse_slo("ttft_p99_ms=500")), [], "local", 1, 0.0,
                      parse_slo("ttft_p99_ms=500"))
    assert [r["label"] for r in res.ranked] == ["b4", "a4"]
    assert all(r["p99_ttft_ms"] <= 500 for r in res.ranked)
    assert not any(r["pareto"] for r in res.rows if r["p99_ttft_ms"] is None or r["p99_ttft_ms"] > 500)

    def no_simulation(*a, **k):
        raise AssertionError("a new SLO must not simulate again")

    monkeypatch.setattr("sim.api.simulate", no_simulation)
    looser = res.with_slo(parse_slo("ttft_p99_ms=1000"))
    assert [r["label"] for r in looser.ranked] == ["b16", "b4", "a4"]
    none = res.with_slo(parse_slo("ttft_p99_ms=100"))
    assert none.ranked == [] and any("no configuration meets" in n for n in none.notes)
    assert res.to_dict()["ranked"] == ["b4", "a4"]
