"""Warm start: gold actions from one-line patches, and supervised fitting of sampled tokens."""

from __future__ import annotations

import json

import pytest

from uni_agent_core.rl.sft import gold_actions, supervised_warm_start
from uni_agent_core.types import TaskSpec, Trajectory

ONE_LINE = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def f(x):
-    return x + 1
+    return x - 1
"""


def _call(text: str) -> dict:
    return json.loads(text.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))


def test_a_one_line_patch_becomes_view_edit_submit() -> None:
    actions = gold_actions(TaskSpec(instance_id="t", problem_statement="p", patch=ONE_LINE))
    assert actions is not None and len(actions) == 3
    assert _call(actions[0]) == {
        "name": "editor",
        "arguments": {"command": "view", "path": "pkg/mod.py"},
    }
    assert _call(actions[1]) == {
        "name": "editor",
        "arguments": {
            "command": "str_replace",
            "path": "pkg/mod.py",
            "old_str": "return x + 1",
            "new_str": "return x - 1",
        },
    }
    assert _call(actions[2]) == {"name": "submit", "arguments": {}}


def test_a_statement_naming_the_line_gets_a_view_of_that_line_only() -> None:
    patch = ONE_LINE.replace("@@ -1,3 +1,3 @@", "@@ -7,3 +7,3 @@")
    statement = "In `pkg/mod.py`, line 8 (in function `f`): `+` is wrong there."
    actions = gold_actions(TaskSpec(instance_id="t", problem_statement=statement, patch=patch))
    assert actions is not None
    assert _call(actions[0])["arguments"] == {
        "command": "view",
        "path": "pkg/mod.py",
        "view_range": [8, 8],
    }


def test_other_patches_have_no_gold_action() -> None:
    two_lines = ONE_LINE.replace("+    return x - 1\n", "+    return x - 1\n+    # done\n")
    assert gold_actions(TaskSpec(instance_id="t", problem_statement="p", patch=two_lines)) is None


def test_warm_start_lowers_the_loss_of_the_sampled_tokens_only() -> None:
    from uni_agent_core.models import load_policy

    model, _ = load_policy("tiny")
    response = [11, 12, 13, 14, 15, 16]
    trajectory = Trajectory(
        session_id="s",
        chain_id=0,
        prompt_ids=[5, 6, 7, 8],
        response_ids=response,
        loss_mask=[1, 1, 1, 0, 1, 1],
        logprobs=[0.0] * 6,
        policy_versions=[0] * 6,
    )
    report = supervised_warm_start(model, [trajectory] * 4, epochs=3, lr=1e-2, echo=lambda _: None)
    assert report.trajectories == 4 and len(report.loss_by_epoch) == 3
    assert report.loss_by_epoch[-1] < report.loss_by_epoch[0]
    with pytest.raises(ValueError, match="trainable"):
        supervised_warm_start(model, [trajectory.model_copy(update={"loss_mask": [0] * 6})])
