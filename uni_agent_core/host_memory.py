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

Within a step the opposite matters. glibc serves a request above its mmap threshold (at most
32 MB) with a fresh `mmap` and unmaps it on free, so every large tensor of every micro-batch
(a 512-position chunk of logits is 100 MB in float32) is faulted in and zeroed page by page:
a bf16 SmolLM2 training step took 2.7 million page faults and 4 s of system time.
`keep_freed_memory_for_reuse()` makes malloc serve every request from its heap and leaves
the trimming to `malloc_trim` between steps: 1.1 million faults, 1.7 s of system time, and a
step 9-10% shorter (`bench/README.md`, "bf16 trainer"). The trainer and the HF engine turn it
on when they run on a CPU.

Elsewhere than glibc (macOS, musl) both are no-ops.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable
from typing import Any


def _glibc_function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """The C library's function `name` returning int, or None where it has none (not glibc:
    macOS, musl; or no C library found)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c")), name)
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


@functools.cache
def malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim(pad)`, or None where the C library has none (macOS, musl)."""
    return _glibc_function("malloc_trim", [ctypes.c_size_t])


def release_host_memory() -> bool:
    """Collect garbage, then return the allocator's free pages to the OS (glibc only).

    Returns:
        True when glibc released memory, False when nothing was released or it is not glibc.
    """
    gc.collect()
    trim = malloc_trim()
    return bool(trim(0)) if trim is not None else False


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
"""glibc's `mallopt` parameters (malloc.h)."""


@functools.cache
def keep_freed_memory_for_reuse() -> bool:
    """Make glibc's malloc keep freed memory for the next request instead of returning it at
    once: no `mmap` per large allocation (`M_MMAP_MAX` 0) and no trimming of the heap's top on
    `free` (`M_TRIM_THRESHOLD` at its maximum). The pages go back to the OS when
    `release_host_memory` runs (between training steps) or the gateway's heap trimmer does.

    Process-wide and idempotent (the first call sets it). Returns:
        True when glibc took both settings, False elsewhere.
    """
    mallopt = _glibc_function("mallopt", [ctypes.c_int, ctypes.c_int])
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
