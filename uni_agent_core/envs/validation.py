"""Data validation, the first stage of the train flow: is each task a fair test?

A task is valid when its statement is non-empty and does not contain the gold patch, its
hidden tests apply, every FAIL_TO_PASS test fails before the fix, the gold patch applies and
makes every FAIL_TO_PASS test pass while every PASS_TO_PASS test keeps passing, and the graded
outcome is identical over `reruns` runs (otherwise the task is flaky). Each failed check is a
`Defect`; a task may have several. The dynamic checks run in one fresh sandbox per task with the
verifier's own steps (restore + apply the test patch, run, apply the gold patch, rerun).

Shell tasks (`env: shell`) have no gold patch or test lists: theirs are set up in a fresh
sandbox and their hidden checks run on the untouched starting state `reruns` times; a check
that passes there is `tests_pass_before_fix`, results that differ are `flaky`. Tasks of any
other non-SWE environment get the static statement check only.

`validate_tasks` returns a `ValidationReport` with counts per defect and per difficulty;
`write_report` stores it as JSON and markdown.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field

from uni_agent_core.envs.grading import TestReport, grade_log
from uni_agent_core.envs.parallel import map_bounded
from uni_agent_core.envs.patches import HUNK_HEADER, added_lines
from uni_agent_core.envs.shell.environment import prepare_shell_workspace, run_checks
from uni_agent_core.envs.verifier import (
    SandboxFactory,
    apply_patch,
    apply_test_patch,
    run_tests,
)
from uni_agent_core.envs.workspace import TaskDataError, materialize_repo
from uni_agent_core.progress import ProgressLines
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.types import TaskSpec

_MIN_LEAK_LINE = 4


class Defect(StrEnum):
    """Why a task is not a fair test."""

    EMPTY_STATEMENT = "empty_statement"
    STATEMENT_LEAKS_PATCH = "statement_leaks_patch"
    NO_FAIL_TO_PASS = "no_fail_to_pass"
    NO_GOLD_PATCH = "no_gold_patch"
    UNBUILDABLE = "unbuildable"
    TEST_PATCH_DOES_NOT_APPLY = "test_patch_does_not_apply"
    TESTS_PASS_BEFORE_FIX = "tests_pass_before_fix"
    GOLD_PATCH_DOES_NOT_APPLY = "gold_patch_does_not_apply"
    GOLD_DOES_NOT_FIX = "gold_does_not_fix"
    GOLD_BREAKS_PASS_TO_PASS = "gold_breaks_pass_to_pass"
    FLAKY = "flaky"
    TESTS_TIME_OUT = "tests_time_out"


class TaskValidation(BaseModel):
    """The checks of one task."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    difficulty: str | None = None
    defects: list[Defect] = Field(default_factory=list)
    details: dict[str, str] = Field(default_factory=dict)
    """Per defect, what was seen (test names, apply errors)."""
    duration_s: float = 0.0

    @property
    def valid(self) -> bool:
        return not self.defects


class ValidationReport(BaseModel):
    """Every task's checks and the counts the report shows."""

    model_config = ConfigDict(extra="forbid")

    total: int
    valid: int
    by_defect: dict[str, int]
    by_difficulty: dict[str, dict[str, int]]
    """Per difficulty: `total` and `valid`."""
    reruns: int
    duration_s: float
    tasks: list[TaskValidation]

    @property
    def valid_ids(self) -> list[str]:
        return [task.instance_id for task in self.tasks if task.valid]


def statement_leaks_patch(statement: str, patch: str) -> bool:
    """True when the statement contains the gold patch: its diff or hunk headers, or every
    line it adds as a line of its own (a pasted fix). Naming a fix in prose is not a leak."""
    if "diff --git" in statement or any(
        header in statement for header in HUNK_HEADER.findall(patch)
    ):
        return True
    added = {line.strip() for line in added_lines(patch) if len(line.strip()) >= _MIN_LEAK_LINE}
    if not added:
        return False
    lines = {re.sub(r"^\+", "", line.strip()).strip() for line in statement.splitlines()}
    return added <= lines


