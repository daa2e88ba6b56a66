"""Building a recipe's runtime objects, in one place.

From a recipe: the engine (the HF replicas or inference servers, behind the router when there
are several), the policy's tokenizer, the gateway's session manager over a given engine, the
sandbox factory of the run's tasks, and the task set. Training, Best-of-N, evaluation, the warm
start, verl's agent loop and `agent-rl gateway serve` all build through these functions and hand
the objects down; the gateway never builds an engine, and command-line flags become recipe
overrides, not a second way to build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.sources import load_tasks
from uni_agent_core.envs.verifier import SandboxFactory, task_sandbox_factory
from uni_agent_core.gateway.launch import session_manager
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.harness.agent_clis import sandbox_for_agent_clis
from uni_agent_core.inference.types import Engine
from uni_agent_core.types import TaskSpec


def build_engine(recipe: Recipe, *, lendable: Engine | None = None) -> Engine:
    """The recipe's engine: `router.replicas` HF engines or one per server URL, routed by the
    recipe's router when there are several; `lendable` (the trainer's own model, role
    switching) joins the router parked."""
    from uni_agent_core.router.build import build_routed_engine

    return build_routed_engine(recipe.policy, recipe.engine, recipe.router, lendable=lendable)


def build_tokenizer(recipe: Recipe, engine: Engine | None = None) -> Any:
    """The policy's tokenizer: the engine's own when it has one (HF engines), else loaded from
    the policy, with the recipe's chat-template override applied."""
    tokenizer = engine.tokenizer if engine is not None else None
    if tokenizer is not None:
        return tokenizer
    from transformers import AutoTokenizer

    from uni_agent_core.models import prepare_policy

    policy = recipe.policy
    tokenizer = AutoTokenizer.from_pretrained(prepare_policy(policy.name))
    if policy.chat_template is not None:
        tokenizer.chat_template = Path(policy.chat_template).read_text()
    return tokenizer


def build_session_manager(
    recipe: Recipe, engine: Engine, tokenizer: Any | None = None
) -> SessionManager:
    """The gateway's session manager over `engine`, with the recipe's gateway section; chains
    are capped at the gateway's `max_total_tokens` (by default the trainer's context)."""
    return session_manager(
        engine,
        tokenizer if tokenizer is not None else build_tokenizer(recipe, engine),
        recipe.gateway,
        recipe.trainer.max_context_tokens,
    )


def build_sandbox_factory(recipe: Recipe) -> SandboxFactory:
    """Fresh sandboxes from the recipe's sandbox section, each task's override applied, with
    what the harness's agent CLIs need to run inside (`sandbox_for_agent_clis`)."""
    return task_sandbox_factory(sandbox_for_agent_clis(recipe.sandbox, recipe.harness))


def build_tasks(recipe: Recipe) -> list[TaskSpec]:
    """The recipe's task set (`tasks:`)."""
    return load_tasks(recipe.tasks)
