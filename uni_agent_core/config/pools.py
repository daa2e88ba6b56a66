"""Work-pool profiles: what a Prefect work pool's hardware demands of a recipe.

A pool (`gpu`, `ascend`) names its profile in the job variable `AGENT_RL_POOL_PROFILE` (a YAML
file under `pools/`). A profile lists, per recipe section (`trainer.backend`, `engine`,
`sandbox`, and `serve`: the servers of the serve stage), the component kinds the pool runs and
the section to use otherwise: a recipe whose section is already of a kept kind keeps its tuning
(only the `force`d keys, such as the device, are set); any other section is replaced by the
profile's `default`. So the same recipe runs on
the `cpu` pool as the embedded default and on the `gpu` pool with verl, vLLM and docker.

The profile's changes are ordinary recipe overrides, worked out on the recipe as written and
applied before the run's own overrides (which therefore still win), then validated as usual.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import reduce
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from uni_agent_core.config.base import ConfigModel
from uni_agent_core.config.loading import format_override, load_recipe
from uni_agent_core.config.problems import RecipeError, RecipeProblem
from uni_agent_core.config.recipe import Recipe

PROFILE_ENV = "AGENT_RL_POOL_PROFILE"
"""Environment variable (set by a pool's job variables) naming the pool's profile file."""

Section = Literal["trainer.backend", "engine", "sandbox", "serve"]


class SectionRule(ConfigModel):
    """How a pool treats one recipe section."""

    keep_types: list[str] = Field(min_length=1)
    """Kinds (`type:` values; `backend:` for `serve`) the pool runs; a recipe section of one of
    them is kept."""
    default: dict[str, Any]
    """The section used when the recipe's is of another kind (must validate as the section)."""
    force: dict[str, Any] = Field(default_factory=dict)
    """Keys set on a kept section (e.g. `device: cuda`)."""


class PoolProfile(ConfigModel):
    """A work pool's hardware profile."""

    name: str
    """The pool's name, recorded with the run (`repro.pool`)."""
    description: str = ""
    """What the pool's machines are."""
    sections: dict[Section, SectionRule]
    """Rules per recipe section."""


def load_pool_profile(path: str | Path) -> PoolProfile:
    """Read and validate a profile file.

    Raises:
        RecipeError: the file is missing, is not YAML or does not validate.
    """
    file = Path(path)
    if not file.is_file():
        raise RecipeError(
            [RecipeProblem(str(file), "", f"pool profile not found (${PROFILE_ENV})")]
        )
    try:
        return PoolProfile.model_validate(yaml.safe_load(file.read_text()))
    except (yaml.YAMLError, ValidationError) as error:
        problem = RecipeProblem(str(file), "", f"invalid pool profile: {error}")
        raise RecipeError([problem]) from error


def _section(recipe: Recipe, dotted: str) -> Any:
    return reduce(getattr, dotted.split("."), recipe)


def pool_overrides(recipe: Recipe, profile: PoolProfile) -> list[str]:
    """The overrides that fit `recipe` to `profile`'s pool (empty when it already fits)."""
    overrides: list[str] = []
    for dotted, rule in profile.sections.items():
        current = _section(recipe, dotted)
        kind = current.backend if dotted == "serve" else current.type
        if kind in rule.keep_types:
            overrides += [
                format_override(f"{dotted}.{key}", value)
                for key, value in rule.force.items()
                if getattr(current, key, None) != value
            ]
        else:
            overrides.append(format_override(dotted, rule.default))
    return overrides


def active_profile(env: Mapping[str, str] | None = None) -> PoolProfile | None:
    """The profile the current pool names, or None off a profiled pool."""
    path = (os.environ if env is None else env).get(PROFILE_ENV)
    return load_pool_profile(path) if path else None


def load_recipe_for_pool(
    path: str | Path, overrides: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Recipe:
    """`load_recipe`, fitted to the current pool's profile when one is set.

    The fit is worked out on the recipe as written; the run's `overrides` come after it, so
    they may tune what the pool chose (e.g. `trainer.backend.n_gpus_per_node=4`).

    Raises:
        RecipeError: the recipe, the profile or the fitted recipe is invalid.
    """
    profile = active_profile(env)
    if profile is None:
        return load_recipe(path, overrides)
    fitted = pool_overrides(load_recipe(path), profile)
    if fitted:
        print(f"pool {profile.name}: {' '.join(fitted)}")
    return load_recipe(path, [*fitted, *overrides])
