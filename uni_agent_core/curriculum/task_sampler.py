"""Which task a run trains on next: the `TaskSampler` contract and the epoch sampler.

A sampler hands out task ids one at a time (`next_task`), may learn from every finished episode
(`observe`) and report figures per step (`metrics`), and saves and restores its position
(`state_dict` / `load_state_dict`) so a resumed run continues with exactly the tasks the
interrupted one would have drawn. `EpochSampler` walks a seeded permutation of the task ids,
reshuffling each epoch; the curriculum's `DynamicSampler` (`sampler.py`) follows pass rates.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any


class TaskSampler(ABC):
    """What the step loop draws tasks from."""

    @abstractmethod
    def next_task(self) -> str:
        """The id of the task the next group runs."""

    def observe(self, task_id: str, reward: float) -> None:  # noqa: B027 - optional hook
        """One finished episode of `task_id` and its reward (default: ignored)."""

    def metrics(self) -> dict[str, float]:
        """Figures for the step's metrics line (default: none)."""
        return {}

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The position to save in a checkpoint."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position."""


class EpochSampler(TaskSampler):
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
