"""The sandbox contract: where an agent's commands and a task's tests run.

Every backend (`local` bubblewrap, `swerex`, `docker`, `modal`) implements `Sandbox`. All calls
are async; every `exec` has a timeout and the sandbox as a whole a hard wall-clock deadline, so
no tool call or test run can hang an episode. Sandboxes are async context managers: they are
closed on every path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol, runtime_checkable

from uni_agent_core.errors import AgentRLError


@dataclass(frozen=True)
class ExecResult:
    """What one command did."""

    exit_code: int
    """Exit status; -signal when killed by a signal; 124 when killed by its timeout."""
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SandboxError(AgentRLError, RuntimeError):
    """The sandbox itself failed (could not start, died, deadline passed) — not the command."""


class SandboxDeadlineError(SandboxError):
    """The sandbox's wall-clock deadline passed; it was killed with every process in it."""


@runtime_checkable
class Sandbox(Protocol):
    """An isolated workspace with a shell."""

    workdir: PurePosixPath
    """The task's repository inside the sandbox (the working directory of commands)."""

    async def start(self) -> None:
        """Create the sandbox (idempotent); raises `SandboxError` if it cannot start."""
        ...

    async def exec(
        self,
        command: str,
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run `command` with bash; kill its whole process tree after `timeout` seconds."""
        ...

    async def read_file(self, path: str) -> str: ...

    async def write_file(self, path: str, content: str) -> None: ...

    async def upload(self, local_path: str, sandbox_path: str) -> None:
        """Copy a host file or directory into the sandbox."""
        ...

    async def download(self, sandbox_path: str, local_path: str) -> None:
        """Copy a sandbox file or directory out to the host."""
        ...

    async def diff(self) -> str:
        """The working-tree patch of `workdir` against its base commit (`git diff`)."""
        ...

    async def close(self) -> None:
        """Kill every process and remove the sandbox (idempotent)."""
        ...
