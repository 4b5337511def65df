"""Small helpers shared by the Triton kernels: mode-aware jit and tile sizing.

Triton decides at *decoration* time whether ``@triton.jit`` builds a compiled kernel or an
interpreted one (it reads ``TRITON_INTERPRET`` then, not per call). Decorating lazily, once per
mode, lets the same process run kernels interpreted in CPU tests whatever was imported first.
"""

from __future__ import annotations

import os
from typing import Callable

import torch
import triton

_JITTED: dict[tuple[Callable, bool], object] = {}


def interpreting() -> bool:
    """True when Triton kernels run in the CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def jit(fn: Callable):
    """``triton.jit(fn)`` for the current mode (compiled or interpreted), built once per mode.

    Kernels passed here must be self-contained: a compiled kernel can only call other
    ``@triton.jit`` functions, so they inline their helpers.
    """
    key = (fn, interpreting())
    if key not in _JITTED:
        _JITTED[key] = triton.jit(fn)
    return _JITTED[key]


def dot_upcast(dtype: torch.dtype) -> bool:
    """Whether tl.dot operands must be upcast to float32.

    Triton 3.x's interpreter stores bfloat16 as uint16 and its tl.dot multiplies those raw bits,
    so interpreted bf16 dots are garbage; upcasting there keeps CPU tests meaningful while the
    compiled GPU path keeps bf16 tensor-core dots.
    """
    return interpreting() and dtype == torch.bfloat16


def dot_precision(dtype: torch.dtype) -> str:
    """IEEE float32 dots for float32 inputs (tf32 would lose ~3 digits against the reference)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def pow2(n: int, floor: int = 1) -> int:
    """Smallest power of two >= max(n, floor): tile extents must be powers of two."""
    return max(floor, triton.next_power_of_2(n))
