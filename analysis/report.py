"""Reports: one self-contained HTML file (plots embedded, no network needed to open it) and
the same content as Markdown, from result records (capacity, A/B, sweep, simulation,
validation) held in memory or saved as JSON.

Why sections first: both formats render one list of sections (text, tables, figures), so the
Markdown a reviewer diffs and the HTML a budget holder opens never disagree. A report always
states its scenario, the calibration provenance of the cost model and the assumptions behind
the numbers, because a capacity answer without them cannot be checked.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union, cast

from analysis.formatting import (display_unit, format_diff, format_interval, format_relative,
                                     format_value)
from sim.errors import ConfigError, KvplanError, file_error
from sim.summary_table import latency_unit


@dataclass
class Section:
    title: str
    text: list[str] = field(default_factory=list)
    tables: list[tuple[list[str], list[list[Any]]]] = field(default_factory=list)
    figures: list[Any] = field(default_factory=list)   # plotly figures (HTML only)
    notes: list[str] = field(default_factory=list)
    bullets: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- loading saved results

def load_record(path: Union[str, Path]) -> dict:
    """A saved result: ``--json`` output of capacity/ab/sweep, a validation.json, a
    ``kvplan simulate --out`` folder, or its summary.json."""
    from calibration.validation_file import FORMAT, load_validation
    from analysis.whatif import load_run_dir

    p = Path(path)
    if p.is_dir():
        return load_run_dir(p)
    if not p.is_file():
        raise ConfigError(f"{p}: not found")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except ValueError:  # UnicodeDecodeError included: a binary file
        raise ConfigError(f"{p}: not valid JSON") from None
    except OSError as exc:
        raise file_error(p, exc) from None
    if isinstance(data, dict) and data.get("kind") == "validation":
        return load_validation(data, str(p))
    if isinstance(data, dict) and data.get("kind") in RENDERERS:
        _check_shape(data, p)
        return data
    if isinstance(data, dict) and (data.get("format") == FORMAT or "metrics" in data):
        return load_validation(data, str(p))
    if isinstance(data, dict) and "completed" in data and "ttft_ms" in data:
        return load_run_dir(p.parent) if p.name == "summary.json" else \
            {"kind": "simulation", "label": p.stem, "config": {}, "summary": data, "latencies": {}, "timeline": {}}
    raise ConfigError(f"{p}: not a kvplan result (expected the --json output of capacity, ab or "
                      f"sweep, a validation.json, or a simulate --out folder)")


#: The top-level fields each saved result's section reads, and their JSON types (None: any).
_SHAPES: dict[str, dict[str, Optional[type | tuple[type, ...]]]] = {
    "capacity": {"headline": str, "sizing": dict, "slo_text": str, "searches": list,
                 "confidence": (int, float), "capacity_rate": None, "ci_low": None, "ci_high": None,
                 "planning_rate": None, "goodput": None, "output_tokens_per_s_per_gpu": None,
                 "gpus_per_replica": None, "hardware": None, "usd_per_gpu_hour": None,
                 "usd_per_million_output_tokens": None, "num_simulations": None},
    "capacity_clients": {"headline": str, "slo_text": str, "searches": list, "confidence": (int, float),
                         "capacity_clients": None, "ci_low": None, "ci_high": None, "planning_clients": int,
                         "gpus_per_replica": None, "hardware": None, "requests_per_client": int,
                         "max_clients": int, "num_simulations": None},
    "ab": {"headline": str, "label_a": str, "label_b": str, "seeds": list, "confidence": (int, float),
           "num_bootstrap": None, "differences": list, "rows": list},
    "sweep": {"grid": dict, "rows": list, "seeds": list, "num_simulations": None, "backend": None,
              "workers": None, "wall_s": (int, float), "x": str, "y": str},
    "simulation": {"summary": dict},
    "plan": {"headline": str, "slo_text": str, "target_rate": (int, float), "rows": list, "ranked": list,
             "frontier": list, "num_simulations": None},
}


def _check_shape(data: dict, p: Path) -> None:
    """A saved result must have what its section reads, so that a truncated or hand-edited file
    is one line naming the file and the field, not a KeyError deep inside the report."""
    for key, kind in _SHAPES.get(data["kind"], {}).items():
        if key not in data:
            raise ConfigError(f"{p}: {key}: missing from this {data['kind']} result")
        if kind is not None and (isinstance(data[key], bool) or not isinstance(data[key], kind)):
            raise ConfigError(f"{p}: {key}: unexpected value {_short(data[key])} in this {data['kind']} result")
    for key in ("config", "config_a", "config_b"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(f"{p}: {key}: expected a mapping of config keys")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---------------------------------------------------------------- building sections

def build_sections(records: Sequence[dict]) -> list[Section]:
    if not records:
        raise ConfigError("report: give at least one result")
    sections = []
    cfg = next((r.get("config") or r.get("config_a") for r in records if r.get("config") or r.get("config_a")), None)
    if cfg:
        kind = next(r for r in records if r.get("config") or r.get("config_a"))["kind"]
        sections.append(scenario_section(cfg, rates_searched=kind == "capacity",
                                         clients_searched=kind == "capacity_clients"))
    for rec in records:
        sections.append(RENDERERS[rec["kind"]](rec))
    sections.append(provenance_section(cfg, [r for r in records if r["kind"] == "validation"]))
    sections.append(assumptions_section(records))
    for sec in sections:
        sec.figures = [f for f in sec.figures if f is not None]
    return sections


class _NoPlots:
    """Stands in for ``figures`` without plotly: every figure is None (tables still render)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def _figures():
    """The figure builders, or a stand-in when plotly (the dashboard extra) is missing, so
    Markdown reports and the CLI tables never need plotly."""
    try:
        from analysis import figures
    except ImportError:
        return _NoPlots()
    return figures


