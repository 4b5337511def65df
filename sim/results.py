"""What a run returns and writes: ``SimResult`` (summary, requests, steps) and the rows of
``requests.csv``.

Shared by every simulator front end (``sim.api.simulate``, the P/D simulator in
``sim.disaggregation``, the streaming recorder in ``sim.streaming``), which import it at top
level; it imports none of them.
"""

from __future__ import annotations

import csv
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from sim import config as config_mod
from sim.policies.request import Request
from sim.scenario import Scenario

if TYPE_CHECKING:
    from sim.run_parts import Deployment


REQUEST_COLUMNS = (
    "request_id", "arrival_s", "prompt_len", "output_len", "state", "reject_reason",
    "ttft_ms", "tpot_ms", "e2el_ms", "first_scheduled_s", "finish_s", "num_preemptions",
    "num_cached_tokens", "num_spec_accepted", "replica",
)


def request_row(r: Request, replica: int = 0) -> dict:
    """One ``requests.csv`` row (``REQUEST_COLUMNS``)."""
    tpot = r.tpot
    return {
        "request_id": r.request_id,
        "arrival_s": r.arrival_time,
        "prompt_len": r.prompt_len,
        "output_len": r.num_output_tokens,
        "state": r.state.value,
        "reject_reason": r.reject_reason or "",
        "ttft_ms": None if r.ttft is None else r.ttft * 1000,
        "tpot_ms": None if tpot is None else tpot * 1000,
        "e2el_ms": None if r.e2el is None else r.e2el * 1000,
        "first_scheduled_s": r.first_scheduled_time,
        "finish_s": r.finish_time,
        "num_preemptions": r.num_preemptions,
        "num_cached_tokens": r.num_cached_tokens,
        "num_spec_accepted": r.num_spec_accepted,
        "replica": replica,
    }


@dataclass
class SimResult:
    config: dict
    summary: dict
    requests: list[Request]
    steps: dict[str, list]
    deployment: Optional[Deployment] = None
    extra: dict = field(default_factory=dict)
    #: The typed scenario ``config`` is the YAML form of.
    scenario: Optional[Scenario] = None

    @property
    def stream_interval(self) -> int:
        """Tokens per chunk the run's clients were streamed (``engine.stream_interval``; 1
        without an API server), for ITL statistics computed from ``requests``."""
        from sim.run_parts import streamed_interval

        return streamed_interval(self.deployment) if self.deployment is not None else 1

    def request_rows(self) -> list[dict]:
        replica_of = self.extra.get("replica_of", {})
        return [request_row(r, replica_of.get(r.request_id, 0)) for r in self.requests]

    def write(self, out_dir: Union[str, Path]) -> Path:
        """summary.json and config.yaml, and (unless the run streamed them there already)
        requests.csv and steps.csv."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        (out / "config.yaml").write_text(config_mod.dump(self.config))
        streamed = self.extra.get("streamed_to")
        if streamed is not None:
            if Path(streamed).resolve() != out.resolve():
                for name in ("requests.csv", "steps.csv"):
                    shutil.copyfile(Path(streamed) / name, out / name)
            return out
        with open(out / "requests.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=REQUEST_COLUMNS)
            w.writeheader()
            w.writerows(self.request_rows())
        with open(out / "steps.csv", "w", newline="") as fh:
            writer = csv.writer(fh)
            names = list(self.steps)
            writer.writerow(names)
            writer.writerows(zip(*(self.steps[n] for n in names)))
        return out
