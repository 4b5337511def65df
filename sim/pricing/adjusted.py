"""Adjustments around a step pricer. A constant scale (``ScaledPricer``): ``cost_model.step_scale``
and the step scale of a profile fitted to real benchmark runs (``kvplan calibrate --real``). And
floors a step cannot go under whatever its kernels cost (``StepFloor``): the API server's
streaming (``FrontEndFloor``) and a host issuing every op of an eager forward (``EagerHostFloor``).

Why: kernel timings measured in isolation (operator tables) or a roofline miss a few percent a
serving process adds around every step; one factor fitted to a user's own runs carries that
over to every scenario on the same software and GPU. Scaling the price, not the simulator,
keeps ``price`` and ``price_many`` bit-identical (one multiplication each) and the fast decode
path equal to step-by-step (both call ``price``).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from sim.policies.step import StepShape
from sim.pricing.base import ShapeColumns, StepPricer


class ScaledPricer(StepPricer):
    """``base``'s price times ``scale``; ``note`` (e.g. the profile it came from) is shown in
    ``describe``. Not registered: built by ``sim.api`` around the pricer the scenario resolves."""

    kind = "scaled"

    def __init__(self, base: StepPricer, scale: float, note: Optional[str] = None,
                 known: Optional[dict] = None, provenance: Optional[dict] = None,
                 warnings: Sequence[str] = ()) -> None:
        self.base = base
        self._warnings = list(warnings)
        self.scale = float(scale)
        self.note = note
        self._known = known
        #: What ``kvplan report`` prints as the cost model's origin (the base's when not given).
        self.provenance = provenance if provenance is not None else getattr(base, "provenance", None)

    def price(self, shape: StepShape) -> float:
        return self.base.price(shape) * self.scale

    step_time = price

    def decode_context_pricer(self, shape: StepShape) -> Callable[[int], float]:
        base, scale = self.base.decode_context_pricer(shape), self.scale
        return lambda c: base(c) * scale

    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        return self.base.price_columns(columns) * self.scale

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """The base's terms, each scaled (they still sum to ``price``)."""
        return {k: v * self.scale for k, v in self.base.breakdown(shape).items()}

    def describe(self) -> str:
        text = f"{self.base.describe()}, step times x {self.scale:g}"
        return f"{text} ({self.note})" if self.note else text

    def warnings(self) -> list[str]:
        return self._warnings + self.base.warnings()

    def known_error(self) -> Any:
        """The error measured with the scale applied (a fitted profile's leave-one-model-out
        error) when given, else the base pricer's (measured unscaled)."""
        return self._known if self._known is not None else self.base.known_error()

    def __repr__(self) -> str:
        return f"ScaledPricer({self.base!r}, x{self.scale:g})"


def chunks_out(shape: Any, stream_interval: int = 1) -> Any:
    """Chunks a step streams: one per prefill (a prefill's last chunk samples the first token,
    which goes out at once; an earlier chunk sends nothing, so this is an upper bound) and, for
    its decodes, one every ``stream_interval`` tokens each (``--stream-interval``: a request's
    later tokens leave in chunks of that many, so a step streams to 1 / N of its decodes on
    average). ``shape`` is a ``StepShape`` or ``ShapeColumns``."""
    return shape.num_decode_seqs / stream_interval + shape.num_prefill_seqs


class StepFloor(StepPricer):
    """``base``'s price, but never below ``floor(shape)`` for a step that runs: a resource other
    than the GPU's kernels that every step waits on. Subclasses say which (``floor``, written
    once for a ``StepShape`` or a ``ShapeColumns`` alike; ``wait_key`` for ``breakdown``,
    ``because`` for ``describe``)."""

    wait_key = "floor_wait"

    def __init__(self, base: StepPricer) -> None:
        self.base = base
        self.provenance = getattr(base, "provenance", None)

    def floor(self, shape: Any) -> Any:
        raise NotImplementedError

    def because(self) -> str:
        raise NotImplementedError

    def price(self, shape: StepShape) -> float:
        return max(self.base.price(shape), self.floor(shape))

    step_time = price

    def decode_context_pricer(self, shape: StepShape) -> Callable[[int], float]:
        base, floor = self.base.decode_context_pricer(shape), self.floor(shape)
        return lambda c: max(base(c), floor)

    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        return np.maximum(self.base.price_columns(columns), self.floor(ShapeColumns(columns)))

    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """The base's terms, plus the time the step waits on the floor (0 while it is under)."""
        parts = dict(self.base.breakdown(shape))
        parts[self.wait_key] = max(0.0, self.price(shape) - self.base.price(shape))
        return parts

    def describe(self) -> str:
        return f"{self.base.describe()}, {self.because()}"

    def warnings(self) -> list[str]:
        return self.base.warnings()

    def known_error(self) -> Any:
        return self.base.known_error()


