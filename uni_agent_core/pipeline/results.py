"""What the pipeline's stages return, typed: one frozen record per stage, and the whole run's.

Data validation returns the tasks to train on (`list[TaskSpec]`), difficulty estimation the
path of its report (or None when the curriculum is off), the warm start `WarmStartResult`
(`rl/warm_start.py`) and logging the MLflow run id; the records here are the evaluations'
(`Evaluated`), training's (`Trained`) and the run's (`PipelineResult`). They are plain frozen
dataclasses, so a Prefect task can return them and persist them (pickled) like any value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.paired import BeforeAfter, compare_evaluations
from uni_agent_core.rl.warm_start import WarmStartResult

CURVE_METRIC = "eval/pass@1"
"""The one metric of the held-out curve."""

Backend = Literal["embedded", "verl"]


@dataclass(frozen=True)
class Evaluated:
    """A finished evaluation of one policy on the recipe's held-out suite."""

    report_dir: Path
    """Its directory (`eval.json`, `samples.jsonl`, `report.json`, `report.md`)."""
    step: int
    """The RL step of the checkpoint evaluated (0: the starting policy)."""
    metrics: dict[str, float]
    """`eval/...` metrics (`eval/report.py::eval_metrics`)."""


@dataclass(frozen=True)
class Trained:
    """What the train stage did."""

    backend: Backend
    mlflow_run_id: str | None
    """The MLflow run the steps were logged to (None: untracked, or verl's own run)."""
    steps: int
    """Steps this launch trained."""
    start_step: int
    """Steps already trained when it started (resumed from a checkpoint)."""
    final: dict[str, float] = field(default_factory=dict)
    """The last step's metrics ({} when none were recorded here)."""

    @property
    def last_step(self) -> int:
        """The step the run reached."""
        return self.start_step + self.steps


@dataclass(frozen=True)
class PipelineResult:
    """A pipeline run: every stage's result, in the order they ran."""

    recipe: Recipe
    """The recipe trained: the given one, its policy replaced by the warm-started one."""
    run_dir: Path
    trained: Trained
    warm_start: WarmStartResult | None = None
    """None: the recipe has no warm start."""
    before: Evaluated | None = None
    """The starting policy's evaluation (`eval.before_training`)."""
    evaluations: tuple[Evaluated, ...] = ()
    """The checkpoints' evaluations, oldest first; the last is the run's `eval/...`."""
    mlflow_run_id: str | None = None
    """The run the stages logged into (None: tracking is off)."""

    @property
    def final_evaluation(self) -> Evaluated | None:
        """The newest checkpoint's evaluation (None: evaluation is off, or training stopped
        early)."""
        return self.evaluations[-1] if self.evaluations else None

    @property
    def heldout_curve(self) -> list[tuple[int, float]]:
        """`(RL step, held-out pass@1)` of the starting policy and each scored checkpoint."""
        return heldout_curve(self.before, self.evaluations)

    def before_after(self) -> BeforeAfter | None:
        """The paired comparison of the starting policy and the newest checkpoint, read from
        their report directories (None: one of the two evaluations did not run).

        Raises:
            ValueError: the two evaluations are not paired (`eval/paired.py`).
        """
        final = self.final_evaluation
        if self.before is None or final is None:
            return None
        return compare_evaluations(self.before.report_dir, final.report_dir)


def heldout_curve(
    before: Evaluated | None, evaluations: tuple[Evaluated, ...] | list[Evaluated]
) -> list[tuple[int, float]]:
    """`(RL step, held-out pass@1)` of the starting policy (step 0) and each scored checkpoint:
    one greedy evaluation of the same tasks per point, so the points compare like with like."""
    points = [(0, before.metrics[CURVE_METRIC])] if before is not None else []
    return points + [(e.step, e.metrics[CURVE_METRIC]) for e in evaluations]
