"""The ``kvplan`` command line. Every subcommand is a thin shell over a library function.

User errors (``KvplanError``) print one line and exit 2; nothing already written is removed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

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
err = Console(stderr=True)



@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    """kvplan: how many GPUs, with which scheduler, block size, batching limits, prefix
    caching, speculative decoding and quantisation serve this workload inside this SLO?"""
    if version:
        from sim import __version__

        typer.echo(f"kvplan {__version__}")
        raise typer.Exit()


SET_HELP = "Override a config key, e.g. --set scheduler.policy=vllm_v0 (repeatable)."


@app.command()
def simulate(
    config: Optional[Path] = typer.Argument(None, help="Scenario YAML; omit for the built-in default (Llama-3.1-8B on A100-80GB, ShareGPT-like load)."),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Write summary.json, requests.csv, steps.csv and config.yaml here."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (same seed, same result)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json to stdout instead of the table."),
) -> None:
    """Simulate one scenario and print a summary (vllm bench serve metric names)."""
    import json

    from sim.api import simulate as run
    from sim.config import build_config
    from sim.summary_table import print_summary

    cfg = build_config(config, set_, seed)
    total = cfg["workload"].get("num_requests") or 0
    bar = _progress_bar(total, "simulating", enabled=progress and not as_json)
    try:
        result = run(cfg, progress=bar.update if bar else None,
                     base_dir=config.parent if config else None)
    finally:
        if bar:
            bar.close()
    if out is not None:
        result.write(out)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
    else:
        print_summary(result.summary)
        if out is not None:
            Console().print(f"wrote {out}/summary.json, requests.csv, steps.csv")


def _register_optional_commands() -> None:
    """Analysis commands need only the core; runtime commands import torch lazily inside
    (calibrate and validate too: calibrate --trace fits without torch)."""
    from calibration import cli as calibration_cli
    from sim import cli_analysis

    for fn in (cli_analysis.capacity, cli_analysis.sweep, cli_analysis.ab, cli_analysis.report,
               cli_analysis.dashboard, calibration_cli.calibrate, calibration_cli.validate):
        app.command()(fn)
    try:
        from runtime import cli as runtime_cli
    except ImportError:  # runtime/ not installed: the light core has no generate/bench
        return
    app.command()(runtime_cli.generate)
    bench_app = typer.Typer(help="Benchmarks of the real engine.", no_args_is_help=True)
    bench_app.command("runtime")(runtime_cli.bench_runtime)
    app.add_typer(bench_app, name="bench")


def _progress_bar(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total or None, desc=desc, unit="req", leave=False, file=sys.stderr,
                disable=not sys.stderr.isatty())


_register_optional_commands()


def main() -> None:
    try:
        app(standalone_mode=False)
    except KvplanError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/red] {exc.filename or exc}: not found", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click's usage errors in standalone_mode=False
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
