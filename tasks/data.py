"""Prefect task: validate the run's training tasks (thin; `uni_agent_core.pipeline.stages`)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.pipeline import stages
from uni_agent_core.types import TaskSpec


@task(name="validate-data", retries=1, retry_delay_seconds=10)
def validate_data(recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
    """Load and check every training task; return the tasks to train on (per
    `tasks.on_spec_defect`). The later stages take these, so the flow loads its tasks once."""
    return stages.validate_data(recipe, run_dir)
