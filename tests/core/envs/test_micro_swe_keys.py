"""micro-swe datasets are keyed: the generator's code and seed alone do not reproduce a task."""

import stat
from pathlib import Path

import pytest
from support.tasks import TEST_KEY

from uni_agent_core.cli.main import main
from uni_agent_core.config.tasks import MicroSweTasksConfig
from uni_agent_core.envs.micro_swe.generator import generate
from uni_agent_core.envs.micro_swe.keys import (
    KEY_FILE,
    DatasetKeyError,
    dataset_key,
    host_key,
    new_key,
    read_key,
)
from uni_agent_core.envs.sources import load_task_file, load_tasks, micro_swe_dir


def _answers(key: str) -> list[tuple[str, str, str]]:
    return [(g.task.base_commit, g.task.patch, g.task.test_patch) for g in generate(4, 0, key=key)]


def test_the_same_seed_under_another_key_gives_other_answers() -> None:
    other = new_key()
    assert _answers(TEST_KEY) == _answers(TEST_KEY)
    mine, theirs = _answers(TEST_KEY), _answers(other)
    assert all(a[1] != b[1] and a[2] != b[2] for a, b in zip(mine, theirs, strict=True))


def test_a_short_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 32"):
        generate(1, 0, key="seed-0")
    (tmp_path / "weak.key").write_text("abc\n")
    with pytest.raises(DatasetKeyError, match="at least 32"):
        read_key(tmp_path / "weak.key")


def test_the_host_key_is_made_once_and_readable_by_its_owner_only(tmp_path: Path) -> None:
    first = host_key(tmp_path)
    assert host_key(tmp_path) == first
    (path,) = (tmp_path / "keys").iterdir()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_dataset_keeps_its_key_beside_its_rows(tmp_path: Path) -> None:
    config = MicroSweTasksConfig(n=2, seed=7)
    tasks = load_tasks(config, cache=tmp_path)
    directory = micro_swe_dir(config, tmp_path)
    assert stat.S_IMODE((directory / KEY_FILE).stat().st_mode) == 0o600
    assert dataset_key(directory, tmp_path) == host_key(tmp_path)
    regenerated = generate(2, 7, config.levels, "train", key=read_key(directory / KEY_FILE))
    assert [g.task.patch for g in regenerated] == [t.patch for t in tasks]


def test_the_cli_reuses_a_dataset_key_and_takes_one_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "cache"))
    out, copy, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    base = ["data", "generate", "micro-swe", "--n", "2"]
    assert main([*base, "--out", str(out)]) == 0
    assert main([*base, "--out", str(copy), "--key-file", str(out / KEY_FILE)]) == 0
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "another-host"))
    assert main([*base, "--out", str(elsewhere)]) == 0
    rows = {path: [t.patch for t in load_task_file(path)] for path in (out, copy, elsewhere)}
    assert rows[out] == rows[copy] != rows[elsewhere]
    (tmp_path / "weak.key").write_text("short\n")
    assert (
        main([*base, "--out", str(tmp_path / "d"), "--key-file", str(tmp_path / "weak.key")]) == 2
    )
    assert "at least 32" in capsys.readouterr().err


def test_a_cached_dataset_made_without_a_key_is_made_again(tmp_path: Path) -> None:
    config = MicroSweTasksConfig(n=1, seed=3)
    load_tasks(config, cache=tmp_path)
    directory = micro_swe_dir(config, tmp_path)
    (directory / KEY_FILE).unlink()  # as an earlier, unkeyed version of the generator left it
    (directory / "tasks.jsonl").write_text("")
    (task,) = load_tasks(config, cache=tmp_path)
    assert (directory / KEY_FILE).is_file() and task.patch
