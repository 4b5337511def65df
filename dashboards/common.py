"""What every dashboard page shares: scenario knobs with an error slot beside each field, a
result cache with progress, and the report download.

Why an error slot per field: a ConfigError names its dotted key (``kv_cache.block_size: ...``),
so the message can be put right under the widget that set that key instead of a traceback or
a banner far from the cause. Why our own cache rather than ``st.cache_data``: a miss must show
a progress bar while a hit returns at once, and the cache is shared by every session.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, cast

import streamlit as st

from sim.catalog import list_hardware, list_models
from sim.catalog.engines import ENGINE_NAMES, VLLM_CUDAGRAPH_MODES
from sim.config import (ALLOCATORS, DEFAULTS, KV_DTYPES, POLICIES, PREEMPTIONS, QUEUE_POLICIES,
                        RESERVES, ROUTERS, WEIGHT_QUANT, build_config, parse_override)
from sim.errors import KvplanError
from sim.scenario import MOE_ACTIVATIONS, MOE_KERNELS, MOE_ROUTINGS, QUANT_SCOPES

if TYPE_CHECKING:
    from analysis.slo import SLO

Progress = Callable[[float, Optional[str]], None]


# ---------------------------------------------------------------- fields with error slots

class Fields:
    """Widgets keyed by dotted config key, each followed by an empty slot for its error."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.values: dict[str, Any] = {}
        self.slots: dict[str, Any] = {}
        self.errors: list[str] = []
        #: Where the chosen step-cost model is described (``cost_model_field``), else None.
        self.cost_note: Optional[Any] = None

    def add(self, key: str, widget: Callable, *args, config_key: bool = True, **kw) -> Any:
        value = widget(*args, key=f"{self.prefix}{key}", **kw)
        self.slots[key] = st.empty()
        if config_key:
            self.values[key] = value
        return value

    def slot(self, key: str) -> None:
        """An error slot for a key that has no widget of its own (e.g. a whole section)."""
        self.slots[key] = st.empty()

    def error(self, message: str, key: Optional[str] = None) -> None:
        """Show ``message`` beside the field it names (``key`` or the message's first word)."""
        self.errors.append(message)
        target = key or self._field_for(message)
        slot = self.slots.get(target) if target else None
        (slot or st).error(message, icon=":material/error:")

    def config(self) -> dict:
        """The fields as one nested mapping (so a section such as ``workload.arrival`` is
        merged as a whole, the way a YAML file would give it)."""
        out: dict = {}
        for dotted, value in self.values.items():
            node = out
            *parents, leaf = dotted.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return out

    def _field_for(self, message: str) -> Optional[str]:
        head = message.split(":", 1)[0].strip().removeprefix("--").split(" ")[-1]
        if head in self.slots:
            return head
        prefixes = [k for k in self.slots if head.startswith(k) or k.startswith(head)]
        if prefixes:
            return max(prefixes, key=len)
        if "needs" in message and "GB" in message and "model" in self.slots:  # DoesNotFitError
            return "model"
        return "overrides" if "overrides" in self.slots else None


PROFILE_DIR = Path(__file__).resolve().parents[1] / "calibration" / "profiles"


def calibration_profiles() -> list[str]:
    """Profile files shipped in (or added to) calibration/profiles/, as paths to pass on."""
    return sorted(str(p) for p in PROFILE_DIR.glob("*.json")) if PROFILE_DIR.is_dir() else []


# ---------------------------------------------------------------- step-cost model menu

COST_AUTO = "auto (measured tables where they exist)"
#: The step-cost menu's fixed options and the ``cost_model.source`` each sets; the menu then
#: lists the profiles in calibration/profiles/ (``cost_model.source: profile`` and the file).
COST_SOURCES = {COST_AUTO: "auto", "operator tables": "operator_tables", "roofline": "roofline"}
#: The menu's widget key (its name from when the menu listed profiles only).
COST_KEY = "cost_model.profile"
COST_HELP = ("auto: the GPU's kernel timings measured under vLLM (AIConfigurator's operator "
             "tables) where they cover the GPU, model and parallelism, else the roofline; "
             "operator tables: only the tables (an error where the GPU has none); roofline: "
             "from the GPU and model catalogs; a profile: measured on real hardware by "
             "`kvplan calibrate` (calibration/profiles/). The pricer chosen, and its known "
             "error, are described under the menu.")


