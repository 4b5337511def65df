"""Fixtures for the runtime tests. Everything is local (HF_HUB_OFFLINE=1), and torch uses one
thread: the CI box has two cores shared with other jobs, and tiny models gain nothing from more."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.runtime.helpers import SHAPES, save_random_hf_model  # noqa: E402

torch.set_num_threads(1)

# The Triton code path runs on CPU in Triton's interpreter, whose mode is fixed at the first
# `import triton`: import it interpreted now (see kernels.interpreter), unless a GPU needs it compiled.
if not torch.cuda.is_available():
    from kernels.interpreter import import_triton_interpreted

    import_triton_interpreted()


@pytest.fixture(scope="session")
def hf_models(tmp_path_factory) -> dict[str, tuple[str, torch.nn.Module]]:
    """Every shape in SHAPES saved once per session: name -> (directory, transformers model)."""
    out = {}
    for name, shape in SHAPES.items():
        path = str(tmp_path_factory.mktemp(f"hf_{name}"))
        out[name] = (path, save_random_hf_model(path, shape))
    return out


@pytest.fixture(scope="session", autouse=True)
def kvplan_cache(tmp_path_factory):
    """The converted-tokenizer cache goes to a session temp dir, not the user's home."""
    if "KVPLAN_CACHE" not in os.environ:
        os.environ["KVPLAN_CACHE"] = str(tmp_path_factory.mktemp("kvplan_cache"))
    yield
