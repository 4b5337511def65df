"""What the Cluster page computes: the cases of each cluster question, run through the library
(``sim.api.simulate``, ``analysis.autoscale``), reduced to plain rows the page and its
figures read.

Why a module of its own, outside the page script: Streamlit runs a page top to bottom on every
interaction, so the page keeps only widgets and layout; what a case is (a router, a set of
offload tiers, collocated against disaggregated, a fleet over a day) and which summary numbers
it yields lives here, importable and testable without Streamlit. No simulation logic here:
every number comes from the simulator's own summary or fleet report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from analysis.autoscale import by_period, compare_fleets, load_delay_s, report
from analysis.whatif import simulation_record
from sim.api import simulate
from sim.config import ROUTERS, build_config
from sim.errors import ConfigError
from sim.policies.autoscaler import AutoscalerConfig
from sim.policies.request import Request
from sim.workload import build_requests

#: Where the shared traces live (DESIGN.md: read them from there, never copy them).
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
AZURE_CONV = TRACES / "AzureLLMInferenceTrace_conv_2023.csv"
DAY_S = 86400.0
#: Routers that also run with session affinity on conversations: a load balancer and the
#: prefix scorer (docs/cluster.md's benchmark pairs); round robin and least_kv with affinity add
#: rows that say nothing new.
AFFINITY_ROUTERS = ("least_outstanding", "prefix_aware")

#: (done, total, what) after each simulation of a group.
OnRun = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Case:
    """One simulation of a comparison: a label and the ``key=value`` settings it adds."""

    label: str
    overrides: tuple[str, ...]


# ---------------------------------------------------------------- cases

def routing_cases(sessions: bool) -> list[Case]:
    """Every router; on conversations also the affinity variants (affinity needs sessions)."""
    cases = [Case(r, (f"parallel.router={r}", "parallel.session_affinity=false")) for r in ROUTERS]
    if sessions:
        cases += [Case(f"{r} + affinity", (f"parallel.router={r}", "parallel.session_affinity=true"))
                  for r in AFFINITY_ROUTERS]
    return cases


def offload_cases(cpu_gb: float, ssd_gb: float) -> list[Case]:
    """The GPU prefix cache alone, then the tiers added one at a time, as configured."""
    off = ("kv_cache.cpu_offload_gb=0", "kv_cache.ssd_offload_gb=0")
    cases = [Case("GPU only", off)]
    if cpu_gb > 0:
        cases.append(Case(f"GPU + CPU {cpu_gb:g} GiB", (f"kv_cache.cpu_offload_gb={cpu_gb}", "kv_cache.ssd_offload_gb=0")))
    if ssd_gb > 0:
        name = f"GPU + CPU {cpu_gb:g} GiB + SSD {ssd_gb:g} GiB" if cpu_gb > 0 else f"GPU + SSD {ssd_gb:g} GiB"
        cases.append(Case(name, (f"kv_cache.cpu_offload_gb={cpu_gb}", f"kv_cache.ssd_offload_gb={ssd_gb}")))
    return cases


def pd_cases(prefill: int, decode: int) -> list[Case]:
    """Collocated replicas on the same GPU count against the prefill/decode split."""
    return [Case(f"collocated {prefill + decode}", ("disaggregation.enabled=false",
                                                    f"parallel.num_replicas={prefill + decode}")),
            Case(f"P/D {prefill}:{decode}", ("disaggregation.enabled=true",))]


# ---------------------------------------------------------------- running

def case_configs(base: dict, cases: Sequence[Case]) -> list[dict]:
    """Each case's full, checked config (a bad combination raises ConfigError naming the key)."""
    return [build_config(base, list(c.overrides)) for c in cases]


def run_cases(base: dict, cases: Sequence[Case], on_run: Optional[OnRun] = None,
              what: str = "simulation") -> list[dict]:
    """One simulation per case: ``{label, summary, record, replica_counts}``; ``record`` is the
    report's simulation record (so the page's report shows every case)."""
    out = []
    for k, (case, cfg) in enumerate(zip(cases, case_configs(base, cases))):
        if on_run:
            on_run(k, len(cases), f"{what} {k + 1}/{len(cases)}: {case.label}")
        result = simulate(cfg)
        counts = _replica_counts(result.extra.get("replica_of", {}), _engines(cfg))
        out.append({"label": case.label, "summary": result.summary, "replica_counts": counts,
                    "record": simulation_record(result, label=case.label)})
    if on_run:
        on_run(len(cases), len(cases), f"{what}s done")
    return out


def _engines(cfg: dict) -> int:
    par = cfg["parallel"]
    return int(par["num_replicas"]) * int(par.get("data_parallel_size") or 1)


def _replica_counts(replica_of: dict, engines: int) -> list[int]:
    counts = [0] * max(engines, 1)
    for i in replica_of.values():
        if 0 <= i < len(counts):
            counts[i] += 1
    return counts


