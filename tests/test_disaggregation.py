"""Disaggregated prefill/decode serving (sim/disaggregation.py, sim/policies/kv_transfer.py):
transfer time, TTFT/E2E and decode-side admission against hand calculations with constructed
step times; accounting, reproducibility, the disabled path, config errors and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sim.api import simulate
from sim.catalog.links import LINKS
from sim.config import build_scenario
from sim.disaggregation import DisaggSimulation, model_kv_bytes_per_token
from sim.errors import ConfigError
from sim.policies.kv import make_allocator
from sim.policies.kv_transfer import TransferLink, transfer_bytes, transfer_seconds
from sim.policies.request import Request, RequestState
from sim.policies.schedulers import make_scheduler

ROOT = Path(__file__).resolve().parents[1]

KV = 1000.0      # bytes a token, constructed
BW = 1e6         # bytes/s
LAT = 0.01       # s a transfer


def prefill_time(shape) -> float:
    """Constructed prefill step: 5 ms + 1 ms per prompt token."""
    return 0.005 + 0.001 * shape.num_prefill_tokens


def decode_time(shape) -> float:
    """Constructed decode step: 20 ms whatever the batch."""
    return 0.02


def sched(num_blocks: int, block_size: int = 16):
    alloc = make_allocator("paged", num_slots=num_blocks * block_size, block_size=block_size)
    return make_scheduler("chunked", alloc, max_model_len=4096, max_num_batched_tokens=2048)


def run(reqs, prefill_blocks=1000, decode_blocks=1000, n_prefill=1, n_decode=1, first_token="prefill"):
    """The hand calculations below are DistServe's accounting (the prefill instance returns the
    first token) unless ``first_token="decode"`` (vLLM's P/D proxy, the scenario default)."""
    p = [sched(prefill_blocks) for _ in range(n_prefill)]
    d = [sched(decode_blocks) for _ in range(n_decode)]
    sim = DisaggSimulation(reqs, p, d, prefill_time, decode_time,
                           [TransferLink(BW, LAT) for _ in p], KV, first_token=first_token)
    sim.run()
    for s in p + d:  # nothing leaked in either pool
        assert s.allocator.num_free_slots == s.allocator.num_slots
        assert not s.has_unfinished()
        s.allocator.check_invariants()
    assert all(r.state is RequestState.FINISHED for r in reqs)
    return sim


def test_transfer_time_is_latency_plus_bytes_over_bandwidth():
    assert transfer_bytes(1000, KV) == 1e6
    assert transfer_seconds(1e6, BW, LAT) == pytest.approx(1.01)
    assert transfer_seconds(1e6, BW, LAT, streams=4) == pytest.approx(0.26)
    link = TransferLink(BW, LAT)  # FIFO on one prefill instance's link
    assert link.start(0.0, 1e6) == pytest.approx(1.01)
    assert link.start(0.5, 1e6) == pytest.approx(2.02)  # queued behind the first
    assert link.start(5.0, 1e5) == pytest.approx(5.11)  # idle link: starts at once
    assert link.num_transfers == 3 and link.bytes == pytest.approx(2.1e6)


def test_catalog_links_and_model_kv_bytes():
    assert LINKS["infiniband"].bandwidth == 50e9 and LINKS["pcie"].bandwidth == 64e9
    assert LINKS["nvlink"].bandwidth == 450e9  # 900 GB/s bidirectional, one way
    # Llama-3.1-8B fp16: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB a token,
    # the same whatever the pools' tensor parallelism.
    sc = build_scenario(None, ["disaggregation.enabled=true"])
    assert model_kv_bytes_per_token(sc) == 32 * 8 * 128 * 2 * 2


def test_single_request_ttft_and_e2e_by_hand():
    req = Request("a", 0.0, 1000, 5)
    sim = run([req])
    # prefill: one step of 1000 tokens = 1.005 s, first token sampled there
    assert req.ttft == pytest.approx(1.005)
    # KV: 1000 x 1000 B over 1 MB/s + 10 ms = 1.01 s; then 4 decode steps of 20 ms
    assert req.e2el == pytest.approx(1.005 + 1.01 + 4 * 0.02)
    assert req.tpot == pytest.approx((1.01 + 4 * 0.02) / 4)
    assert req.num_output_tokens == 5 and len(req.token_times) == 5
    (t,) = sim.transfers
    assert t.num_bytes == 1e6 and t.reserved == pytest.approx(1.005)
    assert t.landed == pytest.approx(1.005 + 1.01)


def test_first_token_from_the_decode_instance_by_hand():
    """vLLM's P/D proxy / llm-d: the client's first token is the decode instance's, sampled by
    its first step after the KV landed (that step runs the last prompt token); the prefill's
    token is dropped. TTFT = prefill + transfer + one decode step; TPOT the decode steps'."""
    req = Request("a", 0.0, 1000, 5)
    sim = run([req], first_token="decode")
    assert req.ttft == pytest.approx(1.005 + 1.01 + 0.02)
    assert req.e2el == pytest.approx(1.005 + 1.01 + 5 * 0.02)
    assert req.tpot == pytest.approx(0.02)
    assert req.num_output_tokens == 5 and len(req.token_times) == 5
    (t,) = sim.transfers
    assert t.landed == pytest.approx(1.005 + 1.01)


def test_first_token_from_decode_counts_the_wait_for_decode_room():
    """The second request's wait for the first's decode blocks is in its TTFT when the decode
    instance emits the first token, and not when the prefill instance does."""
    def pair(first_token):
        a, b = Request("a", 0.0, 100, 10), Request("b", 0.0, 100, 10)
        run([a, b], decode_blocks=8, first_token=first_token)
        return a, b

    a_p, b_p = pair("prefill")
    a_d, b_d = pair("decode")
    wire = LAT + 100 * KV / BW
    assert b_p.ttft == pytest.approx(0.205)
    assert a_d.ttft == pytest.approx(0.205 + wire + 0.02)
    assert b_d.ttft == pytest.approx(a_d.finish_time + wire + 0.02)
    assert b_d.finish_time == pytest.approx(a_d.finish_time + wire + 10 * 0.02)


def test_decode_admission_waits_for_kv_blocks_then_proceeds():
    # Decode pool of 8 blocks of 16: a 100-token prompt reserves 7, so the second waits for
    # the first to finish.
    a, b = Request("a", 0.0, 100, 10), Request("b", 0.0, 100, 10)
    sim = run([a, b], decode_blocks=8)
    prefill_end = 0.005 + 0.2          # both prompts in one step
    wire = LAT + 100 * KV / BW          # 0.11 s each
    a_done = prefill_end + wire + 9 * 0.02
    assert a.finish_time == pytest.approx(a_done)
    ta, tb = sim.transfers
    assert ta.reserved == pytest.approx(prefill_end)
    assert tb.reserved == pytest.approx(a_done)  # waited for a's blocks
    assert tb.reserved - tb.ready == pytest.approx(a_done - prefill_end)
    assert b.finish_time == pytest.approx(a_done + wire + 9 * 0.02)
    assert a.ttft == b.ttft == pytest.approx(prefill_end)


def test_transfers_from_one_prefill_instance_are_serialised():
    a, b = Request("a", 0.0, 100, 3), Request("b", 0.0, 100, 3)
    sim = run([a, b], n_decode=2)
    ta, tb = sim.transfers
    assert ta.reserved == tb.reserved  # room on both decode instances at once
    assert tb.landed == pytest.approx(ta.landed + LAT + 0.1)  # ... but one link


def test_prefill_kv_held_until_transfer_completes():
    # A prefill pool of 8 blocks holds one 100-token prompt (7 blocks): the second prompt's
    # prefill waits until the first's KV has left.
    a, b = Request("a", 0.0, 100, 3), Request("b", 0.0, 100, 3)
    sim = run([a, b], prefill_blocks=8, n_decode=2)
    ta, _ = sim.transfers
    assert a.ttft == pytest.approx(0.105)
    assert b.ttft == pytest.approx(ta.landed + 0.105)


SCENARIO = ["hardware=h100-sxm", "workload.num_requests=120", "workload.arrival.rate=12",
            "slo.ttft_ms=300", "slo.tpot_ms=40", "cost_model.source=roofline"]
PD = ["disaggregation.enabled=true", "disaggregation.prefill_replicas=1",
      "disaggregation.decode_replicas=2"]


def test_scenario_run_accounts_for_every_request_and_is_reproducible():
    r1 = simulate(None, overrides=SCENARIO + PD)
    r2 = simulate(None, overrides=SCENARIO + PD)
    assert r1.summary == r2.summary
    s = r1.summary
    assert s["completed"] + s["rejected"] == 120 and s["completed"] == 120
    d = s["disaggregation"]
    assert d["num_gpus"] == 3 and d["transfer"]["count"] == 120
    assert d["goodput_per_gpu"] == pytest.approx(s["goodput"] / 3)
    assert 0 < d["prefill"]["utilization"] < 1 and 0 < d["decode"]["utilization"] <= 1
    # bytes: every prompt at 128 KiB a token
    prompts = sum(r.prompt_len for r in r1.requests)
    assert d["transfer"]["bytes"] == pytest.approx(prompts * 131072)
    assert set(r1.extra["replica_of"].values()) == {1, 2}


def test_disabled_is_the_collocated_run():
    base = simulate(None, overrides=SCENARIO)
    off = simulate(None, overrides=SCENARIO + ["disaggregation.prefill_replicas=3",
                                               "disaggregation.link=pcie"])
    assert "disaggregation" not in base.summary
    assert off.summary == base.summary


@pytest.mark.parametrize("setting, key", [
    ("disaggregation.link=carrier-pigeon", "disaggregation.link"),
    ("disaggregation.prefill_replicas=0", "disaggregation.prefill_replicas"),
    ("disaggregation.decode_tensor_parallel_size=2.5", "disaggregation.decode_tensor_parallel_size"),
    ("disaggregation.link_bandwidth_gbs=0", "disaggregation.link_bandwidth_gbs"),
    ("disaggregation.link_latency_us=-1", "disaggregation.link_latency_us"),
    ("disaggregation.first_token=client", "disaggregation.first_token"),
    ("disaggregation.nope=1", "disaggregation.nope"),
])
def test_bad_keys_are_one_line_config_errors(setting, key):
    with pytest.raises(ConfigError) as exc:
        build_scenario(None, [setting])
    msg = str(exc.value)
    assert key in msg and "\n" not in msg


def test_unsupported_combinations_name_the_key():
    with pytest.raises(ConfigError, match="^disaggregation.enabled: .*data_parallel_size"):
        simulate(None, overrides=SCENARIO + PD + ["parallel.data_parallel_size=2"])
    with pytest.raises(ConfigError, match="^disaggregation.decode_hardware: "):
        simulate(None, overrides=SCENARIO + PD + ["disaggregation.decode_hardware=nope"])


def test_cli_prints_pool_rows(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "kvplan.cli.main", "simulate", "--out", str(tmp_path / "out"),
         *[a for s in SCENARIO + PD for a in ("--set", s)]],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Disaggregated prefill / decode" in proc.stdout and "KV transfers" in proc.stdout
    assert (tmp_path / "out" / "summary.json").exists()


def test_each_prefill_instance_has_its_own_api_server():
    """Each ``vllm serve`` of a P/D deployment runs its own API server. At 40 ms a request one
    serves 25 req/s: four prefill instances at 60 req/s keep the queue short, where one server
    for the whole deployment would let it grow for the whole run (TTFT of seconds)."""
    sets = ["hardware=h100-sxm", "cost_model.source=roofline", "engine.frontend_request_ms=40",
            "engine.frontend_tokenize_us=0", "workload.arrival.rate=60", "workload.num_requests=900",
            "workload.output_len.mean=32", "workload.output_len.max=64",
            "disaggregation.enabled=true", "disaggregation.decode_replicas=2",
            # the prefill side alone here (the decode instances' own pass: the next test)
            "disaggregation.decode_api_server=false"]
    four = simulate(None, overrides=sets + ["disaggregation.prefill_replicas=4"], seed=3).summary
    assert four["completed"] == 900
    assert four["p99_ttft_ms"] < 500
    one = simulate(None, overrides=sets + ["disaggregation.prefill_replicas=1"], seed=3).summary
    assert one["median_ttft_ms"] > 2000  # one server: 60 req/s into 25
    # ... and the server, not the prefill GPU, is what holds it up.
    free = simulate(None, overrides=sets + ["disaggregation.prefill_replicas=1",
                                            "engine.frontend_request_ms=0"], seed=3).summary
    assert free["median_ttft_ms"] < 100


def test_the_decode_instance_api_server_serves_each_request_again():
    """vLLM's P/D proxy sends the decode instance's ``vllm serve`` the whole request once the
    prefill returns: its API server parses and tokenises it again (one server per decode
    instance, FIFO) before that engine can pull the KV. With an idle deployment and exact
    lengths the first token comes exactly ``request + tokenise x prompt`` later, the summary says
    where the time went, and with 40 ms a request, two decode servers at 60 req/s (30 each, over
    their 25) queue for the whole run, as the real ones would."""
    base = ["hardware=h100-sxm", "cost_model.source=roofline", "engine.frontend_request_ms=6",
            "engine.frontend_tokenize_us=2", "workload.num_requests=1",
            "workload.input_len.dist=fixed", "workload.input_len.mean=500",
            "workload.output_len.dist=fixed", "workload.output_len.mean=8",
            "disaggregation.enabled=true"]
    two = simulate(None, overrides=base, seed=1)
    one = simulate(None, overrides=base + ["disaggregation.decode_api_server=false"], seed=1)
    ingress_ms = 6 + 2e-3 * 500
    assert two.summary["mean_ttft_ms"] - one.summary["mean_ttft_ms"] == pytest.approx(ingress_ms, abs=1e-6)
    tr = two.summary["disaggregation"]["transfer"]
    assert tr["decode_api_server_ms"]["mean"] == pytest.approx(ingress_ms, abs=1e-6)
    assert one.summary["disaggregation"]["transfer"]["decode_api_server_ms"]["mean"] == 0
    # The decode side's servers queue like the prefill side's: 40 ms a request, 30 req/s each.
    load = ["hardware=h100-sxm", "cost_model.source=roofline", "engine.frontend_request_ms=40",
            "engine.frontend_tokenize_us=0", "workload.arrival.rate=60", "workload.num_requests=900",
            "workload.output_len.mean=32", "workload.output_len.max=64",
            "disaggregation.enabled=true", "disaggregation.decode_replicas=2",
            "disaggregation.prefill_replicas=4"]
    queued = simulate(None, overrides=load, seed=3).summary
    assert queued["completed"] == 900
    assert queued["median_ttft_ms"] > 1000
    assert queued["disaggregation"]["transfer"]["decode_api_server_ms"]["p99"] > 2000
    # engine.frontend none: no API server on either side.
    offline = [o for o in base if not o.startswith("engine.frontend_")] + ["engine.frontend=none"]
    none = simulate(None, overrides=offline, seed=1).summary
    assert none["disaggregation"]["transfer"]["decode_api_server_ms"]["mean"] == 0


def test_sglang_pd_overlaps_the_decode_servers_pass_with_the_prefill():
    """SGLang's router sends each request to the prefill and the decode server at once (its PD
    bootstrap room), so by default (``disaggregation.decode_api_server`` unset) the decode
    server's pass is not added after the prefill as vLLM's proxy's is; set true, it is."""
    base = ["hardware=h100-sxm", "cost_model.source=roofline", "engine.name=sglang",
            "engine.frontend_request_ms=6", "engine.frontend_tokenize_us=2", "workload.num_requests=1",
            "workload.input_len.dist=fixed", "workload.input_len.mean=500",
            "workload.output_len.dist=fixed", "workload.output_len.mean=8", "disaggregation.enabled=true"]
    default = simulate(None, overrides=base, seed=1).summary
    series = simulate(None, overrides=base + ["disaggregation.decode_api_server=true"], seed=1).summary
    assert default["disaggregation"]["transfer"]["decode_api_server_ms"]["mean"] == 0
    assert series["mean_ttft_ms"] - default["mean_ttft_ms"] == pytest.approx(6 + 2e-3 * 500, abs=1e-6)
