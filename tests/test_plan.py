"""``kvplan plan`` (``analysis.plan``): the search space per GPU, the analytic ceiling is a
ceiling, the top row is what ``kvplan capacity`` answers for its keys and no listed row that
meets the SLO is cheaper, the same plan for any number of workers, an SLO nothing meets is a
verdict (exit 0) and bad input is one line. Steps priced by the roofline (tests run without the
measured tables), short runs."""

from __future__ import annotations

import json
import math

import pytest

from analysis.capacity import RunSizing, find_capacity
from analysis.plan import Candidate, Row, bound, candidates, parse_search, plan
from analysis.report import render_markdown
from analysis.slo import parse_slo
from sim.config import build_config
from sim.errors import ConfigError
from tests.test_cli import assert_one_line_error, kvplan

SLO_TEXT = "ttft_p99_ms=500,tpot_p99_ms=50"
#: Short runs for the finalists (the CLI uses kvplan capacity's defaults).
FULL = {"seeds": 2, "ci_target": 0, "sizing": RunSizing(duration_s=20.0, confirm_s=40.0), "fleet": "divide"}
SMALL = dict(hardware=["a100-80gb"], search={"tp": [1, 2]}, screen_s=15.0, full_search=FULL)


# --- the space --------------------------------------------------------------------------------


def test_the_knobs_each_gpu_supports():
    base = build_config(None)
    by_hw: dict[str, list[Candidate]] = {}
    for c in candidates(base, ["a100-80gb", "h100-sxm", "b200"], {}, None):
        by_hw.setdefault(c.hardware, []).append(c)
    weights = lambda cs: {dict(c.keys)["quantization.weights"] for c in cs}  # noqa: E731
    kv = lambda cs: {dict(c.keys)["kv_cache.dtype"] for c in cs}  # noqa: E731
    assert weights(by_hw["a100-80gb"]) == {"none"} and kv(by_hw["a100-80gb"]) == {"auto"}
    assert weights(by_hw["h100-sxm"]) == {"none", "fp8"} and kv(by_hw["h100-sxm"]) == {"auto", "fp8"}
    assert weights(by_hw["b200"]) == {"none", "fp8", "nvfp4"}
    assert {dict(c.keys)["parallel.tensor_parallel_size"] for c in by_hw["a100-80gb"]} == {1, 2, 4, 8}
    # A mixture of experts also varies expert parallelism, never on one GPU.
    moe = list(candidates(build_config(None, ["model=mixtral-8x7b"]), ["h100-sxm"], {"weights": ["none"],
                                                                                     "kv_dtype": ["auto"]}, 4))
    assert {(dict(c.keys)["parallel.tensor_parallel_size"], dict(c.keys)["parallel.enable_expert_parallel"])
            for c in moe} == {(1, False), (2, False), (2, True), (4, False), (4, True)}


def test_search_bounds_parse_and_refuse_nonsense():
    assert parse_search(["tp=1,2", "weights=none,fp8", "prefix_caching=true,false"]) == \
        {"tp": [1, 2], "weights": ["none", "fp8"], "prefix_caching": [True, False]}
    assert parse_search(["full"])["max_num_batched_tokens"] == ["default", 2048, 8192, 16384]
    with pytest.raises(ConfigError, match="unknown knob"):
        parse_search(["tensor=2"])
    with pytest.raises(ConfigError, match="given twice with different values"):
        parse_search(["tp=1,2", "tp=4"])
    with pytest.raises(ConfigError, match="whole numbers"):
        parse_search(["tp=0"])


