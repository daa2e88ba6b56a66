"""Per-task section overrides: merge onto the default kind, replace with another kind."""

from __future__ import annotations

import pytest

from uni_agent_core.config.harness import (
    BlackboxHarnessConfig,
    HarnessConfig,
    ReactHarnessConfig,
)
from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.config.problems import RecipeError


def test_no_override_keeps_the_default() -> None:
    default = ReactHarnessConfig(max_turns=7)
    assert section_for_task("harness", HarnessConfig, default, None, task_id="t") is default


def test_same_kind_override_merges_and_another_kind_replaces() -> None:
    default = ReactHarnessConfig(max_turns=7, format_error_budget=1)
    merged = section_for_task("harness", HarnessConfig, default, {"max_turns": 3}, task_id="t")
    assert isinstance(merged, ReactHarnessConfig)
    assert (merged.max_turns, merged.format_error_budget) == (3, 1)
    other = section_for_task(
        "harness",
        HarnessConfig,
        default,
        {"type": "blackbox", "command": ["claude", "-p"]},
        task_id="t",
    )
    assert isinstance(other, BlackboxHarnessConfig) and other.command == ["claude", "-p"]


def test_bad_override_names_the_task_and_key() -> None:
    with pytest.raises(RecipeError) as info:
        section_for_task(
            "harness", HarnessConfig, ReactHarnessConfig(), {"max_turn": 3}, task_id="django-1"
        )
    text = str(info.value)
    assert "task django-1" in text and "harness.max_turn" in text and "max_turns" in text


def test_reward_and_sandbox_sections_mix_per_task() -> None:
    from uni_agent_core.config.reward import (
        PartialCreditRewardConfig,
        ResolvedRewardConfig,
        RewardConfig,
    )
    from uni_agent_core.config.sandbox import LocalSandboxConfig, SandboxConfig

    reward = section_for_task(
        "reward",
        RewardConfig,
        ResolvedRewardConfig(),
        {"type": "partial_credit"},
        task_id="t",
    )
    assert isinstance(reward, PartialCreditRewardConfig)
    sandbox = section_for_task(
        "sandbox", SandboxConfig, LocalSandboxConfig(), {"memory_mb": 1024}, task_id="t"
    )
    assert isinstance(sandbox, LocalSandboxConfig) and sandbox.memory_mb == 1024
