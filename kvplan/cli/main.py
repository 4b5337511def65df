"""The ``kvplan`` command line: the Typer app, its commands, and the one place where errors
become exit codes (the policy is stated in ``sim/errors.py``).

This package is the top of the layering and the only one that imports the simulator, the
runtime, calibration, analysis and the dashboards together. Every command is a thin shell over
a library function and imports its library when it runs: ``kvplan --help`` imports neither
torch, streamlit, plotly, pandas nor simpy.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, NoReturn, Optional

import typer
from rich.console import Console

from kvplan.cli import analysis, calibration, engine
from kvplan.cli.autoscale import autoscale
from kvplan.cli.loadgen import loadgen
from kvplan.cli.plan import plan
from kvplan.cli.serve import serve
from kvplan.cli.simulate import simulate
from sim.errors import KvplanError

app = typer.Typer(
    name="kvplan",
    help=(
        "Capacity planning for LLM serving. Simulates schedulers, paged KV caches, batching, "
        "prefix caching and speculative decoding (simpy), and checks the simulator against a "
        "real paged-attention engine."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEBUG_ENV = "KVPLAN_DEBUG"  # set to 1: internal errors keep their traceback


def _print_version(value: bool) -> None:
    """Eager, so that ``kvplan --version`` works without a command."""
    if value:
        from sim import __version__

        typer.echo(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                 callback=_print_version, is_eager=True),
) -> None:
    """kvplan: how many GPUs, with which scheduler, block size, batching limits, prefix
    caching, speculative decoding and quantisation serve this workload inside this SLO?"""


for _fn in (plan, simulate, analysis.capacity, analysis.sweep, analysis.ab, analysis.report,
            analysis.dashboard, calibration.calibrate, calibration.validate, engine.generate, loadgen):
    app.command()(_fn)
app.command()(serve)
app.command()(autoscale)

bench_app = typer.Typer(help="Benchmarks of the real engine.", no_args_is_help=True)
bench_app.command("runtime")(engine.bench_runtime)
app.add_typer(bench_app, name="bench")


# ---------------------------------------------------------------- errors -> exit codes

def _fail(message: str, code: int) -> NoReturn:
    Console(stderr=True).print(message, highlight=False, soft_wrap=True, markup=False)
    sys.exit(code)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _os_error_message(exc: OSError) -> str:
    """``path: reason`` for a file the user named (not found, a directory, not readable)."""
    reason = {FileNotFoundError: "not found", IsADirectoryError: "is a directory, expected a file",
              NotADirectoryError: "a parent is not a directory",
              PermissionError: "permission denied"}.get(type(exc), exc.strerror or str(exc))
    if exc.filename is None:
        return _one_line(exc)
    return f"{exc.filename}: {reason}"


def main(argv: Optional[list[str]] = None) -> None:
    """Run the CLI. User errors (``KvplanError``, a file that cannot be read, a bad flag) print
    one line on stderr and exit 2; anything else is a bug in kvplan and exits 1."""
    try:
        rc = app(args=argv, prog_name="kvplan", standalone_mode=False)
    except KvplanError as exc:
        _fail(f"error: {_one_line(exc)}", 2)
    except OSError as exc:  # BrokenPipeError included: `kvplan simulate --json | head`
        if isinstance(exc, BrokenPipeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        if _debug():
            raise
        _fail(f"error: {_os_error_message(exc)}", 2)
    except UnicodeDecodeError as exc:  # a binary file read as text where no reader named it
        if _debug():
            raise
        _fail(f"error: a file is not UTF-8 text ({exc.reason} at byte {exc.start})", 2)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except SystemExit:
        raise
    except Exception as exc:
        if isinstance(exc, _click_errors()):  # bad flag, missing argument, ...
            if not exc.format_message():  # no_args_is_help: `kvplan`, `kvplan bench`
                exc.show()
                sys.exit(exc.exit_code)
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _fail(f"error: {_one_line(exc.format_message())}{hint}", exc.exit_code)
        if isinstance(exc, typer.Abort):
            _fail("aborted", 1)
        if _debug():
            raise
        _fail(f"internal error (a bug in kvplan, please report): {type(exc).__name__}: "
              f"{_one_line(exc)} (set {DEBUG_ENV}=1 for the traceback)", 1)
    if isinstance(rc, int) and not isinstance(rc, bool) and rc:  # typer.Exit(code) from a command
        sys.exit(rc)


def _click_errors() -> tuple[type[Any], ...]:
    """click's exception base class, wherever this typer keeps it (newer typers vendor click as
    ``typer._click``; older ones use click itself)."""
    found = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(importlib.import_module(name).ClickException)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


if __name__ == "__main__":
    main()
