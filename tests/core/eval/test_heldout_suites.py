"""Evaluation suites of the generated kinds of task: the shell held-out split, and `heldout`,
the held-out split of each generated source of a recipe's tasks (scores per kind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.config.problems import RecipeError
from uni_agent_core.eval.suites import recipe_suite, resolve_suite

ROOT = Path(__file__).resolve().parents[3]


def test_the_shell_suite_is_the_held_out_shell_split() -> None:
    recipe = load_recipe(ROOT / "recipes" / "shell-cpu.yaml")
    assert recipe_suite(recipe) == "shell:test"
    tasks = resolve_suite("shell:test", recipe, max_tasks=3)
    assert len(tasks) == 3 and {task.env for task in tasks} == {"shell"}
    assert all("heldout" in task.instance_id for task in tasks)
    trained = resolve_suite("shell:train", recipe, max_tasks=3)
    assert not {t.instance_id for t in tasks} & {t.instance_id for t in trained}


def test_heldout_takes_each_generated_source_of_a_mix() -> None:
    recipe = load_recipe(ROOT / "recipes" / "mixed-cpu.yaml")
    assert recipe_suite(recipe) == "heldout"
    tasks = resolve_suite("heldout", recipe)
    assert [task.env for task in tasks] == ["swe", "shell", "swe", "shell"]
    assert all("heldout" in task.instance_id for task in tasks)


def test_heldout_needs_generated_sources() -> None:
    with pytest.raises(RecipeError, match="swe_bench tasks have none"):
        load_recipe(
            ROOT / "recipes" / "ci-smoke.yaml",
            [
                "tasks={type: swe_bench, path_or_dataset: rows.jsonl}",
                "sandbox={type: docker}",
                "eval.suite=heldout",
            ],
        )