def static_defects(task: TaskSpec) -> dict[Defect, str]:
    """Defects visible in the row itself, without running anything."""
    found: dict[Defect, str] = {}
    if not task.problem_statement.strip():
        found[Defect.EMPTY_STATEMENT] = "the problem statement is empty"
    elif task.patch and statement_leaks_patch(task.problem_statement, task.patch):
        found[Defect.STATEMENT_LEAKS_PATCH] = "the statement contains the gold patch"
    if not task.FAIL_TO_PASS:
        found[Defect.NO_FAIL_TO_PASS] = "FAIL_TO_PASS is empty"
    if not task.patch.strip():
        found[Defect.NO_GOLD_PATCH] = "the row has no gold patch"
    return found


def _names(tests: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(tests[:limit])
    return shown + (f" (+{len(tests) - limit} more)" if len(tests) > limit else "")


async def validate_task(
    task: TaskSpec, sandbox_factory: SandboxFactory, *, reruns: int = 3, timeout_s: float = 900.0
) -> TaskValidation:
    """Run every check on one task (in one fresh sandbox)."""
    started = time.perf_counter()
    if task.env == "swe":
        found = static_defects(task)
        dynamic = Defect.NO_GOLD_PATCH not in found and Defect.EMPTY_STATEMENT not in found
        check = _dynamic_defects
    else:
        found = {}
        if not task.problem_statement.strip():
            found[Defect.EMPTY_STATEMENT] = "the problem statement is empty"
        dynamic, check = task.env == "shell", _shell_defects
    if dynamic:
        try:
            found.update(await check(task, sandbox_factory, reruns, timeout_s))
        except (TaskDataError, SandboxError, OSError) as error:
            found[Defect.UNBUILDABLE] = f"{type(error).__name__}: {error}"
    return TaskValidation(
        instance_id=task.instance_id,
        difficulty=task.difficulty,
        defects=list(found),
        details={str(defect): detail for defect, detail in found.items()},
        duration_s=time.perf_counter() - started,
    )


async def _dynamic_defects(
    task: TaskSpec, sandbox_factory: SandboxFactory, reruns: int, timeout_s: float
) -> dict[Defect, str]:
    found: dict[Defect, str] = {}
    async with sandbox_factory(task) as sandbox:
        await materialize_repo(sandbox, task)
        tests = await apply_test_patch(sandbox, task)
        if not tests.ok:
            return {Defect.TEST_PATCH_DOES_NOT_APPLY: (tests.stdout + tests.stderr)[-500:]}
        log, timed_out = await run_tests(sandbox, task, timeout_s)
        if timed_out:
            return {Defect.TESTS_TIME_OUT: "before the fix"}
        before = grade_log(task, log)
        if before.fail_to_pass_passed:
            found[Defect.TESTS_PASS_BEFORE_FIX] = _names(before.fail_to_pass_passed)
        gold = await apply_patch(sandbox, task.patch, "gold")
        if not gold.ok:
            found[Defect.GOLD_PATCH_DOES_NOT_APPLY] = gold.stdout[-500:]
            return found
        after: list[TestReport] = []
        for _ in range(reruns):
            log, timed_out = await run_tests(sandbox, task, timeout_s)
            if timed_out:
                found[Defect.TESTS_TIME_OUT] = "after the fix"
                return found
            after.append(grade_log(task, log))
    first = after[0]
    if first.fail_to_pass_failed:
        found[Defect.GOLD_DOES_NOT_FIX] = _names(first.fail_to_pass_failed)
    if first.pass_to_pass_failed:
        found[Defect.GOLD_BREAKS_PASS_TO_PASS] = _names(first.pass_to_pass_failed)
    changed = sorted(
        {
            name
            for report in after[1:]
            for name in set(report.statuses) | set(first.statuses)
            if report.statuses.get(name) != first.statuses.get(name)
        }
    )
    if changed:
        found[Defect.FLAKY] = f"differs over {reruns} runs: {_names(changed)}"
    return found


async def _shell_defects(
    task: TaskSpec, sandbox_factory: SandboxFactory, reruns: int, timeout_s: float
) -> dict[Defect, str]:
    async with sandbox_factory(task) as sandbox:
        await prepare_shell_workspace(sandbox, task)
        reports = [await run_checks(sandbox, task, timeout_s) for _ in range(reruns)]
    if any(report.timed_out for report in reports):
        return {Defect.TESTS_TIME_OUT: "on the starting state"}
    found: dict[Defect, str] = {}
    first = reports[0]
    if first.passed:
        found[Defect.TESTS_PASS_BEFORE_FIX] = _names(first.passed)
    changed = sorted(
        {name for report in reports[1:] for name in set(report.passed) ^ set(first.passed)}
    )
    if changed:
        found[Defect.FLAKY] = f"differs over {reruns} runs: {_names(changed)}"
    return found


ProgressCallback = Callable[[int, int, TaskValidation], None]


async def validate_tasks(
    tasks: Sequence[TaskSpec],
    sandbox_factory: SandboxFactory,
    *,
    reruns: int = 3,
    timeout_s: float = 900.0,
    concurrency: int | None = None,
    on_result: ProgressCallback | None = None,
) -> ValidationReport:
    """Validate every task, `concurrency` at a time (default: the CPU count).

    Args:
        tasks: the tasks to check.
        sandbox_factory: makes a fresh sandbox per task.
        reruns: runs of the tests after the fix; any difference between them is `flaky`.
        timeout_s: deadline on each test run.
        concurrency: tasks checked at once.
        on_result: called after each task with (done, total, result), e.g. to print progress.
    """
    if reruns < 1:
        raise ValueError(f"reruns must be >= 1, got {reruns}")
    started = time.perf_counter()
    checked = await map_bounded(
        tasks,
        lambda task: validate_task(task, sandbox_factory, reruns=reruns, timeout_s=timeout_s),
        concurrency=concurrency,
        on_result=on_result,
    )
    by_defect = Counter(str(defect) for result in checked for defect in result.defects)
    by_difficulty: dict[str, dict[str, int]] = {}
    for result in checked:
        row = by_difficulty.setdefault(result.difficulty or "unknown", {"total": 0, "valid": 0})
        row["total"] += 1
        row["valid"] += int(result.valid)
    return ValidationReport(
        total=len(checked),
        valid=sum(result.valid for result in checked),
        by_defect=dict(sorted(by_defect.items())),
        by_difficulty=dict(sorted(by_difficulty.items())),
        reruns=reruns,
        duration_s=time.perf_counter() - started,
        tasks=checked,
    )


def progress_printer(err: TextIO) -> ProgressCallback:
    """An `on_result` for `validate_tasks` that prints progress lines with rate and ETA on
    `err`: every task with a defect, else every 10% of the tasks."""
    progress = ProgressLines("validate", err)

    def on_result(done: int, total: int, result: TaskValidation) -> None:
        outcome = "ok" if result.valid else ", ".join(map(str, result.defects))
        progress.line(done, total, result.instance_id, outcome, notable=not result.valid)

    return on_result


def render_markdown(report: ValidationReport, source: str = "") -> str:
    """The report as a short markdown document (summary tables, then every defective task)."""
    share = 100.0 * report.valid / report.total if report.total else 0.0
    lines = [
        "# Task validation report",
        "",
        *([f"Source: `{source}`", ""] if source else []),
        f"**{report.valid} / {report.total} valid ({share:.1f}%)**, tests rerun "
        f"{report.reruns}x after the fix, {report.duration_s:.1f} s.",
        "",
        "| defect | tasks |",
        "|---|---|",
        *[f"| {defect} | {count} |" for defect, count in report.by_defect.items()],
        *(["| (none) | 0 |"] if not report.by_defect else []),
        "",
        "| difficulty | total | valid |",
        "|---|---|---|",
        *[f"| {d} | {row['total']} | {row['valid']} |" for d, row in report.by_difficulty.items()],
    ]
    defective = [task for task in report.tasks if not task.valid]
    if defective:
        lines += ["", "## Defective tasks", ""]
        for task in defective:
            lines.append(f"- `{task.instance_id}`")
            lines += [
                f"  - {defect}: {task.details.get(str(defect), '')}" for defect in task.defects
            ]
    return "\n".join(lines) + "\n"


def write_report(report: ValidationReport, out_dir: str | Path, source: str = "") -> Path:
    """Write `validation.json` and `validation.md` under `out_dir`; returns the JSON path."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    payload = report.model_dump(mode="json") | {"source": source, "valid_ids": report.valid_ids}
    target = root / "validation.json"
    target.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    (root / "validation.md").write_text(render_markdown(report, source), encoding="utf-8")
    return target
