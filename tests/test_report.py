"""Reports and validation.json: self-contained HTML, the same content as Markdown, saved
results reload, and the validation format is checked field by field."""

from __future__ import annotations

import json
import re

import pytest
import typer
from typer.testing import CliRunner

from kvplan.cli import analysis as cli_analysis
from analysis.ab import run_ab
from analysis.capacity import RunSizing, find_capacity
from analysis.report import load_record, render_html, render_markdown, write_report
from analysis.slo import parse_slo
from analysis.sweep import parse_grid, run_sweep
from calibration.validation_file import ValidationFileError, load_validation, write_validation
from sim.api import simulate
from sim.errors import ConfigError

SMALL = ["hardware=a10g", "workload.output_len.mean=48", "workload.output_len.max=128",
         "workload.input_len.max=512"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("results")
    cap = find_capacity(None, parse_slo("ttft_p99_ms=1000"), seeds=1, rel_tol=0.2, target_rate=25,
                        sizing=RunSizing(duration_s=10, confirm_s=20), overrides=SMALL).to_dict()
    ab = run_ab(None, {"scheduler": {"max_num_seqs": 8}}, seeds=1, num_bootstrap=100,
                overrides=SMALL + ["workload.num_requests=80", "workload.arrival.rate=10"]).to_dict()
    sw = run_sweep(None, parse_grid(["scheduler.max_num_seqs=8,64"]), workers=1,
                   overrides=SMALL + ["workload.num_requests=60"]).to_dict()
    simulate(None, overrides=SMALL + ["workload.num_requests=50"]).write(d / "run")
    val = write_validation(d / "validation.json", [
        {"name": "p99_ttft_ms", "real": 100.0, "predicted": 110.0},
        {"name": "output_throughput", "real": 2000.0, "predicted": 1900.0, "unit": "tok/s"}],
        source={"profile": "profiles/a10g-llama.json", "hardware": "a10g", "model": "llama-3.1-8b"},
        samples={"ttft_ms": {"real": [10.0, 20.0, 30.0], "predicted": [12.0, 19.0, 33.0]}})
    paths = {}
    for name, rec in (("capacity", cap), ("ab", ab), ("sweep", sw)):
        paths[name] = d / f"{name}.json"
        paths[name].write_text(json.dumps(rec))
    paths["run"], paths["validation"] = d / "run", val
    return paths


def test_saved_results_reload_as_records(saved):
    kinds = {name: load_record(p)["kind"] for name, p in saved.items()}
    assert kinds == {"capacity": "capacity", "ab": "ab", "sweep": "sweep", "run": "simulation",
                     "validation": "validation"}
    assert load_record(saved["run"] / "summary.json")["timeline"]["time_s"]


def test_html_is_self_contained_with_every_section(saved):
    page = render_html([load_record(p) for p in saved.values()], title="Budget 2025")
    assert page.startswith("<!DOCTYPE html>") and "<title>Budget 2025</title>" in page
    assert page.count("<script type='text/javascript'>") == 1  # plotly.js inline, once
    outside_js = re.sub(r"<script type='text/javascript'>.*?</script>", "", page, count=1, flags=re.S)
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=", outside_js)  # nothing fetched
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", outside_js)
    # plotly.js once, gzipped (the file stays far under plotly.js's own 4.6 MB); every figure
    # a JSON spec the loader draws
    loader = re.search(r"<script type='text/javascript'>(.*?)</script>", page, flags=re.S).group(1)
    assert "DecompressionStream('gzip')" in loader and "Plotly.newPlot" in loader
    assert len(page) < 3_000_000
    specs = re.findall(r"<script type='application/json' class='kvplan-fig-spec'>(.*?)</script>", page, flags=re.S)
    assert len(specs) == page.count("class='kvplan-fig'") >= 5
    assert all("data" in json.loads(spec) for spec in specs)
    for heading in ("Scenario", "Capacity", "A/B", "Sweep and Pareto frontier", "Simulation: run",
                    "Validation: simulator against real runs", "Calibration provenance", "Assumptions"):
        assert f">{heading}" in page, heading
    assert "profiles/a10g-llama.json" in page and "RooflineCostModel" in page


def test_markdown_has_the_same_tables(saved):
    records = [load_record(p) for p in saved.values()]
    md = render_markdown(records)
    assert md.startswith("# kvplan report")
    cap = records[0]
    assert cap["headline"] in md and "| replicas / GPUs needed |" in md
    assert "| p99_ttft_ms (ms) | 100.00 | 110.00 | +10.0% |" in md
    assert "| metric | A | B | B - A | interval | verdict |" in md
    assert "## Assumptions" in md and "- Capacity is per replica" in md


def test_without_validation_the_report_says_so(saved):
    md = render_markdown([load_record(saved["capacity"])])
    assert "have not been checked against a real run" in md


def test_cli_report_writes_html_and_markdown(saved, tmp_path):
    app = typer.Typer()
    app.command()(cli_analysis.report)
    out, md = tmp_path / "report.html", tmp_path / "report.md"
    res = CliRunner().invoke(app, [str(saved["capacity"]), str(saved["validation"]), "--out", str(out),
                                   "--markdown", str(md)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>") and md.read_text().startswith("# kvplan report")


def test_report_input_errors(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ConfigError, match="not a kvplan result"):
        load_record(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_record(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match=".html or .md"):
        write_report([{"kind": "validation", **load_validation({"metrics": [{"name": "a", "real": 1, "predicted": 1}]})}],
                     tmp_path / "r.pdf")


def test_validation_format_normalises_and_computes_errors():
    rec = load_validation({"metrics": {"p99_ttft_ms": {"real": 200, "predicted": 150},
                                       "mean_tpot_ms": {"real": 20, "predicted": 21, "error": 0.05}}})
    by = {m["name"]: m for m in rec["metrics"]}
    assert by["p99_ttft_ms"]["error"] == pytest.approx(-0.25) and by["p99_ttft_ms"]["unit"] == "ms"
    assert rec["mape"] == pytest.approx(0.15) and rec["max_abs_error"] == pytest.approx(0.25)


@pytest.mark.parametrize("doc,needle", [
    ("{not json", "not valid JSON"),
    ('{"metrics": []}', "non-empty list"),
    ('{"metrics": [{"name": "x", "real": "fast", "predicted": 1}]}', "metrics[0].real"),
    ('{"metrics": [{"real": 1, "predicted": 1}]}', "metrics[0].name"),
    ('{"format": "other/2", "metrics": [{"name": "x", "real": 1, "predicted": 1}]}', "format"),
    ('{"metrics": [{"name": "x", "real": 1, "predicted": 1}], "samples": {"ttft_ms": {"real": 3}}}', "samples.ttft_ms.real"),
])
def test_validation_format_errors_name_the_field(doc, needle):
    with pytest.raises(ValidationFileError) as exc:
        load_validation(doc)
    assert needle in str(exc.value)


def test_reports_render_without_plotly(saved, monkeypatch):
    import sys

    import analysis

    monkeypatch.delattr(analysis, "figures", raising=False)
    monkeypatch.setitem(sys.modules, "analysis.figures", None)  # import fails
    records = [load_record(p) for p in saved.values()]
    assert "## Capacity" in render_markdown(records)
    page = render_html(records)
    assert "Plots need plotly" in page and "Plotly.newPlot" not in page


def test_the_validation_verdict_is_loud_above_the_error_that_matters():
    from calibration.validation_file import verdict
    from analysis.report import render_markdown

    def record(errors):
        metrics = [{"name": f"m{i}", "unit": "ms", "real": 100.0, "predicted": 100.0 * (1 + e),
                    "error": e} for i, e in enumerate(errors)]
        abs_e = [abs(e) for e in errors]
        return {"kind": "validation", "source": {}, "metrics": metrics, "samples": {},
                "mape": sum(abs_e) / len(abs_e), "max_abs_error": max(abs_e)}

    good, fair, bad = record([0.03, -0.05]), record([0.2, -0.15]), record([1.5, -1.2])
    assert verdict(good)[0] == "good" and "matches" in verdict(good)[1]
    assert verdict(fair)[0] == "fair"
    level, sentence = verdict(bad)
    assert level == "bad" and "does not match this machine: 135% mean error" in sentence
    assert "recalibrate" in sentence.lower()
    assert "does not match this machine" in render_markdown([bad])
    assert "does not match" not in render_markdown([good])


def test_validation_scatter_has_one_panel_per_unit_family():
    pytest.importorskip("plotly")
    from analysis.figures import validation_scatter

    metrics = [{"name": n, "unit": u, "real": r, "predicted": r * 1.1, "error": 0.1}
               for n, u, r in (("p99_ttft_ms", "ms", 120.0), ("mean_tpot_ms", "ms", 40.0),
                               ("output_throughput", "tok/s", 900.0), ("request_throughput", "req/s", 3.0),
                               ("num_steps", "", 1500.0))]
    fig = validation_scatter({"metrics": metrics})
    titles = [a.text for a in fig.layout.annotations]
    assert titles == ["latency (ms)", "throughput", "counts"]
    markers = [t for t in fig.data if t.mode == "markers"]
    assert [sorted(t.text) for t in markers] == [["mean_tpot_ms", "p99_ttft_ms"],
                                                 ["output_throughput", "request_throughput"], ["num_steps"]]
