"""Sandbox builders: the run's sandbox section, or a task's own override, into a `Sandbox`.

`sandbox_for_task` resolves a `TaskSpec.sandbox` mapping against the run's section (merged onto
it without a `type:` or with the same one, replacing it with another type) and validates the
result with the recipe's models; `build_sandbox` makes the backend object. Backends are imported
on demand (`uni_agent_core.plugins`), so a local run never imports swe-rex or modal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.config.sandbox import SANDBOX_SECTIONS, PluginSandboxConfig, SandboxConfig
from uni_agent_core.plugins import resolve
from uni_agent_core.sandbox.base import Sandbox


def build_sandbox(config: SandboxConfig, **overrides: Any) -> Sandbox:
    """The (not yet started) sandbox a validated sandbox section describes.

    A built-in backend's `from_config` (from the plug-in registry) gets the section; a
    plug-in's callable gets its `options` mapping.

    Args:
        config: The sandbox section (`local`, `swerex`, `docker`, `modal` or `plugin`).
        **overrides: Constructor arguments of the backend beyond the recipe's, e.g. the task's
            `image=` for docker and modal, `workdir=`, `env=`, or `deployment=` for swerex.

    Raises:
        TypeError: `config` is not a sandbox section, an override is not an argument of the
            backend, or a plug-in returned something that is not a `Sandbox`.
        ValueError: The section and overrides do not make a usable sandbox (e.g. no image).
        PluginError: a plug-in's path does not import.
    """
    if not isinstance(config, SANDBOX_SECTIONS):
        raise TypeError(
            f"not a sandbox section: {type(config).__name__} (expected one of the "
            "local/swerex/docker/modal/plugin configs from uni_agent_core.config.sandbox)"
        )
    if isinstance(config, PluginSandboxConfig):
        sandbox = resolve("sandbox", config.path)(dict(config.options), **overrides)
        if not isinstance(sandbox, Sandbox):
            raise TypeError(
                f"sandbox {config.path} returned a {type(sandbox).__name__}, which does not "
                "implement the Sandbox protocol (uni_agent_core/sandbox/base.py)"
            )
        return sandbox
    built: Sandbox = resolve("sandbox", config.type)(config, **overrides)
    return built


def sandbox_for_task(
    default: SandboxConfig, task_override: Mapping[str, Any] | None, *, task_id: str = "<task>"
) -> SandboxConfig:
    """The sandbox section of one task: the run's, or the task's `sandbox` override applied.

    Without `type` (or with the default's), the override is merged onto the default, so
    `{"memory_mb": 1024}` only lowers the memory cap; with another `type` it replaces the
    default, e.g. `{"type": "docker", "image": "sweb.eval.x86_64.django__django-11099"}`.

    Args:
        default: The run's sandbox section.
        task_override: The task's `sandbox` mapping; None or empty keeps the default.
        task_id: The task's id, named in errors.

    Raises:
        TypeError: `task_override` is not a mapping.
        RecipeError: The resulting section does not validate; each problem names the task
            and the key (`task django-1: sandbox.memory_mbb: unknown key; did you mean ...`).
    """
    if task_override is not None and not isinstance(task_override, Mapping):
        raise TypeError(
            f"task {task_id}: sandbox override must be a mapping like "
            f'{{"type": "docker", "image": "..."}}, got {type(task_override).__name__}'
        )
    override = dict(task_override) if task_override else None
    return section_for_task("sandbox", SandboxConfig, default, override, task_id=task_id)
