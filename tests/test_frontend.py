"""The API server in front of the engine (``engine.frontend``; ``sim.catalog.frontends``): its
terms reach TTFT exactly as the model says, requests pass it one at a time in the order sent, the
streaming floor holds a step to the server's pace, the fast decode path stays exact with it,
``engine.frontend: none`` removes it, and the summary prints it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim.api import resolve_deployment, simulate
from sim.catalog.frontends import FRONTENDS, get_frontend
from sim.errors import ConfigError
from sim.metrics import chunk_times, delivered_times
from sim.policies import Request, RequestState
from sim.policies.step import StepShape
from sim.pricing.adjusted import FrontEndFloor
from sim.scenario import Scenario
from tests.exactness import assert_fast_path_exact

SMALL = ["workload.num_requests=40", "workload.arrival.rate=4"]


def closed(n: int, clients: int) -> list[str]:
    return [f"workload.num_requests={n}", "workload.arrival.process=closed",
            f"workload.arrival.concurrency={clients}"]


def test_the_default_is_an_api_server_and_none_removes_every_term():
    fe = Scenario().engine.front_end
    assert fe.name == "api_server" and fe.request_s > 0 and fe.tokenize_s_per_token > 0
    none = Scenario.from_dict({"engine": {"frontend": "none"}}).engine.front_end
    assert not none.active and none.ingress is None
    assert none.ingress_s(10_000) == 0.0


def test_ttft_grows_by_exactly_the_ingress_at_low_load():
    """Requests far apart (one at a time, no queue anywhere): each TTFT is the same engine time
    plus request_s + tokenise x prompt, to the nanosecond."""
    def reqs() -> list[Request]:  # 100 s apart: each alone on the server
        return [Request(str(i), 100.0 * i, 40 + 97 * i, 30 + i) for i in range(12)]

    over = ["cost_model.source=roofline"]
    off = {r.request_id: r for r in simulate(None, overrides=over + ["engine.frontend=none"],
                                             requests=reqs()).requests}
    on = simulate(None, overrides=over + ["engine.frontend_request_ms=7", "engine.frontend_tokenize_us=3"],
                  requests=reqs()).requests
    for r in on:
        base = off[r.request_id]
        expected = 0.007 + 3e-6 * r.prompt_len
        assert (r.token_times[0] - r.arrival_time) - (base.token_times[0] - base.arrival_time) == \
            pytest.approx(expected, abs=1e-9)
        # Every later token moves with the first: the front end adds to TTFT and E2E, not TPOT.
        assert r.finish_time - r.token_times[0] == pytest.approx(base.finish_time - base.token_times[0], abs=1e-9)


def test_a_burst_passes_the_api_server_one_at_a_time():
    """Eight requests sent at the same instant with 10 ms of front-end work each reach the
    scheduler 10, 20, ... 80 ms later, in the order sent (a FIFO single server)."""
    reqs = [Request(f"r{i}", 0.0, 100, 4) for i in range(8)]
    res = simulate(None, overrides=["engine.frontend_request_ms=10", "engine.frontend_tokenize_us=0",
                                    "cost_model.source=roofline"], requests=reqs)
    firsts = sorted(r.first_scheduled_time for r in res.requests)
    for k, t in enumerate(firsts):
        assert t >= 0.010 * (k + 1) - 1e-12
    # None scheduled before the server let it through; the last waited for all seven before it.
    assert firsts[-1] >= 0.080 - 1e-12
    assert all(r.state is RequestState.FINISHED for r in res.requests)


def test_each_replica_has_its_own_api_server():
    """The same burst of eight over four replicas: four API servers, so they reach the
    schedulers two deep (10 ms, then 20 ms), not eight deep as through one server. (The
    synchronous loop: scheduled one step ahead, a request arriving mid-step would wait a step more.)"""
    reqs = [Request(f"r{i}", 0.0, 100, 4) for i in range(8)]
    res = simulate(None, overrides=["engine.frontend_request_ms=10", "engine.frontend_tokenize_us=0",
                                    "cost_model.source=roofline", "parallel.num_replicas=4",
                                    "scheduler.async_scheduling=false"], requests=reqs)
    firsts = sorted(r.first_scheduled_time for r in res.requests)
    assert all(t >= 0.010 - 1e-12 for t in firsts[:4]) and all(t >= 0.020 - 1e-12 for t in firsts[4:])
    assert firsts[-1] < 0.030


def test_a_fleet_serves_more_than_one_api_servers_rate():
    """An API server that takes 40 ms a request serves 25 req/s. Four replicas at 60 req/s are
    at 60% of their four servers: the queue stays short. Through one server it would grow
    without bound (TTFT of seconds by the end of the run)."""
    sets = ["engine.frontend_request_ms=40", "engine.frontend_tokenize_us=0", "parallel.num_replicas=4",
            "workload.arrival.rate=60", "workload.num_requests=1200", "workload.output_len.mean=32",
            "workload.output_len.max=64"]
    s = simulate(None, overrides=sets, seed=3).summary
    assert s["completed"] == 1200
    assert s["p99_ttft_ms"] < 500
    assert s["request_throughput"] == pytest.approx(60, rel=0.1)


def test_one_client_ttft_is_an_idle_prefill_plus_the_front_end():
    over = closed(10, 1) + ["engine.frontend_request_ms=4", "engine.frontend_tokenize_us=2"]
    res = simulate(None, overrides=over, seed=3)
    dep = resolve_deployment(Scenario.from_dict(res.config))
    fe = dep.frontend
    for r in res.requests:
        shape = StepShape(num_prefill_tokens=r.prompt_len, num_prefill_seqs=1,
                          prefill_attention_work=r.prompt_len * (r.prompt_len + 1) // 2)
        ttft = r.token_times[0] - r.arrival_time
        assert ttft == pytest.approx(0.004 + 2e-6 * r.prompt_len + dep.cost_model.step_time(shape), rel=1e-9)
        assert fe.ingress_s(r.prompt_len) == pytest.approx(0.004 + 2e-6 * r.prompt_len)


def test_the_streaming_floor_holds_a_step_to_the_servers_pace():
    dep = resolve_deployment(Scenario.from_dict({"cost_model": {"source": "roofline"}}))
    floor = FrontEndFloor(dep.cost_model, 1e-3)  # 1 ms per chunk: absurd, to make it bind
    small = StepShape(num_decode_seqs=2, decode_context_tokens=200)
    big = StepShape(num_decode_seqs=200, decode_context_tokens=200 * 500)
    assert floor.price(small) == dep.cost_model.price(small)  # the GPU is slower: no floor
    assert floor.price(big) == pytest.approx(0.200)  # 200 chunks x 1 ms
    assert floor.breakdown(big)["frontend_wait"] == pytest.approx(0.200 - dep.cost_model.price(big))
    cols = {"num_decode_seqs": np.array([2, 200]), "decode_context_tokens": np.array([200, 100_000])}
    assert list(floor.price_columns(cols)) == pytest.approx([floor.price(small), floor.price(big)])
    f = floor.decode_context_pricer(StepShape(num_decode_seqs=200))
    assert f(100_000) == pytest.approx(floor.price(big))
    # In a run: 64 clients streaming at 1 ms per chunk cannot decode faster than 64 ms a step.
    s = simulate(None, overrides=closed(192, 64) + ["engine.frontend_stream_us=1000",
                                                    "workload.output_len={dist: fixed, mean: 50}"]).summary
    assert s["median_tpot_ms"] >= 63.9


def test_a_stream_interval_streams_one_chunk_in_n_and_leaves_ttft_alone():
    """``engine.stream_interval N`` (``--stream-interval``): a prefill's first token goes out at
    once, decodes stream one chunk every N tokens, so the floor is chunk x (prefills + decodes /
    N); a lone client's TTFT is the same as with N = 1 to the nanosecond; a loaded run is held to
    N times fewer chunks a step."""
    dep = resolve_deployment(Scenario.from_dict({"cost_model": {"source": "roofline"}}))
    floor = FrontEndFloor(dep.cost_model, 1e-3, stream_interval=20)
    big = StepShape(num_decode_seqs=200, decode_context_tokens=200 * 500)
    mixed = StepShape(num_decode_seqs=200, decode_context_tokens=200 * 500, num_prefill_seqs=3,
                      num_prefill_tokens=30, prefill_attention_work=3 * 55)
    assert floor.floor(big) == pytest.approx(200 / 20 * 1e-3)
    assert floor.floor(mixed) == pytest.approx((200 / 20 + 3) * 1e-3)
    cols = {"num_decode_seqs": np.array([200, 8]), "decode_context_tokens": np.array([100_000, 800])}
    assert list(floor.price_columns(cols)) == pytest.approx(
        [floor.price(big), floor.price(StepShape(num_decode_seqs=8, decode_context_tokens=800))])
    with pytest.raises(ValueError):
        FrontEndFloor(dep.cost_model, 1e-3, stream_interval=0)
    one = closed(10, 1) + ["engine.frontend_request_ms=4", "engine.frontend_tokenize_us=2"]
    every = simulate(None, overrides=one, seed=3).requests
    chunked = simulate(None, overrides=one + ["engine.stream_interval=50"], seed=3).requests
    assert [r.token_times[0] - r.arrival_time for r in chunked] == [r.token_times[0] - r.arrival_time for r in every]
    # 64 clients at 1 ms a chunk: N = 1 holds a decode step to 64 ms; N = 8 to 8 ms, under
    # the GPU's own step, so TPOT is the GPU's.
    load = closed(192, 64) + ["engine.frontend_stream_us=1000", "workload.output_len={dist: fixed, mean: 50}"]
    s = simulate(None, overrides=load + ["engine.stream_interval=8"]).summary
    gpu = simulate(None, overrides=load + ["engine.frontend_stream_us=0"]).summary
    assert s["median_tpot_ms"] == pytest.approx(gpu["median_tpot_ms"])
    assert 8 <= s["median_tpot_ms"] < 60
    assert s["cost_model"]["frontend"]["stream_interval"] == 8


FAST_CASES = {
    "open": ["workload.num_requests=150", "workload.arrival.rate=20", "engine.frontend_tokenize_us=40"],
    "closed-burst": closed(150, 16) + ["engine.frontend_tokenize_us=60"],
    "open-two-replicas": ["workload.num_requests=150", "workload.arrival.rate=30",
                          "parallel.num_replicas=2", "engine.frontend_request_ms=3"],
    "capped": ["workload.num_requests=150", "workload.arrival.rate=40", "workload.max_concurrency=6",
               "engine.frontend_tokenize_us=30"],
    "sessions": ["workload.num_requests=60", "workload.arrival.rate=10", "cost_model.source=roofline",
                 "workload.sessions={num_turns: {dist: fixed, mean: 3}, think_time_s: 0.5, "
                 "new_message_len: {dist: fixed, mean: 40}}", "engine.frontend_tokenize_us=50"],
}


@pytest.mark.parametrize("name", list(FAST_CASES))
def test_fast_decode_is_exact_with_the_front_end(name):
    fast = assert_fast_path_exact(FAST_CASES[name], seed=6)
    assert all(r.state is RequestState.FINISHED for r in fast.requests)
    assert fast.summary["completed"] == len(fast.requests)  # every request accounted for


def test_littles_law_holds_with_the_front_end():
    s = simulate(None, overrides=closed(300, 12) + ["engine.frontend_tokenize_us=20"], seed=2).summary
    assert s["achieved_concurrency"] == pytest.approx(s["request_throughput"] * s["mean_e2el_ms"] / 1000, rel=0.02)


def test_the_summary_prints_the_terms():
    s = simulate(None, overrides=SMALL, seed=1).summary
    fe = s["cost_model"]["frontend"]
    default = FRONTENDS["api_server"]
    assert fe["name"] == "api_server"
    assert fe["request_ms"] == pytest.approx(default.request_s * 1e3)
    assert fe["tokenize_us_per_token"] == pytest.approx(default.tokenize_s_per_token * 1e6)
    assert fe["stream_us_per_chunk"] == pytest.approx(default.stream_s_per_chunk * 1e6)
    assert fe["stream_interval"] == 1
    assert "fitted" in fe["source"] and "measured" in fe["source"]


def test_synthetic_prompts_tokenise_at_the_measured_factor():
    """``workload.prompt_text: synthetic`` (prompts decoded from made-up token ids, as random
    datasets send): each TTFT at low load grows by exactly (factor - 1) x tokenise x prompt over
    natural text; the summary prints the scaled term; an explicit ``frontend_tokenize_us`` is
    taken as measured for the prompts; ``frontend: none`` stays free."""
    from sim.catalog.frontends import SYNTHETIC_TOKENIZE_FACTOR

    def reqs() -> list[Request]:
        return [Request(str(i), 100.0 * i, 300 + 401 * i, 20) for i in range(8)]

    over = ["cost_model.source=roofline"]
    nat = {r.request_id: r for r in simulate(None, overrides=over, requests=reqs()).requests}
    res = simulate(None, overrides=over + ["workload.prompt_text=synthetic"], requests=reqs())
    per_token = FRONTENDS["api_server"].tokenize_s_per_token
    for r in res.requests:
        base = nat[r.request_id]
        extra = (SYNTHETIC_TOKENIZE_FACTOR - 1) * per_token * r.prompt_len
        assert (r.token_times[0] - base.token_times[0]) == pytest.approx(extra, abs=1e-9)
    fe = res.summary["cost_model"]["frontend"]
    assert fe["tokenize_us_per_token"] == pytest.approx(SYNTHETIC_TOKENIZE_FACTOR * per_token * 1e6)
    assert "synthetic" in fe["source"]
    assert 1.5 < SYNTHETIC_TOKENIZE_FACTOR < 4  # the measured ratio, not a placeholder
    given = Scenario.from_dict({"workload": {"prompt_text": "synthetic"},
                                "engine": {"frontend_tokenize_us": 3.0}}).front_end
    assert given.tokenize_s_per_token == pytest.approx(3e-6)
    none = Scenario.from_dict({"workload": {"prompt_text": "synthetic"}, "engine": {"frontend": "none"}})
    assert not none.front_end.active
    # Token-id prompts arrive tokenised: TTFT is natural text's less the whole tokenise term.
    ids = simulate(None, overrides=over + ["workload.prompt_text=token_ids"], requests=reqs())
    for r in ids.requests:
        base = nat[r.request_id]
        assert (base.token_times[0] - r.token_times[0]) == pytest.approx(per_token * r.prompt_len, abs=1e-9)
    assert ids.summary["cost_model"]["frontend"]["tokenize_us_per_token"] == 0


def test_chunk_times_follow_both_engines_sending_rule():
    """Tokens 1, N+1, 2N+1, ... and the last go out (vLLM's output processor, SGLang's
    ``len(output_ids) % N == 1``); N = 1 and one- or two-token outputs are untouched."""
    t = [float(i) for i in range(10)]
    assert chunk_times(t, 4) == [0.0, 4.0, 8.0, 9.0]
    assert chunk_times(t, 3) == [0.0, 3.0, 6.0, 9.0]  # the last token is already a boundary
    assert chunk_times(t, 1) is t and chunk_times(t[:2], 50) == t[:2]
    assert chunk_times(t, 20) == [0.0, 9.0]
    # Speculative steps (tokens of a step share its time): 4 tokens gathered only at t = 2, the
    # cut moves with the overshoot, the last step closes the stream.
    spec = [0.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]
    assert chunk_times(spec, 4) == [0.0, 2.0, 3.0]
    assert delivered_times(spec, 4) == [0.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0]


def test_delivered_times_place_each_token_at_its_chunk():
    """The per-token view ``validate --endpoint`` gives both sides: tokens 2-5 arrive with token
    5, 6-9 with 9, the last alone; its gaps are the chunk gaps plus zeros."""
    from calibration.validate_endpoint import as_delivered

    t = [float(i) for i in range(10)]
    assert delivered_times(t, 4) == [0.0, 4.0, 4.0, 4.0, 4.0, 8.0, 8.0, 8.0, 8.0, 9.0]
    assert delivered_times(t, 1) == t and delivered_times(t, 20) == [0.0] + [9.0] * 9
    gaps = np.diff(delivered_times(t, 4))
    assert sorted(g for g in gaps if g) == sorted(np.diff(chunk_times(t, 4)).tolist())
    req = simulate(None, overrides=SMALL, seed=1).requests[0]
    seen = as_delivered(req, 3)
    assert list(seen.token_times) == delivered_times(req.token_times, 3) and seen is not req
    assert (seen.finish_time, seen.arrival_time, seen.num_output_tokens) == \
        (req.finish_time, req.arrival_time, req.num_output_tokens)
    assert as_delivered(req, 1) is req


def test_itl_is_one_gap_a_streamed_chunk():
    """With ``engine.stream_interval`` N the summary's ITL is the client's: one gap a chunk
    (``vllm bench serve`` records one a chunk), the mean exactly the chunks' gaps pooled over
    requests; TTFT, TPOT and E2E are the N = 1 run's (the first and last token go out at once),
    and ``frontend: none`` (nothing streamed) keeps one gap a token."""
    base = SMALL + ["workload.output_len={dist: fixed, mean: 23}"]
    one = simulate(None, overrides=base, seed=4)
    five = simulate(None, overrides=base + ["engine.stream_interval=5"], seed=4)
    for key in ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "p99_tpot_ms"):
        assert five.summary[key] == one.summary[key], key
    gaps = [b - a for r in five.requests for a, b in zip(chunk_times(r.token_times, 5),
                                                         chunk_times(r.token_times, 5)[1:])]
    assert len(gaps) == 5 * len(five.requests)  # 23 tokens: 1, 6, 11, 16, 21 and 23
    assert five.summary["mean_itl_ms"] == pytest.approx(1000 * sum(gaps) / len(gaps), rel=1e-12)
    assert five.summary["mean_itl_ms"] > 4 * one.summary["mean_itl_ms"]
    offline = simulate(None, overrides=base + ["engine.stream_interval=5", "engine.frontend=none"], seed=4)
    off = simulate(None, overrides=base + ["engine.frontend=none"], seed=4)
    assert offline.summary["mean_itl_ms"] == off.summary["mean_itl_ms"]


@pytest.mark.parametrize("sets, needle", [
    (["workload.prompt_text=random"], "workload.prompt_text"),
    (["engine.frontend=nginx"], "engine.frontend"),
    (["engine.frontend_request_ms=-1"], "engine.frontend_request_ms"),
    (["engine.frontend_tokenize_us=abc"], "engine.frontend_tokenize_us"),
    (["engine.stream_interval=0"], "engine.stream_interval"),
])
def test_bad_values_are_one_line_config_errors(sets, needle):
    with pytest.raises(ConfigError) as err:
        simulate(None, overrides=SMALL + sets)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_front_end_by_name():
    with pytest.raises(ConfigError, match="engine.frontend"):
        get_frontend("triton")
    assert math.isfinite(get_frontend("none").ingress_s(1))


def test_a_request_sent_later_queues_at_its_send_time_not_its_release():
    """A ramp-up releases every client's first request at t=0 with later send times. Each must
    take its place in the API server's queue when it is sent: a client that finished early and
    sent its next request before the last client started must not wait for that start."""
    over = ["workload.num_requests=60", "workload.arrival.process=closed", "workload.arrival.concurrency=6",
            "workload.arrival.ramp_up_s=20", "workload.input_len={dist: fixed, mean: 200}",
            "workload.output_len={dist: fixed, mean: 20}", "cost_model.source=roofline"]
    on = simulate(None, overrides=over + ["engine.frontend_request_ms=5", "engine.frontend_tokenize_us=0"], seed=1)
    fe = 0.005
    for r in on.requests:
        # Alone in the queue most of the time: reaching the scheduler takes the ingress, not seconds.
        assert r.first_scheduled_time - r.arrival_time < fe + 0.5, (r.request_id, r.arrival_time)
    early = [r for r in on.requests if r.arrival_time < 15 and r.arrival_time not in (0.0,)]
    assert early  # requests sent before the ramp ends, by clients that already finished one
    assert max(r.token_times[0] - r.arrival_time for r in on.requests) < 1.0
