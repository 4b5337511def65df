"""Fit the simulator's two free constants to benchmark runs measured outside kvplan
(``kvplan calibrate --real``), and measure the fit on runs it never saw.

Why: a user with vLLM benchmark results but no kernel timings still wants predictions tied to
their own server. Two constants cover what the step pricers (operator tables, roofline) cannot
see: ``step_scale`` (kernels timed in isolation vs inside a serving process: every step's price
is multiplied by it) and ``request_overhead_ms`` (per-request work outside the engine: HTTP,
tokenisation, IPC to the engine core, streaming the first chunk).

How: each run is replayed as ``kvplan validate --real`` replays it (``calibration.validate_real``)
once per step scale on a small grid; predictions between grid points are interpolated
linearly. A constant delay of every arrival leaves an open-loop simulation's dynamics unchanged,
so it shifts every request's TTFT and E2E by exactly the delay and leaves TPOT alone: for each
scale the overhead has a closed form (least squares, clamped at 0) and only the scale needs
simulations. The loss is a robust (soft-L1) sum over the relative errors of mean and p90 TTFT,
mean TPOT, mean and p90 E2E over the stages not overloaded for real.

The error reported is held out: leave-one-model-out (fit on the other models' runs, re-simulate
this model's runs at the fitted scale), else leave-one-run-out when all runs are of one model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, cast

import numpy as np

from calibration.real_runs import RealRun, is_profile_export_folder, is_run_folder, read_run
from calibration.run_manifest import MANIFEST_NAME
from calibration.validate_real import ModelNotModelled, RunComparison, compare_run
from sim.errors import KvplanError

#: Metrics the fit matches, per scored stage.
FIT_METRICS = ("mean_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "p90_e2el_ms")
#: Metrics a per-request delay shifts by exactly the delay (TPOT is a difference of two of them).
SHIFTED = frozenset({"mean_ttft_ms", "p90_ttft_ms", "mean_e2el_ms", "p90_e2el_ms"})
#: Metrics whose held-out error is reported (the issue's targets).
REPORT_METRICS = ("mean_e2el_ms", "mean_ttft_ms", "mean_tpot_ms")
#: Step scales simulated first; the grid widens by ``GRID_STEP`` while the best is at an edge,
#: then gains points half and a quarter of a step either side of the best.
START_GRID = (0.9, 1.0, 1.1)
GRID_STEP = 0.1
SCALE_RANGE = (0.3, 3.0)
MAX_OVERHEAD_MS = 1e6
#: Relative error at which the fit's loss turns from quadratic to linear (soft-L1): errors
#: beyond 10% count as outliers, not as the typical miss.
LOSS_SCALE = 0.1


class RealFitError(KvplanError):
    """Runs that cannot be fitted (none found, none usable)."""


# --- inputs -------------------------------------------------------------------------------


def _is_run(p: Path) -> bool:
    return p.is_file() or is_run_folder(p) or is_profile_export_folder(p)


def find_runs(paths: Sequence[Path]) -> list[Path]:
    """Run folders/files: each path is a run (an inference-perf folder or a JSON result) or a
    folder of them (its direct children that are runs, in name order)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise RealFitError(f"--real {p}: no such file or folder")
        if _is_run(p):
            found.append(p)
            continue
        children = sorted(c for c in p.iterdir() if _is_run(c) and (c.is_dir() or c.suffix == ".json")
                          and c.name != MANIFEST_NAME)  # a collection's manifest is not a run
        if not children:
            raise RealFitError(f"--real {p}: no runs found (expected inference-perf run folders, vllm "
                               f"bench serve or GuideLLM JSON files, aiperf / genai-perf artifact "
                               f"folders, or a folder of them)")
        found += children
    return found


# --- simulations --------------------------------------------------------------------------


@dataclass
class StageObs:
    """One stage not overloaded for real: the measurement and what the model predicts."""

    run: str
    model: str
    index: int
    rate: float
    real: dict[str, float]


