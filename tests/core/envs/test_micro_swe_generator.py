"""The micro-swe generator: seeded, level-balanced, disjoint splits, SWE-bench-form rows."""

import json
import subprocess

from support.tasks import TEST_KEY

from uni_agent_core.envs.micro_swe.catalog import TEMPLATES
from uni_agent_core.envs.micro_swe.generator import (
    COMMIT_SCRIPT,
    build_task,
    generate,
    signature_split,
    write_dataset,
)
from uni_agent_core.envs.patches import patched_files
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.types import TaskSpec


def test_same_seed_same_tasks_and_different_seed_different_tasks() -> None:
    first = [g.task for g in generate(6, seed=3, key=TEST_KEY)]
    again = [g.task for g in generate(6, seed=3, key=TEST_KEY)]
    other = [g.task for g in generate(6, seed=4, key=TEST_KEY)]
    assert first == again
    assert [t.patch for t in first] != [t.patch for t in other]


def test_levels_are_taken_in_turn() -> None:
    tasks = [g.task for g in generate(8, seed=0, key=TEST_KEY)]
    assert [t.difficulty for t in tasks] == ["L0", "L1", "L2", "L3"] * 2
    only = [g.task.difficulty for g in generate(3, seed=0, levels=["L2"], key=TEST_KEY)]
    assert only == ["L2", "L2", "L2"]


def test_rows_follow_the_swe_bench_schema() -> None:
    task = generate(1, seed=0, key=TEST_KEY)[0].task
    row = json.loads(json.dumps(task.model_dump(mode="json")))
    for field in (
        "instance_id",
        "repo",
        "base_commit",
        "problem_statement",
        "patch",
        "test_patch",
        "FAIL_TO_PASS",
        "PASS_TO_PASS",
        "version",
    ):
        assert row[field], field
    assert patched_files(task.test_patch) and all(
        path.startswith("tests/") for path in patched_files(task.test_patch)
    )
    assert not any(path.startswith("tests/") for path in patched_files(task.patch))
    assert set(task.FAIL_TO_PASS).isdisjoint(task.PASS_TO_PASS)


def test_statements_by_level() -> None:
    l0, l1, l2, l3 = (g.task for g in generate(4, seed=5, key=TEST_KEY))
    bug_file = patched_files(l0.patch)[0]
    assert f"`{bug_file}`, line " in l0.problem_statement
    function = l1.FAIL_TO_PASS[0].split("_issue_")[0].removeprefix("test_")
    assert f"`{function}" in l1.problem_statement
    assert ".py" not in l2.problem_statement
    assert len(patched_files(l3.patch)) == 2 and "2 problems" in l3.problem_statement


def test_splits_share_no_bug() -> None:
    train = [g.task for g in generate(60, seed=0, split="train", key=TEST_KEY)]
    heldout = [g.task for g in generate(60, seed=0, split="heldout", key=TEST_KEY)]
    assert {t.patch for t in train}.isdisjoint({t.patch for t in heldout})
    assert {t.instance_id for t in train}.isdisjoint({t.instance_id for t in heldout})
    signatures = {(t.key, m.name, n) for t in TEMPLATES for m in t.mutations for n in t.names}
    held = {s for s in signatures if signature_split(*_objects(s)) == "heldout"}
    assert held and held != signatures


def _objects(signature):
    key, mutation_name, name = signature
    template = next(t for t in TEMPLATES if t.key == key)
    mutation = next(m for m in template.mutations if m.name == mutation_name)
    return template, mutation, name


def test_base_commit_is_reproduced_from_the_written_sources(tmp_path) -> None:
    write_dataset(generate(2, seed=1, key=TEST_KEY), tmp_path, key=TEST_KEY)
    tasks = load_task_file(tmp_path)
    for task in tasks:
        repo = task.source["repo_dir"]
        assert not (tmp_path / "repos" / task.instance_id / ".git").exists()
        done = subprocess.run(
            ["bash", "-c", COMMIT_SCRIPT], cwd=repo, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == task.base_commit
        assert task.source["hide"] == [str(tmp_path.resolve())]


def test_write_dataset_replaces_old_repositories(tmp_path) -> None:
    write_dataset(generate(3, seed=0, key=TEST_KEY), tmp_path, key=TEST_KEY)
    write_dataset([build_task(0, 9, "L1", "train", key=TEST_KEY)], tmp_path, key=TEST_KEY)
    assert len(list((tmp_path / "repos").iterdir())) == 1
    assert len(load_task_file(tmp_path)) == 1
    assert isinstance(load_task_file(tmp_path)[0], TaskSpec)
