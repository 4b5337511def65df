"""Reading measured operator tables (NVIDIA AIConfigurator's systems folder, from the PyPI
package ``aiconfigurator-core``).

Why a module of its own: the operator-table pricer (``sim.pricing.operator_tables``) needs a
few numbers out of large parquet files once, at construction; where those files live, which
vLLM version folder to read, and turning a missing or broken file into one line for the user
are this module's job, so the pricer only sees small NumPy arrays.

Where the tables come from, first found wins: ``cost_model.tables``, ``$KVPLAN_GPU_TABLES``,
the installed ``aiconfigurator-core`` package (``aiconfigurator_core/systems/data``, located
without importing the package). Without any of them the roofline prices, and the summary says so.

Layout read (``<root>/<gpu>/<operation>/<backend>/<version>/<table>.parquet``):

- ``gemm/vllm/<v>/gemm_perf.parquet``: ``gemm_dtype, m, n, k, latency`` (ms per call)
- ``attention/vllm/<v>/generation_attention_perf.parquet`` and
  ``context_attention_perf.parquet``: ``batch_size, isl, step, num_heads,
  num_key_value_heads, head_dim, kv_cache_dtype, latency``
- ``comm/vllm/<v>/custom_allreduce_perf.parquet``: ``backend`` (vllm_graph / vllm_eager),
  ``num_gpus, message_size`` (elements), ``latency``; ``comm/nccl/<v>/nccl_perf.parquet``:
  ``op_name, nccl_dtype, num_gpus, message_size, latency``.

A version folder holding only ``reuse.yaml`` borrows the table of another version
(``from_version``); this module follows it. pyarrow is imported lazily (only a pricer that
reads tables needs it); pandas is never used (the simulator's path stays light).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from sim.catalog.package_models import PACKAGE, package_root
from sim.errors import ConfigError, InputFileError

#: Catalog hardware name -> AIConfigurator system folder. GPUs of the catalog not listed here
#: (h100-pcie, rtx-4090, MI300X...) have no measured tables: the roofline prices them.
GPU_TABLE_DIRS: dict[str, str] = {
    "a100-80gb": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
}

#: AIConfigurator system folder -> the CUDA architecture vLLM sees (``sm90`` Hopper, ``sm100``
#: the SM10x family, B300's SM103 included, which vLLM's ``is_device_capability_family(100)``
#: tests): vLLM picks some kernels by it (``DEFAULT_MOE_KERNELS``).
GPU_ARCH: dict[str, str] = {
    "a100_sxm": "sm80", "h100_sxm": "sm90", "h200_sxm": "sm90", "b200_sxm": "sm100",
    "b300_sxm": "sm100", "gb200": "sm100", "gb300": "sm100", "l40s": "sm89",
    "rtx_pro_6000_server": "sm120",
}

#: The vLLM release the version folder is chosen for when the caller names none (the shared
#: real runs used 0.15.1). A scenario passes its ``engine.version``.
TARGET_VLLM: tuple[int, ...] = (0, 15, 1)

#: Environment variable naming the systems folder (``cost_model.tables`` overrides it).
ENV_TABLES = "KVPLAN_GPU_TABLES"
#: The PyPI distribution that ships the tables (``PACKAGE`` is its import name), and where
#: inside it they lie.
PACKAGE_DIST = "aiconfigurator-core"
PACKAGE_DATA = ("systems", "data")


class TableError(InputFileError):
    """An operator-table folder or file that cannot be used (names the path)."""


def package_tables_root() -> Optional[Path]:
    """``aiconfigurator_core/systems/data`` of the installed package, or None."""
    root = package_root()
    if root is None:
        return None
    data = root.joinpath(*PACKAGE_DATA)
    return data if data.is_dir() else None


def package_version() -> Optional[str]:
    """The installed ``aiconfigurator-core`` release (for the summary's provenance)."""
    from importlib import metadata

    try:
        return metadata.version(PACKAGE_DIST)
    except metadata.PackageNotFoundError:
        return None


#: Said once when ``auto`` pricing finds no tables at all (``missing_tables_note``).
MISSING_TABLES_NOTE = (f"measured GPU tables not found: {PACKAGE_DIST} is not installed "
                       f"(pip install 'kvplan[tables]'); steps priced by the roofline")


def default_tables_root() -> Optional[Path]:
    """The systems folder used when ``cost_model.tables`` is not given: ``$KVPLAN_GPU_TABLES``,
    else the installed ``aiconfigurator-core`` package's data, else None (the roofline
    prices, and the summary says why)."""
    env = os.environ.get(ENV_TABLES)
    if env:
        return Path(env)
    return package_tables_root()


def gpu_dir(root: Path, hardware_name: str) -> Optional[Path]:
    """The folder of ``hardware_name``'s tables under ``root``, or None when there is none."""
    sub = GPU_TABLE_DIRS.get(hardware_name)
    if sub is None:
        return None
    d = Path(root) / sub
    return d if d.is_dir() else None


def _version_key(text: str) -> Optional[tuple[int, ...]]:
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(g or 0) for g in m.groups())