def scenario_section(cfg: dict, rates_searched: bool = False, clients_searched: bool = False) -> Section:
    """The scenario's settings; ``rates_searched``: a capacity search's, whose runs take their
    arrival rates and request counts from the search, not from the config; ``clients_searched``:
    a search in clients, whose runs take their client counts and request counts from it."""
    kv, sch, par, spec, wl = (cfg.get(k, {}) for k in ("kv_cache", "scheduler", "parallel", "speculative", "workload"))
    alloc = kv.get("allocator")
    alloc_text = (f"paged, block {kv.get('block_size')}" + (", prefix caching" if kv.get("prefix_caching") else "")
                  if alloc == "paged" else f"contiguous, reserve {kv.get('reserve')}")
    arrival = wl.get("arrival", {})
    rows: list[list[Any]] = [  # table cells, as Section.tables holds them
        ["model / hardware", f"{cfg.get('model')} on {cfg.get('hardware')} ({cfg.get('dtype')})"],
        ["parallelism", f"TP {par.get('tensor_parallel_size')} x PP {par.get('pipeline_parallel_size')}, "
                        f"{par.get('num_replicas')} replica(s), router {par.get('router')}"],
        ["weights / KV dtype", f"{cfg.get('quantization', {}).get('weights')} / {kv.get('dtype')}"],
        ["scheduler", f"{sch.get('policy')}, max_num_seqs {_or_engine_default(sch.get('max_num_seqs'))}, "
                      f"max_num_batched_tokens {_or_engine_default(sch.get('max_num_batched_tokens'))}, "
                      f"preemption {sch.get('preemption')}"],
        ["KV cache", f"{alloc_text}; gpu_memory_utilization {kv.get('gpu_memory_utilization')}, "
                     f"max_model_len {kv.get('max_model_len')}"],
        ["speculative decoding", "off" if not spec.get("num_tokens") else
         f"{spec.get('num_tokens')} tokens, acceptance {spec.get('acceptance_rate')}"],
        ["workload", _workload_text(wl)],
        ["arrivals", f"{arrival.get('process', 'trace')} at {arrival.get('rate')} req/s" if arrival else "trace timing"],
    ]
    if rates_searched:
        rows[-2:] = _searched_workload_rows(wl)
    elif clients_searched:
        lengths = _workload_text(wl).split("; ", 1)[-1]
        rows[-2:] = [["workload", f"requests per run set by the search (per client); {lengths}"],
                     ["arrivals", "closed loop: clients set by the search, each sending its next request "
                                  f"when its last one finishes (think time {arrival.get('think_time_s') or 0:g} s)"]]
    rows += [
        ["SLO (per request)", _slo_text(cfg.get("slo") or {})],
        ["seed", cfg.get("seed")],
    ]
    return Section("Scenario", tables=[(["setting", "value"], rows)])


def _searched_workload_rows(wl: dict) -> list[list[str]]:
    """The workload and arrivals rows of a capacity search: its runs replace the config's
    arrival rate and request count with their own, so neither is shown as if it were used."""
    count = "requests per run set by the search (see run length)"
    if wl.get("trace"):
        return [["workload", f"trace {wl['trace']}, {count}"],
                ["arrivals", "trace timing, rescaled to the rates set by the search"]]
    arrival = wl.get("arrival") or {}
    # A str: no process (None) reads as Poisson.
    process = cast(str, {"poisson": "Poisson", None: "Poisson"}.get(arrival.get("process"), arrival.get("process")))
    if arrival.get("cv") is not None:
        process += f", cv {arrival['cv']:g}"
    lengths = _workload_text(wl).split("; ", 1)[-1]   # "input ...; output ...", without the count
    return [["workload", f"{count}; {lengths}"],
            ["arrivals", f"{process} (rates set by the search)"]]


def capacity_section(rec: dict) -> Section:
    figures = _figures()

    s = Section("Capacity", text=[rec["headline"]])
    sz = rec["sizing"]
    size = (f"{sz['num_requests']} requests per simulation" if sz.get("num_requests") else
            f"arrivals spanning {sz['duration_s']:g} s per simulation (rate x {sz['duration_s']:g} requests, "
            f"at least {sz['min_requests']}), first {sz['warmup_fraction']:.0%} not judged")
    rows = [["SLO", rec["slo_text"]]] + (_capacity_rows(rec) if _has_rate(rec) else _no_rate_rows(rec))
    rows += [["GPUs per replica / hardware", _unit_text(rec)],
             ["$ per GPU-hour", _f(rec["usd_per_gpu_hour"], 3)],
             ["simulations used", rec["num_simulations"]],
             ["run length", size]]
    if sz.get("confirm_s") and _has_rate(rec):
        rows.append(["confirming run", f"arrivals spanning {sz['confirm_s']:g} s at the planning rate"])
    if rec.get("target_rate"):
        rows += [["target rate", f"{_f(rec['target_rate'])} req/s"]] + _target_rows(rec)
    s.tables.append((["capacity", "value"], rows))
    if (rec.get("fleet") or {}).get("trials"):
        s.tables.append(_fleet_table(rec))
    s.tables.append((["seed", "highest rate meeting SLO (req/s)", "lowest rate missing it (req/s)", "note"],
                     [[x["seed"], _rate(x["low"]), _rate(x["high"]), x["note"]] for x in rec["searches"]]))
    at = rec.get("at_planning_rate") or {}
    if at:
        where = "confirming run" if rec.get("confirmed") else "mean over seeds"
        s.tables.append(([f"at the planning rate ({where})", "value"],
                         [[k, _f(v)] for k, v in at.items() if k not in ("steady",)]))
    s.notes += rec.get("notes", [])
    s.figures.append(figures.capacity_search(rec))
    return s


