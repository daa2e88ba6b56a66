"""Running one coroutine per task, a bounded number at a time, with a callback per finished task.

Validation and oracle scoring both check many tasks, each in its own sandbox; this caps how many
sandboxes run at once and reports progress as tasks finish, while keeping results in input order.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def map_bounded(
    items: Sequence[T],
    work: Callable[[T], Awaitable[R]],
    *,
    concurrency: int | None = None,
    on_result: Callable[[int, int, R], None] | None = None,
) -> list[R]:
    """`[await work(item) for item in items]`, at most `concurrency` at once (default: CPUs).

    Args:
        items: the inputs.
        work: the coroutine function run on each input.
        concurrency: how many run at once; None is the CPU count.
        on_result: called as each finishes with (finished so far, total, result).

    Returns:
        The results in the order of `items`. The first exception propagates (the others are
        cancelled by `asyncio.gather`'s caller going away).
    """
    limit = asyncio.Semaphore(concurrency or os.cpu_count() or 1)
    done = 0

    async def one(item: T) -> R:
        nonlocal done
        async with limit:
            result = await work(item)
        done += 1
        if on_result is not None:
            on_result(done, len(items), result)
        return result

    return list(await asyncio.gather(*(one(item) for item in items)))
