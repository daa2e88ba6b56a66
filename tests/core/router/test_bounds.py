"""Makespan bounds of a rollout batch: the floor holds for every policy and is tight alone."""

from __future__ import annotations

import pytest

from uni_agent_core.router.policies import POLICIES
from uni_agent_core.router.sim import HF_CPU_TINY, MIXED, SWE, VLLM_H200, simulate
from uni_agent_core.router.sim.bounds import makespan_floor, with_free_prefill

SHORT = SWE.with_max_turns(6)


@pytest.mark.parametrize("profile", [VLLM_H200, HF_CPU_TINY], ids=["vllm", "hf"])
@pytest.mark.parametrize("workload", [SHORT, MIXED.with_max_turns(6)], ids=["swe", "mixed"])
def test_a_lone_session_on_one_replica_meets_its_floor_within_a_percent(profile, workload) -> None:
    floor = makespan_floor(profile, workload, 1, seed=3)
    simulated = simulate(profile, "token_load", workload, 1, replicas=1, seed=3).makespan_s
    # Alone, only its first prompt (uncached) and partial blocks are computed beyond the floor.
    assert floor.makespan_s <= simulated <= 1.01 * floor.makespan_s
    assert floor.session_id == "s0"
    assert floor.makespan_s == pytest.approx(floor.pauses_s + floor.serving_s)
    assert floor.turns >= 1


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_no_policy_beats_the_floor_of_a_crowded_batch(policy) -> None:
    # 32 sessions on 2 replicas with a tight memory: contention, evictions and preemption.
    profile = VLLM_H200.with_capacity(60_000)
    floor = makespan_floor(profile, SHORT, 32, seed=1)
    run = simulate(profile, policy, SHORT, 32, replicas=2, seed=1)
    assert run.makespan_s >= floor.makespan_s
    alone = [makespan_floor(profile, SHORT, n, seed=1).makespan_s for n in (8, 16)]
    assert alone[0] <= alone[1] <= floor.makespan_s  # more sessions, never a lower floor


def test_free_prefill_costs_nothing_to_prefill_and_the_rest_as_before() -> None:
    free = with_free_prefill(VLLM_H200)
    assert free.name == "vllm_h200+free_prefill"
    assert free.iteration_time(8192, 3e7, 4, 10_000) == VLLM_H200.iteration_time(0, 0, 4, 10_000)
    assert free.iteration_time(0, 0, 4, 10_000) == VLLM_H200.iteration_time(0, 0, 4, 10_000)
    real = simulate(VLLM_H200, "least_requests", SHORT, 32, replicas=2, seed=1)
    costless = simulate(free, "least_requests", SHORT, 32, replicas=2, seed=1)
    assert costless.output_tokens == real.output_tokens
    assert costless.makespan_s < real.makespan_s


def test_a_floor_needs_a_session() -> None:
    with pytest.raises(ValueError, match="sessions must be at least 1"):
        makespan_floor(VLLM_H200, SHORT, 0, seed=0)
