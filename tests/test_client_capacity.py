"""Capacity in clients (``kvplan capacity --clients``): each seed's answer is exact (its count
met the SLO and one more missed it, both simulated), the answer moves the right way with the
SLO, a TPOT-only SLO that never binds stops at the cap and says so, the fleet for a target is
simulated with every client, and the CLI dispatches closed loops to it.

Scenarios are small (Llama-3.1-8B on an A10G with short outputs) so a search takes a few
seconds; the properties do not depend on the size."""

from __future__ import annotations

import json
import math

import pytest
import typer
from typer.testing import CliRunner

from analysis.client_capacity import clients_run, find_client_capacity
from analysis.slo import parse_slo
from sim import config as config_mod
from sim.errors import ConfigError

SMALL = ["hardware=a10g", "workload.output_len.mean=64", "workload.output_len.max=256",
         "workload.input_len.max=512"]


def search(slo: str, extra=(), **kw):
    args = {"seeds": 2, **kw}
    return find_client_capacity(None, parse_slo(slo), overrides=SMALL + list(extra), **args)


@pytest.fixture(scope="module")
def ttft_bound():
    return search("ttft_p99_ms=400", target_clients=150)


def test_each_seeds_answer_met_the_slo_and_one_more_client_missed_it(ttft_bound):
    r = ttft_bound
    judged = {(run.clients, run.seed): run.passed for run in r.runs if run.stage == "search"}
    assert r.planning_clients > 1
    for s in r.searches:
        assert s.high == s.low + 1, s
        assert judged[(s.low, s.seed)] is True and judged[(s.high, s.seed)] is False
    assert r.planning_clients == min(s.low for s in r.searches)
    assert r.ci_low <= r.capacity_clients <= r.ci_high
    assert r.num_simulations == len(r.runs)


def test_a_rerun_of_the_answer_reproduces_the_searchs_run_and_holds_the_clients(ttft_bound):
    r = ttft_bound
    base = config_mod.build_config(None, SMALL + r.slo.overrides() + ["parallel.num_replicas=1"])
    seed = r.searches[0].seed
    ok, bad, m = clients_run(base, (), r.slo, r.planning_clients, 1, seed)
    searched = next(x for x in r.runs if x.stage == "search" and x.clients == r.planning_clients and x.seed == seed)
    assert ok and searched.passed
    assert m["p99_ttft_ms"] == searched.metrics["p99_ttft_ms"]
    assert m["request_throughput"] == searched.metrics["request_throughput"]
    # Each client holds one request at a time, and 8 requests each keep all of them busy but
    # for the final drain.
    assert 0.7 * r.planning_clients < m["achieved_concurrency"] <= r.planning_clients


def test_a_looser_slo_serves_more_clients(ttft_bound):
    loose = search("ttft_p99_ms=2000", start_clients=ttft_bound.planning_clients)
    assert loose.planning_clients > ttft_bound.planning_clients


def test_the_fleet_for_a_target_is_simulated_with_every_client(ttft_bound):
    r = ttft_bound
    assert r.target_clients == 150
    fleet = [run for run in r.runs if run.stage == "fleet"]
    assert fleet and all(run.clients == 150 for run in fleet)
    assert r.divided_replicas == math.ceil(150 / r.planning_clients)
    assert r.replicas >= r.divided_replicas
    assert all(run.passed for run in fleet if run.replicas == r.replicas)
    assert r.gpus == r.replicas * r.gpus_per_replica
    assert r.usd_per_hour == pytest.approx(r.gpus * r.usd_per_gpu_hour)
    assert f"For 150 clients: {r.replicas} replica" in r.headline()


def test_a_tpot_only_slo_that_never_binds_stops_at_the_cap_and_says_so():
    r = search("tpot_p99_ms=10000", seeds=1, max_clients=12)
    assert r.planning_clients == 12 and r.searches[0].high is None
    assert "does not bind" in r.searches[0].note
    assert "the search cap" in r.headline()


def test_an_slo_one_client_misses_is_reported_not_raised():
    r = search("ttft_p99_ms=0.001", seeds=2)
    assert r.planning_clients == 0 and all(s.low == 0 and s.high == 1 for s in r.searches)
    assert "not even one client" in r.headline() and "one client missed p99_ttft_ms" in r.headline()


def test_the_answer_is_the_same_for_a_seed():
    a = search("ttft_p99_ms=400", seeds=1)
    b = search("ttft_p99_ms=400", seeds=1)
    assert [(x.clients, x.passed) for x in a.runs] == [(x.clients, x.passed) for x in b.runs]


@pytest.mark.parametrize("kw,needle", [({"seeds": 0}, "--seeds"), ({"max_clients": 0}, "--max-clients"),
                                       ({"target_clients": 0}, "--target-clients"),
                                       ({"start_clients": -3}, "--start-clients")])
def test_bad_arguments_are_config_errors(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        search("ttft_p99_ms=400", **kw)


def _app():
    from kvplan.cli import analysis as cli_analysis

    app = typer.Typer()
    app.command()(cli_analysis.capacity)
    return app


def test_cli_searches_a_closed_loop_config_in_clients_and_the_report_renders_it(tmp_path):
    from analysis.report import render_markdown

    out = tmp_path / "c.json"
    args = ["--slo", "ttft_p99_ms=400", "--seeds", "1", "--target-clients", "40", "--no-progress",
            "--out", str(out), "--set", "workload.arrival.process=closed", "--set", "workload.arrival.concurrency=16"]
    for item in SMALL:
        args += ["--set", item]
    res = CliRunner().invoke(_app(), args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "Capacity in clients" in res.output and "concurrent clients" in res.output
    saved = json.loads(out.read_text())
    assert saved["kind"] == "capacity_clients" and saved["target_clients"] == 40
    assert saved["runs"][0]["clients"] == 16   # started at the config's concurrency
    md = render_markdown([saved])
    assert "closed loop: clients set by the search" in md and "most clients meeting the SLO" in md


def test_cli_refuses_a_rate_target_in_a_client_search():
    res = CliRunner().invoke(_app(), ["--slo", "ttft_p99_ms=400", "--clients", "--target-rate", "3"])
    assert isinstance(res.exception, ConfigError) and "--target-clients" in str(res.exception)