def cost_model_field(f: Fields) -> str:
    """The step-cost menu: sets ``cost_model.source`` (and ``cost_model.profile`` for a profile),
    with an error slot and, below it, a note that ``build`` fills with the pricer it resolved."""
    chosen = f.add(COST_KEY, st.selectbox, "Step-cost model", list(COST_SOURCES) + calibration_profiles(),
                   config_key=False, help=COST_HELP)
    f.values["cost_model.source"] = COST_SOURCES.get(chosen, "profile")
    f.values["cost_model.profile"] = None if chosen in COST_SOURCES else chosen
    f.slots["cost_model.source"] = f.slots[COST_KEY]  # a message naming the source goes here too
    f.cost_note = st.empty()
    return chosen


def _pct(value: Any, fraction: bool = False) -> Optional[str]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return f"{value * 100 if fraction else value:.1f}%"


def _latency_errors(errs: Any) -> str:
    """``{"mean_tpot_ms": 0.021, ...}`` (fractions) as ``TPOT 2.1%, TTFT 22.3%, E2E 2.2%``."""
    names = (("tpot", "TPOT"), ("ttft", "TTFT"), ("e2el", "E2E"))
    if not isinstance(errs, dict):
        return ""
    parts = []
    for key, label in names:
        value = next((v for k, v in errs.items() if key in k), None)
        if _pct(value, True):
            parts.append(f"{label} {_pct(value, True)}")
    return ", ".join(parts)


def known_error_text(known: Any, source: str) -> str:
    """A pricer's ``known_error()`` in one or two readable sentences."""
    if not known:
        if source == "roofline":
            return ("Known error: none for constants given by hand; the fitted ones' operator "
                    "error is in docs/cost_model.md.")
        return "Known error: not recorded; `kvplan validate` measures it against real runs."
    if not isinstance(known, dict):
        return f"Known error: {known}"
    if "gemm_mean_abs_pct" in known or "decode_attention_mean_abs_pct" in known:  # operator tables
        gpu = known.get("gpu", "this GPU")
        parts = [f"{label} {_pct(known.get(f'{key}_mean_abs_pct'))} mean / "
                 f"{_pct(known.get(f'{key}_p90_abs_pct'))} p90"
                 for key, label in (("gemm", "GEMMs"), ("decode_attention", "decode attention"))
                 if _pct(known.get(f"{key}_mean_abs_pct"))]
        text = f"Known error: interpolating {gpu}'s tables, {'; '.join(parts)} (leave-one-point-out)."
        step = known.get("step_vs_real")
        whole = _latency_errors(step) if isinstance(step, dict) else ""
        if whole:
            got = cast(dict, step)  # whole is set only for a dict
            runs = f" ({got['runs']})" if got.get("runs") else ""
            text += f" Whole step against real runs{runs}: mean error {whole}."
        else:
            text += f" Whole step against real runs: not measured on {gpu} yet."
        return text
    if "operator_mape_pct" in known:  # the roofline's constants against measured operators
        where = known.get("measured_on", "?")
        ops = ", ".join(f"{name.replace('_', ' ')} {_pct(v)}" for name, v in known["operator_mape_pct"].items()
                        if _pct(v))
        text = (f"Known error: the roofline's operators against {where}'s measured timings, MAPE "
                f"{ops} (docs/cost_model.md).")
        return text + (f" {known['note'][0].upper()}{known['note'][1:]}." if known.get("note") else "")
    if "heldout_mape" in known:  # a profile fitted to real runs
        held = known.get("held_out_by", "model")
        text = (f"Known error: {_pct(known['heldout_mape'], True)} mean, "
                f"{_pct(known.get('heldout_p90_ape'), True) or '?'} p90 against real runs, "
                f"each {held} held out of the fit")
        per = _latency_errors(known.get("heldout"))
        return text + (f" ({per})." if per else ".")
    parts = []  # another pricer's dict: its percentages as they are named
    for key, value in known.items():
        shown = _pct(value) if key.endswith("_pct") else _pct(value, True) if "ape" in key else None
        if shown:
            parts.append(f"{key.removesuffix('_pct').replace('_', ' ')} {shown}")
    return "Known error: " + (", ".join(parts) if parts else json.dumps(known, default=str))


