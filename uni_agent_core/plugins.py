"""The registry of named builders: task environments and sources, harnesses, sandbox backends,
policy losses and advantage estimators.

Every place that turns a recipe's name into an object looks it up here: a built-in name
(`react`, `local`, `swe`, ...) or a user's own object by import path, `package.module:attribute`
(the attribute may be dotted: `module:Class.method`). A user's module is imported when the
recipe is checked (`agent-rl recipe validate`, and every command before it starts work), so a
typo or an object that does not fit fails there, in one line.

An installed package shares its builders under short names through entry points, one group per
kind (`ENTRY_POINT_GROUPS`: `[project.entry-points."agent_rl.task_envs"] my_env =
"my_env.environment:MyEnvironment"` in its pyproject): once it is `pip install`ed a recipe names
`env: my_env`, with no `PYTHONPATH` and no import order to get right. `installed` lists every
name and where it comes from (`agent-rl plugins list`). Built-in and `register`ed names come
first: an installed package cannot shadow them.

Built-ins are registered as import paths too, so looking one up imports only its own module (a
local run never imports modal or swe-rex). Which protocol each kind's object must fit, and how
it is called, is documented per kind in `KINDS` and in `docs/extending.md`.

This module imports only `errors` of the package, so every layer may use it.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
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

ENTRY_POINT_GROUPS: Mapping[PluginKind, str] = {
    "task_env": "agent_rl.task_envs",
    "task_source": "agent_rl.task_sources",
    "harness": "agent_rl.harnesses",
    "sandbox": "agent_rl.sandboxes",
    "policy_loss": "agent_rl.policy_losses",
    "adv_estimator": "agent_rl.adv_estimators",
}
"""The entry-point group an installed package lists its plug-ins of each kind in."""

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


@dataclass(frozen=True)
class InstalledPlugin:
    """A name a recipe can give for one kind of plug-in, and where it comes from."""

    kind: PluginKind
    name: str
    target: str
    """The import path it stands for (`repr` of an object registered as one)."""
    origin: str
    """`built-in`, `registered` (by `register` in this process), or the distribution that
    declares it as an entry point (`name version`)."""


def _entry_points(kind: PluginKind) -> dict[str, EntryPoint]:
    """The installed entry points of `kind`, by name (the first one wins on a clash).

    Scanning the installed distributions takes tens of milliseconds and the trainer asks every
    step, so the scan is kept per search path: what is installed where is read again only when
    `sys.path` changes."""
    return _entry_points_on(kind, tuple(sys.path))


@functools.lru_cache(maxsize=32)
def _entry_points_on(kind: PluginKind, path: tuple[str, ...]) -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in entry_points(group=ENTRY_POINT_GROUPS[kind]):
        found.setdefault(point.name, point)
    return found


def _origin(point: EntryPoint) -> str:
    dist = point.dist
    return f"{dist.name} {dist.version}" if dist is not None else "an installed package"


def installed(kind: PluginKind | None = None) -> list[InstalledPlugin]:
    """Every name of `kind` (of every kind when None) a recipe can give, sorted by kind and
    name: built-in and registered ones, then installed packages' entry points."""
    kinds = [kind] if kind is not None else list(ENTRY_POINT_GROUPS)
    rows: list[InstalledPlugin] = []
    for each in kinds:
        names: dict[str, InstalledPlugin] = {}
        for name, target in _registry[each].items():
            builtin = isinstance(target, str) and target.startswith("uni_agent_core.")
            text = target if isinstance(target, str) else repr(target)
            origin = "built-in" if builtin else "registered"
            names[name] = InstalledPlugin(each, name, text, origin)
        for name, point in _entry_points(each).items():
            names.setdefault(name, InstalledPlugin(each, name, point.value, _origin(point)))
        rows += [names[name] for name in sorted(names)]
    return rows


def is_user_plugin(kind: PluginKind, name: str) -> bool:
    """True when `name` stands for a user's object: an import path, a `register`ed name, or an
    installed package's entry point (not a name verl or the recipe schema knows)."""
    return is_import_path(name) or name in _registry[kind] or name in _entry_points(kind)


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
    """The names a recipe can give for `kind` (registered and installed), sorted."""
    return sorted({*_registry[kind], *_entry_points(kind)})


def resolve(kind: PluginKind, name: str) -> Any:
    """The object `name` stands for: a registered name's, an installed entry point's, or the
    import path's.

    Raises:
        PluginError: `name` is neither registered, installed nor an import path, its module
            does not import, or it has no such attribute.
    """
    target = _registry[kind].get(name)
    if target is None:
        point = None if is_import_path(name) else _entry_points(kind).get(name)
        target = point.value if point is not None else name
    if not isinstance(target, str):
        return target
    if not is_import_path(target):
        known = ", ".join(registered(kind)) or "none"
        raise PluginError(
            f"unknown {kind} {name!r}: name a registered or installed one ({known}), or your "
            "own object as `package.module:attribute` (an installed package lists its own in "
            f"the {ENTRY_POINT_GROUPS[kind]!r} entry points: `agent-rl plugins list`)"
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
