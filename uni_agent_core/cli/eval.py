"""`agent-rl eval`: run (or resume) an evaluation, print its summary, and log `eval/...`
metrics and the reports to MLflow. A recipe whose engine is inference servers without
addresses (a verl recipe: verl launches its own) gets servers from the serve stage on the
checkpoint for the evaluation's duration."""

from __future__ import annotations

from typing import TypedDict

from uni_agent_core.config.inference import OpenAIServerEngineConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import run_evaluation
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.runner import SAMPLES


class _EvaluationOptions(TypedDict):
    """`run_evaluation`'s arguments that `agent-rl eval` passes on as given."""

    suite: str
    k: int | None
    oracle: bool
    out: str | None
    max_tasks: int | None
    data: str | None
    concurrency: int | None
    run_dir: str | None


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
    options = _EvaluationOptions(
        suite=suite, k=k, oracle=oracle, out=out, max_tasks=max_tasks, data=data,
        concurrency=concurrency, run_dir=run_dir,
    )  # fmt: skip
    engine, served_step = recipe.engine, 0
    if not oracle and isinstance(engine, OpenAIServerEngineConfig) and engine.base_urls is None:
        from pathlib import Path

        from uni_agent_core.rl.serve import serve_policy
        from uni_agent_core.rundir.layout import default_run_dir

        root = Path(run_dir) if run_dir else default_run_dir(recipe)
        with serve_policy(recipe, root, checkpoint) as served:
            served_as = (served.model.label, served.model.version)
            served_step = served.model.version
            done = run_evaluation(served.recipe, served_as=served_as, **options)
    else:
        done = run_evaluation(recipe, checkpoint=checkpoint, **options)
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
        tracker.log_step(source.step if source else served_step, eval_metrics(summary))
        for name in ("report.json", "report.md", SAMPLES):
            tracker.log_artifact(target / name, "eval")
        tracker.finish()
    return 0
