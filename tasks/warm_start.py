"""Prefect task: the gold-trajectory warm start before RL (thin; reuses a finished one)."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.warm_start import WarmStartResult, run_warm_start
from uni_agent_core.types import TaskSpec


@task(name="warm-start")
def warm_start(recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> WarmStartResult:
    """Supervised training on the gold episodes of the valid tasks; returns the warm-started
    policy name, its MLflow run and the stage's report."""
    logger = get_run_logger()
    return run_warm_start(recipe, run_dir, tasks, echo=logger.info)
