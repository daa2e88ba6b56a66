"""The registry of named builders: task environments and sources, harnesses, sandbox backends,
policy losses and advantage estimators.

Every place that turns a recipe's name into an object looks it up here: a built-in name
(`react`, `local`, `swe`, ...) or a user's own object by import path, `package.module:attribute`
(the attribute may be dotted: `module:Class.method`). A user's module is imported when the
recipe is checked (`agent-rl recipe validate`, and every command before it starts work), so a
typo or an object that does not fit fails there, in one line. A package can also register its
builders under short names with `register` (for instance from its `__init__`), and a recipe
that imports it first names them.

Built-ins are registered as import paths too, so looking one up imports only its own module (a
local run never imports modal or swe-rex). Which protocol each kind's object must fit, and how
it is called, is documented per kind in `KINDS` and in `docs/extending.md`.

This module imports only `errors` of the package, so every layer may use it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, Literal

from uni_agent_core.errors import UserError

PluginKind = Literal[
    "task_env", "task_source", "harness", "sandbox", "policy_loss", "adv_estimator"
]

KINDS: Mapping[PluginKind, str] = {
    "task_env": "a `TaskEnvironment` subclass (uni_agent_core.envs.environment), called with "
    "an `EnvironmentContext`",
    "task_source": "a callable taking the section's `options` mapping and returning an "
    "iterable of `TaskSpec`s or rows in agent-rl's task form (uni_agent_core.types)",
    "harness": "a callable taking the section's `options` mapping and returning a `Harness` "
    "(uni_agent_core.harness.base): an object with `async def run(task, sandbox, endpoint)`",
    "sandbox": "a callable taking the section's `options` mapping and the task's placement "
    "(`workdir=`, `image=`, `hide_paths=`, ...) as keywords and returning a not yet started "
    "`Sandbox` (uni_agent_core.sandbox.base)",
    "policy_loss": "a function `loss(inputs: PolicyLossInputs) -> PolicyLossOutput` "
    "(uni_agent_core.rl.losses)",
    "adv_estimator": "a function `estimate(inputs: AdvantageInputs) -> Tensor` of one advantage "
    "per episode (uni_agent_core.rl.losses)",
}
"""Each kind of plug-in and what its object must be."""

_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

_registry: dict[PluginKind, dict[str, Any]] = {
    "task_env": {
        "swe": "uni_agent_core.envs.swe_env:SweEnvironment",
        "shell": "uni_agent_core.envs.shell.environment:ShellEnvironment",
    },
    "task_source": {},
    "harness": {
        "react": "uni_agent_core.harness.react.loop:ReactHarness",
        "blackbox": "uni_agent_core.harness.blackbox:BlackboxHarness",
        "mini_swe_agent": "uni_agent_core.harness.mini_swe_agent:MiniSweAgentHarness",
        "claude_code": "uni_agent_core.harness.claude_code:ClaudeCodeHarness",
        "codex": "uni_agent_core.harness.codex:CodexHarness",
    },
    "sandbox": {
        "local": "uni_agent_core.sandbox.local:LocalSandbox.from_config",
        "swerex": "uni_agent_core.sandbox.swerex:SwerexSandbox.from_config",
        "docker": "uni_agent_core.sandbox.docker:DockerSandbox.from_config",
        "modal": "uni_agent_core.sandbox.modal:ModalSandbox.from_config",
    },
    "policy_loss": {},
    "adv_estimator": {},
}


class PluginError(UserError, ValueError):
    """A plug-in name that resolves to nothing: unknown, not importable, or no such attribute.
    The message says which and how to fix it."""


def is_import_path(name: str) -> bool:
    """True for `package.module:attribute`, the form a user's own object is named in."""
    return bool(_IMPORT_PATH.match(name))


def register(kind: PluginKind, name: str, target: Any, *, replace: bool = False) -> None:
    """Register `target` (an object, or an import path string resolved on first use) as the
    `kind` named `name`.

    Raises:
        PluginError: `name` is taken (pass `replace=True` to override it) or malformed.
    """
    if not re.match(r"^[A-Za-z_][\w-]*$", name):
        raise PluginError(f"{kind} name {name!r}: use letters, digits, `_` and `-`")
    entries = _registry[kind]
    if name in entries and not replace:
        raise PluginError(f"{kind} {name!r} is already registered (pass replace=True)")
    entries[name] = target


def registered(kind: PluginKind) -> list[str]:
    """The names registered for `kind`, sorted."""
    return sorted(_registry[kind])


def resolve(kind: PluginKind, name: str) -> Any:
    """The object `name` stands for: a registered name's, or the import path's.

    Raises:
        PluginError: `name` is neither registered nor an import path, its module does not
            import, or it has no such attribute.
    """
    target = _registry[kind].get(name, name)
    if not isinstance(target, str):
        return target
    if not is_import_path(target):
        known = ", ".join(registered(kind)) or "none"
        raise PluginError(
            f"unknown {kind} {name!r}: name a registered one ({known}) or your own object as "
            "`package.module:attribute`"
        )
    module_name, _, attribute = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise PluginError(
            f"{kind} {name!r}: cannot import {module_name!r} ({type(error).__name__}: {error}); "
            "is it installed, or on PYTHONPATH?"
        ) from error
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise PluginError(
                f"{kind} {name!r}: {module_name} has no attribute {attribute!r}"
            ) from None
    return found