class Simulations:
    """Predictions per (run, step scale), simulated on demand and kept: every fold of the
    held-out evaluation reuses them. Predictions are at request overhead 0."""

    def __init__(self, runs: Sequence[RealRun], simulate: Callable[[RealRun, float], RunComparison]) -> None:
        self.runs = {r.name: r for r in runs}
        self._simulate = simulate
        self._cache: dict[tuple[str, float], dict[int, dict[str, float]]] = {}
        self.comparisons: dict[str, RunComparison] = {}
        self.num_simulations = 0

    def predicted(self, run: str, scale: float) -> dict[int, dict[str, float]]:
        """Stage index -> metric -> predicted value (inf where nothing finished)."""
        key = (run, round(scale, 6))
        if key not in self._cache:
            cmp = self._simulate(self.runs[run], key[1])
            self.num_simulations += 1
            self.comparisons.setdefault(run, cmp)
            self._cache[key] = {s.index: {m: _finite(s.predicted.get(m)) for m in FIT_METRICS}
                                for s in cmp.stages}
        return self._cache[key]

    def scales(self, run: str) -> list[float]:
        return sorted(s for r, s in self._cache if r == run)


def _finite(v: Optional[float]) -> float:
    return float(v) if v is not None and math.isfinite(v) else math.inf


# --- the fit ------------------------------------------------------------------------------


@dataclass
class Fit:
    step_scale: float
    request_overhead_ms: float
    loss: float
    num_stages: int
    grid: list[float]


def best_overhead(pred: np.ndarray, real: np.ndarray, shifted: np.ndarray) -> float:
    """Least-squares overhead (ms) for relative errors ``(pred + o*shifted - real) / real``,
    clamped to [0, MAX_OVERHEAD_MS] (the loss is convex in o)."""
    w = shifted / real**2
    den = float(np.sum(w))
    if den <= 0:
        return 0.0
    o = float(np.sum(w * (real - pred))) / den
    return min(max(o, 0.0), MAX_OVERHEAD_MS)


def robust_loss(r: np.ndarray) -> float:
    """Soft-L1 of relative errors: quadratic below ``LOSS_SCALE``, linear above, so one stage the
    replay cannot follow (a real p90 TTFT four times the median's: spikes no simulator of
    steady-state serving predicts) cannot pull both constants away from every other stage."""
    z = r / LOSS_SCALE
    return float(np.sum(2 * LOSS_SCALE**2 * (np.sqrt(1 + z * z) - 1)))


def _loss_at(preds: np.ndarray, real: np.ndarray, shifted: np.ndarray) -> tuple[float, float]:
    """(loss, overhead) at the best overhead for these predictions (at overhead 0): the loss is
    convex in the overhead, so a bounded 1-D search from the least-squares value finds it."""
    from scipy.optimize import minimize_scalar  # type: ignore[import-untyped]  # no stubs: scipy-stubs is no dependency

    if not np.all(np.isfinite(preds)):
        return math.inf, 0.0
    o_ls = best_overhead(preds, real, shifted)
    f = lambda o: robust_loss((preds + o * shifted - real) / real)  # noqa: E731
    hi = max(2 * o_ls, float(np.max(real)), 1.0)
    res = minimize_scalar(f, bounds=(0.0, min(hi, MAX_OVERHEAD_MS)), method="bounded",
                          options={"xatol": 1e-4})
    o = float(res.x) if res.fun <= f(o_ls) else o_ls
    if f(0.0) <= f(o):
        o = 0.0
    return f(o), o


