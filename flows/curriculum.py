"""The `curriculum-refresh` flow (deployment `nightly`, cron 03:00 UTC): fresh Best-of-N probes
with the newest checkpoint, then a new published curriculum version (atomic, idempotent)."""

from __future__ import annotations

from prefect import flow

from tasks.curriculum import refresh
from uni_agent_core.config.pools import load_recipe_for_pool
from uni_agent_core.rundir.layout import default_run_dir


@flow(name="curriculum-refresh", log_prints=True)
def curriculum_refresh(recipe: str, overrides: list[str] | None = None, probes: int = 2) -> dict:
    """Refresh a run's curriculum; returns the published version, its path and the diff."""
    loaded = load_recipe_for_pool(recipe, overrides or [])  # fails fast on a bad recipe
    return refresh(loaded, default_run_dir(loaded), probes)


if __name__ == "__main__":
    import sys

    curriculum_refresh(recipe=sys.argv[1], overrides=sys.argv[2:])