def test_the_bound_is_a_ceiling_and_memory_is_checked_first():
    base = build_config(None)
    slo = parse_slo(SLO_TEXT)
    row = Row(Candidate("a100-80gb", (("parallel.tensor_parallel_size", 1),)))
    bound(row, base, slo, 100.0, {"a100-80gb": 1.79})
    assert row.status == "bounded" and row.pricing["source"] == "roofline"
    real = find_capacity(base, slo, seeds=1, ci_target=0, overrides=row.candidate.overrides,
                         sizing=RunSizing(duration_s=20.0, confirm_s=0.0), fleet="divide")
    assert 0 < real.planning_rate <= row.bound_rate
    assert row.cost_floor == math.ceil(100.0 / row.bound_rate) * 1.79
    big = Row(Candidate("a100-80gb", (("parallel.tensor_parallel_size", 1),)))
    bound(big, build_config(None, ["model=llama-3.1-70b"]), slo, 100.0, {"a100-80gb": 1.79})
    assert big.status == "does_not_fit" and "needs 141.1 GB of weights per GPU" in big.reason
    tight = Row(Candidate("a100-80gb", (("parallel.tensor_parallel_size", 1),)))
    bound(tight, base, parse_slo("tpot_p99_ms=1"), 100.0, {"a100-80gb": 1.79})
    assert tight.status == "infeasible" and "over the TPOT bound" in tight.reason


# --- the plan ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_plan():
    return plan(None, parse_slo(SLO_TEXT), 40.0, workers=1, **SMALL)


def test_the_top_row_is_what_capacity_answers_and_nothing_listed_is_cheaper(small_plan):
    best = small_plan.best
    assert best is not None and best.status == "planned" and best.meets_slo
    again = find_capacity(None, parse_slo(SLO_TEXT), target_rate=40.0, overrides=best.candidate.overrides, **FULL)
    assert again.gpus == best.gpus and again.usd_per_hour == best.usd_per_hour
    assert again.planning_rate > 0
    for r in small_plan.rows:
        if r.meets_slo:
            assert r.usd_per_hour >= best.usd_per_hour
        if r.status == "screened" and r.estimate_usd_per_hour is not None:
            assert r.estimate_usd_per_hour >= best.usd_per_hour  # else it would have been searched
    d = small_plan.to_dict()
    assert d["kind"] == "plan" and d["best"]["gpus"] == best.gpus
    assert d["num_simulations"] == sum(r.simulations for r in small_plan.rows)
    assert all(f["output_tokens_per_s_per_gpu"] > 0 for f in d["frontier"])


def test_the_same_plan_for_any_number_of_workers(small_plan):
    other = plan(None, parse_slo(SLO_TEXT), 40.0, workers=2, **SMALL)
    strip = lambda p: [(r.candidate, r.status, r.estimate_rate, r.planning_rate, r.usd_per_hour)  # noqa: E731
                       for r in p.rows]
    assert strip(other) == strip(small_plan)


def test_a_plan_reports_as_markdown(small_plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(small_plan.to_dict(), default=str))
    md = render_markdown([json.loads(path.read_text())])
    assert "## Plan" in md and small_plan.best.candidate.label() in md and "not chosen" in md


def test_a_screen_too_hopeful_does_not_prune_a_cheaper_deployment(monkeypatch):
    """The screen is one short seed: when it rates a candidate far above what the full search
    then finds, the rows pruned against that estimate are reopened, so that every row still
    pruned has a cost floor at or above the plan's best (a bound from a deployment searched in
    full, not from a guess). Here the first candidate screened is made to look 100x better."""
    import analysis.plan as plan_mod

    real, calls = plan_mod._screen, []

    def hopeful(args):
        out, n = real(args)
        calls.append(args[2])
        if len(calls) == 1 and out.get("rate"):
            out = {**out, "rate": out["rate"] * 100}
        return out, n

    monkeypatch.setattr(plan_mod, "_screen", hopeful)
    # the first screened is an L40S; the H100s' floors ($2.99/h) lie between its 100x estimate
    # ($1.25/h) and what the L40S rows cost when searched in full ($3.75/h and up)
    res = plan(None, parse_slo("ttft_p99_ms=300,tpot_p99_ms=25"), 40.0, hardware=["h100-sxm", "l40s"], workers=1,
               screen_s=15.0, full_search=FULL, search={"tp": [1]})
    best = res.best
    assert best is not None and best.meets_slo
    pruned = [r for r in res.rows if r.status == "pruned"]
    assert all(r.cost_floor >= best.usd_per_hour for r in pruned)
    assert all(f"${best.usd_per_hour:.2f}/h, the cheapest deployment searched in full" in r.reason for r in pruned)
    assert any("reopened" in n for n in res.notes)
    for r in res.rows:  # and nothing planned or screened is cheaper than the answer
        if r.meets_slo:
            assert r.usd_per_hour >= best.usd_per_hour


