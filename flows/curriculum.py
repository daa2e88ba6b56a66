"""The `curriculum-refresh` flow (deployment `nightly`, cron 03:00 UTC): fresh Best-of-N probes
with the newest checkpoint, then a new published curriculum version (atomic, idempotent).

On a verl recipe the newest verl checkpoint (the base policy before the first) is served by
the serve stage for the probes, and the servers stop however the refresh ends."""

from __future__ import annotations

from prefect import flow

from tasks.curriculum import refresh
from tasks.serving import serve, stop
from uni_agent_core.config.pools import load_recipe_for_pool
from uni_agent_core.rl.verl.merge import find_verl_checkpoints
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS, default_run_dir


@flow(name="curriculum-refresh", log_prints=True)
def curriculum_refresh(recipe: str, overrides: list[str] | None = None, probes: int = 2) -> dict:
    """Refresh a run's curriculum; returns the published version, its path and the diff."""
    loaded = load_recipe_for_pool(recipe, overrides or [])  # fails fast on a bad recipe
    run_dir = default_run_dir(loaded)
    if loaded.trainer.backend.type != "verl":
        return refresh(loaded, run_dir, probes)
    newest = "latest" if find_verl_checkpoints(run_dir / VERL_CHECKPOINTS) else "none"
    served = serve(loaded, run_dir, newest)
    try:
        return refresh(served.recipe, run_dir, probes, served_as=served.model.label)
    finally:
        stop(served)


if __name__ == "__main__":
    import sys

    curriculum_refresh(recipe=sys.argv[1], overrides=sys.argv[2:])
