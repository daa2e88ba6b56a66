"""The verifier: an episode's reward, computed in a fresh sandbox the agent never touched.

For one task and one diff: a new sandbox gets the repository at its base commit; the diff is
applied (`git apply`, then `patch --fuzz` as SWE-bench's harness falls back); every file the
hidden `test_patch` touches is restored to the base and the test patch applied over it, so a
diff that edits or deletes tests cannot change what is run; the test command runs under the
recipe's timeout; the log is graded with swebench's parsers (`grading.py`) and turned into a
reward (`rewards.py`). `oracle` scores the task's gold patch the same way. The run's
`unfinished` and `leak_audit` rules are applied over an episode's verdict by the driver
(`reward_rules.py`), as for every task environment.

The steps are also exported (`apply_patch`, `apply_test_patch`, `run_tests`) because the data
validator runs them in a different order on one sandbox.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from uni_agent_core.config.reward import ResolvedRewardConfig, RewardConfig
from uni_agent_core.config.sandbox import SandboxConfig
from uni_agent_core.envs.grading import TestReport, framed_log, grade_log
from uni_agent_core.envs.patches import patched_files
from uni_agent_core.envs.rewards import reward_from_report
from uni_agent_core.envs.workspace import materialize_repo, sandbox_overrides
from uni_agent_core.sandbox.base import ExecResult, Sandbox
from uni_agent_core.sandbox.factory import build_sandbox, sandbox_for_task
from uni_agent_core.sandbox.pool import SandboxPool
from uni_agent_core.types import TaskSpec

_PATCH_TIMEOUT_S = 120.0
_START_GRACE_S = 30.0
"""Beyond the backend's own `startup_timeout_s`, before the pool gives up on a start."""
_LOG_TAIL_CHARS = 4000

SandboxFactory = Callable[[TaskSpec], AbstractAsyncContextManager[Sandbox]]
"""A task's fresh sandbox, for `async with factory(task) as sandbox:` (a plain not yet
started `Sandbox` is one; `TaskSandboxes` starts it through the run's pool)."""


class Verdict(BaseModel):
    """The outcome of verifying one diff."""

    model_config = ConfigDict(extra="forbid")

    instance_id: str
    mode: Literal["agent", "oracle"]
    reward: float
    resolved: bool
    patch_applied: bool
    """False when the diff did not apply (reward 0)."""
    test_patch_applied: bool = True
    """False when the hidden tests did not apply over the diff (reward 0)."""
    timed_out: bool = False
    """The test command passed its timeout (reward 0)."""
    report: TestReport | None = None
    error: str | None = None
    """Why no report was produced, when one was not."""
    duration_s: float = 0.0
    log_tail: str = ""
    """The end of the test log, for debugging."""


class TaskSandboxes:
    """Each task's fresh sandbox, from the run's sandbox section with the task's override
    applied, started through one `SandboxPool` shared by every sandbox of the run (the
    agent's and the verifier's): at most `max_concurrent_starts` starts at once, a failed start
    retried `start_retries` times with backoff, every failure counted in `pool.stats`. With a
    `warm_pool_size` (docker, modal), that many spares are kept started for the placement asked
    for last (a task's group and its verifiers share one); `aclose()` closes them."""

    def __init__(self, default: SandboxConfig) -> None:
        self.default = default
        self.pool = SandboxPool(
            lambda: build_sandbox(default),
            max_concurrent_starts=default.max_concurrent_starts,
            start_retries=default.start_retries,
            backoff_s=default.start_backoff_s,
            warm=getattr(default, "warm_pool_size", 0),
            start_timeout_s=default.startup_timeout_s + _START_GRACE_S,
        )

    def __call__(self, task: TaskSpec) -> AbstractAsyncContextManager[Sandbox]:
        """`async with sandboxes(task) as sandbox:` a started sandbox, closed after the body."""
        config, placement = self._placement(task)
        key = (config.model_dump_json(), json.dumps(placement, sort_keys=True, default=str))
        return self.pool.sandbox(lambda: self.build(task), key=key)

    def build(self, task: TaskSpec) -> Sandbox:
        """A new, not yet started sandbox of `task` (its section and placement)."""
        config, placement = self._placement(task)
        return build_sandbox(config, **placement)

    async def aclose(self) -> None:
        """Close the warm spares (idempotent); no sandbox starts after it."""
        await self.pool.aclose()

    def _placement(self, task: TaskSpec) -> tuple[SandboxConfig, dict[str, Any]]:
        config = sandbox_for_task(self.default, task.sandbox, task_id=task.instance_id)
        return config, sandbox_overrides(task, config)


async def close_sandboxes(factory: SandboxFactory) -> None:
    """Close what a sandbox factory keeps (a `TaskSandboxes`' warm spares); others keep none."""
    aclose = getattr(factory, "aclose", None)
    if aclose is not None:
        await aclose()


