"""The step pricing interface: what a step of a given ``StepShape`` costs, in seconds.

Why an interface: the simulator needs one number per step and should not care where it comes
from. Today two sources stand behind it, the roofline over datasheet numbers
(``sim.pricing.roofline``) and a calibration profile fitted to a real engine
(``sim.pricing.profile``); measured operator tables are the next. Each source subclasses
``StepPricer`` and registers under a name (Vidur's execution-time predictors: a base class, a
registry, implementations).

Every pricer prices one shape (``price``, on the simulator's hot path) and many at once
(``price_many`` / ``price_columns``, NumPy), and the two give the same bits: each
implementation writes its formula once over plain ``+ - * /`` and a ``max`` it is handed, so
the formula runs on Python floats and on arrays alike (``ShapeColumns`` gives arrays the
attribute names of a ``StepShape``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import fields
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar, Union

import numpy as np

from sim.errors import ConfigError
from sim.policies.step import StepShape

#: StepShape field names: the columns ``price_columns`` takes and a sample table has.
SHAPE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(StepShape))


class ShapeColumns:
    """Many steps' ``StepShape`` fields as equal-length float arrays, read by the same
    attribute names as a ``StepShape`` so that one formula prices either."""

    __slots__ = SHAPE_FIELDS + ("shape",)

    def __init__(self, columns: Mapping[str, Any], caller: str = "price_columns") -> None:
        unknown = sorted(set(columns) - set(SHAPE_FIELDS))
        if unknown:
            raise TypeError(f"{caller}: unknown StepShape field {unknown[0]!r}")
        arrays = np.broadcast_arrays(*(np.asarray(columns.get(k, 0), dtype=float)
                                       for k in SHAPE_FIELDS))
        for name, arr in zip(SHAPE_FIELDS, arrays):
            setattr(self, name, arr)
        self.shape: tuple[int, ...] = arrays[0].shape


class StepPricer(ABC):
    """Seconds one replica takes for one scheduler step, CPU overhead included.

    Contract: an empty step (no GEMM rows, no swap) costs 0; more work never costs less;
    ``price_many`` element i is bit-identical to ``price`` of shape i.
    """

    #: Registry name (``make_pricer(kind, ...)``).
    kind: ClassVar[str] = ""

    @abstractmethod
    def price(self, shape: StepShape) -> float:
        """Seconds for one step of ``shape``."""

    @abstractmethod
    def price_columns(self, columns: Mapping[str, Any]) -> np.ndarray:
        """Vectorised ``price``: ``columns`` maps StepShape field names to arrays (or scalars,
        broadcast; missing fields are 0). ``TypeError`` on a name that is not a field."""

    def price_many(self, shapes: Union[Sequence[StepShape], Mapping[str, Any]]) -> np.ndarray:
        """Seconds per step of a sequence of shapes (or of columns, as ``price_columns``)."""
        if isinstance(shapes, Mapping):
            return self.price_columns(shapes)
        return self.price_columns({k: np.array([getattr(s, k) for s in shapes], dtype=float)
                                   for k in SHAPE_FIELDS})

    @abstractmethod
    def breakdown(self, shape: StepShape) -> dict[str, float]:
        """Seconds per term of the price (keys depend on the source); they sum to ``price``."""

    @abstractmethod
    def describe(self) -> str:
        """Which source priced the steps, in a few words (``roofline ...``, ``profile <path>``)."""

    def warnings(self) -> list[str]:
        """Reasons this pricer's prices may not hold here (e.g. a profile measured on another
        machine); empty when there are none."""
        return []

    def known_error(self) -> Any:
        """What is known of this pricer's error here (a mapping of measured error figures), or
        None where nothing is: the summary's ``cost_model.known_error``."""
        return None

    # Names the callers used before this interface; implementations alias them to ``price``
    # at class level, so the hot path pays no extra call.
    def step_time(self, shape: StepShape) -> float:
        """Same as ``price``."""
        return self.price(shape)

    def step_times(self, **columns: Any) -> np.ndarray:
        """Same as ``price_columns``, with the columns as keyword arguments."""
        return self.price_columns(columns)

    def decode_context_pricer(self, shape: StepShape) -> Callable[[int], float]:
        """``f(c)``: bit for bit ``price(shape.with_decode_context(c))``, the price of a decode
        window's later steps (same batch, longer context). A pricer whose formula separates
        the context-free terms overrides this to compute them once per window."""
        price = self.price
        return lambda c: price(shape.with_decode_context(c))


P = TypeVar("P", bound="type[StepPricer]")

#: Pricer classes by ``kind``.
PRICERS: dict[str, type[StepPricer]] = {}


def register_pricer(cls: P) -> P:
    """Class decorator: make a ``StepPricer`` subclass available to ``make_pricer``."""
    if not cls.kind:
        raise TypeError(f"{cls.__name__}: a registered pricer needs a kind")
    PRICERS[cls.kind] = cls
    return cls


def make_pricer(kind: str, *args: Any, **kwargs: Any) -> StepPricer:
    """Build the pricer registered as ``kind`` (``roofline``, ``profile``)."""
    try:
        cls = PRICERS[kind]
    except KeyError:
        raise ConfigError(f"cost model: unknown kind {kind!r}; known: {', '.join(sorted(PRICERS))}") from None
    return cls(*args, **kwargs)


#: The ``max`` a formula is handed: Python's for floats, ``np.maximum`` for arrays.
Max = Callable[[Any, Any], Any]
