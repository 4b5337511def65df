"""``kvplan simulate``: one scenario through the simulator, printed as vllm bench serve's summary.

The simulator is imported when the command runs, so ``kvplan --help`` stays light.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from kvplan.cli.common import CONFIG_HELP, SET_HELP, progress_bar

err = Console(stderr=True)


def simulate(
    config: Optional[Path] = typer.Argument(None, help=CONFIG_HELP),
    set_: List[str] = typer.Option([], "--set", help=SET_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="Write summary.json, requests.csv, steps.csv and config.yaml here."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (same seed, same result)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    as_json: bool = typer.Option(False, "--json", help="Print summary.json to stdout instead of the table."),
    stream: bool = typer.Option(False, "--stream", help="Write requests.csv and steps.csv to --out as the run goes and keep only running totals: memory stays bounded for millions of requests (ITL quantiles then binned, within 0.005%)."),
) -> None:
    """Simulate one scenario and print a summary (vllm bench serve metric names)."""
    from sim.api import simulate as run
    from sim.config import build_config
    from sim.errors import ConfigError
    from sim.summary_table import print_summary

    if out is not None and out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: is a file, expected a folder (summary.json, requests.csv, "
                          f"steps.csv and config.yaml are written into it)")
    if stream and out is None:
        raise ConfigError("--stream: needs --out, the folder requests.csv and steps.csv are written to")
    cfg = build_config(config, set_, seed)
    # None when the count is unknown (a whole trace replayed): the bar then counts without a total.
    total = cfg["workload"].get("num_requests") or None
    bar = progress_bar(total, "simulating", "req", enabled=progress and not as_json)
    try:
        result = run(cfg, progress=bar.update if bar is not None else None,
                     base_dir=config.parent if config else None, stream_to=out if stream else None)
    finally:
        if bar is not None:
            bar.close()
    if out is not None:
        result.write(out)
    for warning in result.summary.get("warnings", []):
        err.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    note = result.summary.get("cost_model", {}).get("note")
    if note:  # e.g. the measured tables are not installed: the roofline priced the steps
        err.print(f"note: {note}", highlight=False, soft_wrap=True)
    message = result.summary.get("overload", {}).get("message")
    if message:  # the first thing a planner must know about the numbers below
        err.print(f"[red]{message}[/red]", highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
    else:
        print_summary(result.summary)
        if out is not None:
            Console().print(f"wrote {out}/summary.json, requests.csv, steps.csv")
