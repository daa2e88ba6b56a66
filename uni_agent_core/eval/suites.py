"""Evaluation suites by name: the bundled micro-swe and shell splits, the held-out split of a
recipe's own sources (generated, or a user's source that takes a `split`), a split of any
registered or installed task source (`NAME:SPLIT`), SWE-bench Verified, SWE-rebench, or a file
of task rows."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.tasks import (
    MicroSweTasksConfig,
    MixTasksConfig,
    PluginTasksConfig,
    ShellLevel,
    ShellTasksConfig,
    SweBenchTasksConfig,
    SweRebenchTasksConfig,
    TasksConfig,
)
from uni_agent_core.envs.sources import (
    interleave,
    load_plugin_split,
    load_task_file,
    load_tasks,
)
from uni_agent_core.plugins import is_import_path, is_user_plugin
from uni_agent_core.types import TaskSpec

SUITES = (
    "micro-swe:test",
    "micro-swe:train",
    "shell:test",
    "shell:train",
    "heldout",
    "swe-bench-verified",
    "swe-rebench",
)
DEFAULT_MICRO_SWE_TASKS = 50
DEFAULT_SHELL_TASKS = 32
RECIPE_SUITES = {
    "micro_swe": "micro-swe:test",
    "shell": "shell:test",
    "heldout": "heldout",
    "swe_bench_verified": "swe-bench-verified",
}
"""The suite name of each recipe `eval.suite` value."""
SWE_BENCH_VERIFIED = "princeton-nlp/SWE-bench_Verified"
SWE_REBENCH = "nebius/SWE-rebench"


def recipe_suite(recipe: Recipe) -> str:
    """The suite the recipe's `eval:` section names."""
    return RECIPE_SUITES.get(recipe.eval.suite, recipe.eval.suite)


def resolve_suite(
    suite: str, recipe: Recipe, *, max_tasks: int | None = None, data: str | None = None
) -> list[TaskSpec]:
    """The tasks of a suite.

    Args:
        suite: `micro-swe:test` (the held-out split, never trained on), `micro-swe:train`,
            `shell:test`, `shell:train`, `heldout` (the held-out split of each source of the
            recipe's `tasks:`, interleaved), `NAME:SPLIT` (a split of a registered or
            installed task source, with the recipe's options for it where its `tasks:` names
            it), `swe-bench-verified`, `swe-rebench`, or a path to task rows
            (JSONL/parquet/dir).
        recipe: supplies the seed, the eval section's defaults and the dataset location.
        max_tasks: evaluate the first N tasks (default: the eval section's `max_tasks`).
        data: rows of a dataset suite (a local file or a cached `datasets` id).

    Raises:
        ValueError: an unknown suite name that is not a path either.
    """
    limit = max_tasks or recipe.eval.max_tasks
    if suite in ("micro-swe:test", "micro-swe:heldout", "micro-swe:train"):
        split: Literal["train", "heldout"] = "train" if suite.endswith("train") else "heldout"
        config = MicroSweTasksConfig(
            n=limit or DEFAULT_MICRO_SWE_TASKS,
            seed=recipe.seed,
            levels=list(recipe.eval.levels),
            split=split,
        )
        return load_tasks(config)
    if suite in ("shell:test", "shell:heldout", "shell:train"):
        shell_levels: list[ShellLevel] = ["L0", "L1"]
        levels = [level for level in shell_levels if level in recipe.eval.levels]
        return load_tasks(
            ShellTasksConfig(
                n=limit or DEFAULT_SHELL_TASKS,
                seed=recipe.seed,
                levels=levels or shell_levels,
                split="train" if suite.endswith("train") else "heldout",
            )
        )
    if suite == "heldout":
        return heldout_tasks(recipe.tasks, limit)
    if suite == "swe-bench-verified":
        source = data or recipe.eval.dataset or SWE_BENCH_VERIFIED
        return load_tasks(
            SweBenchTasksConfig(path_or_dataset=source, variant="verified", max_tasks=limit)
        )
    if suite == "swe-rebench":
        return load_tasks(
            SweRebenchTasksConfig(path_or_dataset=data or SWE_REBENCH, max_tasks=limit)
        )
    if Path(suite).exists():
        return load_task_file(suite)[:limit]
    name, _, named_split = suite.rpartition(":")
    if name and not is_import_path(name) and is_user_plugin("task_source", name):
        return load_plugin_split(_source_named(recipe.tasks, name), named_split)[:limit]
    raise ValueError(
        f"unknown suite {suite!r}; use one of {', '.join(SUITES)}, NAME:SPLIT of an installed "
        "task source (`agent-rl plugins list --kind task_source`), or a task file"
    )


def _source_named(tasks: TasksConfig, name: str) -> PluginTasksConfig:
    """The recipe's own section for the task source `name` (its options and env), or a bare
    one when the recipe's tasks come from elsewhere."""
    sources = list(tasks.sources) if isinstance(tasks, MixTasksConfig) else [tasks]
    for source in sources:
        if isinstance(source, PluginTasksConfig) and source.path == name:
            return source
    return PluginTasksConfig(path=name)


def heldout_tasks(tasks: TasksConfig, limit: int | None) -> list[TaskSpec]:
    """The held-out split of each generated source of a `tasks:` section (a mix's members,
    interleaved; `limit` tasks in all, shared evenly), each source's `env` kept.

    Raises:
        ValueError: a source has no held-out split (a dataset, a file).
        TaskSourceError: a user's source takes no `split`.
    """
    sources = list(tasks.sources) if isinstance(tasks, MixTasksConfig) else [tasks]
    share = None if limit is None else -(-limit // len(sources))
    heldout = []
    for source in sources:
        if isinstance(source, PluginTasksConfig):
            heldout.append(load_plugin_split(source, "test")[:share])
            continue
        if not isinstance(source, MicroSweTasksConfig | ShellTasksConfig):
            raise ValueError(f"{source.type} tasks have no held-out split")
        n = share or source.n
        heldout.append(load_tasks(source.model_copy(update={"split": "heldout", "n": n})))
    return interleave(heldout)[:limit]
