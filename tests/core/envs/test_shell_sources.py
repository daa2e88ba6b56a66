"""`tasks: shell` and `tasks: mix` sections: shell datasets generated into the cache (keyed,
hidden from sandboxes), mixes interleaved with unique instance ids, and the recipe rules that
see through a mix."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from support.tasks import TEST_KEY

from uni_agent_core.config import RecipeError, parse_recipe
from uni_agent_core.config.tasks import (
    MicroSweTasksConfig,
    MixTasksConfig,
    ShellTasksConfig,
    task_types,
)
from uni_agent_core.envs.micro_swe.keys import KEY_FILE, write_key
from uni_agent_core.envs.sources import TaskSourceError, interleave, load_tasks, shell_dir


def test_shell_tasks_are_generated_into_the_cache_keyed_and_hidden(tmp_path: Path) -> None:
    config = ShellTasksConfig(n=4, seed=2, levels=["L1"])
    tasks = load_tasks(config, cache=tmp_path)
    directory = shell_dir(config, tmp_path)
    assert directory == tmp_path / "tasks" / "shell" / "train-s2-n4-L1"
    assert stat.S_IMODE((directory / KEY_FILE).stat().st_mode) == 0o600
    assert [t.instance_id for t in tasks] == [
        "shell__rename_ext-train-2-0000",
        "shell__sort_uniq-train-2-0001",
        "shell__tar_dir-train-2-0002",
        "shell__find_token-train-2-0003",
    ]
    assert all(t.env == "shell" and t.difficulty == "L1" for t in tasks)
    assert all(t.source["hide"] == [str(directory.resolve())] for t in tasks)
    assert load_tasks(config, cache=tmp_path) == tasks


def test_a_dataset_keeps_its_own_key_and_another_key_gives_other_checks(tmp_path: Path) -> None:
    config = ShellTasksConfig(n=2)
    write_key(shell_dir(config, tmp_path / "a") / KEY_FILE, TEST_KEY)
    mine = load_tasks(config, cache=tmp_path / "a")
    theirs = load_tasks(config, cache=tmp_path / "b")
    assert (shell_dir(config, tmp_path / "a") / KEY_FILE).read_text().strip() == TEST_KEY
    assert [t.instance_id for t in mine] == [t.instance_id for t in theirs]
    assert all(
        a.env_data["check"] != b.env_data["check"] for a, b in zip(mine, theirs, strict=True)
    )


def test_a_mix_interleaves_its_sources_in_order(tmp_path: Path) -> None:
    config = MixTasksConfig(
        sources=[MicroSweTasksConfig(n=2, levels=["L0"]), ShellTasksConfig(n=3, levels=["L0"])]
    )
    tasks = load_tasks(config, cache=tmp_path)
    assert [t.env for t in tasks] == ["swe", "shell", "swe", "shell", "shell"]
    assert [t.instance_id.split("__")[0] for t in tasks] == [
        "micro-swe",
        "shell",
        "micro-swe",
        "shell",
        "shell",
    ]
    assert task_types(config) == {"micro_swe", "shell"}


def test_a_mix_that_repeats_an_instance_id_is_refused(tmp_path: Path) -> None:
    tasks = load_tasks(ShellTasksConfig(n=2), cache=tmp_path)
    with pytest.raises(TaskSourceError, match="instance ids must be unique") as caught:
        interleave([tasks, tasks[1:]])
    assert "tasks.sources.0 and tasks.sources.1" in str(caught.value)


def _problems(tasks: dict, **sections: dict) -> dict[str, str]:
    with pytest.raises(RecipeError) as caught:
        parse_recipe({"name": "mix-rules", "tasks": tasks, **sections})
    return {problem.key: problem.message for problem in caught.value.problems}


def test_mix_sections_are_validated() -> None:
    same_stream = _problems(
        {"type": "mix", "sources": [{"type": "shell", "n": 2}, {"type": "shell", "n": 4}]}
    )
    assert "same stream" in " ".join(same_stream.values())
    assert _problems({"type": "mix", "sources": [{"type": "shell"}]})
    nested = {"type": "mix", "sources": [{"type": "shell"}, {"type": "micro_swe"}]}
    assert _problems({"type": "mix", "sources": [nested, {"type": "shell", "seed": 1}]})
    assert _problems({"type": "shell", "levels": ["L2"]})
    fine = parse_recipe(
        {
            "name": "mix-ok",
            "tasks": {"type": "mix", "sources": [{"type": "shell"}, nested["sources"][1]]},
        }
    )
    assert isinstance(fine.tasks, MixTasksConfig)


def test_an_image_source_in_a_mix_needs_a_container_sandbox() -> None:
    image = {"type": "swe_rebench", "path_or_dataset": "nebius/SWE-rebench"}
    problems = _problems({"type": "mix", "sources": [{"type": "shell"}, image]})
    assert "swe_rebench tasks ship as container images" in problems["sandbox.type"]
