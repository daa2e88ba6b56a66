"""Harness builders: the run's harness section, or a task's own, into a harness object; a
`mix` section's member for each task."""

from __future__ import annotations

import zlib

from uni_agent_core.config.harness import (
    BlackboxHarnessConfig,
    ClaudeCodeHarnessConfig,
    CodexHarnessConfig,
    HarnessConfig,
    LeafHarnessConfig,
    MiniSweAgentHarnessConfig,
    MixHarnessConfig,
    ReactHarnessConfig,
)
from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.harness.base import Harness
from uni_agent_core.types import TaskSpec


def build_harness(config: LeafHarnessConfig) -> Harness:
    """The harness a (validated) harness section describes."""
    if isinstance(config, ReactHarnessConfig):
        from uni_agent_core.harness.react.loop import ReactHarness

        return ReactHarness(config)
    if isinstance(config, BlackboxHarnessConfig):
        from uni_agent_core.harness.blackbox import BlackboxHarness

        return BlackboxHarness(config)
    if isinstance(config, MiniSweAgentHarnessConfig):
        from uni_agent_core.harness.mini_swe_agent import MiniSweAgentHarness

        return MiniSweAgentHarness(config)
    if isinstance(config, ClaudeCodeHarnessConfig):
        from uni_agent_core.harness.claude_code import ClaudeCodeHarness

        return ClaudeCodeHarness(config)
    if isinstance(config, CodexHarnessConfig):
        from uni_agent_core.harness.codex import CodexHarness

        return CodexHarness(config)
    raise TypeError(f"unknown harness config {type(config).__name__}")


def choose_for_task(config: HarnessConfig, task: TaskSpec) -> tuple[str, LeafHarnessConfig]:
    """The harness that plays `task` and the name its metrics go under.

    The run's section, or the task's own `harness` override; a `mix` gives each task one
    member, by a hash of the task id over the members' weights (the same in every step).
    """
    config = section_for_task(
        "harness", HarnessConfig, config, task.harness, task_id=task.instance_id
    )
    if not isinstance(config, MixHarnessConfig):
        return config.type, config
    total = sum(member.weight for member in config.harnesses)
    point = zlib.crc32(task.instance_id.encode()) / 2**32 * total
    for member in config.harnesses:
        point -= member.weight
        if point < 0:
            return member.label, member.harness
    last = config.harnesses[-1]
    return last.label, last.harness


def harness_for_task(config: HarnessConfig, task: TaskSpec) -> Harness:
    """The harness object that plays `task` (`choose_for_task`, built)."""
    return build_harness(choose_for_task(config, task)[1])
