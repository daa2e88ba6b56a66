"""The shell task environment (`shell`): starting files in, final state out, a hidden check
script decides.

`prepare` makes the sandbox's working directory, runs the task's setup script there and commits
the starting state to a fresh git repository (so `Sandbox.diff()` and `git status` work as in a
repository task). `observe` runs the hidden check script in the agent's own sandbox once the
harness has ended, under `reward.test_timeout_s` (the task's reward override applied): the
check reads the final state itself, which a fresh sandbox would not have. Both scripts are
written to a scratch directory beside the working directory, never inside it, with a random
name the agent cannot have prepared, and deleted after their run; the check script exists only
after the agent is done. `score` turns the report into a reward: `resolved` is 1 iff every
check passed; `partial_credit` is the share of checks passed (its `resolved_bonus` added when
all pass, then divided by `1 + resolved_bonus`; the FAIL_TO_PASS/PASS_TO_PASS weights do not
apply). A check that runs out of time scores 0 and ends the episode `test_timeout`. The run's
`reward.unfinished` and `reward.leak_audit` rules apply on top, as to every environment
(`reward_rules.py`).
"""

from __future__ import annotations

import shlex
import time
import uuid
from dataclasses import replace

from pydantic import ValidationError

from uni_agent_core.config.reward import (
    PartialCreditRewardConfig,
    ResolvedRewardConfig,
    RewardConfig,
)
from uni_agent_core.envs.environment import EpisodeFacts, Observation, Outcome, TaskEnvironment
from uni_agent_core.envs.micro_swe.generator import GIT_IDENTITY
from uni_agent_core.envs.shell.checks import CheckReport, ShellTaskData, parse_report
from uni_agent_core.envs.workspace import TaskDataError
from uni_agent_core.sandbox.base import ExecResult, Sandbox, SandboxError
from uni_agent_core.types import TaskSpec, Verification

SCRATCH_PREFIX = ".agent-rl-shell-"
"""The scratch directory of a script run, beside the working directory (a random suffix)."""
SETUP_TIMEOUT_S = 120.0
_GIT_TIMEOUT_S = 60.0
REPORT_KEPT_CHARS = 12_000
"""Characters of the check script's output an observation records."""
STATUS_KEPT_CHARS = 4_000
"""Characters of `git status --short` an observation records."""

START_COMMIT_SCRIPT = (
    "git init -q --template= . && git add -A && "
    + " ".join(f"{key}='{value}'" for key, value in GIT_IDENTITY.items())
    + " git -c commit.gpgsign=false -c core.autocrlf=false commit -q --allow-empty"
    " -m 'shell task start'"
)
"""Commits the starting files (an empty directory too) as the repository's one commit."""


def task_data(task: TaskSpec) -> ShellTaskData:
    """The task's `env_data` as a shell task's.

    Raises:
        TaskDataError: it lacks the setup or check script, or has unknown keys.
    """
    try:
        return ShellTaskData.model_validate(task.env_data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'env_data'}: {e['msg']}"
            for e in error.errors()
        )
        raise TaskDataError(
            f"task {task.instance_id}: env_data is not a shell task's ({problems}); it needs "
            "`setup` and `check` scripts (envs/shell/checks.py)"
        ) from None


async def _run_script(sandbox: Sandbox, name: str, text: str, timeout_s: float) -> ExecResult:
    """Write `text` to a fresh scratch directory beside the working directory, run it there with
    bash in the working directory, delete it."""
    scratch = sandbox.workdir.parent / f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}"
    path = scratch / name
    await sandbox.write_file(str(path), text)
    result = await sandbox.exec(f"bash {shlex.quote(str(path))}", timeout=timeout_s)
    await sandbox.exec(f"rm -rf -- {shlex.quote(str(scratch))}", timeout=_GIT_TIMEOUT_S)
    return result


def _tail(result: ExecResult, chars: int = 600) -> str:
    return (result.stderr.strip() or result.stdout.strip())[-chars:]


