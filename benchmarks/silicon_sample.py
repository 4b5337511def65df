"""Where aiconfigurator-core's ``systems/silicon_sample.csv`` is, and its rows of one backend.

Shared by ``silicon_matrix.py`` (kvplan's replay) and ``aic_reference.py`` (AIConfigurator's own
estimate), so both read the same rows. Standard library only (and kvplan's stdlib-only
``sim.catalog.package_models``): ``aic_reference.py predict`` runs in a separate environment
that has the ``aiconfigurator`` package but not kvplan's dependencies.
"""

from __future__ import annotations

import csv
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sim.catalog.package_models import package_root  # noqa: E402

CSV_NAME = "silicon_sample.csv"

#: Two collections' copies of one measurement agree to the coarser file's rounding: some files
#: write the means to 2 decimals, others to the float's last digit, so a copy is at most 0.005 ms
#: off (0.011 allows for the float). Two runs never agree that closely on both means: the
#: closest distinct runs in the CSV are 0.05 ms (0.08%) apart on TTFT.
COPY_TOLERANCE_MS = 0.011


def same_means(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two rows' measured means (TTFT, TPOT) are one measurement filed twice: every
    mean equal to the files' rounding. The one rule for "a copy" wherever rows are compared
    (``silicon_matrix``'s copies and repeat spread, ``silicon_pairs``'s pairs)."""
    return len(a) == len(b) and all(abs(float(x) - float(y)) <= COPY_TOLERANCE_MS for x, y in zip(a, b))


def silicon_csv() -> Optional[Path]:
    """The installed package's CSV, or None (package absent, or the file missing)."""
    pkg = package_root()
    path = pkg / "systems" / CSV_NAME if pkg else None
    return path if path is not None and path.is_file() else None


def package_version() -> Optional[str]:
    """The installed aiconfigurator-core release, or None."""
    try:
        return metadata.version("aiconfigurator-core")
    except metadata.PackageNotFoundError:
        return None


def read_rows(path: Path, backend: str = "vllm") -> list[dict]:
    """The aggregated (``mode == agg``) rows of ``backend``, as the CSV's strings, in file order."""
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["backend"] == backend and r["mode"] == "agg"]