def _distance(v: tuple[int, ...], target: tuple[int, ...] = TARGET_VLLM) -> tuple:
    """Order versions by closeness to ``target``: major/minor distance first, older first on a
    tie (an older release's kernels are what a 0.15 user runs, not a future one's)."""
    vm = v[0] * 1000 + v[1]
    tm = target[0] * 1000 + target[1]
    return (abs(vm - tm), vm > tm, abs(v[2] - target[2]) if len(v) > 2 else 0)


def _folder_yaml(f: Path, what: str) -> dict:
    """A version folder's small YAML note (``reuse.yaml``, ``collection_meta.yaml``) as a dict
    ({} when absent); ``TableError`` naming the file when it cannot be read."""
    if not f.is_file():
        return {}
    import yaml  # type: ignore[import-untyped]  # no stubs: types-PyYAML is no dependency

    try:
        data = yaml.safe_load(f.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TableError(f"{f}: cannot read {what} ({exc.__class__.__name__})") from None
    return data if isinstance(data, dict) else {}


def _reuse_source(folder: Path, table: str) -> Optional[str]:
    """``from_version`` of ``table`` in ``folder/reuse.yaml``."""
    data = _folder_yaml(folder / "reuse.yaml", "reuse file")
    for item in data.get("reuse", []) or []:
        if isinstance(item, dict) and item.get("table") == table:
            return str(item.get("from_version"))
    return None


def table_files(op_dir: Path, table: str, target: tuple[int, ...] = TARGET_VLLM
                ) -> list[tuple[Path, str]]:
    """Every version's parquet file of ``table`` under ``op_dir``, nearest ``target`` first
    (a version folder holding only ``reuse.yaml`` gives the file it borrows). Raises
    ``TableError`` naming the folder when it is missing or no version has the table."""
    if not op_dir.is_dir():
        raise TableError(f"{op_dir}: operator-table folder not found")
    versions = sorted((v for v in (_version_key(p.name) for p in op_dir.iterdir() if p.is_dir())
                       if v is not None), key=lambda v: _distance(v, tuple(target)))
    out = []
    for v in versions:
        name = ".".join(map(str, v))
        folder = op_dir / name
        f = folder / f"{table}.parquet"
        if f.is_file():
            out.append((f, name))
            continue
        src = _reuse_source(folder, table)
        if src and (op_dir / src / f"{table}.parquet").is_file():
            out.append((op_dir / src / f"{table}.parquet", name))
    if not out:
        raise TableError(f"{op_dir}: no {table}.parquet in any version folder")
    return out


def table_file(op_dir: Path, table: str, target: tuple[int, ...] = TARGET_VLLM
               ) -> tuple[Path, str]:
    """The parquet file of ``table`` (e.g. ``gemm_perf``) under ``op_dir`` (e.g.
    ``<gpu>/gemm/vllm``) for the version closest to ``target`` (the engine release), and that
    version. Raises ``TableError`` naming the folder when no version has it."""
    return table_files(op_dir, table, target)[0]


#: Systems folders whose GPUs are the same die: a Grace-Blackwell superchip's GPU is the HGX
#: board's (GB200's the B200, GB300's the B300, SM103), same HBM, same kernels. Where one
#: folder's table is known to be stale and the other's re-collected, the other's stands in.
SAME_DIE: dict[str, str] = {"b200_sxm": "gb200", "gb200": "b200_sxm",
                            "b300_sxm": "gb300", "gb300": "b300_sxm"}


def recollected(folder: Path, table: str) -> bool:
    """Whether ``folder/collection_meta.yaml`` records ``table`` as collected with
    AIConfigurator's fused-op collector (ai-dynamo/aiconfigurator#1423): a ``norm_dispatch``
    on the table, or a provenance other than ``legacy`` with the collector's commit. The MLA
    module rows before it ran "the never-in-serving native chain" of eager norm kernels
    (+34% against an in-engine trace at 64 heads, batch 16, 8k context, by the B200 folder's
    own note; about twice the re-collected rows at small batches and contexts)."""
    try:
        data = _folder_yaml(folder / "collection_meta.yaml", "collection note")
    except TableError:  # an unreadable note proves nothing: the rows stay as found
        return False
    entry = (data.get("tables") or {}).get(table) or {}
    if not isinstance(entry, dict):
        return False
    return bool(entry.get("norm_dispatch")) or (data.get("provenance") not in (None, "legacy")
                                                and bool(entry.get("collector_ref")))


def recollected_file(gpu_folder: Path, op: str, backend: str, table: str,
                     target: tuple[int, ...] = TARGET_VLLM) -> Optional[tuple[Path, str]]:
    """The nearest re-collected ``table`` (``recollected``) for this GPU: its own version
    folders first, then its same-die twin's (``SAME_DIE``); the file and a label (``0.27.0``,
    or ``gb300/0.27.0`` from the twin). None when neither has one."""
    folders = [(gpu_folder, "")]
    twin = SAME_DIE.get(gpu_folder.name)
    if twin and (gpu_folder.parent / twin).is_dir():
        folders.append((gpu_folder.parent / twin, f"{twin}/"))
    for folder, prefix in folders:
        try:
            files = table_files(folder / op / backend, table, target)
        except TableError:
            continue
        for path, version in files:
            if recollected(path.parent, table):
                return path, prefix + version
    return None


def collector_pair(data_root: Path, op: str, backend: str, table: str) -> Optional[tuple[Path, Path, str]]:
    """A GPU folder under ``data_root`` that holds ``table`` from both collectors: a legacy
    version's rows and a re-collected version's (``recollected``), measured on the same GPU.
    (legacy file, re-collected file, a label such as ``gb300 0.24.0 / 0.27.0``), the first
    such GPU by name; None when no GPU has both."""
    if not data_root.is_dir():
        return None
    for gpu in sorted(p for p in data_root.iterdir() if p.is_dir()):
        try:
            files = table_files(gpu / op / backend, table)
        except TableError:
            continue
        old = next(((f, v) for f, v in files if not recollected(f.parent, table)), None)
        new = next(((f, v) for f, v in files if recollected(f.parent, table)), None)
        if old and new:
            return old[0], new[0], f"{gpu.name} {old[1]} / {new[1]}"
    return None


def legacy_collector_overhead(pair: tuple[Path, Path, str]) -> tuple[np.ndarray, np.ndarray]:
    """Seconds the legacy MLA module collector adds to a decode row, by batch size: the median,
    over the cells both collectors measured on the pair's GPU (heads, KV length, KV dtype; 16-bit
    GEMMs), of legacy minus re-collected latency at each batch, never negative. Why per batch:
    the legacy rows add the eager native-chain norm kernels serving never runs, launch-bound
    work that hardly depends on heads or context (on GB300 36-48 us at batch 1-4 and 53-83 at
    256 over every head count and KV length; B300's legacy rows against B200's re-collected
    ones, another pair, give the same 36-83 us). Computed once per pair of files (as they are on
    disk): every pricer of a legacy-only GPU asks for it, and the cells take ~90 ms to match."""
    legacy, fresh, _ = pair
    return _legacy_overhead(str(legacy), str(fresh), legacy.stat().st_mtime, fresh.stat().st_mtime)


@lru_cache(maxsize=8)
def _legacy_overhead(legacy: str, fresh: str, legacy_mtime: float, fresh_mtime: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    cols = ("num_heads", "batch_size", "step", "kv_cache_dtype", "gemm_type", "latency")
    a, b = read_columns(Path(legacy), cols), read_columns(Path(fresh), cols)

    def cells(c: dict) -> dict:
        keep = c["gemm_type"] == "bfloat16"
        out: dict = {}
        for k in zip(c["num_heads"][keep].tolist(), c["batch_size"][keep].tolist(),
                     c["step"][keep].tolist(), c["kv_cache_dtype"][keep].tolist(),
                     c["latency"][keep].astype(float).tolist()):
            out.setdefault(k[:4], []).append(k[4])
        return {k: float(np.median(v)) for k, v in out.items()}

    old, new = cells(a), cells(b)
    by_batch: dict = {}
    for key in old.keys() & new.keys():
        by_batch.setdefault(key[1], []).append(old[key] - new[key])
    if not by_batch:
        raise TableError(f"{legacy} and {fresh}: no decode cell measured by both collectors")
    batches = np.array(sorted(by_batch), dtype=float)
    extra = np.array([max(float(np.median(by_batch[b_])), 0.0) for b_ in sorted(by_batch)]) * 1e-3
    batches.setflags(write=False)  # shared by every caller through the cache
    extra.setflags(write=False)
    return batches, extra


def latest_file(op_dir: Path, table: str) -> Path:
    """NCCL tables are versioned by NCCL, not vLLM: the newest folder that has ``table``."""
    if not op_dir.is_dir():
        raise TableError(f"{op_dir}: operator-table folder not found")
    found = sorted(((_version_key(p.name) or (0,), p / f"{table}.parquet")
                    for p in op_dir.iterdir() if (p / f"{table}.parquet").is_file()),
                   reverse=True)
    if not found:
        raise TableError(f"{op_dir}: no {table}.parquet in any version folder")
    return found[0][1]


@lru_cache(maxsize=64)
def _read(path: str, columns: tuple[str, ...], mtime: float) -> dict[str, np.ndarray]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no type information
    except ImportError:  # pragma: no cover - pyarrow is a core dependency
        raise ConfigError("cost_model.source operator_tables needs pyarrow "
                          "(pip install pyarrow)") from None
    try:
        # ParquetFile reads the file directly; read_table goes through pyarrow.dataset, which
        # imports pandas: 150 ms of every simulate process for nothing.
        t = pq.ParquetFile(path).read(columns=list(columns))
    except Exception as exc:  # pyarrow raises many types for a broken file
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise TableError(f"{path}: cannot read parquet table ({msg[:160]})") from None
    return {c: _to_numpy(t.column(c)) for c in columns}


#: Arrow types read as a NumPy view of their data buffer.
_NUMERIC = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
            "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
            "float": np.float32, "double": np.float64}


def _to_numpy(column) -> np.ndarray:
    """A parquet column as NumPy, the same array ``to_numpy(zero_copy_only=False)`` gives, but
    without pyarrow's conversion layer, which imports pandas (130 ms of every simulate process
    that prices with operator tables): numbers from the data buffer, strings as objects."""
    arr = column.combine_chunks()
    kind = str(arr.type)
    if arr.null_count == 0 and kind in _NUMERIC:
        data = np.frombuffer(arr.buffers()[1], dtype=_NUMERIC[kind])
        return data[arr.offset:arr.offset + len(arr)].copy()
    if arr.null_count == 0 and kind in ("string", "large_string"):
        return np.array(arr.to_pylist(), dtype=object)
    return column.to_numpy(zero_copy_only=False)  # rare types and nulls: pyarrow's own path


@lru_cache(maxsize=128)
def _schema(path: str, mtime: float) -> tuple[str, ...]:
    import pyarrow.parquet as pq

    try:
        return tuple(pq.ParquetFile(path).schema_arrow.names)
    except Exception as exc:  # pyarrow raises many types for a broken file
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise TableError(f"{path}: cannot read parquet table ({msg[:160]})") from None


def read_columns_present(path: Path, columns: Sequence[str], optional: Sequence[str]
                         ) -> dict[str, np.ndarray]:
    """``columns`` and those of ``optional`` the file has (newer tables add columns, e.g.
    the attention tables' ``window_size`` and ``kernel_source`` since vLLM 0.19)."""
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise TableError(f"{path}: {exc.strerror or exc}") from None
    names = _schema(str(path), mtime)
    return read_columns(path, tuple(columns) + tuple(c for c in optional if c in names))


def read_columns(path: Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """``columns`` of the parquet file ``path`` as NumPy arrays (cached per file)."""
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise TableError(f"{path}: {exc.strerror or exc}") from None
    return _read(str(path), tuple(columns), mtime)
