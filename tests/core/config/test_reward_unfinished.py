"""The reward section's `unfinished` setting: grade by default, `zero` or a `penalty`."""

import pytest

from uni_agent_core.config.reward import PartialCreditRewardConfig, ResolvedRewardConfig


def test_unfinished_episodes_are_graded_unless_the_section_says_otherwise() -> None:
    assert ResolvedRewardConfig().unfinished_reward() is None
    assert ResolvedRewardConfig(unfinished="zero").unfinished_reward() == 0.0
    penalised = PartialCreditRewardConfig(unfinished="penalty", unfinished_penalty=0.25)
    assert penalised.unfinished_reward() == -0.25


def test_the_unfinished_penalty_goes_with_the_penalty_mode() -> None:
    with pytest.raises(ValueError, match="unfinished_penalty > 0"):
        ResolvedRewardConfig(unfinished="penalty")
    with pytest.raises(ValueError, match="only with unfinished: penalty"):
        ResolvedRewardConfig(unfinished_penalty=1.0)
