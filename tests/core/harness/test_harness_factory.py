"""Harness builders, including per-task overrides (sample-level mixing)."""

from __future__ import annotations

from uni_agent_core.config.harness import ReactHarnessConfig
from uni_agent_core.harness.factory import build_harness, harness_for_task
from uni_agent_core.harness.react.loop import ReactHarness
from uni_agent_core.types import TaskSpec


def test_tasks_choose_their_own_harness() -> None:
    default = ReactHarnessConfig(max_turns=9)
    plain = TaskSpec(instance_id="a", problem_statement="p")
    tuned = TaskSpec(instance_id="b", problem_statement="p", harness={"max_turns": 2})
    assert isinstance(build_harness(default), ReactHarness)
    assert harness_for_task(default, plain).config.max_turns == 9
    assert harness_for_task(default, tuned).config.max_turns == 2
    blackbox = TaskSpec(
        instance_id="c",
        problem_statement="p",
        harness={"type": "blackbox", "command": ["python", "agent.py"]},
    )
    assert type(harness_for_task(default, blackbox)).__name__ == "BlackboxHarness"
