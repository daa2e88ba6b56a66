"""Rewinding a run directory's per-step records: a new run starts them afresh, a resumed run keeps
the steps up to its checkpoint and never holds a step twice."""

from __future__ import annotations

import json
from pathlib import Path

from uni_agent_core.rundir.layout import METRICS, TRAJECTORIES
from uni_agent_core.rundir.rewind import rewind_step_records


def _run_dir(tmp_path: Path, steps: list[int], *, torn_tail: bool = False) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / TRAJECTORIES).mkdir(parents=True)
    text = "".join(json.dumps({"step": step, "train/loss": step / 10}) + "\n" for step in steps)
    if torn_tail:  # the process was killed while writing the last line
        text += '{"step": 9, "train/lo'
    (run_dir / METRICS).write_text(text)
    for step in set(steps):
        (run_dir / TRAJECTORIES / f"step-{step:06d}.jsonl").write_text("{}\n")
    (run_dir / TRAJECTORIES / "notes.txt").write_text("not a step file")
    return run_dir


def _steps(run_dir: Path) -> list[int]:
    lines = (run_dir / METRICS).read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def test_a_new_run_starts_metrics_afresh(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, [1, 2, 3])
    assert rewind_step_records(run_dir, 0) == 3
    assert not (run_dir / METRICS).exists()
    assert sorted(p.name for p in (run_dir / TRAJECTORIES).iterdir()) == ["notes.txt"]


def test_a_resumed_run_keeps_the_rows_up_to_its_checkpoint(tmp_path: Path) -> None:
    # killed after recording steps 3 and 4 but before their checkpoint was complete
    run_dir = _run_dir(tmp_path, [1, 2, 3, 4], torn_tail=True)
    assert rewind_step_records(run_dir, 2) == 3
    assert _steps(run_dir) == [1, 2]
    assert json.loads((run_dir / METRICS).read_text().splitlines()[1])["train/loss"] == 0.2
    names = sorted(p.name for p in (run_dir / TRAJECTORIES).iterdir())
    assert names == ["notes.txt", "step-000001.jsonl", "step-000002.jsonl"]


def test_duplicate_steps_keep_their_last_row(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, [1, 2, 1, 2])
    (run_dir / METRICS).write_text(
        "".join(json.dumps({"step": s, "n": i}) + "\n" for i, s in enumerate([1, 2, 1, 2]))
    )
    assert rewind_step_records(run_dir, 2) == 2
    rows = [json.loads(line) for line in (run_dir / METRICS).read_text().splitlines()]
    assert rows == [{"step": 1, "n": 2}, {"step": 2, "n": 3}]


def test_nothing_to_rewind_is_fine(tmp_path: Path) -> None:
    assert rewind_step_records(tmp_path / "absent", 0) == 0
    run_dir = _run_dir(tmp_path, [1, 2])
    before = (run_dir / METRICS).read_text()
    assert rewind_step_records(run_dir, 2) == 0
    assert (run_dir / METRICS).read_text() == before
