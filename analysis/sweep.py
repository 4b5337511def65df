"""Sweeps: one simulation per grid point and seed, run in a local process pool (default) or on
a Ray cluster, reduced to a table and its Pareto frontier of output tokens/s per GPU against
output tokens/s per user, and a ranking of the configurations that meet the SLO.

Why the frontier is drawn per offered load: at a higher arrival rate every configuration does
more tokens per GPU and fewer per user, so points at different loads do not compete (a 16 req/s
point with a 45 s TTFT would otherwise be "optimal" beside 4 req/s points). Each point's offered
load is its own config's ``workload.arrival.rate``; points compete with those at the same rate.
The ranking (what Vidur's search and AIConfigurator answer first) orders the points that meet
the SLO by output tokens/s per GPU; changing only the SLO re-ranks the same numbers
(``rerank``), it does not simulate again.

Why jobs are (base config, overrides, seed) triples: they are small to ship to another process
or machine, a worker rebuilds and validates the config itself, and the same triple always
gives the same numbers whichever backend ran it.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

from sim import config as config_mod
from analysis.pareto import pareto_mask
from analysis.slo import SLO
from sim.errors import ConfigError, KvplanError
from sim.workload.config import MAX_REQUESTS

BACKENDS = ("local", "ray")
X_METRIC = "output_throughput_per_gpu"
Y_METRIC = "tokens_per_s_per_user"
#: Per-run numbers a sweep keeps (summary names, plus tokens/s per user = 1000 / mean TPOT).
KEPT = ("request_throughput", "output_throughput", "output_throughput_per_gpu",
        "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms",
        "median_e2el_ms", "p99_e2el_ms", "goodput", "slo_attainment", "completed", "rejected")


@dataclass(frozen=True)
class Job:
    index: int          # grid point
    overrides: tuple[str, ...]
    seed: int


@dataclass
class SweepResult:
    config: dict
    grid: dict[str, list]
    seeds: list[int]
    rows: list[dict]     # one per grid point, means over seeds, with "pareto"
    runs: list[dict]     # one per job
    backend: str
    workers: int
    wall_s: float
    slo: Optional[SLO] = None
    notes: list[str] = field(default_factory=list)

    @property
    def frontier(self) -> list[dict]:
        return sorted((r for r in self.rows if r["pareto"]), key=lambda r: r[X_METRIC])

    @property
    def ranked(self) -> list[dict]:
        """The points that meet the SLO (all without one), best output tokens/s per GPU first."""
        return sorted((r for r in self.rows if r.get("rank")), key=lambda r: r["rank"])

    def with_slo(self, slo: Optional[SLO]) -> "SweepResult":
        """The same simulations judged under another SLO (re-ranked, not re-simulated)."""
        rows = rerank([dict(r) for r in self.rows], slo)
        return SweepResult(self.config, self.grid, self.seeds, rows, self.runs, self.backend,
                           self.workers, self.wall_s, slo, _notes(rows, slo))

    def to_dict(self) -> dict:
        return {"kind": "sweep", "config": self.config, "grid": self.grid, "seeds": self.seeds,
                "rows": self.rows, "runs": self.runs, "backend": self.backend,
                "workers": self.workers, "wall_s": self.wall_s, "x": X_METRIC, "y": Y_METRIC,
                "slo": self.slo.to_dict() if self.slo else None,
                "slo_text": str(self.slo) if self.slo else None,
                "ranked": [r["label"] for r in self.ranked],
                "num_simulations": len(self.runs), "notes": self.notes}


def parse_grid(items: Sequence[str]) -> dict[str, list]:
    """``["scheduler.max_num_seqs=64,128", "kv_cache.block_size=16,32"]`` -> {key: values};
    values are parsed as YAML (numbers, true/false, null)."""
    grid: dict[str, list] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--grid {item!r}: expected key=v1,v2,...")
        key, raw = (s.strip() for s in item.split("=", 1))
        values = [_value(v.strip()) for v in raw.split(",") if v.strip()]
        if not key or not values:
            raise ConfigError(f"--grid {item!r}: expected key=v1,v2,...")
        if key in grid:
            raise ConfigError(f"--grid {key}: given twice")
        grid[key] = values
    if not grid:
        raise ConfigError("--grid: give at least one key=v1,v2,...")
    return grid


def grid_points(grid: dict[str, list]) -> list[dict]:
    """The cartesian product, as one {key: value} per point (first key varies slowest)."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def point_overrides(point: dict) -> tuple[str, ...]:
    return tuple(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                 for k, v in point.items())