def test_conversations_get_prefix_caching_searched_and_equal_costs_plan_the_roomier_first():
    """A workload whose prompts repeat prefixes without ``workload.prefix`` (conversations'
    history here, a trace's hash ids likewise) gets prefix caching on and off as a knob; at one
    replica either way, the screen's higher rate (caching's) is the one searched in full."""
    sessions = ["workload.sessions={num_turns: {dist: fixed, mean: 3}, think_time_s: 2, "
                "new_message_len: {dist: fixed, mean: 200}}", "kv_cache.max_model_len=8192"]
    res = plan(None, parse_slo(SLO_TEXT), 5.0, hardware=["a100-80gb"], search={"tp": [1]}, overrides=sessions,
               workers=1, screen_s=15.0, full_search=FULL)
    assert res.search["prefix_caching"] == [True, False]
    by = {dict(r.candidate.keys)["kv_cache.prefix_caching"]: r for r in res.rows}
    assert by[True].estimate_rate > by[False].estimate_rate  # the history is reused
    assert res.best is by[True] and by[False].status == "screened"
    plain = plan(None, parse_slo(SLO_TEXT), 5.0, hardware=["a100-80gb"], search={"tp": [1]}, workers=1,
                 screen_s=15.0, full_search=FULL)
    assert "prefix_caching" not in plain.search and len(plain.rows) == 1


def test_an_slo_nothing_meets_is_a_verdict_not_an_error():
    res = plan(None, parse_slo("tpot_p99_ms=1"), 10.0, hardware=["a100-80gb"], search={"tp": [1]},
               screen_s=10.0, full_search=FULL)
    assert res.best is None and res.ranked == []
    assert res.headline().startswith("No deployment meets")
    assert all(r.status == "infeasible" for r in res.rows)


# --- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["--hardware", "h900"], "--hardware h900: unknown GPU 'h900'"),
    (["--price", "h900=2"], "h900"),
    (["--search", "tp=1,2", "--search", "tp=4"], "--search tp: given twice"),
    (["--set", "model=llama-3.1-70b", "--hardware", "a100-80gb", "--search", "tp=1"], "fits no GPU"),
    (["--target-rate", "-3"], "--target-rate"),
])
def test_bad_input_is_one_line(args, needle):
    base = ["plan", "--slo", SLO_TEXT, "--no-progress"]
    if "--target-rate" not in args:
        base += ["--target-rate", "10"]
    if "--hardware" not in args:
        base += ["--hardware", "a100-80gb"]
    proc = kvplan(*base, *args)
    assert_one_line_error(proc, needle)


