"""The async RL cluster model: determinism, the published directions, staleness, conservation."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from uni_agent_core.router.sim.workloads import SWE
from uni_agent_core.sim.async_rl import (
    MODES,
    AsyncRLConfig,
    UniAgentComparison,
    format_table,
    reproduce_uni_agent,
    simulate_training,
)

ROOT = Path(__file__).resolve().parents[3]

# A small cluster for the mechanics: 2 nodes (1 trainer + 1 rollout in the separate modes),
# 8 tasks x 8 samples a step, sessions cut to 12 turns.
SMALL = AsyncRLConfig(
    nodes=2, trainer_nodes=1, tasks_per_step=8, steps=3, workload=SWE.with_max_turns(12)
)


@pytest.fixture(scope="module")
def default_cluster() -> UniAgentComparison:
    """The default 8-node cluster and pool split, with a smaller batch (64 x 8) and 3 steps to
    keep the test quick (the bench runs 128 x 8 for 8 steps)."""
    return reproduce_uni_agent(replace(AsyncRLConfig(), tasks_per_step=64, steps=3), seed=0)


@pytest.fixture(scope="module")
def small() -> dict[str, object]:
    return {mode: simulate_training(mode, SMALL, seed=3) for mode in MODES}


def test_deterministic_for_a_seed() -> None:
    for mode in ("colocated", "separate_role_switching"):
        first = simulate_training(mode, SMALL, seed=5).to_dict()
        assert simulate_training(mode, SMALL, seed=5).to_dict() == first
    assert simulate_training("sync", SMALL, 5).wall_s != simulate_training("sync", SMALL, 6).wall_s


def test_published_directions_hold_on_the_default_cluster(default_cluster) -> None:
    sync = default_cluster.by_mode("sync")
    assert default_cluster.by_mode("colocated").wall_s < sync.wall_s
    assert default_cluster.by_mode("separate").wall_s < sync.wall_s
    assert default_cluster.colocated_wall_change < 0
    assert default_cluster.separate_wall_change < 0
    assert default_cluster.role_switching_throughput_gain > 0.01
    for r in default_cluster.results:
        assert r.steps == 3
        assert r.samples_trained == 3 * 64 * 8
        assert r.nodes == 8


def test_sync_is_on_policy_and_async_modes_respect_the_staleness_bound(
    default_cluster, small
) -> None:
    for results in (default_cluster.results, list(small.values())):
        for r in results:
            if r.mode == "sync":
                assert r.staleness_max == 0 and r.staleness_mean == 0.0
                assert r.samples_dropped == 0
            else:
                assert r.staleness_max <= 1
    # the async modes really do run ahead of the trainer
    assert default_cluster.by_mode("colocated").staleness_mean > 0


def test_stricter_bound_is_on_policy() -> None:
    strict = replace(SMALL, max_staleness=0)
    for mode in ("colocated", "separate"):
        r = simulate_training(mode, strict, seed=1)
        assert r.staleness_max == 0
        assert r.samples_trained == SMALL.steps * SMALL.samples_per_step


def test_every_launched_sample_is_accounted_for(default_cluster, small) -> None:
    for r in [*default_cluster.results, *small.values()]:
        assert r.samples_trained == r.steps * r.samples_per_step
        assert r.samples_launched == (
            r.samples_trained + r.samples_dropped + r.samples_ready + r.samples_in_flight
        ), r.mode
        assert r.samples_per_s == pytest.approx(r.samples_trained / r.wall_s)
        assert r.tokens_trained > 0 and r.tokens_generated > 0
    sync = small["sync"]
    assert sync.samples_launched == sync.samples_trained  # sync trains exactly what it launched
    assert sync.samples_in_flight == sync.samples_ready == 0


def test_trainer_idle_and_utilisation(default_cluster, small) -> None:
    for results in (default_cluster, UniAgentComparison(list(small.values()))):
        sync = results.by_mode("sync")
        assert sync.trainer_idle_frac == 0.0
        assert results.by_mode("colocated").trainer_idle_frac == 0.0
        assert results.by_mode("separate").trainer_idle_frac > 0.0
        switching = results.by_mode("separate_role_switching")
        assert switching.trainer_idle_frac == 0.0 and switching.trainer_lent_s > 0
        for r in results.results:
            assert 0.0 < r.rollout_util <= 1.0
            parts = r.train_s + r.trainer_wait_s + r.trainer_lent_s + r.trainer_switch_s
            assert parts <= r.wall_s + 1e-6
    # the long tail: sync's replicas idle while the slowest episodes finish
    assert default_cluster.by_mode("sync").rollout_util < (
        default_cluster.by_mode("colocated").rollout_util
    )


def test_training_time_scales_with_tokens_and_gpus() -> None:
    config = AsyncRLConfig()
    one = config.train_time_s([20_000], gpus=16)
    assert config.train_time_s([20_000, 20_000], gpus=16) == pytest.approx(2 * one)
    assert config.train_time_s([20_000], gpus=32) == pytest.approx(one / 2)
    # 8 N L + 4 x attention FLOPs at 40% of 989 TFLOPS per GPU
    flops = 8 * 8.03e9 * 20_000 + 4 * 524_288 * 20_000 * 20_001 / 2
    assert one == pytest.approx(flops / (16 * 989e12 * 0.4))


def test_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        simulate_training("fully_async", SMALL)
    with pytest.raises(ValueError, match="trainer_nodes"):
        simulate_training("separate", replace(SMALL, trainer_nodes=2))


def test_format_table(default_cluster) -> None:
    table = format_table(default_cluster)
    lines = table.splitlines()
    assert lines[0].startswith("| mode | wall clock (h) | vs sync | samples/s")
    assert [line.split("|")[1].strip() for line in lines[2:6]] == list(MODES)
    assert "Uni-Agent published" in table and "-35.4%" in table
    assert "Uni-Agent" not in format_table(default_cluster.results[:2])


def test_bench_json(capsys) -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_async_cluster", ROOT / "bench" / "async_cluster.py"
    )
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--nodes", "2", "--tasks", "4", "--steps", "2", "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert [r["mode"] for r in payload["results"]] == list(MODES)
    assert payload["config"]["trainer_nodes"] == 1
    assert set(payload["ratios"]) == set(payload["published"])