def client_capacity_section(rec: dict) -> Section:
    """``kvplan capacity`` in clients (a closed loop): the answer, each seed's bracket, the
    statistics at the planning count and, for --target-clients, the simulated fleet."""
    s = Section("Capacity in clients", text=[rec["headline"]])
    rows = [["SLO", rec["slo_text"]],
            ["most clients meeting the SLO (every seed)", rec["planning_clients"] or "none"],
            ["search estimate", f"{_f(rec['capacity_clients'])} clients ({rec['confidence']:.0%} CI "
                                f"{_f(rec['ci_low'])}-{_f(rec['ci_high'])}, {len(rec['searches'])} seeds)"],
            ["GPUs per replica / hardware", f"{rec['gpus_per_replica']} x {rec['hardware']}"],
            ["output tokens/s per GPU", _f(rec.get("output_tokens_per_s_per_gpu"))],
            ["$ per million output tokens", _f(rec.get("usd_per_million_output_tokens"), 3)],
            ["simulations used", rec["num_simulations"]],
            ["run length", f"{rec['requests_per_client']} requests per client (at least 100), first 10% "
                           f"of the arrival span not judged; searched up to {rec['max_clients']} clients"]]
    if rec.get("target_clients"):
        rows.append(["target clients", rec["target_clients"]])
        rows.append(["replicas / GPUs needed", f"{rec['replicas']} / {rec['gpus']}" if rec.get("replicas")
                     else f"none found: {rec.get('fleet_note')}"])
        if rec.get("replicas"):
            rows += [["fleet sizing", f"simulated with all {rec['target_clients']} clients behind the router; "
                                      f"{rec['fleet_note']}"],
                     ["cost at target", f"${_f(rec.get('usd_per_hour'))} per hour"]]
    s.tables.append((["capacity", "value"], rows))
    s.tables.append((["seed", "most clients meeting SLO", "fewest clients missing it", "note"],
                     [[x["seed"], x["low"], "—" if x["high"] is None else x["high"], x["note"]]
                      for x in rec["searches"]]))
    at = rec.get("at_planning_clients") or {}
    if at:
        s.tables.append((["at the planning count (mean over seeds)", "value"], [[k, _f(v)] for k, v in at.items()]))
    s.notes += rec.get("notes", [])
    return s


def _unit_text(rec: dict) -> str:
    """GPUs and hardware of what the search sized: a replica, or a whole P/D group."""
    unit = rec.get("unit") or {}
    if unit.get("kind") != "pd_group":
        return f"{rec['gpus_per_replica']} x {rec['hardware']}"
    pools = [f"{_count(unit[f'{p}_gpus'], p + ' GPU')} ({_count(unit[f'{p}_replicas'], 'instance')}, "
             f"{unit[f'{p}_hardware']})" for p in ("prefill", "decode")]
    return f"{rec['gpus_per_replica']} per P/D group: " + " + ".join(pools)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _target_rows(rec: dict) -> list[list[Any]]:
    """Replicas, GPUs and cost for the target rate, and how the replicas were found: by the
    simulated fleet (with the divided estimate beside it) or by division."""
    if not _has_rate(rec):
        return [["replicas / GPUs needed", "none: no rate meets this SLO on one replica"]]
    unit = "P/D groups" if (rec.get("unit") or {}).get("kind") == "pd_group" else "replicas"
    if rec.get("fleet_mode") == "simulate":
        rows = [[f"{unit} / GPUs needed", f"{rec['replicas']} / {rec['gpus']}" if rec.get("replicas") else
                 f"none found: {rec.get('fleet_note')}"],
                ["fleet sizing", f"simulated behind {rec['fleet']['router']} at the target rate "
                                 f"({rec['fleet']['num_simulations']} fleet simulations); division "
                                 f"gives {rec.get('divided_replicas')}"]]
        if rec.get("fleet_per_replica_rate"):
            rows.append([f"rate per {unit[:-1]} in the fleet", f"{_f(rec['fleet_per_replica_rate'])} req/s "
                         f"(one alone: {_f(rec['planning_rate'])} req/s)"])
            rows.append(["fleet against division", rec["fleet_note"]])
    else:
        rows = [["replicas / GPUs needed", f"{rec.get('replicas')} / {rec.get('gpus')}"],
                ["fleet sizing", "by division: target / planning rate (the router assumed to spread "
                                 "load evenly)" + (f"; {rec['fleet_note']}" if rec.get("fleet_note") else "")]]
    if rec.get("replicas"):
        rows.append(["cost at target", f"${_f(rec.get('usd_per_hour'))} per hour"])
    return rows


