"""A/B experiments: two serving configs on identical request streams (common random numbers),
per-metric differences with paired bootstrap intervals, a verdict that says when a
difference is not significant, and an overall verdict (``overall_verdict``) that the headline
leads with and the dashboard colours.

Why common random numbers: serving metrics swing more between two random workloads than
between two good schedulers; feeding both arms the very same requests (same arrival times,
same lengths, per seed) cancels that noise, so a small real difference is visible and two
identical configs differ by exactly zero.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, Union, cast

import numpy as np

from sim import config as config_mod
from analysis.formatting import MISSING, format_relative
from analysis.stats import paired_bootstrap
from sim.api import SimResult, build_workload, simulate
from sim.errors import ConfigError
from sim.metrics import meets_slo
from sim.policies.request import RequestState
from sim.workload.config import MAX_REQUESTS

MAX_BOOTSTRAP = 1_000_000  # resamples held in memory at once: more is a typo

ConfigLike = Union[dict, str, Path, None]


@dataclass(frozen=True)
class Metric:
    """A run statistic computable from per-request arrays (so it can be bootstrapped).

    ``important`` marks the numbers a capacity plan is sized on: tail latencies (SLOs are set
    on tails), tokens/s per GPU (the cost) and the SLO itself. B significantly worse on one of
    them makes the overall verdict "B worse"; means and medians explain a change but a B that
    is worse only there is "mixed".
    """

    name: str
    label: str
    unit: str
    higher_is_better: bool
    fn: Callable[[dict, np.ndarray], np.ndarray]
    needs_slo: bool = False
    important: bool = False


def _pct(column: str, q: float) -> Callable[[dict, np.ndarray], np.ndarray]:
    def stat(arm: dict, idx: np.ndarray) -> np.ndarray:
        x = arm[column][idx]
        return np.nanpercentile(x, q, axis=1) if arm[f"{column}_has_nan"] else np.percentile(x, q, axis=1)
    return stat


def _mean(column: str) -> Callable[[dict, np.ndarray], np.ndarray]:
    def stat(arm: dict, idx: np.ndarray) -> np.ndarray:
        x = arm[column][idx]
        return np.nanmean(x, axis=1) if arm[f"{column}_has_nan"] else x.mean(axis=1)
    return stat


def _per_second(column: str, per_gpu: bool = False) -> Callable[[dict, np.ndarray], np.ndarray]:
    def stat(arm: dict, idx: np.ndarray) -> np.ndarray:
        denom = arm["duration_s"] * (arm["num_gpus"] if per_gpu else 1)
        return arm[column][idx].sum(axis=1) / denom
    return stat


def _fraction(arm: dict, idx: np.ndarray) -> np.ndarray:
    return arm["good"][idx].mean(axis=1)


METRICS: tuple[Metric, ...] = (
    Metric("mean_ttft_ms", "TTFT mean", "ms", False, _mean("ttft_ms")),
    Metric("p99_ttft_ms", "TTFT p99", "ms", False, _pct("ttft_ms", 99), important=True),
    Metric("mean_tpot_ms", "TPOT mean", "ms", False, _mean("tpot_ms")),
    Metric("p99_tpot_ms", "TPOT p99", "ms", False, _pct("tpot_ms", 99), important=True),
    Metric("median_e2el_ms", "E2E latency median", "ms", False, _pct("e2el_ms", 50)),
    Metric("p99_e2el_ms", "E2E latency p99", "ms", False, _pct("e2el_ms", 99), important=True),
    Metric("output_throughput", "Output throughput", "tok/s", True, _per_second("output_tokens")),
    Metric("output_throughput_per_gpu", "Output throughput per GPU", "tok/s/GPU", True,
           _per_second("output_tokens", per_gpu=True), important=True),
    Metric("slo_attainment", "SLO attainment", "fraction", True, _fraction, needs_slo=True,
           important=True),
    Metric("goodput", "Goodput", "req/s", True, _per_second("good"), needs_slo=True, important=True),
)

#: Metrics whose significant worsening makes B worse overall (see ``Metric.important``).
IMPORTANT = frozenset(m.name for m in METRICS if m.important)

#: The overall verdict of an A/B and how loudly a reader should be told (dashboard colour:
#: success green, error red, warning amber, info blue).
OVERALL_LEVEL = {"B better": "success", "B worse": "error", "mixed": "warning",
                 "not significant": "info"}


@dataclass
class ABResult:
    label_a: str
    label_b: str
    config_a: dict
    config_b: dict
    seeds: list[int]
    confidence: float
    num_bootstrap: int
    rows: list[dict]
    differences: list[dict]
    samples: dict                       # per arm: TTFT/TPOT/E2EL of the first seed (for CDFs)
    summaries: dict                     # per arm: per-seed summaries (simulate's)
    notes: list[str] = field(default_factory=list)

    def verdict(self, metric: str) -> str:
        return next(r["verdict"] for r in self.rows if r["metric"] == metric)

    def overall(self) -> str:
        return overall_verdict(self.rows)

    def headline(self) -> str:
        """One sentence that leads with the overall verdict, then the significant differences
        grouped by which way they go (a sign alone does not say better or worse)."""
        a, b = _named("A", self.label_a), _named("B", self.label_b)
        overall = self.overall()
        if overall == "not significant":
            return (f"No metric differs significantly between {a} and {b} at "
                    f"{self.confidence:.0%} confidence over {len(self.seeds)} seed(s).")
        lead = {"B better": f"{b} is better than {a}", "B worse": f"{b} is worse than {a}",
                "mixed": f"{b} against {a} is mixed"}[overall]
        groups = [f"{side} on " + ", ".join(_effect(r) for r in self.rows if r["verdict"] == f"B {side}")
                  for side in ("worse", "better") if any(r["verdict"] == f"B {side}" for r in self.rows)]
        return (f"{lead}: " + "; ".join(groups) +
                f" ({self.confidence:.0%} confidence, {len(self.seeds)} seed(s)).")

    def to_dict(self) -> dict:
        return {"kind": "ab", "label_a": self.label_a, "label_b": self.label_b,
                "config_a": self.config_a, "config_b": self.config_b, "seeds": self.seeds,
                "confidence": self.confidence, "num_bootstrap": self.num_bootstrap,
                "rows": self.rows, "differences": self.differences, "samples": self.samples,
                "summaries": self.summaries, "notes": self.notes, "headline": self.headline(),
                "overall": self.overall()}


def run_ab(config_a: ConfigLike, config_b: ConfigLike, *, seeds: int = 3,
           num_requests: Optional[int] = None, overrides: Sequence[str] = (),
           confidence: float = 0.95, num_bootstrap: int = 1000,
           labels: tuple[str, str] = ("A", "B"),
           base_dirs: tuple[Optional[Path], Optional[Path]] = (None, None),
           on_run: Optional[Callable[[int, int], None]] = None,
           overrides_a: Sequence[str] = (), overrides_b: Sequence[str] = ()) -> ABResult:
    """Simulate both arms on the same request stream for ``seeds`` seeds and compare them.
    ``overrides`` set keys in both arms, then ``overrides_a`` / ``overrides_b`` in one arm each
    (one config against itself with ``engine.name=sglang`` on B compares the two engines).

    Both arms run A's workload (an A/B compares serving configs, not workloads; a note says so
    when B's workload section differs) and A's SLO (so attainment means the same in both).
    ``on_run(done, total)`` reports progress after every simulation.
    """
    if seeds < 1:
        raise ConfigError(f"--seeds: expected at least 1, got {seeds}")
    if not 0.5 <= confidence < 1:
        raise ConfigError(f"--confidence: expected a fraction in [0.5, 1), got {confidence}")
    if not 1 <= num_bootstrap <= MAX_BOOTSTRAP:
        raise ConfigError(f"--bootstrap: expected 1 to {MAX_BOOTSTRAP:,} resamples, got {num_bootstrap}")
    if num_requests is not None and not 1 <= num_requests <= MAX_REQUESTS:
        raise ConfigError(f"--num-requests: expected 1 to {MAX_REQUESTS:,}, got {num_requests}")
    extra = list(overrides) + ([f"workload.num_requests={int(num_requests)}"] if num_requests else [])
    cfg_a = config_mod.build_config(config_a, extra + list(overrides_a))
    cfg_b = config_mod.build_config(config_b, extra + list(overrides_b))
    notes = _notes(cfg_a, cfg_b)
    slo = cfg_a["slo"]
    cfg_b = copy.deepcopy(cfg_b)
    cfg_b["slo"] = dict(slo)
    has_slo = slo["ttft_ms"] is not None or slo["tpot_ms"] is not None
    runs_a, runs_b, sum_a, sum_b, samples = [], [], [], [], {}
    seed_list = [cfg_a["seed"] + i for i in range(seeds)]
    for i, seed in enumerate(seed_list):
        a_i, b_i = _with_seed(cfg_a, seed), _with_seed(cfg_b, seed)
        stream = build_workload(a_i, base_dirs[0])
        res_a = simulate(a_i, requests=stream, base_dir=base_dirs[0])
        if on_run:
            on_run(2 * i + 1, 2 * seeds)
        res_b = simulate(b_i, requests=stream, base_dir=base_dirs[1] or base_dirs[0])
        if on_run:
            on_run(2 * i + 2, 2 * seeds)
        runs_a.append(arm_arrays(res_a, slo))
        runs_b.append(arm_arrays(res_b, slo))
        sum_a.append(_compact(res_a.summary))
        sum_b.append(_compact(res_b.summary))
        if i == 0:
            samples = {"A": _samples(runs_a[0]), "B": _samples(runs_b[0])}
    rng = np.random.default_rng(12345)
    rows = []
    for m in METRICS:
        if m.needs_slo and not has_slo:
            continue
        a_val = float(np.mean([_full(m, r) for r in runs_a]))
        b_val = float(np.mean([_full(m, r) for r in runs_b]))
        diff, lo, hi = paired_bootstrap(runs_a, runs_b, m.fn, num_samples=num_bootstrap,
                                        confidence=confidence, rng=rng)
        rows.append({
            "metric": m.name, "label": m.label, "unit": m.unit, "higher_is_better": m.higher_is_better,
            "a": a_val, "b": b_val, "diff": diff,
            "rel_diff": diff / a_val if a_val and math.isfinite(a_val) else None,
            "ci_low": lo, "ci_high": hi, "verdict": verdict(lo, hi, m.higher_is_better),
            "important": m.important,
        })
    return ABResult(labels[0], labels[1], cfg_a, cfg_b, seed_list, confidence, num_bootstrap, rows,
                    config_diff(cfg_a, cfg_b), samples, {"A": sum_a, "B": sum_b}, notes)


def verdict(ci_low: float, ci_high: float, higher_is_better: bool) -> str:
    """'not significant' when the interval of B - A covers 0 (or is undefined)."""
    if not (math.isfinite(ci_low) and math.isfinite(ci_high)) or ci_low <= 0 <= ci_high:
        return "not significant"
    b_higher = ci_low > 0
    return "B better" if b_higher == higher_is_better else "B worse"


def overall_verdict(rows: Sequence[dict]) -> str:
    """The verdict of the whole experiment from its per-metric rows.

    "not significant" when no metric differs; "B worse" when B is significantly worse on an
    important metric (a capacity plan would get more expensive or miss its SLO); "B better"
    when every significant difference favours B; otherwise "mixed" (B is worse only on
    secondary metrics). Rows saved before rows carried ``important`` use the metric table.
    """
    sig = [r for r in rows if r["verdict"] != "not significant"]
    if not sig:
        return "not significant"
    if any(r["verdict"] == "B worse" and r.get("important", r["metric"] in IMPORTANT) for r in sig):
        return "B worse"
    if all(r["verdict"] == "B better" for r in sig):
        return "B better"
    return "mixed"


def arm_arrays(result: SimResult, slo: dict) -> dict:
    """Per-request arrays in request-id order (NaN where a latency is undefined)."""
    reqs = sorted(result.requests, key=lambda r: _id_key(r.request_id))
    done = np.array([r.state is RequestState.FINISHED and bool(r.token_times) for r in reqs])
    # A finished request with tokens has a TTFT and an E2E latency.
    ttft = np.array([cast(float, r.ttft) * 1000 if d else np.nan for r, d in zip(reqs, done)], dtype=float)
    e2el = np.array([cast(float, r.e2el) * 1000 if d else np.nan for r, d in zip(reqs, done)], dtype=float)
    tpot = np.array([(r.tpot * 1000 if r.tpot is not None else np.nan) if d else np.nan
                     for r, d in zip(reqs, done)], dtype=float)
    out_tok = np.array([r.num_output_tokens if d else 0 for r, d in zip(reqs, done)], dtype=float)
    good = np.array([meets_slo(r, slo["ttft_ms"], slo["tpot_ms"]) for r in reqs], dtype=float)
    arm = {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el, "output_tokens": out_tok, "good": good,
           "duration_s": float(result.summary["duration_s"]),
           "num_gpus": result.summary["scenario"]["gpus_per_replica"] * result.summary["scenario"]["num_replicas"]}
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        arm[f"{col}_has_nan"] = bool(np.isnan(arm[col]).any())
    return arm


def config_diff(a: dict, b: dict) -> list[dict]:
    """Dotted keys whose values differ between two configs (what the experiment changes)."""
    fa, fb = _flatten(a), _flatten(b)
    keys = sorted(set(fa) | set(fb))
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in keys if fa.get(k) != fb.get(k)]


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _notes(a: dict, b: dict) -> list[str]:
    notes = []
    if a["workload"] != b["workload"]:
        notes.append("B's workload section differs from A's; both arms ran A's request stream "
                     "(an A/B compares serving configs on the same requests)")
    if a["slo"] != b["slo"]:
        notes.append("B's SLO differs from A's; both arms are judged against A's SLO")
    if a["seed"] != b["seed"]:
        notes.append("B's seed differs from A's; both arms used A's seeds")
    return notes


def _with_seed(cfg: dict, seed: int) -> dict:
    out = copy.deepcopy(cfg)
    out["seed"] = seed
    return out


def _full(m: Metric, arm: dict) -> float:
    n = len(arm["ttft_ms"])
    return float(m.fn(arm, np.arange(n)[None, :])[0]) if n else math.nan


def _samples(arm: dict, limit: int = 4000) -> dict:
    out = {}
    for col in ("ttft_ms", "tpot_ms", "e2el_ms"):
        x = arm[col][~np.isnan(arm[col])]
        step = max(1, math.ceil(x.size / limit))
        out[col] = np.sort(x)[::step].round(3).tolist()
    return out


def _compact(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if not isinstance(v, (list,))}


def _effect(row: dict) -> str:
    """A metric and its relative difference for the headline, e.g. "TTFT p99 +1,670%"."""
    rel = format_relative(row["rel_diff"])
    return row["label"] if rel == MISSING else f"{row['label']} {rel}"


def _named(arm: str, label: str) -> str:
    return arm if label == arm else f"{arm} ({label})"


def _id_key(rid):
    return (0, int(rid)) if str(rid).isdigit() else (1, str(rid))
