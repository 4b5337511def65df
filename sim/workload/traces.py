"""Readers for the public LLM-serving traces, so a simulation can replay real traffic.

Formats (detected from the extension and the first line, see :func:`detect_format`):

- ``azure``: Azure LLM inference CSV (``TIMESTAMP, ContextTokens, GeneratedTokens``); the
  timestamps are datetimes (or plain seconds) and become seconds from the first row.
- ``mooncake``: Mooncake JSON lines (``timestamp`` in ms, ``input_length``, ``output_length``,
  optional ``hash_ids``: one id per 512-token prompt block, equal ids = shared prefix).
- ``length_table``: Sarathi-Serve / Vidur length tables (``num_prefill_tokens,
  num_decode_tokens, ...``); untimed unless an ``arrived_at`` column (seconds) is present.

Every row is checked: a bad one raises ``TraceFormatError("path:LINE: what is wrong")`` with the
1-based line number, because a silently skipped or mangled row skews a capacity answer in ways
nobody notices. Rows with a zero output length are rejected by default
(``zero_output="error"``); ``zero_output="clamp"`` turns them into one-token outputs instead
(a request always emits at least its first token). Zero or negative input lengths are always
errors. Parsed traces are cached by (path, mtime, size), because a capacity search builds the same
workload thousands of times.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, Callable, Iterator, Optional, TextIO, Union

import numpy as np

from sim.errors import TraceFormatError, file_error

PathLike = Union[str, "os.PathLike[str]"]

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
TABLE_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
MOONCAKE_BLOCK = 512  # tokens per Mooncake hash id
ZERO_OUTPUT_MODES = ("error", "clamp")
FORMATS = ("azure", "mooncake", "length_table")
MAX_LENGTH = 2**24  # tokens in one prompt or output; a larger value is a corrupt row


@dataclass(frozen=True, eq=False)
class Trace:
    """One parsed trace file: per-row lengths, optional timing and prefix identity.

    Arrays are read-only (the object is cached and shared). ``timestamps`` are seconds from the
    first row (None for an untimed length table). ``hash_ids`` are Mooncake's per-block prefix
    ids with ``hash_block_size`` tokens per id. ``input_column``/``output_column`` name the
    file's own columns so that a length distribution can pick them, or any other integer column
    (:meth:`int_column`), by name.
    """

    path: str
    format: str
    input_lens: np.ndarray
    output_lens: np.ndarray
    timestamps: Optional[np.ndarray] = None
    hash_ids: Optional[tuple[tuple[int, ...], ...]] = None
    hash_block_size: int = MOONCAKE_BLOCK
    input_column: str = ""
    output_column: str = ""
    line_numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    raw_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.input_lens)

    @property
    def timed(self) -> bool:
        return self.timestamps is not None

    @property
    def columns(self) -> tuple[str, ...]:
        """Names :meth:`int_column` accepts."""
        return (self.input_column, self.output_column) + tuple(
            c for c in self.raw_columns if c not in (self.input_column, self.output_column)
        )

    def int_column(self, name: str) -> np.ndarray:
        """A column as positive integers (e.g. ``num_total_tokens`` of a length table).

        Raises ``KeyError`` for an unknown name and ``TraceFormatError`` (with ``path:LINE``)
        for a value that is not a positive integer.
        """
        if name == self.input_column:
            return self.input_lens
        if name == self.output_column:
            return self.output_lens
        if name not in self.raw_columns:
            raise KeyError(name)
        values = np.fromiter(
            (
                _positive_int(v, name, self.path, int(line))
                for v, line in zip(self.raw_columns[name], self.line_numbers)
            ),
            dtype=np.int64,
            count=len(self),
        )
        values.setflags(write=False)
        return values


def _fail(path: str, line: int, message: str) -> TraceFormatError:
    return TraceFormatError(f"{path}:{line}: {message}")


def _to_int(value: Any) -> Optional[int]:
    """An integer from a CSV string or JSON number (integral floats like "12.0" count)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def _positive_int(
    value: Any, column: str, path: str, line: int, allow_zero: bool = False, text: bool = True
) -> int:
    """A length >= 1 (>= 0 with ``allow_zero``). ``text=False`` (JSON): a quoted "5" is an
    error, since JSON has numbers and a string there means the writer got something wrong."""
    number = _to_int(value) if text or not isinstance(value, str) else None
    if number is None:
        raise _fail(path, line, f"{column} is {_short(value)}, not an integer")
    if number < 0 or (number == 0 and not allow_zero):
        raise _fail(path, line, f"{column} is {number}; lengths must be >= 1")
    if number > MAX_LENGTH:
        raise _fail(path, line, f"{column} is {number}; lengths must be <= {MAX_LENGTH:,}")
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _parse_time(value: str, column: str, path: str, line: int) -> float:
    """Seconds (as a number) or an ISO datetime, naive (taken as UTC) or with an offset.

    The fraction is parsed by hand because Azure writes 7 digits, which
    ``datetime.fromisoformat`` rejects before Python 3.11.
    """
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    match = _DATETIME.match(text)
    try:
        if match is None:
            raise ValueError(text)
        whole, frac, zone = match.groups()
        stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone or ""))
    except ValueError:
        raise _fail(path, line, f"{column} is {_short(value)}, not a datetime or seconds") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return (stamp - _EPOCH).total_seconds() + (float("0." + frac) if frac else 0.0)