def _fleet_table(rec: dict) -> tuple[list[str], list[list[Any]]]:
    """Every fleet size tried at the target rate, in order, with each of its runs."""
    f = rec["fleet"]
    rows = []
    for t in f["trials"]:
        runs = ", ".join(f"seed {e['seed']}{' long' if e['stage'] == 'fleet-confirm' else ''} "
                         f"{'met' if e['passed'] else 'missed: ' + '; '.join(e['violations'])}"
                         for e in t["evaluations"])
        rows.append([t["replicas"], _f(f["target_rate"] / t["replicas"]), _verdict(t["passed"]), runs])
    return ([f"fleet size ({f['unit']}s)", "req/s each", "SLO at the target", "runs"], rows)


def _verdict(passed: Optional[bool]) -> str:
    return "cut short (budget)" if passed is None else "met" if passed else "missed"


def _has_rate(rec: dict) -> bool:
    """Whether some rate met the SLO on every seed (a planning rate above 0)."""
    return bool(rec.get("planning_rate")) and rec["planning_rate"] > 0


def _no_rate(rec: dict) -> str:
    from analysis.capacity import no_rate_text

    return no_rate_text(rec)


def _rate(v: Optional[float]) -> str:
    from analysis.capacity import rate_text

    return rate_text(v, missing="-")


def _capacity_rows(rec: dict) -> list[list[Any]]:
    """The answer's rows when a rate met the SLO: estimate, interval (and how it was sized),
    planning rate, throughput and price."""
    half = rec.get("ci_half_width")
    rows = [
        ["search estimate (mean over seeds)", f"{_f(rec['capacity_rate'])} req/s"],
        [f"{rec['confidence']:.0%} interval over seeds",
         f"{_f(rec['ci_low'])} - {_f(rec['ci_high'])} req/s" + (f" (±{half:.1%})" if half is not None else "")],
    ]
    if rec.get("sizing_note"):
        rows.append(["seeds and interval", rec["sizing_note"]])
    return rows + [
        ["planning rate", f"{_f(rec['planning_rate'])} req/s ({_confirmation(rec)})"],
        ["goodput at planning rate", f"{_f(rec['goodput'])} req/s"],
        ["output tokens/s per GPU", _f(rec["output_tokens_per_s_per_gpu"], 0)],
        ["$ per million output tokens", _f(rec["usd_per_million_output_tokens"], 4)],
    ]


def _no_rate_rows(rec: dict) -> list[list[Any]]:
    """When nothing met the SLO: say so where each number would be, never "None" or $0."""
    return [["planning rate", _no_rate(rec)],
            ["output tokens/s per GPU", "none: no rate meets this SLO"],
            ["$ per million output tokens", "none: no rate meets this SLO"]]


def ab_section(rec: dict) -> Section:
    figures = _figures()

    a = "A" if rec["label_a"] == "A" else f"{rec['label_a']} (A)"
    b = "B" if rec["label_b"] == "B" else f"{rec['label_b']} (B)"
    s = Section(f"A/B: {a} vs {b}", text=[rec["headline"]])
    s.text.append(f"Common random numbers: both arms served identical request streams, "
                  f"{len(rec['seeds'])} seed(s) ({', '.join(map(str, rec['seeds']))}); "
                  f"{rec['confidence']:.0%} paired bootstrap intervals ({rec['num_bootstrap']} resamples, "
                  f"seeds then requests).")
    if rec["differences"]:
        s.tables.append((["config key", "A", "B"], [[d["key"], d["a"], d["b"]] for d in rec["differences"]]))
    else:
        s.text.append("The two configs are identical.")
    s.tables.append((["metric", "A", "B", "B - A", "interval", "verdict"], [ab_row(r) for r in rec["rows"]]))
    s.notes += rec.get("notes", [])
    s.figures.append(figures.ab_forest(rec))
    if rec.get("samples"):
        s.figures.append(figures.latency_cdfs({f"A {rec['label_a']}": rec["samples"]["A"],
                                               f"B {rec['label_b']}": rec["samples"]["B"]},
                                              title="Latency CDFs (first seed)"))
    return s


def ab_row(row: dict) -> list[str]:
    """One metric of an A/B as the terminal and the reports print it, through the shared
    formatter: B - A carries its relative size ("+2,201 (+1,670%)"), the interval is in the
    metric's unit."""
    unit = row["unit"]
    diff = format_diff(row["diff"], unit)
    if row.get("rel_diff") is not None:
        diff += f" ({format_relative(row['rel_diff'])})"
    return [f"{row['label']} ({display_unit(unit)})", format_value(row["a"], unit),
            format_value(row["b"], unit), diff, format_interval(row["ci_low"], row["ci_high"], unit),
            row["verdict"]]


