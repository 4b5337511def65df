"""Fleet sizing by simulation (issue #15): ``kvplan capacity --target-rate`` simulates N
replicas behind the configured router (N P/D groups with disaggregation) at the target rate,
instead of dividing the rate by one replica's capacity.

Real scenarios are small (Llama-3.1-8B on an A10G, short outputs, 20 s runs, as in
tests/test_capacity.py), about a second a search. The stepping rules are also driven by a fake
simulation whose fleet capacities are known, so they are checked exactly and in milliseconds."""

from __future__ import annotations

import json
import math

import pytest

from analysis import capacity as capacity_mod
from analysis.capacity import RunSizing, find_capacity, plan, with_rate
from analysis.fleet import _Bracket, fleet_config, fleet_sizing
from analysis.pricing import price_table
from analysis.slo import parse_slo
from analysis.steady import window_metrics
from sim.api import simulate
from sim.errors import ConfigError

SMALL = ["hardware=a10g", "workload.output_len.mean=64", "workload.output_len.max=256",
         "workload.input_len.max=512"]
SLO_TEXT = "ttft_p99_ms=1000,tpot_p99_ms=60"
FAST = dict(seeds=2, rel_tol=0.1, sizing=RunSizing(duration_s=20, confirm_s=0))


def search(extra=(), slo: str = SLO_TEXT, **kw):
    return find_capacity(None, parse_slo(slo), overrides=SMALL + list(extra), **{**FAST, **kw})


@pytest.fixture(scope="module")
def fleet50():
    return search(target_rate=50)


# ---------------------------------------------------------------- real simulations

def test_the_simulated_fleet_meets_the_slo_and_one_fewer_does_not(fleet50):
    r = fleet50
    n = r.replicas
    assert r.fleet_mode == "simulate" and n == r.simulated_replicas == r.fleet.replicas >= 1
    assert r.divided_replicas == math.ceil(50 / r.planning_rate)
    assert r.gpus == n * r.gpus_per_replica and r.usd_per_hour == pytest.approx(r.gpus * r.usd_per_gpu_hour)
    trials = {t.replicas: t for t in r.fleet.trials}
    assert trials[n].passed and all(e.passed for e in trials[n].evaluations)
    assert {e.seed for e in trials[n].evaluations} == {s.seed for s in r.searches}  # every seed judged
    assert r.fleet.minimal and (n == 1 or not trials[n - 1].passed)
    assert all(e.replicas == t.replicas and e.stage == "fleet" and e.rate == 50
               for t in r.fleet.trials for e in t.evaluations)
    assert r.fleet_per_replica_rate == pytest.approx(50 / n)
    # The recorded verdicts are the simulator's: N and N - 1 replicas at 50 req/s, judged again.
    slo = parse_slo(SLO_TEXT)
    for size in (n, n - 1)[:2 if n > 1 else 1]:
        run = trials[size].evaluations[-1]   # N: its last run met the SLO; N - 1: the one that missed
        cfg = fleet_config(r.config, r.unit, size)
        res = simulate(with_rate(cfg, 50, run.seed, run.metrics["num_requests"]), statistics=False)
        assert res.summary["scenario"]["num_replicas"] == size
        m = window_metrics(res.requests, slo_ttft_ms=slo.ttft_ms, slo_tpot_ms=slo.tpot_ms)
        assert slo.check(m)[0] is (size == n) is run.passed
    # ... and it is said: both counts, the per-replica rate, and why they differ
    head = r.headline()
    assert f"For 50 req/s: {n} replica" in head and "by simulating the fleet" in head
    assert r.fleet_note in head and str(r.divided_replicas) in r.fleet_note
    d = r.to_dict()
    for key in ("fleet_mode", "divided_replicas", "simulated_replicas", "fleet_per_replica_rate",
                "fleet_note", "fleet", "unit"):
        assert key in d
    assert d["fleet"]["trials"][0]["evaluations"][0]["stage"] == "fleet"


def test_the_search_itself_is_untouched_by_the_fleet(fleet50):
    """The fleet only adds: the per-replica search's fields are those of --fleet divide, and
    the divide mode is the old answer, ceil(target / planning rate)."""
    div = search(target_rate=50, fleet="divide")
    assert div.fleet_mode == "divide" and div.fleet is None and div.simulated_replicas is None
    assert div.replicas == div.divided_replicas == math.ceil(50 / div.planning_rate)
    assert div.gpus == div.replicas * div.gpus_per_replica
    a, b = div.to_dict(), fleet50.to_dict()
    fleet_keys = {"replicas", "gpus", "usd_per_hour", "headline", "fleet_mode", "simulated_replicas",
                  "fleet_per_replica_rate", "fleet_note", "fleet"}
    assert {k: v for k, v in a.items() if k not in fleet_keys} == {k: v for k, v in b.items() if k not in fleet_keys}
    assert div.headline().endswith(f"{div.num_simulations} simulations.")  # the old headline
    assert "fleet" not in div.headline()


