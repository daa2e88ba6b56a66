"""Prefect task: the async RL run (thin; resumes from the newest complete checkpoint).

The embedded backend trains in this process; the verl backend launches verl's trainer on the
pool's accelerators (`agent-rl verl launch`) with the tasks that passed data validation.
"""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.run import TrainingRun


@task(name="train")
def train(
    recipe: Recipe, run_dir: Path, task_ids: list[str], mlflow_run_id: str | None = None
) -> dict:
    """Train to `trainer.total_steps`, one progress line per step in the task's log; returns
    the MLflow run id (`mlflow_run_id`: the run the warm start opened) and the final metrics."""
    if recipe.trainer.backend.type == "verl":
        return _train_on_verl(recipe, run_dir, task_ids)
    run = TrainingRun(
        recipe,
        run_dir=run_dir,
        task_ids=task_ids,
        mlflow_run_id=mlflow_run_id,
        echo=get_run_logger().info,
    )
    summary = run.run()
    last = summary.metrics[-1] if summary.metrics else {}
    return {
        "mlflow_run_id": run.tracker.run_id if run.tracker else None,
        "steps": summary.steps,
        "start_step": summary.start_step,
        "final": last,
    }


def _train_on_verl(recipe: Recipe, run_dir: Path, task_ids: list[str]) -> dict:
    from uni_agent_core.rl.verl.launch import launch_recipe

    code = launch_recipe(recipe, run_dir=run_dir, task_ids=task_ids)
    if code != 0:
        raise RuntimeError(f"verl's trainer exited with code {code}")
    # verl resumes from its own checkpoints and logs its steps to MLflow itself.
    return {
        "mlflow_run_id": None,
        "steps": None,
        "start_step": None,
        "final": {},
        "backend": "verl",
    }