def sweep_section(rec: dict) -> Section:
    figures = _figures()

    s = Section("Sweep and Pareto frontier")
    grid = "; ".join(f"{k} in {v}" for k, v in rec["grid"].items())
    s.text.append(f"{len(rec['rows'])} configurations ({grid}), {len(rec['seeds'])} seed(s) each, "
                  f"{rec['num_simulations']} simulations on the {rec['backend']} backend "
                  f"({rec['workers']} workers, {rec['wall_s']:.1f} s).")
    ranked = sorted((r for r in rec["rows"] if r.get("rank")), key=lambda r: r["rank"])
    if rec.get("slo") and not ranked:
        s.text.append(f"No configuration meets the SLO ({rec.get('slo_text')}).")
    elif ranked:
        best = ranked[0]
        s.text.append(f"Best{' under the SLO (' + rec['slo_text'] + ')' if rec.get('slo') else ''}: "
                      f"{best['label']} at {_f(best.get(rec['x']), 0)} output tokens/s per GPU "
                      f"({_f(best.get(rec['y']), 1)} tokens/s per user, offered "
                      f"{_f(best.get('offered_rate'), 3)} req/s).")
        s.tables.append((["rank", "configuration", "offered req/s", "tok/s/GPU", "tok/s/user",
                          "TTFT p99 (ms)", "TPOT p99 (ms)"],
                         [[str(r["rank"]), r["label"], _f(r.get("offered_rate"), 3), _f(r.get(rec["x"]), 0),
                           _f(r.get(rec["y"]), 1), _f(r.get("p99_ttft_ms")), _f(r.get("p99_tpot_ms"))]
                          for r in ranked[:10]]))
    rows = sorted(rec["rows"], key=lambda r: (not r["pareto"], -(r.get(rec["x"]) or 0)))
    headers = ["configuration", "tok/s/GPU", "tok/s/user", "TTFT p99 (ms)", "TPOT p99 (ms)", "Pareto"]
    if rec.get("slo"):
        headers.insert(5, "meets SLO")
    table = []
    for r in rows:
        line = [r["label"], _f(r.get(rec["x"]), 0), _f(r.get(rec["y"]), 1), _f(r.get("p99_ttft_ms")),
                _f(r.get("p99_tpot_ms")), "yes" if r["pareto"] else ""]
        if rec.get("slo"):
            line.insert(5, "yes" if r.get("meets_slo") else "no")
        if r.get("error"):
            line = [r["label"], "-", "-", "-", "-"] + ([""] if rec.get("slo") else []) + [r["error"]]
        table.append(line)
    s.tables.append((headers, table))
    s.notes += rec.get("notes", [])
    s.figures.append(figures.pareto(rec))
    return s


def simulation_section(rec: dict) -> Section:
    figures = _figures()

    sm = rec["summary"]
    title = f"Simulation{': ' + rec['label'] if rec.get('label') else ''}"
    s = Section(title)
    rows = [["completed / rejected", f"{sm.get('completed')} / {sm.get('rejected')}"],
            ["duration (s)", _f(sm.get("duration_s"))],
            ["request throughput (req/s)", _f(sm.get("request_throughput"))],
            ["output throughput (tok/s)", _f(sm.get("output_throughput"), 0)],
            ["output throughput per GPU (tok/s)", _f(sm.get("output_throughput_per_gpu"), 0)]]
    if "goodput" in sm:
        rows += [["goodput (req/s)", _f(sm["goodput"])], ["SLO attainment", _f(sm.get("slo_attainment"), 3)]]
    for m in ("ttft", "tpot", "itl", "e2el"):
        stats = [sm.get(f"{st}_{m}_ms") for st in ("mean", "median", "p99")]
        unit, per, digits = latency_unit(stats)  # 21.8 min, not 1,305,857 ms
        rows.append([f"{m.upper()} mean / median / p99 ({unit})",
                     " / ".join(_f(None if v is None else v / per, digits) for v in stats)])
    kv = sm.get("kv_cache", {})
    if kv:
        rows.append([f"KV memory ({kv.get('averaged_over')})",
                     f"token states {kv.get('token_states', 0):.1%}, reserved {kv.get('reserved', 0):.1%}, "
                     f"fragmentation {kv.get('internal_fragmentation', 0):.1%} int / "
                     f"{kv.get('external_fragmentation', 0):.1%} ext, free {kv.get('free', 0):.1%}"])
        rows.append(["preemptions", kv.get("preemptions")])
    util, mem = rec.get("utilization") or {}, rec.get("memory")
    if util.get("mfu") is not None:
        rows.append(["model FLOPs / memory bandwidth utilisation (busy steps, per GPU)",
                     f"{util['mfu']:.1%} / {util['mbu']:.1%}"])
    if mem:
        rows.append(["one GPU's memory (GB)",
                     f"weights {mem['weights_gb']:,.1f}, activations + runtime reserve "
                     f"{mem['activation_reserve_gb']:,.1f}, KV pool {mem['kv_pool_gb']:,.1f}, "
                     f"left free {mem['unused_gb']:,.1f} of {mem['total_gb']:,.1f}"])
    s.tables.append((["metric", "value"], rows))
    if any(rec.get("latencies", {}).values()):
        s.figures.append(figures.latency_cdfs({rec.get("label") or "run": rec["latencies"]}))
    if rec.get("timeline", {}).get("time_s"):
        s.figures.append(figures.kv_memory(rec["timeline"]))
        s.figures.append(figures.batch_and_queue(rec["timeline"]))
        if "mfu" in rec["timeline"]:
            s.figures.append(figures.utilization(rec["timeline"]))
    if mem:
        s.figures.append(figures.memory_split(mem))
    if rec.get("rate_curve"):
        wl = rec.get("config", {}).get("workload", {})
        s.figures.append(figures.rate_latency(rec["rate_curve"], rec.get("config", {}).get("slo"),
                                              (wl.get("arrival") or {}).get("rate")))
    return s