def test_cli_plan_end_to_end_and_its_report(tmp_path):
    out = tmp_path / "plan.json"
    proc = kvplan("plan", "--slo", "tpot_p99_ms=1", "--target-rate", "5", "--hardware", "a100-80gb",
                  "--search", "tp=1", "--no-progress", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "No deployment meets" in proc.stdout
    rec = json.loads(out.read_text())
    assert rec["kind"] == "plan" and rec["best"] is None
    rep = kvplan("report", str(out), "--out", str(tmp_path / "plan.md"))
    assert rep.returncode == 0, rep.stderr
    assert "## Plan" in (tmp_path / "plan.md").read_text()


def test_the_public_api_names_and_stays_light():
    import subprocess
    import sys

    import kvplan
    from analysis.capacity import find_capacity
    from analysis.plan import plan as plan_fn
    from sim.api import simulate

    from analysis.client_capacity import find_client_capacity

    assert kvplan.plan is plan_fn and kvplan.simulate is simulate and kvplan.capacity is find_capacity
    assert kvplan.capacity_in_clients is find_client_capacity
    assert {"plan", "simulate", "capacity", "parse_slo"} <= set(dir(kvplan))
    with pytest.raises(AttributeError):
        kvplan.no_such_name  # noqa: B018
    proc = subprocess.run([sys.executable, "-c", "import sys, kvplan; from kvplan import plan, simulate, capacity, capacity_in_clients; "
                           "print(sorted(m for m in ('torch', 'streamlit', 'plotly', 'pandas') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_a_plan_for_concurrent_clients():
    """--concurrency N: the most clients one replica holds inside the SLO (bisection), then the
    whole fleet simulated with all N clients; the top row's fleet meets the SLO and one replica
    fewer would hold more clients per replica than the screen found possible."""
    res = plan(None, parse_slo(SLO_TEXT), concurrency=24, hardware=["a100-80gb"], search={"tp": [1]}, workers=1)
    best = res.best
    assert best is not None and best.meets_slo and best.clients_per_replica >= 1
    assert best.replicas >= math.ceil(24 / best.clients_per_replica)
    assert best.gpus == best.replicas * best.gpus_per_replica
    assert "24 concurrent clients" in res.headline()
    with pytest.raises(ConfigError, match="one of them"):
        plan(None, parse_slo(SLO_TEXT), 10.0, concurrency=4)


def test_pd_splits_are_candidates_sized_as_groups():
    assert parse_search(["pd=off,1:2"]) == {"pd": ["off", "1:2"]}
    with pytest.raises(ConfigError, match="prefill:decode"):
        parse_search(["pd=2"])
    base = build_config(None)
    cands = list(candidates(base, ["h100-sxm"], {"tp": [2], "weights": ["none"], "kv_dtype": ["auto"],
                                                   "pd": ["off", "1:2"]}, None))
    assert [c.label() for c in cands] == ["h100-sxm tp=2 w=none kv=auto",
                                          "P/D h100-sxm tp=2 w=none kv=auto prefill=1 decode=2"]
    rows = [Row(c) for c in cands]
    for r in rows:
        bound(r, base, parse_slo(SLO_TEXT), 50.0, {"h100-sxm": 3.0})
    alone, group = rows
    assert alone.gpus_per_replica == 2 and group.gpus_per_replica == 6  # 3 instances x TP2
    assert group.bound_rate == pytest.approx(3 * alone.bound_rate)


@pytest.mark.slow
def test_ray_gives_the_same_plan(small_plan):
    pytest.importorskip("ray")
    other = plan(None, parse_slo(SLO_TEXT), 40.0, backend="ray", **SMALL)
    assert [(r.candidate, r.status, r.estimate_rate) for r in other.rows] == \
        [(r.candidate, r.status, r.estimate_rate) for r in small_plan.rows]


def test_attention_data_parallelism_is_searched_for_experts_spread_over_the_ranks():
    base = build_config(None, ["model=mixtral-8x7b"])
    cands = list(candidates(base, ["h100-sxm"], {"tp": [2], "dp": [1, 2], "weights": ["none"],
                                                  "kv_dtype": ["auto"]}, None))
    labels = [c.label() for c in cands]
    assert "h100-sxm tp=2 dp=2 ep=True w=none kv=auto" in labels
    assert not any("dp=2 ep=False" in lb for lb in labels)  # DP only with the experts spread
    row = Row(next(c for c in cands if "dp=2" in c.label()))
    bound(row, base, parse_slo(SLO_TEXT), 10.0, {"h100-sxm": 3.0})
    assert row.gpus_per_replica == 4  # TP2 x DP2


def test_moe_tp_x_ep_is_searched_for_sglang_only():
    """``ep=off,on,2``: a number is SGLang's expert groups (MoE TP x EP), searched where it
    divides the GPUs into more than one group of more than one; vLLM has no such layout, and
    DP attention with TP 1 (experts over the DP ranks) is a candidate."""
    assert parse_search(["ep=off,on,2"]) == {"ep": [False, True, 2]}
    with pytest.raises(ConfigError, match="expert groups"):
        parse_search(["ep=1"])
    base = build_config(None, ["model=mixtral-8x7b"])
    knobs = {"tp": [1, 4], "dp": [1, 2], "ep": [False, True, 2], "weights": ["none"], "kv_dtype": ["auto"],
             "engine": ["vllm", "sglang"]}
    cands = list(candidates(base, ["h100-sxm"], knobs, None))
    layouts = {(dict(c.keys).get("engine.name"), dict(c.keys)["parallel.tensor_parallel_size"],
                dict(c.keys).get("parallel.data_parallel_size", 1),
                dict(c.keys)["parallel.enable_expert_parallel"],
                dict(c.keys).get("parallel.expert_parallel_size")) for c in cands}
    assert ("sglang", 4, 1, True, 2) in layouts and ("sglang", 4, 2, True, 2) in layouts
    assert ("sglang", 1, 2, True, 2) not in layouts       # 2 groups of 1 GPU: that is ep=on
    assert not any(e == "vllm" and size for e, _, _, _, size in layouts)
    assert ("vllm", 1, 2, True, None) in layouts          # DP2 attention + EP2, TP 1
    sg = next(c for c in cands if dict(c.keys).get("parallel.expert_parallel_size") == 2)
    assert "ep_size=2" in sg.label()
    row = Row(sg)
    bound(row, base, parse_slo(SLO_TEXT), 10.0, {"h100-sxm": 3.0})
    assert row.status != "does_not_fit" and row.gpus_per_replica in (4, 8)


def test_pd_groups_under_clients_are_a_verdict_not_a_crash():
    res = plan(None, parse_slo(SLO_TEXT), concurrency=8, hardware=["a100-80gb"], max_gpus=1,
               search=parse_search(["pd=off,1:1"]), workers=1)
    pd = [r for r in res.rows if r.candidate.label().startswith("P/D")]
    assert pd and all(r.status == "infeasible" and "not simulated with P/D" in r.reason for r in pd)
    assert res.best is not None and not res.best.candidate.label().startswith("P/D")


def test_engines_are_a_knob_and_both_are_planned():
    """``--engines vllm,sglang``: every deployment once per engine (SGLang's with its own release,
    its radix cache always on, no P/D groups), and the plan ranks both on the same requests."""
    base = build_config(None)
    cs = list(candidates(base, ["a100-80gb"], {"tp": [1], "engine": ["vllm", "sglang"],
                                               "pd": ["off", "1:1"]}, None))
    engines = [dict(c.keys).get("engine.name") for c in cs]
    assert engines.count("vllm") == 2 and engines.count("sglang") == 1   # no P/D for SGLang
    sg = next(c for c in cs if dict(c.keys).get("engine.name") == "sglang")
    assert dict(sg.keys)["engine.version"] == "0.5.14" and "engine=sglang" in sg.label()
    with pytest.raises(ConfigError, match="engine=trtllm"):
        parse_search(["engine=vllm,trtllm"])
    result = plan(None, parse_slo(SLO_TEXT), 20.0, workers=1, hardware=["a100-80gb"],
                  search={"tp": [1], "engine": ["vllm", "sglang"]}, screen_s=10.0, full_search=FULL)
    screened = {dict(r.candidate.keys)["engine.name"]: r for r in result.rows}
    assert set(screened) == {"vllm", "sglang"}
    assert result.best is not None and result.best.meets_slo


def test_cli_plan_engines_option(tmp_path):
    proc = kvplan("plan", "--slo", "tpot_p99_ms=1", "--target-rate", "5", "--hardware", "a100-80gb",
                  "--search", "tp=1", "--engines", "vllm,sglang", "--no-progress", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert {r["config"].get("engine.name") for r in rows} == {"vllm", "sglang"}
