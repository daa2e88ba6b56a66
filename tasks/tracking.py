"""Prefect task: attach the stage reports to the training run in MLflow (thin)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker


@task(name="log-run")
def log_run(recipe: Recipe, run_dir: Path, mlflow_run_id: str | None, evaluation: dict) -> None:
    """Eval metrics and the validation, difficulty and eval reports, on the training run."""
    if mlflow_run_id is None:
        print("log-run: tracking is off; nothing logged")
        return
    tracker = MlflowTracker(recipe.tracking, run_name=recipe.name, run_id=mlflow_run_id)
    tracker.log_values(int(evaluation["step"]), evaluation["metrics"])
    for directory, names in (
        (run_dir / "validation", ("validation.json", "validation.md")),
        (run_dir / "curriculum", ("difficulty.json", "difficulty.md")),
        (Path(evaluation["report_dir"]), ("report.json", "report.md", "samples.jsonl")),
    ):
        for name in names:
            if (directory / name).is_file():
                tracker.log_artifact(directory / name, directory.name)
    tracker.finish()
    print(f"log-run: reports attached to MLflow run {mlflow_run_id}")
