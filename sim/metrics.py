"""Serving metrics with ``vllm bench serve`` names, computed from finished requests and the
step log: throughput, goodput, TTFT/TPOT/ITL/E2EL percentiles, and the time-averaged KV-memory
breakdown.

TPOT = (e2el - ttft) / (output_len - 1); ITL pools every gap between consecutive tokens of a
request. KV fractions are averaged over time weighted by step duration, over the steps in which at
least one request waited (when memory matters: the question is how much of it holds tokens while
work is queued); if nothing ever waited, over all steps, and ``averaged_over`` says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, cast

import numpy as np

from sim.policies.request import Request, RequestState

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = (90, 99)
KV_FIELDS = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation", "free")


def _stats(values_s: np.ndarray, consume: bool = False) -> dict[str, Optional[float]]:
    """Mean, median, std and percentiles in ms. With ``consume`` the array is scaled and
    partially sorted in place (no copies: the pooled ITL of a long run is millions of values);
    the numbers are the same bits either way (mean and std before anything reorders it)."""
    if values_s.size == 0:
        out: dict[str, Optional[float]] = {"mean": None, "median": None, "std": None}
        out.update({f"p{p}": None for p in PERCENTILES})
        return out
    if consume:
        ms = values_s
        ms *= 1000.0
    else:
        ms = values_s * 1000.0
    mean, std = float(ms.mean()), float(ms.std())  # before the median reorders ``ms``
    out = {"mean": mean, "median": float(np.median(ms, overwrite_input=True)), "std": std}
    for p, v in zip(PERCENTILES, np.percentile(ms, PERCENTILES, overwrite_input=True)):
        out[f"p{p}"] = float(v)
    return out


def _chunk_ends(token_times: Sequence[float], stream_interval: int) -> list[int]:
    """Indices of the tokens that close a streamed chunk under ``--stream-interval N``, by vLLM's
    output-processor rule applied once per engine step (the tokens of one step share its time):
    send when nothing has been sent yet, or N tokens have gathered since the last send, or the
    request is done. One token a step gives tokens 1, N+1, 2N+1, ... and the last (SGLang's
    ``len(output_ids) % N == 1`` cuts the same); a speculative step that overshoots moves the
    next cut with it."""
    n = len(token_times)
    ends: list[int] = []
    sent = 0
    for i in range(n):
        if i + 1 < n and token_times[i + 1] == token_times[i]:
            continue  # not the step's last token
        total = i + 1
        if sent == 0 or total - sent >= stream_interval or total == n:
            ends.append(i)
            sent = total
    return ends


def chunk_times(token_times: Sequence[float], stream_interval: int = 1) -> Sequence[float]:
    """When a client receives a request's chunks under ``--stream-interval N``
    (``engine.stream_interval``): the first token at once, then a chunk every N tokens, and the
    last (``_chunk_ends``). With N = 1 every token is its own chunk (``token_times`` itself)."""
    if stream_interval <= 1 or len(token_times) <= 2:
        return token_times
    return [token_times[i] for i in _chunk_ends(token_times, stream_interval)]


def delivered_times(token_times: Sequence[float], stream_interval: int = 1) -> list[float]:
    """Each token at the time its chunk reaches the client under ``--stream-interval N``
    (``_chunk_ends``): the per-token view a client records, as ``validate --endpoint`` places a
    measured token at its chunk's arrival."""
    if stream_interval <= 1 or len(token_times) <= 2:
        return list(token_times)
    out: list[float] = []
    start = 0
    for end in _chunk_ends(token_times, stream_interval):
        out += [token_times[end]] * (end + 1 - start)
        start = end + 1
    return out


