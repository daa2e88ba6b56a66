"""Harness builders: the run's harness section, or a task's own, into a harness object; a
`mix` section's member for each task."""

from __future__ import annotations

from uni_agent_core.config.harness import (
    HarnessConfig,
    LeafHarnessConfig,
    MixHarnessConfig,
    MixMember,
    PluginHarnessConfig,
    harness_label,
)
from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.harness.base import Harness
from uni_agent_core.plugins import resolve
from uni_agent_core.types import TaskSpec


def build_harness(config: LeafHarnessConfig) -> Harness:
    """The harness a (validated) harness section describes: a built-in's class (from the
    plug-in registry) given the section, or a plug-in's callable given its `options`.

    Raises:
        PluginError: a plug-in's path does not import.
        TypeError: a plug-in's callable returned something that is not a `Harness`.
    """
    if isinstance(config, PluginHarnessConfig):
        harness = resolve("harness", config.path)(dict(config.options))
        if not isinstance(harness, Harness):
            raise TypeError(
                f"harness {config.path} returned a {type(harness).__name__}, which has no "
                "`async def run(task, sandbox, endpoint)`"
            )
        return harness
    built: Harness = resolve("harness", config.type)(config)
    return built


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
            return harness_label(config), config
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
