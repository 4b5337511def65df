"""What makes a machine fast or slow at running a model, recorded in every calibration profile
and compared when the profile is used.

Why: a profile is a measurement of one machine. The same CPU model name can come with or
without AVX-512 / AMX (a cloud vCPU type, a BIOS setting), and a bf16 step on a CPU without
native bf16 was measured 8x slower than the profile said. So a profile records the CPU, the
instruction-set flags that change kernel speed, the core and thread counts and the GPUs, and
``simulate`` / ``validate`` warn when the machine they run on differs.

Cheap and torch-free: /proc/cpuinfo, ``os.cpu_count()``, ``nvidia-smi`` only if it is on the
PATH, torch's thread count only if torch is already imported.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional


#: CPU flags that change how fast a model's kernels run (x86 /proc/cpuinfo "flags"; ARM
#: "Features"): vector width, fused multiply-add, native bf16, matrix tiles.
SPEED_FLAGS: tuple[str, ...] = (
    "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8",
    "asimd", "sve", "sve2", "bf16", "i8mm",
)

MACHINE_KEYS: tuple[str, ...] = ("cpu", "cpu_flags", "logical_cores", "torch_threads", "gpus")


def cpu_name() -> str:
    """The CPU model name from /proc/cpuinfo (platform's guess elsewhere)."""
    info = _cpuinfo()
    for key in ("model name", "Model", "Hardware"):
        if info.get(key):
            return info[key]
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> list[str]:
    """The ``SPEED_FLAGS`` this CPU has, sorted."""
    info = _cpuinfo()
    have = set((info.get("flags") or info.get("Features") or "").split())
    return sorted(f for f in SPEED_FLAGS if f in have)


def _cpuinfo() -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo (empty where there is none)."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if not line.strip():
            if "flags" in out or "Features" in out:
                break  # the first processor's block is enough
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def gpus() -> list[dict[str, str]]:
    """Name and driver of each NVIDIA GPU (``nvidia-smi``), or [] when there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    out = []
    for line in proc.stdout.splitlines():
        name, _, driver = line.partition(",")
        if name.strip():
            out.append({"name": name.strip(), "driver": driver.strip()})
    return out


def torch_threads() -> Optional[int]:
    """torch's intra-op thread count, if torch is already imported (never imports it)."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    try:
        return int(get()) if get is not None else None
    except Exception:  # a half-imported or stubbed torch: the count is simply unknown
        return None


def machine_fingerprint(with_gpus: bool = True) -> dict[str, Any]:
    """This machine: ``cpu`` (model name), ``cpu_flags`` (the ``SPEED_FLAGS`` it has),
    ``logical_cores``, ``torch_threads`` (None unless torch is imported) and ``gpus`` (name and
    driver each; omitted with ``with_gpus=False``, which skips ``nvidia-smi``)."""
    out: dict[str, Any] = {"cpu": cpu_name(), "cpu_flags": cpu_flags(),
                           "logical_cores": os.cpu_count(), "torch_threads": torch_threads()}
    if with_gpus:
        out["gpus"] = _gpus_cached()
    return out


@lru_cache(maxsize=1)
def _gpus_cached() -> list[dict[str, str]]:
    return gpus()


def machine_mismatch(profile_machine: dict[str, Any], current: dict[str, Any],
                     device: Optional[str] = None) -> list[str]:
    """What differs between the machine a profile was measured on and ``current``, one short
    phrase each (empty when nothing that matters differs). ``device="cpu"`` ignores GPUs (a
    CPU profile does not run on them); torch threads are compared only when both are known."""
    diffs = []
    a, b = profile_machine, current
    if a.get("cpu") and b.get("cpu") and a["cpu"] != b["cpu"]:
        diffs.append(f"CPU {a['cpu']!r} there, {b['cpu']!r} here")
    if a.get("cpu_flags") is not None and b.get("cpu_flags") is not None:
        fa, fb = set(a["cpu_flags"]), set(b["cpu_flags"])
        if fa - fb:
            diffs.append(f"CPU flags {', '.join(sorted(fa - fb))} there, not here")
        if fb - fa:
            diffs.append(f"CPU flags {', '.join(sorted(fb - fa))} here, not there")
    for key, what in (("logical_cores", "logical cores"), ("torch_threads", "torch threads")):
        if a.get(key) is not None and b.get(key) is not None and a[key] != b[key]:
            diffs.append(f"{a[key]} {what} there, {b[key]} here")
    if device != "cpu" and a.get("gpus") is not None and b.get("gpus") is not None:
        ga, gb = _gpu_names(a["gpus"]), _gpu_names(b["gpus"])
        if ga != gb:
            diffs.append(f"GPU {ga or 'none'} there, {gb or 'none'} here")
    return diffs


def _gpu_names(gpus: list[dict[str, str]]) -> str:
    return ", ".join(f"{g.get('name', '?')} (driver {g.get('driver', '?')})" for g in gpus)
