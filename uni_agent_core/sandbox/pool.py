"""`SandboxPool`: starts sandboxes under a global concurrency cap, with retries and warm spares.

Sandbox start-up is the fault-tolerance boundary of the sandbox layer: a start that raises
`SandboxError` (or passes `start_timeout_s`) is closed and retried with exponential backoff;
every caught failure is counted in `stats`. At most `max_concurrent_starts` starts run at once
(a docker daemon or a cloud API must not be flooded); backoff waits do not hold a slot.

`warm` sandboxes are started ahead of need and handed out first. A warm sandbox's wall-clock
deadline runs from its start, so keep `warm` small relative to the deadline. Spares are kept
per key: a caller that makes its own sandboxes (`sandbox(make, key=)`: a task's placement)
gets spares made the same way for the key it asked for last, and spares of keys asked for
longer ago are closed once the pool holds more than `warm` (a GRPO group's sandboxes and its
verifiers' share one key, so they find spares).

Every sandbox the pool starts is closed on every path, cancellation included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
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
    spares_evicted: int = 0
    """Spares closed unused because a newer key needed their place."""
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
        self._spares: OrderedDict[Hashable, list[Sandbox]] = OrderedDict()
        """Started spares by key, the key asked for longest ago first (`None`: `factory`'s)."""
        self._makers: dict[Hashable, Callable[[], Sandbox]] = {}
        self._wanted: Hashable = None
        """The key refills serve: the one asked for last."""
        self._refill: asyncio.Task[None] | None = None
        self._closed = False
        self._starting = 0

    async def __aenter__(self) -> SandboxPool:
        self._want(None, self._factory)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @contextlib.asynccontextmanager
    async def sandbox(
        self, make: Callable[[], Sandbox] | None = None, *, key: Hashable = None
    ) -> AsyncIterator[Sandbox]:
        """A started sandbox for the `async with` body, closed when the body ends.

        Args:
            make: Makes this call's sandbox (a task's own placement) instead of the pool's
                factory; its starts share the pool's cap, retries and counts.
            key: What `make` makes, for its spares (sandboxes of one key are interchangeable);
                None with `make` keeps no spares for it.

        Raises:
            SandboxError: Every start attempt failed (the last error is chained).
        """
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        keeps_spares = make is None or key is not None
        if make is None:
            make, key = self._factory, None
        spares = self._spares.get(key) if keeps_spares else None
        if spares:
            sandbox = spares.pop()
            self.stats.warm_hits += 1
        else:
            sandbox = await self._start_with_retries(make)
        if keeps_spares:
            self._want(key, make)
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
        spares, self._spares = self._spares, OrderedDict()
        for sandbox in [sandbox for kept in spares.values() for sandbox in kept]:
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

    def _want(self, key: Hashable, make: Callable[[], Sandbox]) -> None:
        """Make `key` the one spares are kept for, and start the background refill unless it
        is running or no spares are wanted."""
        if self.warm == 0 or self._closed:
            return
        self._makers[key] = make
        self._spares.setdefault(key, [])
        self._spares.move_to_end(key)
        self._wanted = key
        if self._refill is None or self._refill.done():
            self._refill = asyncio.get_running_loop().create_task(self._fill_spares())

    async def _fill_spares(self) -> None:
        while not self._closed:
            key = self._wanted
            if len(self._spares.get(key, [])) >= self.warm:
                return
            try:
                sandbox = await self._start_with_retries(self._makers[key])
            except SandboxError:
                # Counted in `exhausted`; the next `sandbox()` call tries to refill again.
                logger.warning("could not start a warm sandbox; the pool runs without spares")
                return
            if self._closed:
                await self._close(sandbox, quiet=False)
                return
            self._spares.setdefault(key, []).append(sandbox)
            await self._evict()

    async def _evict(self) -> None:
        """Close spares of the keys asked for longest ago while the pool holds more than
        `warm`; forget keys left without spares."""
        while sum(len(kept) for kept in self._spares.values()) > self.warm:
            oldest = next(k for k, kept in self._spares.items() if kept)
            await self._close(self._spares[oldest].pop(0), quiet=True)
            self.stats.spares_evicted += 1
        for key in [k for k, kept in self._spares.items() if not kept and k != self._wanted]:
            del self._spares[key]
            self._makers.pop(key, None)

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