# ---------------------------------------------------------------- rows

def latency_row(label: str, s: dict) -> dict:
    """What every comparison shows of a run: completion, latency, throughput, goodput."""
    sc = s.get("scenario", {})
    gpus = (s.get("disaggregation") or {}).get("num_gpus") or \
        int(sc.get("num_replicas", 1)) * int(sc.get("gpus_per_replica", 1))
    goodput = s.get("goodput")
    return {"label": label, "completed": s["completed"], "rejected": s["rejected"],
            "mean_ttft_ms": s.get("mean_ttft_ms"), "p99_ttft_ms": s.get("p99_ttft_ms"),
            "median_ttft_ms": s.get("median_ttft_ms"),
            "mean_tpot_ms": s.get("mean_tpot_ms"), "p99_tpot_ms": s.get("p99_tpot_ms"),
            "median_tpot_ms": s.get("median_tpot_ms"),
            "output_throughput": s.get("output_throughput"),
            "output_throughput_per_gpu": s.get("output_throughput_per_gpu"),
            "goodput": goodput, "goodput_per_gpu": goodput / gpus if goodput is not None else None,
            "slo_attainment": s.get("slo_attainment"), "num_gpus": gpus,
            "hit_rate": s["kv_cache"].get("prefix_cache_hit_rate")}


def routing_row(run: dict) -> dict:
    """A router's row: latency, hit rate, how evenly it spread requests, affinity kept."""
    row = latency_row(run["label"], run["summary"])
    counts = run["replica_counts"]
    mean = sum(counts) / len(counts) if counts else 0
    row["busiest_share"] = max(counts) / mean if mean else None
    row["replica_counts"] = counts
    aff = (run["summary"].get("sessions") or {}).get("affinity")
    row["affinity_kept"] = aff["kept"] / (aff["kept"] + aff["moved"]) if aff and aff["kept"] + aff["moved"] else None
    return row


TIERS = ("gpu", "cpu", "ssd")


def offload_row(run: dict) -> dict:
    """A tier set's row: hit rate per tier (they add up to the prefix-cache hit rate), loads."""
    s = run["summary"]
    row = latency_row(run["label"], s)
    off = s["kv_cache"].get("offload") or {}
    row["tier_hit_rate"] = {t: (off[t]["hit_rate"] if t in off else None) for t in TIERS}
    if not off:
        row["tier_hit_rate"]["gpu"] = s["kv_cache"].get("prefix_cache_hit_rate")
    row["loaded_gb"] = {t: off[t]["loaded_gb"] for t in off.get("tiers", [])}
    row["load_s"] = {t: off[t]["load_s"] for t in off.get("tiers", [])}
    row["kv_tokens"] = s.get("scenario", {}).get("kv_slots_per_replica")
    return row


def pd_row(run: dict) -> dict:
    """Collocated or disaggregated: goodput per GPU, latency, and the KV transfer."""
    s = run["summary"]
    row = latency_row(run["label"], s)
    d = s.get("disaggregation")
    if d:
        t = d["transfer"]
        row.update(goodput_per_gpu=d.get("goodput_per_gpu", row["goodput_per_gpu"]),
                   transfer_mean_ms=t["mean_ms"], transfer_p99_ms=t["p99_ms"],
                   wait_for_kv_ms=t["wait_for_kv_ms"]["mean"], transfer_gb=t["mean_gb"],
                   decode_api_server_ms=t.get("decode_api_server_ms", {}).get("mean"),
                   link_utilization=t["link_utilization"],
                   prefill_utilization=d["prefill"]["utilization"],
                   decode_utilization=d["decode"]["utilization"])
    return row


def pd_curve(base: dict, cases: Sequence[Case], rates: Sequence[float], duration_s: float,
             on_run: Optional[OnRun] = None) -> list[dict]:
    """Goodput per GPU of each case at each rate (``duration_s`` of arrivals per run, at least
    100 requests): where the split starts to pay."""
    points, total, k = [], len(cases) * len(rates), 0
    for rate in rates:
        n = max(100, int(math.ceil(rate * duration_s)))
        for case in cases:
            if on_run:
                on_run(k, total, f"goodput curve {k + 1}/{total}: {case.label} at {rate:g} req/s")
            cfg = build_config(base, list(case.overrides) + [f"workload.arrival.rate={rate}",
                                                             f"workload.num_requests={n}"])
            s = simulate(cfg).summary
            points.append({"rate": rate, **pd_row({"label": case.label, "summary": s})})
            k += 1
    return points


# ---------------------------------------------------------------- autoscaling