def run_sweep(config: Union[dict, str, Path, None], grid: dict[str, list], *, seeds: int = 1,
              num_requests: Optional[int] = None, overrides: Sequence[str] = (),
              slo: Optional[SLO] = None, backend: str = "local", workers: Optional[int] = None,
              ray_address: Optional[str] = None, base_dir: Optional[Union[str, Path]] = None,
              on_done: Optional[Callable[[int, int], None]] = None) -> SweepResult:
    """Simulate every grid point for ``seeds`` seeds. Every point's config is validated before
    anything runs; a point that cannot run (a model that does not fit) is reported in its row
    rather than stopping the sweep."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    if seeds < 1:
        raise ConfigError(f"--seeds: expected at least 1, got {seeds}")
    if num_requests is not None and not 1 <= num_requests <= MAX_REQUESTS:
        raise ConfigError(f"--num-requests: expected 1 to {MAX_REQUESTS:,}, got {num_requests}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers: expected at least 1, got {workers}")
    extra = list(overrides)
    if num_requests:
        extra.append(f"workload.num_requests={int(num_requests)}")
    if slo is not None:
        extra += slo.overrides()
    base = config_mod.build_config(config, extra)
    points = grid_points(grid)
    jobs = []
    for i, point in enumerate(points):
        ov = point_overrides(point)
        try:
            config_mod.build_config(base, list(ov))
        except ConfigError as exc:
            raise ConfigError(f"--grid point {', '.join(ov)}: {exc}") from None
        jobs += [Job(i, ov, base["seed"] + s) for s in range(seeds)]
    n_workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    t0 = time.perf_counter()
    bdir = str(base_dir) if base_dir else None
    if backend == "ray":
        runs = _run_ray(base, jobs, bdir, n_workers, ray_address, on_done)
    else:
        runs = _run_local(base, jobs, bdir, n_workers, on_done)
    runs.sort(key=lambda r: (r["index"], r["seed"]))
    rows = _reduce(points, runs, slo)
    return SweepResult(base, grid, [base["seed"] + s for s in range(seeds)], rows, runs, backend,
                       n_workers, time.perf_counter() - t0, slo, _notes(rows, slo))


def run_job(base: dict, job: Job, base_dir: Optional[str] = None) -> dict:
    """One simulation, reduced to the numbers a sweep keeps (top level, so pools can pickle it)."""
    from sim.api import simulate

    out: dict = {"index": job.index, "seed": job.seed, "overrides": list(job.overrides), "error": None}
    try:
        cfg = config_mod.build_config(base, list(job.overrides), job.seed)
        s = simulate(cfg, base_dir=base_dir).summary
    except KvplanError as exc:
        out["error"] = str(exc)
        return out
    out.update({k: s.get(k) for k in KEPT})
    out["offered_rate"] = (cfg["workload"].get("arrival") or {}).get("rate")
    tpot = s.get("mean_tpot_ms")
    out[Y_METRIC] = 1000.0 / tpot if tpot else None
    out["gpus"] = s["scenario"]["gpus_per_replica"] * s["scenario"]["num_replicas"]
    out["kv_token_states"] = s["kv_cache"]["token_states"]
    out["preemptions"] = s["kv_cache"]["preemptions"]
    return out


def _run_local(base: dict, jobs: list[Job], base_dir, workers: int, on_done) -> list[dict]:
    if workers == 1:
        runs = []
        for job in jobs:
            runs.append(run_job(base, job, base_dir))
            if on_done:
                on_done(len(runs), len(jobs))
        return runs
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn: safe beside threads (tqdm, Streamlit) and the same on every platform.
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(run_job, base, job, base_dir) for job in jobs]
        runs = []
        for fut in as_completed(futures):
            runs.append(fut.result())
            if on_done:
                on_done(len(runs), len(jobs))
    return runs


def _run_ray(base: dict, jobs: list[Job], base_dir, workers: int, address: Optional[str],
             on_done) -> list[dict]:
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray: ray is not installed (pip install 'kvplan[ray]')") from None
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = dict(include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                      configure_logging=False)
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=workers, **kwargs)
    try:
        remote = ray.remote(num_cpus=1)(run_job)
        base_ref = ray.put(base)
        pending = [remote.remote(base_ref, job, base_dir) for job in jobs]
        runs = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            runs.extend(ray.get(done))
            if on_done:
                on_done(len(runs), len(jobs))
        return runs
    finally:
        if started:
            ray.shutdown()


def _reduce(points: list[dict], runs: list[dict], slo: Optional[SLO]) -> list[dict]:
    rows = []
    for i, point in enumerate(points):
        mine = [r for r in runs if r["index"] == i]
        errors = sorted({r["error"] for r in mine if r["error"]})
        ok = [r for r in mine if not r["error"]]
        row: dict = {"point": point, "label": ", ".join(f"{k}={v}" for k, v in point.items()),
                     "error": errors[0] if errors else None, "seeds": len(ok),
                     "offered_rate": mine[0].get("offered_rate") if mine else None}
        for k in KEPT + (Y_METRIC, "gpus", "kv_token_states", "preemptions"):
            vals = [r[k] for r in ok if r.get(k) is not None]
            row[k] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    return rerank(rows, slo)


def rerank(rows: list[dict], slo: Optional[SLO]) -> list[dict]:
    """``meets_slo``, ``pareto`` (non-dominated among the points at the same offered load that
    meet the SLO) and ``rank`` (1 = most output tokens/s per GPU among those meeting it, None
    for the others) from the rows' own numbers: a new SLO costs no simulation."""
    for r in rows:
        if slo is None:
            r.pop("meets_slo", None)
        else:
            r["meets_slo"] = r["error"] is None and r.get("seeds", 0) > 0 and slo.check(r)[0]
        r["pareto"] = False
        r["rank"] = None
    eligible = [r for r in rows if r["error"] is None and r.get("meets_slo", True)]
    for load in {r.get("offered_rate") for r in eligible}:
        group = [r for r in eligible if r.get("offered_rate") == load]
        for r, m in zip(group, pareto_mask([r[X_METRIC] for r in group], [r[Y_METRIC] for r in group])):
            r["pareto"] = m
    ranked = sorted((r for r in eligible if r[X_METRIC] is not None),
                    key=lambda r: (-r[X_METRIC], -(r[Y_METRIC] or 0.0), r["label"]))
    for i, r in enumerate(ranked, 1):
        r["rank"] = i
    return rows


def _notes(rows: list[dict], slo: Optional[SLO]) -> list[str]:
    notes = [f"{r['label']}: {r['error']}" for r in rows if r["error"]]
    if slo is not None:
        notes.append(f"the frontier holds only points that meet the SLO ({slo}), judged on "
                     f"each point's mean over seeds")
        if not any(r.get("meets_slo") for r in rows):
            notes.append(f"no configuration meets the SLO ({slo})")
    loads = {r.get("offered_rate") for r in rows if r["error"] is None}
    if len(loads) > 1:
        rates = sorted(x for x in loads if x is not None)  # closed-loop points offer no rate
        notes.append(f"points at different offered loads ({', '.join(f'{x:g}' for x in rates)} "
                     f"req/s) are compared only with points at the same load")
    return notes


def _value(raw: str):
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
