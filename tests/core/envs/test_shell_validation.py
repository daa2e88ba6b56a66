"""Data validation of shell tasks: set up in a fresh sandbox, every check must fail on the
starting state; tasks of other non-SWE environments get the static checks only."""

from __future__ import annotations

import asyncio

from support.tasks import TEST_KEY, sandbox_factory

from uni_agent_core.envs.shell.checks import Check, check_script
from uni_agent_core.envs.shell.generator import generate
from uni_agent_core.envs.validation import Defect, validate_tasks
from uni_agent_core.types import TaskSpec


def _shell_task(name: str, setup: str, checks: list[Check], statement: str = "do it") -> TaskSpec:
    return TaskSpec(
        instance_id=f"shell__{name}",
        problem_statement=statement,
        source={"type": "shell"},
        env="shell",
        env_data={
            "setup": setup,
            "check": check_script(checks),
            "checks": [c.name for c in checks],
        },
    )


def test_generated_shell_tasks_are_valid_and_defective_ones_are_caught() -> None:
    generated = [g.task for g in generate(8, 0, key=TEST_KEY)]
    passes_at_start = _shell_task(
        "free", "echo hi > README", [Check("readme", "need_file README"), Check("x", "false")]
    )
    broken_setup = _shell_task("broken", "exit 2", [Check("x", "false")])
    empty = _shell_task("empty", "true", [Check("x", "false")], statement=" ")
    other_env = TaskSpec(
        instance_id="custom__1", problem_statement="anything", env="my_pkg.envs:Custom"
    )
    tasks = [*generated, passes_at_start, broken_setup, empty, other_env]
    report = asyncio.run(validate_tasks(tasks, sandbox_factory(), reruns=2, concurrency=2))
    by_id = {result.instance_id: result for result in report.tasks}
    assert all(by_id[task.instance_id].valid for task in generated), report.by_defect
    assert by_id["shell__free"].defects == [Defect.TESTS_PASS_BEFORE_FIX]
    assert by_id["shell__free"].details["tests_pass_before_fix"] == "readme"
    assert by_id["shell__broken"].defects == [Defect.UNBUILDABLE]
    assert "setup script failed" in by_id["shell__broken"].details["unbuildable"]
    assert Defect.EMPTY_STATEMENT in by_id["shell__empty"].defects
    assert by_id["custom__1"].valid
    assert report.by_difficulty["L0"] == {"total": 4, "valid": 4}
