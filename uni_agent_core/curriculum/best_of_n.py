"""Best-of-N difficulty estimation through the recipe's rollout stack: `n` episodes of every
task with the recipe's policy (or a checkpoint's weights), each attempt recorded in the run's
history, a progress line per episode on stderr (`curriculum/difficulty.py` turns the rewards
into the difficulty table)."""

from __future__ import annotations

import sys

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.curriculum.difficulty import DifficultyReport, estimate_difficulty
from uni_agent_core.curriculum.history import AttemptHistory
from uni_agent_core.progress import ProgressLines
from uni_agent_core.rollout.driver import episode_seed
from uni_agent_core.rollout.stack import episode_concurrency, rollout_stack
from uni_agent_core.rundir.checkpoint import Checkpoint
from uni_agent_core.types import RolloutResult, TaskSpec


async def best_of_n(
    recipe: Recipe,
    tasks: list[TaskSpec],
    n: int,
    history: AttemptHistory,
    *,
    checkpoint: Checkpoint | None = None,
) -> DifficultyReport:
    """Best-of-`n` over `tasks` with the recipe's policy (or a checkpoint's weights)."""
    progress = ProgressLines("best-of-n", sys.stderr, unit="episodes")
    weights = checkpoint.path / "model" if checkpoint else None
    version = int(checkpoint.state.get("version", 0)) if checkpoint else 0
    concurrency = episode_concurrency(recipe)
    async with rollout_stack(
        recipe, max_concurrency=concurrency, weights=weights, version=version
    ) as stack:

        def episode(task: TaskSpec, index: int):  # noqa: ANN202 - a coroutine
            seed = episode_seed(recipe.seed, -1 - version, task.instance_id, index)
            return stack.driver.episode(task, index, seed=seed)

        def on_episode(done: int, total: int, result: RolloutResult) -> None:
            outcome = f"reward {result.reward:g} ({result.exit_reason.value})"
            progress.line(done, total, f"{result.task_id}#{result.sample_index}", outcome, False)

        return await estimate_difficulty(
            tasks,
            episode,
            n=n,
            band=recipe.curriculum.target_band,
            history=history,
            run_id=f"{recipe.name}/best-of-{n}",
            concurrency=concurrency,
            on_episode=on_episode,
        )
