"""`agent-rl curriculum estimate | refresh`: Best-of-N rollouts through the recipe's rollout
stack, the difficulty table, and a new published curriculum version.

Both record every attempt in the run's history (`<run dir>/history.sqlite` unless the recipe
names another), print progress lines on stderr and a summary on stdout.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.best_of_n import best_of_n
from uni_agent_core.curriculum.difficulty import write_difficulty
from uni_agent_core.curriculum.history import AttemptHistory
from uni_agent_core.curriculum.refresh import Published, refresh_curriculum
from uni_agent_core.rollout.build import build_tasks
from uni_agent_core.rundir.checkpoint import Checkpoint, latest_complete
from uni_agent_core.rundir.layout import (
    CURRICULUM,
    PUBLISHED_CURRICULUM,
    checkpoint_dir,
    default_run_dir,
    history_path,
)


def estimate(
    recipe: Recipe, *, n: int | None, max_tasks: int | None, out: str | None, run_dir: str | None
) -> int:
    """`agent-rl curriculum estimate`: difficulty.json and difficulty.md."""
    root = Path(run_dir) if run_dir else default_run_dir(recipe)
    tasks = build_tasks(recipe)[:max_tasks]
    history = AttemptHistory(history_path(recipe, root))
    samples = n or recipe.curriculum.best_of_n
    report = asyncio.run(best_of_n(recipe, tasks, samples, history))
    target = write_difficulty(report, Path(out) if out else root / CURRICULUM)
    counts = ", ".join(f"{bucket} {count}" for bucket, count in report.counts().items())
    print(
        f"best-of-{samples} over {len(tasks)} tasks in {report.duration_s:.1f}s: {counts}; "
        f"{len(report.kept_ids)} kept for training"
    )
    print(f"wrote {target} and {target.with_suffix('.md')}")
    return 0


def refresh(
    recipe: Recipe,
    *,
    n: int,
    checkpoint: str,
    out: str | None,
    run_dir: str | None,
) -> int:
    """`agent-rl curriculum refresh`: fresh probes with the latest checkpoint, then publish."""
    root = Path(run_dir) if run_dir else default_run_dir(recipe)
    tasks = build_tasks(recipe)
    history = AttemptHistory(history_path(recipe, root))
    source: Checkpoint | None = None
    if checkpoint == "auto":
        source = latest_complete(checkpoint_dir(recipe, root))
    if n > 0:
        asyncio.run(best_of_n(recipe, tasks, n, history, checkpoint=source))
    curriculum = recipe.curriculum
    published: Published = refresh_curriculum(
        history,
        [task.instance_id for task in tasks],
        Path(out) if out else root / PUBLISHED_CURRICULUM,
        window=curriculum.window,
        band=curriculum.target_band,
        min_attempts=curriculum.min_attempts,
        source_checkpoint=str(source.path) if source else None,
    )
    state = "published" if published.published else "unchanged, kept"
    print(f"curriculum version {published.version} {state}: {published.path}")
    if published.diff:
        print(f"diff: {published.diff}")
    return 0
