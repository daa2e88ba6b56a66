"""`BashSandbox`: a `Sandbox` test double — plain bash in a host directory, no isolation.

For unit tests of code that only needs the protocol (tools, git hygiene); isolation itself is
tested against `LocalSandbox`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path, PurePosixPath

from uni_agent_core.sandbox.base import ExecResult


class BashSandbox:
    """Test double of `Sandbox`: plain bash in a host directory, no isolation."""

    def __init__(self, root: Path) -> None:
        self.workdir = PurePosixPath(root)

    async def start(self) -> None:
        return None

    async def __aenter__(self) -> BashSandbox:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None

    async def exec(
        self,
        command: str,
        *,
        timeout: float = 60.0,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
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
        assert proc.stdout is not None and proc.stderr is not None
        reading = asyncio.ensure_future(asyncio.gather(proc.stdout.read(), proc.stderr.read()))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(reading), timeout)
        except TimeoutError:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = await reading
        code = await proc.wait()
        return ExecResult(124 if timed_out else code, out.decode(), err.decode(), timed_out)

    def _host(self, path: str) -> Path:
        return Path(self.workdir, path)

    async def read_file(self, path: str) -> str:
        return self._host(path).read_text()

    async def write_file(self, path: str, content: str) -> None:
        self._host(path).parent.mkdir(parents=True, exist_ok=True)
        self._host(path).write_text(content)

    async def upload(self, local_path: str, sandbox_path: str) -> None:
        shutil.copy(local_path, self._host(sandbox_path))

    async def download(self, sandbox_path: str, local_path: str) -> None:
        shutil.copy(self._host(sandbox_path), local_path)

    async def diff(self) -> str:
        return (await self.exec("git diff")).stdout

    async def close(self) -> None:
        return None
