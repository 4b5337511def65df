"""Compile every Triton kernel for real GPU targets on a machine without a GPU.

The CPU interpreter checks the kernels' arithmetic but not their compilation: a constexpr
reassigned in a loop, a type the code generator rejects, a tile that needs more shared memory
than the SM has, or registers spilling to local memory only show up when Triton lowers the
kernel to PTX and ptxas assembles it. Triton ships ptxas, so this does exactly that, for the
launch arguments the host wrappers really produce (recorded, not launched).

``python -m kernels.compile_check [--full] [--arch 80,90]``; exits 1 when any variant fails.
Run it in a process where triton was imported *without* ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from kernels.paged_case import random_paged_kv

# Max dynamic shared memory per block, bytes (CUDA programming guide, compute capabilities).
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}
TYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32", torch.int64: "i64"}


@dataclass
class Launch:
    """One kernel launch as the host wrapper issued it: which kernel, arguments, launch options."""

    label: str
    fn: Any  # a triton JITFunction (triton ships no type information)
    args: tuple
    kwargs: dict


def record(label: str, call: Callable[[], object]) -> list[Launch]:
    """Run a host wrapper with every kernel swapped for a recorder; return the launches it made."""
    from kernels import triton_cache, triton_decode, triton_prefill

    launches: list[Launch] = []

    class Recorder:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: launches.append(Launch(label, self.fn, args, kwargs))

    names = [(triton_decode, "_decode_kernel"), (triton_decode, "_merge_kernel"),
             (triton_prefill, "_prefill_kernel"), (triton_cache, "_write_kv_kernel")]
    saved = [(mod, name, getattr(mod, name)) for mod, name in names]
    try:
        for mod, name, fn in saved:
            setattr(mod, name, Recorder(fn))
        call()
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)
    return launches


def compile_launch(launch: Launch, arch: int):
    """Lower one recorded launch to a cubin for ``sm_<arch>``, specialising like the runtime does."""
    import triton  # type: ignore[import-untyped]  # no stubs
    from triton.backends.compiler import GPUTarget  # type: ignore[import-untyped]  # no stubs
    from triton.compiler import ASTSource  # type: ignore[import-untyped]  # no stubs

    fn = launch.fn
    kwargs = dict(launch.kwargs)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
    values = dict(zip(fn.arg_names, launch.args)) | kwargs
    signature, constants, attrs = {}, {}, {}
    divisible = [["tt.divisibility", 16]]  # what the runtime tells the compiler about aligned args
    for i, name in enumerate(fn.arg_names):
        v = values[name]
        if i in fn.constexprs or (type(v) is int and v == 1):  # Triton specialises ints equal to 1
            signature[name], constants[name] = "constexpr", v
        elif isinstance(v, torch.Tensor):
            signature[name] = "*" + TYPES[v.dtype]
            if v.data_ptr() % 16 == 0:
                attrs[(i,)] = divisible
        elif isinstance(v, bool):
            signature[name] = "i1"
        elif isinstance(v, int):
            signature[name] = "i32" if abs(v) < 2 ** 31 else "i64"
            if v % 16 == 0:
                attrs[(i,)] = divisible
        elif isinstance(v, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{fn.__name__}: can't type argument {name}={v!r}")
    return triton.compile(ASTSource(fn, signature, constants, attrs), target=GPUTarget("cuda", arch, 32), options=options)


def registers_and_stack(kernel) -> tuple[int, int] | None:
    """(registers per thread, stack bytes) of the cubin Triton built, read with its bundled cuobjdump.

    Stack above zero is local memory, almost always register spills: a performance bug to fix
    before a GPU is lent. None when this Triton version hides the tool.
    """
    try:
        from triton import knobs
        with tempfile.TemporaryDirectory() as tmp:
            cubin = Path(tmp) / "k.cubin"
            cubin.write_bytes(kernel.asm["cubin"])
            usage = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", str(cubin)],
                                   capture_output=True, text=True, check=True).stdout
    except Exception:  # noqa: BLE001 - diagnostics only
        return None
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    return (int(found.group(1)), int(found.group(2))) if found else None


def variants(full: bool) -> list[Launch]:
    """Representative launches (or, with ``full``, every dtype x head_dim x GQA x block size)."""
    from kernels.triton_cache import write_kv_cache_triton
    from kernels.triton_decode import paged_decode_attention_triton
    from kernels.triton_prefill import paged_prefill_attention_triton

    if full:
        grid = [(dt, hd, bs, g) for dt in TYPES if dt.is_floating_point for hd in (64, 80, 96, 128)
                for bs in (16,) for g in (1, 4, 8)] + [(torch.bfloat16, 128, bs, 4) for bs in (8, 32)]
    else:
        grid = [(torch.bfloat16, 128, 16, 4), (torch.float32, 80, 8, 1), (torch.float16, 96, 32, 8)]
    launches: list[Launch] = []
    for dtype, head_dim, block_size, group in grid:
        kv_heads = 2
        case = random_paged_kv([5, 40], kv_heads, head_dim, block_size, dtype=dtype)
        q = torch.zeros(2, kv_heads * group, head_dim, dtype=dtype)
        tables = (case.k_cache, case.v_cache, case.block_tables)
        cu = torch.tensor([0, 1, 2], dtype=torch.int32)
        label = f"{TYPES[dtype]} d={head_dim} bs={block_size} g={group}"
        launches += record(f"decode {label}", lambda: paged_decode_attention_triton(q, *tables, case.seq_lens, 0.1, 1))
        launches += record(f"decode split {label}", lambda: paged_decode_attention_triton(q, *tables, case.seq_lens, 0.1, 3))
        launches += record(f"prefill {label}", lambda: paged_prefill_attention_triton(q, *tables, cu, case.seq_lens, 0.1))
        if group == 1:
            slots = torch.tensor([1, 2], dtype=torch.int32)
            launches += record(f"write {label}", lambda: write_kv_cache_triton(q, q, case.k_cache, case.v_cache, slots))
    return launches


def check(launches: list[Launch], archs: list[int], log: Callable[[str], None] = print) -> bool:
    """Compile each launch for each arch; report shared memory, registers and spills; True if all pass."""
    ok = True
    for arch in archs:
        for launch in launches:
            start = time.perf_counter()
            name = f"sm_{arch} {launch.label} [{launch.fn.__name__}]"
            try:
                kernel = compile_launch(launch, arch)
            except Exception as err:  # noqa: BLE001 - reported, then the run fails
                log(f"FAIL {name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
                ok = False
                continue
            shared = kernel.metadata.shared
            fits = shared <= SHARED_LIMIT.get(arch, min(SHARED_LIMIT.values()))
            regs = registers_and_stack(kernel)
            ok &= fits
            extra = f" regs={regs[0]} stack={regs[1]}B" if regs else ""
            log(f"{'ok  ' if fits else 'FAIL'} {name}: shared={shared}B{extra} ({time.perf_counter() - start:.1f}s)")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.compile_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--full", action="store_true", help="every dtype x head_dim x GQA group (minutes)")
    p.add_argument("--arch", default="90", help="compute capabilities, e.g. 80,90")
    args = p.parse_args(argv)
    from kernels.interpreter import interpreter_ready
    if interpreter_ready():
        print("kernels.compile_check: triton was imported with TRITON_INTERPRET=1; unset it", file=sys.stderr)
        return 2
    return 0 if check(variants(args.full), [int(a) for a in args.arch.split(",")]) else 1


if __name__ == "__main__":
    sys.exit(main())
