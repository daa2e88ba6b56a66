"""The rollout stack of a recipe: engine, in-loop gateway and rollout driver, built together.

Training, Best-of-N difficulty estimation and evaluation all roll out the same way; this is the
one place that builds it. `rollout_stack(recipe, ...)` is an async context manager yielding a
`RolloutStack`; the engine can start from a checkpoint's weights.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.verifier import close_sandboxes
from uni_agent_core.rollout.build import build_engine, build_session_manager
from uni_agent_core.rollout.driver import RolloutDriver


@dataclass
class RolloutStack:
    """A live engine + gateway + driver."""

    manager: Any
    driver: RolloutDriver
    gateway_url: str

    @property
    def engine(self) -> Any:
        return self.manager.engine


def episode_concurrency(recipe: Recipe) -> int:
    """Episodes in flight at once: `trainer.max_concurrent_episodes`, else one step's worth."""
    trainer = recipe.trainer
    return trainer.max_concurrent_episodes or trainer.batch_size * trainer.group_size


@asynccontextmanager
async def rollout_stack(
    recipe: Recipe,
    *,
    max_concurrency: int,
    driver_class: type[RolloutDriver] = RolloutDriver,
    weights: Path | None = None,
    version: int = 0,
    lendable: Any = None,
) -> AsyncIterator[RolloutStack]:
    """Build and serve the recipe's rollout stack for the duration of the block.

    Args:
        recipe: the validated recipe (policy, engine, gateway, harness, sandbox, reward).
        max_concurrency: episodes in flight at once.
        driver_class: the rollout driver (a subclass can post-process episodes).
        weights: a checkpoint's `model/` directory to start the engine from.
        version: the policy version of those weights.
        lendable: an engine over the trainer's own model, added to the router parked (role
            switching in separate_async).
    """
    from uni_agent_core.gateway.embedded import serving_gateway

    manager = build_session_manager(recipe, build_engine(recipe, lendable=lendable))
    async with serving_gateway(manager) as url:
        if weights is not None:
            await manager.engine.update_weights(str(weights), version)
        driver = driver_class.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=max_concurrency
        )
        try:
            yield RolloutStack(manager, driver, url)
        finally:
            await close_sandboxes(driver.sandbox_factory)
