"""The pipeline's sequence, defined once for `agent-rl train` and the flow `agent-rl/train`.

`run_pipeline(recipe, run_dir, stages)` runs an embedded recipe end to end over any `Stages`:

1. validate data: the tasks to train on;
2. warm start (`warm_start.enabled`): the recipe's policy becomes the warm-started one
   (`warm_started`), and the stages after it take `rl_tasks` of the valid tasks;
3. estimate difficulty (Best-of-N; the stage skips itself when the curriculum is off);
4. evaluate the starting policy (`eval.before_training`), traced into the warm start's run;
5. train, continuing the warm start's MLflow run;
6. evaluate the kept checkpoints (`eval.every_n_checkpoints`, the newest always);
7. log the evaluations and reports to the training run in MLflow.

Before them, `policy.dtype: auto` becomes the dtype measured fastest on this host
(`pipeline/precision.py`), and a recipe's `host_sizing` tier for a CPU that slow applies
(`pipeline/sizing.py`). Steps 1-2 are `prepare_training`, which the flow also runs before
verl's own sequence of served stages (`flows/train.py`). Each stage announces itself on `echo`
(`stage 3/7: ...`) and says how long it took. When training ends early (`stop_after_steps`),
the pipeline ends with it: the checkpoints are evaluated and logged by the run that finishes
training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import checkpoints_to_evaluate
from uni_agent_core.pipeline.precision import with_chosen_precision
from uni_agent_core.pipeline.results import Evaluated, PipelineResult
from uni_agent_core.pipeline.sizing import sized_for_host
from uni_agent_core.pipeline.stages import Stages
from uni_agent_core.rl.warm_start import WarmStartResult, rl_tasks, warm_started
from uni_agent_core.types import TaskSpec


class Stage(StrEnum):
    """The pipeline's stages, as its progress lines name them."""

    VALIDATE = "validate data"
    WARM_START = "warm start"
    DIFFICULTY = "estimate difficulty"
    EVAL_BEFORE = "evaluate the starting policy"
    TRAIN = "train"
    EVAL_CHECKPOINTS = "evaluate checkpoints"
    LOG = "log to MLflow"


def planned_stages(recipe: Recipe) -> list[Stage]:
    """The stages `run_pipeline` runs for `recipe`, in order (all of them when training runs to
    `trainer.total_steps`)."""
    evaluating = recipe.eval.enabled
    return [
        Stage.VALIDATE,
        *([Stage.WARM_START] if recipe.warm_start.enabled else []),
        Stage.DIFFICULTY,
        *([Stage.EVAL_BEFORE] if evaluating and recipe.eval.before_training else []),
        Stage.TRAIN,
        *([Stage.EVAL_CHECKPOINTS, Stage.LOG] if evaluating else []),
    ]


class StageProgress:
    """`stage i/n: NAME` when a stage starts and `... done in S s` when it ends."""

    def __init__(self, names: list[Stage], echo: Callable[[str], None] = print) -> None:
        self.names = names
        self.echo = echo

    @contextmanager
    def stage(self, name: Stage) -> Iterator[None]:
        where = f"stage {self.names.index(name) + 1}/{len(self.names)}: {name}"
        self.echo(where)
        start = time.perf_counter()
        yield
        self.echo(f"{where} done in {time.perf_counter() - start:.1f} s")


@dataclass(frozen=True)
class Prepared:
    """Data validation and the warm start done: what the stages after them take."""

    recipe: Recipe
    """The recipe, its policy the warm-started one when there was a warm start."""
    tasks: list[TaskSpec]
    """The valid tasks RL takes (`rl_tasks` after a warm start)."""
    warm_start: WarmStartResult | None
    """None: the recipe has no warm start."""


def prepare_training(
    recipe: Recipe, run_dir: Path, stages: Stages, progress: StageProgress | None = None
) -> Prepared:
    """Validate the data, then warm-start when the recipe has `warm_start:` enabled.

    Raises:
        WarmStartError: `warm_start.rl_tasks: rest` leaves RL no valid task.
    """
    echo = progress.echo if progress else print
    recipe = sized_for_host(with_chosen_precision(recipe, run_dir, echo), run_dir, echo)
    progress = progress or StageProgress(list(Stage), echo=lambda line: None)
    with progress.stage(Stage.VALIDATE):
        tasks = stages.validate_data(recipe, run_dir)
    if not recipe.warm_start.enabled:
        return Prepared(recipe, tasks, None)
    with progress.stage(Stage.WARM_START):
        warmed = stages.warm_start(recipe, run_dir, tasks)
    return Prepared(warm_started(recipe, warmed), rl_tasks(recipe, tasks), warmed)


def run_pipeline(
    recipe: Recipe,
    run_dir: Path,
    stages: Stages,
    *,
    stop_after_steps: int | None = None,
    launch_command: str | None = None,
    echo: Callable[[str], None] = print,
) -> PipelineResult:
    """Run every stage of an embedded recipe in order (the module docstring lists them).

    Args:
        recipe: the validated recipe (`trainer.backend.type: embedded`).
        run_dir: the run directory; every stage resumes from what it holds.
        stages: what runs each stage (`DirectStages`, or the flow's Prefect tasks).
        stop_after_steps: end training after this many steps; the pipeline then ends there.
        launch_command: the command that started the run, for the reproducibility record
            (None: this process's command line).
        echo: receives the stage lines.

    Raises:
        ValueError: a verl recipe (its stages run on served policies: the flow has them).
    """
    if recipe.trainer.backend.type != "embedded":
        raise ValueError(
            f"{recipe.name}: trainer.backend.type is {recipe.trainer.backend.type}; the "
            "pipeline runs embedded recipes (a verl recipe's stages run on served policies: "
            "the flow agent-rl/train)"
        )
    progress = StageProgress(planned_stages(recipe), echo)
    prepared = prepare_training(recipe, run_dir, stages, progress)
    recipe, tasks, warmed = prepared.recipe, prepared.tasks, prepared.warm_start
    warm_run = warmed.mlflow_run_id if warmed is not None else None
    with progress.stage(Stage.DIFFICULTY):
        stages.estimate_difficulty(recipe, run_dir, tasks)
    before = None
    if recipe.eval.enabled and recipe.eval.before_training:
        with progress.stage(Stage.EVAL_BEFORE):
            # traced into the warm start's run, which training continues (none: not traced)
            before = stages.evaluate(recipe, run_dir, "none", warm_run)
    with progress.stage(Stage.TRAIN):
        trained = stages.train(recipe, run_dir, tasks, warm_run, stop_after_steps, launch_command)
    done = PipelineResult(
        recipe, run_dir, trained, warmed, before, mlflow_run_id=trained.mlflow_run_id
    )
    if trained.last_step < recipe.trainer.total_steps:
        echo(
            f"stopped at step {trained.last_step} of {recipe.trainer.total_steps}: the "
            "checkpoints are evaluated and logged by the run that finishes training"
        )
        return done
    if not recipe.eval.enabled:
        return done
    evaluations: list[Evaluated] = []
    with progress.stage(Stage.EVAL_CHECKPOINTS):
        for checkpoint in checkpoints_to_evaluate(recipe, run_dir):
            evaluated = stages.evaluate(recipe, run_dir, str(checkpoint), trained.mlflow_run_id)
            evaluations.append(evaluated)
    final = evaluations[-1]
    with progress.stage(Stage.LOG):
        logged = stages.log_run(recipe, run_dir, trained.mlflow_run_id, final, before, evaluations)
    return PipelineResult(
        recipe, run_dir, trained, warmed, before, tuple(evaluations), mlflow_run_id=logged
    )
