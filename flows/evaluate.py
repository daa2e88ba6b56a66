"""The `evaluate` flow (deployment `on-demand`): score a checkpoint on the recipe's suite."""

from __future__ import annotations

from prefect import flow

from tasks.evaluation import evaluate as evaluate_task
from uni_agent_core.config.pools import load_recipe_for_pool
from uni_agent_core.rundir.layout import default_run_dir


@flow(name="evaluate", log_prints=True)
def evaluate(recipe: str, checkpoint: str = "latest", overrides: list[str] | None = None) -> dict:
    """Resumable evaluation of `checkpoint` (`latest`, `none` or a step directory): its report
    directory, step and `eval/...` metrics."""
    loaded = load_recipe_for_pool(recipe, overrides or [])
    done = evaluate_task(loaded, default_run_dir(loaded), checkpoint)
    return {"report_dir": str(done.report_dir), "step": done.step, "metrics": done.metrics}