def pooled_itl(done: Sequence[Request], stream_interval: int = 1) -> np.ndarray:
    """Every gap between consecutive chunks of the requests (with one token a chunk, between
    consecutive tokens; ``vllm bench serve`` records one ITL a chunk), in one array filled in
    place (one 8-byte value a token; a list of per-request ``np.diff`` arrays and their
    concatenation took several times that at the peak of a long run)."""
    chunks = [chunk_times(r.token_times, stream_interval) for r in done]
    total = sum(len(t) - 1 for t in chunks if len(t) > 1)
    itl = np.empty(total)
    pos = 0
    for times in chunks:
        n = len(times)
        if n > 1:
            t = np.asarray(times, dtype=float)
            np.subtract(t[1:], t[:-1], out=itl[pos:pos + n - 1])
            pos += n - 1
    return itl


def request_latencies(requests: Sequence[Request], stream_interval: int = 1) -> dict[str, np.ndarray]:
    """Per-request arrays (seconds) over completed requests; ITL pooled over all of them, one
    gap a streamed chunk (``chunk_times``). TTFT, TPOT and E2E do not depend on the chunking:
    the first and the last token always go out at once."""
    done = [r for r in requests if r.state is RequestState.FINISHED and r.token_times]
    ttft = np.fromiter((r.token_times[0] - r.arrival_time for r in done), float, len(done))
    # cast: a finished request has its finish time (``Request.finish_time`` is None until then)
    e2el = np.fromiter((cast(float, r.finish_time) - r.arrival_time for r in done), float, len(done))
    tpot = np.array([(r.finish_time - r.token_times[0]) / (r.num_output_tokens - 1)
                     for r in done if r.num_output_tokens > 1], dtype=float)
    return {"ttft": ttft, "tpot": tpot, "itl": pooled_itl(done, stream_interval), "e2el": e2el}


def meets_slo(req: Request, ttft_ms: Optional[float], tpot_ms: Optional[float]) -> bool:
    if req.state is not RequestState.FINISHED or not req.token_times:
        return False
    if ttft_ms is not None and (req.token_times[0] - req.arrival_time) * 1000 > ttft_ms:
        return False
    if tpot_ms is not None and req.num_output_tokens > 1:
        if (req.finish_time - req.token_times[0]) / (req.num_output_tokens - 1) * 1000 > tpot_ms:
            return False
    return True


#: A queue "grows" when the TTFT of the last fifth of arrivals exceeds the first fifth's by more
#: than this and by more than 2x (a server that keeps up has flat TTFT over a run).
OVERLOAD_TTFT_GROWTH_S = 1.0


def overload(requests: Sequence[Request]) -> dict:
    """Whether the server kept up: the arrival rate, the rate requests were served, and whether
    waiting grew over the run (TTFT of the last fifth of arrivals against the first fifth's).
    ``message`` is a plain sentence when overloaded (what a planner must see first), else None.
    A run whose requests do not all finish counts as overloaded too."""
    reqs = sorted(requests, key=lambda r: r.arrival_time)
    fin = [r for r in reqs if r.state is RequestState.FINISHED and r.token_times]
    unfinished = sum(r.state is not RequestState.FINISHED and r.state is not RequestState.REJECTED
                     for r in reqs)
    return overload_of(
        len(reqs), reqs[0].arrival_time if reqs else 0.0, reqs[-1].arrival_time if reqs else 0.0,
        [r.token_times[0] - r.arrival_time for r in fin],
        max((cast(float, r.finish_time) for r in fin), default=0.0), unfinished)


