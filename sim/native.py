"""The simulator's hot path compiled to C by mypyc, and the guard that never lets a stale build run.

Why compile: after the exact fast paths (decode windows, sparse prefix-cache updates) what is
left is per-step Python over the batch (schedule, allocate, update, account), spread over a
dozen small functions; no single one is worth rewriting. mypyc compiles the *same* typed source
to C extension modules, so the scheduling and allocation policies stay one source of truth: the
runtime and the simulator import the same modules, compiled or not, and every result is the
same (a test runs scenarios both ways and compares the summaries).

How a build is kept honest:

- ``python -m sim.native_build`` (run by ``make install``) compiles ``MODULES`` in place, a
  ``.so`` beside each ``.py``, and records each source's SHA-256 in ``_native_manifest.json``.
- On ``import sim`` (``activate``), if any compiled module's source no longer matches the
  manifest, or ``KVPLAN_PURE_PYTHON=1`` is set, a finder placed first on ``sys.meta_path``
  loads *every* module of ``MODULES`` from its ``.py``. All or none: compiled modules call each
  other's native classes directly, so a mix of the two cannot load.
- Without a C compiler or mypy the build fails with one line and everything runs as Python.

    python -m sim.native_build          # compile (about 20 s on 2 cores)
    python -m sim.native_build status   # compiled, or why not
    python -m sim.native_build clean    # remove the compiled modules
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Optional

#: Modules compiled, in dependency order. Not compiled: package ``__init__`` files (re-exports),
#: and ``sim.policies.router`` (``sim.api`` subclasses its Router in Python, which a compiled
#: class does not allow).
MODULES = (
    "sim.policies.request",
    "sim.policies.step",
    "sim.policies.speculative",
    "sim.policies.kv.hashing",
    "sim.policies.kv.base",
    "sim.policies.kv.block_pool",
    "sim.policies.kv.paged",
    "sim.policies.kv.contiguous",
    "sim.policies.kv.radix",
    "sim.policies.schedulers.base",
    "sim.policies.schedulers.chunked",
    "sim.policies.schedulers.orca",
    "sim.policies.schedulers.static",
    "sim.policies.schedulers.vllm_v0",
    "sim.policies.schedulers.sglang",
    "sim.fast_decode",
    "sim.simulation",
)
#: The shared library mypyc puts every compiled module in (``sim/_hot__mypyc.*.so``).
GROUP = "sim._hot"
PURE_ENV = "KVPLAN_PURE_PYTHON"
ROOT = Path(__file__).resolve().parent.parent
MANIFEST = Path(__file__).resolve().with_name("_native_manifest.json")

_state: dict = {"compiled": False, "reason": "not activated"}


def source_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def built_files() -> list[Path]:
    """Compiled artefacts present on disk (extension modules of ``MODULES`` and the group)."""
    found: list[Path] = []
    for module in MODULES + (GROUP + "__mypyc",):
        path = source_path(module)
        found.extend(path.parent.glob(path.stem + ".*.so"))
        found.extend(path.parent.glob(path.stem + ".*.pyd"))
    return found


def stale_reason() -> Optional[str]:
    """Why the compiled modules must not run (None when they may)."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    if not built_files():
        return "not built (python -m sim.native_build)"
    try:
        recorded = json.loads(MANIFEST.read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no build manifest: the compiled modules' sources are unknown"
    for module in MODULES:
        if recorded.get(module) != digest(source_path(module)):
            return f"{source_path(module).relative_to(ROOT)} changed since it was compiled"
    return None


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Loads every compiled module from its ``.py``: a build exists but must not be used."""

    def find_spec(self, name, path=None, target=None):
        if name in MODULES:
            return importlib.util.spec_from_file_location(name, source_path(name))
        return None


def activate() -> dict:
    """Decide once, before any compiled module is imported, whether the build may run."""
    if _state["reason"] != "not activated":
        return _state
    reason = stale_reason()
    if reason is None:
        _state.update(compiled=True, reason="compiled with mypyc")
        return _state
    _state.update(compiled=False, reason=reason)
    if built_files():
        # Silent on purpose: one-line error contracts own stderr; `status` says why.
        sys.meta_path.insert(0, _SourceFirst())
    return _state


def status() -> dict:
    """``{"compiled": bool, "reason": str}``: whether ``sim.simulation`` runs compiled."""
    loaded = sys.modules.get("sim.simulation")
    if loaded is not None:
        compiled = not str(getattr(loaded, "__file__", "")).endswith(".py")
        return {"compiled": compiled, "reason": _state["reason"]}
    return dict(_state)
