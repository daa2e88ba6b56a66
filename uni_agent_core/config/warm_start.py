"""The warm-start section: supervised training on gold trajectories before RL.

A policy that cannot yet follow the tool-call format earns no reward, so RL has nothing to
reinforce. The warm start (`rl/warm_start.py`) runs each training task's gold actions through
the real stack, keeps the episodes the verifier resolves, and fits the policy to their sampled
tokens. It is training time, reported apart from RL.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from uni_agent_core.config.base import ConfigModel


class WarmStartConfig(ConfigModel):
    """Gold-trajectory supervised training before RL (off by default)."""

    enabled: bool = False
    """Run the warm start before difficulty estimation and RL; they then start from its
    policy."""
    epochs: int = Field(default=2, ge=1)
    """Passes over the gold trajectories."""
    lr: float = Field(default=5e-5, gt=0.0)
    """AdamW learning rate (one optimizer step per micro-batch)."""
    tasks: int | None = Field(default=None, ge=1)
    """Training tasks (of those that passed data validation, in order) whose gold episodes
    are used; None uses them all. Tasks whose gold patch changes more than one place (one
    block of lines of one file) have no gold actions and are skipped."""
    micro_batch_tokens: int = Field(default=4096, ge=1)
    """Padded tokens per micro-batch."""
    rl_tasks: Literal["all", "rest"] = "all"
    """The training tasks that difficulty estimation and RL take after the warm start: `all`,
    or `rest`, those after the first `tasks` (the ones the warm start fitted). With `rest`, RL
    learns on problems the policy has not been shown the answer to, as the held-out
    evaluation scores it, instead of on memorized ones whose groups are mostly all-pass. It
    does not change the warm-started weights (not part of the stage's reuse key)."""

    @model_validator(mode="after")
    def _rest_needs_a_split(self) -> WarmStartConfig:
        if self.rl_tasks == "rest" and self.tasks is None:
            raise ValueError(
                "warm_start.rl_tasks: rest trains RL on the tasks after the first "
                "warm_start.tasks, so warm_start.tasks must be set"
            )
        return self
