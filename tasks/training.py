"""Prefect task: the RL run (thin; resumes from what the run directory holds).

`uni_agent_core.rl.launch` picks the backend: the embedded trainer trains in this process, verl
launches its trainer on the pool's accelerators with the tasks that passed data validation.
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.exceptions import MissingContextError

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.launch import launch
from uni_agent_core.types import TaskSpec


def _progress_sink():  # noqa: ANN202 - a print-like callable
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
) -> dict:
    """Train to `trainer.total_steps`, one progress line per step in the task's log; returns
    the backend, the MLflow run id (`mlflow_run_id`: the run the warm start opened), the steps
    trained and the final metrics."""
    summary = launch(
        recipe,
        run_dir,
        tasks=tasks,
        mlflow_run_id=mlflow_run_id,
        launch_command=launch_command,
        echo=_progress_sink(),
    )
    return {
        "backend": summary.backend,
        "mlflow_run_id": summary.mlflow_run_id,
        "steps": summary.steps,
        "start_step": summary.start_step,
        "final": summary.final,
    }
