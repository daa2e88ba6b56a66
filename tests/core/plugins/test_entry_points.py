"""Plug-ins from installed packages, by short name (issue 49, finding 5): a distribution's
entry points (`agent_rl.<kind>` groups, what `pip install` writes from its pyproject) make its
environment, task source, harness, sandbox and loss nameable in a recipe, without PYTHONPATH
and without importing anything first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.plugins import installed, is_user_plugin, registered, resolve
from uni_agent_core.rl.plugin_checks import plugin_problems

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "plugins"
ENTRY_POINTS = """\
[agent_rl.task_envs]
capitals = my_plugins.answer_env:AnswerFileEnvironment
swe = my_plugins.answer_env:AnswerFileEnvironment

[agent_rl.task_sources]
capitals = my_plugins.capitals:load

[agent_rl.harnesses]
one_shot = my_plugins.one_shot:OneShotHarness

[agent_rl.sandboxes]
tmpdir = my_plugins.tmpdir_sandbox:build

[agent_rl.policy_losses]
clipped_reinforce = my_plugins.reinforce_loss:clipped_reinforce
"""


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """A site directory holding the example plug-ins installed as `my-plugins 0.1`: the
    package on the path and its `.dist-info` with the entry points."""
    dist = tmp_path / "my_plugins-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_an_installed_name_resolves_to_its_object(site) -> None:
    from my_plugins.answer_env import AnswerFileEnvironment

    assert resolve("task_env", "capitals") is AnswerFileEnvironment
    assert "capitals" in registered("task_env")
    assert is_user_plugin("policy_loss", "clipped_reinforce")
    assert not is_user_plugin("policy_loss", "vanilla")


def test_an_installed_package_cannot_shadow_a_built_in(site) -> None:
    from uni_agent_core.envs.swe_env import SweEnvironment

    assert resolve("task_env", "swe") is SweEnvironment


def test_a_recipe_names_every_kind_by_its_installed_name(site) -> None:
    from uni_agent_core.rollout.build import build_tasks

    recipe = load_recipe(
        EXAMPLES / "recipe.yaml",
        [
            "tasks={type: plugin, path: capitals, options: {n: 2}, env: capitals}",
            "harness={type: plugin, path: one_shot, options: {max_tokens: 8}}",
            "sandbox={type: plugin, path: tmpdir}",
            "trainer.algorithm.policy_loss=clipped_reinforce",
            "trainer.algorithm.policy_loss_options={}",
        ],
    )
    assert plugin_problems(recipe) == []
    tasks = build_tasks(recipe)
    assert [task.env for task in tasks] == ["capitals", "capitals"]


def test_an_unknown_name_says_where_installed_ones_come_from(site) -> None:
    recipe = load_recipe(EXAMPLES / "recipe.yaml", ["tasks.env=capitalz"])
    ((key, message),) = plugin_problems(recipe)
    assert key == "tasks.env"
    assert "capitals" in message and "'agent_rl.task_envs' entry points" in message


def test_plugins_list_shows_each_name_and_its_distribution(site) -> None:
    rows = {(row.kind, row.name): row for row in installed()}
    assert rows[("task_env", "capitals")].origin == "my-plugins 0.1"
    assert rows[("task_env", "swe")].origin == "built-in"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLES)])}
    shown = subprocess.run(
        [sys.executable, "-m", "uni_agent_core.cli", "plugins", "list", "--kind", "harness"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "harness (entry points: agent_rl.harnesses)" in shown
    assert "one_shot" in shown and "my_plugins.one_shot:OneShotHarness  [my-plugins 0.1]" in shown
    assert "react" in shown and "[built-in]" in shown


def test_a_split_of_an_installed_source_is_a_suite(site) -> None:
    from uni_agent_core.eval.suites import resolve_suite

    recipe = load_recipe(
        EXAMPLES / "recipe.yaml",
        ["tasks={type: plugin, path: capitals, env: capitals}", "eval.suite=capitals:test"],
    )
    assert plugin_problems(recipe) == []
    tasks = resolve_suite("capitals:test", recipe, max_tasks=2)
    assert [(task.instance_id, task.env) for task in tasks] == [
        ("capital-chile", "capitals"),
        ("capital-poland", "capitals"),
    ]
