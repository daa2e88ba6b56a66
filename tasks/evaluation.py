"""Prefect task: evaluate the newest checkpoint on the recipe's eval suite (thin)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import run_evaluation
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.suites import recipe_suite


@task(name="evaluate-checkpoint", retries=1, retry_delay_seconds=10)
def evaluate(
    recipe: Recipe,
    run_dir: Path,
    checkpoint: str = "latest",
    served_as: list | None = None,
    trace_run: str | None = None,
) -> dict:
    """Resumable evaluation (a retry skips finished samples); returns `eval/...` metrics.
    `served_as` (`[label, version]`) evaluates what the recipe's engine already serves (the
    serve stage's servers) instead of loading `checkpoint`; `trace_run` is the MLflow run the
    sampled episodes are traced into."""
    suite = recipe_suite(recipe)
    done = run_evaluation(
        recipe,
        suite=suite,
        checkpoint=checkpoint,
        run_dir=run_dir,
        served_as=tuple(served_as) if served_as else None,
        trace_run=trace_run,
    )
    print(f"evaluate-checkpoint: {suite} {done.label}: pass@1 {done.summary.pass_at_1:.3f}")
    return {
        "report_dir": str(done.out_dir),
        "step": done.checkpoint.step if done.checkpoint else 0,
        "metrics": eval_metrics(done.summary),
    }
