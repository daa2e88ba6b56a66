"""verl dataset rows: the TaskSpec round-trips; the published curriculum decides the task set."""

from __future__ import annotations

import pytest

from uni_agent_core.curriculum.refresh import publish
from uni_agent_core.rl.verl.data import read_task_specs, write_verl_dataset
from uni_agent_core.types import TaskSpec


def tasks() -> list[TaskSpec]:
    return [
        TaskSpec(
            instance_id=f"t{i}",
            problem_statement=f"bug {i}",
            FAIL_TO_PASS='["test_a"]',
            harness={"type": "react", "max_turns": 4} if i == 0 else None,
        )
        for i in range(3)
    ]


def test_rows_round_trip_the_task_specs(tmp_path) -> None:
    import pandas as pd

    written = write_verl_dataset(tasks(), tmp_path, data_source="agent-rl/micro_swe")
    counts = (written.tasks, written.skipped_by_curriculum, written.curriculum_version)
    assert counts == (3, 0, None)
    assert read_task_specs(written.train_files) == tasks()
    row = pd.read_parquet(written.train_files).iloc[0]
    assert row["agent_name"] == "uni_agent"
    assert list(row["prompt"])[0]["content"] == "bug 0"


def test_inactive_curriculum_tasks_are_left_out_of_training(tmp_path) -> None:
    published = tmp_path / "published"
    content = {"tasks": {"t0": {"active": False}, "t1": {"active": True}}}
    publish(content, published)
    written = write_verl_dataset(
        tasks(), tmp_path / "data", data_source="x", published_curriculum=published
    )
    assert [t.instance_id for t in read_task_specs(written.train_files)] == ["t1", "t2"]
    assert len(read_task_specs(written.val_files)) == 3
    assert (written.skipped_by_curriculum, written.curriculum_version) == (1, 1)


def test_no_active_task_is_an_error(tmp_path) -> None:
    published = tmp_path / "published"
    publish({"tasks": {t.instance_id: {"active": False} for t in tasks()}}, published)
    with pytest.raises(ValueError, match="no task to train on"):
        write_verl_dataset(tasks(), tmp_path / "d", data_source="x", published_curriculum=published)
