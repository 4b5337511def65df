"""Capacity search: monotone in the SLO and the prompt length, bracketed, counted, priced,
sized to an interval target, and plain about an SLO nothing meets.

Scenarios are small (Llama-3.1-8B on an A10G with short outputs) so a search takes about a
second; the properties do not depend on the size. The sizing logic is also driven by a fake
simulation whose per-seed capacity is known, so its stopping rules are checked exactly."""

from __future__ import annotations

import math

import pytest

from analysis import capacity as capacity_mod
from analysis.capacity import RunSizing, find_capacity
from analysis.pricing import price_table, usd_per_million_output_tokens
from analysis.slo import parse_slo
from analysis.steady import MIN_SPANS, run_length, window_metrics
from sim.api import simulate
from sim.errors import ConfigError

SMALL = ["hardware=a10g", "workload.output_len.mean=64", "workload.output_len.max=256",
         "workload.input_len.max=512"]
FAST = dict(seeds=2, rel_tol=0.1, sizing=RunSizing(duration_s=20, confirm_s=0))


def search(slo: str, extra=(), **kw):
    args = {**FAST, **kw}
    return find_capacity(None, parse_slo(slo), overrides=SMALL + list(extra), **args)


@pytest.fixture(scope="module")
def tight():
    return search("ttft_p99_ms=1000,tpot_p99_ms=60", target_rate=50)


def test_loosening_the_slo_raises_capacity(tight):
    loose = search("ttft_p99_ms=5000,tpot_p99_ms=200")
    assert loose.planning_rate > tight.planning_rate * 1.1
    assert loose.capacity_rate > tight.capacity_rate


def test_longer_prompts_lower_capacity(tight):
    long = search("ttft_p99_ms=1000,tpot_p99_ms=60",
                  ["workload.input_len.mean=600", "workload.input_len.max=1024"])
    assert 0 < long.planning_rate < tight.planning_rate / 1.1


def test_search_is_bracketed_per_seed(tight):
    by_key = {(e.rate, e.seed): e for e in tight.evaluations}
    assert len(tight.searches) >= 2  # at least the seeds asked for
    assert tight.bracket_tol <= 0.1
    for s in tight.searches:
        assert by_key[(s.low, s.seed)].passed
        assert not by_key[(s.high, s.seed)].passed
        assert s.low < s.high <= s.low * (1 + tight.bracket_tol) + 1e-9
    assert tight.planning_rate == min(s.low for s in tight.searches)
    assert tight.ci_low <= tight.capacity_rate <= tight.ci_high


def test_the_default_interval_is_within_ten_percent_and_says_how(tight):
    """The default target: the interval's half-width within 10% of the estimate, and the
    result says how many seeds it took."""
    n = len(tight.searches)
    half = (tight.ci_high - tight.ci_low) / 2 / tight.capacity_rate
    assert tight.ci_target == 0.10 and tight.interval_met is True
    assert tight.ci_half_width == pytest.approx(half) and 0 < half <= 0.10
    assert f"interval within ±10% (±{half:.1%} over {n} seeds)" in tight.sizing_note
    assert tight.sizing_note[1:] in tight.headline()
    assert tight.to_dict()["sizing_note"] == tight.sizing_note


def test_seeds_stay_fixed_without_a_target():
    r = search("ttft_p99_ms=1000,tpot_p99_ms=60", ci_target=0)
    assert len(r.searches) == 2 and r.interval_met is None and r.ci_target is None
    assert r.sizing_note.startswith("2 seeds as asked, interval ±") and "no interval target" in r.sizing_note


def test_a_target_out_of_reach_stops_at_max_seeds_and_says_why():
    r = search("ttft_p99_ms=1000,tpot_p99_ms=60", ci_target=0.005, max_seeds=3,
               sizing=RunSizing(duration_s=10, confirm_s=0))
    assert len(r.searches) == 3 and r.interval_met is False and r.ci_half_width > 0.005
    assert r.sizing_note.startswith(f"stopped at 3 seeds: interval ±{r.ci_half_width:.1%}, wider "
                                    f"than the ±0.5% target")
    assert "Stopped at 3 seeds" in r.headline()


# ---------------------------------------------------------------- sizing, on known capacities

