"""The shell environment in a real local sandbox: prepare writes the starting files and hides
the checks, observe runs the hidden check on the final state, score turns the report into the
reward the reward section asks for."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence

import pytest
from support.tasks import TEST_KEY, sandbox_factory

from uni_agent_core.config.reward import (
    PartialCreditRewardConfig,
    ResolvedRewardConfig,
    RewardConfig,
)
from uni_agent_core.envs.environment import (
    EnvironmentContext,
    EpisodeFacts,
    Observation,
    Outcome,
    environment_class,
)
from uni_agent_core.envs.reward_rules import score_under_rules
from uni_agent_core.envs.shell.environment import ShellEnvironment
from uni_agent_core.envs.shell.generator import GeneratedShellTask, generate, write_dataset
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.envs.workspace import TaskDataError
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall

BUBBLEWRAP = shutil.which("bwrap") is not None


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, GeneratedShellTask]:
    """One task per template, loaded back from a written dataset (so `source.hide` is set)."""
    made = generate(8, 0, key=TEST_KEY)
    root = tmp_path_factory.mktemp("shell-set")
    write_dataset(made, root, key=TEST_KEY)
    loaded = {task.instance_id: task for task in load_task_file(root)}
    return {
        g.task.instance_id.split("__")[1].split("-")[0]: GeneratedShellTask(
            loaded[g.task.instance_id], g.reference
        )
        for g in made
    }


def _episode(
    task: TaskSpec,
    solve: str | None = None,
    *,
    reward: RewardConfig | None = None,
    exit_reason: ExitReason = ExitReason.SUBMITTED,
    tool_calls: Sequence[ToolCall] = (),
    probe: str | None = None,
) -> tuple[Observation, Outcome, str]:
    """Prepare, optionally run `solve` and `probe` (its output is returned), observe, score."""

    async def run() -> tuple[Observation, Outcome, str]:
        factory = sandbox_factory()
        environment = ShellEnvironment(
            EnvironmentContext(factory, reward or ResolvedRewardConfig())
        )
        seen = ""
        async with factory(task) as sandbox:
            await environment.prepare(sandbox, task)
            if probe is not None:
                seen = (await sandbox.exec(probe)).stdout
            if solve is not None:
                done = await sandbox.exec(solve)
                assert done.ok, done.stderr
            observation = await environment.observe(sandbox, task)
        facts = EpisodeFacts(task, exit_reason, tool_calls)
        outcome = await score_under_rules(environment, facts, observation)
        return observation, outcome, seen

    return asyncio.run(run())


def test_the_registry_names_the_shell_environment() -> None:
    assert environment_class("shell") is ShellEnvironment


def test_a_solved_task_scores_one_and_an_untouched_one_zero(generated) -> None:
    task = generated["write_file"]
    observation, outcome, listing = _episode(
        task.task, task.reference, probe="git log --oneline; ls -A"
    )
    assert "shell task start" in listing and "README" in listing
    assert (outcome.reward, outcome.resolved, outcome.timed_out) == (1.0, True, False)
    verification = outcome.verification
    assert verification is not None
    assert (verification.tests_run, verification.passed, verification.failed) == (2, 2, 0)
    assert verification.status == "resolved" and verification.started_at > 0
    assert "shell checks: 2 of 2 passed" in observation.record and "?? " in observation.record
    _, untouched, _ = _episode(task.task)
    assert (untouched.reward, untouched.resolved) == (0.0, False)
    assert untouched.verification.failed == 2 and untouched.verification.status == "unresolved"


def test_the_checks_are_nowhere_in_the_sandbox_while_the_agent_works(generated) -> None:
    task = generated["find_token"].task
    assert "found.txt names" in task.env_data["check"]
    probe = "ls -A ..; grep -rlF -e 'found.txt names' -e __run .. 2>/dev/null | wc -l"
    if BUBBLEWRAP:
        probe += f"; ls -A {task.source['hide'][0]} 2>&1"
    _, _, seen = _episode(task, probe=probe)
    lines = seen.splitlines()
    assert lines[:2] == ["repo", "0"], seen
    if BUBBLEWRAP:
        assert "tasks.jsonl" not in seen and "dataset.key" not in seen


def test_partial_credit_is_the_share_of_checks_passed(generated) -> None:
    task = generated["executable_script"].task
    path = task.problem_statement.split("`")[1]
    line = task.problem_statement.split("`")[3]
    not_executable = f"mkdir -p bin && printf '#!/bin/sh\\necho %s\\n' '{line}' > {path}"
    _, partial, _ = _episode(task, not_executable, reward=PartialCreditRewardConfig())
    assert partial.reward == pytest.approx(1 / 3) and not partial.resolved
    assert (partial.verification.passed, partial.verification.failed) == (1, 2)
    _, binary, _ = _episode(task, not_executable)
    assert binary.reward == 0.0
    bonus = PartialCreditRewardConfig(resolved_bonus=1.0)
    _, with_bonus, _ = _episode(task, not_executable, reward=bonus)
    assert with_bonus.reward == pytest.approx(1 / 6)
    _, full, _ = _episode(task, generated["executable_script"].reference, reward=bonus)
    assert full.reward == 1.0 and full.resolved


def test_unfinished_episodes_follow_reward_unfinished(generated) -> None:
    task = generated["sort_uniq"]
    _, graded, _ = _episode(task.task, task.reference, exit_reason=ExitReason.MAX_TURNS)
    assert graded.reward == 1.0
    zero = ResolvedRewardConfig(unfinished="zero")
    _, zeroed, _ = _episode(
        task.task, task.reference, reward=zero, exit_reason=ExitReason.MAX_TURNS
    )
    assert zeroed.reward == 0.0 and not zeroed.resolved
    assert zeroed.verification.tests_run == 0 and "not graded" in zeroed.verification.error
    penalty = ResolvedRewardConfig(unfinished="penalty", unfinished_penalty=0.5)
    _, penalised, _ = _episode(task.task, reward=penalty, exit_reason=ExitReason.TIMEOUT)
    assert penalised.reward == -0.5
    _, submitted, _ = _episode(task.task, task.reference, reward=penalty)
    assert submitted.reward == 1.0


def test_a_check_that_runs_out_of_time_scores_zero_as_timed_out() -> None:
    task = TaskSpec(
        instance_id="shell__hang",
        problem_statement="wait",
        source={"type": "shell"},
        env="shell",
        env_data={"setup": "true", "check": "sleep 30", "checks": ["never"]},
        reward={"test_timeout_s": 1},
    )
    observation, outcome, _ = _episode(task)
    assert outcome.timed_out and outcome.reward == 0.0 and not outcome.resolved
    assert outcome.verification.timed_out and "timed out" in outcome.verification.error
    assert "timed out" in observation.record


def test_a_leak_attempt_is_flagged_and_zeroed_when_the_recipe_says_so(generated) -> None:
    task = generated["json_key"]
    calls = [ToolCall(name="shell", arguments='{"command": "cat ~/.cache/agent-rl/tasks.jsonl"}')]
    _, flagged, _ = _episode(task.task, task.reference, tool_calls=calls)
    assert flagged.leak_flagged and flagged.reward == 1.0
    zero = ResolvedRewardConfig(leak_audit="zero")
    _, zeroed, _ = _episode(task.task, task.reference, reward=zero, tool_calls=calls)
    assert zeroed.leak_flagged and zeroed.reward == 0.0 and zeroed.resolved


def test_malformed_task_data_and_a_failing_setup_are_refused() -> None:
    base = {"instance_id": "shell__bad", "problem_statement": "x", "source": {"type": "shell"}}
    missing = TaskSpec(**base, env="shell", env_data={"setup": "true"})
    with pytest.raises(TaskDataError, match="check: Field required"):
        _episode(missing)
    broken = TaskSpec(**base, env="shell", env_data={"setup": "exit 3", "check": "true"})
    with pytest.raises(SandboxError, match="setup script failed \\(exit 3\\)"):
        _episode(broken)


def test_a_shell_task_has_no_repository_to_materialize(generated) -> None:
    from uni_agent_core.envs.workspace import materialize_repo

    async def run() -> None:
        async with sandbox_factory()(generated["tar_dir"].task) as sandbox:
            await materialize_repo(sandbox, generated["tar_dir"].task)

    with pytest.raises(TaskDataError, match="is a shell task"):
        asyncio.run(run())
