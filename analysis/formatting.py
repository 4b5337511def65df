"""Numbers as a capacity planner reads them: one formatter for every table that shows a result
(dashboard, terminal, HTML and Markdown reports).

Why one module: a table that prints "20300" beside "2,385.92%" makes the reader do the
formatting. Every A/B surface formats values, differences, relative differences and intervals
through these functions, so the same number reads the same everywhere. Pure Python: the CLI
and the Markdown report import it without numpy, plotly or streamlit.

The rules:

- values keep three significant digits but never lose integer digits, with thousands
  separators: 0.0123, 20.8, 575, 16,835;
- a fraction (unit ``"fraction"``) is shown as a percentage with one decimal (98.7%), and a
  difference of fractions in percentage points (+3.7 pp);
- differences and interval ends carry their sign (+513, -1.72); an exact zero has none;
- a relative difference is a signed percentage rounded to at most three significant digits
  (+8.29%, -14.9%, +833%, +1,670%);
- a missing value (None or NaN) is "-".
"""

from __future__ import annotations

import math
from typing import Optional, cast

MISSING = "-"
SIG_DIGITS = 3
#: Below this magnitude a value is written in scientific notation (0.0000123 hides its digits).
TINY = 1e-4
FRACTION = "fraction"


def display_unit(unit: Optional[str]) -> str:
    """The unit as a table header shows it: fractions are displayed as percentages."""
    return "%" if unit == FRACTION else (unit or "")


def format_number(value: Optional[float], sig: int = SIG_DIGITS, *, signed: bool = False,
                  max_decimals: Optional[int] = None, round_integers: bool = False) -> str:
    """``value`` with ``sig`` significant digits and thousands separators.

    Integer digits are kept unless ``round_integers`` (16,835 stays 16,835: rounding it to
    16,800 would look like a different measurement); ``max_decimals`` caps the decimals for
    numbers whose scale is known (percentages). An exact zero is "0", never "+0" or "-0".
    """
    if _missing(value):
        return MISSING
    value = float(cast(float, value))  # not missing: a number
    if math.isinf(value):
        return ("+" if signed and value > 0 else "") + ("inf" if value > 0 else "-inf")
    if value == 0:
        return "0"
    if abs(value) < TINY and max_decimals is None:
        return f"{value:{'+' if signed else ''}.{sig - 1}e}"
    text = _fixed(value, sig, max_decimals, round_integers)
    if _is_zero(text):  # rounded away: a sign, when asked for, still says which way (+0.00)
        text = text.lstrip("-")
        return ("+" if value > 0 else "-") + text if signed else text
    return "+" + text if signed and value > 0 else text


def _fixed(value: float, sig: int, max_decimals: Optional[int], round_integers: bool) -> str:
    """Fixed-point text of ``value`` rounded to ``sig`` significant digits."""
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= sig - 1:
        rounded = float(f"{value:.{sig}g}") if round_integers else value
        return f"{rounded:,.0f}"
    rounded = float(f"{value:.{sig}g}")            # 9.996 -> 10.0, so the digits are re-counted
    magnitude = math.floor(math.log10(abs(rounded)))
    decimals = max(0, sig - 1 - magnitude)
    if max_decimals is not None:
        decimals = min(decimals, max_decimals)
    return f"{rounded:,.{decimals}f}"


def _is_zero(text: str) -> bool:
    return not any(ch in "123456789" for ch in text)


def format_value(value: Optional[float], unit: Optional[str] = None) -> str:
    """A measured value in its metric's unit (the unit itself goes in the header)."""
    if unit == FRACTION:
        return _percent(value, decimals=1)
    return format_number(value)


def format_diff(value: Optional[float], unit: Optional[str] = None) -> str:
    """A signed difference B - A in the metric's unit; fractions in percentage points."""
    if unit == FRACTION:
        text = format_number(None if value is None else value * 100, signed=True, max_decimals=2)
        return text if text == MISSING else f"{text} pp"
    return format_number(value, signed=True)


def format_relative(rel: Optional[float]) -> str:
    """A relative difference (0.083 means +8.3%) as a signed percentage, at most three
    significant digits: +8.29%, -14.9%, +1,670%."""
    if _missing(rel):
        return MISSING
    text = format_number(cast(float, rel) * 100, signed=True, max_decimals=2, round_integers=True)  # not missing
    return f"{text}%"


def format_interval(low: Optional[float], high: Optional[float], unit: Optional[str] = None) -> str:
    """A confidence interval of a difference, "[low, high]" in the metric's unit."""
    if _missing(low) or _missing(high):
        return MISSING
    if unit == FRACTION:
        low_pp, high_pp = cast(float, low) * 100, cast(float, high) * 100  # not missing
        return (f"[{format_number(low_pp, signed=True, max_decimals=2)}, "
                f"{format_number(high_pp, signed=True, max_decimals=2)}] pp")
    return f"[{format_number(low, signed=True)}, {format_number(high, signed=True)}]"


def _percent(value: Optional[float], decimals: int) -> str:
    if _missing(value):
        return MISSING
    text = f"{cast(float, value) * 100:,.{decimals}f}"  # not missing
    return (text.lstrip("-") if _is_zero(text) else text) + "%"


def _missing(value: Optional[float]) -> bool:
    """None, or NaN of any float type (numpy's included)."""
    return value is None or (isinstance(value, (float, int)) and value != value)


def with_unit(text: str, unit: Optional[str]) -> str:
    """``text`` followed by its unit where the unit is not already written into it (fractions
    carry % or pp) and there is one; for a sentence or a hover label, where no header names it."""
    if text == MISSING or not unit or unit == FRACTION:
        return text
    return f"{text} {unit}"
