"""Recipes for the commands that run them on this host: the model's checks plus the host's.

The recipe model (`config/`) checks a recipe wherever it is read. What only the host can tell,
that the policy can be loaded here, that the agent CLIs its harness runs are installed and that
the plug-ins it names import and fit (`rl/plugin_checks.py`), is checked here, before a command
starts any work, so `agent-rl recipe validate`, `train`, `eval`, `curriculum` and `gateway
serve` refuse the same recipes with the same `file: policy.name: ...` line instead of failing
minutes later.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from uni_agent_core.config import Recipe, load_recipe
from uni_agent_core.config.problems import RecipeError, RecipeProblem
from uni_agent_core.harness.agent_clis import agent_cli_problems, gateway_reach_problems
from uni_agent_core.models import PolicyUnavailableError, resolve_policy
from uni_agent_core.models.smollm2 import smollm2_gguf_path
from uni_agent_core.rl.plugin_checks import plugin_problems

BUILD_INPUTS: dict[str, Callable[[], object]] = {"smollm2-135m": smollm2_gguf_path}
"""What building a built-in policy reads from this host (each raises `PolicyUnavailableError`
when it is missing); `tiny` is built from code alone."""


def load_recipe_here(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """`load_recipe`, then the checks only this host can make.

    Raises:
        RecipeError: the recipe is invalid, or its policy cannot be loaded on this host.
    """
    recipe = load_recipe(path, overrides)
    if recipe.trainer.backend.type != "verl":
        # verl's workers load the policy on the pool's nodes, which need not be this host;
        # `agent-rl verl launch` checks it as it starts.
        require_policy(recipe, source=str(path))
    problems = [
        RecipeProblem(str(path), key, message)
        for key, message in [
            *agent_cli_problems(recipe.harness),
            *gateway_reach_problems(recipe.sandbox, recipe.harness),
            *plugin_problems(recipe),
        ]
    ]
    if problems:
        raise RecipeError(problems)
    return recipe


def require_policy(recipe: Recipe, *, source: str) -> None:
    """Refuse a recipe whose policy cannot be loaded on this host.

    Raises:
        RecipeError: naming `policy.name` under `source`, with what is missing.
    """
    problem = policy_problem(recipe.policy.name)
    if problem is not None:
        raise RecipeError([RecipeProblem(source, "policy.name", problem)])


def policy_problem(name: str) -> str | None:
    """Why the policy `name` cannot be loaded on this host, or None when it can.

    A built policy is ready once in the cache, or buildable when its inputs are installed; an
    `hf:<dir>` policy is a directory holding `config.json`.
    """
    source = resolve_policy(name)
    if source.is_ready:
        return None
    if source.builder is None:
        if not source.path.exists():
            return (
                f"{source.path} does not exist on this host; point hf:<dir> at a saved "
                "Hugging Face checkpoint"
            )
        return f"{source.path} holds no config.json, so it is not a Hugging Face model directory"
    find_inputs = BUILD_INPUTS.get(name)
    try:
        if find_inputs is not None:
            find_inputs()
    except PolicyUnavailableError as error:
        return str(error)
    return None
