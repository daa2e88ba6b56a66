"""The reward section: how a finished episode is scored.

A discriminated union on `type`: `resolved` (1 when every FAIL_TO_PASS and PASS_TO_PASS test
passes, else 0) and `partial_credit` (a weighted pass fraction). Either way the agent's diff is
graded in a fresh sandbox with the hidden tests applied — unless the episode ended unfinished
(`types.UNFINISHED_EXITS`: a turn, token, wall-clock or format-error budget ran out before the
agent submitted) and `unfinished` says to score it `zero` or with a `penalty` instead.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from uni_agent_core.config.base import ConfigModel, Duration, raise_conflicts


class _RewardBase(ConfigModel):
    """Fields shared by every reward."""

    type: str
    """Reward kind; each subclass narrows it to its own tag."""

    test_timeout_s: Duration = 900.0
    """Deadline on running the hidden tests (at most a day); passing it scores the episode 0 and
    records a timeout."""
    leak_audit: Literal["off", "flag", "zero"] = "flag"
    """Leak auditor over the trajectory (reading hidden tests, future git history, the gold
    patch): `off`, `flag` the trajectory in metrics, or `zero` its reward as well."""
    unfinished: Literal["grade", "zero", "penalty"] = "grade"
    """An episode that ended without submitting (max_turns, max_tokens, the harness's wall
    clock, the format-error budget): `grade` its diff like any other, score it `zero` without
    running the tests, or score it `-unfinished_penalty` (a cost below any graded outcome)."""
    unfinished_penalty: float = Field(default=0.0, ge=0.0)
    """The penalty of `unfinished: penalty` (the episode's reward is minus this)."""

    @model_validator(mode="after")
    def _check_unfinished(self) -> _RewardBase:
        problems: list[tuple[str, str]] = []
        if self.unfinished == "penalty" and self.unfinished_penalty <= 0:
            problems.append(
                ("unfinished_penalty", "unfinished: penalty needs unfinished_penalty > 0")
            )
        if self.unfinished != "penalty" and self.unfinished_penalty:
            problems.append(
                (
                    "unfinished_penalty",
                    "unfinished_penalty applies only with unfinished: penalty; set that or drop it",
                )
            )
        raise_conflicts(problems)
        return self

    def unfinished_reward(self) -> float | None:
        """The reward of an unfinished episode, or None when it is graded like the others."""
        if self.unfinished == "grade":
            return None
        return -self.unfinished_penalty if self.unfinished == "penalty" else 0.0

    def not_graded(self, exit_reason: str) -> str:
        """Why an episode that ended `exit_reason` was scored by `unfinished`, not graded."""
        return f"not graded: the episode ended {exit_reason} (reward.unfinished: {self.unfinished})"


class ResolvedRewardConfig(_RewardBase):
    """Binary reward: 1 when the task is resolved, else 0."""

    type: Literal["resolved"] = "resolved"
    """Selects the binary resolved reward."""


class PartialCreditRewardConfig(_RewardBase):
    """Weighted mean of the FAIL_TO_PASS and PASS_TO_PASS pass fractions, in [0, 1].

    With the defaults this is the share of FAIL_TO_PASS tests that pass, given that every
    PASS_TO_PASS test still passes.
    """

    type: Literal["partial_credit"] = "partial_credit"
    """Selects partial credit."""
    fail_to_pass_weight: float = Field(default=1.0, ge=0.0)
    """Weight of the fraction of FAIL_TO_PASS tests that now pass."""
    pass_to_pass_weight: float = Field(default=0.0, ge=0.0)
    """Weight of the fraction of PASS_TO_PASS tests that still pass."""
    require_pass_to_pass: bool = True
    """Score 0 unless every PASS_TO_PASS test still passes (partial credit for fixing, never
    for breaking)."""
    resolved_bonus: float = Field(default=0.0, ge=0.0)
    """Added when every test passes (the result is then divided by 1 + bonus to stay in
    [0, 1])."""

    @model_validator(mode="after")
    def _check_weights(self) -> PartialCreditRewardConfig:
        problems: list[tuple[str, str]] = []
        if self.fail_to_pass_weight + self.pass_to_pass_weight == 0:
            problems.append(
                ("fail_to_pass_weight", "fail_to_pass_weight + pass_to_pass_weight must be > 0")
            )
        raise_conflicts(problems)
        return self


RewardConfig = Annotated[
    ResolvedRewardConfig | PartialCreditRewardConfig, Field(discriminator="type")
]
"""A reward, chosen by its `type:` tag."""
