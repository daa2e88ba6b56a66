"""The SWE task environment (`swe`): a repository with a bug, scored by its hidden tests.

The first `TaskEnvironment`. The agent's sandbox gets the task's repository at its base
commit with newer history scrubbed (`workspace.prepare_agent_workspace`); the final state is
the working-tree diff; the score is the `Verifier`'s: the diff applied in a fresh sandbox, the
hidden tests restored and run under `reward.test_timeout_s`, the log graded. The run's
`reward.unfinished` and `reward.leak_audit` rules apply on top, as to every environment
(`reward_rules.py`). micro-swe, SWE-bench, SWE-rebench and R2E-Gym tasks all use it.
"""

from __future__ import annotations

import time

from uni_agent_core.envs.environment import EpisodeFacts, Observation, Outcome, TaskEnvironment
from uni_agent_core.envs.verifier import Verdict, Verifier
from uni_agent_core.envs.workspace import prepare_agent_workspace
from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import TaskSpec, Verification


class SweEnvironment(TaskEnvironment):
    """SWE tasks: repository in, diff out, hidden tests decide."""

    name = "swe"

    async def prepare(self, sandbox: Sandbox, task: TaskSpec) -> None:
        await prepare_agent_workspace(sandbox, task)

    async def observe(self, sandbox: Sandbox, task: TaskSpec) -> Observation:
        return Observation(record=await sandbox.diff())

    async def score(self, episode: EpisodeFacts, observation: Observation) -> Outcome:
        task, started_at = episode.task, time.time()
        verifier = Verifier(self.context.sandbox_factory, self.reward_for(task))
        verdict = await verifier.verify(task, observation.record)
        return Outcome(
            reward=verdict.reward,
            resolved=verdict.resolved,
            timed_out=verdict.timed_out,
            verification=verification_of(verdict, started_at),
        )


def verification_of(verdict: Verdict, started_at: float) -> Verification:
    """What the verifier did, as the episode's trace shows it."""
    report = verdict.report
    passed = failed = 0
    if report is not None:
        passed = len(report.fail_to_pass_passed) + len(report.pass_to_pass_passed)
        failed = len(report.fail_to_pass_failed) + len(report.pass_to_pass_failed)
    return Verification(
        tests_run=passed + failed,
        passed=passed,
        failed=failed,
        patch_applied=verdict.patch_applied and verdict.test_patch_applied,
        timed_out=verdict.timed_out,
        status=report.status if report is not None else "",
        error=verdict.error,
        started_at=started_at,
        seconds=verdict.duration_s,
    )