def _alternating_trace(path) -> str:
    """Arrivals 0.1 s apart, outputs alternating 400 and 20 tokens: round_robin over two
    replicas hands every long request to the first one."""
    with open(path, "w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i in range(20000):
            fh.write(f"{i * 0.1:.3f},100,{400 if i % 2 == 0 else 20}\n")
    return str(path)


def test_routing_makes_the_difference_where_division_underestimates(tmp_path):
    """A constructed case: at 1.9 x one replica's rate division says 2 replicas. Behind
    round_robin the first replica gets every long request and misses the SLO (3 are needed:
    routing imbalance); least_outstanding balances the two and meets it."""
    trace = ["hardware=a10g", f"workload.trace={_alternating_trace(tmp_path / 'alt.csv')}",
             "workload.num_requests=null"]
    kw = dict(seeds=1, rel_tol=0.05, ci_target=0, sizing=RunSizing(duration_s=20, confirm_s=0), workers=1)
    slo = parse_slo(SLO_TEXT)
    one = find_capacity(None, slo, overrides=trace, **kw).planning_rate
    target = 1.9 * one
    rr, lo = (find_capacity(None, slo, overrides=trace + [f"parallel.router={name}"], target_rate=target, **kw)
              for name in ("round_robin", "least_outstanding"))
    assert rr.planning_rate == lo.planning_rate == one  # one replica: the router plays no part
    assert rr.divided_replicas == lo.divided_replicas == 2
    assert rr.replicas == 3 and rr.fleet.effect == "imbalance"
    assert rr.fleet_per_replica_rate < rr.planning_rate
    assert "routing imbalance" in rr.fleet_note and "round_robin" in rr.headline()
    assert lo.replicas == 2 and lo.fleet.effect == "as divided"


def test_pd_groups_are_the_unit_and_count_both_pools_gpus():
    """With disaggregation the search sizes one P/D group (1 prefill instance at TP 2 on an
    L40S + 2 decode instances on A10Gs: 4 GPUs) and the fleet is k such groups: k prefill and
    2k decode instances in one simulation."""
    pd = ["disaggregation.enabled=true", "disaggregation.prefill_replicas=1",
          "disaggregation.decode_replicas=2", "disaggregation.prefill_tensor_parallel_size=2",
          "disaggregation.prefill_hardware=l40s"]
    r = search(pd, target_rate=60, seeds=1, ci_target=0)
    prices = price_table()
    assert r.unit.kind == "pd_group" and r.gpus_per_replica == 4
    assert (r.unit.prefill_gpus, r.unit.decode_gpus) == (2, 2)
    group_usd = 2 * prices["l40s"] + 2 * prices["a10g"]
    assert r.usd_per_gpu_hour == pytest.approx(group_usd / 4)
    assert r.hardware == "l40s (prefill) + a10g (decode)"
    assert r.output_tokens_per_s_per_gpu == pytest.approx(
        r.planning_rate * r.at_planning_rate["mean_output_tokens"] / 4)
    k = r.replicas
    assert k and r.gpus == 4 * k and r.usd_per_hour == pytest.approx(k * group_usd)
    assert r.headline().startswith("One P/D group (1 prefill + 2 decode instances, 4 GPUs) sustains")
    assert f"{k} P/D group" in r.headline()
    assert any("sized one P/D group" in n for n in r.notes)
    cfg = fleet_config(r.config, r.unit, 3)
    assert (cfg["disaggregation"]["prefill_replicas"], cfg["disaggregation"]["decode_replicas"]) == (3, 6)
    from analysis.report import render_markdown

    md = render_markdown([r.to_dict()])
    assert "| P/D groups / GPUs needed |" in md and "2 prefill GPUs" in md


def test_same_seed_same_fleet_and_workers_do_not_change_it():
    kw = dict(target_rate=40, sizing=RunSizing(duration_s=10, confirm_s=30))
    one = search(workers=1, **kw).to_dict()
    assert search(workers=1, **kw).to_dict() == one
    two = search(workers=2, **kw).to_dict()
    assert two == one
    stages = {e["stage"] for t in one["fleet"]["trials"] for e in t["evaluations"]}
    assert stages == {"fleet", "fleet-confirm"}  # the long run judges the fleet too


def test_cli_prints_the_fleet_and_writes_its_fields(tmp_path):
    import typer
    from typer.testing import CliRunner

    from kvplan.cli import analysis as cli_analysis

    app = typer.Typer()
    app.command()(cli_analysis.capacity)
    args = ["--slo", SLO_TEXT, "--seeds", "1", "--ci-target", "0", "--rel-tol", "0.1", "--duration", "20",
            "--confirm", "0", "--target-rate", "50", "--no-progress"]
    for item in SMALL:
        args += ["--set", item]
    res = CliRunner().invoke(app, args + ["--out", str(tmp_path / "f.json")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    saved = json.loads((tmp_path / "f.json").read_text())
    assert saved["fleet_mode"] == "simulate" and saved["replicas"] == saved["simulated_replicas"]
    assert saved["divided_replicas"] >= 1 and saved["fleet_per_replica_rate"] == pytest.approx(50 / saved["replicas"])
    assert saved["fleet"]["trials"] and saved["fleet"]["router"] == "round_robin"
    assert "by simulating the fleet" in out and "fleet sizing" in out and "rate per replica in the fleet" in out
    assert f"replicas / GPUs needed │ {saved['replicas']} / {saved['gpus']}" in out
    res = CliRunner().invoke(app, args + ["--fleet", "divide", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    old = json.loads(res.output)
    assert old["fleet_mode"] == "divide" and old["replicas"] == old["divided_replicas"] == saved["divided_replicas"]
    assert old["fleet"] is None


@pytest.mark.parametrize("flags,needle", [(["--fleet", "guess"], "--fleet"), (["--max-replicas", "0"], "--max-replicas")])
def test_bad_fleet_flags_are_one_line_errors(flags, needle):
    from tests.test_cli import assert_one_line_error, kvplan

    assert_one_line_error(kvplan("capacity", "--slo", "ttft_p99_ms=500", "--target-rate", "10", *flags), needle)


# ---------------------------------------------------------------- the stepping rules, exactly

def fake_fleet(monkeypatch, fleet_cap, single=8.0, long_cap=None, **kw):
    """find_capacity where one replica meets the SLO up to ``single`` req/s on every seed and a
    fleet of n up to ``fleet_cap(n)`` req/s (one run each; a long run up to ``long_cap(n)``)."""
    def evaluate(base, slo, sizing, base_dir, key, confirm):
        rate, seed, _ = key
        n = base["parallel"]["num_replicas"]
        cap = single if n == 1 else (long_cap or fleet_cap)(n) if confirm else fleet_cap(n)
        ok = rate <= cap
        ev = capacity_mod.Evaluation(rate, seed, ok, [] if ok else ["p99_ttft_ms 900 > 500"], {},
                                     "confirm" if confirm else "search")
        return ev, 1, {"gpus_per_replica": 1, "hardware": "a10g"}

    monkeypatch.setattr(capacity_mod, "_evaluate", evaluate)
    args = dict(seeds=2, rel_tol=0.05, ci_target=0, sizing=RunSizing(confirm_s=0), start_rate=8.0, workers=1)
    return find_capacity(None, parse_slo("ttft_p99_ms=500"), **{**args, **kw})


def test_division_far_too_low_is_bracketed_then_bisected(monkeypatch):
    """Each replica of a fleet carries 6 req/s where one alone carries 8: 100 req/s takes 17
    replicas, not 13. The sizes go 13, 14, 16, 20 (steps 1, 2, 4), then bisect: 18, 17."""
    r = fake_fleet(monkeypatch, lambda n: 6.0 * n, target_rate=100)
    assert r.planning_rate == 8.0
    assert r.divided_replicas == 13 and r.replicas == 17 and r.fleet.effect == "imbalance"
    assert [t.replicas for t in r.fleet.trials] == [13, 14, 16, 20, 18, 17] and r.fleet.minimal
    assert r.fleet.num_simulations == sum(len(t.evaluations) for t in r.fleet.trials)
    assert r.num_simulations == len(r.evaluations)  # the search's count is the search's alone


def test_pooling_steps_down_while_one_fewer_still_meets_it(monkeypatch):
    r = fake_fleet(monkeypatch, lambda n: 14.0 * n, target_rate=100)
    assert r.divided_replicas == 13 and r.replicas == 8 and r.fleet.effect == "pooling"
    assert [(t.replicas, t.passed) for t in r.fleet.trials] == [(13, True), (12, True), (10, True),
                                                                 (6, False), (8, True), (7, False)]
    assert r.fleet_per_replica_rate == pytest.approx(12.5) and r.fleet.per_replica_rate_missed == pytest.approx(100 / 7)


def test_the_long_run_checks_the_answer_and_steps_up_while_it_misses(monkeypatch):
    """Short runs pass 8 replicas (14 req/s each); long runs carry 12 req/s each, so 8 miss in
    the long run and 9 meet it. Only the answer so far gets a long run."""
    r = fake_fleet(monkeypatch, lambda n: 14.0 * n, long_cap=lambda n: 12.0 * n, target_rate=100,
                   sizing=RunSizing(confirm_s=600))
    assert r.replicas == 9 and r.fleet.confirmed and r.fleet.minimal
    longs = [(t.replicas, t.passed) for t in r.fleet.trials if t.evaluations[0].stage == "fleet-confirm"]
    assert longs == [(8, False), (9, True)]
    assert all(e.seed == r.searches[0].seed for t in r.fleet.trials for e in t.evaluations
               if e.stage == "fleet-confirm")  # the seed that set the planning rate


def test_no_fleet_up_to_max_replicas_says_so(monkeypatch):
    r = fake_fleet(monkeypatch, lambda n: 1.0 * n, target_rate=100, max_replicas=16)
    assert r.fleet_mode == "simulate" and r.replicas is None and r.gpus is None and r.usd_per_hour is None
    assert max(t.replicas for t in r.fleet.trials) == 16
    assert "no fleet of up to 16 replicas" in r.fleet_note and "--max-replicas 16" in r.fleet_note
    assert r.fleet_note in r.headline()
    from analysis.report import render_markdown

    assert "none found: no fleet of up to 16 replicas" in render_markdown([r.to_dict()])


def test_a_fleet_over_max_replicas_is_divided_and_says_so(monkeypatch):
    r = fake_fleet(monkeypatch, lambda n: 10.0 * n, target_rate=400, max_replicas=16)
    assert r.fleet_mode == "divide" and r.replicas == r.divided_replicas == 50 and r.fleet_per_replica_rate is None
    assert not r.fleet.trials and "over --max-replicas 16" in r.fleet_note and r.fleet_note in r.headline()


def test_the_fleet_shares_the_simulation_budget(monkeypatch):
    """The search took 9 of 16 simulations; the fleet's 7 reach 18 replicas (met), not 17:
    the answer is a fleet that met the SLO, and the note says fewer may do."""
    r = fake_fleet(monkeypatch, lambda n: 6.0 * n, target_rate=100, max_simulations=16)
    assert r.num_simulations == 9 and r.num_simulations + r.fleet.num_simulations == 16
    assert r.replicas == 18 and not r.fleet.minimal and "budget ran out" in r.fleet_note


def test_re_planning_another_target_divides_it(fleet50):
    """The dashboard re-plans without simulating: a fleet simulated for 50 req/s is not the
    answer for 80, which is divided, and says so; back at 50 the simulated fleet returns."""
    import copy

    other = plan(copy.deepcopy(fleet50), 80)
    assert other.fleet_mode == "divide" and other.replicas == math.ceil(80 / fleet50.planning_rate)
    assert "simulated for 50 req/s" in other.fleet_note
    back = plan(copy.deepcopy(other), 50)
    assert back.replicas == fleet50.replicas and back.fleet_mode == "simulate"


def test_bracket_rules():
    b = _Bracket().after(10, False)
    assert b.next(32) == 11
    b = b.after(11, False)
    assert b.next(32) == 13
    b = _Bracket().after(5, True)
    assert b.next(32) == 4
    assert _Bracket().after(1, True).next(32) is None       # one replica: nothing below
    assert _Bracket().after(32, False).next(32) is None     # out of room
    assert _Bracket(ok=9, fail=4, tried=3).next(32) == 6


def test_fleet_runs_span_the_same_seconds_as_the_search():
    sz = fleet_sizing(RunSizing(duration_s=60, num_requests=None, max_requests=20000), 6)
    assert sz.duration_s == 60 and sz.max_requests == 120000 and sz.num_requests is None
    assert fleet_sizing(RunSizing(num_requests=300), 4).num_requests == 1200


@pytest.mark.parametrize("kw,needle", [({"fleet": "guess"}, "--fleet"), ({"max_replicas": 0}, "--max-replicas")])
def test_bad_fleet_arguments_are_config_errors(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        search(target_rate=10, **kw)


def test_the_progress_bar_says_which_fleet_is_running():
    from kvplan.cli.analysis import progress_text

    fleet = capacity_mod.Evaluation(100.0, 0, True, [], {}, "fleet", replicas=5)
    assert progress_text(fleet) == "fleet x5 100 req/s seed 0: met"
    assert progress_text(capacity_mod.Evaluation(8.0, 1, False, [], {})) == "search 8 req/s seed 1: missed"
