"""KV offload tiers for real: prefix blocks evicted from a tiny device pool are kept in host
memory (and on disk), loaded back on a hit, and the tokens stay those of transformers.

The pool is made so small that a prompt's cached prefix is evicted by the next few requests;
without a tier its hit is lost, with one the same prefix comes back from the tier. A wrong copy
(stale or zero KV for the loaded blocks) changes the greedy continuation, so parity with
transformers is what checks the bytes.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from runtime import LLM, EngineArgs, SamplingParams
from runtime.kv_cache import block_bytes
from runtime.model_config import ModelConfig
from sim.errors import ConfigError
from sim.scenario import GIB, Scenario
from tests.runtime.helpers import VOCAB, hf_greedy

GREEDY = SamplingParams(temperature=0.0, max_tokens=6)
BLOCK = 4


@pytest.fixture(scope="module")
def gqa(hf_models):
    return hf_models["gqa"]


def _gib_for_blocks(path: str, blocks: int) -> float:
    """GiB that hold exactly ``blocks`` KV blocks of the checkpoint at ``path`` (float32)."""
    with open(Path(path) / "config.json") as f:
        cfg = ModelConfig.from_hf_dict(json.load(f))
    per_block = block_bytes(cfg, BLOCK, torch.float32)
    return (blocks + 0.5) * per_block / GIB


def _prompts() -> tuple[list[int], list[list[int]]]:
    rng = random.Random(11)
    shared = [rng.randrange(3, VOCAB) for _ in range(24)]  # 6 full blocks
    others = [[rng.randrange(3, VOCAB) for _ in range(26)] for _ in range(4)]
    return shared, others


def _run(path: str, **kw) -> tuple[LLM, list[list[int]], list]:
    """The shared-prefix prompt, four unrelated ones that push it out of a 20-block pool, then
    the shared prefix again with a new ending; one request at a time."""
    shared, others = _prompts()
    prompts = [shared + [5, 6]] + others + [shared + [7, 8, 9]]
    llm = LLM(path, block_size=BLOCK, num_kv_blocks=20, enable_prefix_caching=True, num_threads=1, **kw)
    outs = [llm.generate(prompt_token_ids=[p], sampling_params=GREEDY)[0] for p in prompts]
    return llm, prompts, outs


def test_without_a_tier_the_evicted_prefix_is_recomputed(gqa):
    path, _ = gqa
    llm, _, outs = _run(path)
    assert outs[-1].metrics.num_cached_tokens == 0  # the pool forgot it: the case the tier is for
    assert llm.engine.kv_offload is None


def test_cpu_tier_brings_the_prefix_back_with_identical_tokens(gqa):
    path, model = gqa
    llm, prompts, outs = _run(path, kv_offload_cpu_gb=_gib_for_blocks(path, 64))
    assert [o.token_ids for o in outs] == [hf_greedy(model, p, GREEDY.max_tokens) for p in prompts]
    assert outs[-1].metrics.num_cached_tokens == 24  # all six shared blocks, loaded from the CPU
    host = llm.engine.kv_offload
    assert host.num_blocks_out > 0 and host.num_blocks_in >= 6
    stats = llm.engine.allocator.offload_stats()
    assert stats["tiers"]["cpu"]["hit_tokens"] >= 24
    assert llm.engine.num_leaked_blocks() == 0  # also checks every tier hash has its bytes
    llm.engine.close()


def test_ssd_tier_under_a_tiny_cpu_tier_round_trips_through_files(gqa, tmp_path):
    path, model = gqa
    folder = tmp_path / "kv"
    llm, prompts, outs = _run(path, kv_offload_cpu_gb=_gib_for_blocks(path, 2),
                              kv_offload_ssd_gb=_gib_for_blocks(path, 64), kv_offload_dir=str(folder))
    assert [o.token_ids for o in outs] == [hf_greedy(model, p, GREEDY.max_tokens) for p in prompts]
    assert outs[-1].metrics.num_cached_tokens == 24
    host = llm.engine.kv_offload
    assert host.num_disk_writes > 0 and host.num_disk_reads > 0
    stats = llm.engine.allocator.offload_stats()["tiers"]
    assert stats["ssd"]["hit_tokens"] > 0
    assert llm.engine.num_leaked_blocks() == 0
    assert len(list(folder.iterdir())) == host.num_resident["disk"] > 0  # one file per disk block
    llm.engine.close()
    assert not list(folder.iterdir())


def test_a_dropped_copy_would_be_caught(gqa, monkeypatch):
    """The parity above can fail: loading zeros instead of the saved KV changes the tokens."""
    from runtime.kv_cache import HostKVOffload

    path, model = gqa
    real_take = HostKVOffload._take
    monkeypatch.setattr(HostKVOffload, "_take", lambda self, h: torch.zeros_like(real_take(self, h)))
    _, prompts, outs = _run(path, kv_offload_cpu_gb=_gib_for_blocks(path, 64))
    assert outs[-1].metrics.num_cached_tokens == 24
    assert outs[-1].token_ids != hf_greedy(model, prompts[-1], GREEDY.max_tokens)


def test_offload_settings_map_from_the_scenario_and_are_checked():
    sc = Scenario.from_dict({"kv_cache": {"prefix_caching": True, "cpu_offload_gb": 8, "ssd_offload_gb": 64}})
    args = EngineArgs.from_scenario(sc)
    assert (args.kv_offload_cpu_gb, args.kv_offload_ssd_gb) == (8, 64)
    with pytest.raises(ConfigError, match="kv_offload_cpu_gb: KV offload tiers need enable_prefix_caching"):
        EngineArgs(kv_offload_cpu_gb=1, enable_prefix_caching=False)
    with pytest.raises(ConfigError, match="kv_offload_ssd_gb must be >= 0"):
        EngineArgs(kv_offload_ssd_gb=-1)
