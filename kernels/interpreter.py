"""Running the Triton kernels on CPU through Triton's interpreter (``TRITON_INTERPRET=1``).

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, and its own library
(``tl.cdiv``, ``tl.max``, ``tl.sum``...) is decorated when ``triton`` is first imported, so the
process's mode is fixed by the first ``import triton``: set the variable later and interpreted
kernels would call compiled library functions and fail. Our kernels follow the library's mode
(``_triton_util.jit``); these helpers let tests and the CPU smoke benchmark get the import order
right, and let the dispatcher say clearly when it is wrong.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def interpreter_ready() -> bool:
    """True when triton is importable and its library was decorated for the interpreter."""
    if importlib.util.find_spec("triton") is None:
        return False
    import triton.language as tl  # type: ignore[import-untyped]  # triton ships no type information
    from triton.runtime.interpreter import InterpretedFunction  # type: ignore[import-untyped]  # no stubs
    return isinstance(tl.cdiv, InterpretedFunction)


def import_triton_interpreted() -> bool:
    """Import triton with the interpreter on, then restore ``TRITON_INTERPRET``; True if ready.

    For CPU-only processes that want the Triton code path *sometimes* (tests enable it per test).
    Does nothing when triton is already imported. Never call this in a process that will launch
    compiled kernels on a GPU: the library would then be interpreter-only.
    """
    if "triton" not in sys.modules and importlib.util.find_spec("triton") is not None:
        before = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            import triton.language  # noqa: F401
        finally:
            if before is None:
                del os.environ["TRITON_INTERPRET"]
            else:
                os.environ["TRITON_INTERPRET"] = before
    return interpreter_ready()