def task_sandbox_factory(default: SandboxConfig) -> TaskSandboxes:
    """Fresh sandboxes from the run's sandbox section, each task's override applied, started
    through one pool (`TaskSandboxes`)."""
    return TaskSandboxes(default)


def _scratch(sandbox: Sandbox) -> PurePosixPath:
    """Where patches are written: beside the repository, never inside it."""
    return sandbox.workdir.parent / ".agent-rl-verify"


async def apply_patch(sandbox: Sandbox, patch: str, name: str) -> ExecResult:
    """Apply `patch` in the repository (`git apply`, falling back to `patch --fuzz=5`)."""
    path = _scratch(sandbox) / f"{name}.patch"
    await sandbox.write_file(str(path), patch)
    quoted = shlex.quote(str(path))
    script = (
        f"git apply --whitespace=nowarn {quoted} 2>&1 || "
        f"patch --batch --fuzz=5 -p1 -i {quoted} 2>&1"
    )
    return await sandbox.exec(script, timeout=_PATCH_TIMEOUT_S)


async def apply_test_patch(sandbox: Sandbox, task: TaskSpec) -> ExecResult:
    """Restore every file the test patch touches to the base commit, then apply it."""
    restore = " ".join(shlex.quote(f) for f in patched_files(task.test_patch))
    script = (
        f"for f in {restore}; do "
        'if git cat-file -e "HEAD:$f" 2>/dev/null; then git checkout -q HEAD -- "$f"; '
        'else rm -rf -- "$f"; fi; done'
    )
    if restore:
        restored = await sandbox.exec(script, timeout=_PATCH_TIMEOUT_S)
        if not restored.ok:
            return restored
    return await apply_patch(sandbox, task.test_patch, "test")


async def run_tests(sandbox: Sandbox, task: TaskSpec, timeout_s: float) -> tuple[str, bool]:
    """Run the task's test command; returns the framed log and whether it timed out."""
    if not task.test_cmd:
        raise ValueError(f"task {task.instance_id} has no test_cmd")
    result = await sandbox.exec(task.test_cmd, timeout=timeout_s)
    output = result.stdout + ("\n" if result.stdout and result.stderr else "") + result.stderr
    return framed_log(output, result.exit_code), result.timed_out


class Verifier:
    """Scores diffs for tasks, each in its own fresh sandbox."""

    def __init__(
        self,
        sandbox_factory: SandboxFactory,
        reward: RewardConfig | None = None,
    ) -> None:
        """Args:
        sandbox_factory: makes the fresh sandbox of a task (`task_sandbox_factory(section)`).
        reward: the reward section; None is the binary `resolved` reward with its timeout.
        """
        self.sandbox_factory = sandbox_factory
        self.reward = reward or ResolvedRewardConfig()

    async def verify(self, task: TaskSpec, diff: str) -> Verdict:
        """The reward of `diff` (the agent's working-tree patch) on `task`."""
        return await self._score(task, diff, "agent")

    async def oracle(self, task: TaskSpec) -> Verdict:
        """The reward of the task's gold patch (1.0 for every valid task)."""
        return await self._score(task, task.patch, "oracle")

    async def _score(self, task: TaskSpec, diff: str, mode: Literal["agent", "oracle"]) -> Verdict:
        started = time.perf_counter()

        def verdict(**fields: object) -> Verdict:
            fields.setdefault("reward", 0.0)
            fields.setdefault("resolved", False)
            fields.setdefault("patch_applied", True)
            return Verdict(
                instance_id=task.instance_id,
                mode=mode,
                duration_s=time.perf_counter() - started,
                **fields,  # type: ignore[arg-type]
            )

        async with self.sandbox_factory(task) as sandbox:
            await materialize_repo(sandbox, task)
            if diff.strip():
                applied = await apply_patch(sandbox, diff, "agent")
                if not applied.ok:
                    return verdict(
                        patch_applied=False,
                        error="the diff does not apply",
                        log_tail=applied.stdout[-_LOG_TAIL_CHARS:],
                    )
            tests = await apply_test_patch(sandbox, task)
            if not tests.ok:
                return verdict(
                    test_patch_applied=False,
                    error="the hidden tests do not apply over the diff",
                    log_tail=(tests.stdout + tests.stderr)[-_LOG_TAIL_CHARS:],
                )
            log, timed_out = await run_tests(sandbox, task, self.reward.test_timeout_s)
        if timed_out:
            return verdict(
                timed_out=True, error="the tests timed out", log_tail=log[-_LOG_TAIL_CHARS:]
            )
        report = grade_log(task, log)
        reward = reward_from_report(report, self.reward)
        return verdict(
            reward=reward, resolved=report.resolved, report=report, log_tail=log[-_LOG_TAIL_CHARS:]
        )
