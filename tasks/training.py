"""Prefect task: the async RL run (thin; resumes from the newest complete checkpoint)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.run import TrainingRun


@task(name="train")
def train(recipe: Recipe, run_dir: Path, task_ids: list[str]) -> dict:
    """Train to `trainer.total_steps`; returns the MLflow run id and the final metrics."""
    run = TrainingRun(recipe, run_dir=run_dir, task_ids=task_ids)
    summary = run.run()
    last = summary.metrics[-1] if summary.metrics else {}
    return {
        "mlflow_run_id": run.tracker.run_id if run.tracker else None,
        "steps": summary.steps,
        "start_step": summary.start_step,
        "final": last,
    }
