"""Streamed runs: memory bounded however many requests a run has.

A normal run keeps every ``Request`` (with one timestamp per output token) and every step row
until the end, then computes ``summary.json`` from them: about 15 KB a request, so a million
requests need gigabytes. A streamed run (``simulate(stream_to=folder)``, ``kvplan simulate
--stream``) builds each request only when it arrives (``sim.workload.RequestStream``), writes
it to ``requests.csv`` when it finishes and forgets it, writes step rows to ``steps.csv`` in
chunks, and keeps running totals instead: counts and token sums, one float per request for
TTFT, TPOT and E2EL (their statistics stay exact, computed in request order as a normal run
does), duration-weighted KV sums (exact up to summation order, about 1e-12 relative), and for
the inter-token latency, which has one value per output token, a histogram.

The ITL histogram has log-spaced bins of relative width ``ITL_BIN_WIDTH``: its mean and
standard deviation are exact up to summation order, and its median and percentiles are within
``ITL_BIN_WIDTH / 2`` (relative) of the exact ones. ``summary["simulator"]["streamed"]`` says so.
"""

from __future__ import annotations

import csv
import math
from array import array
from pathlib import Path
from typing import IO, Any, Optional, cast

import numpy as np

from sim.metrics import (KV_FIELDS, LATENCY_METRICS, PERCENTILES, RunTotals, _stats, chunk_times, meets_slo,
                         overload_of)
from sim.policies.request import Request, RequestState
from sim.results import REQUEST_COLUMNS, request_row
from sim.simulation import COL, STEP_COLUMNS

#: Relative width of an ITL histogram bin: percentiles within half of it.
ITL_BIN_WIDTH = 1e-4
#: The histogram's range in seconds (gaps outside it land in the end bins).
ITL_RANGE_S = (1e-7, 1e5)
#: Token timestamps buffered before they are folded into the histogram.
ITL_BUFFER = 1 << 20


class ItlHistogram:
    """Inter-token gaps, pooled over requests, as counts in log-spaced bins plus exact sums."""

    def __init__(self) -> None:
        self.log_base = math.log1p(ITL_BIN_WIDTH)
        self.lo = math.floor(math.log(ITL_RANGE_S[0]) / self.log_base)
        hi = math.ceil(math.log(ITL_RANGE_S[1]) / self.log_base)
        self.counts = np.zeros(hi - self.lo + 1, dtype=np.int64)
        self.zeros = 0          # gaps of exactly 0 (tokens emitted together: speculative decoding)
        self.n = 0
        self.total = 0.0
        self.total_sq = 0.0
        self._times = array("d")
        self._firsts = array("q")  # where each request's timestamps start in ``_times``

    def add(self, token_times: Any) -> None:
        if len(token_times) > 1:
            self._firsts.append(len(self._times))
            self._times.extend(token_times)
            if len(self._times) >= ITL_BUFFER:
                self.fold()

    def fold(self) -> None:
        if not self._times:
            return
        t = np.frombuffer(self._times, dtype=float)
        gaps = np.diff(t)
        keep = np.ones(gaps.size, dtype=bool)
        starts = np.frombuffer(self._firsts, dtype=np.int64)
        keep[starts[1:] - 1] = False  # the gap from one request's last token to the next's first
        gaps = gaps[keep]
        self.n += gaps.size
        self.total += float(gaps.sum())
        self.total_sq += float(np.dot(gaps, gaps))
        positive = gaps[gaps > 0]
        self.zeros += gaps.size - positive.size
        k = np.floor(np.log(positive) / self.log_base).astype(np.int64) - self.lo
        np.clip(k, 0, self.counts.size - 1, out=k)
        self.counts += np.bincount(k, minlength=self.counts.size)
        self._times = array("d")
        self._firsts = array("q")

    def _value(self, rank: int, cum: np.ndarray) -> float:
        """The ``rank``-th smallest gap (0-based), as its bin's geometric centre."""
        if rank < self.zeros:
            return 0.0
        b = int(np.searchsorted(cum, rank - self.zeros, side="right"))
        return math.exp((b + self.lo + 0.5) * self.log_base)

    def stats_ms(self) -> dict[str, Optional[float]]:
        """The same keys as ``sim.metrics._stats``: mean and std exact, quantiles binned (with
        numpy's linear interpolation between order statistics)."""
        self.fold()
        if self.n == 0:
            return _stats(np.empty(0))
        cum = np.cumsum(self.counts)

        def quantile(p: float) -> float:
            h = (self.n - 1) * p / 100.0
            lo, hi = math.floor(h), math.ceil(h)
            a = self._value(lo, cum)
            b = a if hi == lo else self._value(hi, cum)
            return 1000.0 * (a + (h - lo) * (b - a))

        mean = self.total / self.n
        var = max(self.total_sq / self.n - mean * mean, 0.0)
        out: dict[str, Optional[float]] = {"mean": 1000.0 * mean, "median": quantile(50.0),
                                           "std": 1000.0 * math.sqrt(var)}
        for p in PERCENTILES:
            out[f"p{p}"] = quantile(float(p))
        return out


