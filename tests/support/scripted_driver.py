"""`scripted_driver`: a real rollout driver (gateway, sessions, the recipe's sandboxes, harness
and task environments) whose policy is a `ScriptedEngine` replying with given texts.

For tests of what an episode or a group does end to end without a model: the replies are
fixed by call index (`replies`), everything else is the recipe's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.verifier import close_sandboxes
from uni_agent_core.gateway.embedded import serving_gateway
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.rollout.build import build_session_manager, build_tokenizer
from uni_agent_core.rollout.driver import RolloutDriver


@asynccontextmanager
async def scripted_driver(
    recipe: Recipe, replies: Mapping[int, str], *, max_concurrency: int = 1
) -> AsyncIterator[tuple[RolloutDriver, ScriptedEngine]]:
    """The recipe's driver over a served gateway and a scripted engine (its `requests` record
    what the policy was sent); the run's sandboxes are closed on exit."""
    tokenizer = build_tokenizer(recipe)
    engine = ScriptedEngine(tokenizer)
    engine.replies = dict(replies)
    manager = build_session_manager(recipe, engine, tokenizer)
    async with serving_gateway(manager) as url:
        driver = RolloutDriver.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=max_concurrency
        )
        try:
            yield driver, engine
        finally:
            await close_sandboxes(driver.sandbox_factory)
