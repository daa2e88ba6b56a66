"""The pipeline's stages: what each one does (one function per stage), the `Stages` protocol
that `run_pipeline` sequences them through, and `DirectStages`, which runs them in this process.

The Prefect tasks in `tasks/` call these same functions, and the flow's `Stages` calls the tasks,
so a stage computes the same thing whichever runner sequences it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.best_of_n import best_of_n
from uni_agent_core.curriculum.difficulty import write_difficulty
from uni_agent_core.curriculum.history import AttemptHistory
from uni_agent_core.envs.validation import progress_printer, validate_tasks, write_report
from uni_agent_core.eval.evaluate import run_evaluation
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.suites import recipe_suite
from uni_agent_core.pipeline.reports import log_run
from uni_agent_core.pipeline.results import Evaluated, Trained
from uni_agent_core.rl.launch import launch
from uni_agent_core.rl.warm_start import WarmStartResult, run_warm_start
from uni_agent_core.rollout.build import build_sandbox_factory, build_tasks
from uni_agent_core.rundir.layout import CURRICULUM, VALIDATION, history_path
from uni_agent_core.types import TaskSpec

Echo = Callable[[str], None]


class Stages(Protocol):
    """One method per stage of the pipeline; `run_pipeline` calls them in order and passes each
    one's typed result on."""

    def validate_data(self, recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
        """Load and check the training tasks; the tasks to train on."""
        ...

    def warm_start(self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> WarmStartResult:
        """Supervised training on the gold episodes of `tasks`."""
        ...

    def estimate_difficulty(
        self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]
    ) -> Path | None:
        """Best-of-N over `tasks`; the report's path (None: the curriculum is off)."""
        ...

    def evaluate(
        self, recipe: Recipe, run_dir: Path, checkpoint: str, trace_run: str | None
    ) -> Evaluated:
        """Evaluate `checkpoint` (`none`: the recipe's policy) on the held-out suite."""
        ...

    def train(
        self,
        recipe: Recipe,
        run_dir: Path,
        tasks: list[TaskSpec],
        mlflow_run_id: str | None,
        stop_after_steps: int | None,
        launch_command: str | None,
    ) -> Trained:
        """Train on `tasks` to `trainer.total_steps` (or `stop_after_steps` more)."""
        ...

    def log_run(
        self,
        recipe: Recipe,
        run_dir: Path,
        mlflow_run_id: str | None,
        evaluation: Evaluated,
        before: Evaluated | None,
        curve: Sequence[Evaluated],
    ) -> str | None:
        """Attach the evaluations and reports to the MLflow run; its id (None: untracked)."""
        ...


def validate_data(recipe: Recipe, run_dir: Path, *, echo: Echo = print) -> list[TaskSpec]:
    """Load and check every training task (`validation/`); return the tasks to train on, as
    `tasks.on_spec_defect` says. The later stages take these, so the tasks are loaded once."""
    tasks = build_tasks(recipe)
    policy = getattr(recipe.tasks, "on_spec_defect", "drop")
    if policy == "keep":
        echo(f"validate-data: {len(tasks)} tasks kept unchecked (on_spec_defect: keep)")
        return tasks
    on_result = progress_printer(sys.stderr)
    report = asyncio.run(validate_tasks(tasks, build_sandbox_factory(recipe), on_result=on_result))
    path = write_report(report, run_dir / VALIDATION, source=recipe.name)
    echo(
        f"validate-data: {report.valid}/{report.total} valid; defects {report.by_defect}; "
        f"report {path}"
    )
    if policy == "flag":
        return tasks
    valid = set(report.valid_ids)
    return [t for t in tasks if t.instance_id in valid]


def estimate_difficulty(
    recipe: Recipe, run_dir: Path, tasks: list[TaskSpec], *, echo: Echo = print
) -> Path | None:
    """Best-of-N over the valid tasks, recorded in the run's history (the sampler reads it) and
    written to `curriculum/difficulty.json`; None when the curriculum is off."""
    if not recipe.curriculum.enabled:
        echo("estimate-difficulty: curriculum disabled; skipped")
        return None
    history = AttemptHistory(history_path(recipe, run_dir))
    report = asyncio.run(best_of_n(recipe, tasks, recipe.curriculum.best_of_n, history))
    path = write_difficulty(report, run_dir / CURRICULUM)
    echo(f"estimate-difficulty: {report.counts()}; {len(report.kept_ids)} learnable; {path}")
    return path


def evaluate(
    recipe: Recipe,
    run_dir: Path,
    checkpoint: str = "latest",
    *,
    served_as: tuple[str, int] | None = None,
    trace_run: str | None = None,
    echo: Echo = print,
) -> Evaluated:
    """Resumable evaluation on the recipe's suite (a rerun skips finished samples).

    Args:
        recipe: the recipe (its policy is evaluated for `checkpoint="none"`).
        run_dir: the run directory; the evaluation writes `eval/<suite>-<label>/` in it.
        checkpoint: `latest`, `none` or a checkpoint directory.
        served_as: `(label, version)` of what the recipe's engine already serves (the serve
            stage's servers); `checkpoint` is then not loaded.
        trace_run: the MLflow run the sampled episodes are traced into (None: not traced).
        echo: receives the stage's line.
    """
    suite = recipe_suite(recipe)
    done = run_evaluation(
        recipe,
        suite=suite,
        checkpoint=checkpoint,
        run_dir=run_dir,
        served_as=served_as,
        trace_run=trace_run,
    )
    echo(f"evaluate-checkpoint: {suite} {done.label}: pass@1 {done.summary.pass_at_1:.3f}")
    return Evaluated(
        report_dir=done.out_dir,
        step=done.checkpoint.step if done.checkpoint else 0,
        metrics=eval_metrics(done.summary),
    )


def train(
    recipe: Recipe,
    run_dir: Path,
    tasks: list[TaskSpec],
    *,
    mlflow_run_id: str | None = None,
    stop_after_steps: int | None = None,
    launch_command: str | None = None,
    echo: Echo = print,
) -> Trained:
    """Train to `trainer.total_steps` on either backend (`rl/launch.py`), resuming from what the
    run directory holds, one progress line per step.

    Args:
        recipe: the recipe (its policy is where RL starts).
        run_dir: the run directory.
        tasks: the tasks to train on (those that passed data validation).
        mlflow_run_id: the MLflow run an earlier stage opened (the warm start's).
        stop_after_steps: end after this many steps (embedded only; a later run resumes).
        launch_command: the command that started the run, for the reproducibility record.
        echo: receives the progress lines.
    """
    summary = launch(
        recipe,
        run_dir,
        tasks=tasks,
        stop_after_steps=stop_after_steps,
        mlflow_run_id=mlflow_run_id,
        launch_command=launch_command,
        echo=echo,
    )
    return Trained(
        backend=recipe.trainer.backend.type,
        mlflow_run_id=summary.mlflow_run_id,
        steps=summary.steps,
        start_step=summary.start_step,
        final=summary.final,
    )


class DirectStages:
    """The stages run in this process, one after another (`agent-rl train`)."""

    def __init__(self, echo: Echo = print) -> None:
        self.echo = echo

    def validate_data(self, recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
        return validate_data(recipe, run_dir, echo=self.echo)

    def warm_start(self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> WarmStartResult:
        return run_warm_start(recipe, run_dir, tasks, echo=self.echo)

    def estimate_difficulty(
        self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]
    ) -> Path | None:
        return estimate_difficulty(recipe, run_dir, tasks, echo=self.echo)

    def evaluate(
        self, recipe: Recipe, run_dir: Path, checkpoint: str, trace_run: str | None
    ) -> Evaluated:
        return evaluate(recipe, run_dir, checkpoint, trace_run=trace_run, echo=self.echo)

    def train(
        self,
        recipe: Recipe,
        run_dir: Path,
        tasks: list[TaskSpec],
        mlflow_run_id: str | None,
        stop_after_steps: int | None,
        launch_command: str | None,
    ) -> Trained:
        return train(
            recipe,
            run_dir,
            tasks,
            mlflow_run_id=mlflow_run_id,
            stop_after_steps=stop_after_steps,
            launch_command=launch_command,
            echo=self.echo,
        )

    def log_run(
        self,
        recipe: Recipe,
        run_dir: Path,
        mlflow_run_id: str | None,
        evaluation: Evaluated,
        before: Evaluated | None,
        curve: Sequence[Evaluated],
    ) -> str | None:
        return log_run(
            recipe, run_dir, mlflow_run_id, evaluation, before, curve=curve, echo=self.echo
        )
