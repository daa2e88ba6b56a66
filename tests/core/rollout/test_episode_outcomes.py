"""The rollout driver's outcomes beyond the harness's exit: a verifier that times out is
`test_timeout`, and `reward.unfinished` scores an episode the harness stopped before it
submitted (the real gateway, ReAct harness, sandbox and verifier; a scripted engine)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from support.scripted_driver import scripted_driver
from support.tasks import micro_swe_tasks

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.sft import tool_call
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec

ROOT = Path(__file__).resolve().parents[3]
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> TaskSpec:
    return micro_swe_tasks(tmp_path_factory.mktemp("micro-swe"), n=1, seed=5)[0]


def _episode(task: TaskSpec, replies: list[str], overrides: list[str]) -> RolloutResult:
    recipe = load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml", [f"sandbox.isolation={ISOLATION}", *overrides]
    )

    async def run() -> RolloutResult:
        async with scripted_driver(recipe, dict(enumerate(replies))) as (driver, _):
            return await driver.episode(task, 0, seed=0)

    return asyncio.run(run())


def test_a_verifier_that_times_out_ends_the_episode_as_test_timeout(task) -> None:
    hanging = task.model_copy(update={"test_cmd": "sleep 30"})
    result = _episode(hanging, [tool_call("submit", {})], ["reward.test_timeout_s=1"])
    assert result.exit_reason is ExitReason.TEST_TIMEOUT
    assert result.reward == 0.0 and not result.resolved and not result.abnormal
    assert result.verification is not None and result.verification.timed_out
    assert all(t.exit_reason is ExitReason.TEST_TIMEOUT for t in result.trajectories)


def test_a_verifier_that_finishes_keeps_the_harness_exit(task) -> None:
    result = _episode(task, [tool_call("submit", {})], [])
    assert result.exit_reason is ExitReason.SUBMITTED
    assert result.verification is not None and not result.verification.timed_out


LOOPING = [tool_call("shell", {"command": "true"})] * 2
"""Replies that never submit: the harness stops at `max_turns: 2`."""


def test_unfinished_episodes_are_graded_by_default(task) -> None:
    result = _episode(task, LOOPING, ["harness.max_turns=2"])
    assert result.exit_reason is ExitReason.MAX_TURNS and result.reward == 0.0
    assert result.verification is not None and result.verification.tests_run > 0


def test_unfinished_episodes_can_be_penalised_without_running_the_tests(task) -> None:
    overrides = [
        "harness.max_turns=2",
        "reward.unfinished=penalty",
        "reward.unfinished_penalty=0.5",
    ]
    result = _episode(task, LOOPING, overrides)
    assert result.exit_reason is ExitReason.MAX_TURNS and result.reward == -0.5
    assert result.verification is not None and result.verification.tests_run == 0
    assert "not graded" in (result.verification.error or "")
    assert all(t.reward == -0.5 for t in result.trajectories)
    zero = _episode(task, LOOPING, ["harness.max_turns=2", "reward.unfinished=zero"])
    assert zero.reward == 0.0 and zero.verification.tests_run == 0


def test_a_finished_episode_is_graded_whatever_unfinished_says(task) -> None:
    overrides = ["reward.unfinished=penalty", "reward.unfinished_penalty=0.5"]
    result = _episode(task, [tool_call("submit", {})], overrides)
    assert result.exit_reason is ExitReason.SUBMITTED and result.reward == 0.0
    assert result.verification.tests_run > 0


def _episode_with(task: TaskSpec, prepare) -> tuple[RolloutResult, dict[str, int]]:
    """One submitting episode after `prepare(driver)` (issue 48: gateway failures end the
    episode, never the run); returns its result and the driver's error counts."""
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", [f"sandbox.isolation={ISOLATION}"])

    async def run() -> tuple[RolloutResult, dict[str, int]]:
        async with scripted_driver(recipe, {0: tool_call("submit", {})}) as (driver, _):
            prepare(driver)
            return await driver.episode(task, 0, seed=0), dict(driver.errors)

    return asyncio.run(run())


def test_a_full_session_table_ends_the_episode_as_gateway_error(task) -> None:
    def fill(driver) -> None:
        driver.manager.max_sessions = 1
        driver.manager.create()

    result, errors = _episode_with(task, fill)
    assert result.exit_reason is ExitReason.GATEWAY_ERROR and result.abnormal
    assert result.reward == 0.0 and result.trajectories == []
    assert "SessionLimitError" in (result.error or "")
    assert errors == {"SessionLimitError": 1}


def test_a_session_gone_before_the_episode_ends_is_recorded_not_raised(task) -> None:
    def vanish(driver) -> None:
        manager, create = driver.manager, driver.manager.create

        def create_then_lose(**kwargs):
            session, key = create(**kwargs)
            manager.delete(session.session_id)  # expired, or deleted by anyone but the driver
            return session, key

        manager.create = create_then_lose

    result, _ = _episode_with(task, vanish)
    assert result.reward == 0.0 and result.abnormal  # its agent got 401s: an engine error
    assert result.exit_reason is ExitReason.ENGINE_ERROR


def test_a_cancelled_episode_leaves_no_session_behind(task) -> None:
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", [f"sandbox.isolation={ISOLATION}"])

    async def run() -> tuple[int, int]:
        async with scripted_driver(recipe, {}) as (driver, engine):
            engine.delay = 3600.0  # the first model call never ends on its own
            episode = asyncio.create_task(driver.episode(task, 0, seed=0))
            while not engine.requests:
                await asyncio.sleep(0.05)
            during = len(driver.manager)
            episode.cancel()
            await asyncio.gather(episode, return_exceptions=True)
            return during, len(driver.manager)

    assert asyncio.run(run()) == (1, 0)
