"""A chaos run at small scale (`rl/chaos.py`): sandbox starts that fail or are slow,
sandboxes that die mid-episode, engine errors and hanging hidden tests, all in one run of two
steps that stops and resumes. Every episode ends in exactly one recorded outcome, every fault
is accounted for, each step's metrics add up, concurrent starts stay under the cap, and nothing
outlives the run."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from uni_agent_core.rl.chaos import Faults, run_chaos
from uni_agent_core.types import ExitReason

ROOT = Path(__file__).resolve().parents[3]
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"
FAULTS = Faults(
    start_failure=0.25, slow_start_s=0.02, dies=0.2, engine_error=0.1, hanging_tests=0.25, seed=3
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return asyncio.run(
        run_chaos(
            recipe_path=ROOT / "recipes" / "ci-smoke.yaml",
            faults=FAULTS,
            steps=2,
            batch_size=2,
            group_size=6,
            max_concurrent_starts=3,
            work=tmp_path_factory.mktemp("chaos"),
            overrides=[f"sandbox.isolation={ISOLATION}"],
        )
    )


def test_every_episode_ends_in_exactly_one_recorded_outcome(report) -> None:
    assert report.launched_groups == 4 and len(report.episodes) == 4 * 6
    keys = [(r.group_id, r.sample_index) for r in report.episodes]
    assert len(set(keys)) == len(keys)  # none lost, none counted twice, across the resume
    assert all(isinstance(r.exit_reason, ExitReason) for r in report.episodes)


def test_every_fault_is_accounted_for(report) -> None:
    outcomes, pool = report.outcomes(), report.pool
    assert report.fired["start_failure"] > 0 and report.fired["dies"] > 0
    # each failed start was retried or, after the last retry, given up on
    assert pool["start_failures"] == report.fired["start_failure"]
    assert pool["retries"] + pool["exhausted"] == pool["start_failures"]
    # an episode meets at most one fatal sandbox fault: its agent's sandbox died or never
    # started (then no verifier sandbox), or its verifier's did
    assert outcomes["sandbox_error"] == report.fired["dies"] + pool["exhausted"]
    hanging = [r for r in report.episodes if r.task_id in report.hanging_tasks]
    assert outcomes["test_timeout"] <= len(hanging)
    assert all(
        r.exit_reason is not ExitReason.TEST_TIMEOUT
        for r in report.episodes
        if r.task_id not in report.hanging_tasks
    )
    assert outcomes["engine_error"] <= report.fired["engine_error"]


def test_each_steps_metrics_add_up(report) -> None:
    assert len(report.step_metrics) == 2
    for row in report.step_metrics:
        assert row["train/episodes"] == 12
        exits = sum(v for k, v in row.items() if k.startswith("train/exit/"))
        assert exits == pytest.approx(1.0, abs=1e-4)  # each fraction is rounded when logged
    assert (
        sum(row["sandbox/start_failures"] for row in report.step_metrics)
        == (report.pool["start_failures"])
    )


def test_starts_stay_under_the_cap_and_nothing_outlives_the_run(report) -> None:
    assert 1 <= report.pool["starting_peak"] <= 3
    assert report.pool["closed"] == report.pool["start_attempts"]
    assert report.leftover_sandboxes == []
    assert report.leftover_processes == []
    assert report.leftover_cgroups == []
