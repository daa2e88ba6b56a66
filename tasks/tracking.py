"""Prefect task: attach the stage reports and the before -> after comparison to the training run
in MLflow (thin)."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.paired import compare_evaluations, write_flip_table
from uni_agent_core.rundir.layout import CURRICULUM, EVAL, VALIDATION
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker
from uni_agent_core.tracking.plots import plot_heldout_curve
from uni_agent_core.tracking.runs import verl_stage_run

CURVE_METRIC = "eval/pass@1"
"""The one metric of the held-out curve's earlier checkpoints."""

BEFORE_AFTER = "before-after"
"""Where the flip table is written, under the run directory's `eval/`."""


def heldout_curve(before: dict | None, evaluations: list[dict]) -> list[tuple[int, float]]:
    """`(RL step, held-out pass@1)` of the starting policy (step 0) and each scored checkpoint:
    one greedy evaluation of the same tasks per point, so the points compare like with like."""
    points = [(0, before["metrics"][CURVE_METRIC])] if before is not None else []
    return points + [(int(e["step"]), e["metrics"][CURVE_METRIC]) for e in evaluations]


def before_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """`eval/...` metrics of the starting policy renamed `eval_before/...`."""
    return {"eval_before/" + key.removeprefix("eval/"): value for key, value in metrics.items()}


@task(name="log-run")
def log_run(
    recipe: Recipe,
    run_dir: Path,
    mlflow_run_id: str | None,
    evaluation: dict | None,
    before: dict | None = None,
    params: dict[str, str] | None = None,
    curve: list[dict] | None = None,
) -> str | None:
    """Eval metrics (none when `evaluation` is None: evaluation is off) and the validation,
    difficulty and eval reports, on the training run; with
    `before` (the starting policy's evaluation), also `eval_before/...`, the paired pass@1 delta
    with its bootstrap interval (`eval/pass@1_delta`, `..._ci_low`, `..._ci_high`,
    `eval/paired_tasks`) and the flip table (`eval/flips.csv`, `eval/flips.md`);
    `params` (what the serve stage served, `repro.served.*`) as run params; `curve` (the
    evaluations of the checkpoints before `evaluation`, oldest first) as `eval/pass@1` at their
    steps, and with `before` the held-out curve `eval/heldout_curve.png` (pass@1 by RL step,
    the starting policy at step 0). A verl run's stages go into verl's own MLflow run
    (`verl_stage_run`). Returns the MLflow run id."""
    if mlflow_run_id is None and recipe.trainer.backend.type == "verl":
        mlflow_run_id = verl_stage_run(recipe, run_dir)
    if mlflow_run_id is None:
        print("log-run: tracking is off; nothing logged")
        return None
    tracker = MlflowTracker(recipe.tracking, run_name=recipe.name, run_id=mlflow_run_id)
    if params:
        tracker.log_params(params)
    reports = []
    earlier = [e for e in curve or [] if e is not evaluation]
    for checkpoint in earlier:
        # pass@1 alone: a metric logged only at an earlier step (an exit reason the final
        # checkpoint no longer has) would read as the final value of the run
        tracker.log_values(
            int(checkpoint["step"]), {CURVE_METRIC: checkpoint["metrics"][CURVE_METRIC]}
        )
        reports.append(Path(checkpoint["report_dir"]))
    if evaluation is not None:
        points = heldout_curve(before, [*earlier, evaluation])
        if len(points) > 1:
            tracker.log_artifact(plot_heldout_curve(recipe.name, points, run_dir / EVAL), "eval")
        step = int(evaluation["step"])
        tracker.log_values(step, evaluation["metrics"])
        reports.append(Path(evaluation["report_dir"]))
    if before is not None:
        tracker.log_values(0, before_metrics(before["metrics"]))
        if evaluation is not None:
            comparison = compare_evaluations(
                Path(before["report_dir"]), Path(evaluation["report_dir"])
            )
            tracker.log_values(step, comparison.metrics())
            for path in write_flip_table(comparison, run_dir / EVAL / BEFORE_AFTER):
                tracker.log_artifact(path, "eval")
        reports.append(Path(before["report_dir"]))
    for directory, names in (
        (run_dir / VALIDATION, ("validation.json", "validation.md")),
        (run_dir / CURRICULUM, ("difficulty.json", "difficulty.md")),
        *((report, ("report.json", "report.md", "samples.jsonl")) for report in reports),
    ):
        for name in names:
            if (directory / name).is_file():
                tracker.log_artifact(directory / name, directory.name)
    tracker.finish()
    print(f"log-run: reports attached to MLflow run {mlflow_run_id}")
    return mlflow_run_id
