"""``kvplan loadgen``'s results in two files other tools read: ``vllm bench serve --save-result
--save-detailed`` JSON (``bench.json``) and a kvplan trace (``trace.csv``).

Why vLLM's format: it is what serving engineers already collect, plot and diff; kvplan's own
reader (``calibration.real_runs.read_vllm_bench``, behind ``validate --real``) reads it back, so a
load test of any server becomes a run the simulator can be scored against. The fields and their
definitions follow ``vllm/benchmarks/serve.py``: latencies in ms for the statistics, per-request
``ttfts`` and ``itls`` in seconds, TPOT per request as ``(E2E - TTFT) / (output tokens - 1)``,
ITL one value per streamed chunk, throughputs over the benchmark's duration, a failed request
with 0 output tokens, TTFT 0 and its error.

``trace.csv`` is a length table with arrival times (``arrived_at, num_prefill_tokens,
num_decode_tokens``, what ``workload.trace`` replays) plus the measured columns, one row per
request sent.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from calibration.loadgen import LoadRun

#: Percentiles written for every latency metric (vllm bench serve ``--metric-percentiles``).
PERCENTILES = (50, 90, 95, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
TRACE_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens", "request_id", "sent_at",
                 "planned_prefill_tokens", "ttft_ms", "tpot_ms", "e2el_ms", "mean_itl_ms",
                 "num_chunks", "finish_reason", "error")
BACKENDS = {"completions": "openai", "chat": "openai-chat"}


def bench_result(run: LoadRun, *, request_rate: float, burstiness: float = 1.0,
                 metadata: Optional[dict[str, Any]] = None, tokenizer_id: Optional[str] = None) -> dict:
    """The ``vllm bench serve --save-result --save-detailed`` document for ``run``.
    ``metadata`` lands at the top level (as ``--metadata KEY=VALUE`` does)."""
    done = run.completed
    ttfts = [r.ttft_s for r in done]
    e2els = [r.e2el_s for r in done]
    itls = [x for r in done for x in r.itl_s]
    tpots = [(r.e2el_s - r.ttft_s) / (r.output_len - 1) for r in done if r.output_len > 1]
    total_in = sum(r.input_len for r in done)
    total_out = sum(r.output_len for r in done)
    dur = max(run.duration_s, 1e-9)
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": BACKENDS[run.target.endpoint_type],
        "backend": BACKENDS[run.target.endpoint_type],
        "label": None,
        "model_id": run.target.model,
        "tokenizer_id": tokenizer_id or run.target.model_root or run.target.model,
        "num_prompts": len(run.results),
    }
    doc.update(metadata or {})
    doc.update({
        "request_rate": request_rate if math.isfinite(request_rate) else "inf",
        "burstiness": burstiness,
        # The client's cap on requests in flight (a closed loop's clients), as vllm bench records it.
        "max_concurrency": run.clients.limit if run.clients is not None else None,
        "duration": run.duration_s,
        "completed": len(done),
        "failed": len(run.results) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / dur,
        "request_goodput": None,
        "output_throughput": total_out / dur,
        "total_token_throughput": (total_in + total_out) / dur,
        "input_lens": [r.input_len for r in run.results],
        "output_lens": [r.output_len for r in run.results],
        "ttfts": [r.ttft_s if r.success else 0.0 for r in run.results],
        "itls": [list(r.itl_s) if r.success else [] for r in run.results],
        "start_times": [r.start_s for r in run.results],
        "generated_texts": [r.text for r in run.results],
        "errors": [r.error for r in run.results],
    })
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        doc.update(_stats_ms(name, values))
    return doc


def _stats_ms(name: str, seconds: list[float]) -> dict[str, float]:
    """vLLM's ``mean_/median_/std_/p<P>_<name>_ms`` (0 when there is no value, as vLLM does)."""
    a = np.asarray(seconds or [0.0], dtype=float) * 1000.0
    out = {f"mean_{name}_ms": float(a.mean()), f"median_{name}_ms": float(np.median(a)),
           f"std_{name}_ms": float(a.std())}
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(a, p))
    return out


def write_bench(path: Path, doc: dict) -> Path:
    """Serialise first, then write: a failure never leaves half a file."""
    text = json.dumps(doc, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def write_trace(path: Path, run: LoadRun) -> Path:
    """``trace.csv``: the offered load (arrival, prompt tokens the server counted, output tokens
    asked) and what was measured, one row per request sent. ``workload.trace`` replays it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(TRACE_COLUMNS)
        for r in run.results:
            ok = r.success
            tpot = (r.e2el_s - r.ttft_s) / (r.output_len - 1) if ok and r.output_len > 1 else None
            w.writerow([f"{r.arrival_s:.6f}", r.input_len, r.max_tokens, r.index, _num(r.start_s, 1, 6),
                        r.planned_prompt_len, _num(r.ttft_s if ok else None), _num(tpot),
                        _num(r.e2el_s if ok else None), _num(float(np.mean(r.itl_s)) if ok and r.itl_s else None),
                        r.num_chunks, r.finish_reason or "", r.error])
    return path


def _num(v: Optional[float], scale: float = 1000.0, digits: int = 3) -> str:
    return "" if v is None else f"{v * scale:.{digits}f}"


#: (label, key, format) rows of vllm bench serve's printed result, in its order.
SUMMARY_ROWS = (
    ("Successful requests:", "completed", "d"), ("Failed requests:", "failed", "d"),
    ("Benchmark duration (s):", "duration", ".2f"), ("Total input tokens:", "total_input_tokens", "d"),
    ("Total generated tokens:", "total_output_tokens", "d"),
    ("Request throughput (req/s):", "request_throughput", ".2f"),
    ("Output token throughput (tok/s):", "output_throughput", ".2f"),
    ("Total Token throughput (tok/s):", "total_token_throughput", ".2f"),
)
SECTIONS = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
            ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"))


def summary_lines(doc: dict) -> list[str]:
    """The result as ``vllm bench serve`` prints it (same labels, same order)."""
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    for label, key, fmt in SUMMARY_ROWS:
        lines.append(f"{label:<40} {format(doc[key], fmt):<10}")
    for key, short, header in SECTIONS:
        lines.append("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        lines.append(f"{f'Mean {short} (ms):':<40} {doc[f'mean_{key}_ms']:<10.2f}")
        lines.append(f"{f'Median {short} (ms):':<40} {doc[f'median_{key}_ms']:<10.2f}")
        lines.append(f"{f'P99 {short} (ms):':<40} {doc[f'p99_{key}_ms']:<10.2f}")
    lines.append("=" * 50)
    return lines


def print_summary(doc: dict, echo: Callable[[str], Any] = print) -> None:
    for line in summary_lines(doc):
        echo(line)
