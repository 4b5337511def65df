"""Compile the simulator's hot modules with mypyc (``sim.native`` says why and guards the result).

    python -m sim.native_build          # compile in place and record the sources (about 20 s)
    python -m sim.native_build status   # compiled, or why not
    python -m sim.native_build clean    # remove the compiled modules

Needs mypy (``pip install 'kvplan[native]'``) and a C compiler; without them the build fails in
one line and the simulator runs as Python, with the same results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.native import GROUP, MANIFEST, MODULES, ROOT, built_files, digest, source_path, stale_reason


def clean() -> int:
    removed = 0
    for path in built_files():
        path.unlink()
        removed += 1
    if MANIFEST.exists():
        MANIFEST.unlink()
    return removed


#: The build, run in a child process so that mypy's and the compiler's output can be kept to a
#: log and shown only when something fails.
_SETUP = """
import sys
from mypyc.build import mypycify
from setuptools import setup
extensions = mypycify(["--ignore-missing-imports", *sys.argv[3:]], group_name=sys.argv[1],
                      target_dir=sys.argv[2], opt_level="3")
setup(name="kvplan-native", ext_modules=extensions, script_args=["build_ext", "--inplace"])
"""


def build() -> Path:
    """Compile ``MODULES`` in place and record their sources; returns the build log. Raises
    ``RuntimeError`` naming the first error, having removed the old build first (a failed build
    never leaves stale modules behind)."""
    clean()
    sources = {m: digest(source_path(m)) for m in MODULES}
    target = ROOT / "build" / "mypyc"
    target.mkdir(parents=True, exist_ok=True)
    log = target / "build.log"
    paths = [str(source_path(m).relative_to(ROOT)) for m in MODULES]
    proc = subprocess.run([sys.executable, "-c", _SETUP, GROUP, str(target.relative_to(ROOT)), *paths],
                          cwd=ROOT, capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        clean()
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.lower().startswith("error") or ": error" in ln.lower()]
        first = (errors or lines or ["no output"])[0 if errors else -1]
        raise RuntimeError(f"{first.strip()} (log: {log})")
    MANIFEST.write_text(json.dumps({"python": sys.version.split()[0], "sources": sources}, indent=1) + "\n")
    return log


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "build"
    if command == "build":
        try:
            build()
        except (RuntimeError, OSError) as exc:
            print(f"kvplan: could not compile the simulator, it runs as Python: {exc}", file=sys.stderr)
            return 1
        print(f"compiled {len(MODULES)} simulator modules with mypyc")
        return 0
    if command == "clean":
        print(f"removed {clean()} compiled files")
        return 0
    if command == "status":
        reason = stale_reason()
        print("compiled with mypyc" if reason is None else f"pure Python: {reason}")
        return 0
    print("usage: python -m sim.native_build [build|status|clean]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