def validation_section(rec: dict) -> Section:
    figures = _figures()

    from calibration.validation_file import verdict

    s = Section("Validation: simulator against real runs")
    s.text.append(verdict(rec)[1])
    if rec.get("source"):
        s.tables.append((["source", "value"], [[k, v] for k, v in rec["source"].items()]))
    s.tables.append((["metric", "real", "predicted", "error"],
                     [[m["name"] + (f" ({m['unit']})" if m["unit"] else ""), _f(m["real"]), _f(m["predicted"]),
                       "-" if m["error"] is None else f"{m['error']:+.1%}"] for m in rec["metrics"]]))
    s.figures += [figures.validation_scatter(rec), figures.validation_errors(rec)]
    s.figures.append(figures.validation_cdfs(rec))
    return s


def provenance_section(cfg: Optional[dict], validations: list[dict]) -> Section:
    s = Section("Calibration provenance")
    s.text.append(cost_model_provenance(cfg) if cfg else "No scenario config in these results.")
    for v in validations:
        src = v.get("source", {})
        s.text.append(f"Validated against real runs: profile {src.get('profile', 'unnamed')}, "
                      f"hardware {src.get('hardware', '?')}, model {src.get('model', '?')}; "
                      f"mean absolute error {_pct(v.get('mape'))} over {len(v['metrics'])} metrics.")
    if not validations:
        s.text.append("No validation.json was included: the predictions here have not been checked "
                      "against a real run of this scenario.")
    return s


def _or_engine_default(value) -> str:
    """A scheduler limit as the config gives it; unset, the engine release's default for the GPU."""
    return "the engine's default" if value is None else str(value)


def cost_model_provenance(cfg: dict) -> str:
    """Which cost model priced the steps and where its constants come from."""
    try:
        from sim.api import resolve_deployment

        model = resolve_deployment(cfg).cost_model
    except (KvplanError, OSError) as exc:
        # A report must render even when its scenario no longer resolves here (a profile file
        # moved, a catalog entry renamed since the result was saved); a bug still raises.
        return f"Cost model could not be resolved for this scenario ({exc})."
    prov = getattr(model, "provenance", None)
    if prov:
        return "Cost model: " + (", ".join(f"{k} {v}" for k, v in prov.items()) if isinstance(prov, dict) else str(prov))
    from sim.pricing.efficiency import efficiency_source

    base = getattr(model, "base", model)  # the roofline under a host floor (StepFloor)
    return (f"Cost model: {type(base).__name__}, a roofline over the hardware catalog "
            f"({cfg.get('hardware')}: datasheet peak FLOP/s and HBM bandwidth) and the model catalog "
            f"({cfg.get('model')}), with kernel efficiencies fitted to "
            f"{efficiency_source(str(cfg.get('hardware')))}. "
            f"Its measured per-operator error is tabulated in docs/cost_model.md; no calibration "
            f"profile of this hardware was used.")


def assumptions_section(records: Sequence[dict]) -> Section:
    kinds = {r["kind"] for r in records}
    items = ["Latencies come from a discrete-event simulation: one replica's steps are priced by the "
             "cost model; CPU overheads, network and tokenisation are not modelled.",
             "Metric names follow vllm bench serve: TTFT, TPOT = (E2EL - TTFT) / (output tokens - 1), "
             "ITL, E2EL; percentiles over completed requests."]
    if "capacity_clients" in kinds:
        items += ["Capacity in clients is per replica: each seed's most closed-loop clients meeting the SLO, "
                  "bracketed to one client; the count every seed met is planned with. Clients for a target "
                  "are simulated as one fleet behind the configured router, from ceil(target / that count) "
                  "replicas up."]
    if "capacity" in kinds:
        simulated = any(r.get("fleet_mode") == "simulate" for r in records if r["kind"] == "capacity")
        items += ["Capacity is per replica (for disaggregated prefill/decode, per P/D group); "
                  + ("replicas for a target rate are simulated: N replicas behind the configured router "
                     "(N P/D groups: both pools N times as large) at the target rate, judged by the search's "
                     "own SLO test and run lengths; the answer met the SLO and one fewer missed it."
                     if simulated else
                     "replicas for a target rate assume the router spreads load evenly, so N replicas "
                     "sustain N times one replica's rate."),
                  "The capacity interval is a Student-t interval over seeds (each seed one arrival "
                  "pattern and one set of lengths), never narrower than the seeds' brackets can tell "
                  "apart; seeds are added until it is within the stated target, or the result says why not.",
                  "Throughput and goodput at capacity are steady-state values: rate x mean output "
                  "tokens per request, rate x SLO attainment.",
                  "Prices are $/GPU-hour from the hardware catalog (indicative on-demand list prices) "
                  "unless overridden; they exclude CPU hosts, storage and egress."]
    if "ab" in kinds:
        items.append("A/B intervals are paired percentile bootstraps; 'not significant' means the "
                     "interval of B - A contains 0. Throughput intervals hold each run's duration fixed.")
        items.append("The A/B's overall verdict: B worse when it is significantly worse on a metric a "
                     "capacity plan is sized on (p99 TTFT, TPOT or E2E latency, output tokens/s per GPU, "
                     "SLO attainment, goodput), B better when every significant difference favours it, "
                     "mixed otherwise.")
    if "sweep" in kinds:
        items.append("Sweep numbers are whole-run values (simulate's summary); tokens/s per user is "
                     "1000 / mean TPOT.")
    return Section("Assumptions", bullets=items)


