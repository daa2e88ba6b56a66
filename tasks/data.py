"""Prefect task: validate the run's training tasks (thin; logic in uni_agent_core)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.sources import load_tasks
from uni_agent_core.envs.validation import validate_tasks, write_report
from uni_agent_core.envs.verifier import task_sandbox_factory
from uni_agent_core.rundir.layout import VALIDATION


@task(name="validate-data", retries=1, retry_delay_seconds=10)
def validate_data(recipe: Recipe, run_dir: Path) -> list[str]:
    """Check every training task; return the ids to train on (per `tasks.on_spec_defect`)."""
    tasks = load_tasks(recipe.tasks)
    policy = getattr(recipe.tasks, "on_spec_defect", "drop")
    if policy == "keep":
        print(f"validate-data: {len(tasks)} tasks kept unchecked (on_spec_defect: keep)")
        return [t.instance_id for t in tasks]
    report = asyncio.run(validate_tasks(tasks, task_sandbox_factory(recipe.sandbox)))
    path = write_report(report, run_dir / VALIDATION, source=recipe.name)
    print(
        f"validate-data: {report.valid}/{report.total} valid; defects {report.by_defect}; "
        f"report {path}"
    )
    if policy == "flag":
        return [t.instance_id for t in tasks]
    return report.valid_ids
