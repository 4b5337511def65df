"""Hugging Face ``config.json`` files shipped by NVIDIA's ``aiconfigurator-core`` package.

Why: the package (Apache-2.0) carries the configs of ~90 current models under
``aiconfigurator_core/model_configs/<org>--<name>_config.json``. When it is installed,
``model: Qwen/Qwen3-32B`` can resolve to that file with no download and no Hub access, so
kvplan's built-in catalog need not copy every new model's shapes by hand.

The folder is found from the package's import spec, never by importing it: importing
``aiconfigurator_core`` loads its Rust extension, which the planner does not need. Without the
package every function here answers ``None`` or nothing, and ``get_model`` falls through to its
ordinary unknown-model error.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Optional

PACKAGE = "aiconfigurator_core"
_SUFFIX = "_config.json"
_QUANT_SUFFIX = "_hf_quant_config.json"  # a quantisation recipe beside a config, not a model


def package_root() -> Optional[Path]:
    """The installed ``aiconfigurator-core`` package folder, or None when it is not installed.

    Found with ``importlib.util.find_spec``, which locates the package without running its
    ``__init__`` (that loads a Rust extension kvplan does not use: kvplan reads only the
    package's data files, its model configs here and its measured tables in
    ``sim.pricing.table_data``). Looked up on every call, so a test can hide the package."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        if os.path.isdir(loc):
            return Path(loc)
    return None


def model_configs_dir() -> Optional[str]:
    """The package's ``model_configs`` folder, or None when the package (or the folder) is
    absent."""
    root = package_root()
    folder = root / "model_configs" if root is not None else None
    return str(folder) if folder is not None and folder.is_dir() else None


def _file_to_id(filename: str) -> Optional[str]:
    """``Qwen--Qwen3-32B_config.json`` -> ``Qwen/Qwen3-32B``; None for anything else."""
    if not filename.endswith(_SUFFIX) or filename.endswith(_QUANT_SUFFIX):
        return None
    org, sep, name = filename[: -len(_SUFFIX)].partition("--")
    return f"{org}/{name}" if sep and org and name else None


def _index() -> dict[str, tuple[str, str]]:
    """Lower-cased HF id -> (HF id as the package spells it, config file path)."""
    folder = model_configs_dir()
    if folder is None:
        return {}
    out: dict[str, tuple[str, str]] = {}
    for filename in sorted(os.listdir(folder)):
        hf_id = _file_to_id(filename)
        if hf_id is not None:
            out[hf_id.lower()] = (hf_id, os.path.join(folder, filename))
    return out


def find_model_config(hf_id: str) -> Optional[tuple[str, str]]:
    """(the HF id as the package spells it, path of its config.json) for an ``org/name`` id,
    matched case-insensitively; None when the package is absent or does not ship it."""
    text = hf_id.strip()
    if text.count("/") != 1:
        return None
    return _index().get(text.lower())


def list_model_ids() -> list[str]:
    """The HF ids whose configs the installed package ships (empty without the package)."""
    return [hf_id for hf_id, _ in _index().values()]
