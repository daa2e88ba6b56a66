"""Shell tasks through the real rollout path: the gateway, the ReAct harness, a local sandbox
and the shell environment, with a scripted engine playing the model."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from support.scripted_driver import scripted_driver
from support.tasks import TEST_KEY

from uni_agent_core.config import load_recipe
from uni_agent_core.envs.shell.generator import GeneratedShellTask, generate, write_dataset
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.rl.sft import tool_call
from uni_agent_core.types import ExitReason, RolloutResult

ROOT = Path(__file__).resolve().parents[3]
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> GeneratedShellTask:
    """An L0 task (write a file with one given line), loaded back from its dataset."""
    made = generate(1, 4, levels=["L0"], key=TEST_KEY)[0]
    root = tmp_path_factory.mktemp("shell-set")
    write_dataset([made], root, key=TEST_KEY)
    return GeneratedShellTask(load_task_file(root)[0], made.reference)


def _episode(generated: GeneratedShellTask, replies: list[str]) -> tuple[RolloutResult, str]:
    """One episode; returns its result and the first prompt the engine was sent."""
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", [f"sandbox.isolation={ISOLATION}"])

    async def run() -> tuple[RolloutResult, str]:
        async with scripted_driver(recipe, dict(enumerate(replies))) as (driver, engine):
            result = await driver.episode(generated.task, 0, seed=0)
        return result, engine.tokenizer.decode(engine.requests[0].prompt_ids)

    return asyncio.run(run())


def test_submitting_at_once_scores_zero_and_records_the_check_report(generated) -> None:
    result, prompt = _episode(generated, [tool_call("submit", {})])
    assert "You are in a Linux shell; your working directory is" in prompt
    assert generated.task.problem_statement in prompt
    assert result.exit_reason is ExitReason.SUBMITTED and result.error is None
    assert result.reward == 0.0 and not result.resolved and result.task_env == "shell"
    assert result.diff.startswith("shell checks: 0 of 2 passed")
    assert "fail content:" in result.diff
    assert result.verification is not None and result.verification.tests_run == 2


def test_shell_calls_that_solve_the_task_score_one(generated) -> None:
    solve = tool_call("shell", {"command": generated.reference})
    result, _ = _episode(generated, [solve, tool_call("submit", {})])
    assert result.exit_reason is ExitReason.SUBMITTED and result.error is None
    assert result.reward == 1.0 and result.resolved
    assert result.diff.startswith("shell checks: 2 of 2 passed")
    assert [call.name for call in result.tool_calls] == ["shell", "submit"]
    assert all(t.reward == 1.0 for t in result.trajectories)