def _is_cost_model_error(exc: Exception) -> bool:
    from sim.pricing.operator_tables import TablesNotCovering

    return isinstance(exc, TablesNotCovering) or str(exc).startswith("cost_model")


def _fallback_reason(cfg: dict) -> Optional[str]:
    """Why ``auto`` priced with the roofline: the error an explicit ``operator_tables`` gives."""
    from sim.api import resolve_deployment

    trial = json.loads(json.dumps(cfg, default=str))
    trial.setdefault("cost_model", {})["source"] = "operator_tables"
    try:
        resolve_deployment(trial)
    except KvplanError as exc:
        return re.sub(r"^cost_model\.\w+( operator_tables)?: ", "", str(exc))
    return None


def describe_cost_model(f: Fields, cfg: dict) -> bool:
    """Resolve ``cfg``'s pricer and describe it under ``f``'s step-cost menu: what priced the
    steps, why ``auto`` fell back to the roofline, the known error and warnings. False after
    showing a cost-model error under the menu; an error elsewhere (a model that does not fit)
    is left to the page, which shows it where it always has."""
    from sim.api import resolve_deployment

    note: Any = f.cost_note  # set: callers describe only under a cost_model_field
    try:
        dep = resolve_deployment(cfg)
    except KvplanError as exc:
        note.empty()
        if _is_cost_model_error(exc):
            f.error(str(exc), COST_KEY)
            return False
        return True
    pricer, source = dep.cost_model, dep.cost_model_source
    lines = [f"Priced by: {pricer.describe()}"]
    cm = cfg.get("cost_model") or {}
    if cm.get("source", "auto") == "auto" and source == "roofline":
        why = _fallback_reason(cfg)
        lines.append("auto fell back to the roofline" + (f": {why}" if why else "") + ".")
    lines.append(known_error_text(pricer.known_error(), source))
    lines += [f"Warning: {w}" for w in pricer.warnings()]
    with note.container():
        for line in lines:
            st.caption(line)
    return True


