"""Step files read into episodes: chains grouped by (task, sample) in file order, old lines
with defaults, steps listed by number and looked up with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.viewer.steps import (
    UNKNOWN,
    StepNotFoundError,
    find_step,
    list_steps,
    read_step,
)


def test_chains_group_into_episodes_in_file_order(tmp_path, step_rows, write_step_file, make_row):
    late = make_row("task-a", 0, 2, [("again", 1)], opened_by="sibling sample")
    path = write_step_file(tmp_path, 1, [*step_rows, late])
    episodes = read_step(path)
    assert [(e.task_id, e.sample_index) for e in episodes] == [
        ("task-a", 0),
        ("task-b", 1),
        ("task-c", 0),
    ]
    first = episodes[0]
    assert [c.chain_id for c in first.chains] == [0, 1, 2]
    assert [c.opened_by for c in first.chains][1:] == [
        "split: history diverged (compaction or edit)",
        "sibling sample",
    ]
    assert (first.reward, first.resolved, first.trace_id, first.level) == (
        1.0,
        True,
        "tr-abc 1",
        "L1",
    )
    chain = first.chains[0]
    assert chain.tokens is not None and len(chain.tokens) == 9
    assert chain.tokens[2].version is None and chain.tokens[0].version == 3
    assert chain.rollbacks[0].at == 6 and chain.rollbacks[0].dropped_tokens == 2


def test_old_lines_read_with_defaults(tmp_path, step_rows, write_step_file):
    [old] = read_step(write_step_file(tmp_path, 1, step_rows[3:]))
    assert (old.harness, old.level, old.resolved, old.trace_id) == (UNKNOWN, None, None, None)
    [chain] = old.chains
    assert chain.tokens is None and chain.rollbacks == () and chain.opened_by == UNKNOWN
    assert [s.trainable for s in chain.segments] == [True, False, True]


def test_steps_are_listed_by_number_and_found(run_dir: Path):
    trajectories = run_dir / "trajectories"
    (trajectories / "step-000010.jsonl").write_text("")
    (trajectories / "step-x.jsonl").write_text("")
    (trajectories / "step-000003.html").write_text("")
    assert [s.step for s in list_steps(trajectories)] == [1, 2, 10]
    assert find_step(trajectories).step == 10
    assert find_step(trajectories, 2).path == trajectories / "step-000002.jsonl"
    with pytest.raises(StepNotFoundError, match=r"no step 7 in .* \(steps: 1, 2, 10\)"):
        find_step(trajectories, 7)
    with pytest.raises(StepNotFoundError, match="no step files"):
        find_step(run_dir)
