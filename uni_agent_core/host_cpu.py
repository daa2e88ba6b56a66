"""What this host's CPU is and which native fast paths it can run.

The three CPU classes this project runs on differ by 100x in their best matmul rate: an
AVX2-only CPU (most laptops, AMD before Zen 4) computes bf16 matmuls with PyTorch's reference
GEMM on one thread, 8x slower than float32; AVX512-BF16 (AMD Zen 4) computes them about 2.5x
faster than float32; AMX (Intel Xeon since Sapphire Rapids) about 9x. `cpu_class()` names the
class from the CPU's flags, `cpu_identity()` keys what is built or measured for one CPU (the
native kernel's build, the measured dtype choice), and `NATIVE_PATHS_VARIABLE=0` switches every
native fast path off (the packed bf16 weights, the native attention kernel), so the path an
AVX2-only host takes can run and be tested on any host.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path

NATIVE_PATHS_VARIABLE = "AGENT_RL_CPU_KERNELS"
"""Set to 0 to keep every caller off the native fast paths (the plain PyTorch path runs)."""

CLASS_FLAGS: tuple[tuple[str, str], ...] = (
    ("amx", "amx_bf16"),
    ("avx512_bf16", "avx512_bf16"),
    ("avx512", "avx512f"),
    ("avx2", "avx2"),
)
"""CPU classes, best first, and the `/proc/cpuinfo` flag that marks each."""


@functools.cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """This CPU's model name and feature flags (from `/proc/cpuinfo`; the platform's processor
    name and no flags where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields.get("model name", platform.machine()), frozenset(fields.get("flags", "").split())


def cpu_class(flags: frozenset[str] | None = None) -> str:
    """`amx`, `avx512_bf16`, `avx512`, `avx2` or `other`: the best class `flags` (this CPU's by
    default) belongs to."""
    flags = cpu_info()[1] if flags is None else flags
    return next((name for name, flag in CLASS_FLAGS if flag in flags), "other")


def cpu_identity() -> str:
    """The model name and feature flags of this CPU: what a build or a measurement for this
    CPU is keyed by."""
    name, flags = cpu_info()
    return f"model name: {name}\nflags: {' '.join(sorted(flags))}"


def describe_cpu() -> str:
    """One line for reports: the model, its class and its core count."""
    return f"{cpu_info()[0]} ({cpu_class()}, {os.cpu_count()} cores)"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
