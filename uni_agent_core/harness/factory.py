"""Harness builders: the run's harness section, or a task's own, into a harness object; a
`mix` section's member for each task."""

from __future__ import annotations

from uni_agent_core.config.harness import (
    BlackboxHarnessConfig,
    ClaudeCodeHarnessConfig,
    CodexHarnessConfig,
    HarnessConfig,
    LeafHarnessConfig,
    MiniSweAgentHarnessConfig,
    MixHarnessConfig,
    MixMember,
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


class HarnessAssignment:
    """Which harness plays each task of a run, and the name its metrics go under.

    The run's section, or the task's own `harness` override. A `mix` gives each new task the
    next member in smooth weighted round-robin order (each member's share of tasks follows its
    `weight`, interleaved, so a step of a few tasks already mixes them) and keeps it for the
    task: every sample of a task's group, in every step, runs under one harness. Assignment
    follows the order tasks are first met, which a run's seed fixes.
    """

    def __init__(self, config: HarnessConfig) -> None:
        self.config = config
        self._assigned: dict[str, MixMember] = {}
        self._credit: dict[str, float] = {}

    def choose(self, task: TaskSpec) -> tuple[str, LeafHarnessConfig]:
        config = section_for_task(
            "harness", HarnessConfig, self.config, task.harness, task_id=task.instance_id
        )
        if not isinstance(config, MixHarnessConfig):
            return config.type, config
        member = self._assigned.get(task.instance_id)
        if member is None:
            member = self._assigned[task.instance_id] = self._next_member(config)
        return member.label, member.harness

    def _next_member(self, mix: MixHarnessConfig) -> MixMember:
        for member in mix.harnesses:
            self._credit[member.label] = self._credit.get(member.label, 0.0) + member.weight
        chosen = max(mix.harnesses, key=lambda member: self._credit[member.label])
        self._credit[chosen.label] -= sum(member.weight for member in mix.harnesses)
        return chosen


def harness_for_task(config: HarnessConfig, task: TaskSpec) -> Harness:
    """The harness object that plays `task` on its own (a mix's first member for a first
    task); runs assign through one `HarnessAssignment`."""
    return build_harness(HarnessAssignment(config).choose(task)[1])
