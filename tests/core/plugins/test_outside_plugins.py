"""Plug-ins from outside the package (`examples/plugins/my_plugins`, as `docs/extending.md`
writes them): a task environment, a harness, a sandbox backend and a policy loss, each named
in a recipe by import path, checked when the recipe is, and run in a real episode (gateway,
driver, the run's sandbox pool; a scripted engine) or a real training step (tiny policy)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch
from support.scripted_driver import scripted_driver

from uni_agent_core.config import load_recipe
from uni_agent_core.envs.environment import TaskEnvironment
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "plugins"
ANSWER_ENV = "my_plugins.answer_env:AnswerFileEnvironment"
PLUGGED = [
    "harness={type: plugin, path: 'my_plugins.one_shot:OneShotHarness', options: {max_tokens: 8}}",
    "sandbox={type: plugin, path: 'my_plugins.tmpdir_sandbox:build'}",
    "trainer.algorithm.policy_loss=my_plugins.reinforce_loss:clipped_reinforce",
]


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))


def _recipe(overrides: list[str]):
    return load_recipe(ROOT / "recipes" / "ci-smoke.yaml", overrides)


def _task(answer: str = "paris") -> TaskSpec:
    return TaskSpec(
        instance_id="capital-1",
        problem_statement="What is the capital of France? One word.",
        env=ANSWER_ENV,
        env_data={"answer": answer},
    )


def _episode(recipe, task: TaskSpec, reply: str) -> RolloutResult:
    async def run() -> RolloutResult:
        async with scripted_driver(recipe, {0: reply}) as (driver, _):
            return await driver.episode(task, 0, seed=0)

    return asyncio.run(run())


def test_the_recipe_names_each_plugin_and_they_check() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = _recipe(PLUGGED)
    assert recipe.harness.type == "plugin" and recipe.sandbox.type == "plugin"
    assert plugin_problems(recipe) == []


def test_an_episode_runs_the_users_environment_harness_and_sandbox() -> None:
    recipe = _recipe(PLUGGED)
    solved = _episode(recipe, _task(), "Paris")
    assert solved.error is None, solved.error
    assert solved.exit_reason is ExitReason.FINISHED and solved.reward == 1.0 and solved.resolved
    assert solved.task_env == "answer_file" and solved.harness == "oneshotharness"
    assert solved.diff.strip() == "Paris"  # the environment's record of the final state
    assert [call.name for call in solved.tool_calls] == ["write_answer"]
    assert solved.trajectories and solved.trajectories[0].trainable_tokens > 0
    assert solved.trajectories[0].reward == 1.0
    wrong = _episode(recipe, _task(), "Lyon")
    assert wrong.reward == 0.0 and not wrong.resolved and wrong.error is None


def test_a_training_step_runs_the_users_loss() -> None:
    from support.episodes import scored_trajectory

    from uni_agent_core.models import load_policy
    from uni_agent_core.rl.trainer import EmbeddedTrainer

    model, _ = load_policy("tiny")
    trainer_config = _recipe(PLUGGED).trainer.model_copy(
        update={
            "mode": "sync",
            "lr": 1e-3,
            "group_size": 2,
            "batch_size": 2,
            "max_response_tokens": 64,
            "max_context_tokens": 64,
        }
    )
    trainer = EmbeddedTrainer(copy.deepcopy(model), trainer_config, pad_token_id=0)
    before = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    results = []
    for index, (task, reward) in enumerate([("a", 1.0), ("a", 0.0), ("b", 0.0), ("b", 1.0)]):
        generator = torch.Generator().manual_seed(index)
        prompt = torch.randint(5, 4000, (6,), generator=generator).tolist()
        response = torch.randint(5, 4000, (8,), generator=generator).tolist()
        trajectory = scored_trajectory(model, f"{task}-{index}", prompt, response, [1] * 8, 0)
        results.append(
            RolloutResult(
                task_id=task,
                sample_index=index % 2,
                reward=reward,
                exit_reason=ExitReason.SUBMITTED,
                trajectories=[trajectory],
            )
        )
    outcome = trainer.train_step(results)
    after = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    assert outcome.updated and not torch.equal(before, after)
    assert outcome.metrics["actor/reinforce_ratio_mean"] == pytest.approx(1.0, abs=1e-3)


def test_a_bad_import_path_is_a_recipe_problem() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = _recipe(
        [
            "harness={type: plugin, path: 'my_plugins.nowhere:Harness', wall_clock_s: 60}",
            "trainer.algorithm.policy_loss=my_plugins.reinforce_loss:no_such_loss",
        ]
    )
    problems = dict(plugin_problems(recipe))
    assert "cannot import 'my_plugins.nowhere'" in problems["harness.path"]
    assert "has no attribute 'no_such_loss'" in problems["trainer.algorithm.policy_loss"]


def test_an_object_that_does_not_fit_is_a_recipe_problem() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = _recipe(
        [
            f"harness={{type: plugin, path: '{ANSWER_ENV}', wall_clock_s: 60}}",
            "sandbox={type: plugin, path: 'my_plugins.tmpdir_sandbox:ANSWER'}",
        ]
    )
    problems = dict(plugin_problems(recipe))
    assert "harness.path" in problems
    assert "no attribute 'ANSWER'" in problems["sandbox.path"]


def test_a_loss_registered_in_verls_registry_is_named_by_its_name() -> None:
    import importlib

    from uni_agent_core.rl.plugin_checks import plugin_problems

    unknown = _recipe(["trainer.algorithm.policy_loss=clipped_reinforce"])
    assert (
        "unknown policy_loss 'clipped_reinforce'"
        in dict(plugin_problems(unknown))["trainer.algorithm.policy_loss"]
    )
    importlib.import_module("my_plugins.verl_registration")  # what verl's workers import
    assert plugin_problems(unknown) == []


def test_the_example_recipe_names_a_task_source_and_environment() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems
    from uni_agent_core.rollout.build import build_tasks

    recipe = load_recipe(EXAMPLES / "recipe.yaml")
    assert plugin_problems(recipe) == []
    tasks = build_tasks(recipe)
    assert [task.instance_id for task in tasks] == [
        "capital-france",
        "capital-italy",
        "capital-spain",
        "capital-japan",
    ]
    assert {task.env for task in tasks} == {ANSWER_ENV}
    assert tasks[0].env_data == {"answer": "paris"}


def test_an_episode_of_the_example_recipe_runs_every_user_plugin_it_names() -> None:
    from uni_agent_core.rollout.build import build_tasks

    recipe = load_recipe(EXAMPLES / "recipe.yaml")  # tasks, env, harness, sandbox, loss: users'
    france = build_tasks(recipe)[0]
    result = _episode(recipe, france, "Paris")
    assert result.error is None, result.error
    assert (result.task_env, result.harness) == ("answer_file", "oneshotharness")
    assert result.reward == 1.0 and result.resolved


def test_a_group_is_scored_together_when_its_environment_says_so() -> None:
    recipe = _recipe(PLUGGED)
    task = _task().model_copy(update={"env": "my_plugins.answer_env:MajorityAnswerEnvironment"})

    async def group(replies: dict[int, str]) -> tuple[list[RolloutResult], list[float]]:
        fed: list[float] = []
        async with scripted_driver(recipe, replies, max_concurrency=3) as (driver, _):
            results = await driver.group(
                task, 3, run_seed=0, step=0, on_episode=lambda r: fed.append(r.reward)
            )
        return results, fed

    results, fed = asyncio.run(group({0: "Paris", 1: "paris", 2: "Lyon"}))
    assert sorted(r.reward for r in results) == pytest.approx([1 / 3, 2 / 3, 2 / 3])
    assert sorted(fed) == sorted(r.reward for r in results)  # fed on after the group's score
    for result in results:
        assert all(t.reward == result.reward for t in result.trajectories)
        own = 1.0 if result.diff.strip().lower() == "paris" else 0.0
        assert result.resolved == (own == 1.0)  # its own score still says whether it solved it


class _NoScore(TaskEnvironment):
    """An environment that forgot `score` (issue 49, finding 4)."""

    async def prepare(self, sandbox, task) -> None:
        return None

    async def observe(self, sandbox, task):
        raise NotImplementedError


def test_an_environment_missing_an_abstract_method_fails_validation_in_one_line() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = load_recipe(EXAMPLES / "recipe.yaml", [f"tasks.env={__name__}:_NoScore"])
    ((key, message),) = plugin_problems(recipe)
    assert key == "tasks.env"
    assert message == (
        f"task environment '{__name__}:_NoScore' does not implement score "
        "(uni_agent_core.envs.environment.TaskEnvironment)"
    )


def no_split_source(options: dict) -> list[dict]:
    """A user's task source without a held-out split."""
    return [{"instance_id": "only-1", "problem_statement": "?", "env_data": {"answer": "x"}}]


