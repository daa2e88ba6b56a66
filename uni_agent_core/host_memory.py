"""Giving freed host memory back to the operating system: the one wrapper of glibc's
`malloc_trim`, used by the trainer between steps and by the gateway's idle heap trimmer
(`gateway/heap.py`).

On a CPU the trainer's activations (hundreds of MB per micro-batch) and the engines' KV caches
are allocated and freed by glibc's malloc. Freed chunks stay in the allocator's arenas (one per
thread that allocated: the event loop, the engine's compute thread, torch's workers, the
executor running `train_step`) and are reused only by requests that fit them, so a long run's
resident memory climbs step after step although the live tensors do not (measured:
`bench/README.md`, "Host memory of a CPU training run").
`malloc_trim(0)` returns the free pages of every arena; the trainer calls it after each step.
Elsewhere than glibc (macOS, musl) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable


@functools.cache
def malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim(pad)`, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):  # not glibc, or no C library found
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_host_memory() -> bool:
    """Collect garbage, then return the allocator's free pages to the OS (glibc only).

    Returns:
        True when glibc released memory, False when nothing was released or it is not glibc.
    """
    gc.collect()
    trim = malloc_trim()
    return bool(trim(0)) if trim is not None else False
