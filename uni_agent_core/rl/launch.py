"""One way into training, for every caller and both backends.

`launch(recipe, run_dir)` trains the recipe to `trainer.total_steps`, resuming from what the
run directory holds, and returns a `RunSummary`: the embedded trainer in this process
(`run.py`), or verl's trainer on the pool's accelerators (`verl/launch.py`), which resumes from
its own checkpoints. The pipeline's train stage (`pipeline/stages.py`, run by `agent-rl train`
and the Prefect flow) calls it, as does `agent-rl train` on a verl recipe; none decides the
backend itself. Before either trainer starts, the local sandboxes and cgroups of dead runs on
this host are swept (`sandbox/sweep.py`) and the sweep's summary printed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.errors import AgentRLError
from uni_agent_core.rl.step_records import RunSummary
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS, default_run_dir
from uni_agent_core.sandbox.sweep import sweep_dead_runs
from uni_agent_core.types import TaskSpec

VERL_CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"
"""The file in verl's checkpoint directory naming the step of its newest checkpoint."""


class TrainingFailed(AgentRLError, RuntimeError):
    """The backend's trainer ended without finishing the run."""


def launch(
    recipe: Recipe,
    run_dir: Path | None = None,
    *,
    tasks: list[TaskSpec] | None = None,
    stop_after_steps: int | None = None,
    mlflow_run_id: str | None = None,
    launch_command: str | None = None,
    echo: Callable[[str], None] = print,
) -> RunSummary:
    """Train `recipe` in `run_dir` (default `runs/<name>`) and say what was trained.

    Args:
        recipe: the validated recipe; `trainer.backend.type` picks the trainer.
        run_dir: the run directory.
        tasks: the tasks to train on (those that passed data validation); None: the recipe's.
        stop_after_steps: end after this many steps (embedded only; a later launch resumes).
        mlflow_run_id: the MLflow run an earlier stage opened (the warm start's).
        launch_command: the command that started the run, for the reproducibility record.
        echo: receives the progress lines.

    Raises:
        ValueError: `stop_after_steps` on a verl recipe.
        TrainingFailed: verl's trainer exited with an error.
        VerlConfigError, VerlLaunchError: verl rejects the recipe, or no accelerator is here.
    """
    run_dir = run_dir or default_run_dir(recipe)
    swept = asyncio.run(sweep_dead_runs())
    if swept:
        echo(swept.line())
    if recipe.trainer.backend.type == "verl":
        if stop_after_steps is not None:
            raise ValueError(
                "stop_after_steps is for the embedded trainer; verl recipes run "
                "trainer.total_steps (set it with --set)"
            )
        ids = None if tasks is None else [task.instance_id for task in tasks]
        return _launch_on_verl(recipe, run_dir, ids, echo)
    from uni_agent_core.rl.run import TrainingRun

    run = TrainingRun(
        recipe,
        run_dir=run_dir,
        echo=echo,
        stop_after_steps=stop_after_steps,
        tasks=tasks,
        mlflow_run_id=mlflow_run_id,
        launch_command=launch_command,
    )
    summary = run.run()
    summary.mlflow_run_id = run.tracker.run_id if run.tracker else None
    return summary


def verl_checkpointed_step(run_dir: Path) -> int:
    """The step of verl's newest checkpoint in this run directory (0 when it has none)."""
    tracker = run_dir / VERL_CHECKPOINTS / VERL_CHECKPOINT_TRACKER
    try:
        return int(tracker.read_text().strip())
    except (OSError, ValueError):
        return 0


def _launch_on_verl(
    recipe: Recipe, run_dir: Path, task_ids: list[str] | None, echo: Callable[[str], None]
) -> RunSummary:
    from uni_agent_core.rl.verl.launch import launch_recipe

    start = verl_checkpointed_step(run_dir)
    code = launch_recipe(recipe, run_dir=run_dir, task_ids=task_ids, echo=echo)
    if code != 0:
        raise TrainingFailed(f"verl's trainer exited with code {code}")
    # verl trains to total_steps, resuming from its own newest checkpoint
    trained = max(recipe.trainer.total_steps - start, 0)
    return RunSummary(run_dir, start_step=start, steps=trained, backend="verl")