class KVTotals:
    """``sim.metrics.kv_breakdown``'s duration-weighted sums, folded in chunk by chunk, over
    both of its masks (steps with a waiting request, and all steps) until the end says which."""

    def __init__(self) -> None:
        self.sums = {mask: np.zeros(len(KV_FIELDS) + 4) for mask in ("waiting", "all")}
        self.any_waiting = False
        self.time_with_waiting = 0.0
        self.num_steps = 0
        self.num_spec_steps = 0

    def add(self, rows: list[tuple]) -> None:
        a = np.asarray(rows, dtype=float)
        self.num_steps += len(a)
        self.num_spec_steps += int((a[:, COL["num_spec_tokens"]] > 0).sum())
        dur = a[:, COL["duration_s"]]
        waiting = a[:, COL["num_waiting"]] > 0
        self.any_waiting |= bool(waiting.any())
        self.time_with_waiting += float(dur[waiting].sum())
        cols = [a[:, COL[f"kv_{k}"]] for k in KV_FIELDS]
        total = cast(np.ndarray, sum(cols))  # an array: KV_FIELDS is not empty
        total[total == 0] = 1.0
        used = total - cols[KV_FIELDS.index("free")]
        held = used > 0
        safe_used = np.where(held, used, 1.0)
        frag = (cols[KV_FIELDS.index("internal_fragmentation")]
                + cols[KV_FIELDS.index("external_fragmentation")]) / safe_used
        tok_used = cols[KV_FIELDS.index("token_states")] / safe_used
        for name, mask in (("waiting", waiting), ("all", np.ones_like(waiting))):
            w = dur[mask]
            s = self.sums[name]
            s[0] += w.sum()
            for i, c in enumerate(cols):
                s[1 + i] += np.sum(c[mask] / total[mask] * w)
            wu = w[held[mask]]
            s[-3] += wu.sum()
            s[-2] += np.sum(frag[mask][held[mask]] * wu)
            s[-1] += np.sum(tok_used[mask][held[mask]] * wu)

    def breakdown(self) -> dict:
        if self.num_steps == 0:
            out: dict = {k: 0.0 for k in KV_FIELDS}
            out["fragmentation_of_used"] = out["token_states_of_used"] = 0.0
            out["averaged_over"] = "no steps"
            return out
        name, over = ("waiting", "steps with waiting requests") if self.any_waiting else ("all", "all steps")
        s = self.sums[name]
        out = {k: float(s[1 + i] / s[0]) for i, k in enumerate(KV_FIELDS)}
        if s[-3] > 0:
            out["fragmentation_of_used"] = float(s[-2] / s[-3])
            out["token_states_of_used"] = float(s[-1] / s[-3])
        else:
            out["fragmentation_of_used"] = out["token_states_of_used"] = 0.0
        out["averaged_over"] = over
        out["time_with_waiting_s"] = self.time_with_waiting
        return out


