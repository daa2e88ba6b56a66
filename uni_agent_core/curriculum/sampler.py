"""The dynamic sampler: a streaming task sampler for async training that skips what teaches nothing.

A task is *excluded* while it has at least `min_attempts` recorded results and the pass rate of
its last `window` results lies outside the open band `(low, high)` — with the default band
(0, 1), exactly the tasks whose recent results are all failures or all successes. Eligible tasks
are handed out in a seeded, reshuffled-per-epoch order; with probability `probe_rate` a draw is
instead a *probe* of an excluded task (the policy changes, so "impossible" and "solved" tasks
must be retried now and then). `update(task_id, reward)` is called for every finished rollout, in
whatever order rollouts finish, so the sampler works the same in sync and async modes.

The sampler implements the trainer's `TaskSampler` protocol (`next_task`, `state_dict`,
`load_state_dict`); its state (cursor, RNG, windows) goes into checkpoints.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from uni_agent_core.curriculum.history import SUCCESS_THRESHOLD
from uni_agent_core.curriculum.task_sampler import EpochSampler, TaskSampler


class DynamicSampler(TaskSampler):
    """Hands out learnable tasks, probing excluded ones at a fixed rate."""

    def __init__(
        self,
        task_ids: Sequence[str],
        *,
        seed: int,
        window: int = 8,
        min_attempts: int = 2,
        band: tuple[float, float] = (0.0, 1.0),
        probe_rate: float = 0.1,
        history: Mapping[str, Iterable[float]] | None = None,
    ) -> None:
        """Args:
        task_ids: the task set.
        seed: seed of the order and of probe draws.
        window: recent results per task that make up its pass rate.
        min_attempts: results a task needs before it can be excluded.
        band: a task stays eligible while low < pass rate < high.
        probe_rate: share of draws that re-check an excluded task.
        history: earlier rewards per task (oldest first), e.g. from `AttemptHistory`.
        """
        if not task_ids:
            raise ValueError("the task set is empty")
        low, high = band
        if not 0.0 <= low < high <= 1.0:
            raise ValueError(f"band must satisfy 0 <= low < high <= 1, got {band}")
        if min_attempts > window:
            raise ValueError(f"min_attempts ({min_attempts}) exceeds window ({window})")
        self.task_ids = list(task_ids)
        self.seed = seed
        self.window = window
        self.min_attempts = min_attempts
        self.band = band
        self.probe_rate = probe_rate
        self.results: dict[str, deque[float]] = {t: deque(maxlen=window) for t in self.task_ids}
        for task, rewards in (history or {}).items():
            if task in self.results:
                self.results[task].extend(rewards)
        self.rng = random.Random(f"{seed}/dynamic-sampler")
        self.order = EpochSampler(self.task_ids, seed)
        """The seeded per-epoch order eligible tasks are taken in."""
        self.draws = 0
        self.probes = 0
        self.last_was_probe = False
        """Whether the latest `next_task` was a probe of an excluded task."""

    # -- state of a task ----------------------------------------------------------------------

    def rate(self, task_id: str) -> float | None:
        """Recent pass rate, or None while the task has fewer than `min_attempts` results."""
        recent = self.results[task_id]
        if len(recent) < self.min_attempts:
            return None
        return sum(r >= SUCCESS_THRESHOLD for r in recent) / len(recent)

    def excluded(self, task_id: str) -> bool:
        rate = self.rate(task_id)
        low, high = self.band
        return rate is not None and not (low < rate < high)

    # -- drawing ------------------------------------------------------------------------------

    def next_task(self) -> str:
        """The next task to roll out (an eligible one, or a probe of an excluded one)."""
        self.draws += 1
        excluded = [t for t in self.task_ids if self.excluded(t)]
        eligible = len(excluded) < len(self.task_ids)
        self.last_was_probe = bool(excluded) and (
            not eligible or self.rng.random() < self.probe_rate
        )
        if self.last_was_probe:
            self.probes += 1
            return self.rng.choice(excluded)
        for _ in range(2 * len(self.task_ids) + 1):
            task = self.order.next_task()
            if not self.excluded(task):
                return task
        raise AssertionError("an eligible task exists but none was found")  # pragma: no cover

    def observe(self, task_id: str, reward: float) -> None:
        """Record one finished rollout of `task_id`."""
        if task_id in self.results:
            self.results[task_id].append(float(reward))

    # -- reporting and checkpoints ------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """`curriculum/active_tasks`, `excluded_solved`, `excluded_unsolved`, `probe_rate`."""
        excluded = [t for t in self.task_ids if self.excluded(t)]
        solved = sum(1 for t in excluded if (self.rate(t) or 0.0) >= self.band[1])
        return {
            "curriculum/active_tasks": float(len(self.task_ids) - len(excluded)),
            "curriculum/excluded_solved": float(solved),
            "curriculum/excluded_unsolved": float(len(excluded) - solved),
            "curriculum/probe_rate": self.probes / self.draws if self.draws else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "order": self.order.state_dict(),
            "rng": list(self.rng.getstate()[1]) + [self.rng.getstate()[0]],
            "results": {t: list(r) for t, r in self.results.items()},
            "draws": self.draws,
            "probes": self.probes,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order.load_state_dict(state["order"])
        *internal, version = state["rng"]
        self.rng.setstate((version, tuple(internal), None))
        for task, rewards in state["results"].items():
            if task in self.results:
                self.results[task] = deque(rewards, maxlen=self.window)
        self.draws = int(state.get("draws", 0))
        self.probes = int(state.get("probes", 0))