def fit_constants(obs: Sequence[StageObs], sims: Simulations, *,
                  start_grid: Sequence[float] = START_GRID, refine: bool = True) -> Fit:
    """(step_scale, request_overhead_ms) minimising the squared relative errors of ``obs``."""
    if not obs:
        raise RealFitError("no stage to fit")
    runs = sorted({o.run for o in obs})
    real = np.array([o.real[m] for o in obs for m in FIT_METRICS])
    shifted = np.array([1.0 if m in SHIFTED else 0.0 for _ in obs for m in FIT_METRICS])
    grid = sorted(set(round(s, 6) for s in start_grid))

    def vector(scale: float) -> np.ndarray:
        out = []
        for o in obs:
            p = sims.predicted(o.run, scale)[o.index]
            out += [p[m] for m in FIT_METRICS]
        return np.array(out)

    def best_on(grid: list[float]) -> tuple[float, float, float]:
        table = np.array([vector(s) for s in grid])  # grid point x observation
        dense = np.linspace(grid[0], grid[-1], max(2, int(round((grid[-1] - grid[0]) / 0.001)) + 1)) \
            if len(grid) > 1 else np.array(grid)
        best = (math.inf, grid[0], 0.0)
        for s in dense:
            if len(grid) > 1:
                preds = np.array([np.interp(s, grid, table[:, j]) for j in range(table.shape[1])])
            else:
                preds = table[0]
            loss, o = _loss_at(preds, real, shifted)
            if loss < best[0]:
                best = (loss, float(s), o)
        return best

    loss, s, o = best_on(grid)
    while len(grid) > 1:
        if s <= grid[0] and grid[0] - GRID_STEP >= SCALE_RANGE[0] - 1e-9:
            grid.insert(0, round(grid[0] - GRID_STEP, 6))
        elif s >= grid[-1] and grid[-1] + GRID_STEP <= SCALE_RANGE[1] + 1e-9:
            grid.append(round(grid[-1] + GRID_STEP, 6))
        else:
            break
        loss, s, o = best_on(grid)
    if refine and len(grid) > 1:
        for step in (GRID_STEP / 2, GRID_STEP / 4):
            near = min(grid, key=lambda g: abs(g - s))
            for g in (near - step, near + step):
                if grid[0] < g < grid[-1]:
                    grid = sorted(set(grid) | {round(g, 6)})
            loss, s, o = best_on(grid)
    if not math.isfinite(loss):
        raise RealFitError(f"no step scale in {grid[0]:g}..{grid[-1]:g} predicts every fitted stage "
                           f"without overload ({', '.join(runs)})")
    return Fit(round(s, 4), round(o, 3), loss, len(obs), grid)


# --- held-out evaluation ------------------------------------------------------------------


@dataclass
class Fold:
    held_out: str               # a model (leave-one-model-out) or a run (leave-one-run-out)
    train_runs: list[str]
    test_runs: list[str]
    train_models: list[str]
    fit: Fit


@dataclass
class RealFitResult:
    fit: Fit
    base: str                    # the pricer the runs were priced with (operator_tables, roofline)
    held_out_by: str             # "model", "run" or "none"
    folds: list[Fold]
    stages: list[dict]           # per scored stage: real, uncalibrated, held-out prediction, errors
    runs: list[dict]             # the runs used: path, model, hardware, dtype, tp
    skipped: list[str]
    hardware: str
    dtypes: list[str]
    models: list[str]
    stage_seconds: Optional[float]
    seed: int
    num_simulations: int = 0
    notes: list[str] = field(default_factory=list)

    def mape(self, which: str, model: Optional[str] = None) -> dict[str, Optional[float]]:
        """Mean |relative error| per reported metric over the stages (of ``model``), for
        ``which`` in heldout | uncalibrated | fitted (in-sample)."""
        rows = [s for s in self.stages if model is None or s["model"] == model]
        out = {}
        for m in REPORT_METRICS:
            errs = [abs(s[which][m]["error"]) for s in rows if s[which][m]["error"] is not None]
            out[m] = float(np.mean(errs)) if errs else None
        return out

    def summary(self) -> dict:
        """The profile's ``fit`` object."""
        held = [abs(s["heldout"][m]["error"]) for s in self.stages for m in REPORT_METRICS
                if s["heldout"][m]["error"] is not None]
        return {
            "metric": "mean |relative error| over the stages not overloaded for real; held out: "
                      + {"model": "leave-one-model-out (fit on the other models, predict this one)",
                         "run": "leave-one-run-out (one model only)",
                         "none": "nothing (one run): the errors are in-sample"}[self.held_out_by],
            "held_out_by": self.held_out_by,
            "heldout_mape": float(np.mean(held)) if held else 0.0,
            "heldout_p90_ape": float(np.percentile(held, 90)) if held else 0.0,
            "num_samples": len(self.stages),
            "num_heldout": len(self.stages) if self.held_out_by != "none" else 0,
            "loss": self.fit.loss,
            "heldout": self.mape("heldout"),
            "uncalibrated": self.mape("uncalibrated"),
            "fitted_in_sample": self.mape("fitted"),
            "per_model": {m: {"heldout": self.mape("heldout", m), "uncalibrated": self.mape("uncalibrated", m)}
                          for m in self.models},
            "folds": [{"held_out": f.held_out, "train_models": f.train_models, "train_runs": f.train_runs,
                       "test_runs": f.test_runs, "step_scale": f.fit.step_scale,
                       "request_overhead_ms": f.fit.request_overhead_ms} for f in self.folds],
            "stages": self.stages,
        }

    def to_profile(self):
        from sim.pricing.profile_file import Profile, software_versions

        return Profile(
            hardware=self.hardware, device="cuda", model=", ".join(self.models),
            dtype=", ".join(self.dtypes), block_size=16, features=[], coefficients={}, gemm_knee=None,
            fit=self.summary(),
            source={"kind": "real_runs", "runs": self.runs, "skipped": self.skipped,
                    "stage_seconds": self.stage_seconds, "seed": self.seed,
                    "grid": self.fit.grid, "num_simulations": self.num_simulations,
                    "notes": self.notes},
            software=software_versions(), base=self.base,
            adjustments={"step_scale": self.fit.step_scale,
                         "request_overhead_ms": self.fit.request_overhead_ms})