def _plan_section(rec: dict) -> Section:
    from analysis.plan_report import plan_section  # it imports Section from here

    return plan_section(rec)


RENDERERS = {"capacity": capacity_section, "capacity_clients": client_capacity_section,
             "ab": ab_section, "sweep": sweep_section,
             "simulation": simulation_section, "validation": validation_section, "plan": _plan_section}


# ---------------------------------------------------------------- output formats

def render_markdown(records: Sequence[dict], title: str = "kvplan report") -> str:
    out = [f"# {title}", "", f"_Generated by kvplan on {_now()}. Plots are in the HTML report._", ""]
    for sec in build_sections(records):
        out += [f"## {sec.title}", ""]
        for t in sec.text:
            out += [t, ""]
        if sec.bullets:
            out += [f"- {b}" for b in sec.bullets] + [""]
        for headers, rows in sec.tables:
            out.append("| " + " | ".join(headers) + " |")
            out.append("|" + "|".join("---" for _ in headers) + "|")
            out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in rows]
            out.append("")
        for n in sec.notes:
            out.append(f"> note: {n}")
        if sec.notes:
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_html(records: Sequence[dict], title: str = "kvplan report",
                plotly_src: Optional[str] = None) -> str:
    """The report as one HTML page. plotly.js is loaded once for every figure: embedded
    (gzipped) when ``plotly_src`` is None, so the page is self-contained, else from the
    relative path ``plotly_src`` (``write_report(plotly="local")`` writes the file there)."""
    return _html_page(build_sections(records), title, plotly_src)


def _html_page(sections: Sequence[Section], title: str, plotly_src: Optional[str]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", f"<p class='meta'>Generated by kvplan on {_now()}.</p>",
            "<nav><ul>" + "".join(f"<li><a href='#s{i}'>{html.escape(s.title)}</a></li>"
                                  for i, s in enumerate(sections)) + "</ul></nav>"]
    for i, sec in enumerate(sections):
        body.append(f"<section id='s{i}'><h2>{html.escape(sec.title)}</h2>")
        body += [f"<p>{html.escape(str(t))}</p>" for t in sec.text]
        if sec.bullets:
            body.append("<ul>" + "".join(f"<li>{html.escape(b)}</li>" for b in sec.bullets) + "</ul>")
        for headers, rows in sec.tables:
            body.append("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers)
                        + "</tr></thead><tbody>")
            body += ["<tr>" + "".join(f"<td>{html.escape(format_cell(c))}</td>" for c in row) + "</tr>" for row in rows]
            body.append("</tbody></table>")
        body += [f"<p class='note'>note: {html.escape(n)}</p>" for n in sec.notes]
        body += [_figure_html(fig) for fig in sec.figures]
        body.append("</section>")
    script = _plotly_script(plotly_src) if any(s.figures for s in sections) else ""
    if isinstance(_figures(), _NoPlots):
        body.insert(2, "<p class='note'>Plots need plotly: pip install 'kvplan[dashboard]'.</p>")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}{script}</body></html>")


#: Where ``write_report`` gets plotly.js for an HTML report: ``local`` writes it beside the
#: report (``plotly-<version>.min.js``, shared by every report in that folder) and loads it by
#: relative path; ``inline`` embeds it, gzipped, in the one file. Both open offline.
PLOTLY_MODES = ("local", "inline")


def write_report(records: Sequence[dict], out: Union[str, Path], title: str = "kvplan report",
                 markdown: Optional[Union[str, Path]] = None, plotly: str = "local") -> list[Path]:
    """Write HTML (``out`` ending .html/.htm) or Markdown (.md), plus ``markdown`` if given;
    ``plotly`` (``PLOTLY_MODES``) says where an HTML report's plotly.js lives. The default,
    ``local``, keeps the HTML small (about 0.1 MB for a simulation): plotly.js 4.8 MB gzips to
    1.5 MB, so no self-contained file can be under 1.5 MB. The paths written come back, the
    script file among them (left as it is when it holds the same script already).

    Everything is rendered before the first file is opened, so a failure leaves no file
    half-written or replaced."""
    out = Path(out)
    if plotly not in PLOTLY_MODES:
        raise ConfigError(f"--plotly {plotly}: expected one of {', '.join(PLOTLY_MODES)}")
    written = []
    if out.suffix.lower() in (".md", ".markdown"):
        texts = [(out, render_markdown(records, title))]
    elif out.suffix.lower() in (".html", ".htm"):
        sections = build_sections(records)
        script = _plotly_file() if plotly == "local" and any(s.figures for s in sections) else None
        texts = [(out, _html_page(sections, title, None if script is None else script[0]))]
        if script is not None:
            path = out.parent / script[0]
            written.append(path)
            if not (path.is_file() and path.read_text() == script[1]):
                texts.append((path, script[1]))
    else:
        raise ConfigError(f"--out {out}: expected a .html or .md file name")
    if markdown:
        texts.append((Path(markdown), render_markdown(records, title)))
    for path, text in texts:
        path.write_text(text)
    return [path for path, _ in texts if path not in written] + written


