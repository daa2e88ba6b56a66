"""The run's reward rules, applied by the framework to every task environment's outcome.

`reward.unfinished` (how an episode the harness stopped before it finished is scored) and
`reward.leak_audit` (what an attempt to reach the answer key costs) belong to the run, not to
an environment: the rollout driver scores every episode through `score_under_rules`, so a
user's environment keeps them without calling a helper, and a built-in one does not apply them
a second time.

- An unfinished episode (`types.UNFINISHED_EXITS`) whose recipe says `unfinished: zero` or
  `penalty` gets that reward without being scored; with `grade` the environment scores it.
- The episode's shell commands are audited (`leak_audit.py`) whatever ended it; a flagged
  episode is marked, and its reward is zeroed under `leak_audit: zero`.
"""

from __future__ import annotations

import dataclasses
import time

from uni_agent_core.envs.environment import EpisodeFacts, Observation, Outcome, TaskEnvironment
from uni_agent_core.envs.leak_audit import (
    apply_leak_policy,
    audit_commands,
    commands_from_tool_calls,
)
from uni_agent_core.types import UNFINISHED_EXITS, Verification


async def score_under_rules(
    environment: TaskEnvironment, episode: EpisodeFacts, observation: Observation
) -> Outcome:
    """`environment`'s outcome of `episode`, under the run's `unfinished` and `leak_audit`
    rules (the task's own `reward` section where it has one)."""
    reward = environment.reward_for(episode.task)
    leak = audit_commands(commands_from_tool_calls(episode.tool_calls))
    fixed = reward.unfinished_reward() if episode.exit_reason in UNFINISHED_EXITS else None
    if fixed is not None:
        _, flagged = apply_leak_policy(0.0, leak, reward.leak_audit)
        verification = Verification(
            error=reward.not_graded(episode.exit_reason.value), started_at=time.time()
        )
        return Outcome(fixed, False, leak_flagged=flagged, verification=verification)
    outcome = await environment.score(episode, observation)
    value, flagged = apply_leak_policy(outcome.reward, leak, reward.leak_audit)
    return dataclasses.replace(outcome, reward=value, leak_flagged=flagged or outcome.leak_flagged)
