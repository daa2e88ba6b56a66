"""One evaluation of a recipe's policy: resolve the suite and the checkpoint, then run (or
resume) the evaluation in its directory. `agent-rl eval`, the evaluate flow and the train flow's
before/after scoring all go through `run_evaluation`."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.metrics import EvalSummary
from uni_agent_core.eval.runner import Evaluation
from uni_agent_core.eval.suites import resolve_suite
from uni_agent_core.rundir.checkpoint import (
    Checkpoint,
    CheckpointNotFoundError,
    latest_complete,
    list_complete,
)
from uni_agent_core.rundir.layout import EVAL, checkpoint_dir, default_run_dir


def resolve_checkpoint(recipe: Recipe, name: str, run_dir: Path) -> Checkpoint | None:
    """`none` (the base policy), `latest` (newest complete checkpoint of the run) or a directory.

    Raises:
        CheckpointNotFoundError: no complete checkpoint matches (a `ValueError`).
    """
    if name == "none":
        return None
    directory = checkpoint_dir(recipe, run_dir)
    if name == "latest":
        found = latest_complete(directory)
        if found is None:
            raise CheckpointNotFoundError(
                f"no complete checkpoint under {directory}; train first or pass one"
            )
        return found
    path = Path(name).resolve()
    for checkpoint in list_complete(path.parent):
        if checkpoint.path.resolve() == path:
            return checkpoint
    raise CheckpointNotFoundError(
        f"{name} is not a complete checkpoint (a step-* directory with a manifest)"
    )


def every_nth(found: list, every: int) -> list:
    """Every `every`-th of `found` (oldest first), and the last always."""
    return [item for i, item in enumerate(found, 1) if i % every == 0 or i == len(found)]


def checkpoints_to_evaluate(recipe: Recipe, run_dir: Path) -> list[Path]:
    """The run's complete checkpoints to score (those `trainer.keep_checkpoints` kept): every
    `eval.every_n_checkpoints`-th, and the newest always (its score is the run's `eval/...`).
    Scored on the same held-out tasks as the starting policy, they make the held-out curve.

    Raises:
        CheckpointNotFoundError: the run has no complete checkpoint (a `ValueError`).
    """
    directory = checkpoint_dir(recipe, run_dir)
    found = list_complete(directory)
    if not found:
        raise CheckpointNotFoundError(f"no complete checkpoint under {directory}; train first")
    return [item.path for item in every_nth(found, recipe.eval.every_n_checkpoints)]


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
    concurrency: int | None = None,
    run_dir: str | Path | None = None,
    served_as: tuple[str, int] | None = None,
    trace_run: str | None = None,
) -> EvaluationRun:
    """Resolve the suite and checkpoint and run (or resume) the evaluation in its directory
    (`<run dir>/eval/<suite>-<checkpoint>` unless `out` names one), `concurrency` samples at
    once (None: the recipe's `eval.concurrency`). `served_as` is `(label, policy version)` of
    weights the recipe's engine already serves (the serve stage's servers): nothing is loaded,
    and `checkpoint` is not read. `trace_run` is an MLflow run (the training run's) that the
    episodes are traced into, as `tracking.traces` samples them."""
    root = Path(run_dir) if run_dir else default_run_dir(recipe)
    served = served_as is not None
    source = None if oracle or served else resolve_checkpoint(recipe, checkpoint, root)
    tasks = resolve_suite(suite, recipe, max_tasks=max_tasks, data=data)
    samples = 1 if oracle else (k or recipe.eval.k)
    if oracle:
        label = "oracle"
    elif served_as is not None:
        label = served_as[0]
    else:
        label = source.path.name if source else "base"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(suite).stem if Path(suite).exists() else suite)
    target = Path(out) if out else root / EVAL / f"{slug}-{label}"
    evaluation = Evaluation(
        recipe,
        tasks,
        suite=suite,
        k=samples,
        out_dir=target,
        checkpoint=source,
        oracle=oracle,
        concurrency=concurrency,
        served_as=served_as,
        trace_run=trace_run,
    )
    summary = asyncio.run(evaluation.run_async())
    return EvaluationRun(summary, target, source, label, slug, evaluation.spec, len(tasks))
