"""Giving freed host memory back to the operating system between training steps.

On a CPU the trainer's activations (hundreds of MB per micro-batch) and the engines' KV caches
are allocated and freed by glibc's malloc. Freed chunks stay in the allocator's arenas (one per
thread that allocated: the event loop, the engine's compute thread, torch's workers, the
executor running `train_step`) and are reused only by requests that fit them, so a long run's
resident memory climbs step after step although the live tensors do not: measured on
`smollm2-cpu` (colocated_async), 11 GB resident for 4 GB of live tensors after two steps.
`malloc_trim(0)` returns the free pages of every arena; the trainer calls it after each step.
Elsewhere than glibc (macOS, musl) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_host_memory() -> bool:
    """Collect garbage, then return the allocator's free pages to the OS (glibc only).

    Returns:
        True when glibc released memory, False when nothing was released or it is not glibc.
    """
    gc.collect()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