_DATETIME = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class _Timeline:
    """Checks that timestamps never go backwards and rebases them to the first row."""

    def __init__(self, path: str, column: str, scale: float = 1.0) -> None:
        self.path, self.column, self.scale = path, column, scale
        self.values: list[float] = []

    def add(self, value: float, line: int) -> None:
        if not math.isfinite(value):
            raise _fail(self.path, line, f"{self.column} is {value}, not a finite time")
        if self.values and value < self.values[-1]:
            raise _fail(
                self.path,
                line,
                f"{self.column} {value:g} is earlier than the previous row's "
                f"{self.values[-1]:g} (timestamps must not go backwards)",
            )
        self.values.append(value)

    def seconds(self) -> np.ndarray:
        stamps = np.asarray(self.values, dtype=np.float64)
        if len(stamps):
            stamps = (stamps - stamps[0]) * self.scale
        return stamps


def _frozen(values: list[int]) -> np.ndarray:
    array = np.asarray(values, dtype=np.int64)
    array.setflags(write=False)
    return array


def detect_format(path: PathLike) -> str:
    """``azure``, ``mooncake`` or ``length_table``, from the extension and the first line."""
    name = os.fspath(path)
    first = _first_line(name)
    if name.endswith((".jsonl", ".ndjson", ".json")) or first.lstrip().startswith("{"):
        return "mooncake"
    header = {c.strip() for c in next(csv.reader([first]), [])}
    if set(AZURE_COLUMNS) <= header:
        return "azure"
    if set(TABLE_COLUMNS) <= header:
        return "length_table"
    raise _fail(
        name,
        1,
        f"unrecognised header {_short(first.strip())}; expected Azure CSV "
        f"({', '.join(AZURE_COLUMNS)}), a length table ({', '.join(TABLE_COLUMNS)}, ...) "
        "or Mooncake JSON lines",
    )


def _first_line(path: str) -> str:
    with _open(path) as f:
        for line in f:
            if line.strip():
                return line
    raise _fail(path, 1, "empty file")


