"""``kvplan report``'s HTML stays small: plotly.js is loaded once per report, by default from
a file written beside it (issue #25), and every figure is still drawn by it."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("plotly")

from plotly.offline import get_plotlyjs, get_plotlyjs_version  # noqa: E402

from analysis.report import write_report  # noqa: E402
from analysis.whatif import simulation_record  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

SPEC = r"<div class='kvplan-fig'[^>]*></div><script type='application/json' class='kvplan-fig-spec'>(.*?)</script>"
JS = re.compile(r"<script type='text/javascript'>(.*?)</script>", flags=re.S)


@pytest.fixture(scope="module")
def record():
    """The record of `kvplan simulate` with the default scenario (what `kvplan report` reads)."""
    return simulation_record(simulate(None), label="run")


def figures_drawn(page: str) -> int:
    """How many figure divs carry a JSON spec that the page's drawing script hands to Plotly."""
    specs = re.findall(SPEC, page, flags=re.S)
    assert len(specs) == page.count("class='kvplan-fig'")
    assert all("data" in json.loads(s) and "layout" in json.loads(s) for s in specs)
    scripts = JS.findall(page)
    assert len(scripts) == 1
    assert "document.querySelectorAll('.kvplan-fig')" in scripts[0] and "Plotly.newPlot(div" in scripts[0]
    return len(specs)


def test_the_default_report_is_small_and_loads_plotly_once_from_beside_it(record, tmp_path):
    out = tmp_path / "report.html"
    paths = write_report([record], out)
    script = tmp_path / f"plotly-{get_plotlyjs_version()}.min.js"
    assert paths == [out, script]
    page = out.read_text()
    assert len(page.encode()) < 1_500_000  # was 2.08 MB with plotly.js embedded
    assert script.read_text() == get_plotlyjs()
    # plotly.js once, by relative path: nothing fetched from the network
    assert re.findall(r"<script[^>]*src='([^']*)'", page) == [script.name]
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "atob(" not in page and "DecompressionStream" not in page
    assert figures_drawn(page) >= 5
    # a second report in the folder shares the script, left as it is
    before = script.stat().st_mtime_ns
    assert write_report([record], tmp_path / "again.html")[-1] == script
    assert script.stat().st_mtime_ns == before


def test_the_inline_report_embeds_plotly_exactly_once(record, tmp_path):
    out = write_report([record], tmp_path / "report.html", plotly="inline")
    assert out == [tmp_path / "report.html"]
    page = out[0].read_text()
    assert not list(tmp_path.glob("*.js")) and "src=" not in page
    assert page.count("atob(") == 1 and page.count("DecompressionStream('gzip')") == 1
    assert len(page.encode()) < 2_200_000  # plotly.js gzipped once: 1.96 MB of it
    assert figures_drawn(page) >= 5


def test_a_markdown_report_writes_no_script(tmp_path):
    rec = {"kind": "validation", "source": {}, "samples": {}, "mape": 0.0, "max_abs_error": 0.0,
           "metrics": [{"name": "a", "unit": "ms", "real": 1.0, "predicted": 1.0, "error": 0.0}]}
    md = write_report([rec], tmp_path / "report.md")
    assert md == [tmp_path / "report.md"] and not list(tmp_path.glob("*.js"))


def test_an_unknown_plotly_mode_is_refused(record, tmp_path):
    with pytest.raises(ConfigError, match="--plotly cdn"):
        write_report([record], tmp_path / "report.html", plotly="cdn")
    assert not list(tmp_path.iterdir())
