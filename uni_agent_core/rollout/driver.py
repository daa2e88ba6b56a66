"""The rollout driver: one episode = gateway session -> sandbox -> harness -> task environment.

For each episode the driver opens a gateway session (seeded, so a replay samples the same
tokens), builds the task's sandbox (the run's section or the task's override), lets the task's
environment (`envs/environment.py`: `swe` for repository tasks, `shell`, or a user's) prepare
it, runs the task's harness against the session's URLs, lets the environment observe the final
state before the sandbox closes, and has it score the episode afterwards (and a training
group's episodes together, where the environment `scores_groups`). A score that runs out of
time ends the episode as `test_timeout` (reward 0). The session's chains become the
episode's trajectories, each carrying the reward and exit reason; what the episode did on the
way (the gateway's engine calls, a white-box harness's tool calls, the scoring run, the
environment's record of the final state) rides along for its trace (`tracking/traces.py`).
Sandbox and task-data failures end the episode with `sandbox_error`, and a session the gateway
could not open (its session table full) with `gateway_error` (reward 0, masked from the loss);
they are counted, never raised. Only the driver opens, reads and deletes sessions, through the
manager (the gateway's control plane); the harness gets the session's key, which opens its model
endpoints and nothing else. Episodes run at most `max_concurrency` at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable

from uni_agent_core.config.harness import HarnessConfig, LeafHarnessConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.reward import RewardConfig
from uni_agent_core.envs.environment import (
    EnvironmentContext,
    EpisodeFacts,
    GroupMember,
    Observation,
    Outcome,
    TaskEnvironment,
    TaskEnvironments,
)
from uni_agent_core.envs.reward_rules import score_under_rules
from uni_agent_core.envs.verifier import SandboxFactory
from uni_agent_core.envs.workspace import TaskDataError
from uni_agent_core.gateway.manager import SessionLimitError, SessionManager, SessionNotFoundError
from uni_agent_core.gateway.session import TOOL_ARGUMENTS_SHOWN, GatewaySession
from uni_agent_core.harness.agent_clis import gateway_reach_problems, require_agent_clis
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.factory import HarnessAssignment, build_harness
from uni_agent_core.rollout.build import build_sandbox_factory
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.gateway_link import descriptor_budget_problem
from uni_agent_core.sandbox.git_hygiene import GitHygieneError
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec, ToolCall

logger = logging.getLogger(__name__)


RECORD_KEPT_CHARS = 20_000
"""Characters of the environment's record of an episode (a diff) its result keeps."""


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
        self.environments = TaskEnvironments(EnvironmentContext(sandbox_factory, reward))
        """Each task's environment (`TaskSpec.env`), built once per run."""
        self.max_total_tokens = max_total_tokens
        self.limit = asyncio.Semaphore(max_concurrency)
        budget = descriptor_budget_problem(max_concurrency)
        if budget is not None:
            logger.warning("%s", budget)
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
        environment = self.environments.for_task(task)
        together = environment.scores_groups  # then episodes are fed on once all are rescored
        results = list(
            await asyncio.gather(
                *(
                    self.episode(
                        task,
                        i,
                        seed=episode_seed(run_seed, step, task.instance_id, i),
                        group_id=group_id,
                        on_episode=None if together else on_episode,
                    )
                    for i in range(size)
                )
            )
        )
        if together:
            results = _rescored(environment, task, results)
            if on_episode is not None:
                for result in results:
                    on_episode(result)
        return results

    async def _episode(self, task: TaskSpec, sample_index: int, seed: int) -> RolloutResult:
        started_version, started_at = self._policy_version(), time.time()
        harness_name, harness_config = self.assignment.choose(task)
        environment = self.environments.for_task(task)
        try:
            session, key = self.manager.create(
                sampling={"seed": seed},
                metadata={"task_id": task.instance_id, "sample_index": sample_index},
                max_total_tokens=self.max_total_tokens,
            )
        except SessionLimitError as exc:
            # Deliberate boundary: a full session table ends this episode, not the run.
            self.errors[type(exc).__name__] += 1
            logger.warning("episode %s/%d: %s", task.instance_id, sample_index, exc)
            return RolloutResult(
                task_id=task.instance_id,
                sample_index=sample_index,
                reward=0.0,
                exit_reason=ExitReason.GATEWAY_ERROR,
                harness=harness_name,
                task_env=environment.name or task.env,
                trajectories=[],
                started_version=started_version,
                error=f"{type(exc).__name__}: {exc}",
                task_level=task.difficulty,
                started_at=started_at,
            )
        try:
            return await self._in_session(
                task,
                sample_index,
                session,
                key,
                harness=(harness_name, harness_config),
                environment=environment,
                started=(started_version, started_at),
            )
        finally:  # whatever ended the episode (cancellation included), its session goes
            with contextlib.suppress(SessionNotFoundError):  # expired while the episode ran
                self.manager.delete(session.session_id)

    async def _in_session(
        self,
        task: TaskSpec,
        sample_index: int,
        session: GatewaySession,
        key: str,
        *,
        harness: tuple[str, LeafHarnessConfig],
        environment: TaskEnvironment,
        started: tuple[int, float],
    ) -> RolloutResult:
        """The episode in its open session: sandbox, harness, environment, score. `harness`:
        the name and section `_episode` chose; `started`: the policy version and the time it
        started at."""
        harness_name, harness_config = harness
        started_version, started_at = started
        root = f"{self.gateway_url}/sessions/{session.session_id}"
        endpoint = Endpoint(
            openai_base_url=root + "/v1",
            anthropic_base_url=root,
            api_key=key,
            control_key=self.manager.control_key,
        )
        timings: dict[str, float] = {}
        exit_reason, turns, error = ExitReason.SANDBOX_ERROR, 0, None
        observation, actions = Observation(), list[ToolCall]()
        try:
            clock = time.perf_counter()
            async with self.sandbox_factory(task) as sandbox:
                await environment.prepare(sandbox, task)
                timings["sandbox"] = time.perf_counter() - clock
                clock = time.perf_counter()
                result = await build_harness(harness_config).run(task, sandbox, endpoint)
                timings["agent"] = time.perf_counter() - clock
                exit_reason, turns, actions = result.exit_reason, result.steps, result.actions
                observation = await environment.observe(sandbox, task)
        except (SandboxError, TaskDataError, GitHygieneError, OSError) as exc:
            # Deliberate boundary: an infrastructure failure ends this episode, not the run.
            self.errors[type(exc).__name__] += 1
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("episode %s/%d: %s", task.instance_id, sample_index, error)
            exit_reason = ExitReason.SANDBOX_ERROR
        outcome = Outcome(reward=0.0, resolved=False)
        if error is None:
            clock = time.perf_counter()
            try:
                outcome = await score_under_rules(
                    environment, EpisodeFacts(task, exit_reason, actions), observation
                )
                if outcome.timed_out:
                    exit_reason = ExitReason.TEST_TIMEOUT
            except (SandboxError, TaskDataError, OSError) as exc:
                self.errors[f"verify:{type(exc).__name__}"] += 1
                error = f"verification failed: {type(exc).__name__}: {exc}"
                exit_reason = ExitReason.SANDBOX_ERROR
            timings["verify"] = time.perf_counter() - clock
        trajectories = session.trajectories()
        for trajectory in trajectories:
            trajectory.reward = outcome.reward
            trajectory.exit_reason = exit_reason
        return RolloutResult(
            task_id=task.instance_id,
            sample_index=sample_index,
            reward=outcome.reward,
            exit_reason=exit_reason,
            harness=harness_name,
            task_env=environment.name or task.env,
            trajectories=trajectories,
            turns=turns,
            resolved=outcome.resolved,
            leak_flagged=outcome.leak_flagged,
            started_version=started_version,
            timings=timings,
            error=error,
            task_level=task.difficulty,
            started_at=started_at,
            calls=session.model_calls(),
            tool_calls=[_clipped(action) for action in actions],
            verification=outcome.verification,
            diff=observation.record[:RECORD_KEPT_CHARS],
        )


