"""The simulator is the light core: it must run with torch, triton, transformers, streamlit,
plotly, pandas and ray absent (they are extras). Simulated here by blocking their import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BLOCK = """
import sys
class _Block:
    HEAVY = ("torch", "triton", "transformers", "streamlit", "plotly", "pandas", "ray", "gguf")
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.HEAVY:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not in the light core)")
        return None
sys.meta_path.insert(0, _Block())
sys.argv = ["kvplan"] + sys.argv[1:]
from kvplan.cli.main import main
main()
"""


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_simulate_runs_without_heavy_extras():
    proc = run("simulate", "--set", "workload.num_requests=50", "--json")
    assert proc.returncode == 0, proc.stderr
    assert '"completed": 50' in proc.stdout


def test_analysis_commands_load_without_heavy_extras():
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    for cmd in ("simulate", "capacity", "sweep", "ab", "report"):
        assert cmd in proc.stdout
    proc = run("ab", "--help")
    assert proc.returncode == 0, proc.stderr