@dataclass(frozen=True)
class DaySpec:
    """A day of arrivals: from the Azure conversation trace (its bursts and lengths) or the
    config's synthetic workload, under a cosine daily rate profile, compressed ``time_scale``x."""

    source: str = "trace"          # "trace" or "synthetic"
    time_scale: float = 144.0
    peak_rate: float = 3.0
    trough: float = 0.2
    peak_hour: float = 14.0

    @property
    def day_s(self) -> float:
        return DAY_S / self.time_scale


def day_requests(cfg: dict, day: DaySpec, trace: Path = AZURE_CONV) -> list[Request]:
    """The day's requests: ``diurnal_requests`` on the trace, or ``synthetic_day``."""
    if day.source == "trace":
        from sim.workload.diurnal import diurnal_requests

        if not trace.exists():
            raise ConfigError(f"source: {trace} is not there; choose the synthetic workload")
        return diurnal_requests(trace, peak_rate=day.peak_rate, day_s=day.day_s, trough=day.trough,
                                peak_hour=day.peak_hour, seed=int(cfg.get("seed", 0)))
    return synthetic_day(cfg, day)


def synthetic_day(cfg: dict, day: DaySpec) -> list[Request]:
    """The config's workload lengths under the day's profile: Poisson arrivals at the peak rate,
    each kept with probability rate(t) / peak (the thinning ``diurnal_requests`` does to a
    trace), seeded by the config's seed. For a machine without the shared traces."""
    from sim.workload.diurnal import diurnal_rate

    seed = int(cfg.get("seed", 0))
    n = int(math.ceil(day.peak_rate * day.day_s * 1.1)) + 20
    workload = {**cfg["workload"], "num_requests": n,
                "arrival": {"process": "poisson", "rate": day.peak_rate}}
    workload.pop("sessions", None)
    workload.pop("trace", None)
    base = [r for r in build_requests(workload, seed) if r.arrival_time < day.day_s]
    rng = np.random.default_rng(seed + 1)
    times = np.array([r.arrival_time for r in base])
    keep = rng.random(len(base)) < diurnal_rate(times, peak_rate=day.peak_rate, day_s=day.day_s,
                                                trough=day.trough, peak_hour=day.peak_hour) / day.peak_rate
    kept = [r for r, k in zip(base, keep) if k]
    return [Request(str(i), r.arrival_time, r.prompt_len, r.max_output_tokens) for i, r in enumerate(kept)]


def autoscale_day(cfg: dict, day: DaySpec, policy: dict, *, load_bandwidth_gbs: float,
                  startup_s: float, initial_replicas: Optional[int], fixed_replicas: Optional[int],
                  usd_gpu_hour: Optional[float], progress: Optional[Callable[[int], None]] = None,
                  trace: Path = AZURE_CONV) -> dict:
    """The day on an autoscaled fleet and on a fixed fleet sized for its peak (``compare_fleets``):
    ``autoscale.json``'s shape (``report``) plus ``hourly`` (``by_period``), ``delay_s``,
    ``requests`` and ``day_s``. ``policy``: AutoscalerConfig's fields but the delay, which is
    the model's load time (weights over ``load_bandwidth_gbs`` + ``startup_s``)."""
    delay = load_delay_s(cfg, load_bandwidth_gbs * 1e9, startup_s)
    try:
        pol = AutoscalerConfig(scale_up_delay_s=delay, **policy)
    except ValueError as exc:  # the policy names its field: "target: must be > 0 ..."
        raise ConfigError(str(exc)) from None
    reqs = day_requests(cfg, day, trace)
    if not reqs:
        raise ConfigError("peak_rate: the day has no requests at this rate; raise it")
    runs = compare_fleets(cfg, reqs, pol, fixed_replicas=fixed_replicas, horizon_s=day.day_s,
                          usd_gpu_hour=usd_gpu_hour, initial_replicas=initial_replicas,
                          progress=progress)
    out = report(runs, {"policy": {**pol.__dict__, "initial_replicas": initial_replicas or pol.min_replicas},
                        "day": {**day.__dict__, "day_s": day.day_s}, "requests": len(reqs)})
    period = day.day_s / 24
    out["hourly"] = {k: by_period(r.timeline, period) for k, r in runs.items()}
    out.update(delay_s=delay, requests=len(reqs), day_s=day.day_s)
    return out


def fleet_row(name: str, totals: dict) -> dict[str, Any]:
    """A fleet's totals as the page's table reads them."""
    return {"fleet": name, "mean_replicas": totals["mean_replicas"], "peak_replicas": totals["peak_replicas"],
            "gpu_hours": totals["gpu_hours"], "usd": totals["usd"],
            "slo_attainment": totals["slo_attainment"], "p99_ttft_ms": totals["p99_ttft_ms"],
            "p99_tpot_ms": totals["p99_tpot_ms"], "completed": totals["completed"],
            "rejected": totals["rejected"], "scale_ups": totals["scale_ups"],
            "scale_downs": totals["scale_downs"]}
