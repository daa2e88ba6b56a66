"""Prefect task: attach the stage reports and the before -> after comparison to the training run
in MLflow (thin; `uni_agent_core.pipeline.reports`)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.pipeline import reports
from uni_agent_core.pipeline.results import Evaluated


@task(name="log-run")
def log_run(
    recipe: Recipe,
    run_dir: Path,
    mlflow_run_id: str | None,
    evaluation: Evaluated | None,
    before: Evaluated | None = None,
    params: dict[str, str] | None = None,
    curve: list[Evaluated] | None = None,
) -> str | None:
    """Eval metrics (none when `evaluation` is None: evaluation is off), `eval_before/...` and
    the paired comparison with `before`, the held-out curve of `curve`, the validation,
    difficulty and eval reports and `params`, on the training run (a verl run's: verl's own);
    returns the MLflow run id (`reports.log_run` says what goes where)."""
    return reports.log_run(
        recipe, run_dir, mlflow_run_id, evaluation, before, params, curve=curve or ()
    )