def fake_search(monkeypatch, caps, **kw):
    """find_capacity where seed s meets the SLO exactly up to ``caps[s]`` req/s (one run each):
    the sizing rules are checked against capacities known in advance, in milliseconds."""
    def evaluate(base, slo, sizing, base_dir, key, confirm):
        rate, seed, _ = key
        ok = rate <= caps[seed]
        ev = capacity_mod.Evaluation(rate, seed, ok, [] if ok else ["p99_ttft_ms 900 > 500"], {},
                                     "confirm" if confirm else "search")
        return ev, 1, {"gpus_per_replica": 1, "hardware": "a10g"}

    monkeypatch.setattr(capacity_mod, "_evaluate", evaluate)
    args = dict(seeds=2, rel_tol=0.05, sizing=RunSizing(confirm_s=0), start_rate=8.0, workers=1)
    return find_capacity(None, parse_slo("ttft_p99_ms=500"), **{**args, **kw})


def test_seeds_are_added_until_the_interval_is_within_target(monkeypatch):
    caps = [20.0, 23.0, 18.5, 21.5, 19.0, 22.0, 20.5, 18.0]
    r = fake_search(monkeypatch, caps)
    n = len(r.searches)
    assert 2 < n <= 8 and r.interval_met and r.ci_half_width <= 0.10
    for s in r.searches:  # each seed's bracket holds its true capacity
        assert s.low <= caps[s.seed] < s.high
    # the two seeds asked for were not enough: their interval missed the target
    two = capacity_mod.seed_interval(r.searches[:2], 0.95)
    assert capacity_mod.relative_half_width(*two, 2) > 0.10


def test_a_wide_spread_stops_at_max_seeds(monkeypatch):
    caps = [10.0, 20.0, 5.0, 15.0, 7.0, 18.0, 6.0, 12.0, 30.0]
    r = fake_search(monkeypatch, caps)
    assert len(r.searches) == 8 and r.interval_met is False
    assert r.sizing_note.startswith(f"stopped at 8 seeds: interval ±{r.ci_half_width:.1%}")
    assert r.planning_rate == pytest.approx(min(s.low for s in r.searches))
    # seeds=N explicitly is a minimum, even above max_seeds
    assert len(fake_search(monkeypatch, caps, seeds=9).searches) == 9


def test_seeds_agreeing_within_their_brackets_narrow_the_brackets(monkeypatch):
    """Equal capacities land every seed in the same bracket: a zero spread that only says the
    brackets are too wide to tell the seeds apart. The interval is never narrower than the
    brackets allow, and the brackets are narrowed until it meets the target."""
    r = fake_search(monkeypatch, [20.0] * 8, rel_tol=0.2)
    lows = [s.low for s in r.searches]
    assert max(lows) / min(lows) - 1 < 0.01  # the seeds agree far closer than a 20% bracket
    assert r.ci_high > r.ci_low  # ... and still no zero-width interval
    assert r.bracket_tol < 0.2 and r.interval_met
    assert all(s.high / s.low - 1 <= r.bracket_tol + 1e-6 for s in r.searches)
    assert f"brackets narrowed from 20% to {capacity_mod._tol_text(r.bracket_tol)}" in r.sizing_note
    assert r.headline().count("bracketed within 20%") == 0


def test_the_answer_is_the_same_for_a_seed(monkeypatch):
    caps = [20.0, 23.0, 18.5, 21.5, 19.0, 22.0, 20.5, 18.0]
    one = fake_search(monkeypatch, caps).to_dict()
    assert fake_search(monkeypatch, caps).to_dict() == one


def test_reports_how_many_simulations_it_ran(monkeypatch):
    calls = []
    real = capacity_mod.simulate

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(capacity_mod, "simulate", counting)
    r = search("ttft_p99_ms=300", seeds=1, workers=1)  # counted here: no worker processes
    assert r.num_simulations == len(calls) >= len(r.evaluations) >= 3
    assert f"{r.num_simulations} simulations" in r.headline()
    assert r.to_dict()["num_simulations"] == len(calls)


def test_replicas_gpus_and_cost_for_a_target_rate(tight):
    # The fleet is simulated by default (tests/test_capacity_fleet.py); division is the estimate.
    assert tight.divided_replicas == math.ceil(50 / tight.planning_rate)
    assert tight.replicas == tight.simulated_replicas and tight.fleet_mode == "simulate"
    assert tight.gpus == tight.replicas * tight.gpus_per_replica
    assert tight.usd_per_hour == pytest.approx(tight.gpus * tight.usd_per_gpu_hour)
    assert tight.usd_per_gpu_hour == price_table()["a10g"]
    expected = tight.usd_per_gpu_hour / (tight.output_tokens_per_s_per_gpu * 3600) * 1e6
    assert tight.usd_per_million_output_tokens == pytest.approx(expected)
    # steady state: tokens/s per GPU = rate x mean output tokens
    assert tight.output_tokens_per_s_per_gpu == pytest.approx(
        tight.planning_rate * tight.at_planning_rate["mean_output_tokens"])
    assert tight.goodput <= tight.planning_rate