async def prepare_shell_workspace(sandbox: Sandbox, task: TaskSpec) -> None:
    """Make the working directory, run the task's setup in it and commit the starting state.

    Raises:
        TaskDataError: the task is not a well-formed shell task.
        SandboxError: the directory, the setup script or the commit failed.
    """
    data = task_data(task)
    workdir = shlex.quote(str(sandbox.workdir))
    made = await sandbox.exec(f"mkdir -p -- {workdir}", cwd="/", timeout=_GIT_TIMEOUT_S)
    if not made.ok:
        raise SandboxError(f"could not make the working directory {workdir}: {_tail(made)}")
    setup = await _run_script(sandbox, "setup.sh", data.setup, SETUP_TIMEOUT_S)
    if not setup.ok:
        why = "timed out" if setup.timed_out else f"exit {setup.exit_code}"
        raise SandboxError(
            f"task {task.instance_id}: the setup script failed ({why}): {_tail(setup)}"
        )
    commit = await sandbox.exec(START_COMMIT_SCRIPT, timeout=_GIT_TIMEOUT_S)
    if not commit.ok:
        raise SandboxError(
            f"task {task.instance_id}: committing the starting files failed: {_tail(commit)}"
        )


async def run_checks(sandbox: Sandbox, task: TaskSpec, timeout_s: float) -> CheckReport:
    """Run the task's hidden check script in its working directory and read its report.

    Raises:
        TaskDataError: the task is not a well-formed shell task.
        SandboxError: the sandbox failed (not the check: a failing check is a report).
    """
    data = task_data(task)
    started_at, clock = time.time(), time.perf_counter()
    result = await _run_script(sandbox, "check.sh", data.check, timeout_s)
    output = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr.strip() else "")
    report = parse_report(
        result.stdout,
        result.exit_code,
        expected=data.checks,
        timed_out=result.timed_out,
        started_at=started_at,
        seconds=time.perf_counter() - clock,
    )
    return replace(report, output=output)


def check_reward(report: CheckReport, config: RewardConfig) -> float:
    """The reward of a check report under the reward section, in [0, 1]."""
    if isinstance(config, ResolvedRewardConfig):
        return 1.0 if report.resolved else 0.0
    if isinstance(config, PartialCreditRewardConfig):
        score = report.fraction + (config.resolved_bonus if report.resolved else 0.0)
        return score / (1.0 + config.resolved_bonus)
    raise TypeError(f"not a reward section: {type(config).__name__}")


def render_record(report: CheckReport, status: str) -> str:
    """What an episode's trace shows of its final state: the check report, then what changed."""
    head = f"shell checks: {len(report.passed)} of {report.total} passed (exit {report.exit_code}"
    head += ", timed out)" if report.timed_out else ")"
    lines = [head, report.output[:REPORT_KEPT_CHARS].rstrip()]
    lines += ["", "git status --short:", status[:STATUS_KEPT_CHARS].rstrip() or "(no changes)"]
    return "\n".join(lines) + "\n"


class ShellEnvironment(TaskEnvironment):
    """Shell tasks: starting files in, final state out, a hidden check script decides."""

    name = "shell"

    async def prepare(self, sandbox: Sandbox, task: TaskSpec) -> None:
        await prepare_shell_workspace(sandbox, task)

    async def observe(self, sandbox: Sandbox, task: TaskSpec) -> Observation:
        timeout_s = self.reward_for(task).test_timeout_s
        status = await sandbox.exec(
            "git status --short --untracked-files=all", timeout=_GIT_TIMEOUT_S
        )
        listing = status.stdout if status.ok else f"(git status failed: {_tail(status, 200)})"
        report = await run_checks(sandbox, task, timeout_s)
        return Observation(record=render_record(report, listing), data=report)

    async def score(self, episode: EpisodeFacts, observation: Observation) -> Outcome:
        task, report = episode.task, observation.data
        if not isinstance(report, CheckReport):
            raise TaskDataError(f"task {task.instance_id}: no check report to score")
        reward = self.reward_for(task)
        return Outcome(
            reward=0.0 if report.timed_out else check_reward(report, reward),
            resolved=report.resolved,
            timed_out=report.timed_out,
            verification=verification_of(report, reward.test_timeout_s),
        )


def verification_of(report: CheckReport, timeout_s: float) -> Verification:
    """The check run, as the episode's trace shows it."""
    return Verification(
        tests_run=report.total,
        passed=len(report.passed),
        failed=len(report.failed),
        timed_out=report.timed_out,
        status="" if report.timed_out else ("resolved" if report.resolved else "unresolved"),
        error=f"the check script timed out after {timeout_s:g} s" if report.timed_out else None,
        started_at=report.started_at,
        seconds=report.seconds,
    )
