"""`SandboxPool`: starts sandboxes under a global concurrency cap, with retries and warm spares.

Sandbox start-up is the fault-tolerance boundary of the sandbox layer: a start that raises
`SandboxError` (or passes `start_timeout_s`) is closed and retried with exponential backoff;
every caught failure is counted in `stats`. At most `max_concurrent_starts` starts run at once
(a docker daemon or a cloud API must not be flooded); backoff waits do not hold a slot.

`warm` sandboxes are started ahead of need and handed out first. A warm sandbox's wall-clock
deadline runs from its start, so keep `warm` small relative to the deadline.

Every sandbox the pool starts is closed on every path, cancellation included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from uni_agent_core.sandbox.base import Sandbox, SandboxError

logger = logging.getLogger(__name__)


@dataclass
class PoolStats:
    """Counters of what the pool did (monotonic; read them for metrics)."""

    start_attempts: int = 0
    """Calls of `Sandbox.start()`."""
    starting_peak: int = 0
    """The most `start()` calls in flight at once (never above the cap)."""
    started: int = 0
    """Starts that succeeded."""
    start_failures: int = 0
    """Starts that raised `SandboxError` or timed out."""
    retries: int = 0
    """Start attempts after a failed one."""
    exhausted: int = 0
    """Sandboxes given up on after `start_retries` retries (the caller got `SandboxError`)."""
    warm_hits: int = 0
    """Sandboxes handed out from the warm spares."""
    closed: int = 0
    """Sandboxes closed."""
    close_failures: int = 0
    """Closes that raised (logged instead of raised while another error propagates)."""


class SandboxPool:
    """Hands out started sandboxes: `async with pool.sandbox() as sb: ...`.

    Use the pool itself as an async context manager (or call `aclose()`) when `warm > 0`, so
    the spares are closed.
    """

    def __init__(
        self,
        factory: Callable[[], Sandbox],
        *,
        max_concurrent_starts: int,
        start_retries: int,
        backoff_s: float,
        warm: int = 0,
        start_timeout_s: float = 120.0,
    ) -> None:
        """Configures the pool; no sandbox starts before the first `sandbox()` or `__aenter__`.

        Args:
            factory: Makes a new, not yet started sandbox.
            max_concurrent_starts: Cap on `start()` calls in flight at once.
            start_retries: Retries after a failed start (0: one attempt only).
            backoff_s: Wait before the first retry; doubles on each further retry.
            warm: Started sandboxes kept ready ahead of need.
            start_timeout_s: Time allowed for one `start()` call (a timeout counts as a failure).
        """
        if max_concurrent_starts < 1:
            raise ValueError(f"max_concurrent_starts must be >= 1, got {max_concurrent_starts}")
        if start_retries < 0 or backoff_s < 0 or warm < 0:
            raise ValueError("start_retries, backoff_s and warm must be >= 0")
        self._factory = factory
        self._start_slots = asyncio.Semaphore(max_concurrent_starts)
        self.start_retries = start_retries
        self.backoff_s = backoff_s
        self.warm = warm
        self.start_timeout_s = start_timeout_s
        self.stats = PoolStats()
        self._spares: list[Sandbox] = []
        self._refill: asyncio.Task[None] | None = None
        self._closed = False
        self._starting = 0

    async def __aenter__(self) -> SandboxPool:
        self._top_up()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @contextlib.asynccontextmanager
    async def sandbox(self, make: Callable[[], Sandbox] | None = None) -> AsyncIterator[Sandbox]:
        """A started sandbox for the `async with` body, closed when the body ends.

        Args:
            make: Makes this call's sandbox (a task's own placement) instead of the pool's
                factory; its starts share the pool's cap, retries and counts, never its spares.

        Raises:
            SandboxError: Every start attempt failed (the last error is chained).
        """
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        if make is None and self._spares:
            sandbox = self._spares.pop()
            self.stats.warm_hits += 1
        else:
            sandbox = await self._start_with_retries(make or self._factory)
        self._top_up()
        body_failed = False
        try:
            yield sandbox
        except BaseException:
            body_failed = True
            raise
        finally:
            await self._close(sandbox, quiet=body_failed)

    async def aclose(self) -> None:
        """Stops refilling and closes the warm spares (idempotent)."""
        self._closed = True
        if self._refill is not None:
            self._refill.cancel()
            # `wait` does not re-raise the refill's cancellation, only this task's own.
            await asyncio.wait([self._refill])
            self._refill = None
        spares, self._spares = self._spares, []
        for sandbox in spares:
            await self._close(sandbox, quiet=False)

    async def _start_with_retries(self, make: Callable[[], Sandbox]) -> Sandbox:
        last_error: SandboxError | None = None
        for attempt in range(self.start_retries + 1):
            if attempt:
                self.stats.retries += 1
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            sandbox = make()
            try:
                async with self._start_slots:
                    self.stats.start_attempts += 1
                    self._starting += 1
                    self.stats.starting_peak = max(self.stats.starting_peak, self._starting)
                    try:
                        async with asyncio.timeout(self.start_timeout_s):
                            await sandbox.start()
                    finally:
                        self._starting -= 1
            except (SandboxError, TimeoutError) as e:
                self.stats.start_failures += 1
                last_error = (
                    e
                    if isinstance(e, SandboxError)
                    else SandboxError(f"sandbox start took over {self.start_timeout_s:g} s")
                )
                logger.warning(
                    "sandbox start attempt %d/%d failed: %s",
                    attempt + 1,
                    self.start_retries + 1,
                    last_error,
                )
                await self._close(sandbox, quiet=True)
                continue
            except BaseException:
                await self._close(sandbox, quiet=True)
                raise
            self.stats.started += 1
            return sandbox
        self.stats.exhausted += 1
        raise SandboxError(
            f"sandbox failed to start {self.start_retries + 1} times; last error: {last_error}"
        ) from last_error

    def _top_up(self) -> None:
        """Starts the background refill of warm spares unless it is running or not wanted."""
        if self.warm == 0 or self._closed:
            return
        if self._refill is None or self._refill.done():
            self._refill = asyncio.get_running_loop().create_task(self._fill_spares())

    async def _fill_spares(self) -> None:
        while not self._closed and len(self._spares) < self.warm:
            try:
                sandbox = await self._start_with_retries(self._factory)
            except SandboxError:
                # Counted in `exhausted`; the next `sandbox()` call tries to refill again.
                logger.warning("could not start a warm sandbox; the pool runs without spares")
                return
            if self._closed:
                await self._close(sandbox, quiet=False)
                return
            self._spares.append(sandbox)

    async def _close(self, sandbox: Sandbox, *, quiet: bool) -> None:
        """Closes `sandbox`, finishing the close even if the caller is cancelled meanwhile.

        Args:
            sandbox: The sandbox to close.
            quiet: Another error is propagating: log and count a close failure instead of
                raising it, so the original error is the one the caller sees.
        """
        closing = asyncio.ensure_future(sandbox.close())
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            # The sandbox must not leak: wait for the close, then let the cancellation through.
            await asyncio.wait([closing])
            self._count_close(closing, quiet=True)
            raise
        except Exception:
            self._count_close(closing, quiet=quiet)
            if not quiet:
                raise
        else:
            self.stats.closed += 1

    def _count_close(self, closing: asyncio.Future[None], *, quiet: bool) -> None:
        error = closing.exception() if not closing.cancelled() else None
        if error is None:
            self.stats.closed += 1
            return
        self.stats.close_failures += 1
        if quiet:
            logger.error("closing a sandbox failed", exc_info=error)