class StreamRecorder:
    """Writes a run's requests and steps to ``out_dir`` as they happen and keeps the totals
    its summary needs. Use as a context manager (files are closed on error too)."""

    def __init__(self, out_dir: Path, replica_of: dict[str, int],
                 slo_ttft_ms: Optional[float] = None, slo_tpot_ms: Optional[float] = None,
                 stream_interval: int = 1) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.replica_of = replica_of
        self.slo = (slo_ttft_ms, slo_tpot_ms)
        self._files: list[IO[str]] = []
        self._requests = csv.DictWriter(self._open("requests.csv"), fieldnames=REQUEST_COLUMNS)
        self._requests.writeheader()
        self._steps = csv.writer(self._open("steps.csv"))
        self._steps.writerow(STEP_COLUMNS)
        self.kv = KVTotals()
        self.itl = ItlHistogram()
        #: Tokens a streamed chunk carries after the first (ITL is one gap a chunk: ``chunk_times``).
        self.stream_interval = stream_interval
        self.num_requests = self.completed = self.rejected = 0
        self.input_tokens = self.output_tokens = self.slo_good = 0
        self.spec_proposed = self.spec_accepted = self.spec_request_steps = 0
        self.first_arrival, self.last_arrival = math.inf, -math.inf
        self.last_finish = -math.inf
        self.reasons: set[str] = set()
        # Per finished request (with tokens), with its index to put them back in request order.
        self.index, self.ttft, self.e2el = array("q"), array("d"), array("d")
        self.tpot_index, self.tpot = array("q"), array("d")

    def _open(self, name: str) -> IO[str]:
        fh = open(self.out_dir / name, "w", newline="")
        self._files.append(fh)
        return fh

    def __enter__(self) -> "StreamRecorder":
        return self

    def __exit__(self, *exc: Any) -> None:
        for fh in self._files:
            fh.close()

    def request(self, req: Request) -> None:
        """A request finished (or was rejected): write its row, add it to the totals."""
        self._requests.writerow(request_row(req, self.replica_of.pop(req.request_id, 0)))
        self.num_requests += 1
        self.first_arrival = min(self.first_arrival, req.arrival_time)
        self.last_arrival = max(self.last_arrival, req.arrival_time)
        if req.state is RequestState.REJECTED:
            self.rejected += 1
            self.reasons.add(cast(str, req.reject_reason))  # set on rejection
            return
        if req.state is not RequestState.FINISHED:
            return
        finish_time = cast(float, req.finish_time)  # set: the request finished
        self.completed += 1
        self.input_tokens += req.prompt_len
        self.output_tokens += req.num_output_tokens
        self.last_finish = max(self.last_finish, finish_time)
        self.spec_proposed += req.num_spec_proposed
        self.spec_accepted += req.num_spec_accepted
        self.spec_request_steps += req.num_spec_steps
        if self.slo != (None, None):
            self.slo_good += meets_slo(req, *self.slo)
        times = req.token_times
        if not times:
            return
        i = int(req.request_id)
        self.index.append(i)
        self.ttft.append(times[0] - req.arrival_time)
        self.e2el.append(finish_time - req.arrival_time)
        if req.num_output_tokens > 1:
            self.tpot_index.append(i)
            self.tpot.append((finish_time - times[0]) / (req.num_output_tokens - 1))
        self.itl.add(chunk_times(times, self.stream_interval))

    def steps(self, rows: list[tuple]) -> None:
        """A chunk of step rows: written in time order, folded into the KV sums."""
        rows.sort(key=lambda r: (r[COL["start_s"]], r[COL["replica"]]))
        self._steps.writerows(rows)
        self.kv.add(rows)

    def totals(self) -> RunTotals:
        order = np.argsort(np.frombuffer(self.index, dtype=np.int64), kind="stable")
        ttft = np.frombuffer(self.ttft, dtype=float)[order]
        e2el = np.frombuffer(self.e2el, dtype=float)[order]
        tpot = np.frombuffer(self.tpot, dtype=float)[
            np.argsort(np.frombuffer(self.tpot_index, dtype=np.int64), kind="stable")]
        start = self.first_arrival if self.num_requests else 0.0
        ttfts_by_arrival = ttft.tolist()  # before _stats scales the array in place
        stats = {"ttft": _stats(ttft, consume=True), "tpot": _stats(tpot, consume=True),
                 "itl": self.itl.stats_ms(), "e2el": _stats(e2el, consume=True)}
        assert set(stats) == set(LATENCY_METRICS)
        return RunTotals(
            num_requests=self.num_requests, completed=self.completed, rejected=self.rejected,
            start=start, end=self.last_finish if self.completed else start,
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            latency_stats=stats, slo_good=self.slo_good, spec_proposed=self.spec_proposed,
            spec_accepted=self.spec_accepted, spec_request_steps=self.spec_request_steps,
            reject_reasons=sorted(self.reasons),
            overload=overload_of(self.num_requests, start,
                                 self.last_arrival if self.num_requests else 0.0,
                                 ttfts_by_arrival, self.last_finish if self.completed else 0.0, 0))
