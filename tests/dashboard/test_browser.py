"""The dashboard in a real browser: `streamlit run` headless, opened in Debian's headless
Chromium through playwright, a screenshot saved and the page's key text checked.

Skips cleanly when Chromium or playwright is absent (CI installs them: see docs/dashboard.md).
Set KVPLAN_SCREENSHOT_DIR to keep the screenshot."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("KVPLAN_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def chromium():
    """Skip before starting anything when there is no browser to drive."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install -y chromium)")
    return pytest.importorskip("playwright.sync_api")


@pytest.fixture
def server(chromium, tmp_path):
    port = _free_port()
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail("streamlit did not start:\n" + (tmp_path / "streamlit.log").read_text()[-2000:])
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


NEEDLES = ("What-if", "A/B", "Capacity", "Sweep / Pareto", "Cluster", "Validation", "Output tok/s per GPU",
           "Download report (HTML)")

#: Each page as a new user first sees it (the default inputs), what shows it has finished, and
#: the least number of plots it draws. The Validation page is given a committed validation.json.
#: The Cluster page computes only its open tab; each tab is opened by its URL (``?cl.tab=``).
#: The Plan page (the default) simulates only on its button: a tiny quick plan (``_quick_plan``).
PAGES = (
    ("plan", "", "Ranked deployments", 1),
    ("what-if", "what_if", "TTFT p99", 1),
    ("ab", "ab", "B differs from A", 1),
    ("capacity", "capacity", "Capacity per replica", 1),
    ("sweep", "sweep", "on the Pareto frontier", 1),
    ("cluster", "cluster", "Lowest mean TTFT", 1),
    ("cluster_offload", "cluster?cl.tab=KV%20offload", "Loaded back from the tiers", 1),
    ("cluster_pd", "cluster?cl.tab=Prefill/decode", "KV transfer, mean", 2),
    ("cluster_autoscaling", "cluster?cl.tab=Autoscaling", "Replicas mean / peak", 2),
    ("validation", "validation", "The simulator matches these runs", 1),
)
VALIDATION_EXAMPLE = APP.parents[1] / "benchmarks" / "results" / "validation_mixtral-tiny_cpu_rate3.json"


def _quick_plan(page) -> None:
    """The Plan page's inputs for a plan of seconds: a100-80gb only, at most 2 GPUs per replica
    (TP 1 and 2), 5 req/s, quick runs; then its button."""
    gpus = page.locator("[data-testid='stMultiSelect']").first
    gpus.get_by_role("button", name="Clear all").click()
    gpus.locator("input").fill("a100-80gb")
    gpus.locator("input").press("Enter")
    page.keyboard.press("Escape")
    for label, value in (("Max GPUs per replica (0 = to the node)", "2"), ("Target rate (req/s)", "5")):
        box = page.get_by_label(label)
        box.fill(value)
        box.press("Enter")
    page.get_by_text("Advanced").click()
    page.get_by_text("Quick runs (rough)").click()
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Plan", exact=True).click()


def _settle(page, min_plots: int, timeout_s: float = 240.0) -> None:
    """Wait until the script has finished (no running indicator, no skeleton placeholders) and
    the page's plots are drawn: Streamlit renders in several passes."""
    deadline = time.time() + timeout_s
    quiet = 0
    while time.time() < deadline:
        busy = page.locator("[data-testid='stStatusWidget'], [data-testid='stSkeleton']").count()
        plots = page.locator(".js-plotly-plot").count()
        quiet = quiet + 1 if not busy and plots >= min_plots else 0
        if quiet >= 3:  # idle for three polls in a row
            page.wait_for_timeout(800)  # canvases (tables) paint after the last delta
            return
        page.wait_for_timeout(500)
    pytest.fail(f"page did not settle within {timeout_s:.0f} s")


def test_every_page_renders_in_headless_chromium(chromium, server, tmp_path):
    """Every page, as a new user opens it: it finishes, draws its plots, shows no traceback;
    a full screenshot of each is saved (into KVPLAN_SCREENSHOT_DIR when set: docs/img via
    ``make screenshots``)."""
    sync_api = chromium
    out = Path(os.environ.get("KVPLAN_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    seen = {}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 3000})
            for name, path, needle, min_plots in PAGES:
                t0 = time.time()
                page.goto(f"{server}/{path}", timeout=60_000)
                if name == "plan":
                    _quick_plan(page)
                if name == "validation":
                    box = page.get_by_label("validation.json path")
                    box.fill(str(VALIDATION_EXAMPLE))
                    box.press("Enter")
                page.get_by_text(needle).first.wait_for(timeout=240_000)
                _settle(page, min_plots)
                assert page.locator("[data-testid='stException']").count() == 0, name
                seen[name] = (page.inner_text("body"), time.time() - t0)
                page.screenshot(path=str(out / f"dashboard_{name}.png"), full_page=True)
                if name == "plan":  # the top row opens in What-if, which simulates it
                    page.get_by_role("button", name="Open in What-if").first.click()
                    page.get_by_text("TTFT p99").first.wait_for(timeout=120_000)
                    assert page.url.endswith("/what_if"), page.url
                    assert page.locator("[data-testid='stException']").count() == 0
        finally:
            browser.close()
    what_if, _ = seen["what-if"]
    for needle in NEEDLES:
        assert needle in what_if, needle
    for name, (text, _) in seen.items():
        assert "Traceback" not in text, name
        assert (out / f"dashboard_{name}.png").stat().st_size > 20_000, name
    assert "Mean absolute error" in seen["validation"][0]  # the tiles under the verdict
    assert "Open in What-if" in seen["plan"][0] and "Not chosen, and why" in seen["plan"][0]


@pytest.mark.parametrize("plotly", ["local", "inline"])
def test_the_html_report_draws_its_plots_offline(chromium, tmp_path, plotly):
    """``kvplan report``'s HTML: plotly.js loaded once, from the file written beside it
    (local, the default) or embedded gzipped (inline), every figure drawn in a browser with no
    network."""
    from analysis.report import write_report
    from analysis.whatif import simulation_record
    from sim.api import simulate

    rec = simulation_record(simulate(None, overrides=["workload.num_requests=100"]), label="run")
    html_path = write_report([rec], tmp_path / "report.html", plotly=plotly)[0]
    n_figs = html_path.read_text().count("class='kvplan-fig'")
    with chromium.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.route("http*://**", lambda route: route.abort())  # offline
            page.goto(html_path.as_uri())
            page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length >= {n_figs}",
                                   timeout=60_000)
        finally:
            browser.close()
    assert n_figs >= 5
