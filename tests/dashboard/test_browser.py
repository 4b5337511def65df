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


NEEDLES = ("What-if", "A/B", "Capacity", "Sweep / Pareto", "Validation", "Output tok/s per GPU",
           "Download report (HTML)")


def test_dashboard_renders_in_headless_chromium(chromium, server, tmp_path):
    sync_api = chromium
    shot = tmp_path / "dashboard.png"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(server, timeout=60_000)
            page.get_by_text("TTFT p99 (ms)").first.wait_for(timeout=120_000)
            # Streamlit renders in several passes: wait for each element, not only the first.
            for needle in NEEDLES:
                page.get_by_text(needle).first.wait_for(timeout=60_000)
            page.screenshot(path=str(shot), full_page=True)
            text = page.inner_text("body")
        finally:
            browser.close()
    for needle in NEEDLES:
        assert needle in text, needle
    assert "Traceback" not in text
    assert shot.stat().st_size > 20_000
    if os.environ.get("KVPLAN_SCREENSHOT_DIR"):
        out = Path(os.environ["KVPLAN_SCREENSHOT_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, out / shot.name)
