"""The typed scenario: every key round-trips, every bad value is a one-line ConfigError naming
its key, every enumeration is the implementing module's own, and the simulator and the runtime
read one scenario the same way (swap space in GiB on both sides)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
import yaml

from sim import config as config_mod
from sim.config import DEFAULTS, build_config, build_scenario, dump
from sim.errors import ConfigError
from sim.scenario import (GIB, KVCacheConfig, Scenario, field_check, field_keys,
                          swap_space_blocks)


def _set(cfg: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(cfg)
    *path, last = dotted.split(".")
    node = out
    for part in path:
        node = node[part]
    node[last] = value
    return out


def _error(cfg: dict) -> str:
    with pytest.raises(ConfigError) as exc:
        Scenario.from_dict(cfg)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.fixture()
def profile(tmp_path):
    p = tmp_path / "p.json"
    p.write_text("{}")  # only existence is the scenario's business; contents are the pricer's
    return str(p)


#: A valid value other than the default for every key, with the companions it needs.
def _non_defaults(profile: str) -> dict[str, tuple]:
    return {
        "model": ("llama-3.1-70b", {}),
        "hardware": ("h100-sxm", {}),
        "dtype": ("bf16", {}),
        "seed": (7, {}),
        "kv_cache.allocator": ("contiguous", {}),
        "kv_cache.reserve": ("pow2", {}),
        "kv_cache.block_size": (32, {}),
        "kv_cache.prefix_caching": (True, {}),
        "kv_cache.gpu_memory_utilization": (1, {}),
        "kv_cache.max_model_len": (8192, {}),
        "kv_cache.dtype": ("fp8", {}),
        "kv_cache.swap_space_gb": (16, {}),
        "kv_cache.num_gpu_blocks": (1000, {}),
        "kv_cache.cpu_offload_gb": (64.0, {"kv_cache.prefix_caching": True}),
        "kv_cache.cpu_offload_bandwidth_gbs": (25.0, {}),
        "kv_cache.ssd_offload_gb": (512.0, {"kv_cache.prefix_caching": True}),
        "kv_cache.ssd_offload_bandwidth_gbs": (3.5, {}),
        "scheduler.policy": ("vllm_v0", {}),
        "scheduler.max_num_seqs": (64, {}),
        "scheduler.max_num_batched_tokens": (8192, {}),
        "scheduler.preemption": ("swap", {}),
        "scheduler.queue_policy": ("priority", {}),
        "scheduler.async_scheduling": (True, {}),
        "parallel.tensor_parallel_size": (2, {}),
        "parallel.pipeline_parallel_size": (2, {}),
        "parallel.num_replicas": (3, {}),
        "parallel.router": ("least_kv", {}),
        "parallel.data_parallel_size": (2, {}),
        "parallel.enable_expert_parallel": (True, {"model": "mixtral-8x7b"}),
        "parallel.expert_parallel_size": (4, {"model": "mixtral-8x7b",
                                              "parallel.tensor_parallel_size": 4}),
        "parallel.router_prefix_weight": (1.5, {}),
        "parallel.router_load_weight": (0.5, {}),
        "parallel.router_kv_weight": (0.0, {}),
        "parallel.session_affinity": (True, {}),
        "parallel.session_affinity_abs_threshold": (8, {}),
        "parallel.session_affinity_rel_threshold": (2.0, {}),
        "quantization.weights": ("int4", {}),
        "quantization.moe_activations": ("mxfp8", {"quantization.weights": "mxfp4"}),
        "quantization.moe_kernel": ("marlin", {"quantization.weights": "mxfp4"}),
        "quantization.scope": ("mlp_only", {"quantization.weights": "nvfp4"}),
        "engine.max_cudagraph_capture_size": (2048, {}),
        "engine.enforce_eager": (True, {}),
        "engine.cudagraph_mode": ("PIECEWISE", {}),
        "cost_model.profile": (profile, {}),
        "cost_model.source": ("roofline", {}),
        "cost_model.tables": (__import__("os").path.dirname(str(profile)), {}),
        "cost_model.step_scale": (1.05, {}),
        "cost_model.request_overhead_ms": (12.5, {}),
        "cost_model.moe_routing": ("power_law_1.01", {}),
        "speculative.num_tokens": (3, {}),
        "speculative.acceptance": ("table", {"speculative.acceptance_table": [0.9, 0.5]}),
        "speculative.acceptance_rate": (0.5, {}),
        "speculative.acceptance_table": ([0.8, 0.6, 0.4], {}),
        "speculative.draft_cost_ratio": (0.0, {}),
        "speculative.draft_availability": ([0.1, 0.2, 0.3, 0.4], {"speculative.num_tokens": 3}),
        "engine.name": ("vllm", {"engine.version": "0.15.1"}),
        "engine.version": ("0.19.1", {}),
        "engine.frontend": ("none", {}),
        "engine.frontend_request_ms": (2.5, {}),
        "engine.frontend_tokenize_us": (0.5, {}),
        "engine.frontend_stream_us": (8.0, {}),
        "engine.stream_interval": (20, {}),
        "sglang.schedule_policy": ("lpm", {}),
        "sglang.chunked_prefill_size": (4096, {}),
        "sglang.max_prefill_tokens": (8192, {}),
        "sglang.max_running_requests": (128, {}),
        "sglang.schedule_conservativeness": (0.5, {}),
        "sglang.mem_fraction_static": (0.8, {}),
        "sglang.enable_mixed_chunk": (True, {}),
        "sglang.page_size": (16, {}),
        "sglang.disable_radix_cache": (True, {}),
        "sglang.mamba_full_memory_ratio": (0.5, {}),
        "sglang.mamba_ssm_dtype": ("bfloat16", {}),
        "sglang.max_mamba_cache_size": (256, {}),
        "sglang.scheduler_recv_interval": (10, {}),
        "sglang.enable_piecewise_cuda_graph": (True, {}),
        "sglang.disable_piecewise_cuda_graph": (True, {}),
        "sglang.piecewise_cuda_graph_max_tokens": (4096, {}),
        "sglang.cuda_graph_max_bs": (64, {}),
        "sglang.disable_cuda_graph": (True, {}),
        "slo.ttft_ms": (250.5, {}),
        "slo.tpot_ms": (40, {}),
        "disaggregation.enabled": (True, {}),
        "disaggregation.prefill_replicas": (2, {}),
        "disaggregation.prefill_tensor_parallel_size": (2, {}),
        "disaggregation.prefill_hardware": ("h100-sxm", {}),
        "disaggregation.decode_replicas": (3, {}),
        "disaggregation.decode_tensor_parallel_size": (4, {}),
        "disaggregation.decode_hardware": ("a100-80gb", {}),
        "disaggregation.link": ("nvlink", {}),
        "disaggregation.link_bandwidth_gbs": (25.0, {}),
        "disaggregation.link_latency_us": (100.0, {}),
        "disaggregation.first_token": ("prefill", {}),
        "disaggregation.decode_api_server": (False, {}),
    }


def test_defaults_round_trip_and_are_the_documented_mapping():
    sc = Scenario()
    assert sc.to_dict() == DEFAULTS
    assert Scenario.from_dict(DEFAULTS) == sc
    assert yaml.safe_dump(sc.to_dict(), sort_keys=False) == dump(DEFAULTS)
    assert build_config(None) == DEFAULTS and build_scenario(None) == sc
    assert list(DEFAULTS) == ["model", "hardware", "dtype", "seed", "kv_cache", "scheduler",
                              "parallel", "quantization", "cost_model", "engine", "sglang", "speculative", "slo",
                              "disaggregation", "workload"]


def test_every_key_round_trips(profile):
    table = _non_defaults(profile)
    assert sorted(table) == sorted(field_keys()), "a new config key needs a row here"
    for key, (value, companions) in table.items():
        cfg = _set(DEFAULTS, key, value)
        for k, v in companions.items():
            cfg = _set(cfg, k, v)
        sc = Scenario.from_dict(cfg)
        assert sc.to_dict() == cfg, key
        assert config_mod.get(sc.to_dict(), key) == value
        assert type(config_mod.get(sc.to_dict(), key)) is type(value), key  # no coercion
        # and the same through --set, as the CLI gives it
        text = json.dumps(value) if not isinstance(value, str) else value
        assert build_config(None, [f"{key}={text}"] + [f"{k}={json.dumps(v)}" for k, v in companions.items()]) == cfg


def test_typed_fields():
    sc = build_scenario(None, ["kv_cache.block_size=32", "scheduler.policy=orca",
                               "quantization.weights=fp8", "parallel.tensor_parallel_size=2",
                               "speculative.num_tokens=2", "speculative.acceptance=table",
                               "speculative.acceptance_table=[0.9, 0.8]",
                               "workload.arrival.rate=3"])
    assert isinstance(sc.kv_cache, KVCacheConfig) and sc.kv_cache.block_size == 32
    assert sc.scheduler.policy == "orca" and sc.quantization.weight_dtype == "fp8"
    assert sc.gpus_per_replica == 2
    assert sc.speculative.acceptance_table == (0.9, 0.8) and sc.speculative.table == (0.9, 0.8)
    assert sc.workload_spec.arrival.rate == 3 and sc.workload["arrival"]["rate"] == 3
    assert build_scenario(None).quantization.weight_dtype is None


def _numeric_keys() -> list[str]:
    return [k for k in field_keys() if field_check(k).kind in ("int", "float")]


BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1, 10**30, 1e30, True, False, "abc", "8", [1], {}]


@pytest.mark.parametrize("key", _numeric_keys())
@pytest.mark.parametrize("value", BAD_NUMBERS, ids=repr)
def test_bad_numbers_are_rejected_naming_the_key(key, value):
    msg = _error(_set(DEFAULTS, key, value))
    assert msg.startswith(f"{key}: "), msg
    assert repr(value) in msg or str(value) in msg, msg


@pytest.mark.parametrize("key", [k for k in field_keys() if field_check(k).kind == "int"])
def test_integer_keys_reject_floats_and_state_the_range(key):
    msg = _error(_set(DEFAULTS, key, 2.5))
    assert msg.startswith(f"{key}: expected an integer >= ") and " and <= " in msg


@pytest.mark.parametrize("key", [k for k in field_keys() if field_check(k).kind == "choice"])
@pytest.mark.parametrize("value", ["nope", 3, None, True, ["paged"]], ids=repr)
def test_bad_choices_list_the_allowed_values(key, value):
    msg = _error(_set(DEFAULTS, key, value))
    assert msg.startswith(f"{key}: {value!r} is not one of ")
    for allowed in field_check(key).allowed:
        assert allowed in msg


@pytest.mark.parametrize("key,value,needle", [
    ("model", "", "model: expected a name"),
    ("hardware", 3, "hardware: expected a name"),
    ("kv_cache.prefix_caching", 1, "kv_cache.prefix_caching: expected true, false or auto"),
    ("kv_cache.prefix_caching", "yes", "kv_cache.prefix_caching: expected true, false or auto"),
    ("cost_model.profile", 3, "cost_model.profile: expected a path"),
    ("cost_model.profile", "/nonexistent/p.json", "cost_model.profile: /nonexistent/p.json: profile file not found"),
    ("speculative.acceptance_table", [0.5, math.nan], "speculative.acceptance_table: expected a list"),
    ("speculative.acceptance_table", [], "speculative.acceptance_table: expected a list"),
    ("speculative.acceptance_table", [True], "speculative.acceptance_table: expected a list"),
    ("speculative.draft_availability", [0.5, 0.5], "speculative.draft_availability: expected 1 probabilities"),
    ("speculative.draft_availability", "x", "speculative.draft_availability: expected a list"),
    ("workload", None, "workload: expected a mapping"),
    ("workload", {"arrival": {"process": "poisson", "rate": math.nan}}, "workload.arrival.rate"),
    ("workload", {"num_requests": True}, "workload.num_requests"),
    ("workload", {"bogus": 1}, "workload.bogus"),
    ("kv_cache", 3, "kv_cache: expected a mapping"),
    ("scheduler.async_scheduling", "yes", "scheduler.async_scheduling: expected true, false or auto"),
    ("scheduler.async_scheduling", 1, "scheduler.async_scheduling: expected true, false or auto"),
])
def test_other_bad_values_name_their_key(key, value, needle):
    assert needle in _error(_set(DEFAULTS, key, value))


def test_profile_directory_is_not_a_file(tmp_path):
    assert "profile file not found (a directory" in _error(_set(DEFAULTS, "cost_model.profile", str(tmp_path)))


@pytest.mark.parametrize("sets,needle", [
    ({"kv_cache.allocator": "contiguous", "kv_cache.prefix_caching": True}, "kv_cache.prefix_caching:"),
    ({"scheduler.policy": "static", "scheduler.preemption": "swap"}, "scheduler.preemption:"),
    ({"kv_cache.allocator": "contiguous", "scheduler.preemption": "swap"}, "scheduler.preemption:"),
    ({"scheduler.policy": "orca", "scheduler.max_num_batched_tokens": 100}, "scheduler.max_num_batched_tokens:"),
    ({"speculative.acceptance": "table"}, "speculative.acceptance_table:"),
])
def test_combinations_name_the_key_to_change(sets, needle):
    cfg = DEFAULTS
    for k, v in sets.items():
        cfg = _set(cfg, k, v)
    assert _error(cfg).startswith(needle)


def test_unknown_keys_name_the_dotted_key():
    assert _error({**DEFAULTS, "bogus": 1}).startswith("unknown config key 'bogus'")
    assert _error(_set(DEFAULTS, "kv_cache.bogus", 1)).startswith("unknown config key 'kv_cache.bogus'")
    with pytest.raises(ConfigError, match="unknown config key 'scheduler.polcy'"):
        build_config(None, ["scheduler.polcy=orca"])


def test_direct_construction_and_replace_are_checked_too():
    with pytest.raises(ConfigError, match="kv_cache.block_size"):
        KVCacheConfig(block_size=0)
    sc = Scenario()
    with pytest.raises(ConfigError, match="kv_cache.gpu_memory_utilization"):
        dataclasses.replace(sc.kv_cache, gpu_memory_utilization=math.nan)
    with pytest.raises(ConfigError, match="seed"):
        dataclasses.replace(sc, seed=-1)
    with pytest.raises(ConfigError, match="kv_cache.prefix_caching"):
        dataclasses.replace(sc, kv_cache=KVCacheConfig(allocator="contiguous", prefix_caching=True))


def test_override_sets_dotted_keys_and_checks_again():
    sc = Scenario().override({"kv_cache.num_gpu_blocks": 12, "model": "smollm2-135m",
                              "workload.num_requests": 5})
    assert sc.kv_cache.num_gpu_blocks == 12 and sc.model == "smollm2-135m"
    assert sc.workload_spec.num_requests == 5
    with pytest.raises(ConfigError, match="kv_cache.num_gpu_blocks"):
        sc.override({"kv_cache.num_gpu_blocks": 0})
    with pytest.raises(ConfigError, match="unknown config key 'kv_cache.nope'"):
        sc.override({"kv_cache.nope": 1})


def test_scenario_is_frozen_and_to_dict_is_a_copy():
    sc = Scenario()
    with pytest.raises(dataclasses.FrozenInstanceError):
        sc.seed = 3  # type: ignore[misc]
    d = sc.to_dict()
    d["workload"]["num_requests"] = 1
    assert sc.workload["num_requests"] == 1000


def test_enumerations_are_defined_once():
    from sim.catalog import dtypes
    from sim.policies.kv import ALLOCATORS, RESERVE_POLICIES
    from sim.policies.router import ROUTERS
    from sim.policies.schedulers import PREEMPTION_MODES, QUEUE_POLICIES, SCHEDULERS
    from sim.policies.speculative import ACCEPTANCE_MODES

    assert config_mod.POLICIES == tuple(SCHEDULERS)
    assert config_mod.ALLOCATORS is ALLOCATORS
    assert config_mod.RESERVES is RESERVE_POLICIES
    assert config_mod.PREEMPTIONS is PREEMPTION_MODES
    assert config_mod.QUEUE_POLICIES is QUEUE_POLICIES
    assert config_mod.ROUTERS is ROUTERS
    assert config_mod.ACCEPTANCE is ACCEPTANCE_MODES
    assert config_mod.DTYPES is dtypes.DTYPES
    assert config_mod.KV_DTYPES is dtypes.KV_DTYPES
    assert config_mod.WEIGHT_QUANT is dtypes.WEIGHT_QUANT
    # and the scenario's checks use them
    assert field_check("scheduler.policy").allowed == tuple(SCHEDULERS)
    assert field_check("kv_cache.allocator").allowed is ALLOCATORS
    assert field_check("parallel.router").allowed is ROUTERS
    assert field_check("dtype").allowed is dtypes.DTYPES


# --- swap space: GiB on both sides ----------------------------------------------------------


def test_swap_space_is_gib():
    assert GIB == 2**30
    assert swap_space_blocks(4.0, 2**20) == 4096  # 4 GiB of 1 MiB blocks
    assert swap_space_blocks(0, 100) == 0
    assert KVCacheConfig(swap_space_gb=1.5).swap_space_bytes == int(1.5 * 2**30)


def test_simulator_sizes_the_swap_pool_in_gib():
    from sim.api import build_replica_scheduler, resolve_deployment, swap_slots_of

    sc = build_scenario(None, ["model=smollm2-135m", "scheduler.preemption=swap",
                               "kv_cache.swap_space_gb=2", "kv_cache.num_gpu_blocks=64"])
    dep = resolve_deployment(sc.to_dict())
    block_bytes = dep.memory.kv_bytes_per_token * sc.kv_cache.block_size
    sched = build_replica_scheduler(sc, dep.memory.num_kv_slots, swap_slots_of(sc, dep.memory.kv_bytes_per_token))
    assert sched.allocator.host_blocks_total == int(2 * 2**30 // block_bytes)
    assert sched.allocator.host_blocks_total != int(2e9 // block_bytes)  # not GB


def test_simulator_and_runtime_swap_pools_are_equal(tmp_path):
    """The same scenario gives the simulator and the real engine the same host swap pool."""
    pytest.importorskip("torch")
    from runtime.args import EngineArgs
    from runtime.llm_engine import LLMEngine
    from sim.api import build_replica_scheduler, resolve_deployment, swap_slots_of

    shape = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 512}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shape))
    for gib in (1.5, 4.0):
        sc = build_scenario(None, [f"model={path}", "dtype=float32", "scheduler.preemption=swap",
                                   f"kv_cache.swap_space_gb={gib}", "kv_cache.num_gpu_blocks=32",
                                   "kv_cache.max_model_len=256"])
        dep = resolve_deployment(sc.to_dict())
        sim_sched = build_replica_scheduler(sc, dep.memory.num_kv_slots,
                                            swap_slots_of(sc, dep.memory.kv_bytes_per_token))
        engine = LLMEngine.from_args(EngineArgs.from_scenario(sc, f"random:{path}", device="cpu"))
        per_block = 2 * 2 * 2 * 16 * 16 * 4  # K+V, layers, kv heads, head_dim, block_size, fp32
        assert engine.allocator.host_blocks_total == sim_sched.allocator.host_blocks_total
        assert sim_sched.allocator.host_blocks_total == int(gib * 2**30 // per_block)
        assert engine.kv_cache.num_blocks == 32 == dep.memory.num_kv_slots // 16


# --- the runtime's EngineArgs from a scenario ----------------------------------------------


def test_engine_args_from_scenario_maps_every_field():
    pytest.importorskip("torch")
    from runtime.args import EngineArgs

    sc = build_scenario(None, [
        "seed=11", "dtype=bf16", "kv_cache.block_size=8", "kv_cache.prefix_caching=true",
        "kv_cache.gpu_memory_utilization=0.5", "kv_cache.max_model_len=1024",
        "kv_cache.swap_space_gb=2.5", "kv_cache.num_gpu_blocks=99", "scheduler.policy=vllm_v0",
        "scheduler.max_num_seqs=7", "scheduler.max_num_batched_tokens=2048",
        "scheduler.preemption=swap", "speculative.num_tokens=3",
    ])
    a = EngineArgs.from_scenario(sc, "random:smollm2-135m", device="cpu", num_threads=1)
    assert (a.model, a.seed, a.dtype, a.block_size, a.enable_prefix_caching) == (
        "random:smollm2-135m", 11, "bfloat16", 8, True)
    assert (a.gpu_memory_utilization, a.max_model_len, a.swap_space, a.num_kv_blocks) == (0.5, 1024, 2.5, 99)
    assert (a.scheduling_policy, a.enable_chunked_prefill, a.policy()) == ("vllm_v0", False, "vllm_v0")
    assert (a.max_num_seqs, a.max_num_batched_tokens, a.preemption_mode) == (7, 2048, "swap")
    assert a.num_speculative_tokens == 3 and a.device == "cpu" and a.num_threads == 1
    d = EngineArgs.from_scenario(Scenario())
    assert (d.model, d.scheduling_policy, d.enable_chunked_prefill, d.enable_prefix_caching,
            d.swap_space, d.num_kv_blocks, d.max_model_len) == (None, "chunked", True, True, 4.0, None, 4096)
    assert EngineArgs.from_scenario(Scenario(), max_model_len=None).max_model_len is None


@pytest.mark.parametrize("key,value", [
    ("kv_cache.allocator", "contiguous"), ("kv_cache.dtype", "fp8"), ("quantization.weights", "int8"),
    ("scheduler.queue_policy", "priority"), ("parallel.tensor_parallel_size", 2),
    ("parallel.pipeline_parallel_size", 2), ("parallel.num_replicas", 2),
])
def test_engine_args_refuse_what_the_runtime_does_not_implement(key, value):
    pytest.importorskip("torch")
    from runtime.args import EngineArgs

    with pytest.raises(ConfigError, match=f"^{key}: the runtime supports only"):
        EngineArgs.from_scenario(Scenario().override({key: value}))


def test_engine_args_from_scenario_rejects_unknown_overrides():
    pytest.importorskip("torch")
    from runtime.args import EngineArgs

    with pytest.raises(ConfigError, match="unknown argument 'blocksize'"):
        EngineArgs.from_scenario(Scenario(), blocksize=3)


# --- the simulator takes the scenario -------------------------------------------------------


def test_simulate_takes_a_scenario_a_dict_or_overrides_alike(tmp_path):
    from sim.api import simulate

    sets = ["model=smollm2-135m", "workload.num_requests=20", "workload.arrival.rate=4",
            "kv_cache.swap_space_gb=1", "scheduler.preemption=swap"]
    cfg = build_config(None, sets)
    by_sets = simulate(None, overrides=sets)
    by_dict = simulate(cfg)
    by_scenario = simulate(Scenario.from_dict(cfg))
    assert by_sets.summary == by_dict.summary == by_scenario.summary
    assert by_sets.config == cfg and by_scenario.scenario == Scenario.from_dict(cfg)
    out = by_scenario.write(tmp_path / "run")
    assert (out / "config.yaml").read_text() == dump(cfg)  # config.yaml is the YAML form, unchanged
    assert yaml.safe_load((out / "config.yaml").read_text()) == cfg
    with pytest.raises(ConfigError, match="kv_cache.block_size"):
        simulate({**cfg, "kv_cache": {**cfg["kv_cache"], "block_size": 0}})


@pytest.mark.parametrize("sets,caches", [
    ([], True),                                                    # vLLM V1: on by default
    (["kv_cache.prefix_caching=false"], False),
    (["scheduler.policy=vllm_v0"], False),                         # V0's prefill-first loop: off
    (["scheduler.policy=orca"], False), (["scheduler.policy=static"], False),
    (["kv_cache.allocator=contiguous"], False),                    # nothing to share
    (["engine.name=sglang"], True),                                # the radix cache
    (["engine.name=sglang", "sglang.disable_radix_cache=true"], False),
    (["engine.name=sglang", "kv_cache.prefix_caching=false"], False),  # = --disable-radix-cache
])
def test_prefix_caching_auto_is_the_engines_default(sets, caches):
    sc = build_scenario(None, sets)
    assert sc.caches_prefixes is caches
    assert Scenario.from_dict(sc.to_dict()).caches_prefixes is caches  # the dump says the same
    if not sets:
        assert sc.kv_cache.prefix_caching == "auto" and DEFAULTS["kv_cache"]["prefix_caching"] == "auto"
    if sc.engine.name == "sglang":
        assert sc.sglang.disable_radix_cache is not caches


def test_sglang_prefix_caching_true_against_a_disabled_radix_cache_is_an_error():
    with pytest.raises(ConfigError, match="kv_cache.prefix_caching: true contradicts sglang.disable_radix_cache"):
        build_scenario(None, ["engine.name=sglang", "kv_cache.prefix_caching=true", "sglang.disable_radix_cache=true"])


def test_prefix_caching_true_on_the_contiguous_allocator_is_still_an_error():
    with pytest.raises(ConfigError, match="kv_cache.prefix_caching: needs kv_cache.allocator 'paged'"):
        build_scenario(None, ["kv_cache.allocator=contiguous", "kv_cache.prefix_caching=true"])
