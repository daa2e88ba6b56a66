"""Data validation flags each kind of broken task, and never a valid one."""

import asyncio
import json
from pathlib import Path

import pytest
from support.tasks import micro_swe_tasks, sandbox_factory

from uni_agent_core.envs.patches import unified_patch
from uni_agent_core.envs.validation import (
    Defect,
    statement_leaks_patch,
    validate_tasks,
    write_report,
)

FLAKY_TEST = """\
import os
import unittest


class TestFlaky(unittest.TestCase):
    def test_counter(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "flaky-counter")
        count = int(open(path).read()) if os.path.exists(path) else 0
        with open(path, "w") as handle:
            handle.write(str(count + 1))
        self.assertEqual(count % 2, 0)
"""


def _broken(tasks):
    """One task per defect kind, each derived from a valid generated task."""
    t = iter(tasks)
    yield Defect.GOLD_DOES_NOT_FIX, _gold_does_not_fix(next(t))
    task = next(t)
    yield (
        Defect.TESTS_PASS_BEFORE_FIX,
        task.model_copy(update={"FAIL_TO_PASS": [*task.FAIL_TO_PASS, task.PASS_TO_PASS[0]]}),
    )
    task = next(t)
    flaky = unified_patch({}, {"tests/test_flaky.py": FLAKY_TEST})
    yield (
        Defect.FLAKY,
        task.model_copy(
            update={
                "test_patch": task.test_patch + flaky,
                "PASS_TO_PASS": [
                    *task.PASS_TO_PASS,
                    "test_counter (tests.test_flaky.TestFlaky.test_counter)",
                ],
            }
        ),
    )
    task = next(t)
    yield (
        Defect.GOLD_PATCH_DOES_NOT_APPLY,
        task.model_copy(
            update={"patch": task.patch.replace("\n-    ", "\n-    not_in_the_file()  # ", 1)}
        ),
    )
    task = next(t)
    yield (
        Defect.STATEMENT_LEAKS_PATCH,
        task.model_copy(
            update={
                "problem_statement": task.problem_statement + "\n```diff\n" + task.patch + "```\n"
            }
        ),
    )
    task = next(t)
    yield Defect.EMPTY_STATEMENT, task.model_copy(update={"problem_statement": "  \n"})
    task = next(t)
    yield (
        Defect.TEST_PATCH_DOES_NOT_APPLY,
        task.model_copy(
            update={"test_patch": task.test_patch.replace("tests/test_", "tests/renamed_test_")}
        ),
    )


def _gold_does_not_fix(task):
    readme = Path(task.source["repo_dir"], "README.md").read_text()
    return task.model_copy(
        update={"patch": unified_patch({"README.md": readme}, {"README.md": readme + "More.\n"})}
    )


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return micro_swe_tasks(tmp_path_factory.mktemp("micro-swe"), n=11, seed=21)


def test_each_defect_kind_is_flagged_and_valid_tasks_pass(tasks, tmp_path) -> None:
    broken = list(_broken(tasks[:7]))
    valid = tasks[7:]
    inputs = [task for _, task in broken] + valid
    seen: list[tuple[int, int]] = []
    report = asyncio.run(
        validate_tasks(
            inputs,
            sandbox_factory(),
            reruns=3,
            concurrency=2,
            on_result=lambda done, total, _: seen.append((done, total)),
        )
    )
    results = {result.instance_id: result for result in report.tasks}
    for defect, task in broken:
        assert defect in results[task.instance_id].defects, (defect, results[task.instance_id])
    for task in valid:
        assert results[task.instance_id].valid, results[task.instance_id]
    assert report.total == 11 and report.valid == len(valid)
    assert sorted(seen)[-1] == (11, 11)
    for defect, _ in broken:
        assert report.by_defect[str(defect)] >= 1

    target = write_report(report, tmp_path, source="fixtures")
    saved = json.loads(target.read_text())
    assert saved["valid"] == len(valid) and set(saved["valid_ids"]) == {
        t.instance_id for t in valid
    }
    markdown = (tmp_path / "validation.md").read_text()
    assert f"**{len(valid)} / 11 valid" in markdown and "| flaky |" in markdown


def test_naming_a_fix_in_prose_is_not_a_leak(tasks) -> None:
    level0 = tasks[0]
    assert level0.difficulty == "L0"
    assert not statement_leaks_patch(level0.problem_statement, level0.patch)
    assert statement_leaks_patch("Apply:\n" + level0.patch, level0.patch)