@contextmanager
def _open(path: str) -> Iterator[TextIO]:
    """The file as text; a file that cannot be read as a trace (missing, a directory, no
    permission, binary) raises ``TraceFormatError`` naming it, whichever reader opened it."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            yield f
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: not a UTF-8 text file ({exc.reason})") from None
    except csv.Error as exc:  # e.g. "line contains NUL": a binary file that decodes as UTF-8
        raise TraceFormatError(f"{path}: not a text CSV file ({exc})") from None
    except OSError as exc:
        raise file_error(path, exc, TraceFormatError) from None


def read_trace(path: PathLike, *, zero_output: str = "error") -> Trace:
    """Parse any supported trace file (format auto-detected); cached by path, mtime and size."""
    if zero_output not in ZERO_OUTPUT_MODES:
        raise ValueError(f"zero_output must be one of {', '.join(ZERO_OUTPUT_MODES)}")
    name = os.fspath(path)
    try:
        stat = os.stat(name)
    except OSError as exc:
        raise file_error(name, exc, TraceFormatError) from None
    if os.path.isdir(name):
        raise TraceFormatError(f"{name}: is a directory, expected a trace file")
    return _read_cached(name, stat.st_mtime_ns, stat.st_size, zero_output)


@lru_cache(maxsize=16)
def _read_cached(path: str, _mtime_ns: int, _size: int, zero_output: str) -> Trace:
    return _READERS[detect_format(path)](path, zero_output=zero_output)


def read_azure(path: PathLike, *, zero_output: str = "error") -> Trace:
    """Azure LLM inference trace CSV (2023/2024, conversation or code)."""
    return _read_csv(os.fspath(path), "azure", zero_output)


def read_length_table(path: PathLike, *, zero_output: str = "error") -> Trace:
    """Sarathi-Serve / Vidur length table (ShareGPT, arXiv summarization, ...)."""
    return _read_csv(os.fspath(path), "length_table", zero_output)


def _read_csv(path: str, fmt: str, zero_output: str) -> Trace:
    if fmt == "azure":
        time_col, in_col, out_col = AZURE_COLUMNS
    else:
        time_col, (in_col, out_col) = "arrived_at", TABLE_COLUMNS
    allow_zero = zero_output == "clamp"
    with _open(path) as f:
        reader = csv.reader(f)
        header = [c.strip() for c in next(reader, [])]
        missing = [
            c
            for c in (in_col, out_col) + ((time_col,) if fmt == "azure" else ())
            if c not in header
        ]
        if missing:
            raise _fail(
                path, 1, f"header lacks column(s) {', '.join(missing)} (has {', '.join(header)})"
            )
        i_in, i_out = header.index(in_col), header.index(out_col)
        i_time = header.index(time_col) if time_col in header else None
        timeline = _Timeline(path, time_col) if i_time is not None else None
        inputs: list[int] = []
        outputs: list[int] = []
        lines: list[int] = []
        rows: list[list[str]] = []
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) != len(header):
                raise _fail(
                    path,
                    line,
                    f"expected {len(header)} columns ({', '.join(header)}), got {len(row)}",
                )
            inputs.append(_positive_int(row[i_in], in_col, path, line))
            outputs.append(max(1, _positive_int(row[i_out], out_col, path, line, allow_zero)))
            if timeline is not None and i_time is not None:  # both set or both None
                timeline.add(_parse_time(row[i_time], time_col, path, line), line)
            lines.append(line)
            rows.append(row)
    if not inputs:
        raise _fail(path, 2, "no requests after the header")
    raw = {name: tuple(r[i] for r in rows) for i, name in enumerate(header)}
    return Trace(
        path=path,
        format=fmt,
        input_lens=_frozen(inputs),
        output_lens=_frozen(outputs),
        timestamps=_frozen_times(timeline),
        input_column=in_col,
        output_column=out_col,
        line_numbers=_frozen(lines),
        raw_columns=raw,
    )


def _frozen_times(timeline: Optional[_Timeline]) -> Optional[np.ndarray]:
    if timeline is None:
        return None
    stamps = timeline.seconds()
    stamps.setflags(write=False)
    return stamps


def read_mooncake(path: PathLike, *, zero_output: str = "error") -> Trace:
    """Mooncake JSON lines: one request per line, timestamps in milliseconds."""
    path = os.fspath(path)
    allow_zero = zero_output == "clamp"
    timeline = _Timeline(path, "timestamp", scale=1e-3)
    inputs: list[int] = []
    outputs: list[int] = []
    lines: list[int] = []
    hashes: list[tuple[int, ...]] = []
    with _open(path) as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            record = _json_object(text, path, line)
            missing = [k for k in MOONCAKE_KEYS if k not in record]
            if missing:
                raise _fail(path, line, f"missing key(s) {', '.join(missing)}")
            stamp = record["timestamp"]
            if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
                raise _fail(path, line, f"timestamp is {_short(stamp)}, not a number")
            timeline.add(float(stamp), line)
            n_in = _positive_int(record["input_length"], "input_length", path, line, text=False)
            inputs.append(n_in)
            n_out = _positive_int(
                record["output_length"], "output_length", path, line, allow_zero, text=False
            )
            outputs.append(max(1, n_out))
            lines.append(line)
            if "hash_ids" in record:
                if len(hashes) != len(inputs) - 1:
                    raise _fail(path, line, "has hash_ids but earlier rows do not")
                hashes.append(_hash_ids(record["hash_ids"], n_in, path, line))
            elif hashes:
                raise _fail(path, line, "missing key hash_ids (earlier rows have it)")
    if not inputs:
        raise _fail(path, 1, "no requests (empty file)")
    return Trace(
        path=path,
        format="mooncake",
        input_lens=_frozen(inputs),
        output_lens=_frozen(outputs),
        timestamps=_frozen_times(timeline),
        hash_ids=tuple(hashes) if hashes else None,
        input_column="input_length",
        output_column="output_length",
        line_numbers=_frozen(lines),
    )


def _json_object(text: str, path: str, line: int) -> dict:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, line, f"malformed JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(record, dict):
        raise _fail(path, line, f"expected a JSON object, got {type(record).__name__}")
    return record


def _hash_ids(value: Any, input_length: int, path: str, line: int) -> tuple[int, ...]:
    if not isinstance(value, list) or any(
        isinstance(h, bool) or not isinstance(h, int) for h in value
    ):
        raise _fail(path, line, "hash_ids must be a list of integers")
    expected = -(-input_length // MOONCAKE_BLOCK)
    if len(value) != expected:
        raise _fail(
            path,
            line,
            f"{len(value)} hash_ids for input_length {input_length}; expected {expected} "
            f"(one per {MOONCAKE_BLOCK}-token block)",
        )
    return tuple(value)


_READERS: dict[str, Callable[..., Trace]] = {
    "azure": read_azure,
    "mooncake": read_mooncake,
    "length_table": read_length_table,
}
