"""The server's own latency figures, from its Prometheus ``/metrics``: the HTTP overhead.

Why: a client measures TTFT from the moment it sends a request; the server measures it from
the moment its engine receives it. The difference is what lies between: the HTTP round trip,
JSON and SSE encoding, tokenisation, the API server's queue, the client's own event loop. The
simulator prices only the engine, so ``validate --endpoint`` reports this overhead beside its
errors. vLLM and ``kvplan serve`` both export the histograms
``vllm:time_to_first_token_seconds`` and ``vllm:e2e_request_latency_seconds``; the mean over a
run is the change of ``_sum`` over the change of ``_count`` between a scrape before and after.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

#: Histogram base names (any ``prefix:`` before them is accepted: ``vllm:``, ``kvplan:``).
TTFT = "time_to_first_token_seconds"
E2E = "e2e_request_latency_seconds"
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict[str, float]:
    """Metric name -> value summed over its label sets (``# HELP``/``# TYPE`` lines skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


async def scrape(session: Any, root_url: str, api_key: Optional[str] = None) -> Optional[str]:
    """The text of ``root_url/metrics``, or None when the server has no such page."""
    import asyncio

    import aiohttp

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(f"{root_url}/metrics", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
        return None


def config_info(text: Optional[str]) -> dict[str, str]:
    """The labels of the ``*_config_info`` gauges (vLLM's ``vllm:cache_config_info`` carries
    ``block_size``, ``num_gpu_blocks``, ``enable_prefix_caching``, ...), merged."""
    out: dict[str, str] = {}
    for line in (text or "").splitlines():
        m = _LINE.match(line.strip())
        if m is None or not m.group(1).endswith("config_info") or not m.group(2):
            continue
        out.update(dict(_LABEL.findall(m.group(2))))
    return out


@dataclass(frozen=True)
class ServerLatency:
    """Means over the requests the server finished between two scrapes (seconds)."""

    num_requests: int
    mean_ttft_s: Optional[float]
    mean_e2el_s: Optional[float]


def server_latency(before_text: Optional[str], after_text: Optional[str]) -> Optional[ServerLatency]:
    """The server-side means between two scrapes (``/metrics`` texts), or None when a scrape or
    the histograms are missing or no request finished in between."""
    if before_text is None or after_text is None:
        return None
    before, after = parse_prometheus(before_text), parse_prometheus(after_text)

    def mean(base: str) -> tuple[int, Optional[float]]:
        name = _find(after, base)
        if name is None:
            return 0, None
        n = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
        s = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
        return int(round(n)), (s / n if n > 0 else None)

    n_ttft, ttft = mean(TTFT)
    n_e2e, e2e = mean(E2E)
    if ttft is None and e2e is None:
        return None
    return ServerLatency(num_requests=max(n_ttft, n_e2e), mean_ttft_s=ttft, mean_e2el_s=e2e)


def _find(metrics: dict[str, float], base: str) -> Optional[str]:
    """The full name (``vllm:time_to_first_token_seconds``) of a histogram, by its base name."""
    for key in metrics:
        if key.endswith(f"{base}_count") and (key == f"{base}_count" or key[-len(base) - 7] in ":_"):
            return key[: -len("_count")]
    return None
