"""``/metrics``: the server's state in Prometheus' text format, under vLLM's metric names, so a
Grafana board or an autoscaler written for vLLM reads kvplan unchanged.

Written by hand (gauges, counters, histograms and the text format are a few dozen lines)
rather than with prometheus_client: one dependency fewer, and no process-global registry that
two servers in one test process would fight over. The engine thread writes, the HTTP thread
renders; one lock covers both.
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Iterable, Optional

# vLLM's bucket boundaries (vllm/v1/metrics/loggers.py), so histograms line up on one board.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
               10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
               120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)

FINISH_REASONS = ("stop", "length", "abort")


class Histogram:
    def __init__(self, buckets: Iterable[float]) -> None:
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1


class ServerMetrics:
    """Everything ``/metrics`` shows. Counters only go up; gauges are the engine's last state."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.lock = threading.Lock()
        # gauges, set by the engine thread after every step
        self.num_running = 0
        self.num_waiting = 0
        self.kv_usage = 0.0
        # counters the engine keeps itself (copied, not summed)
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.preemptions = 0
        # counters kept here
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = {r: 0 for r in FINISH_REASONS}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    # --- writing (engine thread) ----------------------------------------------------------------
    def set_engine_state(self, running: int, waiting: int, kv_usage: float, prefix_queries: int,
                         prefix_hits: int, preemptions: int) -> None:
        with self.lock:
            self.num_running, self.num_waiting, self.kv_usage = running, waiting, kv_usage
            self.prefix_queries, self.prefix_hits, self.preemptions = prefix_queries, prefix_hits, preemptions

    def record_tokens(self, prompt_tokens: int, ttft: Optional[float], gaps: Iterable[float]) -> None:
        """A request's newly emitted tokens: its prompt and TTFT with the first one, and the
        gap before each later one."""
        with self.lock:
            if ttft is not None:
                self.prompt_tokens += prompt_tokens
                self.ttft.observe(ttft)
                self.generation_tokens += 1
            for gap in gaps:
                self.itl.observe(gap)
                self.generation_tokens += 1

    def record_finish(self, reason: str, e2e: Optional[float]) -> None:
        """A request that ran ended (a rejected one never ran: not counted)."""
        if reason not in self.finished:
            return
        with self.lock:
            self.finished[reason] += 1
            if e2e is not None and reason != "abort":
                self.e2e.observe(e2e)

    # --- reading (HTTP thread) ------------------------------------------------------------------
    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        label = f'model_name="{_escape(self.model_name)}"'
        out: list[str] = []
        with self.lock:
            gauges = [
                ("vllm:num_requests_running", "Number of requests in model execution batches.", self.num_running),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.num_waiting),
                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", self.kv_usage),
                ("vllm:gpu_cache_usage_perc", "KV-cache usage (vLLM's older name). 1 means 100 percent usage.",
                 self.kv_usage),
            ]
            counters = [
                ("vllm:prefix_cache_queries_total", "Prefix cache queries, in prompt tokens.", self.prefix_queries),
                ("vllm:prefix_cache_hits_total", "Prefix cache hits, in prompt tokens.", self.prefix_hits),
                ("vllm:num_preemptions_total", "Cumulative number of preemptions.", self.preemptions),
                ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", self.prompt_tokens),
                ("vllm:generation_tokens_total", "Number of generation tokens processed.", self.generation_tokens),
            ]
            for name, help_, value in gauges:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{label}}} {_num(value)}"]
            for name, help_, value in counters:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}{{{label}}} {_num(value)}"]
            name = "vllm:request_success_total"
            out += [f"# HELP {name} Count of finished requests, by finish reason.", f"# TYPE {name} counter"]
            out += [f'{name}{{{label},finished_reason="{r}"}} {_num(n)}' for r, n in self.finished.items()]
            hists = [
                ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
                ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", self.itl),
                ("vllm:time_per_output_token_seconds",
                 "Histogram of time per output token in seconds (vLLM's older name).", self.itl),
                ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                 self.e2e),
            ]
            for name, help_, h in hists:
                out += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
                cumulative = 0
                for bound, n in zip((*h.bounds, math.inf), h.counts):
                    cumulative += n
                    le = "+Inf" if bound == math.inf else repr(float(bound))
                    out.append(f'{name}_bucket{{{label},le="{le}"}} {_num(cumulative)}')
                out.append(f"{name}_sum{{{label}}} {_num(h.sum)}")
                out.append(f"{name}_count{{{label}}} {_num(h.count)}")
        return "\n".join(out) + "\n"


def _num(value: float) -> str:
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
