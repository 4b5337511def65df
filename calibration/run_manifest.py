"""What a run's neighbours say about its server: a collection's ``experiments.json`` manifest and
the server's own ``vllm.log``.

Why: an inference-perf run folder's ``exp-config.yaml`` names the model, TP and the batch limits
only. Collections of such runs record the rest beside them. The layout read here is the one of
the sim-to-real ground truth of inference-sim (BLIS), whose loader is
``experiment/ground_truth.py`` in inference-sim/sim-to-real-accuracy-validation:

- ``experiments.json`` in the folder holding the runs: a list of entries ``{"id", "model",
  "precision": "FP16" | "FP8", "hw": "H100" | "A100" | "L40S" | ..., "workload", "mbt",
  "cpu_offload": bool, "gpu_mem": 0.9, "tp", "dp": null | 1 | 2 | 4, "safe", "done", "notes"}``;
  a run folder ``<id>-<slug>`` belongs to the entry of that id.
- ``vllm.log`` in the run folder: ``vLLM API server version X`` (the release), ``GPU KV cache
  size: N tokens`` (one line per engine core: per DP rank), ``non-default args: {...}`` (the API
  server's launch flags, vLLM 0.9+), the CPU
  offload connector's ``cpu_bytes_to_use`` and ``total_gpu_memory (X GiB)`` from memory
  profiling.

Without them a data-parallel, FP8 or ``gpu_memory_utilization 0.95`` run would be simulated as
the one-rank, 16-bit, 0.9 server its exp-config.yaml alone describes. Every fact used is named in
the run's notes; a malformed manifest entry is a one-line error naming the file and field.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from sim.errors import KvplanError

MANIFEST_NAME = "experiments.json"
#: The manifest's ``hw`` names -> kvplan's catalog. A bare "A100" is the 80 GB part unless the
#: log's memory profile says otherwise (``ServerFacts.gpu_memory_gib``).
MANIFEST_HARDWARE = {"h100": "h100-sxm", "h100-sxm": "h100-sxm", "h100-pcie": "h100-pcie",
                     "h200": "h200", "a100": "a100-80gb", "a100-80gb": "a100-80gb",
                     "a100-40gb": "a100-40gb", "l40s": "l40s", "l4": "l4", "b200": "b200",
                     "mi300x": "mi300x"}
#: Folder names of the runs' perf results, newest layout first (``results/``; the collection's
#: older runs wrote ``inference-perf-data/``).
PERF_DIRS = ("results", "inference-perf-data")

_ID = re.compile(r"^(\d+)-")
_KV_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_CPU_BYTES = re.compile(r"['\"]cpu_bytes_to_use['\"]\s*:\s*([\d.eE+]+)")
_TOTAL_MEM = re.compile(r"total_gpu_memory\s*\(\s*([\d.]+)\s*GiB\s*\)")
_ARGS = re.compile(r"non-default args:\s*(\{.*\})\s*$")
_VERSION = re.compile(r"vLLM API server version\s+v?(\d+\.\d+(?:\.\d+)?)")
_PAIR = re.compile(r"['\"](\w+)['\"]\s*:\s*('[^']*'|\"[^\"]*\"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|True|False|None)"
                   r"(?=\s*[,}])")


class ManifestError(KvplanError):
    """A manifest or server log kvplan cannot read (names the file and field)."""


@dataclass
class ServerFacts:
    """What the manifest and the server log say about one run (None: not said)."""

    hardware: Optional[str] = None            # a catalog name
    data_parallel_size: Optional[int] = None  # vLLM's --data-parallel-size, as the log records it
    replicas: Optional[int] = None            # the manifest's dp: independent servers (``_apply_manifest``)
    weights: Optional[str] = None             # quantization.weights ("fp8") when not 16-bit
    gpu_memory_utilization: Optional[float] = None
    max_num_batched_tokens: Optional[int] = None
    stream_interval: Optional[int] = None     # --stream-interval as launched (engine.stream_interval)
    cpu_offload: Optional[bool] = None        # the manifest's cpu_offload (None: not said)
    cpu_offload_gb: Optional[float] = None    # 0: offload off; None: size not recorded
    kv_cache_tokens: Optional[int] = None     # vLLM's GPU KV pool, per engine core (DP rank)
    gpu_memory_gib: Optional[float] = None
    kv_cache_dtype: Optional[str] = None      # "fp8" where the server was launched so
    prefix_caching: Optional[bool] = None     # --[no-]enable-prefix-caching as launched
    enforce_eager: Optional[bool] = None      # --enforce-eager as launched
    engine_version: Optional[str] = None      # "vLLM API server version X" at start-up
    launch_args: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def run_id(folder: Path) -> Optional[int]:
    """The id a ``<id>-<slug>`` run folder carries, else None."""
    m = _ID.match(folder.name)
    return int(m.group(1)) if m else None


def find_manifest_entry(folder: Path) -> tuple[Optional[dict], Optional[Path]]:
    """(the manifest entry of ``folder``, the manifest's path), or (None, None) when no
    ``experiments.json`` beside the run lists its id."""
    rid = run_id(folder)
    if rid is None:
        return None, None
    path = folder.resolve().parent / MANIFEST_NAME
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from None
    entries = data.get("experiments", data) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ManifestError(f"{path}: expected a list of experiment entries")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("id") == rid:
            return entry, path
    return None, path


def perf_dir(folder: Path) -> Path:
    """The run's results folder (``results/``, else the older ``inference-perf-data/``)."""
    for name in PERF_DIRS:
        if (folder / name).is_dir():
            return folder / name
    return folder / PERF_DIRS[0]


def server_facts(folder: Path) -> ServerFacts:
    """The manifest entry's and ``vllm.log``'s facts about the run in ``folder``; the log wins
    where both say (it is what the server printed)."""
    facts = ServerFacts()
    entry, path = find_manifest_entry(folder)
    if entry is not None and path is not None:
        _apply_manifest(facts, entry, path)
    log = folder / "vllm.log"
    if log.is_file():
        _apply_log(facts, log)
    if facts.data_parallel_size is not None and facts.replicas is not None:
        facts.notes.append(f"vllm.log: --data-parallel-size {facts.data_parallel_size} (one server "
                           f"with data-parallel ranks), not the manifest's {facts.replicas} servers")
        facts.replicas = None
    elif facts.replicas is not None and facts.replicas > 1:
        facts.notes.append(f"manifest dp {facts.replicas}: {facts.replicas} servers behind a round-robin "
                           f"router (parallel.num_replicas), as the collection's own evaluators replay it")
    return facts


def _apply_manifest(facts: ServerFacts, entry: dict, path: Path) -> None:
    where = f"{path} (id {entry.get('id')})"
    hw = entry.get("hw")
    if hw is not None:
        key = str(hw).strip().lower().replace(" ", "-").replace("_", "-")
        if key not in MANIFEST_HARDWARE:
            raise ManifestError(f"{where}: hw {hw!r} is not a GPU kvplan knows "
                                f"({', '.join(sorted({k.upper() for k in MANIFEST_HARDWARE}))})")
        facts.hardware = MANIFEST_HARDWARE[key]
    # The manifest's dp counts servers, not vLLM's data-parallel ranks: the collection's own
    # evaluators replay it as independent instances behind a round-robin router (BLIS
    # --num-instances, Vidur --cluster_config_num_replicas with round_robin, LLMServingSim
    # num_instances: experiment/adapters in inference-sim/sim-to-real-accuracy-validation), and its
    # Mixtral-8x7B TP 2 x dp 2 run measures as two TP 2 servers at half the load each (E2E within
    # 5%), where vLLM's DP, whose experts shard over DP x TP = 4 GPUs, would decode 40% faster
    # (benchmarks/public_vllm_runs.py). A log that records --data-parallel-size wins
    # (``server_facts``).
    dp = entry.get("dp")
    if dp is not None:
        facts.replicas = _whole(dp, where, "dp")
    precision = entry.get("precision")
    if precision is not None:
        p = str(precision).strip().lower()
        if p == "fp8":
            facts.weights = "fp8"
        elif p not in ("fp16", "bf16", "float16", "bfloat16", "auto"):
            raise ManifestError(f"{where}: precision {precision!r}: expected FP16, BF16 or FP8")
    mem = entry.get("gpu_mem")
    if mem is not None:
        if isinstance(mem, bool) or not isinstance(mem, (int, float)) or not 0 < mem <= 1:
            raise ManifestError(f"{where}: gpu_mem {mem!r}: expected a fraction in (0, 1]")
        facts.gpu_memory_utilization = float(mem)
    mbt = entry.get("mbt")
    if mbt is not None:
        facts.max_num_batched_tokens = _whole(mbt, where, "mbt")
    offload = entry.get("cpu_offload")
    if offload is not None:
        if not isinstance(offload, bool):
            raise ManifestError(f"{where}: cpu_offload {offload!r}: expected true or false")
        facts.cpu_offload = offload
        facts.cpu_offload_gb = None if offload else 0.0
        if offload:
            facts.notes.append(f"{path.name}: CPU KV offload on")
    if entry.get("safe", "safe") != "safe":
        facts.notes.append(f"{path.name} marks this run {entry.get('safe')!r}, not 'safe' (the "
                           f"collection's own loader leaves such runs out by default)")
    said = {k: entry[k] for k in ("hw", "dp", "precision", "gpu_mem", "mbt", "cpu_offload") if k in entry}
    facts.notes.append(f"{path.name} entry {entry.get('id')}: " + ", ".join(f"{k} {v}" for k, v in said.items()))


def _apply_log(facts: ServerFacts, log: Path) -> None:
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        raise ManifestError(f"{log}: cannot read ({exc})") from None
    tokens = [int(m.group(1).replace(",", "")) for m in _KV_TOKENS.finditer(text)]
    if tokens:
        facts.kv_cache_tokens = min(tokens)  # one line per engine core; the smallest binds
    version = _VERSION.search(text)
    if version:
        facts.engine_version = version.group(1)
    cpu = _CPU_BYTES.search(text)
    if cpu:
        facts.cpu_offload_gb = float(cpu.group(1)) / 2 ** 30
    mem = _TOTAL_MEM.search(text)
    if mem:
        facts.gpu_memory_gib = float(mem.group(1))
        if facts.hardware == "a100-80gb" and facts.gpu_memory_gib < 60:
            facts.hardware = "a100-40gb"
            facts.notes.append(f"vllm.log: total_gpu_memory {facts.gpu_memory_gib:g} GiB: the 40 GB A100")
    for line in text.splitlines():
        m = _ARGS.search(line)
        if m:
            facts.launch_args = launch_args(m.group(1))
            _apply_args(facts, facts.launch_args)
            break


def launch_args(text: str) -> dict[str, Any]:
    """vLLM's ``non-default args: {...}`` as a dict. The whole literal when Python can read it
    back; else (a value printed as ``KVTransferConfig(...)``, say) the plain ``'key': value``
    pairs in it, which are the ones kvplan reads."""
    try:
        args = ast.literal_eval(text)
        if isinstance(args, dict):
            return args
    except (ValueError, SyntaxError):
        pass
    out: dict[str, Any] = {}
    for key, raw in _PAIR.findall(text):
        try:
            out.setdefault(key, ast.literal_eval(raw))
        except (ValueError, SyntaxError):
            continue
    return out


def _apply_args(facts: ServerFacts, args: dict) -> None:
    """vLLM's ``non-default args`` as ServerFacts (what the server was launched with)."""
    dp = args.get("data_parallel_size")
    if isinstance(dp, int) and dp >= 1:
        facts.data_parallel_size = dp
    util = args.get("gpu_memory_utilization")
    if isinstance(util, (int, float)) and 0 < util <= 1:
        facts.gpu_memory_utilization = float(util)
    quant = args.get("quantization")
    if isinstance(quant, str) and quant.lower() == "fp8":
        facts.weights = "fp8"
    mbt = args.get("max_num_batched_tokens")
    if isinstance(mbt, int) and mbt > 0:
        facts.max_num_batched_tokens = mbt
    interval = args.get("stream_interval")
    if isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1:
        facts.stream_interval = interval
    kv = args.get("kv_cache_dtype")
    if isinstance(kv, str) and kv.lower().startswith("fp8"):
        facts.kv_cache_dtype = "fp8"
    caching = args.get("enable_prefix_caching")
    if isinstance(caching, bool):
        facts.prefix_caching = caching
    eager = args.get("enforce_eager")
    if isinstance(eager, bool):
        facts.enforce_eager = eager
    facts.notes.append("vllm.log non-default args: " + ", ".join(sorted(str(k) for k in args)))


def _whole(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 1 or int(value) != value:
        raise ManifestError(f"{where}: {name} {value!r}: expected a whole number >= 1")
    return int(value)
