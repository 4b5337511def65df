"""The seam between policy and executor: a scheduler's ``StepPlan``, its timing summary
``StepShape``, and the executor's ``StepResult``.

Both executors (the simpy simulator and the real runtime) consume a ``StepPlan`` and hand back a
``StepResult``; the simulator's cost model prices a ``StepShape`` and the runtime records the
measured seconds of every ``StepShape`` it ran, which is what calibration fits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from sim.policies.request import Request


@dataclass(slots=True, init=False)
class StepShape:
    """What a step costs depends on, and nothing else.

    - ``num_prefill_tokens``: new (uncached) tokens of requests in prefill (prompt chunks and
      recompute after preemption); ``num_prefill_seqs`` how many such requests.
    - ``num_decode_seqs``: requests computing exactly one token (+ speculative tokens).
    - ``num_spec_tokens``: draft tokens verified this step (on top of one token per decode).
    - ``decode_context_tokens``: KV tokens read by decode attention (sum of context lengths).
    - ``prefill_context_tokens``: already-cached KV tokens read by prefill chunks.
    - ``prefill_attention_work``: query-key pairs of causal prefill attention,
      sum over chunks of n * context_before + n * (n + 1) / 2.
    - ``num_swap_tokens``: tokens whose KV crosses PCIe this step (swap out + swap in).
    - ``num_padding_tokens``: wasted slots a padded (static) batch computes anyway.
    - ``num_spec_seqs``: decodes that verify drafts this step (each is a multi-token query,
      whose attention an engine may run as its own call: calibration prices it).

    Immutable by convention (shapes are shared, e.g. ``EMPTY_SHAPE``) and hashable. Not a frozen
    dataclass any more: one is made every step, and a frozen dataclass's ``__init__`` sets each
    field through ``object.__setattr__``, interpreted even when compiled; this ``__init__`` is
    written out (the dataclass still gives ``fields``, ``asdict``, ``__eq__`` and ``__repr__``).
    """

    num_prefill_tokens: int = 0
    num_prefill_seqs: int = 0
    num_decode_seqs: int = 0
    num_spec_tokens: int = 0
    decode_context_tokens: int = 0
    prefill_context_tokens: int = 0
    prefill_attention_work: int = 0
    num_swap_tokens: int = 0
    num_padding_tokens: int = 0
    num_spec_seqs: int = 0

    def __init__(self, num_prefill_tokens: int = 0, num_prefill_seqs: int = 0,
                 num_decode_seqs: int = 0, num_spec_tokens: int = 0,
                 decode_context_tokens: int = 0, prefill_context_tokens: int = 0,
                 prefill_attention_work: int = 0, num_swap_tokens: int = 0,
                 num_padding_tokens: int = 0, num_spec_seqs: int = 0) -> None:
        self.num_prefill_tokens = num_prefill_tokens
        self.num_prefill_seqs = num_prefill_seqs
        self.num_decode_seqs = num_decode_seqs
        self.num_spec_tokens = num_spec_tokens
        self.decode_context_tokens = decode_context_tokens
        self.prefill_context_tokens = prefill_context_tokens
        self.prefill_attention_work = prefill_attention_work
        self.num_swap_tokens = num_swap_tokens
        self.num_padding_tokens = num_padding_tokens
        self.num_spec_seqs = num_spec_seqs

    def __hash__(self) -> int:
        return hash((self.num_prefill_tokens, self.num_prefill_seqs, self.num_decode_seqs,
                     self.num_spec_tokens, self.decode_context_tokens, self.prefill_context_tokens,
                     self.prefill_attention_work, self.num_swap_tokens, self.num_padding_tokens,
                     self.num_spec_seqs))

    @property
    def batch_size(self) -> int:
        return self.num_prefill_seqs + self.num_decode_seqs

    @property
    def num_tokens(self) -> int:
        """Tokens through the linear layers (GEMM rows)."""
        return (
            self.num_prefill_tokens
            + self.num_decode_seqs
            + self.num_spec_tokens
            + self.num_padding_tokens
        )

    @property
    def is_empty(self) -> bool:
        return self.num_tokens == 0 and self.num_swap_tokens == 0

    def to_dict(self) -> dict:
        return asdict(self)

    def with_decode_context(self, decode_context_tokens: int) -> "StepShape":
        """This shape with another decode context (the next steps of a decode window); every
        field spelled out, as ``dataclasses.replace`` costs several times more."""
        return StepShape(
            num_prefill_tokens=self.num_prefill_tokens, num_prefill_seqs=self.num_prefill_seqs,
            num_decode_seqs=self.num_decode_seqs, num_spec_tokens=self.num_spec_tokens,
            decode_context_tokens=decode_context_tokens,
            prefill_context_tokens=self.prefill_context_tokens,
            prefill_attention_work=self.prefill_attention_work,
            num_swap_tokens=self.num_swap_tokens, num_padding_tokens=self.num_padding_tokens,
            num_spec_seqs=self.num_spec_seqs)


class ScheduledRequest:
    """One request's share of a step: compute ``num_new_tokens`` tokens starting at
    ``request.num_computed_tokens`` (KV slots are already allocated), plus
    ``num_spec_tokens`` draft tokens to verify.

    ``block_table`` is where its KV lives this step: physical block ids in token order,
    covering every position it computes (token ``p`` sits in slot
    ``block_table[p // block_size] * block_size + p % block_size``), as vLLM v1's
    ``SchedulerOutput`` carries ``block_ids`` and nano-vllm's ``Sequence`` its ``block_table``.
    A scheduler fills it only when made with ``emit_block_tables=True`` (the runtime); it is
    None in the simulator, which never addresses KV memory.
    """

    # A plain class, not a dataclass: one is made per running request per step, and a
    # dataclass's generated __init__ stays interpreted Python even when this module is compiled.
    __slots__ = ("request", "num_new_tokens", "num_spec_tokens", "is_prefill", "block_table")

    def __init__(self, request: Request, num_new_tokens: int, num_spec_tokens: int = 0,
                 is_prefill: bool = False, block_table: Optional[list[int]] = None) -> None:
        self.request = request
        self.num_new_tokens = num_new_tokens
        self.num_spec_tokens = num_spec_tokens
        self.is_prefill = is_prefill
        self.block_table = block_table

    def __repr__(self) -> str:
        return (f"ScheduledRequest(request={self.request.request_id!r}, num_new_tokens="
                f"{self.num_new_tokens}, num_spec_tokens={self.num_spec_tokens}, "
                f"is_prefill={self.is_prefill}, block_table={self.block_table})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScheduledRequest):
            return NotImplemented
        return (self.request is other.request and self.num_new_tokens == other.num_new_tokens
                and self.num_spec_tokens == other.num_spec_tokens
                and self.is_prefill == other.is_prefill and self.block_table == other.block_table)

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it was

    @property
    def context_before(self) -> int:
        return self.request.num_computed_tokens

    @property
    def samples_token(self) -> bool:
        """True when this step reaches the end of the request's known tokens, so the model
        samples a new token for it (a middle prefill chunk does not)."""
        return self.request.num_computed_tokens + self.num_new_tokens >= self.request.num_tokens


#: The shape of a plan not yet finalised (shapes are immutable, so one serves every plan).
EMPTY_SHAPE = StepShape()


class StepPlan:
    """A scheduler's decision for one step.

    A plain class (it was a dataclass; one is made every step, and a compiled dataclass keeps
    an interpreted ``__init__``). ``swap_out_blocks`` / ``swap_in_blocks``: physical blocks to
    copy, for an executor that really moves KV: device blocks a swapped-out request held (copy
    them to host before this step writes anything), and the fresh device blocks a swapped-in
    request got (copy its host copy there first)."""

    __slots__ = ("scheduled", "preempted", "swapped_out", "swapped_in", "rejected", "shape",
                 "swap_out_blocks", "swap_in_blocks")

    def __init__(self, scheduled: Optional[list[ScheduledRequest]] = None,
                 preempted: Optional[list[Request]] = None,
                 swapped_out: Optional[list[Request]] = None,
                 swapped_in: Optional[list[Request]] = None,
                 rejected: Optional[list[Request]] = None,
                 shape: StepShape = EMPTY_SHAPE,
                 swap_out_blocks: Optional[dict[str, list[int]]] = None,
                 swap_in_blocks: Optional[dict[str, list[int]]] = None) -> None:
        self.scheduled: list[ScheduledRequest] = [] if scheduled is None else scheduled
        self.preempted: list[Request] = [] if preempted is None else preempted
        self.swapped_out: list[Request] = [] if swapped_out is None else swapped_out
        self.swapped_in: list[Request] = [] if swapped_in is None else swapped_in
        self.rejected: list[Request] = [] if rejected is None else rejected
        self.shape = shape
        self.swap_out_blocks: dict[str, list[int]] = {} if swap_out_blocks is None else swap_out_blocks
        self.swap_in_blocks: dict[str, list[int]] = {} if swap_in_blocks is None else swap_in_blocks

    def __repr__(self) -> str:
        return (f"StepPlan(scheduled={self.scheduled!r}, preempted={self.preempted!r}, "
                f"swapped_out={self.swapped_out!r}, swapped_in={self.swapped_in!r}, "
                f"rejected={self.rejected!r}, shape={self.shape!r})")

    @property
    def is_empty(self) -> bool:
        return not self.scheduled and self.shape.is_empty

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(s.num_new_tokens + s.num_spec_tokens for s in self.scheduled)


class StepResult:
    """What the executor reports back.

    The simulator passes ``sampled_token_ids=None`` (lengths only) and, with speculative
    decoding, ``num_accepted`` per request id. The runtime passes the real sampled token ids
    per request id (1 + accepted draft tokens each) and the ids that hit a stop condition.
    A plain class, made every step (see ``StepPlan``).
    """

    __slots__ = ("sampled_token_ids", "num_accepted", "stopped")

    def __init__(self, sampled_token_ids: Optional[dict[str, list[int]]] = None,
                 num_accepted: Optional[dict[str, int]] = None,
                 stopped: Optional[set[str]] = None) -> None:
        self.sampled_token_ids = sampled_token_ids
        self.num_accepted = num_accepted
        self.stopped: set[str] = set() if stopped is None else stopped

    def __repr__(self) -> str:
        return (f"StepResult(sampled_token_ids={self.sampled_token_ids!r}, "
                f"num_accepted={self.num_accepted!r}, stopped={self.stopped!r})")


def shape_of(scheduled: list[ScheduledRequest], num_swap_tokens: int = 0,
             num_padding_tokens: int = 0) -> StepShape:
    """Summarise scheduled work into the ``StepShape`` the cost model prices."""
    prefill_tokens = prefill_seqs = decode_seqs = spec = spec_seqs = 0
    decode_ctx = prefill_ctx = prefill_work = 0
    for s in scheduled:
        ctx = s.request.num_computed_tokens
        if s.is_prefill:
            n = s.num_new_tokens
            prefill_tokens += n
            prefill_seqs += 1
            prefill_ctx += ctx
            prefill_work += n * ctx + n * (n + 1) // 2
        else:
            decode_seqs += 1
            spec += s.num_spec_tokens
            spec_seqs += s.num_spec_tokens > 0
            decode_ctx += ctx + s.num_new_tokens + s.num_spec_tokens
    return StepShape(
        num_prefill_tokens=prefill_tokens,
        num_prefill_seqs=prefill_seqs,
        num_decode_seqs=decode_seqs,
        num_spec_tokens=spec,
        decode_context_tokens=decode_ctx,
        prefill_context_tokens=prefill_ctx,
        prefill_attention_work=prefill_work,
        num_swap_tokens=num_swap_tokens,
        num_padding_tokens=num_padding_tokens,
        num_spec_seqs=spec_seqs,
    )
