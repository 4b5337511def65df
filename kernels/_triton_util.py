"""Host-side helpers shared by the Triton kernels: mode-consistent jit and tile sizing.

Triton fixes compiled-vs-interpreted when ``triton`` is imported (its library functions are
decorated then; see ``kernels.interpreter``). Our kernels must match that mode whatever
``TRITON_INTERPRET`` says when *they* are imported, so ``jit`` follows the library.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton  # type: ignore[import-untyped]  # triton ships no type information

from kernels.interpreter import interpreter_ready

INTERPRETED = interpreter_ready()


def jit(fn: Callable):
    """``@triton.jit`` in the mode of triton's own library (interpreted on CPU test processes)."""
    if INTERPRETED:
        from triton.runtime.interpreter import InterpretedFunction  # type: ignore[import-untyped]  # no stubs
        return InterpretedFunction(fn)
    return triton.jit(fn)


def dot_upcast(dtype: torch.dtype) -> bool:
    """Whether tl.dot operands must be upcast to float32.

    Triton 3.x's interpreter stores bfloat16 as uint16 and its tl.dot multiplies those raw bits,
    so interpreted bf16 dots are garbage; upcasting there keeps CPU tests meaningful while the
    compiled GPU path keeps bf16 tensor-core dots.
    """
    return INTERPRETED and dtype == torch.bfloat16


def dot_precision(dtype: torch.dtype) -> str:
    """IEEE float32 dots for float32 inputs (tf32 would lose ~3 digits against the reference)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def pow2(n: int, floor: int = 1) -> int:
    """Smallest power of two >= max(n, floor): tile extents must be powers of two."""
    return max(floor, triton.next_power_of_2(n))
