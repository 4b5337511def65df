"""Every dashboard page under streamlit's AppTest: the default run works, a changed widget
changes the result, and invalid input shows an error beside its field (never a traceback)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from calibration.validation_file import write_validation  # noqa: E402

PAGES = Path(__file__).resolve().parents[2] / "dashboards" / "views"


def page(name: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / name), default_timeout=180)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label))


def as_ms(tile: str) -> float:
    """A latency tile's value (``12.3 ms``, ``1.50 s``, ``21.8 min``) in milliseconds."""
    number, unit = tile.replace(",", "").split()
    return float(number) * {"ms": 1.0, "s": 1000.0, "min": 60_000.0}[unit]


def errors(block) -> list[str]:
    return [e.value for e in block.error]


def test_app_entry_point_runs_the_plan_page():
    """Plan is first in the menu and the default page (tests/dashboard/test_plan_page.py)."""
    at = AppTest.from_file(str(PAGES.parent / "app.py"), default_timeout=180).run()
    assert not at.exception
    assert at.title[0].value == "Plan"


def test_what_if():
    at = page("what_if.py")
    assert metric(at, "Completed / rejected") == "300 / 0"
    assert len(at.get("plotly_chart")) >= 3 and len(at.get("download_button")) == 2
    before = metric(at, "TTFT p99")
    at.sidebar.number_input(key="wi.workload.arrival.rate").set_value(20.0).run()
    assert not at.exception and metric(at, "TTFT p99") != before
    # invalid input: the message appears in the sidebar, where the field is
    at.sidebar.text_area(key="wi.overrides").set_value("kv_cache.block_size=0").run()
    assert not at.exception
    assert any("kv_cache.block_size" in e for e in errors(at.sidebar))
    at.sidebar.text_area(key="wi.overrides").set_value("").run()
    at.text_input(key="wi.curve.rates").set_value("2, fast").run()
    assert not at.exception and any("'fast' is not a number" in e for e in errors(at.main))


def test_what_if_runs_on_a_calibrated_profile():
    """The step-cost model can be a profile from calibration/profiles/ instead of the roofline;
    the summary then says which one priced the steps."""
    at = page("what_if.py")
    box = at.sidebar.selectbox(key="wi.cost_model.profile")
    profiles = [o for o in box.options if o != "roofline"]
    assert any(p.endswith("smollm2-135m_bf16_cpu.json") for p in profiles)
    at.sidebar.selectbox(key="wi.model").set_value("smollm2-135m")
    at.sidebar.number_input(key="wi.workload.arrival.rate").set_value(1.0)
    at.sidebar.number_input(key="wi.workload.input_len.mean").set_value(20)
    at.sidebar.number_input(key="wi.workload.output_len.mean").set_value(40)
    at.run()
    on_a100 = as_ms(metric(at, "TPOT p99"))
    box.set_value(next(p for p in profiles if p.endswith("smollm2-135m_bf16_cpu.json"))).run()
    assert not at.exception and not errors(at.sidebar)
    # A 2-core CPU decodes SmolLM2 far slower than the A100 roofline says an A100 would.
    assert as_ms(metric(at, "TPOT p99")) > 5 * on_a100
    assert any("calibration profile" in c.value and "bfloat16" in c.value for c in at.caption)


def test_what_if_model_that_does_not_fit_is_explained():
    at = page("what_if.py")
    at.sidebar.selectbox(key="wi.model").set_value("llama-3.1-70b").run()
    assert not at.exception
    assert any("needs" in e and "GB" in e for e in errors(at.sidebar))


def test_ab():
    at = page("ab.py")
    # Default: contiguous B is worse on TTFT p99, so the headline is red, not green.
    assert not at.success and "is worse than" in at.error[0].value
    table = at.dataframe[0].value
    assert "B worse" in set(table["verdict"])
    # Every cell is the shared formatter's text: separators, signed differences, no raw floats.
    ttft = table[table["metric"] == "TTFT p99 (ms)"].iloc[0]
    assert ttft["B - A"].startswith("+") and ttft["B - A"].endswith("%)")
    assert all(isinstance(v, str) for v in table.drop(columns="metric").to_numpy().ravel())
    at.selectbox(key="abB.kv_cache.allocator").set_value("paged").run()
    assert not at.exception
    assert "No metric differs significantly" in at.info[0].value
    at.selectbox(key="abA.scheduler.policy").set_value("orca").run()
    at.number_input(key="abA.scheduler.max_num_batched_tokens").set_value(512).run()
    assert not at.exception
    assert any("max_num_batched_tokens" in e for e in errors(at.main))


