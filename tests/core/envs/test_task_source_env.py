"""Task sources beyond the bundled ones: a file of agent-rl rows, a user's loader, and the
`env:` every source may set (the task environment of all its tasks)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from uni_agent_core.config.tasks import FileTasksConfig, MixTasksConfig, PluginTasksConfig
from uni_agent_core.envs.sources import TaskSourceError, load_tasks
from uni_agent_core.plugins import PluginError
from uni_agent_core.types import TaskSpec


def _rows(path: Path) -> Path:
    rows = [
        {"instance_id": f"q{i}", "problem_statement": f"question {i}", "env_data": {"a": i}}
        for i in range(3)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_file_source_keeps_its_rows_and_takes_its_env(tmp_path) -> None:
    path = _rows(tmp_path / "tasks.jsonl")
    plain = load_tasks(FileTasksConfig(path=str(path)))
    assert [task.env for task in plain] == ["swe", "swe", "swe"]  # a row's own default
    named = load_tasks(FileTasksConfig(path=str(path), env="my.module:Env", max_tasks=2))
    assert [(task.instance_id, task.env) for task in named] == [
        ("q0", "my.module:Env"),
        ("q1", "my.module:Env"),
    ]
    assert named[1].env_data == {"a": 1}


@pytest.fixture
def loader_module(monkeypatch):
    module = types.ModuleType("user_tasks")

    def load(options):
        return [
            TaskSpec(instance_id="t0", problem_statement="zero"),
            {"instance_id": "t1", "problem_statement": "one", "env": "shell"},
        ][: options.get("n", 2)]

    def bad(options):
        return [{"instance_id": "t2"}]

    module.load, module.bad = load, bad
    monkeypatch.setitem(sys.modules, "user_tasks", module)
    return module


def test_a_users_source_returns_tasks_or_rows(loader_module) -> None:
    tasks = load_tasks(PluginTasksConfig(path="user_tasks:load"))
    assert [(task.instance_id, task.env) for task in tasks] == [("t0", "swe"), ("t1", "shell")]
    one = load_tasks(PluginTasksConfig(path="user_tasks:load", options={"n": 1}, env="x:Env"))
    assert [(task.instance_id, task.env) for task in one] == [("t0", "x:Env")]


def test_a_users_source_that_returns_no_task_is_refused(loader_module) -> None:
    with pytest.raises(TaskSourceError, match=r"user_tasks:bad: item 0 is not a task"):
        load_tasks(PluginTasksConfig(path="user_tasks:bad"))
    with pytest.raises(PluginError, match="has no attribute 'nothing'"):
        load_tasks(PluginTasksConfig(path="user_tasks:nothing"))


def test_a_mix_sets_each_sources_env(tmp_path, loader_module) -> None:
    path = _rows(tmp_path / "tasks.jsonl")
    mixed = load_tasks(
        MixTasksConfig(
            sources=[
                FileTasksConfig(path=str(path), env="a:Env", max_tasks=2),
                PluginTasksConfig(path="user_tasks:load"),
            ]
        )
    )
    assert [(task.instance_id, task.env) for task in mixed] == [
        ("q0", "a:Env"),
        ("t0", "swe"),
        ("q1", "a:Env"),
        ("t1", "shell"),
    ]
