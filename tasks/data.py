"""Prefect task: validate the run's training tasks (thin; logic in uni_agent_core)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.validation import validate_tasks, write_report
from uni_agent_core.rollout.build import build_sandbox_factory, build_tasks
from uni_agent_core.rundir.layout import VALIDATION
from uni_agent_core.types import TaskSpec


@task(name="validate-data", retries=1, retry_delay_seconds=10)
def validate_data(recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
    """Load and check every training task; return the tasks to train on (per
    `tasks.on_spec_defect`). The later stages take these, so the flow loads its tasks once."""
    tasks = build_tasks(recipe)
    policy = getattr(recipe.tasks, "on_spec_defect", "drop")
    if policy == "keep":
        print(f"validate-data: {len(tasks)} tasks kept unchecked (on_spec_defect: keep)")
        return tasks
    report = asyncio.run(validate_tasks(tasks, build_sandbox_factory(recipe)))
    path = write_report(report, run_dir / VALIDATION, source=recipe.name)
    print(
        f"validate-data: {report.valid}/{report.total} valid; defects {report.by_defect}; "
        f"report {path}"
    )
    if policy == "flag":
        return tasks
    valid = set(report.valid_ids)
    return [t for t in tasks if t.instance_id in valid]