def test_a_user_source_without_an_eval_suite_is_refused_at_validation(tmp_path) -> None:
    """Issue 49, finding 3: no `eval:` section used to evaluate 50 unrelated micro-swe tasks."""
    text = (EXAMPLES / "recipe.yaml").read_text()
    without_eval = tmp_path / "recipe.yaml"
    without_eval.write_text(text[: text.index("# Evaluation:")] + text[text.index("tracking:") :])
    with pytest.raises(Exception, match="eval.suite") as refused:
        load_recipe(without_eval)
    assert "would score unrelated bundled tasks" in str(refused.value)
    assert load_recipe(without_eval, ["eval.enabled=false"]).eval.enabled is False


def test_the_heldout_suite_of_a_user_source_is_its_test_split() -> None:
    from uni_agent_core.eval.suites import recipe_suite, resolve_suite
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = load_recipe(EXAMPLES / "recipe.yaml")
    assert recipe_suite(recipe) == "heldout" and plugin_problems(recipe) == []
    tasks = resolve_suite("heldout", recipe)
    assert [task.instance_id for task in tasks] == [
        "capital-chile",
        "capital-poland",
        "capital-greece",
        "capital-canada",
    ]
    assert {task.env for task in tasks} == {ANSWER_ENV}


def test_a_user_source_without_a_split_cannot_be_evaluated() -> None:
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = load_recipe(EXAMPLES / "recipe.yaml", [f"tasks.path={__name__}:no_split_source"])
    ((key, message),) = plugin_problems(recipe)
    assert key == "eval.suite" and "has no held-out split to evaluate" in message


def rows_without_a_statement(options: dict) -> list[dict]:
    return [{"instance_id": "q-1", "env_data": {"answer": "x"}}]


def rows_of_an_unfinished_environment(options: dict) -> list[dict]:
    env = f"{__name__}:_NoScore"
    return [{"instance_id": "q-1", "problem_statement": "?", "env": env}]


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("rows_without_a_statement", "item 0 is not a task (1 problems: ('problem_statement',)"),
        ("rows_of_an_unfinished_environment", "does not implement score"),
    ],
)
def test_a_sources_bad_rows_fail_validation_in_one_line(source: str, says: str) -> None:
    """Issue 49, finding 4: such rows passed validation and failed at stage 1."""
    from uni_agent_core.rl.plugin_checks import plugin_problems

    recipe = load_recipe(
        EXAMPLES / "recipe.yaml",
        [f"tasks={{type: plugin, path: '{__name__}:{source}'}}", "eval.enabled=false"],
    )
    ((key, message),) = plugin_problems(recipe)
    assert key == "tasks.path" and says in message and "\n" not in message
