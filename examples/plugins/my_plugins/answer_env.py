"""A task environment: the agent must leave one word in `answer.txt`.

A task row names it with `env: my_plugins.answer_env:AnswerFileEnvironment` and carries the
expected word in `env_data: {"answer": ...}` (never shown to the agent: only the problem
statement is). The episode's final state is the file's content; the score compares it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from uni_agent_core.envs.environment import (
    EpisodeFacts,
    GroupMember,
    Observation,
    Outcome,
    TaskEnvironment,
)
from uni_agent_core.envs.workspace import TaskDataError
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.types import TaskSpec, Verification

ANSWER_FILE = "answer.txt"


class AnswerFileEnvironment(TaskEnvironment):
    name = "answer_file"

    async def prepare(self, sandbox: Sandbox, task: TaskSpec) -> None:
        if not task.env_data.get("answer"):
            raise TaskDataError(f"task {task.instance_id}: env_data.answer is missing")
        workdir = shlex.quote(str(sandbox.workdir))
        made = await sandbox.exec(f"mkdir -p {workdir}", timeout=30)
        if not made.ok:
            raise SandboxError(f"cannot create {workdir}: {made.stderr}")
        await sandbox.write_file(
            f"{sandbox.workdir}/README.txt", f"Write your answer to {ANSWER_FILE}.\n"
        )

    async def observe(self, sandbox: Sandbox, task: TaskSpec) -> Observation:
        path = shlex.quote(f"{sandbox.workdir}/{ANSWER_FILE}")
        shown = await sandbox.exec(f"cat {path} 2>/dev/null", timeout=30)
        return Observation(record=shown.stdout[:1000])

    async def score(self, episode: EpisodeFacts, observation: Observation) -> Outcome:
        expected = str(episode.task.env_data["answer"]).strip().lower()
        solved = observation.record.strip().lower() == expected
        return Outcome(
            reward=1.0 if solved else 0.0,
            resolved=solved,
            verification=Verification(tests_run=1, passed=int(solved), failed=int(not solved)),
        )


class MajorityAnswerEnvironment(AnswerFileEnvironment):
    """The same tasks, rewarded by self-consistency: a training group's episodes are scored
    together, each earning the share of its group that gave the same answer (no answer key
    needed). Evaluation samples keep `AnswerFileEnvironment`'s own score."""

    name = "majority_answer"
    scores_groups = True

    def score_group(self, members: Sequence[GroupMember]) -> list[float]:
        answers = [member.observation.record.strip().lower() for member in members]
        return [answers.count(answer) / len(answers) for answer in answers]