def test_tensor_parallel_counts_gpus_and_price_overrides_apply():
    r = search("ttft_p99_ms=300", ["parallel.tensor_parallel_size=2"], seeds=1, target_rate=30,
               prices=["a10g=2.0"])
    assert r.gpus_per_replica == 2 and r.gpus == 2 * r.replicas
    assert r.usd_per_gpu_hour == 2.0


def test_the_answer_does_not_depend_on_the_worker_processes():
    """Workers only run simulations ahead; the search takes their results in its own order, so
    the result (every evaluation, the count, the answer) is the one a single process gives, and
    prefetched runs it never asked for are not counted."""
    kw = dict(seeds=3, sizing=RunSizing(duration_s=10, confirm_s=40), target_rate=50)
    one = search("ttft_p99_ms=1000,tpot_p99_ms=60", workers=1, **kw).to_dict()
    two = search("ttft_p99_ms=1000,tpot_p99_ms=60", workers=2, **kw).to_dict()
    assert one == two
    # A passing run too short to be steady is repeated longer: one evaluation, two simulations.
    assert one["num_simulations"] >= len(one["evaluations"]) >= 6
    assert {e["stage"] for e in one["evaluations"]} == {"search", "confirm"}


def test_a_long_run_confirms_the_planning_rate():
    r = search("ttft_p99_ms=1000,tpot_p99_ms=60", seeds=1, sizing=RunSizing(duration_s=10, confirm_s=60))
    confirming = [e for e in r.evaluations if e.stage == "confirm"]
    assert r.confirmed is True and confirming and confirming[-1].passed
    assert confirming[-1].rate == r.planning_rate <= r.searches[0].low
    assert confirming[-1].metrics["arrival_span_s"] > 50 > r.evaluations[0].metrics["arrival_span_s"]
    assert r.at_planning_rate == confirming[-1].metrics
    assert "confirmed by a 60 s run" in r.headline()


def test_confirmation_steps_down_until_a_long_run_passes():
    class Fake:
        exhausted = False

        def __call__(self, rate, seed, confirm=False):
            return capacity_mod.Evaluation(round(rate, 6), seed, rate <= 10.0, [], {}, "confirm")

        def key(self, rate, seed, confirm=False):
            return (round(rate, 6), seed, 600.0)

        def prefetch(self, rate, seed, confirm=False):
            pass

    rate, run = capacity_mod._confirm(Fake(), 0, 12.0, 0.05)
    assert run is not None and 9.5 < rate <= 10.0
    rate, run = capacity_mod._confirm(Fake(), 0, 100.0, 0.05)
    assert run is None  # gave up after MAX_CONFIRM_STEPS


def test_unreachable_slo_is_reported_not_raised():
    r = search("tpot_p99_ms=1", seeds=1, target_rate=40)
    assert r.planning_rate == 0 and r.replicas is None and r.usd_per_million_output_tokens is None
    assert any("SLO missed even at" in n for n in r.notes)
    lowest = min(e.rate for e in r.evaluations)
    assert r.headline().startswith("No rate meets this SLO on one replica (tpot_p99_ms<=1): even the "
                                   f"lowest rate tried, {lowest:.3g} req/s, missed p99_tpot_ms ")
    assert "None" not in r.headline() and len(r.searches) == 1  # no interval to size


def test_report_says_no_rate_meets_the_slo_instead_of_none_or_zero_dollars():
    from analysis.report import render_markdown

    md = render_markdown([search("ttft_p99_ms=0.001", seeds=1, target_rate=40).to_dict()])
    rows = dict([c.strip() for c in line.strip("|").split(" | ")] for line in md.splitlines()
                if line.startswith("| ") and line.count(" | ") == 1)
    assert rows["planning rate"].startswith("no rate meets this SLO on one replica")
    assert "lowest rate tried" in rows["planning rate"] and "p99_ttft_ms" in rows["planning rate"]
    assert rows["$ per million output tokens"].startswith("none: no rate meets this SLO")
    assert rows["replicas / GPUs needed"].startswith("none: no rate meets this SLO on one replica")
    assert "None" not in md and "0.000" not in md.split("## Capacity")[1].split("## Calibration")[0]


