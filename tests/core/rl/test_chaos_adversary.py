"""Adversarial episodes in a chaos run (`rl/adversary.py`, issue 48): half the tasks are played
by a scripted agent that attacks the gateway and its sandbox's cleanup from inside. The run
completes, every episode is recorded once, the adversary's episodes score 0, the honest ones end
as they do in the same run without adversaries, no side session was ever opened, and nothing
outlives the run."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from uni_agent_core.rl.adversary import adversary_harness
from uni_agent_core.rl.chaos import ChaosReport, Faults, run_chaos

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="the adversary plays in bubblewrap sandboxes linked by socat (make setup installs both)",
)


def _run(work: Path, adversarial: float) -> ChaosReport:
    return asyncio.run(
        run_chaos(
            recipe_path=ROOT / "recipes" / "ci-smoke.yaml",
            faults=Faults(adversarial=adversarial, seed=1),
            steps=2,
            batch_size=2,
            group_size=2,
            max_concurrent_starts=3,
            work=work,
            # a test timeout no busy host reaches: honest outcomes depend on the episode alone
            overrides=["sandbox.isolation=bubblewrap", "reward.test_timeout_s=60"],
            adversary=adversary_harness(flood=20, held=64),  # past the link's cap, and quick
        )
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[ChaosReport, ChaosReport]:
    clean = _run(tmp_path_factory.mktemp("clean"), 0.0)
    attacked = _run(tmp_path_factory.mktemp("attacked"), 0.5)
    return clean, attacked


def _outcomes(report: ChaosReport, tasks: set[str]) -> dict[tuple[str, int], tuple[str, float]]:
    return {
        (r.group_id, r.sample_index): (r.exit_reason.value, r.reward)
        for r in report.episodes
        if r.task_id in tasks
    }


@pytest.mark.slow
def test_the_run_completes_with_every_episode_recorded_once(runs) -> None:
    _, attacked = runs
    assert attacked.adversarial_tasks, "no task drew the adversary; nothing was tested"
    keys = [(r.group_id, r.sample_index) for r in attacked.episodes]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2


def test_adversarial_episodes_score_zero_and_honest_ones_are_unchanged(runs) -> None:
    clean, attacked = runs
    adversarial = [r for r in attacked.episodes if r.task_id in attacked.adversarial_tasks]
    assert adversarial and all(r.reward == 0.0 and r.harness == "blackbox" for r in adversarial)
    assert all(r.exit_reason.value == "finished" for r in adversarial)
    honest = {r.task_id for r in attacked.episodes} - attacked.adversarial_tasks
    assert honest, "every task drew the adversary"
    assert _outcomes(attacked, honest) == _outcomes(clean, honest)
    rewards = {reward for _, reward in _outcomes(clean, honest).values()}
    assert rewards == {0.0, 1.0}, "the comparison would not tell a changed reward"


def test_no_side_session_was_opened_and_nothing_outlives_the_run(runs) -> None:
    for report in runs:
        assert report.sessions_created == len(report.episodes)  # one per episode, none more
        assert report.sessions_left == 0
        assert report.leftover_sandboxes == []
        assert report.leftover_processes == []
        assert report.leftover_cgroups == []
