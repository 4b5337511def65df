"""Data-parallel attention ranks of a MoE step together (``sim.simulation.LockstepGroup``): a
step lasts as long as the slowest rank's batch padded to the group's largest, an idle rank
waits with the others, and a whole run still accounts for every request and KV block."""

from __future__ import annotations

import pytest

from sim.api import simulate
from sim.policies import Request, RequestState, StepShape
from sim.policies.kv import make_allocator
from sim.policies.router import Router
from sim.policies.schedulers import make_scheduler
from sim.simulation import Simulation, padded


def _step_time(shape: StepShape) -> float:
    """1 ms a step plus 0.1 ms a GEMM row (padding rows included)."""
    return 0.001 + 0.0001 * shape.num_tokens


def _ranks(n: int) -> list:
    return [make_scheduler("chunked", make_allocator("paged", num_slots=4096, block_size=16),
                           max_model_len=512, max_num_seqs=8) for _ in range(n)]


def _run(reqs: list[Request], lockstep: int) -> Simulation:
    sim = Simulation(reqs, _ranks(2), _step_time, router=Router("round_robin"), fast_decode=True,
                     lockstep=lockstep)
    sim.run()
    return sim


def test_a_long_prefill_on_one_rank_stalls_the_other_by_hand():
    """Rank 0 prefills 100 tokens while rank 1 prefills 10. Independent ranks: rank 1's first
    token after 1 + 1 ms. In lock-step rank 1's batch is padded to 100 rows and waits for rank
    0: TTFT 1 + 10 ms for both; then two decode steps of one row each (1.1 ms)."""
    free = [Request("a", 0.0, 100, 3), Request("b", 0.0, 10, 3)]
    _run(free, lockstep=1)
    assert free[1].ttft == pytest.approx(0.002)
    assert free[0].ttft == pytest.approx(0.011)
    tied = [Request("a", 0.0, 100, 3), Request("b", 0.0, 10, 3)]
    sim = _run(tied, lockstep=2)
    assert tied[0].ttft == pytest.approx(0.011) and tied[1].ttft == pytest.approx(0.011)
    assert tied[1].finish_time == pytest.approx(0.011 + 2 * 0.0011)
    steps = sim.log.columns()
    # Each rank logs its own batch with the group's duration, at the same start times.
    assert steps["replica"][:2] == [0, 1]
    assert steps["num_prefill_tokens"][:2] == [100, 10]
    assert steps["duration_s"][0] == steps["duration_s"][1] == pytest.approx(0.011)
    assert steps["start_s"][0] == steps["start_s"][1] == 0.0


def test_an_idle_rank_waits_with_the_group_and_joins_at_the_next_step():
    """Rank 1 gets its request 5 ms in, during rank 0's 10 ms prefill (91 rows): it is admitted
    at once (synchronous scheduling) but runs first in the group's next step, at 10.1 ms."""
    reqs = [Request("a", 0.0, 91, 2), Request("b", 0.005, 10, 2)]
    sim = _run(reqs, lockstep=2)
    assert reqs[0].ttft == pytest.approx(0.0101)
    # Next step: rank 0 decodes 1 row, rank 1 prefills 10: padded to 10 rows, 2 ms.
    assert reqs[1].ttft == pytest.approx(0.0101 - 0.005 + 0.002)
    assert reqs[0].finish_time == pytest.approx(0.0101 + 0.002)
    assert all(r.state is RequestState.FINISHED for r in reqs)
    assert sim.replicas[0].num_steps == 2 and sim.replicas[1].num_steps == 2


def test_padding_keeps_every_field_and_only_adds_rows():
    s = StepShape(num_prefill_tokens=7, num_prefill_seqs=1, num_decode_seqs=3, num_spec_tokens=2,
                  decode_context_tokens=300, prefill_context_tokens=16, prefill_attention_work=99,
                  num_swap_tokens=4, num_padding_tokens=1, num_spec_seqs=1)
    p = padded(s, 20)
    assert p.num_tokens == 20 and p.num_padding_tokens == 1 + 7
    assert (p.decode_context_tokens, p.prefill_attention_work, p.num_swap_tokens) == (300, 99, 4)
    assert padded(s, 5) is s


def test_random_arrivals_in_lockstep_free_every_block():
    """Sixty requests of random sizes over three lock-step ranks: all finish, every rank's
    pool is whole again, and steps taken together share start and duration."""
    import random

    rng = random.Random(5)
    reqs = [Request(str(i), rng.uniform(0, 0.2), rng.randint(1, 300), rng.randint(2, 40))
            for i in range(60)]
    reqs.sort(key=lambda r: r.arrival_time)
    ranks = _ranks(3)
    sim = Simulation(reqs, ranks, _step_time, router=Router("round_robin"), lockstep=3)
    sim.run()
    assert all(r.state is RequestState.FINISHED for r in reqs)
    for sched in ranks:
        assert sched.allocator.num_free_slots == sched.allocator.num_slots
    by_start: dict[float, set] = {}
    for start, dur in zip(sim.log.columns()["start_s"], sim.log.columns()["duration_s"]):
        by_start.setdefault(start, set()).add(dur)
    assert all(len(d) == 1 for d in by_start.values())


def test_a_moe_with_dp_runs_its_ranks_in_lockstep():
    """DP 2 + EP on Mixtral (roofline): every request finishes and the two ranks' steps start
    together; a dense model's DP ranks stay independent (tests/test_expert_parallel.py)."""
    base = ["model=mixtral-8x7b", "hardware=h100-sxm", "cost_model.source=roofline",
            "parallel.data_parallel_size=2", "parallel.enable_expert_parallel=true",
            "workload.num_requests=120", "workload.arrival.rate=30"]
    res = simulate(None, overrides=base, seed=2)
    assert res.summary["completed"] == 120
    starts = {0: set(), 1: set()}
    for rep, start in zip(res.steps["replica"], res.steps["start_s"]):
        starts[rep].add(start)
    # Whenever both ranks had work they stepped at the same instants.
    assert len(starts[0] & starts[1]) > 0.5 * min(len(starts[0]), len(starts[1]))
