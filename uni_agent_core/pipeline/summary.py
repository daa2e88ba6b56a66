"""A finished pipeline run told to its reader: the markdown lines of the flow's summary artifact
(printed by `agent-rl train` as well) and the flow's returned record."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from uni_agent_core.pipeline.reports import before_metrics
from uni_agent_core.pipeline.results import PipelineResult
from uni_agent_core.tracking.mlflow_tracker import metric_name
from uni_agent_core.tracking.runs import before_after_lines, curve_line, run_episode_pages


def summary_lines(result: PipelineResult) -> list[str]:
    """Markdown list lines: the run directory and MLflow run, the steps trained, the warm start,
    the held-out curve, the paired before -> after comparison with its exit-reason table, the
    final evaluation's metrics and how to open the run's episode pages."""
    trained = result.trained
    lines = [
        f"- run directory: `{result.run_dir}`",
        f"- MLflow run: `{trained.mlflow_run_id}`",
        f"- steps trained: {trained.start_step + 1}..{trained.last_step} ({trained.backend})",
    ]
    if result.warm_start is not None:
        report = result.warm_start.report
        lines.append(
            f"- warm start: {report['trajectories']} gold trajectories x {report['epochs']} "
            f"epochs, nll {report['loss_by_epoch'][0]:.3f} -> {report['loss_by_epoch'][-1]:.3f} "
            f"({(report['gold_s'] + report['fit_s']) / 60:.1f} min)"
        )
    curve = result.heldout_curve
    if len(curve) > 1:
        lines.append(f"- {curve_line(curve)}")
    final, before, comparison = result.final_evaluation, result.before, result.before_after()
    if final is not None and before is not None and comparison is not None:
        logged = {**final.metrics, **before_metrics(before.metrics), **comparison.metrics()}
        shown = before_after_lines({metric_name(k): v for k, v in logged.items()})
        lines += ["", *(f"- {line}" if line and line[0] != "|" else line for line in shown), ""]
    if final is not None:
        lines += [f"- {key}: {value:.3f}" for key, value in sorted(final.metrics.items())]
    if trained.mlflow_run_id is not None:
        pages = run_episode_pages(result.recipe.tracking, trained.mlflow_run_id)
        lines += [f"- {line}" for line in pages]
    return lines


def summary_record(result: PipelineResult) -> dict[str, Any]:
    """The run as plain data: the run directory, what training did (`Trained`'s fields), the
    final and starting evaluations' metrics, the warm start's report, the held-out curve and,
    with both evaluations, the paired comparison's metrics and verdict."""
    final, before = result.final_evaluation, result.before
    record: dict[str, Any] = {
        "run_dir": str(result.run_dir),
        **asdict(result.trained),
        "eval": final.metrics if final is not None else None,
        "eval_before": before.metrics if before is not None else None,
        "warm_start": result.warm_start.report if result.warm_start is not None else None,
        "heldout_curve": result.heldout_curve,
    }
    comparison = result.before_after()
    if comparison is not None:
        record["before_after"] = {**comparison.metrics(), "verdict": comparison.verdict}
    return record
