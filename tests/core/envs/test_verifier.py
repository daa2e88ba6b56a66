"""The verifier scores diffs in a fresh sandbox with the hidden tests applied over them."""

import asyncio

import pytest
from support.tasks import micro_swe_tasks, sandbox_config, sandbox_factory

from uni_agent_core.config.reward import PartialCreditRewardConfig, ResolvedRewardConfig
from uni_agent_core.envs.patches import patched_files, unified_patch
from uni_agent_core.envs.verifier import Verifier
from uni_agent_core.envs.workspace import (
    TaskDataError,
    prepare_agent_workspace,
    sandbox_overrides,
)
from uni_agent_core.sandbox.factory import build_sandbox


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return micro_swe_tasks(tmp_path_factory.mktemp("micro-swe"), n=4, seed=11)


def _verify(task, diff, reward=None):
    return asyncio.run(Verifier(sandbox_factory(), reward).verify(task, diff))


def test_gold_patch_scores_one_and_empty_diff_zero(tasks) -> None:
    for task in tasks:
        gold = asyncio.run(Verifier(sandbox_factory()).oracle(task))
        assert (gold.reward, gold.resolved, gold.mode) == (1.0, True, "oracle"), gold.log_tail
        empty = _verify(task, "")
        assert empty.reward == 0.0 and empty.report is not None
        assert set(empty.report.fail_to_pass_failed) == set(task.FAIL_TO_PASS)
        assert not empty.report.pass_to_pass_failed


def test_a_diff_that_rewrites_the_tests_scores_zero(tasks) -> None:
    """Gutting the visible test file is undone: the hidden tests are applied over the base."""
    task = tasks[0]
    test_file = patched_files(task.test_patch)[0]
    repo = task.source["repo_dir"]
    with open(f"{repo}/{test_file}") as handle:
        before = handle.read()
    gutted = "import unittest\n\n\nclass TestNothing(unittest.TestCase):\n    pass\n"
    cheat = unified_patch({test_file: before}, {test_file: gutted})
    verdict = _verify(task, cheat)
    assert verdict.patch_applied and verdict.test_patch_applied
    assert verdict.reward == 0.0 and not verdict.resolved
    also_deleting = unified_patch({test_file: before}, {})
    assert _verify(task, also_deleting).reward == 0.0


def test_gold_plus_test_edits_still_scores_one(tasks) -> None:
    task = tasks[1]
    test_file = patched_files(task.test_patch)[0]
    with open(f"{task.source['repo_dir']}/{test_file}") as handle:
        before = handle.read()
    edit = unified_patch({test_file: before}, {test_file: before + "# agent note\n"})
    assert _verify(task, task.patch + edit).reward == 1.0


def test_a_diff_that_does_not_apply_scores_zero(tasks) -> None:
    task = tasks[2]
    broken = task.patch.replace("\n-    ", "\n-    this_line_is_not_in_the_file()  # ", 1)
    verdict = _verify(task, broken)
    assert not verdict.patch_applied and verdict.reward == 0.0 and verdict.report is None


def test_partial_credit_for_one_of_two_bugs(tasks) -> None:
    task = tasks[3]  # L3: two bugs in two files
    assert task.difficulty == "L3"
    first_file = task.patch.split("diff --git")[1]
    half = "diff --git" + first_file
    binary = _verify(task, half, ResolvedRewardConfig())
    partial = _verify(task, half, PartialCreditRewardConfig())
    assert binary.reward == 0.0
    assert 0.0 < partial.reward < 1.0


def test_tests_that_time_out_score_zero(tasks) -> None:
    task = tasks[0].model_copy(update={"test_cmd": "sleep 30"})
    verdict = _verify(task, task.patch, ResolvedRewardConfig(test_timeout_s=1))
    assert verdict.timed_out and verdict.reward == 0.0


def test_agent_sandbox_never_holds_hidden_tests_or_task_data(tasks) -> None:
    task = tasks[0]
    hidden_method = task.FAIL_TO_PASS[0].split(" ")[0]
    dataset_dir = task.source["hide"][0]

    async def look() -> tuple[str, str, str]:
        config = sandbox_config()
        async with build_sandbox(config, **sandbox_overrides(task, config)) as sandbox:
            await prepare_agent_workspace(sandbox, task)
            grep = await sandbox.exec(f"grep -rl {hidden_method} . || echo none")
            data = await sandbox.exec(f"ls {dataset_dir} 2>&1 | head -3; echo end")
            log = await sandbox.exec("git log --all --oneline | wc -l")
            return grep.stdout, data.stdout, log.stdout

    grep, data, commits = asyncio.run(look())
    assert grep.strip() == "none"
    if sandbox_config().isolation == "bubblewrap":
        assert "tasks.jsonl" not in data and "repos" not in data
    assert commits.strip() == "1"


def test_image_tasks_refuse_the_local_sandbox() -> None:
    from uni_agent_core.types import TaskSpec

    task = TaskSpec(
        instance_id="a__b-1", problem_statement="x", source={"type": "image", "image": "img"}
    )
    with pytest.raises(TaskDataError, match="cannot run images"):
        sandbox_overrides(task, sandbox_config())


def test_changed_sources_are_refused(tasks, tmp_path) -> None:
    task = tasks[0].model_copy(update={"base_commit": "0" * 40})
    with pytest.raises(TaskDataError, match="sources changed"):
        asyncio.run(Verifier(sandbox_factory()).oracle(task))
