"""R2E-Gym rows into `TaskSpec`s.

R2E-Gym rows are not SWE-bench rows: they name the repository (`repo_name`), the fixing commit
(`commit_hash`), a per-task image (`docker_image`, the repository at `/testbed` before the fix)
and the expected outcome of every hidden test (`expected_output_json`, test name -> status).
The hidden tests live in the image at `/r2e_tests`, so they are removed from the agent's
sandbox and copied next to the repository only by the verifier, which runs R2E-Gym's
`run_tests.sh` and grades its pytest log with swebench's pytest parser (keys normalised to
R2E-Gym's `Class.test` names). An episode is resolved when every test expected to pass does;
those tests are the task's FAIL_TO_PASS. Rows carry no gold patch unless a `patch` column was
added, so oracle scoring needs one.
"""

from __future__ import annotations

import json
from typing import Any

from uni_agent_core.types import TaskSpec

WORKDIR = "/testbed"
HIDDEN_TESTS = "/r2e_tests"
TEST_COMMAND = f"cp -r {HIDDEN_TESTS} {WORKDIR}/r2e_tests && bash run_tests.sh"


def r2e_gym_task(row: dict[str, Any]) -> TaskSpec:
    """One R2E-Gym row as a task."""
    expected = row.get("expected_output_json") or "{}"
    if isinstance(expected, str):
        expected = json.loads(expected)
    if not isinstance(expected, dict):
        raise ValueError("expected_output_json must map test names to statuses")
    passing = sorted(name for name, status in expected.items() if status == "PASSED")
    repo = row["repo_name"]
    commit = row["commit_hash"]
    return TaskSpec(
        instance_id=row.get("instance_id") or f"r2e_gym__{repo}-{commit[:12]}",
        repo=repo,
        base_commit="",
        problem_statement=row["problem_statement"],
        patch=row.get("patch", ""),
        test_patch="",
        FAIL_TO_PASS=passing,
        PASS_TO_PASS=[],
        version=commit,
        source={
            "type": "image",
            "image": row["docker_image"],
            "workdir": WORKDIR,
            "remove_paths": [HIDDEN_TESTS],
            "dataset": "r2e_gym",
            "expected_output": expected,
        },
        test_cmd=TEST_COMMAND,
        log_parser="r2e_gym",
    )