def make_folds(obs: Sequence[StageObs]) -> tuple[str, list[tuple[str, list[str], list[str]]]]:
    """(held_out_by, [(held-out key, train runs, test runs)]): one fold per model when there are
    two or more, else one per run, else none. A fold's train runs never include a run of the
    held-out model."""
    models = sorted({o.model for o in obs})
    runs_of: dict[str, list[str]] = {}
    for o in obs:
        runs_of.setdefault(o.model, [])
        if o.run not in runs_of[o.model]:
            runs_of[o.model].append(o.run)
    all_runs = sorted({o.run for o in obs})
    if len(models) >= 2:
        return "model", [(m, sorted(r for k, rs in runs_of.items() if k != m for r in rs), sorted(runs_of[m]))
                         for m in models]
    if len(all_runs) >= 2:
        return "run", [(r, [x for x in all_runs if x != r], [r]) for r in all_runs]
    return "none", []


def _err(pred: float, real: float) -> Optional[float]:
    return None if not math.isfinite(pred) or not real else (pred - real) / real


def _metrics(pred: dict[str, float], real: dict[str, float], overhead: float) -> dict:
    out = {}
    for m in REPORT_METRICS:
        p = pred[m] + (overhead if m in SHIFTED else 0.0)
        out[m] = {"predicted": p if math.isfinite(p) else None, "error": _err(p, real[m])}
    return out


