"""Records shared across modules: trajectories, engine calls and exit reasons.

A `Trajectory` is one chain of a gateway session in token space: what the trainer learns from.
An `EngineCall` is one generation the gateway asked an engine for; the TITO invariant of
DESIGN.md ties the two together (every call's prompt is its chain's tokens so far, and every
call's output appears verbatim as a trainable span of that chain).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ExitReason(StrEnum):
    """How an agent episode ended (set by harnesses; abnormal ones are masked from the loss)."""

    SUBMITTED = "submitted"
    FINISHED = "finished"
    MAX_TURNS = "max_turns"
    MAX_TOKENS = "max_tokens"
    TIMEOUT = "timeout"
    FORMAT_ERROR_BUDGET = "format_error_budget"
    SANDBOX_ERROR = "sandbox_error"
    HARNESS_ERROR = "harness_error"
    ENGINE_ERROR = "engine_error"


class EngineCall(BaseModel):
    """One engine generation made by the gateway, in call order."""

    model_config = ConfigDict(extra="forbid")

    chain_id: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    policy_version: list[int]
    finish_reason: str
    superseded: bool = False
    """The output was later dropped from its chain by a rollback (the client rewrote that
    assistant turn), so it is not a trainable span any more."""


class Trajectory(BaseModel):
    """One chain of a session: prompt tokens, then response tokens with per-token masks.

    `loss_mask` is 1 exactly on tokens the engine sampled for this chain and 0 on context
    (tool results, user turns, separators, generation prompts, rolled-back rewrites); context
    tokens have logprob 0.0 and policy version -1.
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str
    chain_id: int
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    finish_reason: str | None = None
    num_turns: int = 0
    exit_reason: ExitReason | None = None
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_alignment(self) -> Trajectory:
        n = len(self.response_ids)
        lengths = (len(self.loss_mask), len(self.logprobs), len(self.policy_versions))
        if lengths != (n, n, n):
            raise ValueError(
                f"misaligned trajectory: {n} response ids, mask/logprobs/versions {lengths}"
            )
        return self

    @property
    def trainable_tokens(self) -> int:
        return sum(self.loss_mask)

    @staticmethod
    def to_batch(
        trajectories: list[Trajectory], *, pad_token_id: int, max_length: int | None = None
    ) -> Any:
        """Right-padded training tensors (see `uni_agent_core.rl.batch.trajectories_to_batch`)."""
        from uni_agent_core.rl.batch import trajectories_to_batch

        return trajectories_to_batch(trajectories, pad_token_id=pad_token_id, max_length=max_length)

    @property
    def version_span(self) -> tuple[int, int] | None:
        """(oldest, newest) policy version among sampled tokens, None if none were sampled."""
        versions = [v for v, m in zip(self.policy_versions, self.loss_mask, strict=True) if m]
        return (min(versions), max(versions)) if versions else None
