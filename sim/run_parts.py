"""The parts a run is built from, out of a ``Scenario``: the deployment (model, GPU, memory
plan, step pricer), each replica's engines (KV allocator, scheduler, speculative sampler), the
router's settings, the workload, and the summary's ``scenario`` and ``cost_model`` blocks.

Shared by every simulator front end (``sim.api.simulate``, the P/D simulator in
``sim.disaggregation``, the autoscaled fleet in ``analysis.autoscale``), which import it at
top level; it imports none of them, so they form no import cycle (tests/test_layering.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, TypeGuard, Union, cast

from sim import config as config_mod
from sim.catalog.frontends import FrontEnd, get_frontend
from sim.errors import ConfigError
from sim.policies.kv import make_allocator
from sim.policies.request import Request
from sim.policies.schedulers import SCHEDULERS, make_scheduler
from sim.policies.schedulers.base import Scheduler, step_token_budget
from sim.policies.speculative import AcceptanceSampler
from sim.scenario import Scenario, offload_tiers, swap_space_blocks

if TYPE_CHECKING:
    from sim.catalog.hardware import HardwareSpec
    from sim.catalog.models import ModelSpec
    from sim.memory_plan import MemoryPlan
    from sim.policies.kv import OffloadTiers
    from sim.pricing.base import StepPricer
    from sim.workload.sessions import SessionLinks


@dataclass
class Deployment:
    """What one replica is: the resolved model, hardware, memory plan and step pricer."""

    model: ModelSpec
    hardware: HardwareSpec
    memory: MemoryPlan
    cost_model: StepPricer  # prices a StepShape: roofline, operator tables or a profile
    num_gpus_per_replica: int
    #: Which source priced the steps (``cost_model.source`` resolved: never ``auto``).
    cost_model_source: str = "roofline"
    #: Under a profile fitted to real runs: the pricer it adjusts (operator_tables, roofline).
    cost_model_base: Optional[str] = None
    #: Seconds from a request's arrival to the scheduler (``cost_model.request_overhead_ms``
    #: plus a real-run profile's): work outside the engine, added to TTFT and E2E.
    request_overhead_s: float = 0.0
    #: The API server in front of the engine (``engine.frontend``; ``sim.catalog.frontends``).
    frontend: FrontEnd = field(default_factory=lambda: get_frontend("none"))


def resolve_deployment(scenario: Union[Scenario, dict]) -> Deployment:
    """Catalog lookups, memory plan and cost model for the scenario's model on its hardware
    (a config dict is accepted too, e.g. a saved result's config.yaml)."""
    from sim.catalog.hardware import get_hardware
    from sim.catalog.models import get_model
    from sim.memory_plan import plan_memory, split_state_pool

    sc = as_scenario(scenario)
    model = sglang_state_model(sc, get_model(sc.model))
    hw = get_hardware(sc.hardware)
    par, kv, sched = sc.parallel, sc.kv_cache, sc.scheduler
    weight_dtype = sc.quantization.weight_dtype
    budget = step_token_budget(SCHEDULERS[sched.policy].chunked_prefill,
                               sc.max_num_batched_tokens, kv.max_model_len)
    utilization, reserve = kv.gpu_memory_utilization, None
    if sc.engine.name == "sglang":
        utilization, reserve = sglang_memory_fraction(sc, hw), 0.0
    memory = plan_memory(
        model, sc.hardware, sc.dtype, utilization, activation_reserve=reserve,
        tensor_parallel_size=par.tensor_parallel_size,
        pipeline_parallel_size=par.pipeline_parallel_size,
        kv_cache_dtype=kv.dtype, weight_dtype=weight_dtype,
        max_num_batched_tokens=budget, max_num_seqs=sc.max_num_seqs,
        expert_parallel_size=par.expert_shards,
        expert_tensor_parallel_size=par.expert_tensor_shards,
        quant_scope=sc.quantization.scope,
    )
    if sc.quantization.scope == "experts_only" and not model.is_moe:
        raise ConfigError(f"quantization.scope: experts_only quantises a mixture of experts' "
                          f"routed experts; {model.name} has none")
    if par.enable_expert_parallel and not model.is_moe:
        raise ConfigError(f"parallel.enable_expert_parallel: {model.name} has no experts")
    if (par.expert_parallel_size or 1) > 1 and not model.is_moe:
        raise ConfigError(f"parallel.expert_parallel_size: {model.name} has no experts")
    if sc.engine.name == "sglang" and model.is_hybrid_linear:
        # SGLang keeps linear-attention states in a pool of their own (vLLM pages them from the
        # KV pool: ``build_replica_scheduler``), both sized from memory; a given block count
        # then fixes the KV tokens only (as SGLang's --max-total-tokens would).
        memory = split_state_pool(memory, sc.sglang.mamba_full_memory_ratio, sglang_state_slots(sc))
    if kv.num_gpu_blocks is not None:
        slots = kv.num_gpu_blocks * kv_page_tokens(sc, model, memory)
        memory = replace(memory, num_kv_slots=slots, kv_pool_bytes=float(slots * memory.kv_bytes_per_token))
    cost, source, base, overhead_ms = _make_cost_model(sc, model, weight_dtype)
    return Deployment(model, hw, memory, cost, par.gpus_per_replica, source, base, overhead_ms / 1000,
                      sc.front_end)


def sglang_state_model(sc: Scenario, model: "ModelSpec") -> "ModelSpec":
    """The model with SGLang's ``--mamba-ssm-dtype`` (``sglang.mamba_ssm_dtype``) as its
    recurrent-state dtype: the flag overrides the model config's (SGLang's
    ``mamba2_state_dtype`` reads ``SGLANG_MAMBA_SSM_DTYPE``, which the server sets from it, before
    the config). Unchanged for vLLM, ``auto``, or a model without linear attention."""
    from sim.catalog.models import SSM_DTYPE_BYTES

    dtype = sc.sglang.mamba_ssm_dtype if sc.engine.name == "sglang" else "auto"
    if dtype == "auto" or not model.is_hybrid_linear:
        return model
    return replace(model, linear_state_bytes=SSM_DTYPE_BYTES[dtype])


def sglang_state_slots(sc: Scenario) -> Optional[int]:
    """Request states one SGLang rank's pool holds when the server fixes their number, else None
    (the pool is then sized by ``mamba_full_memory_ratio``): ``sglang.max_mamba_cache_size``, or
    ``max_running_requests`` when the radix cache is off (no finished request's state is kept),
    each split over the DP-attention ranks (``handle_max_mamba_cache``'s first two branches)."""
    sg, dp = sc.sglang, max(sc.parallel.data_parallel_size, 1)
    if sg.max_mamba_cache_size is not None:
        return max(1, sg.max_mamba_cache_size // dp)
    given = sc.max_num_seqs_given
    if sg.disable_radix_cache and given is not None:
        return max(1, given // dp)
    return None


def sglang_memory_fraction(sc: Scenario, hw: "HardwareSpec") -> float:
    """SGLang's ``mem_fraction_static`` for the scenario: ``sglang.mem_fraction_static``, else
    SGLang's rule for the GPU (``sim.catalog.engines.sglang_mem_fraction_static``); DP attention
    is a data-parallel deployment of one replica."""
    from sim.catalog.engines import sglang_mem_fraction_static

    given = sc.sglang.mem_fraction_static
    if given is not None:
        return given
    par = sc.parallel
    return sglang_mem_fraction_static(hw, par.tensor_parallel_size, par.pipeline_parallel_size,
                                      speculative=sc.speculative.num_tokens > 0,
                                      dp_attention=par.data_parallel_size > 1)


def _make_cost_model(sc: Scenario, model: "ModelSpec", weight_dtype: Optional[str]):
    """The step pricer, its source name, the base pricer under a real-run profile (else None)
    and the request overhead in ms. ``cost_model.source`` ``auto``: the profile if one is set,
    else the operator tables when they cover this GPU, dtype and parallelism, else the roofline
    (silently: the summary's ``cost_model`` says which priced the steps). A profile fitted to
    real runs (``kvplan calibrate --real``) prices with its base pricer for this scenario's
    model and GPU, scaled, plus its overhead; ``cost_model.step_scale`` multiplies and
    ``cost_model.request_overhead_ms`` adds on top of whatever priced the steps."""
    from sim.pricing import ProfileError, load_profile
    from sim.pricing.adjusted import ScaledPricer

    cm = sc.cost_model
    scale, overhead_ms, base = cm.step_scale, cm.request_overhead_ms, None
    note = known = prov = None
    warn: list[str] = []
    if cm.source == "profile" or (cm.source == "auto" and cm.profile is not None):
        try:
            # source 'profile' without a profile is refused when the scenario is built
            prof = load_profile(cast(str, cm.profile))
        except ProfileError as exc:  # the message names the file and field
            raise ConfigError(f"cost_model.profile: {exc}") from None
        if prof.base is None:
            from sim.pricing import make_pricer

            pricer, source = make_pricer("profile", prof), "profile"
        else:
            base, source = prof.base, "profile"
            try:
                pricer = _base_pricer(sc, model, weight_dtype, prof.base)
            except ConfigError as exc:
                raise ConfigError(f"cost_model.profile: {prof.path} adjusts the {prof.base} "
                                  f"pricer: {exc}") from None
            scale *= prof.step_scale
            overhead_ms += prof.request_overhead_ms
            note = (f"profile {prof.path}: fitted to real runs, "
                    f"+{prof.request_overhead_ms:.3g} ms per request")
            known = {"profile": prof.path, **{k: v for k, v in prof.fit.items() if k not in ("folds", "stages")}}
            prov = {"calibration profile": prof.path, "base pricer": prof.base,
                    "step_scale": f"{prof.step_scale:.4g}",
                    "request_overhead_ms": f"{prof.request_overhead_ms:.3g}",
                    "fitted to": f"{len(prof.source.get('runs', []))} real runs ({prof.hardware})",
                    f"held-out ({prof.fit.get('held_out_by', 'model')}) MAPE": f"{100 * prof.fit['heldout_mape']:.1f}%"}
            if prof.hardware != sc.hardware:
                warn.append(f"profile {prof.path} was fitted to runs on {prof.hardware}; this scenario "
                            f"runs on {sc.hardware}, where its constants were not measured")
    else:
        pricer, source = _auto_pricer(sc, model, weight_dtype)
    if scale != 1.0 or note is not None:
        pricer = ScaledPricer(pricer, scale, note, known, prov, warn)
    return pricer, source, base, overhead_ms


def _base_pricer(sc: Scenario, model: "ModelSpec", weight_dtype: Optional[str], kind: str):
    """The ``kind`` pricer (operator_tables or roofline) for the scenario. SGLang's tables,
    where they do not cover the deployment, give way to vLLM's of the same GPU (the same
    kernel libraries, FlashInfer / FlashAttention / cuBLAS / DeepGEMM, measured under vLLM)
    before the roofline; the pricer's warnings say so."""
    from sim.pricing.operator_tables import TablesNotCovering

    try:
        return _pricer_of(sc, model, weight_dtype, kind)
    except TablesNotCovering as exc:
        if kind != "operator_tables" or sc.engine.name == "vllm":
            raise
        from sim.catalog.engines import get_engine

        pricer = _pricer_of(sc, model, weight_dtype, kind, table_engine=get_engine("vllm"))
        why = re.sub(r"\S*/systems/data/", "", str(exc))  # the table, not the install path
        pricer.warn_first(f"operator tables: {sc.engine.release.label}'s do not cover this "
                          f"deployment ({why}); priced from vLLM's tables of the GPU with "
                          f"{sc.engine.name}'s scheduling and CUDA graphs")
        return pricer


def _pricer_of(sc: Scenario, model: "ModelSpec", weight_dtype: Optional[str], kind: str,
               table_engine: Any = None):
    from sim.pricing import make_pricer

    par, kv = sc.parallel, sc.kv_cache
    eager = eager_forwards(sc)
    common = dict(dtype=sc.dtype, tensor_parallel_size=par.tensor_parallel_size,
                  pipeline_parallel_size=par.pipeline_parallel_size,
                  kv_cache_dtype=kv.dtype, weight_dtype=weight_dtype,
                  quant_scope=sc.quantization.scope,
                  speculative=sc.speculative.num_tokens > 0,
                  # An explicit scheduler.async_scheduling prices the CPU's per-step work as
                  # overlapped (true) or added (false); auto: the release's default.
                  async_scheduling=(None if sc.scheduler.async_scheduling == "auto"
                                    else bool(sc.scheduler.async_scheduling)))
    if kind == "operator_tables":
        return make_pricer("operator_tables", model, sc.hardware, tables=sc.cost_model.tables,
                           max_num_seqs=sc.max_num_seqs, engine=sc.engine.release,
                           moe_routing=sc.cost_model.moe_routing,
                           expert_parallel_size=par.expert_shards,
                           expert_tensor_parallel_size=par.expert_tensor_shards,
                           data_parallel_size=par.data_parallel_size, table_engine=table_engine,
                           moe_activations=sc.quantization.moe_activations,
                           moe_kernel=sc.quantization.moe_kernel,
                           max_capture_size=_max_capture_size(sc), cuda_graphs=not eager,
                           cudagraph_mode=_cudagraph_mode(sc),
                           **_extend_graphs(sc, model), **common)
    roofline = make_pricer("roofline", model, sc.hardware, engine=sc.engine.release,
                           expert_parallel_size=par.expert_shards,
                           expert_tensor_parallel_size=par.expert_tensor_shards,
                           data_parallel_size=par.data_parallel_size, **common)
    return _with_host_floor(sc, model, roofline, eager)


def _max_capture_size(sc: Scenario) -> Optional[int]:
    """The largest CUDA-graph batch the scenario asks for (SGLang's ``cuda_graph_max_bs``,
    vLLM's ``max_cudagraph_capture_size``); None: the release's rule."""
    return sc.sglang.cuda_graph_max_bs if sc.engine.name == "sglang" else sc.engine.max_cudagraph_capture_size


def _cudagraph_mode(sc: Scenario) -> Optional[str]:
    """``engine.cudagraph_mode`` as set; None for ``auto`` (the release's)."""
    return None if sc.engine.cudagraph_mode == "auto" else sc.engine.cudagraph_mode


def _with_host_floor(sc: Scenario, model: "ModelSpec", roofline: Any, eager: bool) -> Any:
    """The roofline under the engine's host floor: a step outside CUDA graphs runs no faster
    than the host issues it, by the operator-table pricer's rules. vLLM: graphs up to the
    largest capture size (decode-only steps alone under ``FULL_DECODE_ONLY``, none under
    ``NONE``), the compiled model outside them (0.8 ms a layer). SGLang: full graphs for decode
    batches up to ``cuda_graph_max_bs``, piecewise graphs for extends up to the captured extend
    size, eager PyTorch beyond (``eager_host_seconds``). ``--enforce-eager`` /
    ``--disable-cuda-graph``: every step eager."""
    from sim.catalog.engines import sglang_pcg_capture_sizes
    from sim.catalog.hardware import get_hardware
    from sim.pricing.adjusted import EagerHostFloor
    from sim.pricing.operator_tables import EAGER_HOST_S_PER_LAYER, capture_sizes, eager_host_seconds

    tp = sc.parallel.tensor_parallel_size
    if eager:
        return EagerHostFloor(roofline, eager_host_seconds(model, tp))
    release = sc.engine.release
    mode = _cudagraph_mode(sc) or release.cudagraph_mode
    sizes = (capture_sizes(sc.max_num_seqs, release, get_hardware(sc.hardware), tp, _max_capture_size(sc))
             if mode != "NONE" else [])
    decode_limit = sizes[-1] if sizes else 0
    if sc.engine.name == "sglang":
        tokens = _extend_graphs(sc, model)["extend_graph_tokens"]
        extends = sglang_pcg_capture_sizes(tokens) if tokens else []
        return EagerHostFloor(roofline, eager_host_seconds(model, tp), above_rows=decode_limit,
                              prefill_above_rows=extends[-1] if extends else 0)
    mixed_limit = 0 if mode in ("FULL_DECODE_ONLY", "NONE") else decode_limit
    return EagerHostFloor(roofline, model.num_layers * EAGER_HOST_S_PER_LAYER,
                          above_rows=decode_limit, prefill_above_rows=mixed_limit)


def eager_forwards(sc: Scenario) -> bool:
    """Whether the engine runs every forward without CUDA graphs: vLLM's ``--enforce-eager``, or
    SGLang's ``--disable-cuda-graph`` (its extends then follow the piecewise-graph keys)."""
    return sc.engine.enforce_eager or (sc.engine.name == "sglang" and sc.sglang.disable_cuda_graph)


def _extend_graphs(sc: Scenario, model: "ModelSpec") -> dict[str, Any]:
    """The pricer's ``extend_graph_tokens`` (the largest extend batch SGLang runs in piecewise
    CUDA graphs, 0: eagerly; ``sglang_extend_graph_tokens``) and ``extend_graph_reason`` (why,
    for ``cost_model``'s description); nothing for vLLM, whose graph modes the release sets."""
    from sim.catalog.engines import sglang_extend_graph_tokens

    if sc.engine.name != "sglang":
        return {}
    par, sg = sc.parallel, sc.sglang
    tokens, why = sglang_extend_graph_tokens(
        sc.engine.release, chunked_prefill_size=sc.max_num_batched_tokens or 0, mla=model.is_mla,
        multimodal=model.multimodal, data_parallel_size=par.data_parallel_size,
        pipeline_parallel_size=par.pipeline_parallel_size,
        enable=sg.enable_piecewise_cuda_graph, disable=sg.disable_piecewise_cuda_graph,
        max_tokens=sg.piecewise_cuda_graph_max_tokens)
    return {"extend_graph_tokens": tokens, "extend_graph_reason": why}


def _auto_pricer(sc: Scenario, model: "ModelSpec", weight_dtype: Optional[str]):
    """The pricer ``cost_model.source`` (auto, operator_tables, roofline) asks for, and its name."""
    from sim.pricing.operator_tables import TablesNotCovering

    cm = sc.cost_model
    if cm.source in ("auto", "operator_tables"):
        try:
            return _base_pricer(sc, model, weight_dtype, "operator_tables"), "operator_tables"
        except TablesNotCovering:
            if cm.source == "operator_tables" or cm.tables is not None:
                raise
    return _base_pricer(sc, model, weight_dtype, "roofline"), "roofline"


def build_replica_scheduler(scenario: Union[Scenario, dict], num_slots: int, swap_slots: int = 0,
                            model: Optional["ModelSpec"] = None, kv_bytes_per_token: float = 0.0,
                            memory: Optional["MemoryPlan"] = None):
    """One replica's allocator over ``num_slots`` KV slots and its scheduler (``model``: the
    scenario's, when the caller has resolved it already; ``kv_bytes_per_token``: one GPU's, to
    size KV offload tiers, resolved from the scenario when 0 and tiers are on; ``memory``: the
    deployment's memory plan, which a hybrid linear-attention model's per-request state is read
    from, resolved from the scenario when None and needed)."""
    from sim.catalog.models import get_model
    from sim.memory_plan import sliding_window_kv

    sc = as_scenario(scenario)
    model = model or get_model(sc.model)
    kv, sched = sc.kv_cache, sc.scheduler
    if memory is None and (model.is_hybrid_linear or (kv.offload_enabled and not kv_bytes_per_token)):
        memory = resolve_deployment(sc).memory
    offload = None
    if kv.offload_enabled:
        # ``memory`` is resolved above whenever ``kv_bytes_per_token`` is 0
        offload = offload_tiers_of(sc, kv_bytes_per_token or cast("MemoryPlan", memory).kv_bytes_per_token)
    state_slots, max_states, block_size = 0, None, kv.block_size
    if model.is_hybrid_linear:
        plan = cast("MemoryPlan", memory)  # resolved above for a hybrid model
        max_states = plan.max_state_requests
        if max_states is None:  # vLLM: paged from the KV pool, in pages of one size
            block_size, state_slots = vllm_hybrid_pages(model, plan, kv.block_size)
    try:
        allocator = make_allocator(
            kv.allocator, num_slots=num_slots, block_size=block_size,
            # A linear-attention layer's state is not kept at every prefix boundary, so a cached
            # prefix cannot be resumed mid-prompt: prefix caching is off for hybrid models.
            prefix_caching=sc.caches_prefixes and not model.is_hybrid_linear, reserve=kv.reserve,
            max_model_len=kv.max_model_len, swap_slots=swap_slots,
            window=sliding_window_kv(model, kv.block_size), offload=offload,
            state_slots=state_slots,
        )
        return make_scheduler(
            sched.policy, allocator, max_model_len=kv.max_model_len,
            max_num_seqs=max_running_requests(sc, num_slots, max_states),
            max_num_batched_tokens=sc.max_num_batched_tokens,
            preemption=sched.preemption, queue_policy=sched.queue_policy,
            num_speculative_tokens=sc.speculative.num_tokens,
            sglang=sc.sglang.scheduler_options() if sched.policy == "sglang" else None,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def vllm_hybrid_pages(model: "ModelSpec", memory: "MemoryPlan", block_size: int) -> tuple[int, int]:
    """(attention block size, pool slots of one request's state) under vLLM's hybrid KV cache
    for a linear-attention model. vLLM gives every layer one page size: it raises the attention
    block until one layer's page of it holds one layer's state (``Platform.
    _align_hybrid_block_size``: ``align x cdiv(state page, align x one token's page)``, align the
    larger of the kernel's 16 and ``kv_cache.block_size``), pads the state page to it, and groups
    the state layers in groups as large as the attention layers' (Qwen3.5: 45 = 3 x 15), each
    request holding one page of every group (``mamba_cache_mode`` none)."""
    pp = memory.pipeline_parallel_size
    full = math.ceil(model.num_full_attention_layers / pp)
    linear = math.ceil(model.linear_attention_layers / pp)
    token_page = memory.kv_bytes_per_token / full  # one layer's K and V of one token
    state_page = memory.state_bytes_per_request / linear
    align = max(VLLM_KERNEL_BLOCK_ALIGNMENT, block_size)
    block = align * math.ceil(state_page / (align * token_page))
    return block, math.ceil(linear / full) * block


def kv_page_tokens(sc: Scenario, model: "ModelSpec", memory: "MemoryPlan") -> int:
    """Tokens of one KV block as the engine counts its blocks (``kv_cache.num_gpu_blocks``, the
    summary's ``num_gpu_blocks``): ``kv_cache.block_size``, except for a hybrid linear-attention
    model's pages under vLLM, whose attention block is raised to hold a state
    (``vllm_hybrid_pages``)."""
    if model.is_hybrid_linear and memory.max_state_requests is None and sc.kv_cache.allocator == "paged":
        return vllm_hybrid_pages(model, memory, sc.kv_cache.block_size)[0]
    return sc.kv_cache.block_size


#: The smallest kernel block size of vLLM's FlashAttention / FlashInfer backends (``MultipleOf(16)``).
VLLM_KERNEL_BLOCK_ALIGNMENT = 16


def max_running_requests(sc: Scenario, num_slots: int, max_state_requests: Optional[int] = None) -> int:
    """Requests one engine (one DP rank) batches: ``Scenario.max_num_seqs`` for vLLM. SGLang:
    ``sglang.max_running_requests`` (or ``scheduler.max_num_seqs``) split over the DP-attention
    ranks, else its default from this rank's KV pool (``sglang_max_running_requests``); either
    at most a third of a hybrid model's state pool (``max_state_requests``), as SGLang's
    ``_resolve_max_num_reqs`` caps it."""
    from sim.catalog.engines import sglang_max_running_requests
    from sim.memory_plan import SGLANG_MAMBA_SLOTS_PER_REQUEST

    if sc.engine.name != "sglang":
        return sc.max_num_seqs
    given = sc.max_num_seqs_given
    if given is not None:
        out = max(1, given // max(sc.parallel.data_parallel_size, 1))
    else:
        out = sglang_max_running_requests(num_slots, sc.kv_cache.max_model_len)
    if max_state_requests is not None:  # one slot a request without the radix cache
        ratio = 1 if sc.sglang.disable_radix_cache else SGLANG_MAMBA_SLOTS_PER_REQUEST
        out = min(out, max(1, max_state_requests // ratio))
    return out


def offload_tiers_of(scenario: Scenario, kv_bytes_per_token: float) -> Optional["OffloadTiers"]:
    """The KV offload tiers of one engine (``kv_cache.cpu_offload_*``, ``ssd_offload_*``), or
    None when both are off. Capacities in whole blocks of one GPU's KV shard (as the swap
    space); a tier's loads are priced as host-link swap tokens scaled by the host link's
    bandwidth (the catalog's PCIe) over the tier's (``OffloadLoad``)."""
    from sim.catalog.hardware import GB, get_hardware

    kv = scenario.kv_cache
    if not kv.offload_enabled:
        return None
    link = get_hardware(scenario.hardware).pcie_bandwidth
    return offload_tiers(
        [(name, f"kv_cache.{name}_offload_gb", gib, link if gbs is None else gbs * GB)
         for name, gib, gbs in (("cpu", kv.cpu_offload_gb, kv.cpu_offload_bandwidth_gbs),
                                ("ssd", kv.ssd_offload_gb, kv.ssd_offload_bandwidth_gbs))],
        float(kv_bytes_per_token * kv.block_size), kv.block_size, link)


def swap_slots_of(scenario: Scenario, kv_bytes_per_token: float) -> int:
    """Host swap slots per replica: ``kv_cache.swap_space_gb`` GiB in whole blocks, computed by
    ``sim.scenario.swap_space_blocks`` exactly as the runtime does."""
    bs = scenario.kv_cache.block_size
    return swap_space_blocks(scenario.kv_cache.swap_space_gb, kv_bytes_per_token * bs) * bs


def build_workload(scenario: Union[Scenario, dict], base_dir: Optional[Union[str, Path]] = None) -> list[Request]:
    """The scenario's requests (relative workload paths resolved against ``base_dir``)."""
    from sim.workload import build_requests

    sc = as_scenario(scenario)
    # Not lazy: a list (a ``SessionRequests`` for conversations), never a ``RequestStream``.
    return cast("list[Request]", build_requests(sc.workload, sc.seed, base_dir=base_dir))


def as_scenario(config: Union[Scenario, dict, str, Path, None], overrides: Sequence[str] = (),
                seed: Optional[int] = None) -> Scenario:
    """A Scenario from a Scenario, a full or partial config dict, a YAML path or None (the
    defaults), with ``--set``-style ``overrides`` and ``seed`` applied on top."""
    if isinstance(config, Scenario):
        if not overrides and seed is None:
            return config
        config = config.to_dict()
    if _is_built(config) and not overrides and seed is None:
        return Scenario.from_dict(config)
    return config_mod.build_scenario(config, list(overrides), seed)


def _is_built(config: Any) -> TypeGuard[dict]:
    return isinstance(config, dict) and set(config_mod.DEFAULTS) <= set(config)


def router_options(sc: Scenario) -> dict[str, Any]:
    """The scenario's router settings as ``Router`` keyword arguments (``parallel.router_*``
    weights and ``parallel.session_affinity*``), for every place that routes."""
    par = sc.parallel
    return dict(prefix_weight=par.router_prefix_weight, load_weight=par.router_load_weight,
                kv_weight=par.router_kv_weight, session_affinity=par.session_affinity,
                affinity_abs_threshold=par.session_affinity_abs_threshold,
                affinity_rel_threshold=par.session_affinity_rel_threshold)


def session_links(requests: Sequence[Request]) -> Optional["SessionLinks"]:
    """The conversation structure a workload carries (``sim.workload.SessionRequests``)."""
    from sim.workload.sessions import SessionRequests

    return requests.links if isinstance(requests, SessionRequests) else None


def fresh_request(r: Request) -> Request:
    """A clean copy, so one request stream can be simulated under several configs."""
    return Request(r.request_id, r.arrival_time, r.prompt_len, r.max_output_tokens,
                   prompt_token_ids=r.prompt_token_ids, block_hashes=r.block_hashes,
                   hash_block_size=r.hash_block_size, priority=r.priority)


def replica_engines(sc: Scenario, dep: "Deployment", n: int) -> tuple[list[Scheduler], Optional[list[AcceptanceSampler]]]:
    """``n`` engines of the scenario's deployment: a scheduler with its own KV pool each, and,
    with speculative decoding, each one's acceptance sampler (seeded per engine)."""
    swap_slots = swap_slots_of(sc, dep.memory.kv_bytes_per_token)
    schedulers = [build_replica_scheduler(sc, dep.memory.num_kv_slots, swap_slots, dep.model,
                                          dep.memory.kv_bytes_per_token, dep.memory)
                  for _ in range(n)]
    spec = sc.speculative
    samplers = None
    if spec.num_tokens:
        samplers = [AcceptanceSampler(spec.acceptance_rate, spec.table, seed=sc.seed * 1000 + i,
                                      draft_availability=_list(spec.draft_availability))
                    for i in range(n)]
    return schedulers, samplers


def _list(values: Optional[Sequence[float]]) -> Optional[list[float]]:
    return None if values is None else list(values)


def streamed_pricer(dep: Deployment) -> Any:
    """The deployment's step pricer as a replica that streams to clients runs it: never faster
    than its API server streams the step's chunks (``sim.pricing.adjusted.FrontEndFloor``, one
    chunk per prefill and per ``stream_interval`` decodes), unless the front end streams for
    free (``engine.frontend: none``, or ``frontend_stream_us`` 0)."""
    pricer, fe = dep.cost_model, dep.frontend
    if fe.stream_s_per_chunk > 0:
        from sim.pricing.adjusted import FrontEndFloor

        pricer = FrontEndFloor(pricer, fe.stream_s_per_chunk, fe.stream_interval)
    return pricer


def streamed_interval(dep: Deployment) -> int:
    """Tokens per streamed chunk a client sees (``engine.stream_interval``), for the ITL
    statistics; 1 without an API server (``engine.frontend: none``: nothing is streamed)."""
    return dep.frontend.stream_interval if dep.frontend.active else 1


def async_scheduling_of(sc: Scenario, dep: Deployment) -> bool:
    """Whether steps are scheduled one ahead (vLLM V1's async scheduling). ``auto``: the
    release's default when the steps are priced as a serving engine's (operator tables, or the
    roofline, which prices the release's CPU overlap the same way); a calibration profile alone
    prices kvplan's own engine, which is synchronous."""
    value = sc.scheduler.async_scheduling
    if value == "auto":  # a real-run profile over either base prices a server's steps too
        engine_priced = {"operator_tables", "roofline"} & {dep.cost_model_source, dep.cost_model_base}
        return bool(engine_priced) and sc.engine.release.async_default(sc.speculative.num_tokens > 0)
    return bool(value)


def scenario_summary(sc: Scenario, dep: Deployment) -> dict:
    """summary.json's ``scenario`` block: what was simulated, in a few fields."""
    m = dep.memory
    kv = sc.kv_cache
    out = {
        "model": sc.model,
        "hardware": sc.hardware,
        "dtype": sc.dtype,
        "scheduler": sc.scheduler.policy,
        "allocator": kv.allocator,
        "reserve": kv.reserve if kv.allocator == "contiguous" else None,
        "block_size": kv.block_size if kv.allocator in ("paged", "radix") else None,
        "num_replicas": sc.parallel.num_replicas,
        "gpus_per_replica": dep.num_gpus_per_replica,
        "data_parallel_size": sc.parallel.data_parallel_size,
        "expert_parallel_size": sc.parallel.expert_shards if dep.model.is_moe else 1,
        "kv_slots_per_replica": m.num_kv_slots,
        "kv_pool_gb": m.kv_pool_bytes / 1e9,
        "weights_gb_per_gpu": m.weights_bytes / 1e9,
        "seed": sc.seed,
        "async_scheduling": async_scheduling_of(sc, dep),
    }
    par = sc.parallel
    if dep.model.is_moe and (par.expert_shards > 1 or par.expert_tensor_shards != par.tensor_parallel_size):
        out["expert_tensor_parallel_size"] = par.expert_tensor_shards  # GPUs each expert is split over
    if dep.model.is_hybrid_linear:  # the linear-attention layers' state, and where it lives
        out["state_mb_per_request"] = m.state_bytes_per_request / 1e6
        if m.max_state_requests is not None:
            out["state_slots_per_replica"] = m.max_state_requests
        elif kv.allocator == "paged":
            out["attention_block_size"] = kv_page_tokens(sc, dep.model, m)
    if sc.cost_model.profile is not None:
        out["cost_model"] = repr(dep.cost_model)
    return out


def cost_model_summary(dep: Deployment) -> dict:
    """summary.json's ``cost_model``: which source priced the steps, in words, and its known
    error on this GPU (None where nothing is known: the roofline and profiles report theirs in
    docs/cost_model.md and calibration's own validation)."""
    from sim.pricing.adjusted import ScaledPricer

    out = {"source": dep.cost_model_source, "description": dep.cost_model.describe(),
           "known_error": dep.cost_model.known_error(),
           "step_scale": dep.cost_model.scale if isinstance(dep.cost_model, ScaledPricer) else 1.0,
           "request_overhead_ms": dep.request_overhead_s * 1000,
           "frontend": dep.frontend.summary()}
    if dep.cost_model_base is not None:  # a profile fitted to real runs adjusts this pricer
        out["base"] = dep.cost_model_base
    inner = dep.cost_model.base if isinstance(dep.cost_model, ScaledPricer) else dep.cost_model
    table_source = getattr(inner, "table_source", None)
    if callable(table_source):  # operator tables: the system folder, backend and versions read
        out["tables"] = table_source()
    elif dep.cost_model_source == "roofline":
        from sim.pricing.table_data import MISSING_TABLES_NOTE, default_tables_root

        if default_tables_root() is None:  # why the measured tables did not price
            out["note"] = MISSING_TABLES_NOTE
    return out
