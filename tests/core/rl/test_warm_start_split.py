"""`warm_start.rl_tasks`: RL on all training tasks, or on those the warm start did not fit."""

import shutil
from pathlib import Path

import pytest

from uni_agent_core.config import RecipeError, load_recipe
from uni_agent_core.rl.warm_start import fitted_tasks, rl_tasks, warm_start_key
from uni_agent_core.types import TaskSpec

ROOT = Path(__file__).resolve().parents[3]


def _recipe(*overrides: str):
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    return load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml",
        [f"sandbox.isolation={isolation}", "warm_start.enabled=true", *overrides],
    )


def _tasks(count: int) -> list[TaskSpec]:
    return [TaskSpec(instance_id=f"t{i}", problem_statement="fix it") for i in range(count)]


def _ids(tasks: list[TaskSpec]) -> list[str]:
    return [task.instance_id for task in tasks]


def test_by_default_rl_takes_every_task_the_warm_start_may_have_fitted() -> None:
    recipe = _recipe("warm_start.tasks=2")
    assert _ids(fitted_tasks(recipe, _tasks(5))) == ["t0", "t1"]
    assert _ids(rl_tasks(recipe, _tasks(5))) == ["t0", "t1", "t2", "t3", "t4"]


def test_rest_gives_rl_only_the_tasks_after_the_fitted_ones() -> None:
    recipe = _recipe("tasks.n=5", "warm_start.tasks=2", "warm_start.rl_tasks=rest")
    fitted, rest = fitted_tasks(recipe, _tasks(5)), rl_tasks(recipe, _tasks(5))
    assert _ids(fitted) == ["t0", "t1"] and _ids(rest) == ["t2", "t3", "t4"]


def test_without_a_warm_start_rest_changes_nothing() -> None:
    recipe = _recipe("tasks.n=5", "warm_start.tasks=2", "warm_start.rl_tasks=rest")
    recipe.warm_start.enabled = False
    assert len(rl_tasks(recipe, _tasks(5))) == 5


def test_rest_that_leaves_no_task_is_a_clear_error() -> None:
    recipe = _recipe("tasks.n=5", "warm_start.tasks=4", "warm_start.rl_tasks=rest")
    with pytest.raises(ValueError, match="leaves RL no task"):
        rl_tasks(recipe, _tasks(3))  # data validation dropped two of the five


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["warm_start.rl_tasks=rest"], "warm_start.tasks must be set"),
        (["tasks.n=4", "warm_start.tasks=4", "warm_start.rl_tasks=rest"], "leaves RL no task"),
    ],
)
def test_the_recipe_refuses_a_split_without_rl_tasks(overrides, message) -> None:
    with pytest.raises(RecipeError, match=message):
        _recipe(*overrides)


def test_the_split_does_not_change_the_warm_starts_reuse_key() -> None:
    """It decides what RL takes, not the warm-started weights: a finished stage is reused."""
    all_tasks = _recipe("tasks.n=5", "warm_start.tasks=2")
    rest = _recipe("tasks.n=5", "warm_start.tasks=2", "warm_start.rl_tasks=rest")
    tasks = fitted_tasks(all_tasks, _tasks(5))
    assert warm_start_key(all_tasks, tasks) == warm_start_key(rest, tasks)
