"""Progress lines for long work: one line per notable item, with rate and ETA, on stderr."""

from __future__ import annotations

import time
from typing import TextIO


class ProgressLines:
    """Per-task progress lines with rate and ETA (every task with a finding, else every 10%)."""

    def __init__(self, what: str, err: TextIO, unit: str = "tasks") -> None:
        self.what, self.err, self.unit, self.started = what, err, unit, time.perf_counter()

    def line(self, done: int, total: int, name: str, outcome: str, notable: bool) -> None:
        step = max(1, total // 10)
        if not (notable or done % step == 0 or done == total):
            return
        elapsed = time.perf_counter() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        print(
            f"[{self.what} {done:>{len(str(total))}}/{total}] {rate:5.1f} {self.unit}/s "
            f"ETA {eta:5.0f}s  {name}: {outcome}",
            file=self.err,
            flush=True,
        )