def scenario_fields(f: Fields, *, num_requests: int = 300, rate: float = 8.0,
                    sections: tuple[str, ...] = ("deployment", "kv", "scheduler", "speculative",
                                                 "workload", "slo", "overrides"),
                    expanded: tuple[str, ...] = ("deployment",), load: bool = True,
                    choose: Optional[dict[str, Any]] = None) -> None:
    """Every simulator knob, grouped as a serving engineer thinks of them, with units.
    ``load=False`` leaves out the request count and rate (a capacity search sets them);
    ``choose`` picks other initial options for select boxes ({dotted key: option})."""
    d = DEFAULTS
    choose = choose or {}

    def pick(key: str, options: list, default: Any = None) -> int:
        want = choose.get(key, default)
        return options.index(want) if want in options else 0

    if "deployment" in sections:
        with st.expander("Model and hardware", expanded="deployment" in expanded):
            models = [m.name for m in list_models()]
            hws = [h.name for h in list_hardware()]
            f.add("model", st.selectbox, "Model", models, index=models.index(d["model"]))
            f.add("hardware", st.selectbox, "GPU", hws, index=hws.index(d["hardware"]))
            f.add("dtype", st.selectbox, "Activation dtype", ["float16", "bfloat16"])
            f.add("quantization.weights", st.selectbox, "Weight quantisation", list(WEIGHT_QUANT))
            f.add("quantization.moe_activations", st.selectbox, "MoE activations (MXFP4 experts)",
                  list(MOE_ACTIVATIONS),
                  help="auto: the engine's default on the GPU (Blackwell: vLLM bf16, SGLang mxfp8; "
                       "elsewhere bf16); mxfp8 needs Blackwell and mxfp4 weights")
            f.add("quantization.moe_kernel", st.selectbox, "MoE kernel (MXFP4 experts)",
                  list(MOE_KERNELS),
                  help="auto: the engine's default (Hopper: OpenAI's Triton kernels); marlin: "
                       "VLLM_MXFP4_USE_MARLIN=1 (slower on long prefills); needs mxfp4 or int4 weights")
            f.add("quantization.scope", st.selectbox, "Layers the checkpoint quantises",
                  list(QUANT_SCOPES),
                  help="auto: NVFP4 MoE checkpoints keep attention BF16 (NVIDIA's exports), MXFP4 and "
                       "INT4 MoEs quantise the routed experts only, the rest every layer; "
                       "mlp_and_o_proj: DeepSeek-R1-0528-FP4-V2; needs quantised weights")
            f.add("parallel.tensor_parallel_size", st.selectbox, "Tensor parallel (GPUs per replica)", [1, 2, 4, 8])
            f.add("parallel.pipeline_parallel_size", st.selectbox, "Pipeline parallel (stages)", [1, 2, 4, 8])
            f.add("parallel.num_replicas", st.number_input, "Replicas", min_value=1, max_value=64, value=1)
            f.add("parallel.router", st.selectbox, "Router (between replicas)", list(ROUTERS))
            f.add("engine.name", st.selectbox, "Serving engine", list(ENGINE_NAMES),
                  index=pick("engine.name", list(ENGINE_NAMES), "vllm"),
                  help="vllm: vLLM V1 (chunked prefill, paged blocks); sglang: SGLang 0.5 "
                       "(prefill-first extend batches, radix cache, mem_fraction_static); "
                       "docs/engines.md")
            f.add("engine.enforce_eager", st.checkbox, "Eager mode (vLLM --enforce-eager)", value=False,
                  help="No CUDA graphs: every forward waits for the host to issue each layer's ops "
                       "(about 0.8 ms a dense layer). SGLang's switch is sglang.disable_cuda_graph "
                       "(in the overrides)")
            f.add("engine.cudagraph_mode", st.selectbox, "CUDA-graph mode (vLLM)", list(VLLM_CUDAGRAPH_MODES),
                  help="auto: the release's FULL_AND_PIECEWISE (decodes one full graph, mixed steps "
                       "piecewise); PIECEWISE, FULL_DECODE_ONLY (mixed steps outside graphs), FULL, "
                       "NONE (no graphs, still compiled). vLLM only")
            cost_model_field(f)
            f.add("cost_model.moe_routing", st.selectbox, "MoE routing (operator tables)",
                  list(MOE_ROUTINGS),
                  help="How tokens spread over the experts: uniform (a random router), balanced "
                       "(every expert the same load), power_law_* (a skewed router, as "
                       "AIConfigurator measures); docs/cost_model.md")
    if "kv" in sections:
        with st.expander("KV cache", expanded="kv" in expanded):
            f.add("kv_cache.allocator", st.selectbox, "Allocator", list(ALLOCATORS),
                  index=pick("kv_cache.allocator", list(ALLOCATORS)),
                  help="paged: vLLM's blocks; contiguous: one region per request (Orca-style)")
            f.add("kv_cache.block_size", st.selectbox, "Block size (tokens)", [8, 16, 32, 64, 128], index=1)
            f.add("kv_cache.reserve", st.selectbox, "Contiguous reservation", list(RESERVES),
                  index=pick("kv_cache.reserve", list(RESERVES)),
                  help="max: max_model_len; pow2: next power of two; oracle: the true final length")
            f.add("kv_cache.prefix_caching", st.selectbox, "Prefix caching", ["auto", True, False],
                  format_func=lambda v: {"auto": "engine default", True: "on", False: "off"}[v],
                  help="engine default: on for vLLM's V1 engine (the paged allocator, chunked "
                       "scheduler) and SGLang's radix cache, off for the other schedulers and "
                       "the contiguous allocator")
            f.add("kv_cache.gpu_memory_utilization", st.slider, "GPU memory utilisation", 0.5, 0.98,
                  float(d["kv_cache"]["gpu_memory_utilization"]), 0.01)
            f.add("kv_cache.max_model_len", st.number_input, "max_model_len (tokens)", min_value=256,
                  max_value=131072, value=d["kv_cache"]["max_model_len"], step=256)
            f.add("kv_cache.dtype", st.selectbox, "KV cache dtype", list(KV_DTYPES))
    if "scheduler" in sections:
        with st.expander("Scheduler", expanded="scheduler" in expanded):
            f.add("scheduler.policy", st.selectbox, "Policy", list(POLICIES),
                  index=pick("scheduler.policy", list(POLICIES), "chunked"),
                  help="static: HF-style batches; orca: iteration-level; vllm_v0: prefill first; "
                       "chunked: Sarathi-Serve / vLLM v1 token budget")
            f.add("scheduler.max_num_seqs", st.number_input, "max_num_seqs (empty = the engine's default)",
                  min_value=1, max_value=4096, value=d["scheduler"]["max_num_seqs"],
                  help="Empty: vLLM's default for the GPU (1024 on a GPU with >= 70 GiB that is "
                       "not an A100, else 256; engine.version)")
            mbt = f.add("scheduler.max_num_batched_tokens", st.number_input,
                        "max_num_batched_tokens (0 = auto)", min_value=0, max_value=1 << 20, value=0, step=256)
            if not mbt:
                f.values["scheduler.max_num_batched_tokens"] = None
            f.add("scheduler.preemption", st.selectbox, "Preemption", list(PREEMPTIONS))
            f.add("scheduler.queue_policy", st.selectbox, "Queue policy", list(QUEUE_POLICIES))
    if "speculative" in sections:
        with st.expander("Speculative decoding", expanded="speculative" in expanded):
            f.add("speculative.num_tokens", st.number_input, "Draft tokens per step (0 = off)",
                  min_value=0, max_value=16, value=0)
            f.add("speculative.acceptance_rate", st.slider, "Acceptance rate", 0.0, 1.0, 0.7, 0.05)
    if "workload" in sections:
        with st.expander("Workload", expanded="workload" in expanded):
            if load:
                f.add("workload.num_requests", st.number_input, "Requests", min_value=10,
                      max_value=100000, value=num_requests, step=50)
                f.add("workload.arrival.rate", st.number_input, "Arrival rate (req/s)", min_value=0.01,
                      max_value=10000.0, value=float(rate), step=1.0)
            f.add("workload.arrival.process", st.selectbox, "Arrival process", ["poisson", "gamma", "constant"])
            f.add("workload.arrival.cv", st.number_input, "Burstiness (gamma CV)", min_value=0.0,
                  max_value=10.0, value=1.0, step=0.25)
            wl = d["workload"]
            f.add("workload.input_len.mean", st.number_input, "Mean prompt (tokens)", min_value=1,
                  max_value=131072, value=wl["input_len"]["mean"])
            f.add("workload.input_len.max", st.number_input, "Max prompt (tokens)", min_value=1,
                  max_value=131072, value=wl["input_len"]["max"])
            f.add("workload.output_len.mean", st.number_input, "Mean output (tokens)", min_value=1,
                  max_value=131072, value=wl["output_len"]["mean"])
            f.add("workload.output_len.max", st.number_input, "Max output (tokens)", min_value=1,
                  max_value=131072, value=wl["output_len"]["max"])
            f.add("workload.prompt_text", st.selectbox, "Prompt text", ["natural", "synthetic"],
                  help="synthetic: prompts decoded from made-up token ids, as benchmark clients' random "
                       "datasets send; the API server tokenises them 2.2x slower per token")
            f.add("seed", st.number_input, "Seed", min_value=0, max_value=2**31 - 1, value=0)
    if "slo" in sections:
        with st.expander("SLO (per request, for goodput)", expanded="slo" in expanded):
            ttft = f.add("slo.ttft_ms", st.number_input, "TTFT bound (ms, 0 = none)", min_value=0.0, value=0.0, step=50.0)
            tpot = f.add("slo.tpot_ms", st.number_input, "TPOT bound (ms, 0 = none)", min_value=0.0, value=0.0, step=5.0)
            f.values["slo.ttft_ms"], f.values["slo.tpot_ms"] = ttft or None, tpot or None
    if "overrides" in sections:
        f.add("overrides", st.text_area, "Other settings (key=value per line, as --set)", value="",
              placeholder="kv_cache.swap_space_gb=8\nworkload.input_len.cv=1.2", config_key=False)


