"""`agent-rl eval`: run (or resume) an evaluation, print its summary, and log `eval/...`
metrics and the reports to MLflow."""

from __future__ import annotations

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import run_evaluation
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.runner import SAMPLES


def evaluate_command(
    recipe: Recipe,
    *,
    suite: str,
    checkpoint: str,
    k: int | None,
    oracle: bool,
    out: str | None,
    max_tasks: int | None,
    data: str | None,
    concurrency: int | None,
    run_dir: str | None,
    track: bool = True,
) -> int:
    """`agent-rl eval`."""
    done = run_evaluation(
        recipe,
        suite=suite,
        checkpoint=checkpoint,
        k=k,
        oracle=oracle,
        out=out,
        max_tasks=max_tasks,
        data=data,
        concurrency=concurrency,
        run_dir=run_dir,
    )
    summary, target, source, label = done.summary, done.out_dir, done.checkpoint, done.label
    samples, slug = summary.k, done.slug
    print(
        f"{suite} ({label}): {summary.tasks} tasks x {samples}: pass@1 {summary.pass_at_1:.3f}, "
        f"pass@{samples} {summary.pass_at_k:.3f}, avg@{samples} {summary.avg_at_k:.3f}; "
        f"exits {summary.exit_reasons}"
    )
    for level, scores in summary.by_level.items():
        print(f"  {level}: pass@1 {scores['pass@1']:.3f} over {int(scores['tasks'])} tasks")
    print(f"report: {target / 'report.md'}; samples: {target / SAMPLES}")
    if track:
        from uni_agent_core.tracking.mlflow_tracker import MlflowTracker

        tracker = MlflowTracker(recipe.tracking, run_name=f"{recipe.name}-eval-{slug}-{label}")
        tracker.log_params(done.spec | {"tasks": done.tasks})
        tracker.log_step(source.step if source else 0, eval_metrics(summary))
        for name in ("report.json", "report.md", SAMPLES):
            tracker.log_artifact(target / name, "eval")
        tracker.finish()
    return 0
