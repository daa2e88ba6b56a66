"""Which task a run trains on next: epoch-shuffled order with a resumable cursor.

`EpochSampler` walks a seeded permutation of the task ids, reshuffling each epoch; its state
(epoch, position) goes into checkpoints so a resumed run continues with exactly the tasks the
interrupted one would have drawn. The curriculum's sampler (pass-rate history) implements the
same three methods.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol


class TaskSampler(Protocol):
    def next_task(self) -> str: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class EpochSampler:
    """Every task once per epoch, in a seeded order that changes per epoch."""

    def __init__(self, task_ids: Sequence[str], seed: int) -> None:
        if not task_ids:
            raise ValueError("the task set is empty")
        self.task_ids = list(task_ids)
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[str]:
        order = list(self.task_ids)
        random.Random(f"{self.seed}/epoch/{epoch}").shuffle(order)
        return order

    def next_task(self) -> str:
        if self.position >= len(self._order):
            self.epoch += 1
            self.position = 0
            self._order = self._permutation(self.epoch)
        task = self._order[self.position]
        self.position += 1
        return task

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._permutation(self.epoch)
