"""The mypyc-compiled simulator gives exactly the results of the Python source, and a stale build
never runs (``sim.native``)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sim import native
from sim.api import simulate

ROOT = Path(__file__).resolve().parents[1]


def _random_scenarios(count: int, seed: int = 2026) -> list[list[str]]:
    """Override sets drawn over what changes the hot path: every scheduler and allocator, block
    sizes, tight memory (preemption by recompute and by swap), prefix caching over shared
    prefixes, speculative decoding, several replicas behind each router, async scheduling."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        policy = ("chunked", "vllm_v0", "chunked", "orca", "static")[i % 5]
        o = [f"scheduler.policy={policy}", f"workload.num_requests={rng.randint(60, 160)}",
             f"workload.arrival.rate={rng.choice([5, 20, 60])}",
             f"kv_cache.block_size={rng.choice([8, 16, 32])}", f"seed={rng.randint(0, 99)}"]
        contiguous = policy in ("orca", "static") and rng.random() < 0.5
        if contiguous:
            o += ["kv_cache.allocator=contiguous", f"kv_cache.reserve={rng.choice(['max', 'pow2'])}"]
        if rng.random() < 0.5:  # memory tight enough to preempt
            o += [f"kv_cache.num_gpu_blocks={rng.choice([40, 80, 160])}", "kv_cache.max_model_len=600",
                  "workload.input_len.max=300", "workload.output_len.max=300"]
            if policy in ("chunked", "vllm_v0"):
                o.append(f"scheduler.preemption={rng.choice(['recompute', 'swap'])}")
        if policy != "static" and not contiguous and rng.random() < 0.5:
            o += ["kv_cache.prefix_caching=true", "workload.prefix.num_prefixes=3",
                  f"workload.prefix.length={rng.choice([40, 100])}"]
        if policy == "chunked" and rng.random() < 0.7:
            o += [f"speculative.num_tokens={rng.choice([2, 4])}",
                  f"speculative.acceptance_rate={rng.choice([0.5, 0.8])}"]
        if rng.random() < 0.4:
            o += [f"parallel.num_replicas={rng.choice([2, 3])}",
                  f"parallel.router={rng.choice(['round_robin', 'least_kv', 'least_outstanding'])}"]
        if rng.random() < 0.3:
            o.append(f"scheduler.async_scheduling={rng.choice(['true', 'false'])}")
        out.append(o)
    return out


SCENARIOS = _random_scenarios(16)

_CHILD = """
import json, sys
from sim import native
from sim.api import simulate
out = []
for overrides in json.loads(sys.argv[1]):
    s = dict(simulate(None, overrides=overrides).summary)
    s.pop("simulator")
    out.append(s)
print(json.dumps({"native": native.status(), "summaries": out}, sort_keys=True, default=str))
"""


def _run_child(env_extra: dict) -> dict:
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(SCENARIOS)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_random_scenarios_are_valid_and_varied():
    """The scenarios below must really run and really exercise what they claim."""
    preempted = prefix_hits = spec = replicas = 0
    for overrides in SCENARIOS:
        s = simulate(None, overrides=overrides).summary
        assert s["completed"] + s["rejected"] == s["num_requests"], overrides
        preempted += s["kv_cache"]["preemptions"] > 0
        prefix_hits += (s["kv_cache"].get("prefix_cache_hit_rate") or 0) > 0
        spec += any("speculative.num_tokens" in o for o in overrides)
        replicas += any("num_replicas" in o for o in overrides)
    assert preempted >= 3 and prefix_hits >= 3 and spec >= 2 and replicas >= 3, \
        (preempted, prefix_hits, spec, replicas)


@pytest.mark.skipif(not native.status()["compiled"],
                    reason=f"simulator not compiled here ({native.status()['reason']})")
def test_compiled_simulator_equals_python_source_on_random_scenarios():
    compiled = _run_child({})
    pure = _run_child({native.PURE_ENV: "1"})
    assert compiled["native"]["compiled"] is True
    assert pure["native"]["compiled"] is False
    for overrides, a, b in zip(SCENARIOS, compiled["summaries"], pure["summaries"]):
        assert a == b, overrides


def test_a_changed_source_makes_the_build_stale(tmp_path, monkeypatch):
    """An edited module is never shadowed by its old compiled form: the manifest no longer
    matches, so everything loads from source."""
    manifest = tmp_path / "manifest.json"
    sources = {m: native.digest(native.source_path(m)) for m in native.MODULES}
    monkeypatch.setattr(native, "MANIFEST", manifest)
    monkeypatch.setattr(native, "built_files", lambda: [Path("x.so")])
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    manifest.write_text(json.dumps({"sources": sources}))
    assert native.stale_reason() is None
    sources["sim.policies.kv.paged"] = "0" * 64
    manifest.write_text(json.dumps({"sources": sources}))
    assert "sim/policies/kv/paged.py changed" in native.stale_reason()
    manifest.write_text("{")
    assert "no build manifest" in native.stale_reason()
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert "KVPLAN_PURE_PYTHON" in native.stale_reason()


def test_the_source_first_finder_loads_every_compiled_module_from_python():
    finder = native._SourceFirst()
    for module in native.MODULES:
        spec = finder.find_spec(module)
        assert spec is not None and spec.origin.endswith(".py") and Path(spec.origin).exists()
    assert finder.find_spec("sim.api") is None
