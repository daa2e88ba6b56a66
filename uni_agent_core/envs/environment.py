"""The task-environment contract: what a kind of task does around the agent's run.

The rollout driver owns an episode's session, harness, timings and trace; the task's
environment owns everything that depends on what the task *is*:

- `prepare(sandbox, task)`: put the task's starting state in the agent's fresh sandbox (a SWE
  task's repository at its base commit, history scrubbed; a shell task's files).
- `observe(sandbox, task)`: once the harness has ended and before that sandbox closes, read
  the final state the score depends on (a SWE task's working-tree diff; a shell task's check
  report). `Observation.record` is what the episode's trace shows.
- `score(episode, observation)`: the episode's reward, after the agent's sandbox is closed (a
  SWE task runs its hidden tests on the diff in a fresh sandbox). `episode` says how the
  harness ended and which tools it called.
- `score_group(members)`: optionally (`scores_groups = True`), the rewards of a training group's
  episodes decided together once all of them are scored (a judge that ranks the group's
  answers). A single episode (an evaluation sample, Best-of-N) keeps its own score.

A task names its environment (`TaskSpec.env`: a registered name such as `swe` or `shell`, or a
user's `module:attribute`, see `uni_agent_core.plugins`); `EnvironmentContext` gives an
environment what the run provides: fresh sandboxes and the reward section.

Raise `SandboxError`, `TaskDataError` or `OSError` from any step for a failure of the
infrastructure or of the task's data: the driver ends that episode as `sandbox_error` (reward 0,
masked from the loss) and the run goes on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uni_agent_core.config.overrides import section_for_task
from uni_agent_core.config.reward import RewardConfig
from uni_agent_core.envs.verifier import SandboxFactory
from uni_agent_core.plugins import resolve
from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall, Verification


@dataclass(frozen=True)
class EnvironmentContext:
    """What a run gives every task environment it builds."""

    sandbox_factory: SandboxFactory
    """Fresh sandboxes of a task (`async with sandbox_factory(task) as sandbox:`), for a score
    that must not run where the agent ran."""
    reward: RewardConfig
    """The run's reward section (a task's own `reward` override applies on top)."""


@dataclass(frozen=True)
class EpisodeFacts:
    """How the harness ended an episode: what an environment's score may depend on besides
    the final state."""

    task: TaskSpec
    exit_reason: ExitReason
    tool_calls: Sequence[ToolCall] = ()
    """A white-box harness's tool calls, arguments in full (black-box harnesses report none)."""


@dataclass(frozen=True)
class Observation:
    """The final state of an episode's sandbox, as far as its score needs it."""

    record: str = ""
    """What the episode's trace and evaluation rows show of it (a diff, a check report)."""
    data: Any = None
    """Anything else the environment's `score` reads (the environment's own business)."""


@dataclass(frozen=True)
class GroupMember:
    """One scored episode of a group, as `score_group` sees it."""

    episode: EpisodeFacts
    observation: Observation
    """The final state as observed (its `record` clipped to what the result keeps)."""
    reward: float
    """The episode's own score."""


@dataclass(frozen=True)
class Outcome:
    """An episode's score."""

    reward: float
    resolved: bool
    """The task counts as solved (pass@k, evaluation)."""
    leak_flagged: bool = False
    """The episode tried to reach the answer key (`reward.leak_audit`)."""
    timed_out: bool = False
    """The scoring itself ran out of time (the episode ends `test_timeout`, reward 0)."""
    verification: Verification | None = None
    """What the scoring ran, for the trace's verifier span."""


class TaskEnvironment(ABC):
    """One kind of task: how its episodes start and how they are scored. Subclass it, give
    the constructor one `EnvironmentContext` argument, and name the class in a recipe or a
    task row (`docs/extending.md`)."""

    name: str = ""
    """The kind's name in metrics (`train/task_env/<name>/...`); defaults to the task's `env`."""
    scores_groups: bool = False
    """True where a group's rewards are decided together (`score_group`)."""

    def __init__(self, context: EnvironmentContext) -> None:
        self.context = context

    def reward_for(self, task: TaskSpec) -> RewardConfig:
        """The reward section `task` is scored under: the run's, its own `reward` override
        applied."""
        return section_for_task(
            "reward", RewardConfig, self.context.reward, task.reward, task_id=task.instance_id
        )

    @abstractmethod
    async def prepare(self, sandbox: Sandbox, task: TaskSpec) -> None:
        """Put `task`'s starting state in the agent's (started) sandbox."""

    @abstractmethod
    async def observe(self, sandbox: Sandbox, task: TaskSpec) -> Observation:
        """Read the final state of the agent's sandbox once its harness has ended."""

    @abstractmethod
    async def score(self, episode: EpisodeFacts, observation: Observation) -> Outcome:
        """The episode's reward, after the agent's sandbox is closed."""

    def score_group(self, members: Sequence[GroupMember]) -> list[float]:
        """The rewards of one training group's scored episodes, in order, decided together
        (called only when `scores_groups`; episodes that failed keep reward 0 and are not
        members). By default each keeps its own."""
        return [member.reward for member in members]


class TaskEnvironments:
    """The environments of a run's tasks: one instance per environment name, built on first
    use from the plug-in registry."""

    def __init__(self, context: EnvironmentContext) -> None:
        self.context = context
        self._built: dict[str, TaskEnvironment] = {}

    def for_task(self, task: TaskSpec) -> TaskEnvironment:
        """The environment `task.env` names.

        Raises:
            PluginError: the name is neither registered nor an importable path.
            TypeError: it names something that is not a `TaskEnvironment` subclass.
        """
        built = self._built.get(task.env)
        if built is None:
            built = self._built[task.env] = environment_class(task.env)(self.context)
        return built


def environment_class(name: str) -> type[TaskEnvironment]:
    """The `TaskEnvironment` subclass a task's `env` names (`uni_agent_core.plugins`).

    Raises:
        PluginError: the name is neither registered nor an importable path.
        TypeError: the object is not a `TaskEnvironment` subclass, or leaves one of its
            abstract methods unimplemented (it could not be instantiated).
    """
    found = resolve("task_env", name)
    if not (isinstance(found, type) and issubclass(found, TaskEnvironment)):
        raise TypeError(
            f"task environment {name!r} is a {type(found).__name__}, not a subclass of "
            "uni_agent_core.envs.environment.TaskEnvironment"
        )
    missing = sorted(getattr(found, "__abstractmethods__", ()))
    if missing:
        raise TypeError(
            f"task environment {name!r} does not implement {', '.join(missing)} "
            "(uni_agent_core.envs.environment.TaskEnvironment)"
        )
    return found