def sidebar_fields(prefix: str, header: str = "Scenario", **kw) -> Fields:
    """A page's scenario knobs in the sidebar (``kw`` as for ``scenario_fields``)."""
    f = Fields(prefix)
    with st.sidebar:
        st.header(header)
        scenario_fields(f, **kw)
    return f


def build(*groups: Fields, extra: tuple[str, ...] = ()) -> Optional[dict]:
    """The validated config of these field groups (later groups win), or None after showing
    the error beside the field it names."""
    merged: dict = {}
    free: list[str] = []
    for f in groups:
        merged = _merge(merged, f.config())
        lines = [ln.strip() for ln in (st.session_state.get(f"{f.prefix}overrides") or "").splitlines()]
        for item in (ln for ln in lines if ln and not ln.startswith("#")):
            try:
                parse_override(item)
            except KvplanError as exc:
                f.error(str(exc), "overrides")
                return None
            free.append(item)
    try:
        cfg = build_config(merged, list(extra) + free)
    except KvplanError as exc:
        owner = next((f for f in reversed(groups) if f._field_for(str(exc)) not in (None, "overrides")),
                     groups[-1])
        owner.error(str(exc))
        return None
    for f in groups:
        if f.cost_note is not None and not describe_cost_model(f, cfg):
            return None
    return cfg


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def slo_field(f: Fields, text: str) -> Optional["SLO"]:
    """The SLO typed in the ``slo`` field, or None with the error shown beside that field."""
    from analysis.slo import parse_slo

    try:
        return parse_slo(text)
    except KvplanError as exc:
        f.error(str(exc), "slo")
        return None


