"""`keep_freed_memory_for_reuse`: a freed large tensor's pages stay with malloc for the next
one until `release_host_memory` returns them (glibc only)."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

GLIBC = sys.platform == "linux" and "libc.so.6" in (ctypes.util.find_library("c") or "")

_RESIDENT_MB_AFTER_FREE_AND_RELEASE = """
import os, sys, torch
from uni_agent_core.host_memory import keep_freed_memory_for_reuse, release_host_memory
if sys.argv[1] == "reuse":
    assert keep_freed_memory_for_reuse() and keep_freed_memory_for_reuse()
def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
tensor = torch.ones(256 << 20, dtype=torch.uint8)
held = resident_mb()
del tensor
freed = resident_mb()
release_host_memory()
print(held - freed, held - resident_mb())
"""


def _given_back_mb(mode: str) -> tuple[float, float]:
    """(MB returned to the OS when a 256 MB tensor is freed, MB after `release_host_memory`)."""
    done = subprocess.run(
        [sys.executable, "-c", _RESIDENT_MB_AFTER_FREE_AND_RELEASE, mode],
        capture_output=True,
        text=True,
        check=True,
    )
    on_free, after_release = map(float, done.stdout.split()[-2:])
    return on_free, after_release


@pytest.mark.skipif(not GLIBC, reason="a glibc malloc setting")
def test_freed_pages_stay_for_reuse_until_released() -> None:
    on_free, _ = _given_back_mb("default")
    assert on_free > 200  # glibc's default: the tensor's own mmap, unmapped on free
    on_free, after_release = _given_back_mb("reuse")
    assert on_free < 16  # kept in the heap for the next large tensor: no page faults
    assert after_release > 200  # and given back between steps