def overload_of(num_requests: int, first_arrival: float, last_arrival: float,
                ttfts_by_arrival: Sequence[float], last_finish: float, unfinished: int) -> dict:
    """``overload`` from a run's totals: the TTFTs (seconds) of the finished requests in
    arrival order, and when the last of them finished (a streamed run keeps only these)."""
    out: dict = {"overloaded": False, "arrival_rate": None, "served_rate": None,
                 "ttft_first_fifth_ms": None, "ttft_last_fifth_ms": None, "message": None}
    if num_requests > 1 and last_arrival > first_arrival:
        out["arrival_rate"] = (num_requests - 1) / (last_arrival - first_arrival)
    n = len(ttfts_by_arrival)
    if not n:
        return out
    out["served_rate"] = n / max(last_finish - first_arrival, 1e-12)
    fifth = max(1, n // 5)
    first = float(np.mean(ttfts_by_arrival[:fifth]))
    last = float(np.mean(ttfts_by_arrival[n - fifth:]))
    out["ttft_first_fifth_ms"], out["ttft_last_fifth_ms"] = 1000 * first, 1000 * last
    grows = last - first > OVERLOAD_TTFT_GROWTH_S and last > 2 * first
    if grows or unfinished:
        out["overloaded"] = True
        rate = f"{out['arrival_rate']:.2f}" if out["arrival_rate"] is not None else "?"
        out["message"] = (f"overloaded: arrivals {rate} req/s, served {out['served_rate']:.2f} "
                          f"req/s, queue growing (mean TTFT {1000 * first:,.0f} ms for the first "
                          f"fifth of arrivals, {1000 * last:,.0f} ms for the last)")
    return out


def kv_breakdown(steps: dict[str, list]) -> dict:
    """Duration-weighted KV fractions over the steps with a waiting request (or all steps)."""
    dur = np.asarray(steps["duration_s"], dtype=float)
    if dur.size == 0:
        out: dict = {k: 0.0 for k in KV_FIELDS}
        out["fragmentation_of_used"] = out["token_states_of_used"] = 0.0
        out["averaged_over"] = "no steps"
        return out
    waiting = np.asarray(steps["num_waiting"]) > 0
    mask, over = (waiting, "steps with waiting requests") if waiting.any() else (np.ones_like(waiting), "all steps")
    cols = {k: np.asarray(steps[f"kv_{k}"], dtype=float)[mask] for k in KV_FIELDS}
    total = cast(np.ndarray, sum(cols.values()))  # an array: KV_FIELDS is not empty
    total[total == 0] = 1.0
    w = dur[mask]
    out = {k: float(np.sum(cols[k] / total * w) / w.sum()) for k in KV_FIELDS}
    # The same split as a share of the memory in use (not free): at light load fragmentation
    # is a sliver of all memory but may be a large part of what requests hold, which is where
    # block size shows.
    used = total - cols["free"]
    held = used > 0
    if held.any():
        wu = w[held]
        frag = (cols["internal_fragmentation"] + cols["external_fragmentation"])[held] / used[held]
        out["fragmentation_of_used"] = float(np.sum(frag * wu) / wu.sum())
        out["token_states_of_used"] = float(np.sum(cols["token_states"][held] / used[held] * wu) / wu.sum())
    else:
        out["fragmentation_of_used"] = out["token_states_of_used"] = 0.0
    out["averaged_over"] = over
    out["time_with_waiting_s"] = float(dur[waiting].sum())
    return out


@dataclass
class RunTotals:
    """What ``summary.json`` is computed from: counts, token sums, latency statistics (ms) and
    the overload picture. ``totals_of`` fills it from the requests; a streamed run
    (``sim.streaming``) fills it as requests finish, without keeping them."""

    num_requests: int
    completed: int
    rejected: int
    start: float                      # first arrival
    end: float                        # last finish (``start`` when none finished)
    input_tokens: int
    output_tokens: int
    latency_stats: dict[str, dict]    # ttft/tpot/itl/e2el -> _stats (mean, median, std, p90, p99)
    slo_good: int                     # completed requests inside the per-request SLO
    spec_proposed: int
    spec_accepted: int
    spec_request_steps: int           # verification steps summed over requests
    reject_reasons: list[str]         # distinct, sorted
    overload: dict = field(default_factory=dict)


def totals_of(requests: Sequence[Request], slo_ttft_ms: Optional[float] = None,
              slo_tpot_ms: Optional[float] = None, stream_interval: int = 1) -> RunTotals:
    completed = [r for r in requests if r.state is RequestState.FINISHED]
    rejected = [r for r in requests if r.state is RequestState.REJECTED]
    start = min((r.arrival_time for r in requests), default=0.0)
    lat = request_latencies(requests, stream_interval)
    good = 0
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        good = sum(meets_slo(r, slo_ttft_ms, slo_tpot_ms) for r in completed)
    return RunTotals(
        num_requests=len(requests), completed=len(completed), rejected=len(rejected),
        start=start, end=max((cast(float, r.finish_time) for r in completed), default=start),
        input_tokens=sum(r.prompt_len for r in completed),
        output_tokens=sum(r.num_output_tokens for r in completed),
        # consume: the arrays are this function's own
        latency_stats={name: _stats(lat[name], consume=True) for name in LATENCY_METRICS},
        slo_good=good,
        spec_proposed=sum(r.num_spec_proposed for r in completed),
        spec_accepted=sum(r.num_spec_accepted for r in completed),
        spec_request_steps=sum(r.num_spec_steps for r in completed),
        reject_reasons=sorted({cast(str, r.reject_reason) for r in rejected}),  # set on rejection
        overload=overload(requests))


def achieved_concurrency(t: RunTotals, duration: float) -> float:
    """The time-averaged number of requests in flight (from send to last token) over the run
    (first send to last finish). Each completed request is in flight exactly its E2E and a
    rejected one not at all, so the integral of the number in flight is the completed
    requests' E2E summed: completed x mean E2E / duration, i.e. throughput x mean E2E (Little's
    law, exact over a run that starts and ends empty). sglang's bench_serving reports the same
    figure as its ``concurrency``. From the totals, so a streamed run reports it too."""
    mean_ms = t.latency_stats["e2el"].get("mean")
    if not t.completed or mean_ms is None:
        return 0.0
    return t.completed * (mean_ms / 1000.0) / duration


def offload_summary(stats: Sequence[dict], prefix_queries: int, prefix_hits: int) -> dict:
    """``summary["kv_cache"]["offload"]``: KV offload tiers, from every engine's
    ``KVAllocator.offload_stats()`` (counts summed over engines; capacity, bandwidth per engine).

    Per tier (``gpu`` first, then ``cpu`` / ``ssd`` as configured): ``hit_tokens`` served from
    it at requests' first admissions, ``hit_rate`` = those over prompt tokens looked up (so the
    tiers' rates sum to ``prefix_cache_hit_rate``), ``share_of_hits`` of all hit tokens. Lower
    tiers add ``queried_tokens`` (tokens looked up there: past the GPU hits, up to the first
    miss), ``lookup_hit_rate`` (hits over those), ``loaded_blocks`` / ``loaded_gb`` / ``load_s``
    (every load back, re-admissions after a recompute preemption too, at the tier's
    bandwidth), ``evictions`` (pushed down a tier, or dropped from the last),
    ``inserted_blocks``, ``superseded_blocks`` (dropped: the GPU computed them again) and
    ``resident_blocks`` at the end."""
    hits, queries = prefix_hits, prefix_queries

    def rate(n: float, d: float) -> float:
        return n / d if d else 0.0

    gpu_hits = sum(s["gpu_hit_tokens"] for s in stats)
    out: dict = {
        "tiers": list(stats[0]["tiers"]) if stats else [],
        "gpu": {"hit_tokens": gpu_hits, "hit_rate": rate(gpu_hits, queries),
                "share_of_hits": rate(gpu_hits, hits),
                "evictions": sum(s["gpu_evicted_blocks"] for s in stats)},
    }
    for name in out["tiers"]:
        per = [s["tiers"][name] for s in stats]
        first = per[0]

        def total(key: str) -> float:
            return sum(p[key] for p in per)

        hit_tokens = total("hit_tokens")
        queried = total("queried_tokens")
        out[name] = {
            "capacity_blocks": first["capacity_blocks"],
            "capacity_gb": first["capacity_blocks"] * first["block_bytes"] / 1e9,
            "bandwidth_gbs": first["bandwidth"] / 1e9,
            "queried_tokens": queried,
            "hit_tokens": hit_tokens,
            "hit_rate": rate(hit_tokens, queries),
            "lookup_hit_rate": rate(hit_tokens, queried),
            "share_of_hits": rate(hit_tokens, hits),
            "loaded_blocks": total("loaded_blocks"),
            "loaded_gb": total("loaded_bytes") / 1e9,
            "load_s": total("load_s"),
            "evictions": total("evicted_blocks"),
            "inserted_blocks": total("inserted_blocks"),
            "superseded_blocks": total("superseded_blocks"),
            "resident_blocks": total("resident_blocks"),
        }
    out["dropped_blocks"] = sum(s["dropped_blocks"] for s in stats)
    return out


def summarize(requests: Sequence[Request], steps: dict[str, list], *,
              slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
              num_preemptions: int = 0, prefix_queries: int = 0, prefix_hits: int = 0,
              num_gpus: int = 1, stream_interval: int = 1) -> dict:
    """The ``summary.json`` dictionary (ITL one gap a streamed chunk of ``stream_interval``
    tokens: ``chunk_times``)."""
    totals = totals_of(requests, slo_ttft_ms, slo_tpot_ms, stream_interval)
    spec_steps = int((np.asarray(steps["num_spec_tokens"]) > 0).sum()) if totals.spec_proposed else 0
    return summary_of(totals, kv_breakdown(steps), spec_steps, slo_ttft_ms=slo_ttft_ms,
                      slo_tpot_ms=slo_tpot_ms, num_preemptions=num_preemptions,
                      prefix_queries=prefix_queries, prefix_hits=prefix_hits, num_gpus=num_gpus)


def summary_of(t: RunTotals, kv: dict, num_spec_steps: int, *,
               slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
               num_preemptions: int = 0, prefix_queries: int = 0, prefix_hits: int = 0,
               num_gpus: int = 1) -> dict:
    """The ``summary.json`` dictionary from a run's totals and its KV breakdown."""
    duration = max(t.end - t.start, 1e-12)
    out_tokens, in_tokens = t.output_tokens, t.input_tokens
    summary: dict = {
        "num_requests": t.num_requests,
        "completed": t.completed,
        "rejected": t.rejected,
        "duration_s": duration,
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "request_throughput": t.completed / duration,
        "output_throughput": out_tokens / duration,
        "total_token_throughput": (in_tokens + out_tokens) / duration,
        "output_throughput_per_gpu": out_tokens / duration / num_gpus,
        "achieved_concurrency": achieved_concurrency(t, duration),
    }
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        summary["goodput"] = t.slo_good / duration
        summary["slo_attainment"] = t.slo_good / max(t.num_requests, 1)
        summary["slo"] = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms}
    for name in LATENCY_METRICS:
        stats = t.latency_stats[name]
        summary[f"{name}_ms"] = stats  # nested view: summary["ttft_ms"]["p99"]
        for stat, value in stats.items():
            summary[f"{stat}_{name}_ms"] = value  # vllm bench serve's flat names: p99_ttft_ms
    kv = dict(kv)
    kv["preemptions"] = num_preemptions
    kv["prefix_cache_hit_rate"] = prefix_hits / prefix_queries if prefix_queries else 0.0
    summary["kv_cache"] = kv
    proposed = t.spec_proposed
    if proposed:
        accepted = t.spec_accepted
        summary["spec_decode"] = {
            "num_draft_tokens": proposed,
            "num_accepted_tokens": accepted,
            "acceptance_rate": accepted / proposed,
            "num_spec_steps": num_spec_steps,
            # Mean tokens a request emits per verification step (accepted drafts + 1).
            "mean_tokens_per_step": 1.0 + accepted / max(t.spec_request_steps, 1),
        }
    if t.rejected:
        summary["rejected_examples"] = t.reject_reasons[:3]
    summary["overload"] = t.overload
    return summary
