"""Handing a standalone gateway's freed heap back to the OS once a burst of requests is over.

When many agents send their turn at once, the process holds every request in flight together:
the raw body, the parsed messages and the engine prompt — about 45 KB for a 3K-token history.
Once they are answered, that memory is free, but glibc's malloc keeps the pages: they lie as
holes between the long-lived token buffers of the chains, and malloc returns only the top of
its heap by itself. `malloc_trim(0)` hands every free page back (`madvise`); how much that
is after a burst of `bench/gateway.py`: `bench/README.md`, "Gateway".

`IdleHeapTrimmer` calls it once the process has been quiet for a moment: it samples an activity
counter (requests started plus requests finished) every `interval_s`, and trims when the counter
has not moved for a whole interval after it last did — after the last answer of a burst, not
only after its last arrival. A process under steady load never trims (its free pages are reused
at once); one that pauses, as agent sessions do while their tools run, gives the burst's memory
back within one to two intervals. A trim runs on a worker thread. Where the C library has no
`malloc_trim` (musl, macOS) the trimmer does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from uni_agent_core.host_memory import malloc_trim

logger = logging.getLogger(__name__)


class IdleHeapTrimmer:
    """Trims the C heap when `activity()` (a monotone counter) stops moving.

    Args:
        activity: a counter that grows when a request starts and when it finishes.
        interval_s: how often the counter is sampled; a trim follows one quiet interval.
        on_trim: called with the seconds each trim took (for `/metrics`).
    """

    def __init__(
        self,
        activity: Callable[[], int],
        interval_s: float = 1.0,
        on_trim: Callable[[float], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.activity = activity
        self.interval_s = interval_s
        self.on_trim = on_trim
        self.trims = 0
        self.trim_seconds = 0.0
        self._malloc_trim = malloc_trim()
        self._last = activity()
        self._pending = False

    @property
    def supported(self) -> bool:
        """Whether this C library can trim its heap."""
        return self._malloc_trim is not None

    def due(self) -> bool:
        """Sample the counter: True when it moved before the last sample but not since."""
        now = self.activity()
        moved, self._last = now != self._last, now
        if moved:
            self._pending = True
            return False
        if self._pending:
            self._pending = False
            return True
        return False

    def trim(self) -> bool:
        """Return free heap pages to the OS now; False where that is not supported."""
        if self._malloc_trim is None:
            return False
        self._record(self._release())
        return True

    async def run(self) -> None:
        """Sample and trim forever (cancel to stop). The trim runs on a worker thread; its
        bookkeeping (and `on_trim`) on the event loop."""
        if not self.supported:
            logger.debug("no malloc_trim in this C library: idle heap trimming is off")
            return
        while True:
            await asyncio.sleep(self.interval_s)
            if self.due():
                self._record(await asyncio.to_thread(self._release))

    def _release(self) -> float:
        assert self._malloc_trim is not None
        started = time.perf_counter()
        self._malloc_trim(0)
        return time.perf_counter() - started

    def _record(self, took: float) -> None:
        self.trims += 1
        self.trim_seconds += took
        if self.on_trim is not None:
            self.on_trim(took)
