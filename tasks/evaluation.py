"""Prefect task: evaluate a checkpoint on the recipe's eval suite (thin;
`uni_agent_core.pipeline.stages`)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.pipeline import stages
from uni_agent_core.pipeline.results import Evaluated


@task(name="evaluate-checkpoint", retries=1, retry_delay_seconds=10)
def evaluate(
    recipe: Recipe,
    run_dir: Path,
    checkpoint: str = "latest",
    served_as: list | None = None,
    trace_run: str | None = None,
) -> Evaluated:
    """Resumable evaluation (a retry skips finished samples); returns its `eval/...` metrics,
    step and report directory. `served_as` (`[label, version]`) evaluates what the recipe's
    engine already serves (the serve stage's servers) instead of loading `checkpoint`;
    `trace_run` is the MLflow run the sampled episodes are traced into."""
    served = (str(served_as[0]), int(served_as[1])) if served_as else None
    return stages.evaluate(recipe, run_dir, checkpoint, served_as=served, trace_run=trace_run)
