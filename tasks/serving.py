"""Prefect tasks: serve a policy or checkpoint on the pool's inference servers, and stop them
(thin; `uni_agent_core.rl.serve`). The flow stops what it served in a `finally`, so servers end
on every exit path, a failed stage included."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.rl.serve import ServedPolicy, start_serving


@task(name="serve-policy", cache_policy=NO_CACHE)
def serve(recipe: Recipe, run_dir: Path, checkpoint: str = "none") -> ServedPolicy:
    """Start the recipe's servers on the base policy (`none`) or a checkpoint (`latest`, a
    directory) and wait for their health; returns them with the recipe pointed at them."""
    served = start_serving(recipe, run_dir, checkpoint, echo=print)
    print(f"serve-policy: {served.model.label} at {', '.join(served.base_urls)}")
    return served


@task(name="stop-servers", cache_policy=NO_CACHE)
def stop(served: ServedPolicy) -> None:
    """End the servers' process groups."""
    served.stop()
    print(f"stop-servers: {served.model.label} stopped")
