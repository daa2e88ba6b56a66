"""Putting a task's repository into a sandbox at its base commit, for the agent or the verifier.

Where the repository comes from is the task's `source` (a `{"type": "shell"}` task has none:
its environment, `envs/shell/`, writes its starting files; only its placement is decided here):
- `{"type": "micro_swe", "repo_dir": DIR}` — sources on this host; they are uploaded and
  committed with `COMMIT_SCRIPT`, which must reproduce the row's `base_commit` exactly (a
  mismatch means the task data changed and is refused).
- `{"type": "image", "image": NAME, "workdir": DIR}` — the repository is already in the image
  (SWE-bench, SWE-rebench, R2E-Gym); HEAD must be at `base_commit`. `remove_paths` lists image
  paths that hold hidden tests (R2E-Gym's `/r2e_tests`); they are deleted before an agent runs.

`prepare_agent_workspace` also scrubs git history newer than the base (`git_hygiene`), so the
agent's sandbox never holds the fix or the hidden tests; the verifier's fresh sandbox only
needs `materialize_repo`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from uni_agent_core.config.sandbox import LocalSandboxConfig, PluginSandboxConfig, SandboxConfig
from uni_agent_core.envs.micro_swe.generator import COMMIT_SCRIPT
from uni_agent_core.errors import UserError
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.sandbox.git_hygiene import scrub_git_history
from uni_agent_core.types import TaskSpec

_GIT_TIMEOUT_S = 120.0


class TaskDataError(UserError, ValueError):
    """A task row cannot be materialized: unknown source, missing files, wrong base commit."""


SOURCE_TYPES = ("micro_swe", "image", "shell")
"""The kinds of `TaskSpec.source` a task row may name."""


def source_type(task: TaskSpec) -> str:
    """The task's `source.type`, one of `SOURCE_TYPES`.

    Raises:
        TaskDataError: the row names no known source type.
    """
    kind = task.source.get("type")
    if kind not in SOURCE_TYPES:
        raise TaskDataError(
            f"task {task.instance_id}: source.type must be one of {', '.join(SOURCE_TYPES)}, "
            f"got {kind!r}"
        )
    return str(kind)


def sandbox_overrides(task: TaskSpec, config: SandboxConfig) -> dict[str, Any]:
    """Constructor arguments a task adds to its sandbox backend (see `build_sandbox`).

    Image tasks pass their image and working directory (and need a container backend); other
    tasks on the local (or a plug-in) backend hide the paths their `source.hide` lists (a
    micro-swe dataset's directory, which holds the gold and test patches).

    Raises:
        TaskDataError: an image task on the local backend, which cannot run images.
    """
    if task.source.get("type") == "image":
        if isinstance(config, LocalSandboxConfig):
            raise TaskDataError(
                f"task {task.instance_id} runs in image {task.source.get('image')!r}; the local "
                "sandbox cannot run images. Use a docker, modal or swerex sandbox for it."
            )
        overrides: dict[str, Any] = {"image": task.source["image"]}
        if task.source.get("workdir"):
            overrides["workdir"] = task.source["workdir"]
        return overrides
    if isinstance(config, LocalSandboxConfig | PluginSandboxConfig):
        return {"hide_paths": [str(p) for p in task.source.get("hide", [])]}
    return {}


def base_file_on_host(task: TaskSpec, path: str) -> str | None:
    """A file of the task's repository at its base commit, read on this host (micro-swe sources,
    `path` relative to the repository); None for an image task or a file not among them."""
    if task.source.get("type") != "micro_swe" or "repo_dir" not in task.source:
        return None
    file = Path(str(task.source["repo_dir"])) / path
    return file.read_text(encoding="utf-8") if file.is_file() else None


async def materialize_repo(sandbox: Sandbox, task: TaskSpec) -> None:
    """Put the task's repository at `sandbox.workdir`, checked out at the base commit.

    Raises:
        TaskDataError: the sources are missing or do not reproduce `base_commit`.
        SandboxError: a command failed in the sandbox.
    """
    workdir = str(sandbox.workdir)
    kind = source_type(task)
    if kind == "shell":
        raise TaskDataError(
            f"task {task.instance_id} is a shell task: it has no repository to materialize "
            "(its environment, env: shell, writes its starting files)"
        )
    if kind == "micro_swe":
        repo_dir = Path(str(task.source.get("repo_dir", "")))
        if not repo_dir.is_dir():
            raise TaskDataError(
                f"task {task.instance_id}: repository sources {repo_dir} not found; load the "
                "task with envs.sources.load_tasks so repo_dir is resolved against its dataset"
            )
        await sandbox.upload(str(repo_dir), workdir)
        result = await sandbox.exec(COMMIT_SCRIPT, cwd=workdir, timeout=_GIT_TIMEOUT_S)
        if not result.ok:
            raise SandboxError(f"committing the micro-swe repository failed: {result.stderr}")
        head = result.stdout.strip()
    else:
        result = await sandbox.exec("git rev-parse HEAD", cwd=workdir, timeout=_GIT_TIMEOUT_S)
        if not result.ok:
            raise SandboxError(f"{workdir} in the image is not a git repository: {result.stderr}")
        head = result.stdout.strip()
    if task.base_commit and head != task.base_commit:
        raise TaskDataError(
            f"task {task.instance_id}: the repository is at {head[:12]}, not at the row's "
            f"base_commit {task.base_commit[:12]} (the task's sources changed since generation)"
        )


async def prepare_agent_workspace(sandbox: Sandbox, task: TaskSpec) -> None:
    """The agent's starting point: the repository at its base, no newer history, no hidden tests.

    Raises:
        TaskDataError, SandboxError: as `materialize_repo`.
        GitHygieneError: history newer than the base survives the scrub.
    """
    await materialize_repo(sandbox, task)
    remove = [str(p) for p in task.source.get("remove_paths", [])]
    if remove:
        quoted = " ".join(shlex.quote(p) for p in remove)
        result = await sandbox.exec(f"rm -rf -- {quoted}", timeout=_GIT_TIMEOUT_S)
        if not result.ok:
            raise SandboxError(f"could not remove hidden paths {remove}: {result.stderr}")
    await scrub_git_history(sandbox, sandbox.workdir, task.base_commit or "HEAD")