def calibrate_real(paths: Sequence[Path], *, hardware: Optional[str] = None, seed: int = 0,
                   stage_seconds: Optional[float] = None, cost_source: Optional[str] = None,
                   start_grid: Sequence[float] = START_GRID, refine: bool = True,
                   on_skip: Optional[Callable[[str], None]] = None,
                   on_simulation: Optional[Callable[[str, float], None]] = None) -> RealFitResult:
    """Fit (step_scale, request_overhead_ms) to the runs under ``paths`` and evaluate it held out."""
    from calibration.validate_real import build_config

    files = find_runs(paths)
    runs = [read_run(p) for p in files]  # every file is checked before anything runs
    usable, skipped, models_of, info = [], [], {}, []
    for run in runs:
        try:
            cfg, _ = build_config(run, hardware, None, (), cost_source)
        except ModelNotModelled as exc:
            skipped.append(str(exc))
            continue
        usable.append(run)
        models_of[run.name] = run.model or cfg["model"]
        info.append({"run": str(run.path), "name": run.name, "model": models_of[run.name],
                     "hardware": cfg["hardware"], "dtype": cfg["dtype"],
                     "tensor_parallel_size": cfg["parallel"]["tensor_parallel_size"]})
    if not usable:
        raise RealFitError(f"--real: no run kvplan can simulate: {skipped[0]}" if skipped else "--real: no runs")
    if on_skip is not None:
        for msg in skipped:
            on_skip(msg)
    names = [r.name for r in usable]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise RealFitError(f"--real: two runs are named {dup!r}: pass each run once")
    hardwares = sorted({i["hardware"] for i in info})
    if len(hardwares) > 1:
        raise RealFitError(f"--real: runs on different GPUs ({', '.join(hardwares)}): fit one GPU at a time")

    def simulate(run: RealRun, scale: float) -> RunComparison:
        if on_simulation is not None:
            on_simulation(run.name, scale)
        return compare_run(run, hardware=hardware, seed=seed, stage_seconds=stage_seconds,
                           cost_source=cost_source,
                           overrides=[f"cost_model.step_scale={scale!r}", "cost_model.request_overhead_ms=0"])

    sims = Simulations(usable, simulate)
    obs: list[StageObs] = []
    for run in usable:
        sims.predicted(run.name, 1.0)  # the uncalibrated prediction, and which stages are scored
        for st in sims.comparisons[run.name].stages:
            real = {m: st.real.get(m) for m in FIT_METRICS}
            if not st.scored or not all(v is not None and math.isfinite(v) and v > 0 for v in real.values()):
                continue
            obs.append(StageObs(run.name, models_of[run.name], st.index, st.stage.rate,
                                cast(dict[str, float], real)))  # all set: checked above
    if not obs:
        raise RealFitError("--real: every stage was overloaded for real (or lacks TTFT/E2E means and "
                           "p90s): nothing to fit latency to")
    sources = {sims.comparisons[n].summary.get("cost_model", {}).get("source") for n in names}
    if len(sources) != 1 or None in sources:
        raise RealFitError(f"--real: the runs were priced by different pricers ({', '.join(map(str, sources))}): "
                           f"fit runs of one GPU with one pricer")
    base = sources.pop()
    if base not in ("operator_tables", "roofline"):
        raise RealFitError(f"--real: the runs were priced by {base}: a real-run fit adjusts the "
                           f"operator_tables or roofline pricer")

    full = fit_constants(obs, sims, start_grid=start_grid, refine=refine)
    held_out_by, fold_specs = make_folds(obs)
    folds: list[Fold] = []
    heldout_pred: dict[tuple[str, int], dict] = {}
    for key, train, test in fold_specs:
        train_obs = [o for o in obs if o.run in train]
        f = fit_constants(train_obs, sims, start_grid=start_grid, refine=refine)
        folds.append(Fold(key, train, test, sorted({o.model for o in train_obs}), f))
        for o in obs:
            if o.run in test:  # re-simulated at the fold's scale, the overhead added exactly
                pred = sims.predicted(o.run, f.step_scale)[o.index]
                heldout_pred[(o.run, o.index)] = _metrics(pred, o.real, f.request_overhead_ms)
    stages = []
    for o in obs:
        unc = _metrics(sims.predicted(o.run, 1.0)[o.index], o.real, 0.0)
        fitted = _metrics(sims.predicted(o.run, full.step_scale)[o.index], o.real, full.request_overhead_ms)
        stages.append({"run": o.run, "model": o.model, "stage": o.index, "rate": o.rate,
                       "real": {m: o.real[m] for m in REPORT_METRICS},
                       "uncalibrated": unc, "fitted": fitted,
                       "heldout": heldout_pred.get((o.run, o.index), fitted)})
    notes = []
    if stage_seconds is not None:
        notes.append(f"stages simulated for at most {stage_seconds:g} s each (real metrics are whole stages')")
    return RealFitResult(
        fit=full, base=base, held_out_by=held_out_by, folds=folds, stages=stages, runs=info,
        skipped=skipped, hardware=hardwares[0], dtypes=sorted({i["dtype"] for i in info}),
        models=sorted({o.model for o in obs}), stage_seconds=stage_seconds, seed=seed,
        num_simulations=sims.num_simulations, notes=notes)
