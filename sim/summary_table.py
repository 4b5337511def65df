"""The readable summary ``kvplan simulate`` prints: one rich table, vLLM bench serve's layout."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _fmt(v, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


#: (unit, milliseconds per unit, decimals), smallest first: a latency section is shown in the
#: largest unit its p99 reaches twice over (an overloaded run's TTFT of 1,305,857 ms reads as
#: 21.8 min, not seven digits of milliseconds).
LATENCY_UNITS = (("ms", 1.0, 2), ("s", 1000.0, 2), ("min", 60_000.0, 1))


def latency_unit(values_ms) -> tuple[str, float, int]:
    """The unit for a set of millisecond values (``None`` ignored): ms below 10 s, seconds
    below 10 min, minutes above."""
    top = max((v for v in values_ms if v is not None), default=0.0)
    if top >= 600_000:
        return LATENCY_UNITS[2]
    if top >= 10_000:
        return LATENCY_UNITS[1]
    return LATENCY_UNITS[0]


def summary_rows(summary: dict) -> list[tuple[str, str, str]]:
    """The summary as ``(section, metric, value)`` rows, values formatted for reading: the one
    layout the CLI's table, the dashboard's table and reports all show."""
    sc = summary.get("scenario", {})
    rows: list[tuple[str, str, str]] = []
    current = [""]

    def add(metric: str, value: str) -> None:
        rows.append((current[0], metric, value))

    def section(name: str) -> None:
        current[0] = name

    if sc:
        section("Scenario")
        alloc = sc.get("allocator")
        alloc_desc = f"{alloc} (block {sc['block_size']})" if alloc == "paged" else f"{alloc} ({sc.get('reserve')})"
        add("model / hardware", f"{sc['model']} on {sc['hardware']} ({sc['dtype']})")
        add("scheduler / KV allocator", f"{sc['scheduler']} / {alloc_desc}")
        add("replicas x GPUs each", f"{sc['num_replicas']} x {sc['gpus_per_replica']}")
        add("KV pool per replica", f"{sc['kv_pool_gb']:.1f} GB = {sc['kv_slots_per_replica']:,} tokens")
    section("Requests")
    add("completed / rejected", f"{summary['completed']:,} / {summary['rejected']:,}")
    add("duration (s)", _fmt(summary["duration_s"]))
    add("request throughput (req/s)", _fmt(summary["request_throughput"]))
    add("output throughput (tok/s)", _fmt(summary["output_throughput"], 1))
    add("total token throughput (tok/s)", _fmt(summary["total_token_throughput"], 1))
    if "achieved_concurrency" in summary:  # time-averaged requests in flight (send to last token)
        cap = summary.get("max_concurrency")
        add("concurrency achieved" + (" / max" if cap is not None else ""),
            _fmt(summary["achieved_concurrency"]) + (f" / {cap:,}" if cap is not None else ""))
    if "goodput" in summary:
        add("goodput (req/s)", _fmt(summary["goodput"]))
        add("SLO attainment", f"{summary['slo_attainment']:.1%}")
    for name, label in (("ttft", "Time to first token"), ("tpot", "Time per output token"),
                        ("itl", "Inter-token latency"), ("e2el", "End-to-end latency")):
        stats = [summary[f"{st}_{name}_ms"] for st in ("mean", "median", "p90", "p99")]
        unit, per, digits = latency_unit(stats)
        v = [None if x is None else x / per for x in stats]
        section(f"{label} ({unit})")
        add("mean / median", f"{_fmt(v[0], digits)} / {_fmt(v[1], digits)}")
        add("p90 / p99", f"{_fmt(v[2], digits)} / {_fmt(v[3], digits)}")
    kv = summary["kv_cache"]
    section(f"KV memory ({kv['averaged_over']})")
    add("token states", f"{kv['token_states']:.1%}")
    add("reserved", f"{kv['reserved']:.1%}")
    add("internal / external fragmentation",
              f"{kv['internal_fragmentation']:.1%} / {kv['external_fragmentation']:.1%}")
    if "fragmentation_of_used" in kv:
        add("of memory in use: tokens / fragmentation",
                  f"{kv['token_states_of_used']:.1%} / {kv['fragmentation_of_used']:.1%}")
    add("free", f"{kv['free']:.1%}")
    add("preemptions", _fmt(kv["preemptions"]))
    add("prefix cache hit rate", f"{kv['prefix_cache_hit_rate']:.1%}")
    off = kv.get("offload")
    if off:  # KV offload tiers: where the hits came from, and what loading them cost
        tiers = ["gpu"] + list(off["tiers"])
        add(f"hit rate {' / '.join(tiers)}", " / ".join(f"{off[t]['hit_rate']:.1%}" for t in tiers))
        for t in off["tiers"]:
            o = off[t]
            add(f"{t} tier: loaded / evicted",
                f"{o['loaded_gb']:,.1f} GB in {o['load_s']:,.2f} s / {_fmt(o['evictions'])} blocks")
    dis = summary.get("disaggregation")
    if dis:  # prefill and decode pools, and the KV transfers between them
        section("Disaggregated prefill / decode")
        for name in ("prefill", "decode"):
            p = dis[name]
            add(f"{name}: replicas x GPUs ({p['hardware']})",
                f"{p['num_replicas']} x {p['gpus_per_replica']}")
            add(f"{name}: busy / mean queue / KV used",
                f"{p['utilization']:.1%} / {p['mean_queue']:.1f} / {1 - p['kv_free']:.1%}")
        tr = dis["transfer"]
        add("KV transfers / mean size", f"{tr['count']:,} / {tr['mean_gb']:.3f} GB")
        add("transfer mean / p99 (ms)", f"{_fmt(tr['mean_ms'])} / {_fmt(tr['p99_ms'])}")
        if "decode_api_server_ms" in tr:
            add("of which in the decode API server, mean (ms)", _fmt(tr["decode_api_server_ms"]["mean"]))
        add("of which waiting for decode KV, mean (ms)", _fmt(tr["wait_for_kv_ms"]["mean"]))
        if "goodput_per_gpu" in dis:
            add(f"goodput per GPU ({dis['num_gpus']} GPUs, req/s)", _fmt(dis["goodput_per_gpu"], 3))
    ses = summary.get("sessions")
    if ses:  # multi-turn conversations: how many, how long, and whether their turns stayed put
        section("Sessions")
        add("sessions / turns (mean, max per session)",
            f"{ses['num_sessions']:,} / {ses['num_turns']:,} ({ses['mean_turns']:.2f}, {ses['max_turns']})")
        add("sessions with every turn finished", f"{ses['completed_sessions']:,}")
        aff = ses.get("affinity")
        if aff:
            add("session affinity: turns kept / moved", f"{aff['kept']:,} / {aff['moved']:,}")
    if "spec_decode" in summary:
        sd = summary["spec_decode"]
        section("Speculative decoding")
        add("acceptance rate", f"{sd['acceptance_rate']:.1%}")
        add("tokens per verification step", _fmt(sd["mean_tokens_per_step"]))
    return rows


def summary_table(summary: dict, title: str = "kvplan simulation") -> Table:
    t = Table(title=title, show_header=False, title_justify="left", pad_edge=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    section = None
    for name, metric, value in summary_rows(summary):
        if name != section:
            t.add_row(f"[cyan]{name}[/cyan]", "")
            section = name
        t.add_row(metric, value)
    return t


def print_summary(summary: dict, console: Console | None = None, title: str = "kvplan simulation") -> None:
    (console or Console()).print(summary_table(summary, title))
