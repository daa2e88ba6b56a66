"""The rollout driver: one episode = harness -> gateway session -> sandbox -> verifier.

For each episode the driver opens a gateway session (seeded, so a replay samples the same
tokens), builds the task's sandbox (the run's section or the task's override), puts the
repository in it at its base commit with newer history scrubbed, runs the task's harness against
the session's URLs, takes the working-tree diff, and scores it in a fresh sandbox with the
task's reward section and the leak policy; a verifier whose tests pass `reward.test_timeout_s`
ends the episode as `test_timeout` (reward 0), and an episode the harness stopped unfinished
(`UNFINISHED_EXITS`) is scored as `reward.unfinished` says. The session's chains become the
episode's trajectories, each carrying the reward and exit reason; what the episode did on the
way (the gateway's engine calls, a white-box harness's tool calls, the verifier's run, the diff)
rides along for its trace (`tracking/traces.py`). Sandbox and task-data failures end the episode
with `sandbox_error` (reward 0, masked from the loss); they are counted, never raised. Episodes
run at most `max_concurrency` at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from uni_agent_core.config.harness import HarnessConfig
from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.reward import RewardConfig
from uni_agent_core.envs.verifier import SandboxFactory, Verdict, Verifier
from uni_agent_core.envs.workspace import TaskDataError, prepare_agent_workspace
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.session import TOOL_ARGUMENTS_SHOWN
from uni_agent_core.harness.agent_clis import gateway_reach_problems, require_agent_clis
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.factory import HarnessAssignment, build_harness
from uni_agent_core.rollout.build import build_sandbox_factory
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.git_hygiene import GitHygieneError
from uni_agent_core.types import (
    UNFINISHED_EXITS,
    ExitReason,
    RolloutResult,
    TaskSpec,
    ToolCall,
    Verification,
)

logger = logging.getLogger(__name__)


DIFF_KEPT_CHARS = 20_000
"""Characters of an episode's diff its result keeps (the trace's output)."""


def tool_call_of(action: dict[str, Any]) -> ToolCall:
    """A harness's action record (`info["actions"]`) as a `ToolCall`."""
    arguments = action.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return ToolCall(
        name=str(action.get("name", "")),
        arguments=arguments[:TOOL_ARGUMENTS_SHOWN],
        output=str(action.get("output", "")),
        error=bool(action.get("error", False)),
        exit_code=action.get("exit_code"),
        started_at=float(action.get("started_at", 0.0)),
        seconds=float(action.get("seconds", 0.0)),
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


def episode_seed(run_seed: int, step: int, task_id: str, sample_index: int) -> int:
    """A sampling seed that depends only on where the episode sits in the run."""
    return zlib.crc32(f"{run_seed}/{step}/{task_id}/{sample_index}".encode()) & 0x7FFFFFFF


class RolloutDriver:
    """Runs episodes of tasks against one gateway."""

    def __init__(
        self,
        *,
        manager: SessionManager,
        gateway_url: str,
        harness: HarnessConfig,
        sandbox_factory: SandboxFactory,
        reward: RewardConfig,
        max_concurrency: int,
        max_total_tokens: int | None = None,
    ) -> None:
        require_agent_clis(harness)  # before any episode: a missing CLI fails the run, not each
        self.manager = manager
        self.gateway_url = gateway_url.rstrip("/")
        self.harness = harness
        self.assignment = HarnessAssignment(harness)
        """Which harness plays each task (a `mix` keeps one member per task)."""
        self.sandbox_factory = sandbox_factory
        """Makes each episode's fresh sandbox, and the verifier's."""
        self.reward = reward
        self.max_total_tokens = max_total_tokens
        self.limit = asyncio.Semaphore(max_concurrency)
        self.errors: Counter[str] = Counter()
        """Episodes ended by infrastructure failures, by exception type."""

    @classmethod
    def for_recipe(
        cls, recipe: Recipe, *, manager: SessionManager, gateway_url: str, max_concurrency: int
    ) -> RolloutDriver:
        """A driver with the recipe's harness, sandbox and reward, sessions capped at its
        training context.

        Raises:
            SandboxError: the harness runs agents inside bubblewrap sandboxes that could not
                reach the gateway (`gateway_reach_problems`), before any episode.
        """
        problems = gateway_reach_problems(recipe.sandbox, recipe.harness)
        if problems:
            raise SandboxError("; ".join(f"{key}: {why}" for key, why in problems))
        return cls(
            manager=manager,
            gateway_url=gateway_url,
            harness=recipe.harness,
            sandbox_factory=build_sandbox_factory(recipe),
            reward=recipe.reward,
            max_concurrency=max_concurrency,
            max_total_tokens=recipe.trainer.max_context_tokens,
        )

    def _policy_version(self) -> int:
        return int(self.manager.engine.stats().policy_version)

    async def episode(
        self,
        task: TaskSpec,
        sample_index: int,
        *,
        seed: int,
        group_id: str = "",
        on_episode: Callable[[RolloutResult], None] | None = None,
    ) -> RolloutResult:
        """Run one episode of `task` (waits for a concurrency slot) as a member of `group_id`;
        `on_episode` gets the result as soon as it is there."""
        async with self.limit:
            result = await self._episode(task, sample_index, seed)
        if group_id:
            result = result.model_copy(update={"group_id": group_id})
        if on_episode is not None:
            on_episode(result)
        return result

    async def group(
        self,
        task: TaskSpec,
        size: int,
        *,
        run_seed: int,
        step: int,
        group_id: str | None = None,
        on_episode: Callable[[RolloutResult], None] | None = None,
    ) -> list[RolloutResult]:
        """`size` episodes of one task (the GRPO group), concurrently, each carrying
        `group_id` (default `<task>@<step>`: `step` is where the group sits in the run);
        `on_episode` gets each episode as it finishes (the curriculum's feed)."""
        group_id = group_id or f"{task.instance_id}@{step}"
        return list(
            await asyncio.gather(
                *(
                    self.episode(
                        task,
                        i,
                        seed=episode_seed(run_seed, step, task.instance_id, i),
                        group_id=group_id,
                        on_episode=on_episode,
                    )
                    for i in range(size)
                )
            )
        )

    async def _episode(self, task: TaskSpec, sample_index: int, seed: int) -> RolloutResult:
        started_version, started_at = self._policy_version(), time.time()
        session, key = self.manager.create(
            sampling={"seed": seed},
            metadata={"task_id": task.instance_id, "sample_index": sample_index},
            max_total_tokens=self.max_total_tokens,
        )
        root = f"{self.gateway_url}/sessions/{session.session_id}"
        endpoint = Endpoint(openai_base_url=root + "/v1", anthropic_base_url=root, api_key=key)
        timings: dict[str, float] = {}
        exit_reason, turns, diff, error = ExitReason.SANDBOX_ERROR, 0, "", None
        actions: list[Any] = []
        harness_name, harness_config = self.assignment.choose(task)
        try:
            clock = time.perf_counter()
            async with self.sandbox_factory(task) as sandbox:
                await prepare_agent_workspace(sandbox, task)
                timings["sandbox"] = time.perf_counter() - clock
                clock = time.perf_counter()
                result = await build_harness(harness_config).run(task, sandbox, endpoint)
                timings["agent"] = time.perf_counter() - clock
                exit_reason, turns = result.exit_reason, result.steps
                actions = list(result.info.get("actions", []))
                diff = await sandbox.diff()
        except (SandboxError, TaskDataError, GitHygieneError, OSError) as exc:
            # Deliberate boundary: an infrastructure failure ends this episode, not the run.
            self.errors[type(exc).__name__] += 1
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("episode %s/%d: %s", task.instance_id, sample_index, error)
            exit_reason = ExitReason.SANDBOX_ERROR
        reward, resolved, leak_flagged = 0.0, False, False
        verification = None
        if error is None:
            clock, verify_started = time.perf_counter(), time.time()
            reward_config = section_for_task(
                "reward", RewardConfig, self.reward, task.reward, task_id=task.instance_id
            )
            verifier = Verifier(self.sandbox_factory, reward_config)
            try:
                verdict = None
                if exit_reason in UNFINISHED_EXITS:
                    verdict = verifier.score_unfinished(task, actions, exit_reason.value)
                if verdict is None:
                    verdict = await verifier.score_episode(task, diff, actions)
                reward, resolved, leak_flagged = (
                    verdict.reward,
                    verdict.resolved,
                    verdict.leak_flagged,
                )
                verification = verification_of(verdict, verify_started)
                if verdict.timed_out:
                    exit_reason = ExitReason.TEST_TIMEOUT
            except (SandboxError, TaskDataError, OSError) as exc:
                self.errors[f"verify:{type(exc).__name__}"] += 1
                error = f"verification failed: {type(exc).__name__}: {exc}"
                exit_reason = ExitReason.SANDBOX_ERROR
            timings["verify"] = time.perf_counter() - clock
        trajectories = session.trajectories()
        self.manager.delete(session.session_id)
        for trajectory in trajectories:
            trajectory.reward = reward
            trajectory.exit_reason = exit_reason
        return RolloutResult(
            task_id=task.instance_id,
            sample_index=sample_index,
            reward=reward,
            exit_reason=exit_reason,
            harness=harness_name,
            trajectories=trajectories,
            turns=turns,
            resolved=resolved,
            leak_flagged=leak_flagged,
            started_version=started_version,
            timings=timings,
            error=error,
            task_level=task.difficulty,
            started_at=started_at,
            calls=session.model_calls(),
            tool_calls=[tool_call_of(action) for action in actions],
            verification=verification,
            diff=diff[:DIFF_KEPT_CHARS],
        )
