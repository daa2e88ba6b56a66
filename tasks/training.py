"""Prefect task: the RL run (thin; resumes from what the run directory holds).

`uni_agent_core.rl.launch` picks the backend: the embedded trainer trains in this process, verl
launches its trainer on the pool's accelerators with the tasks that passed data validation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefect import get_run_logger, task
from prefect.exceptions import MissingContextError

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.pipeline import stages
from uni_agent_core.pipeline.results import Trained
from uni_agent_core.types import TaskSpec


def _progress_sink() -> Callable[[str], None]:
    """The task run's logger (progress lines in the Prefect UI), or stdout when the function is
    called outside a task run."""
    try:
        return get_run_logger().info
    except MissingContextError:
        return print


@task(name="train")
def train(
    recipe: Recipe,
    run_dir: Path,
    tasks: list[TaskSpec],
    mlflow_run_id: str | None = None,
    launch_command: str | None = None,
    stop_after_steps: int | None = None,
) -> Trained:
    """Train to `trainer.total_steps` (or `stop_after_steps` more), one progress line per step
    in the task's log; returns the backend, the MLflow run id (`mlflow_run_id`: the run the
    warm start opened), the steps trained and the final metrics."""
    return stages.train(
        recipe,
        run_dir,
        tasks,
        mlflow_run_id=mlflow_run_id,
        stop_after_steps=stop_after_steps,
        launch_command=launch_command,
        echo=_progress_sink(),
    )
