"""The shell task generator: deterministic per (key, seed, split), keyed, splits disjoint, and
every template solvable by its reference solution and unsolved by the starting state (each run
with real bash in a scratch directory)."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
from support.tasks import TEST_KEY

from uni_agent_core.envs.micro_swe.keys import KEY_FILE, new_key
from uni_agent_core.envs.shell.checks import parse_report
from uni_agent_core.envs.shell.generator import (
    PROMPT,
    GeneratedShellTask,
    generate,
    plan,
    write_dataset,
)
from uni_agent_core.envs.shell.templates import TEMPLATES, vocabulary
from uni_agent_core.types import TaskSpec

ALL_TEMPLATES = [template.name for template in TEMPLATES]


def _bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _check(task: TaskSpec, workdir: Path, *, solve: str | None = None):
    setup = _bash(task.env_data["setup"], workdir)
    assert setup.returncode == 0, setup.stderr
    if solve is not None:
        solved = _bash(solve, workdir)
        assert solved.returncode == 0, solved.stderr
    run = _bash(task.env_data["check"], workdir)
    return parse_report(run.stdout, run.returncode, expected=task.env_data["checks"])


def test_eight_templates_over_two_levels_and_a_plan_that_takes_them_in_turn() -> None:
    assert len(ALL_TEMPLATES) == 8
    assert {t.level for t in TEMPLATES} == {"L0", "L1"}
    assert sorted(plan(8, ["L0", "L1"])) == sorted(ALL_TEMPLATES)
    assert plan(3, ["L1"]) == ["rename_ext", "sort_uniq", "tar_dir"]


def test_a_task_row_is_a_shell_task_with_hidden_scripts_and_no_reference() -> None:
    generated = generate(2, 7, key=TEST_KEY)
    task = generated[1].task
    assert task.instance_id == "shell__rename_ext-train-7-0001"
    assert (task.env, task.difficulty, task.prompt) == ("shell", "L1", PROMPT)
    assert task.source == {"type": "shell", "seed": 7, "index": 1, "split": "train"}
    assert set(task.env_data) == {"setup", "check", "checks"}
    assert task.env_data["checks"] and all(
        n in task.env_data["check"] for n in task.env_data["checks"]
    )
    assert generated[1].reference not in json.dumps(task.model_dump())


def test_same_key_and_seed_give_the_same_tasks() -> None:
    first = [g.task for g in generate(8, 3, key=TEST_KEY)]
    again = [g.task for g in generate(8, 3, key=TEST_KEY)]
    assert first == again
    other_seed = [g.task for g in generate(8, 4, key=TEST_KEY)]
    assert all(a.env_data != b.env_data for a, b in zip(first, other_seed, strict=True))


def test_another_key_gives_other_checks_for_the_same_seed() -> None:
    mine = generate(8, 0, key=TEST_KEY)
    theirs = generate(8, 0, key=new_key())
    for a, b in zip(mine, theirs, strict=True):
        assert a.task.instance_id == b.task.instance_id
        assert a.task.env_data["check"] != b.task.env_data["check"]


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        generate(1, 0, key="seed-0")


def test_train_and_heldout_share_no_words_and_no_task() -> None:
    train_words, heldout_words = set(vocabulary("train")), set(vocabulary("heldout"))
    assert not train_words & heldout_words and len(heldout_words) >= 20
    train = generate(40, 0, split="train", key=TEST_KEY)
    heldout = generate(40, 0, split="heldout", key=TEST_KEY)
    assert not {g.task.problem_statement for g in train} & {
        g.task.problem_statement for g in heldout
    }
    for generated in heldout:
        words = set(re.findall(r"[a-z]+", generated.task.problem_statement.lower()))
        assert not words & train_words, generated.task.problem_statement


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_is_solved_by_its_reference_and_not_by_the_start(
    split: str, tmp_path: Path
) -> None:
    for index, generated in enumerate(generate(16, 11, split=split, key=TEST_KEY)):
        untouched = _check(generated.task, _fresh(tmp_path, f"{index}-start"))
        assert untouched.passed == [] and not untouched.resolved, generated.task.instance_id
        assert untouched.exit_code == 1 and len(untouched.failed) == len(
            generated.task.env_data["checks"]
        )
        solved = _check(
            generated.task, _fresh(tmp_path, f"{index}-solved"), solve=generated.reference
        )
        assert solved.resolved, (generated.task.instance_id, solved.failed)


def _fresh(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path


def test_a_wrong_answer_fails_the_check_that_reads_it(tmp_path: Path) -> None:
    task = next(
        g.task for g in generate(3, 0, levels=["L0"], key=TEST_KEY) if "count" in g.task.instance_id
    )
    report = _check(task, tmp_path, solve="echo 99999 > count.txt")
    assert report.passed == ["exists"] and list(report.failed) == ["count"]
    assert "99999" in report.failed["count"]


def test_write_dataset_stores_rows_and_the_key_owner_only(tmp_path: Path) -> None:
    generated: list[GeneratedShellTask] = generate(4, 0, key=TEST_KEY)
    path = write_dataset(generated, tmp_path / "set", key=TEST_KEY)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [TaskSpec.model_validate(row) for row in rows] == [g.task for g in generated]
    key_file = tmp_path / "set" / KEY_FILE
    assert key_file.read_text().strip() == TEST_KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert all(g.reference not in path.read_text() for g in generated)