def test_report_does_not_describe_an_arrival_rate_the_search_did_not_use(tight):
    """The search sets every run's rate and request count; the config's 8 req/s and 1000
    requests were never simulated, so the scenario must not show them as if they were."""
    from analysis.report import render_markdown, scenario_section

    md = render_markdown([tight.to_dict()])
    assert "| arrivals | Poisson (rates set by the search) |" in md
    assert "poisson at" not in md.lower() and "1000 requests" not in md
    assert "| workload | requests per run set by the search (see run length); input lognormal" in md
    plain = dict(scenario_section(tight.config).tables[0][1])  # a simulation's scenario: as configured
    assert plain["arrivals"] == "poisson at 8.0 req/s"


def test_search_plot_shows_which_seed_each_point_came_from(tight):
    pytest.importorskip("plotly")
    from analysis import figures

    rec = tight.to_dict()
    fig = figures.capacity_search(rec)
    points = [t for t in fig.data if t.x and t.x[0] is not None]
    seeds = sorted({e["seed"] for e in rec["evaluations"]})
    panels = len(fig.layout.annotations)  # one subplot title per SLO metric
    assert sorted(t.name for t in points) == sorted([f"seed {s}" for s in seeds] * panels)
    legend = [t.name for t in fig.data if t.showlegend is not False and t.x == (None,)]
    assert {f"seed {s}" for s in seeds} | {"met SLO", "missed SLO"} <= set(legend)
    assert len({t.marker.symbol for t in points}) == len(seeds)  # one shape per seed
    for t in points[:len(seeds)]:
        seed = int(t.name.split()[1])
        evs = [e for e in rec["evaluations"] if e["seed"] == seed]
        assert list(t.x) == [e["rate"] for e in evs]
        assert list(t.marker.color) == ["#2e7d32" if e["passed"] else "#c62828" for e in evs]
        assert all(text.startswith(f"seed {seed}, {e['stage']} run, {e['rate']:.3g} req/s, p99_")
                   for text, e in zip(t.text, evs))


def test_short_runs_are_lengthened_until_steady():
    r = search("ttft_p99_ms=3000", seeds=1, sizing=RunSizing(duration_s=2, min_requests=20, confirm_s=0))
    passing = [e for e in r.evaluations if e.passed]
    assert passing and all(e.metrics["steady"] for e in passing)
    assert r.num_simulations > len(r.evaluations)  # some runs were repeated longer


def test_window_metrics_judge_after_warmup_and_flag_short_runs():
    res = simulate(None, overrides=SMALL + ["workload.num_requests=60", "workload.arrival.rate=20"])
    m = window_metrics(res.requests, warmup_fraction=0.5, slo_ttft_ms=1e9)
    assert m["measured"] < 60 and m["slo_attainment"] == 1.0
    assert m["steady"] == (m["arrival_span_s"] >= MIN_SPANS * m["mean_e2el_ms"] / 1000)
    assert run_length(10, 60, 200, 20000) == 600
    assert run_length(0.1, 60, 200, 20000) == 200
    assert run_length(1e6, 60, 200, 20000) == 20000


@pytest.mark.parametrize("text,bounds", [
    ("ttft_p99_ms=500,tpot_p99_ms=50", {"p99_ttft_ms": 500, "p99_tpot_ms": 50}),
    ("p90_e2el_ms=9000", {"p90_e2el_ms": 9000}),
    ("ttft_mean_ms=100, itl_median_ms=20", {"mean_ttft_ms": 100, "median_itl_ms": 20}),
])
def test_slo_spellings(text, bounds):
    assert parse_slo(text).bounds == bounds


