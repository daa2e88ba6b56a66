"""Harness builders: the run's harness section, or a task's own, into a harness object."""

from __future__ import annotations

from uni_agent_core.config.harness import (
    BlackboxHarnessConfig,
    HarnessConfig,
    MiniSweAgentHarnessConfig,
    ReactHarnessConfig,
)
from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.harness.base import Harness
from uni_agent_core.types import TaskSpec


def build_harness(config: HarnessConfig) -> Harness:
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
    raise TypeError(f"unknown harness config {type(config).__name__}")


def harness_for_task(default: HarnessConfig, task: TaskSpec) -> Harness:
    """The harness of one task: the run's, or the task's own `harness` override."""
    config = section_for_task(
        "harness", HarnessConfig, default, task.harness, task_id=task.instance_id
    )
    return build_harness(config)