class FrontEndFloor(StepFloor):
    """``base``'s price, but never below the API server's time to stream the step's outputs
    (``stream_s`` per request in the step: detokenise, JSON, SSE; ``sim.catalog.frontends``).

    Why a floor on the step: the API server streams from one event loop. While it keeps up, its
    work overlaps the GPU's and costs nothing here; once a step's outputs take it longer than the
    step, tokens reach clients at the server's pace, not the engine's, and a client measures that
    pace as its TPOT. Holding the engine to that pace gives the clients the same TPOT (and the
    engine the same batch) without modelling the queue of undelivered tokens."""

    kind = "frontend_floor"
    wait_key = "frontend_wait"

    def __init__(self, base: StepPricer, stream_s: float, stream_interval: int = 1) -> None:
        super().__init__(base)
        self.stream_s = float(stream_s)
        if stream_interval < 1:
            raise ValueError("stream_interval must be >= 1")
        self.stream_interval = int(stream_interval)

    def floor(self, shape: Any) -> Any:
        return self.stream_s * chunks_out(shape, self.stream_interval)

    def because(self) -> str:
        every = "" if self.stream_interval == 1 else f", a chunk every {self.stream_interval} tokens"
        return f"no faster than the API server streams ({self.stream_s * 1e6:.3g} us per chunk{every})"

    def __repr__(self) -> str:
        every = "" if self.stream_interval == 1 else f", every {self.stream_interval} tokens"
        return f"FrontEndFloor({self.base!r}, {self.stream_s * 1e6:g} us/chunk{every})"


class EagerHostFloor(StepFloor):
    """``base``'s price, but never below the host's time to issue one eager forward
    (``host_s``: ``sim.pricing.operator_tables.eager_host_seconds``, by the model's ops per
    layer) for a step that runs anything. For a pricer with no notion of CUDA graphs (the
    roofline) under vLLM's ``--enforce-eager`` or SGLang's ``--disable-cuda-graph``: the GPU
    cannot run ahead of a host that launches every op itself; the operator-table pricer
    applies the same floor inside its own formula. With CUDA graphs on, vLLM runs a step above
    its largest capture size through its compiled code, launched by the host as it goes:
    ``above_rows`` (the roofline under vLLM's default graph modes)."""

    kind = "eager_host_floor"
    wait_key = "eager_host_wait"

    def __init__(self, base: StepPricer, host_s: float, above_rows: int = 0,
                 prefill_above_rows: Optional[int] = None) -> None:
        """Only a decode-only step of more GEMM rows than ``above_rows``, or a step with prompt
        tokens of more rows than ``prefill_above_rows`` (default: the same), pays the floor:
        the steps outside the engine's CUDA graphs (0, 0: every step)."""
        super().__init__(base)
        self.host_s = float(host_s)
        self.above_rows = int(above_rows)
        self.prefill_above_rows = self.above_rows if prefill_above_rows is None else int(prefill_above_rows)

    def floor(self, shape: Any) -> Any:
        # The step's GEMM rows (``StepShape.num_tokens``, spelled out for columns too).
        rows = shape.num_prefill_tokens + shape.num_decode_seqs + shape.num_spec_tokens + shape.num_padding_tokens
        decode_only = shape.num_prefill_tokens == 0
        limit = decode_only * self.above_rows + (1 - decode_only) * self.prefill_above_rows
        return self.host_s * (rows > limit)

    def because(self) -> str:
        if not (self.above_rows or self.prefill_above_rows):
            return f"every forward eager: no faster than the host issues it ({self.host_s * 1e3:.3g} ms)"
        return (f"steps outside CUDA graphs (decode above {self.above_rows} tokens, with prompts above "
                f"{self.prefill_above_rows}): no faster than the host issues them ({self.host_s * 1e3:.3g} ms)")

    def __repr__(self) -> str:
        above = (f", above {self.above_rows} / {self.prefill_above_rows} rows"
                 if self.above_rows or self.prefill_above_rows else "")
        return f"EagerHostFloor({self.base!r}, {self.host_s * 1e3:g} ms{above})"
