"""KV transfer and decode-side admission of disaggregated prefill/decode serving: pure policy
(no simpy), what ``sim.disaggregation`` drives.

A request's prompt KV is priced as one transfer over the prefill instance's link:
``latency + bytes / (bandwidth x streams)``, where ``bytes = prompt_len x kv_bytes_per_token``
(the whole model's KV of a token: all layers, every KV head once) and ``streams =
min(tp_prefill, tp_decode)`` GPU links move shards in parallel. Transfers from one prefill
instance are serialised FIFO on its links (``TransferLink``); a decode instance receives from
any number at once.

Decode-side admission follows vLLM's pull model (NixlConnector: blocks allocated while the
request is ``WAITING_FOR_REMOTE_KVS``): a request first *reserves* blocks for its prompt in the
decode instance's pool (``reserve``), then the transfer runs, then it *joins* the decode batch
(``join``) with its prompt computed and its first token emitted, or, when the decode instance
emits every token (vLLM's P/D proxy, llm-d), with its last prompt token left for the decode
instance's next step to run and sample the first token from.
"""

from __future__ import annotations

from typing import Optional

from sim.policies.request import Request, RequestState
from sim.policies.schedulers.base import Scheduler


def transfer_bytes(prompt_len: int, kv_bytes_per_token: float) -> float:
    """Bytes of a request's prompt KV (``kv_bytes_per_token``: the whole model's, one token)."""
    return prompt_len * kv_bytes_per_token


def transfer_seconds(num_bytes: float, bandwidth: float, latency: float, streams: int = 1) -> float:
    """One transfer alone on its link: ``latency + bytes / (bandwidth x streams)``."""
    return latency + num_bytes / (bandwidth * streams)


class TransferLink:
    """One prefill instance's links to the decode pool: transfers run one at a time, FIFO, in
    the order they start (``start``). Records every transfer's duration on the wire and bytes."""

    def __init__(self, bandwidth: float, latency: float, streams: int = 1) -> None:
        if bandwidth <= 0 or latency < 0 or streams < 1:
            raise ValueError("a link needs bandwidth > 0, latency >= 0 and streams >= 1")
        self.bandwidth = bandwidth
        self.latency = latency
        self.streams = streams
        self.busy_until = 0.0
        self.num_transfers = 0
        self.bytes = 0.0
        self.busy_s = 0.0

    def start(self, now: float, num_bytes: float) -> float:
        """Queue a transfer of ``num_bytes`` at ``now``; returns when it completes."""
        begin = max(now, self.busy_until)
        took = transfer_seconds(num_bytes, self.bandwidth, self.latency, self.streams)
        self.busy_until = begin + took
        self.num_transfers += 1
        self.bytes += num_bytes
        self.busy_s += took
        return self.busy_until


def reserve(scheduler: Scheduler, req: Request, num_incoming: int) -> bool:
    """Reserve KV for ``req``'s prompt in a decode instance (``num_incoming``: requests already
    reserved there whose transfer has not landed). False, and nothing taken, when its batch is
    at ``max_num_seqs`` or its pool has no room: the request keeps waiting."""
    if len(scheduler.running) + num_incoming >= scheduler.config.max_num_seqs:
        return False
    req.num_computed_tokens = 0
    return scheduler.allocator.allocate(req, req.prompt_len)


def join(scheduler: Scheduler, req: Request, first_token_time: Optional[float], now: float) -> None:
    """A reserved request whose KV has landed joins the decode batch.

    With ``first_token_time`` (the first token sampled by the prefill instance then): its
    prompt computed and that token emitted. With None (the decode instance emits every token,
    as vLLM's P/D proxy and llm-d serve): its prompt computed but for the last token, which the
    decode instance's next step runs to sample the first token (the KV of the rest landed)."""
    if first_token_time is None:
        req.num_computed_tokens = req.prompt_len - 1
        req.num_output_tokens = 0
    else:
        req.num_computed_tokens = req.prompt_len
        req.num_output_tokens = 1
        req.token_times.append(first_token_time)
    if req.first_scheduled_time is None:
        req.first_scheduled_time = now
    req.state = RequestState.RUNNING
    req.admit_seq = next(scheduler._admit_counter)
    scheduler.running.append(req)


def hold(scheduler: Scheduler, req: Request) -> bool:
    """Take back a finished prefill's prompt blocks in a prefill instance (its scheduler freed
    them at the finish, in the same instant): the KV stays until its transfer completes."""
    return scheduler.allocator.allocate(req, 0)
