"""The pipeline's last stage: the evaluations, the stage reports and the before -> after
comparison, attached to the training run in MLflow."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.paired import compare_evaluations, write_flip_table
from uni_agent_core.pipeline.results import CURVE_METRIC, Evaluated, heldout_curve
from uni_agent_core.rundir.layout import CURRICULUM, EVAL, VALIDATION
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker
from uni_agent_core.tracking.plots import plot_heldout_curve
from uni_agent_core.tracking.runs import verl_stage_run

BEFORE_AFTER = "before-after"
"""Where the flip table is written, under the run directory's `eval/`."""


def before_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """`eval/...` metrics of the starting policy renamed `eval_before/...`."""
    return {"eval_before/" + key.removeprefix("eval/"): value for key, value in metrics.items()}


def log_run(
    recipe: Recipe,
    run_dir: Path,
    mlflow_run_id: str | None,
    evaluation: Evaluated | None,
    before: Evaluated | None = None,
    params: dict[str, str] | None = None,
    curve: Sequence[Evaluated] = (),
    *,
    echo: Callable[[str], None] = print,
) -> str | None:
    """Attach the run's evaluations and stage reports to its MLflow run.

    Args:
        recipe: the recipe trained.
        run_dir: the run directory (`validation/`, `curriculum/` and `eval/` are read there).
        mlflow_run_id: the training run; None on a verl recipe: verl's own run
            (`verl_stage_run`); None otherwise: tracking is off and nothing is logged.
        evaluation: the newest checkpoint's evaluation, logged as the run's `eval/...` at its
            step (None: evaluation is off).
        before: the starting policy's evaluation: `eval_before/...` at step 0, and with
            `evaluation` the paired pass@1 delta with its bootstrap interval
            (`eval/pass@1_delta`, `..._ci_low`, `..._ci_high`, `eval/paired_tasks`) and the flip
            table (`eval/flips.csv`, `eval/flips.md`).
        params: run params to add (what the serve stage served, `repro.served.*`).
        curve: the checkpoints' evaluations, oldest first (`evaluation` among them or not):
            each earlier one's `eval/pass@1` at its step, and with `before` the held-out curve
            `eval/heldout_curve.png` (pass@1 by RL step, the starting policy at step 0).
        echo: receives the stage's line.

    Returns:
        The MLflow run id logged into (None: tracking is off).
    """
    if mlflow_run_id is None and recipe.trainer.backend.type == "verl":
        mlflow_run_id = verl_stage_run(recipe, run_dir)
    if mlflow_run_id is None:
        echo("log-run: tracking is off; nothing logged")
        return None
    tracker = MlflowTracker(recipe.tracking, run_name=recipe.name, run_id=mlflow_run_id)
    if params:
        tracker.log_params(params)
    reports = []
    earlier = [e for e in curve if e is not evaluation]
    for checkpoint in earlier:
        # pass@1 alone: a metric logged only at an earlier step (an exit reason the final
        # checkpoint no longer has) would read as the final value of the run
        tracker.log_values(checkpoint.step, {CURVE_METRIC: checkpoint.metrics[CURVE_METRIC]})
        reports.append(checkpoint.report_dir)
    if evaluation is not None:
        points = heldout_curve(before, [*earlier, evaluation])
        if len(points) > 1:
            tracker.log_artifact(plot_heldout_curve(recipe.name, points, run_dir / EVAL), "eval")
        tracker.log_values(evaluation.step, evaluation.metrics)
        reports.append(evaluation.report_dir)
    if before is not None:
        tracker.log_values(0, before_metrics(before.metrics))
        if evaluation is not None:
            comparison = compare_evaluations(before.report_dir, evaluation.report_dir)
            tracker.log_values(evaluation.step, comparison.metrics())
            for path in write_flip_table(comparison, run_dir / EVAL / BEFORE_AFTER):
                tracker.log_artifact(path, "eval")
        reports.append(before.report_dir)
    for directory, names in (
        (run_dir / VALIDATION, ("validation.json", "validation.md")),
        (run_dir / CURRICULUM, ("difficulty.json", "difficulty.md")),
        *((report, ("report.json", "report.md", "samples.jsonl")) for report in reports),
    ):
        for name in names:
            if (directory / name).is_file():
                tracker.log_artifact(directory / name, directory.name)
    tracker.finish()
    echo(f"log-run: reports attached to MLflow run {mlflow_run_id}")
    return mlflow_run_id
