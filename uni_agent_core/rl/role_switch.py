"""Role switching in `separate_async`: the trainer lends its own model as a rollout replica.

In `separate_async` the rollout replicas (`router.replicas` engines, each with its own copy of
the weights) never stop for training: they keep sampling on version v while the trainer trains
v -> v+1, and take the new weights at the next push (a partial rollout resumes on them). When the
trainer has nothing to train — it waits for the groups of its next batch — it would sit idle, so
it lends itself: `TrainerReplica` serves the trainer's own module (never a copy) and joins the
router as an extra replica (`Router.lend`). When the batch is complete the trainer reclaims it
(`Router.reclaim`: out of the pool, in-flight requests finish) and trains; the replica's caches
are dropped at the weight push, since its KV was computed by the old weights.

`RoleSwitch` does the bookkeeping around the step loop's waits and reports how long the trainer
served rollouts, how long reclaiming took and how many tokens it sampled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from uni_agent_core.inference.hf_engine import HFEngine


class TrainerReplica(HFEngine):
    """An `HFEngine` over the trainer's own model: a weight push only changes the version."""

    async def update_weights(
        self, state: Mapping[str, torch.Tensor] | str | Path | None, version: int
    ) -> None:
        # The module is the trainer's, already updated in place by the optimizer step.
        await super().update_weights(None, version)


class RoleSwitch:
    """Lends the trainer's replica while the step loop waits for data; reclaims it to train."""

    def __init__(self, router: Any, index: int) -> None:
        """Args:
        router: the rollout `Router` the replica was added to (`Router.add_lendable`).
        index: the replica's index in it.
        """
        self.router = router
        self.index = index
        self.engine: HFEngine = router.engines[index]
        self._lent_at: float | None = None
        self._step = {"lent_s": 0.0, "reclaim_s": 0.0, "tokens": 0}
        self._tokens_at_lend = 0

    @property
    def lent(self) -> bool:
        return self._lent_at is not None

    def lend(self) -> None:
        """The trainer is idle: put its replica in the pool (no-op when already lent)."""
        if self.lent:
            return
        self._tokens_at_lend = self.engine.generated_tokens
        self.router.lend(self.index)
        self._lent_at = time.perf_counter()

    async def reclaim(self) -> None:
        """A batch is ready: take the replica back once its in-flight requests finished."""
        if self._lent_at is None:
            return
        self._step["reclaim_s"] += await self.router.reclaim(self.index)
        self._step["lent_s"] += time.perf_counter() - self._lent_at
        self._step["tokens"] += self.engine.generated_tokens - self._tokens_at_lend
        self._lent_at = None

    def step_metrics(self) -> dict[str, float]:
        """This step's figures (then reset): seconds lent, seconds draining, tokens sampled."""
        metrics = {
            "perf/trainer_lent_s": self._step["lent_s"],
            "perf/trainer_reclaim_s": self._step["reclaim_s"],
            "rollout/trainer_replica_tokens": float(self._step["tokens"]),
        }
        self._step = {"lent_s": 0.0, "reclaim_s": 0.0, "tokens": 0}
        return metrics
