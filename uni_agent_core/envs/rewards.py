"""Turning a graded test report into a scalar reward, as the recipe's `reward:` section asks."""

from __future__ import annotations

from uni_agent_core.config.reward import (
    PartialCreditRewardConfig,
    ResolvedRewardConfig,
    RewardConfig,
)
from uni_agent_core.envs.grading import TestReport


def reward_from_report(report: TestReport, config: RewardConfig) -> float:
    """The reward of one graded episode, in [0, 1].

    `resolved`: 1.0 when swebench grades the run RESOLVED_FULL, else 0.0. `partial_credit`:
    the weighted mean of the FAIL_TO_PASS and PASS_TO_PASS pass fractions (0 when
    `require_pass_to_pass` and a PASS_TO_PASS test broke), plus `resolved_bonus` when resolved,
    divided by `1 + resolved_bonus`.
    """
    if isinstance(config, ResolvedRewardConfig):
        return 1.0 if report.resolved else 0.0
    if isinstance(config, PartialCreditRewardConfig):
        if config.require_pass_to_pass and report.pass_to_pass_failed:
            return 0.0
        weights = config.fail_to_pass_weight + config.pass_to_pass_weight
        score = (
            config.fail_to_pass_weight * report.fail_to_pass_rate
            + config.pass_to_pass_weight * report.pass_to_pass_rate
        ) / weights
        if report.resolved:
            score += config.resolved_bonus
        return score / (1.0 + config.resolved_bonus)
    raise TypeError(f"not a reward section: {type(config).__name__}")
