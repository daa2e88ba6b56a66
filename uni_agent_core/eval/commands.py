"""What `agent-rl eval` does: resolve the suite and checkpoint, run (or resume) the evaluation,
print the summary, and log `eval/...` metrics and the reports to MLflow."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.metrics import EvalSummary
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.runner import SAMPLES, Evaluation
from uni_agent_core.eval.suites import resolve_suite
from uni_agent_core.rl.checkpoint import Checkpoint, latest_complete, list_complete
from uni_agent_core.rl.run import checkpoint_dir, default_run_dir


def resolve_checkpoint(recipe: Recipe, name: str, run_dir: Path) -> Checkpoint | None:
    """`none` (the base policy), `latest` (newest complete checkpoint of the run) or a directory.

    Raises:
        ValueError: no complete checkpoint matches.
    """
    if name == "none":
        return None
    directory = checkpoint_dir(recipe, run_dir)
    if name == "latest":
        found = latest_complete(directory)
        if found is None:
            raise ValueError(f"no complete checkpoint under {directory}; train first or pass one")
        return found
    path = Path(name).resolve()
    for checkpoint in list_complete(path.parent):
        if checkpoint.path.resolve() == path:
            return checkpoint
    raise ValueError(f"{name} is not a complete checkpoint (a step-* directory with a manifest)")


@dataclass
class EvaluationRun:
    """A finished (or resumed-to-completion) evaluation."""

    summary: EvalSummary
    out_dir: Path
    checkpoint: Checkpoint | None
    label: str
    """`oracle`, `base` or the checkpoint's directory name."""
    slug: str
    """The suite as a file-name part (`micro-swe-test`)."""
    spec: dict
    tasks: int


def run_evaluation(
    recipe: Recipe,
    *,
    suite: str,
    checkpoint: str = "latest",
    k: int | None = None,
    oracle: bool = False,
    out: str | None = None,
    max_tasks: int | None = None,
    data: str | None = None,
    concurrency: int = 4,
    run_dir: str | Path | None = None,
) -> EvaluationRun:
    """Resolve the suite and checkpoint and run (or resume) the evaluation in its directory
    (`<run dir>/eval/<suite>-<checkpoint>` unless `out` names one)."""
    root = Path(run_dir) if run_dir else default_run_dir(recipe)
    source = None if oracle else resolve_checkpoint(recipe, checkpoint, root)
    tasks = resolve_suite(suite, recipe, max_tasks=max_tasks, data=data)
    samples = 1 if oracle else (k or recipe.eval.k)
    label = "oracle" if oracle else (source.path.name if source else "base")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(suite).stem if Path(suite).exists() else suite)
    target = Path(out) if out else root / "eval" / f"{slug}-{label}"
    evaluation = Evaluation(
        recipe,
        tasks,
        suite=suite,
        k=samples,
        out_dir=target,
        checkpoint=source,
        oracle=oracle,
        concurrency=concurrency,
    )
    summary = asyncio.run(evaluation.run_async())
    return EvaluationRun(summary, target, source, label, slug, evaluation.spec, len(tasks))


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
    concurrency: int,
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
