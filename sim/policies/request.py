"""A serving request and its life cycle: the one record every policy and executor reads.

Token accounting follows vLLM v1: ``num_computed_tokens`` (tokens whose KV is in the cache)
chases ``num_tokens`` (prompt + emitted outputs). Chunked prefill, prefix-cache hits,
preemption by recompute and speculative tokens are all moves of that one counter.
"""

from __future__ import annotations

from array import array
from enum import Enum
from typing import Optional


class RequestState(str, Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # evicted by recompute, back in the waiting queue
    SWAPPED = "swapped"  # KV moved to host memory, waiting to be swapped back in
    FINISHED = "finished"
    REJECTED = "rejected"

    @property
    def is_terminal(self) -> bool:
        return self in (RequestState.FINISHED, RequestState.REJECTED)


class Request:
    """One request.

    The simulator gives lengths only (``prompt_len`` and ``max_output_tokens`` = the true output
    length); the runtime also gives ``prompt_token_ids`` and appends ``output_token_ids``.
    ``block_hashes`` carries a trace's prefix identity (Mooncake ``hash_ids``: one id per
    ``hash_block_size`` prompt tokens, equal ids = shared prefix) when token ids are unknown.

    A plain class with an explicit ``__init__`` (it was a dataclass): a long run makes one per
    request, and a compiled dataclass keeps an interpreted ``__init__``, several times slower.
    Equality is identity, as before (``eq=False``).
    """

    __slots__ = ("request_id", "arrival_time", "prompt_len", "max_output_tokens", "prompt_token_ids",
                 "block_hashes", "hash_block_size", "priority", "state", "num_computed_tokens",
                 "num_output_tokens", "output_token_ids", "token_times", "first_scheduled_time",
                 "finish_time", "finish_reason", "reject_reason", "num_preemptions",
                 "num_cached_tokens", "num_spec_proposed", "num_spec_accepted", "num_spec_steps",
                 "num_draft_tokens", "admit_seq", "block_hash_cache", "block_hash_size")

    def __init__(self, request_id: str, arrival_time: float, prompt_len: int,
                 max_output_tokens: int, prompt_token_ids: Optional[list[int]] = None,
                 block_hashes: Optional[list[int]] = None, hash_block_size: int = 512,
                 priority: int = 0) -> None:
        self.request_id = request_id
        self.arrival_time = arrival_time
        self.prompt_len = prompt_len
        self.max_output_tokens = max_output_tokens
        self.prompt_token_ids = prompt_token_ids
        self.block_hashes = block_hashes
        self.hash_block_size = hash_block_size
        self.priority = priority  # lower value = served first under the priority policy
        self.state = RequestState.WAITING
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.output_token_ids: list[int] = []
        #: When each output token was emitted. A float array, not a list: it is the bulk of a
        #: long run's memory (8 bytes a token instead of 32 for a list of float objects).
        self.token_times: array = array("d")
        self.first_scheduled_time: Optional[float] = None
        self.finish_time: Optional[float] = None
        self.finish_reason: Optional[str] = None  # "length", "stop", "abort"
        self.reject_reason: Optional[str] = None
        self.num_preemptions = 0
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache (first admission)
        self.num_spec_proposed = 0
        self.num_spec_accepted = 0
        self.num_spec_steps = 0
        # Draft tokens the executor's proposer has ready for the next step. None: a proposer
        # that always fills k (the simulator's draft model); the runtime's n-gram proposer sets
        # it, because a lookup can find fewer than k tokens or none (vLLM v1 schedules only those).
        self.num_draft_tokens: Optional[int] = None
        # Set by a scheduler that admits a request: the order of admission (preemption picks newest).
        self.admit_seq = -1
        # Memo of prefix-cache block hashes (see sim.policies.kv.hashing); not part of identity.
        self.block_hash_cache: list[int] = []
        self.block_hash_size = 0
        if prompt_token_ids is not None and prompt_len != len(prompt_token_ids):
            raise ValueError(
                f"request {request_id}: prompt_len {prompt_len} != "
                f"{len(prompt_token_ids)} prompt token ids"
            )
        if prompt_len < 1:
            raise ValueError(f"request {request_id}: prompt_len must be >= 1")
        if max_output_tokens < 1:
            raise ValueError(f"request {request_id}: max_output_tokens must be >= 1")

    # --- lengths -------------------------------------------------------------------------
    @property
    def num_tokens(self) -> int:
        """Prompt plus emitted output tokens: what the KV cache must eventually hold (minus the
        newest token, whose KV is computed by the step that consumes it)."""
        return self.prompt_len + self.num_output_tokens

    @property
    def max_total_tokens(self) -> int:
        """Upper bound of ``num_tokens`` (prompt + all outputs)."""
        return self.prompt_len + self.max_output_tokens

    @property
    def final_kv_len(self) -> int:
        """KV slots the request holds at its last step: the final output token is never fed
        back, so prompt + outputs - 1. An oracle allocator reserves exactly this."""
        return self.prompt_len + self.max_output_tokens - 1

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_prefill(self) -> bool:
        """True while known tokens (prompt, or prompt + outputs after a recompute) are still
        missing from the KV cache beyond the one token a decode step computes."""
        return self.num_uncomputed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.state.is_terminal

    def token_id(self, index: int) -> int:
        """Token id at position ``index`` of prompt + outputs (runtime only)."""
        if self.prompt_token_ids is None:
            raise ValueError(f"request {self.request_id} carries no token ids")
        if index < self.prompt_len:
            return self.prompt_token_ids[index]
        return self.output_token_ids[index - self.prompt_len]

    def all_token_ids(self) -> list[int]:
        if self.prompt_token_ids is None:
            raise ValueError(f"request {self.request_id} carries no token ids")
        return self.prompt_token_ids + self.output_token_ids

    # --- timing metrics (seconds) ---------------------------------------------------------
    @property
    def ttft(self) -> Optional[float]:
        return self.token_times[0] - self.arrival_time if self.token_times else None

    @property
    def e2el(self) -> Optional[float]:
        return None if self.finish_time is None else self.finish_time - self.arrival_time

    @property
    def tpot(self) -> Optional[float]:
        """vLLM's definition: (e2el - ttft) / (output_len - 1); None for a single token."""
        if self.finish_time is None or not self.token_times or self.num_output_tokens < 2:
            return None
        return (self.finish_time - self.token_times[0]) / (self.num_output_tokens - 1)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, state={self.state.value}, prompt={self.prompt_len}, "
            f"out={self.num_output_tokens}/{self.max_output_tokens}, computed={self.num_computed_tokens})"
        )
