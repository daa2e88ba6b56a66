"""Memory footprint of Python object graphs, for the benchmarks (not a public tool)."""

from __future__ import annotations

import asyncio
import gc
import sys
from types import FunctionType, ModuleType
from typing import Any


def deep_size(roots: list[Any], seen: set[int] | None = None) -> int:
    """Bytes of every object reachable from `roots` that is not in `seen` (which is updated);
    types, modules, functions and event loops are not followed."""
    seen = set() if seen is None else seen
    size = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(
            obj, type | ModuleType | FunctionType | asyncio.AbstractEventLoop
        ):
            continue
        seen.add(id(obj))
        size += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return size
