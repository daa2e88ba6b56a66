"""The cluster simulator: conservation, cache semantics, the replica model, determinism, bench."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from uni_agent_core.router.sim import (
    HF_CPU_TINY,
    SWE,
    VLLM_H200,
    ClusterSim,
    Job,
    Replica,
    simulate,
)
from uni_agent_core.router.sim.profiles import prefill_pairs

ROOT = Path(__file__).resolve().parents[3]
SHORT = SWE.with_max_turns(5)


def _drain(replica: Replica, now: float = 0.0) -> float:
    """Run a replica until it is idle; returns the time it got there."""
    end = replica.plan(now)
    while end is not None:
        now = end
        replica.finish_step()
        end = replica.plan(now)
    return now


@pytest.mark.parametrize(
    "profile",
    [VLLM_H200, VLLM_H200.with_capacity(40_000), HF_CPU_TINY],
    ids=["vllm", "vllm-tight-memory", "hf"],
)
def test_every_request_completes_exactly_once(profile) -> None:
    sim = ClusterSim(profile, "least_requests", SHORT, 16, replicas=2, seed=1)
    metrics = sim.run()
    expected = {f"{s.session_id}/{t}" for s in sim.sessions for t in range(s.turns_done)}
    assert all(s.finished for s in sim.sessions)
    assert len(sim.completed) == len(set(sim.completed)) == len(expected)
    assert set(sim.completed) == expected
    assert metrics.requests == len(expected)
    counters = sim.core.counters
    assert counters.dispatched == counters.completed == len(expected)
    assert sum(r.stats.requests for r in sim.replicas) == len(expected)
    for replica in sim.replicas:
        assert not (replica.waiting or replica.running or replica.prefilling or replica.n_decode)
        assert replica.own_tokens == 0 and replica.pinned.size == 0
    assert metrics.output_tokens > 0 and metrics.makespan_s > 0


def test_full_memory_preempts_the_newest_request_which_resumes_from_cache() -> None:
    replica = Replica(0, VLLM_H200.with_capacity(1000))
    first = Job(key=1, prompt_len=400, output_len=300, blocks=list(range(1, 50)), arrival=0.0)
    second = Job(key=2, prompt_len=400, output_len=300, blocks=list(range(100, 150)), arrival=0.0)
    replica.enqueue(first)
    replica.enqueue(second)
    _drain(replica)
    assert replica.stats.preemptions == 1
    assert first.state == second.state == "done"
    assert first.generated == second.generated == 300
    assert first.finished_at < second.finished_at
    # Preempted after ~100 tokens, it waits at the head of the queue, then is re-admitted with
    # prompt + generated tokens (~500): what the first request's growth did not evict from its
    # cached blocks is reused, the rest recomputed.
    recomputed = replica.stats.prefill_tokens - (400 + 400)
    assert 0 < recomputed < 400
    assert replica.stats.evicted_tokens > 0
    assert replica.own_tokens == 0 and replica.pinned.size == 0


def test_no_cache_means_no_hits() -> None:
    metrics = simulate(HF_CPU_TINY.with_capacity(None, 0), "sticky", SHORT, 8, replicas=2)
    assert metrics.cache_hit_rate == 0.0
    assert metrics.prefill_tokens == metrics.prompt_tokens


def test_single_session_on_one_replica_mostly_hits() -> None:
    metrics = simulate(VLLM_H200, "round_robin", SWE, 1, replicas=1, seed=3)
    assert metrics.requests >= 10
    assert metrics.cache_hit_rate > 0.85
    assert metrics.preemptions == 0 and metrics.evicted_tokens == 0


def test_replica_prices_a_lone_prefill_and_reuses_a_cached_prompt() -> None:
    replica = Replica(0, VLLM_H200)
    blocks = list(range(1, 200))  # stand-in chained block hashes of one token sequence
    first = Job(key=1, prompt_len=810, output_len=10, blocks=blocks, arrival=0.0)
    replica.enqueue(first)
    end = replica.plan(0.0)
    assert end == pytest.approx(VLLM_H200.iteration_time(810, prefill_pairs(0, 810), 0, 0))
    now = _drain(replica)
    assert first.finished_at == now and first.cached_tokens == 0
    assert replica.stats.prefill_tokens == 810
    # The same prompt again: every full block is cached, only the partial last block is computed.
    second = Job(key=2, prompt_len=810, output_len=10, blocks=blocks, arrival=now)
    replica.enqueue(second)
    _drain(replica, now)
    assert second.cached_tokens == 800
    assert replica.stats.prefill_tokens - 810 == 10 < VLLM_H200.block_size
    assert replica.stats.decode_tokens == 20


def test_a_prompt_block_is_reused_as_soon_as_a_scheduled_chunk_fills_it() -> None:
    # vLLM V1: a full block joins the cache when it is allocated, so requests sharing a prefix
    # that arrive together (a GRPO group) compute it once, within one step or across chunks.
    replica = Replica(0, VLLM_H200)
    blocks = list(range(1, 1000))
    budget = VLLM_H200.max_batch_tokens
    assert budget is not None
    long_prompt = budget + 3810
    jobs = [
        Job(key=i, prompt_len=length, output_len=5, blocks=blocks, arrival=0.0)
        for i, length in enumerate((810, 810, long_prompt, long_prompt))
    ]
    for job in jobs:
        replica.enqueue(job)
    _drain(replica)
    short, same_step, chunked, after_chunks = jobs
    assert short.cached_tokens == 0
    assert same_step.cached_tokens == 800  # admitted in the first step, after `short`
    # `chunked` is admitted in the same step with what is left of the budget and matches the
    # 800 tokens; `after_chunks` waits for room and then finds every full block of the prompt.
    assert chunked.cached_tokens == 800
    block = VLLM_H200.block_size
    assert after_chunks.cached_tokens == long_prompt // block * block
    assert all(job.state == "done" for job in jobs)
    assert replica.own_tokens == 0 and replica.pinned.size == 0


def test_a_separate_cache_learns_a_prompt_only_when_its_request_finishes() -> None:
    replica = Replica(0, HF_CPU_TINY)
    blocks = list(range(1, 100))
    jobs = [Job(key=i, prompt_len=400, output_len=5, blocks=blocks, arrival=0.0) for i in (1, 2)]
    for job in jobs:
        replica.enqueue(job)
    _drain(replica)
    assert [job.cached_tokens for job in jobs] == [0, 0]


def test_decode_steps_aggregate_exactly(monkeypatch) -> None:
    aggregated = simulate(VLLM_H200, "least_requests", SHORT, 8, replicas=2, seed=2)
    monkeypatch.setattr(Replica, "_decode_run_length", lambda self: 1)
    stepwise = simulate(VLLM_H200, "least_requests", SHORT, 8, replicas=2, seed=2)
    assert stepwise.requests == aggregated.requests
    assert stepwise.makespan_s == pytest.approx(aggregated.makespan_s, rel=1e-9)
    assert stepwise.latency_p99_s == pytest.approx(aggregated.latency_p99_s, rel=1e-9)
    assert stepwise.prefill_tokens == aggregated.prefill_tokens


def test_least_requests_prefills_more_than_sticky() -> None:
    spread = simulate(VLLM_H200, "least_requests", SHORT, 16, replicas=4, seed=0)
    sticky = simulate(VLLM_H200, "sticky", SHORT, 16, replicas=4, seed=0)
    assert spread.prefill_tokens > 1.5 * sticky.prefill_tokens
    assert spread.cache_hit_rate < sticky.cache_hit_rate


def test_same_seed_same_result() -> None:
    one = simulate(VLLM_H200, "token_load", SHORT, 12, replicas=2, seed=7).as_dict()
    two = simulate(VLLM_H200, "token_load", SHORT, 12, replicas=2, seed=7).as_dict()
    other = simulate(VLLM_H200, "token_load", SHORT, 12, replicas=2, seed=8).as_dict()
    assert one == two
    assert one != other


def test_bench_quick_writes_the_table(tmp_path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("bench_router", ROOT / "bench" / "router.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "router.json"
    bench.main(["--quick", "--headroom", "--json", str(out)])
    data = json.loads(out.read_text())
    keys = {"profile", "replicas", "loads", "seed", "runs", "targets", "headroom", "wall_s"}
    assert keys <= set(data)
    assert len(data["runs"]) == 5 * 2 * 3
    columns = [metric for _, metric, _ in bench.COLUMNS]
    for run in data["runs"]:
        assert set(columns) <= set(run) and set(columns) == set(run["ratios"])
        if run["policy"] == "least_requests":
            assert all(r in (1.0, None) for r in run["ratios"].values())
    assert {t["workload"] for t in data["targets"]} == {"swe", "mixed"}
    assert [e["workload"] for e in data["headroom"]] == ["swe", "mixed"]
    for entry in data["headroom"]:
        assert entry["sessions"] == 8
        for policy in ("token_load", "cache_aware"):
            measured = entry[f"{policy}_measured_s"]
            assert entry["floor_s"] <= measured  # the floor prices prefill as the runs do
            assert entry[f"{policy}_free_prefill_s"] <= measured
    out_text = capsys.readouterr().out
    assert "token_load" in out_text
    assert "token_load throughput vs cache_aware: measured" in out_text