def _plotly_file() -> tuple[str, str]:
    """(file name, text) of the plotly.js a local-mode report loads beside it; the version in
    the name keeps reports drawn for different releases apart in one folder."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version  # type: ignore[import-untyped]  # no stubs

    return f"plotly-{get_plotlyjs_version()}.min.js", get_plotlyjs()


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#212121}h1{border-bottom:2px solid #1565c0}h2{margin-top:2em;color:#1565c0}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}th,td{border:1px solid #cfd8dc;padding:.3em .6em;
text-align:left}th{background:#eceff1}.note{color:#6d4c41;font-style:italic}.meta{color:#757575}
nav ul{columns:2;font-size:.9em}"""

_PLOTLY_GZ_B64: Optional[str] = None


def _plotlyjs_gzip_b64() -> str:
    """plotly.js once per file, gzipped and base64-encoded for ``plotly="inline"``: plotly.js
    4.1's 4.8 MB of script becomes 1.96 MB, and the report is one self-contained file that
    opens offline."""
    global _PLOTLY_GZ_B64
    if _PLOTLY_GZ_B64 is None:
        import base64
        import gzip

        from plotly.offline import get_plotlyjs

        raw = get_plotlyjs().encode("utf-8")
        _PLOTLY_GZ_B64 = base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")
    return _PLOTLY_GZ_B64


def _figure_html(fig: Any) -> str:
    """A figure as an empty div plus its JSON; the loader draws every one once plotly.js is
    decompressed (the JSON is escaped so that no ``</script>`` inside a label ends the block)."""
    spec = fig.to_json().replace("</", "<\\/")
    return (f"<div class='fig'><div class='kvplan-fig' style='min-height:{fig.layout.height or 380}px'></div>"
            f"<script type='application/json' class='kvplan-fig-spec'>{spec}</script></div>")


def _plotly_script(src: Optional[str]) -> str:
    """The script that loads plotly.js once (embedded when ``src`` is None, else from the
    relative path ``src``) and then draws every figure from its JSON spec."""
    if src is None:
        return (f"<script type='text/javascript'>{_PLOTLY_DRAW}"
                f"{_PLOTLY_INLINE.replace('@PLOTLY_GZ_B64@', _plotlyjs_gzip_b64())}</script>")
    name = json.dumps(src).replace("<", "\\u003c")
    return (f"<script type='text/javascript' src='{html.escape(src)}'></script>"
            f"<script type='text/javascript'>{_PLOTLY_DRAW}{_PLOTLY_LOCAL.replace('@PLOTLY_SRC@', name)}</script>")


#: Draws each figure from its JSON once plotly.js has loaded, or says why it cannot.
_PLOTLY_DRAW = """
function kvplanDraw(error) {
  document.querySelectorAll('.kvplan-fig').forEach(function (div) {
    if (error) { div.textContent = error; return; }
    var spec = JSON.parse(div.nextElementSibling.textContent);
    Plotly.newPlot(div, spec.data, spec.layout, {responsive: true, displaylogo: false});
  });
}
"""

#: Decompresses the embedded plotly.js with the browser's DecompressionStream (Chrome 80,
#: Firefox 113, Safari 16.4) and runs it.
_PLOTLY_INLINE = """(async function () {
  try {
    var bin = atob('@PLOTLY_GZ_B64@');
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    var code = await new Response(stream).text();
    var s = document.createElement('script');
    s.text = code;
    document.head.appendChild(s);
  } catch (e) {
    kvplanDraw('This browser cannot draw the plots: ' + e);
    return;
  }
  kvplanDraw();
})();
"""

#: After the sibling plotly.js (a script tag before it) has run, or failed to load.
_PLOTLY_LOCAL = """kvplanDraw(typeof Plotly === 'undefined'
           ? 'No plots: ' + @PLOTLY_SRC@ + ' is not beside this report (kvplan report writes it there).'
           : undefined);
"""


def _confirmation(rec: dict) -> str:
    if rec.get("confirmed"):
        return f"every seed met the SLO; a {rec['sizing']['confirm_s']:g} s run confirmed it"
    if rec.get("confirmed") is False:
        return "not confirmed by a long run"
    return "every seed met the SLO; no confirming run"


def _workload_text(wl: dict) -> str:
    if wl.get("trace"):
        return f"trace {wl['trace']}, {wl.get('num_requests') or 'all'} requests"
    def dist(d: dict) -> str:
        return f"{d.get('dist')} mean {d.get('mean')} cv {d.get('cv')}" if d else "?"
    return (f"{wl.get('num_requests')} requests; input {dist(wl.get('input_len', {}))}; "
            f"output {dist(wl.get('output_len', {}))}")


def _slo_text(slo: dict) -> str:
    parts = [f"{k.upper()} <= {slo[f'{k}_ms']:g} ms" for k in ("ttft", "tpot") if slo.get(f"{k}_ms")]
    return ", ".join(parts) or "none"


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _pct(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def format_cell(v: Any) -> str:
    return _f(v) if isinstance(v, (float, bool)) or v is None else str(v)


def _md(v: Any) -> str:
    return format_cell(v).replace("|", "\\|").replace("\n", " ")


def _now() -> str:
    return _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