@pytest.mark.parametrize("text,needle", [
    ("", "at least one bound"), ("ttft_p98_ms=5", "unknown bound"), ("ttft_p99_ms=-1", "> 0"),
    ("ttft_p99_ms", "key=value"), ("ttft_p99_ms=fast", "number"), ("ttft_p99_ms=5,attainment=2", "(0, 1]"),
])
def test_slo_errors_are_one_line_config_errors(text, needle):
    with pytest.raises(ConfigError, match=None) as exc:
        parse_slo(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_slo_check_treats_missing_statistics_as_violations():
    slo = parse_slo("ttft_p99_ms=100,attainment=0.9")
    assert slo.check({"p99_ttft_ms": 50, "slo_attainment": 0.95}) == (True, [])
    ok, bad = slo.check({"p99_ttft_ms": None, "slo_attainment": 0.5})
    assert not ok and len(bad) == 2


def test_price_table_overrides_and_errors(tmp_path):
    f = tmp_path / "prices.yaml"
    f.write_text("h100-sxm: 2.0\na100-sxm4-80gb: 1.1\n")
    table = price_table([str(f), "l40s=0.9"])
    assert table["h100-sxm"] == 2.0 and table["a100-80gb"] == 1.1 and table["l40s"] == 0.9
    with pytest.raises(ConfigError, match="--price"):
        price_table(["nosuchgpu=1"])
    with pytest.raises(ConfigError, match="--price"):
        price_table(["a10g=cheap"])
    assert usd_per_million_output_tokens(1000, 3.6) == pytest.approx(1.0)


@pytest.mark.parametrize("kw,needle", [
    ({"seeds": 0}, "--seeds"), ({"rel_tol": 1.5}, "--rel-tol"), ({"target_rate": -1}, "--target-rate"),
    ({"sizing": RunSizing(duration_s=0)}, "--duration"), ({"sizing": RunSizing(confirm_s=-1)}, "--confirm"),
    ({"workers": -1}, "--workers"), ({"ci_target": 1.5}, "--ci-target"), ({"max_seeds": 0}, "--max-seeds"),
])
def test_bad_arguments_are_config_errors(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        search("ttft_p99_ms=300", **kw)


def test_cli_capacity_prints_the_answer_and_writes_json(tmp_path):
    import json

    import typer
    from typer.testing import CliRunner

    from kvplan.cli import analysis as cli_analysis

    app = typer.Typer()
    app.command()(cli_analysis.capacity)
    args = ["--slo", "ttft_p99_ms=1000", "--seeds", "1", "--rel-tol", "0.2", "--duration", "10", "--confirm", "0",
            "--target-rate", "40", "--price", "a10g=2", "--no-progress", "--out", str(tmp_path / "c.json")]
    for item in SMALL:
        args += ["--set", item]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "replicas / GPUs needed" in res.output and "simulations" in res.output
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["kind"] == "capacity" and saved["usd_per_gpu_hour"] == 2.0
    bad = CliRunner().invoke(app, ["--slo", "ttft_p42_ms=1"])
    assert isinstance(bad.exception, ConfigError) and "--slo" in str(bad.exception)


def test_cli_capacity_sizes_the_interval_and_says_when_no_rate_meets_the_slo():
    import typer
    from typer.testing import CliRunner

    from kvplan.cli import analysis as cli_analysis

    app = typer.Typer()
    app.command()(cli_analysis.capacity)
    base = ["--duration", "10", "--confirm", "0", "--target-rate", "40", "--no-progress"]
    for item in SMALL:
        base += ["--set", item]
    res = CliRunner().invoke(app, ["--slo", "ttft_p99_ms=1000", "--seeds", "2", "--ci-target", "0.01",
                                   "--max-seeds", "3", *base], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())  # rich wraps long lines
    assert "Stopped at 3 seeds: interval ±" in out and "wider than the ±1% target" in out
    res = CliRunner().invoke(app, ["--slo", "ttft_p99_ms=0.001", "--seeds", "1", *base], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert out.count("no rate meets this SLO on one replica") >= 2  # the answer and the replicas
    assert "No rate meets this SLO on one replica (ttft_p99_ms<=0.001): even the lowest rate tried" in out
    assert "None" not in out and "0.000" not in out


def test_a_failed_or_stuck_prefetch_is_simulated_here_with_the_same_result(monkeypatch):
    """A worker that died leaves its pool task pending for ever (or raising): the search then
    runs the simulation itself, and the evaluation is the one a single process gives."""
    from sim import config as config_mod

    base = config_mod.build_config(None, SMALL)
    slo, sizing = parse_slo("ttft_p99_ms=1000,tpot_p99_ms=60"), RunSizing(duration_s=10, confirm_s=0)

    class Dead:  # what a lost task looks like from here: get() times out or raises
        def get(self, timeout=None):
            raise TimeoutError("worker gone")

    alone = capacity_mod._Evaluator(base, slo, sizing, None, 100, None)(4.0, 0)
    ev = capacity_mod._Evaluator(base, slo, sizing, None, 100, None)
    ev._ahead[ev.key(4.0, 0)] = Dead()
    ev._chains[1] = Dead()
    assert ev(4.0, 0) == alone
    assert ev(4.0, 1).seed == 1 and ev.runs == 2  # the dead chain of seed 1 is run here too
