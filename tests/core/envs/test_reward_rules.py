"""The run's `reward.unfinished` and `reward.leak_audit` rules apply to every environment's
outcome, a user's included, without the environment calling a helper (issue 49, finding 2)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.tasks import micro_swe_tasks, sandbox_factory

from uni_agent_core.config.reward import ResolvedRewardConfig
from uni_agent_core.envs.environment import EnvironmentContext, EpisodeFacts, Observation
from uni_agent_core.envs.reward_rules import score_under_rules
from uni_agent_core.envs.swe_env import SweEnvironment
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "plugins"
MINING = ToolCall(name="bash", arguments=json.dumps({"command": "git log --all --oneline"}))
HONEST = ToolCall(name="bash", arguments=json.dumps({"command": "cat README.txt"}))


@pytest.fixture
def answer_environment(monkeypatch):
    """The example plug-in environment: its `score` knows nothing of the run's rules."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from my_plugins.answer_env import AnswerFileEnvironment

    def build(**rules):
        context = EnvironmentContext(sandbox_factory(), ResolvedRewardConfig(**rules))
        return AnswerFileEnvironment(context)

    return build


def _capital() -> TaskSpec:
    return TaskSpec(
        instance_id="capital-1",
        problem_statement="What is the capital of France? One word.",
        env="my_plugins.answer_env:AnswerFileEnvironment",
        env_data={"answer": "paris"},
    )


def _scored(environment, exit_reason=ExitReason.SUBMITTED, calls=(), answer="Paris"):
    facts = EpisodeFacts(_capital(), exit_reason, list(calls))
    return asyncio.run(score_under_rules(environment, facts, Observation(record=answer)))


def test_a_plugin_environments_leak_is_flagged_and_zeroed_as_the_recipe_says(
    answer_environment,
) -> None:
    flagged = _scored(answer_environment(leak_audit="flag"), calls=[MINING])
    assert (flagged.reward, flagged.leak_flagged, flagged.resolved) == (1.0, True, True)
    zeroed = _scored(answer_environment(leak_audit="zero"), calls=[MINING])
    assert (zeroed.reward, zeroed.leak_flagged) == (0.0, True)
    clean = _scored(answer_environment(leak_audit="zero"), calls=[HONEST])
    assert (clean.reward, clean.leak_flagged) == (1.0, False)


def test_a_plugin_environments_unfinished_episode_follows_reward_unfinished(
    answer_environment,
) -> None:
    graded = _scored(answer_environment(), exit_reason=ExitReason.MAX_TURNS)
    assert graded.reward == 1.0
    zeroed = _scored(answer_environment(unfinished="zero"), exit_reason=ExitReason.MAX_TURNS)
    assert (zeroed.reward, zeroed.resolved) == (0.0, False)
    assert zeroed.verification is not None and "not graded" in zeroed.verification.error
    penalised = _scored(
        answer_environment(unfinished="penalty", unfinished_penalty=0.5),
        exit_reason=ExitReason.TIMEOUT,
        calls=[MINING],
    )
    assert (penalised.reward, penalised.leak_flagged) == (-0.5, True)
    finished = _scored(answer_environment(unfinished="zero"))
    assert finished.reward == 1.0


def test_the_swe_environment_gets_the_same_rules(tmp_path) -> None:
    task = micro_swe_tasks(tmp_path, n=1, seed=11)[0]

    def score(mode: str, calls: list[ToolCall]):
        context = EnvironmentContext(sandbox_factory(), ResolvedRewardConfig(leak_audit=mode))
        facts = EpisodeFacts(task, ExitReason.SUBMITTED, calls)
        return asyncio.run(
            score_under_rules(SweEnvironment(context), facts, Observation(record=task.patch))
        )

    zeroed = score("zero", [MINING])
    assert (zeroed.reward, zeroed.leak_flagged, zeroed.resolved) == (0.0, True, True)
    flagged = score("flag", [MINING])
    assert (flagged.reward, flagged.leak_flagged) == (1.0, True)
    clean = score("zero", [HONEST])
    assert (clean.reward, clean.leak_flagged) == (1.0, False)
