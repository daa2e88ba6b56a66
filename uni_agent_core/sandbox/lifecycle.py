"""Start-once lifecycle shared by every sandbox backend.

`StartOnce.start()` is idempotent and serialised; it runs the backend's `_start()` under
`startup_timeout_s`, and on *any* failure (timeout, error, cancellation) runs `_abort_start()`
so nothing is left behind, then raises a `SandboxError` (which `SandboxPool` retries) or
re-raises. Backends say only what differs: how to start, how to clean up, and how to word a
timeout or translate their own exception types.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Awaitable, Callable
from pathlib import PurePosixPath

from uni_agent_core.sandbox.base import ExecResult, SandboxError


class StartOnce:
    """Mixin: `start()` for backends with `_start_lock`, `_closed`, `_started` and
    `startup_timeout_s`."""

    _start_lock: asyncio.Lock
    _closed: bool
    _started: bool
    startup_timeout_s: float

    async def start(self) -> None:
        """Create the sandbox once; raises `SandboxError` (after cleaning up) if it cannot."""
        async with self._start_lock:
            if self._closed:
                raise SandboxError("the sandbox is closed; create a new one")
            if self._started:
                return
            try:
                async with asyncio.timeout(self.startup_timeout_s):
                    await self._start()
            except TimeoutError as e:
                await self._abort_start()
                raise SandboxError(self._start_timeout_message()) from e
            except SandboxError:
                await self._abort_start()
                raise
            except Exception as e:
                await self._abort_start()
                wrapped = self._start_error(e)
                if wrapped is None:
                    raise
                raise wrapped from e
            except BaseException:
                await self._abort_start()
                raise
            self._started = True

    async def _start(self) -> None:
        raise NotImplementedError

    async def _abort_start(self) -> None:
        """Undo a failed start (must not raise)."""
        raise NotImplementedError

    def _start_timeout_message(self) -> str:
        return f"sandbox did not start within {self.startup_timeout_s:g} s"

    def _start_error(self, error: Exception) -> SandboxError | None:
        """A backend exception translated to `SandboxError`; None re-raises it unchanged."""
        return None


async def probe_workdir(
    run: Callable[..., Awaitable[ExecResult]], workdir: PurePosixPath, what: str
) -> None:
    """Create `workdir` in a fresh sandbox, proving it can run the command wrapper.

    Args:
        run: the backend's exec (called as `run(command, cwd="/")`).
        workdir: the repository directory inside the sandbox.
        what: how to name the sandbox in the error, e.g. "container abc (the image needs ...)".

    Raises:
        SandboxError: the probe command failed.
    """
    probe = await run(f"mkdir -p -- {shlex.quote(str(workdir))}", cwd="/")
    if not probe.ok:
        raise SandboxError(
            f"{what} cannot run commands (exit {probe.exit_code}; it needs bash and GNU "
            f"coreutils): {probe.stderr.strip() or probe.stdout.strip()}"
        )