def parse_numbers(text: str, what: str) -> list[float]:
    """``"2, 4, 8"`` -> [2.0, 4.0, 8.0]; a ValueError names the bad item."""
    out = []
    for part in filter(None, (p.strip() for p in text.replace(";", ",").split(","))):
        try:
            v = float(part)
        except ValueError:
            raise ValueError(f"{what}: {part!r} is not a number") from None
        if not v > 0:
            raise ValueError(f"{what}: {part} must be > 0")
        out.append(v)
    if not out:
        raise ValueError(f"{what}: give at least one positive number")
    return out


# ---------------------------------------------------------------- cache with progress

class _LRU:
    def __init__(self, size: int) -> None:
        self.size, self.lock = size, threading.Lock()
        self.data: OrderedDict[str, Any] = OrderedDict()  # key -> result, least recently used first

    def get(self, key: str) -> Any:
        with self.lock:
            if key in self.data:
                self.data.move_to_end(key)
                return self.data[key]
        return None

    def put(self, key: str, value: Any) -> None:
        with self.lock:
            self.data[key] = value
            self.data.move_to_end(key)
            while len(self.data) > self.size:
                self.data.popitem(last=False)


@st.cache_resource
def _store() -> _LRU:
    return _LRU(128)


def cached(kind: str, params: dict, compute: Callable[[Progress], Any], label: str) -> Any:
    """``compute(progress)`` once per distinct ``params``; later calls return at once."""
    key = kind + ":" + json.dumps(params, sort_keys=True, default=str)
    store = _store()
    hit = store.get(key)
    if hit is not None:
        return hit
    bar = st.progress(0.0, text=label)

    def progress(fraction: float, text: Optional[str] = None) -> None:
        bar.progress(max(0.0, min(fraction, 1.0)), text=text or label)

    try:
        value = compute(progress)
    finally:
        bar.empty()
    store.put(key, value)
    return value


# ---------------------------------------------------------------- report download

def report_downloads(records: list[dict], name: str, title: str) -> None:
    """HTML and Markdown report buttons; the report is rendered only when clicked."""
    from analysis.report import render_html, render_markdown

    c1, c2 = st.columns(2)
    c1.download_button("Download report (HTML)", data=lambda: render_html(records, title),
                       file_name=f"{name}.html", mime="text/html", key=f"dl-html-{name}",
                       on_click="ignore", icon=":material/download:")
    c2.download_button("Download report (Markdown)", data=lambda: render_markdown(records, title),
                       file_name=f"{name}.md", mime="text/markdown", key=f"dl-md-{name}",
                       on_click="ignore", icon=":material/description:")


def show_notes(notes: list[str]) -> None:
    for n in notes:
        st.warning(n, icon=":material/info:")