def _rescored(
    environment: TaskEnvironment, task: TaskSpec, results: list[RolloutResult]
) -> list[RolloutResult]:
    """A group's results with the rewards its environment's `score_group` decides (episodes
    that failed keep theirs).

    Raises:
        TypeError: `score_group` returned another number of rewards than it was given members.
    """
    scored = [result for result in results if result.error is None]
    members = [
        GroupMember(
            EpisodeFacts(task, result.exit_reason, result.tool_calls),
            Observation(record=result.diff),
            result.reward,
        )
        for result in scored
    ]
    rewards = environment.score_group(members) if members else []
    if len(rewards) != len(members):
        raise TypeError(
            f"{type(environment).__name__}.score_group returned {len(rewards)} rewards for "
            f"{len(members)} episodes"
        )
    decided = {id(result): float(reward) for result, reward in zip(scored, rewards, strict=True)}
    rescored = []
    for result in results:
        if id(result) in decided:
            result = result.model_copy(update={"reward": decided[id(result)]})
            for trajectory in result.trajectories:
                trajectory.reward = result.reward
        rescored.append(result)
    return rescored


def _clipped(action: ToolCall) -> ToolCall:
    """A tool call as the episode's trace keeps it: arguments clipped."""
    return action.model_copy(update={"arguments": action.arguments[:TOOL_ARGUMENTS_SHOWN]})
