"""Prefect tasks: Best-of-N difficulty estimation (`uni_agent_core.pipeline.stages`) and
curriculum refresh (thin)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.best_of_n import best_of_n
from uni_agent_core.curriculum.history import AttemptHistory
from uni_agent_core.curriculum.refresh import refresh_curriculum
from uni_agent_core.pipeline import stages
from uni_agent_core.rollout.build import build_tasks
from uni_agent_core.rundir.checkpoint import latest_complete
from uni_agent_core.rundir.layout import (
    CURRICULUM,
    PUBLISHED_CURRICULUM,
    checkpoint_dir,
    history_path,
)
from uni_agent_core.types import TaskSpec


@task(name="estimate-difficulty")
def estimate_difficulty(recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> Path | None:
    """Best-of-N over the valid tasks, recorded in the run's history (the sampler reads it)."""
    return stages.estimate_difficulty(recipe, run_dir, tasks)


def learnable_tasks(recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> list[TaskSpec]:
    """The tasks Best-of-N kept as learnable (`curriculum/difficulty.json`), in their order; all
    of them when the curriculum is off, no estimate was written, or it kept none."""
    report = run_dir / CURRICULUM / "difficulty.json"
    if not recipe.curriculum.enabled or not report.is_file():
        return tasks
    kept = set(json.loads(report.read_text()).get("kept_ids") or [])
    chosen = [task for task in tasks if task.instance_id in kept]
    return chosen or tasks


@task(name="refresh-curriculum")
def refresh(recipe: Recipe, run_dir: Path, probes: int, served_as: str | None = None) -> dict:
    """Fresh Best-of-N probes with the newest checkpoint, then publish a curriculum version.
    `served_as` names what the recipe's engine already serves (the serve stage's servers on a
    verl run's newest checkpoint); otherwise the newest embedded checkpoint is loaded."""
    tasks = build_tasks(recipe)
    history = AttemptHistory(history_path(recipe, run_dir))
    checkpoint = None if served_as else latest_complete(checkpoint_dir(recipe, run_dir))
    if probes > 0:
        asyncio.run(best_of_n(recipe, tasks, probes, history, checkpoint=checkpoint))
    curriculum = recipe.curriculum
    published = refresh_curriculum(
        history,
        [t.instance_id for t in tasks],
        run_dir / PUBLISHED_CURRICULUM,
        window=curriculum.window,
        band=curriculum.target_band,
        min_attempts=curriculum.min_attempts,
        source_checkpoint=served_as or (str(checkpoint.path) if checkpoint else None),
    )
    print(f"refresh-curriculum: version {published.version} (new: {published.published})")
    return {"version": published.version, "path": str(published.path), "diff": published.diff}
