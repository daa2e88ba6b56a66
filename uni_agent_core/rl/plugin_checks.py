"""Whether the plug-ins a recipe names import on this host and fit their protocols.

A recipe names a user's harness, sandbox backend, task source, policy loss or advantage
estimator by import path, and a task source may name a user's task environment
(`uni_agent_core.plugins`). The
recipe model only checks the form of a path; `plugin_problems` imports each one and checks what
it finds, so that `agent-rl recipe validate` (and every command, before it starts work) refuses
a typo or a misfit in one line per problem instead of failing in the first episode or step.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import Any, get_args

from uni_agent_core.config.algorithm import BuiltinAdvantageEstimator, BuiltinPolicyLoss
from uni_agent_core.config.harness import MixHarnessConfig, PluginHarnessConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.sandbox import PluginSandboxConfig
from uni_agent_core.config.tasks import MixTasksConfig, PluginTasksConfig, SourceTasksConfig
from uni_agent_core.envs.environment import environment_class
from uni_agent_core.envs.sources import TaskSourceError, has_splits, load_tasks
from uni_agent_core.harness.base import Harness
from uni_agent_core.plugins import KINDS, PluginError, PluginKind, is_user_plugin, resolve
from uni_agent_core.rl.loss_contract import check_policy_loss

BUILTINS: dict[str, Any] = {
    "policy_loss": BuiltinPolicyLoss,
    "adv_estimator": BuiltinAdvantageEstimator,
}


def plugin_problems(recipe: Recipe) -> list[tuple[str, str]]:
    """`(dotted key, message)` for each plug-in of `recipe` that does not import or fit."""
    checks: list[tuple[str, Callable[[], object]]] = []
    for key, harness in _plugin_harnesses(recipe):
        checks.append((key, partial(_check_harness, harness)))
    sandbox = recipe.sandbox
    if isinstance(sandbox, PluginSandboxConfig):
        checks.append(("sandbox.path", partial(_check_callable, "sandbox", sandbox.path, 1)))
    algorithm = recipe.trainer.algorithm
    algorithm_plugins: list[tuple[str, PluginKind, str]] = [
        ("trainer.algorithm.policy_loss", "policy_loss", algorithm.policy_loss),
        ("trainer.algorithm.adv_estimator", "adv_estimator", algorithm.adv_estimator),
    ]
    for key, kind, name in algorithm_plugins:
        if kind == "policy_loss" and is_user_plugin(kind, name):
            checks.append((key, partial(_check_policy_loss, name, algorithm.policy_loss_options)))
        elif is_user_plugin(kind, name):
            checks.append((key, partial(_check_callable, kind, name, 1)))
        elif name not in get_args(BUILTINS[kind]):
            checks.append((key, partial(_check_verl_name, kind, name)))
    for key, source in _task_sources(recipe):
        if source.env is not None:
            checks.append((f"{key}.env", partial(environment_class, source.env)))
        if isinstance(source, PluginTasksConfig):
            checks.append((f"{key}.path", partial(_check_task_rows, source)))
            if recipe.eval.enabled and recipe.eval.suite == "heldout":
                checks.append(("eval.suite", partial(_check_splits, source.path)))
    suite = recipe.eval.suite
    if recipe.eval.enabled and ":" in suite:
        checks.append(("eval.suite", partial(_check_splits, suite.rpartition(":")[0])))
    problems = []
    for key, check in checks:
        try:
            check()
        except (PluginError, TypeError) as error:
            problems.append((key, str(error)))
    return problems


def _plugin_harnesses(recipe: Recipe) -> list[tuple[str, PluginHarnessConfig]]:
    harness = recipe.harness
    if isinstance(harness, PluginHarnessConfig):
        return [("harness.path", harness)]
    if isinstance(harness, MixHarnessConfig):
        return [
            (f"harness.harnesses.{index}.harness.path", member.harness)
            for index, member in enumerate(harness.harnesses)
            if isinstance(member.harness, PluginHarnessConfig)
        ]
    return []


def _task_sources(recipe: Recipe) -> list[tuple[str, SourceTasksConfig]]:
    """Each source of the recipe's `tasks:` (a mix's members), with its key."""
    tasks = recipe.tasks
    if isinstance(tasks, MixTasksConfig):
        return [(f"tasks.sources.{index}", source) for index, source in enumerate(tasks.sources)]
    return [("tasks", tasks)]


def _check_harness(config: PluginHarnessConfig) -> None:
    builder = _check_callable("harness", config.path, 1)
    try:
        harness = builder(dict(config.options))
    except Exception as error:  # noqa: BLE001 - the user's constructor: report any failure
        raise TypeError(f"{config.path}(options) raised {type(error).__name__}: {error}") from error
    if not isinstance(harness, Harness) or not inspect.iscoroutinefunction(harness.run):
        raise TypeError(
            f"{config.path}(options) returned a {type(harness).__name__}, which has no "
            "`async def run(task, sandbox, endpoint)` (uni_agent_core/harness/base.py)"
        )


def _check_callable(kind: PluginKind, name: str, arguments: int) -> Any:
    """The object `name` resolves to, checked to be callable with `arguments` positional
    arguments."""
    found = resolve(kind, name)
    if not callable(found):
        raise TypeError(
            f"{name} is a {type(found).__name__}, not a callable: a {kind} is {KINDS[kind]}"
        )
    try:
        inspect.signature(found).bind(*([None] * arguments))
    except TypeError as error:
        raise TypeError(f"{name} cannot be called with {arguments} argument(s): {error}") from None
    except ValueError:  # no signature (a builtin): trust it
        pass
    return found


def _check_policy_loss(name: str, options: dict[str, Any]) -> None:
    """A user's loss: callable with its recipe options, and keeping the loss contract (the
    mask, the rollout-correction weights: `rl/loss_contract.py`) on a probe batch."""
    loss = _check_callable("policy_loss", name, 1)
    try:
        inspect.signature(loss).bind(None, **options)
    except TypeError as error:
        raise TypeError(
            f"{name} does not take trainer.algorithm.policy_loss_options {sorted(options)}: {error}"
        ) from None
    except ValueError:  # no signature (a builtin): trust it
        pass
    check_policy_loss(loss, options, name=name)


def _check_task_rows(source: PluginTasksConfig) -> None:
    """A user's task source: callable, and what it returns is tasks (every row a `TaskSpec`,
    `instance_id` and `problem_statement` given) whose environments resolve. The source is
    called, as stage 1 would call it: a source is a function of its options."""
    _check_callable("task_source", source.path, 1)
    try:
        tasks = load_tasks(source)
    except TaskSourceError as error:
        raise TypeError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - the user's source: report any failure
        raise TypeError(
            f"{source.path}({dict(source.options)}) raised {type(error).__name__}: {error}"
        ) from error
    if not tasks:
        raise TypeError(f"{source.path} returned no tasks")
    for env in sorted({task.env for task in tasks} - {source.env}):
        environment_class(env)


def _check_splits(name: str) -> None:
    """A task source whose split is evaluated takes a `split`."""
    source = _check_callable("task_source", name, 1)
    if not has_splits(source):
        raise TypeError(
            f"task source {name!r} has no held-out split to evaluate: give its function a "
            '`split` parameter (`def load(options, split="train")`), or name another suite'
        )


def _check_verl_name(kind: str, name: str) -> None:
    """A name that is not verl's own must be registered in verl's registry by now."""
    from verl.trainer.ppo import core_algos

    try:
        if kind == "policy_loss":
            core_algos.get_policy_loss_fn(name)
        else:
            core_algos.get_adv_estimator_fn(name)
    except (KeyError, ValueError, NotImplementedError):
        known = ", ".join(get_args(BUILTINS[kind]))
        raise PluginError(
            f"unknown {kind} {name!r}: one of verl's ({known}), yours by import path "
            "(`package.module:function`), or a name your module registered in verl's registry "
            "(uni_agent_core.rl.losses.register_for_verl)"
        ) from None
