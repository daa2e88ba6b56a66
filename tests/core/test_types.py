"""Shared records: TaskSpec row decoding and Trajectory alignment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from uni_agent_core.types import TaskSpec, Trajectory


def test_task_spec_accepts_published_json_string_test_lists() -> None:
    row = {
        "instance_id": "astropy__astropy-12907",
        "repo": "astropy/astropy",
        "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
        "problem_statement": "Modeling's separability_matrix ...",
        "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[x]"]',
        "PASS_TO_PASS": "[]",
        "version": "4.3",
    }
    task = TaskSpec(**row)
    assert task.FAIL_TO_PASS == ["astropy/modeling/tests/test_separable.py::test_separable[x]"]
    assert task.PASS_TO_PASS == []
    with pytest.raises(ValidationError, match="JSON list"):
        TaskSpec(instance_id="x", problem_statement="p", FAIL_TO_PASS='{"a": 1}')
    with pytest.raises(ValidationError, match="extra"):
        TaskSpec(instance_id="x", problem_statement="p", hints="not a field")


def test_trajectory_rejects_misaligned_tokens() -> None:
    with pytest.raises(ValidationError, match="misaligned"):
        Trajectory(
            session_id="s",
            chain_id=0,
            prompt_ids=[1],
            response_ids=[2, 3],
            loss_mask=[1],
            logprobs=[0.0, 0.0],
            policy_versions=[0, 0],
        )
