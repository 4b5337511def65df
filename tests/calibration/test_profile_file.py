"""The profile file and the commands around it: a bad file is one line naming the file and the
field; a good one prices a ``kvplan simulate`` run; ``kvplan calibrate --trace`` fits without
torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.config import build_config
from sim.errors import ConfigError
from sim.pricing.machine import machine_fingerprint
from sim.pricing.profile_file import FORMAT, ProfileError, load_profile
from tests.calibration.helpers import TRUE, make_profile, synthetic_samples
from tests.test_light_core import run as kvplan_light

ROOT = Path(__file__).resolve().parents[2]


def kvplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_save_load_round_trip(profile_path):
    prof = load_profile(profile_path)
    assert prof.coefficients == TRUE and prof.gemm_knee == 64 and prof.path == str(profile_path)
    doc = json.loads(Path(profile_path).read_text())
    assert doc["format"] == FORMAT and "path" not in doc and doc["created"]
    assert prof.machine is None  # an old profile: it loads, and the pricer warns


def test_machine_round_trip(tmp_path):
    here = machine_fingerprint()
    prof = load_profile(make_profile(machine=here).save(tmp_path / "p.json"))
    assert prof.machine == here and set(here) == {"cpu", "cpu_flags", "logical_cores",
                                                  "torch_threads", "gpus"}


BAD = [
    (lambda d: d.update(format="kvplan-profile/0"), "format"),
    (lambda d: d.pop("hardware"), "hardware"),
    (lambda d: d.update(block_size=0), "block_size"),
    (lambda d: d["features"].append("flops"), "features[8]"),
    (lambda d: d["coefficients"].update(gemm_rows=-1.0), "coefficients.gemm_rows"),
    (lambda d: d["coefficients"].pop("intercept"), "coefficients.intercept"),
    (lambda d: d["coefficients"].update(extra=1.0), "coefficients.extra"),
    (lambda d: d.update(gemm_knee=None), "gemm_knee"),
    (lambda d: d["fit"].pop("heldout_mape"), "fit.heldout_mape"),
    (lambda d: d.update(fit=[]), "fit"),
    (lambda d: d.update(machine=[]), "machine"),
    (lambda d: d.update(machine={"cpu_flags": "avx2"}), "machine.cpu_flags"),
    (lambda d: d.update(machine={"logical_cores": 0}), "machine.logical_cores"),
    (lambda d: d.update(machine={"gpus": ["H100"]}), "machine.gpus"),
]


@pytest.mark.parametrize("mutate, field", BAD, ids=[f for _, f in BAD])
def test_bad_profile_names_file_and_field(tmp_path, mutate, field):
    doc = make_profile().to_dict()
    mutate(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(ProfileError) as exc:
        load_profile(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}: {field}") and "\n" not in msg


def test_unreadable_profiles(tmp_path):
    with pytest.raises(ProfileError, match="profile file not found"):
        load_profile(tmp_path / "none.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ProfileError, match=r"x\.json: not valid JSON \(line 1\)"):
        load_profile(tmp_path / "x.json")


def test_config_keys_are_validated(tmp_path, profile_path):
    assert build_config(None)["cost_model"]["profile"] is None
    assert build_config(None)["kv_cache"]["num_gpu_blocks"] is None
    cfg = build_config(None, [f"cost_model.profile={profile_path}", "kv_cache.num_gpu_blocks=10"])
    assert cfg["cost_model"]["profile"] == str(profile_path)
    with pytest.raises(ConfigError, match="kv_cache.num_gpu_blocks: expected an integer >= 1"):
        build_config(None, ["kv_cache.num_gpu_blocks=0"])
    with pytest.raises(ConfigError, match="cost_model.profile: expected a path"):
        build_config(None, ["cost_model.profile=3"])
    with pytest.raises(ConfigError, match=r"cost_model.profile: .*none\.json: profile file not found"):
        build_config(None, [f"cost_model.profile={tmp_path / 'none.json'}"])


def test_cli_simulate_with_profile_and_bad_profile(tmp_path, profile_path):
    proc = kvplan("simulate", "--set", "model=smollm2-135m", "--set", f"cost_model.profile={profile_path}",
                  "--set", "workload.num_requests=50", "--set", "workload.arrival.rate=2", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["completed"] == 50 and "ProfileCostModel" in summary["scenario"]["cost_model"]
    doc = make_profile().to_dict()
    doc["coefficients"]["intercept"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    line = one_line_error(kvplan("simulate", "--set", f"cost_model.profile={bad}"))
    assert "cost_model.profile" in line and "coefficients.intercept" in line and str(bad) in line
    line = one_line_error(kvplan("validate", "--profile", str(bad), "--out", str(tmp_path / "v")))
    assert "coefficients.intercept" in line


def test_calibrate_from_trace_runs_in_the_light_core(tmp_path):
    """No torch: fitting a trace someone else recorded needs only NumPy and SciPy."""
    s = synthetic_samples(n=200, noise=0.01)
    trace = tmp_path / "steps.jsonl"
    t, lines = 0.0, []
    for i in range(s.n):
        rec = {k: int(v[i]) for k, v in s.cols.items()}
        lines.append(json.dumps({"step": i, "start": t, "seconds": float(s.seconds[i]), **rec}))
        t += float(s.seconds[i])  # back to back: the step period is the measured seconds
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "p.json"
    proc = kvplan_light("calibrate", "--trace", str(trace), "--model", "smollm2", "--dtype", "bfloat16",
                        "--out", str(out), "--warmup-steps", "0")
    assert proc.returncode == 0, proc.stderr
    assert "held-out steps" in proc.stdout and "wrote" in proc.stdout
    prof = load_profile(out)
    assert prof.source == {"kind": "trace", "files": [str(trace)], "warmup_steps": 0}
    assert prof.fit["heldout_mape"] < 0.03 and prof.gemm_knee == 64
    assert "torch" not in prof.software
    line = one_line_error(kvplan_light("calibrate", "--trace", str(tmp_path / "missing.jsonl")))
    assert "missing.jsonl: trace file not found" in line
    line = one_line_error(kvplan_light("validate", "--profile", str(out), "--out", str(tmp_path / "v")))
    assert "needs torch" in line
