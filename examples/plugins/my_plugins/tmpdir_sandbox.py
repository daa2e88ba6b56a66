"""A sandbox backend: bash in a fresh temporary directory, with no isolation.

For trusted tasks on a developer's machine only: commands run as the user, with the user's
network and files. A recipe names it with `sandbox: {type: plugin, path:
my_plugins.tmpdir_sandbox:build}`; the run's pool starts, retries and closes it like a built-in
backend.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from uni_agent_core.sandbox.base import ExecResult, SandboxError


def build(options: dict[str, Any], **placement: Any) -> TempDirSandbox:
    """The backend's builder: `options` from the recipe, `placement` from the task (this
    backend ignores `hide_paths`: it hides nothing, so use it only where nothing is secret)."""
    return TempDirSandbox(exec_timeout_s=float(options.get("exec_timeout_s", 60.0)))


class TempDirSandbox:
    def __init__(self, *, exec_timeout_s: float) -> None:
        self.exec_timeout_s = exec_timeout_s
        self._root: Path | None = None
        self.workdir = PurePosixPath("/nonexistent")

    async def start(self) -> None:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="tmpdir-sandbox-"))
            (self._root / "work").mkdir()
            self.workdir = PurePosixPath(self._root / "work")

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        if self._root is None:
            raise SandboxError("the sandbox is not started")
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=cwd or str(self.workdir),
            env={**os.environ, **(env or {})},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout or self.exec_timeout_s)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return ExecResult(124, "", "timed out", timed_out=True)
        return ExecResult(process.returncode or 0, out.decode(), err.decode())

    def _path(self, path: str) -> Path:
        """A sandbox path on the host (relative paths are relative to `workdir`)."""
        return Path(self.workdir, path)

    async def read_file(self, path: str) -> str:
        return self._path(path).read_text()

    async def write_file(self, path: str, content: str) -> None:
        self._path(path).parent.mkdir(parents=True, exist_ok=True)
        self._path(path).write_text(content)

    async def upload(self, local_path: str, sandbox_path: str) -> None:
        _copy(Path(local_path), self._path(sandbox_path))

    async def download(self, sandbox_path: str, local_path: str) -> None:
        _copy(self._path(sandbox_path), Path(local_path))

    async def diff(self) -> str:
        return (await self.exec("git diff")).stdout

    async def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