def test_capacity():
    at = page("capacity.py")
    assert "One replica sustains" in at.success[0].value
    assert int(metric(at, "Simulations")) >= 3
    # The default run's interval is within +-10% of the estimate, or the page says why not.
    half = metric(at, "95% interval of the estimate")
    if float(half.strip("±%")) > 10:
        assert any("Interval target not met. Stopped at" in w.value for w in at.warning)
    else:
        assert "Interval within ±10%" in at.success[0].value
    # The per-seed table: readable headers, every cell text, rates with two decimals, no None.
    table = at.dataframe[0].value
    assert list(table.columns[:3]) == ["Seed", "Highest rate meeting the SLO (req/s)",
                                       "Lowest rate missing it (req/s)"]
    assert len(table) >= 2 and all(isinstance(v, str) for v in table.to_numpy().ravel())
    assert all(re.fullmatch(r"[\d,]+\.\d\d|—", v) for v in table.iloc[:, 1:3].to_numpy().ravel())
    assert "None" not in table.to_string()
    replicas = metric(at, "Replicas for")
    at.number_input(key="cap.target").set_value(400.0).run()  # re-planned without simulating
    assert not at.exception and metric(at, "Replicas for") != replicas
    at.text_input(key="cap.slo").set_value("ttft_p99_ms=500,tpot_p42_ms=50").run()
    assert not at.exception and any("tpot_p42_ms" in e for e in errors(at.main))


def test_capacity_when_no_rate_meets_the_slo():
    """An SLO nothing can meet: the headline and the tile say so, with the lowest rate tried,
    and no tile shows 0.00 req/s or $0.000 per million tokens."""
    at = page("capacity.py")
    at.text_input(key="cap.slo").set_value("ttft_p99_ms=0.001").run()
    assert not at.exception and not at.success
    assert at.error[0].value.startswith("No rate meets this SLO on one replica (ttft_p99_ms<=0.001): "
                                        "even the lowest rate tried")
    assert metric(at, "Capacity per replica") == "no rate meets this SLO on one replica"
    labels = [m.label for m in at.metric]
    assert not any(label.startswith(("$ per million", "Output tok/s", "Replicas for")) for label in labels)
    shown = [m.value for m in at.metric] + [e.value for e in at.error]
    assert not any("None" in str(v) or "0.000" in str(v) for v in shown)
    assert "—" in at.dataframe[0].value["Highest rate meeting the SLO (req/s)"].tolist()


def test_capacity_in_concurrent_clients():
    """The client mode: the answer in clients, each seed bracketed to one client, and a target
    number of clients sized by simulating the fleet."""
    at = page("capacity.py")
    at.radio(key="cap.mode").set_value("concurrent clients").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "concurrent clients" in at.success[0].value
    clients = int(metric(at, "Clients per replica"))
    table = at.dataframe[0].value
    assert list(table.columns[:3]) == ["Seed", "Most clients meeting the SLO", "Fewest clients missing it"]
    assert all(int(hi) == int(lo) + 1 for lo, hi in zip(table.iloc[:, 1], table.iloc[:, 2]))
    assert clients == min(int(x) for x in table.iloc[:, 1])
    at.number_input(key="cap.target_clients").set_value(3 * clients).run()
    assert not at.exception and int(metric(at, f"Replicas for {3 * clients} clients")) >= 3


def test_sweep():
    at = page("sweep.py")
    assert "6 configurations" in at.success[0].value
    at.text_area(key="sw.grid").set_value("scheduler.max_num_seqs=8,32").run()
    assert not at.exception and "2 configurations" in at.success[0].value
    at.text_area(key="sw.grid").set_value("scheduler.max_num_seqs=8,0").run()
    assert not at.exception and any("--grid point scheduler.max_num_seqs=0" in e for e in errors(at.main))


def test_validation(tmp_path):
    at = page("validation.py")
    assert "validation.json" in at.info[0].value
    good = write_validation(tmp_path / "validation.json",
                            [{"name": "p99_ttft_ms", "real": 100.0, "predicted": 120.0},
                             {"name": "mean_tpot_ms", "real": 20.0, "predicted": 19.0}],
                            source={"profile": "profiles/test.json"},
                            samples={"ttft_ms": {"real": [1.0, 2.0], "predicted": [1.5, 2.5]}})
    at.text_input(key="val.path").set_value(str(good)).run()
    assert not at.exception
    assert metric(at, "Mean absolute error") == "12.5%" and metric(at, "Metrics") == "2"
    other = write_validation(tmp_path / "other.json", [{"name": "p99_ttft_ms", "real": 100.0, "predicted": 101.0}])
    at.text_input(key="val.path").set_value(str(other)).run()
    assert metric(at, "Mean absolute error") == "1.0%"
    bad = tmp_path / "bad.json"
    bad.write_text('{"metrics": [{"name": "x", "real": "n/a", "predicted": 1}]}')
    at.text_input(key="val.path").set_value(str(bad)).run()
    assert not at.exception and any("metrics[0].real" in e for e in errors(at.main))


def test_dashboard_command_runs_streamlit_on_the_app(monkeypatch):
    import subprocess

    import typer

    from kvplan.cli import analysis as cli_analysis

    seen = {}
    monkeypatch.setattr(subprocess, "call", lambda cmd: seen.setdefault("cmd", cmd) and 0)
    with pytest.raises(typer.Exit):
        cli_analysis.dashboard(port=8999, address="127.0.0.1", open_browser=False)
    cmd = seen["cmd"]
    assert cmd[1:4] == ["-m", "streamlit", "run"] and Path(cmd[4]) == PAGES.parent / "app.py"
    assert "8999" in cmd and cmd[cmd.index("--server.headless") + 1] == "true"
