"""Attempt history (crash-consistent), Best-of-N estimates and versioned curriculum publishing."""

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from uni_agent_core.curriculum import refresh as refresh_module
from uni_agent_core.curriculum.difficulty import (
    bucket_of,
    estimate_difficulty,
    write_difficulty,
)
from uni_agent_core.curriculum.history import Attempt, AttemptHistory, beta_interval
from uni_agent_core.curriculum.refresh import current_version, refresh_curriculum
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec


def test_history_windows_and_posteriors(tmp_path) -> None:
    history = AttemptHistory(tmp_path / "h.sqlite")
    history.record([Attempt("a", 1.0), Attempt("a", 0.0), Attempt("b", 0.0)])
    history.record([Attempt("a", 1.0, policy_version=3)] * 3)
    assert history.recent_rewards(3) == {"a": [1.0, 1.0, 1.0], "b": [0.0]}
    estimate = history.estimates(4)["a"]
    assert (estimate.attempts, estimate.successes) == (4, 3)
    assert estimate.interval == beta_interval(3, 4)
    assert estimate.interval[0] < estimate.posterior_mean < estimate.interval[1]
    snapshot = history.snapshot(tmp_path / "copy.sqlite")
    assert AttemptHistory(snapshot).count() == 6


WRITER = textwrap.dedent(
    """
    import sys
    from uni_agent_core.curriculum.history import Attempt, AttemptHistory
    history = AttemptHistory(sys.argv[1])
    print("ready", flush=True)
    batch = 0
    while True:
        history.record(Attempt(f"t{i % 7}", float(i % 2), batch) for i in range(100))
        batch += 1
    """
)


def test_killing_a_writer_leaves_a_consistent_database(tmp_path) -> None:
    path = tmp_path / "h.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    assert writer.stdout.readline().strip() == b"ready"
    time.sleep(1.5)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    connection.close()
    count = AttemptHistory(path).count()
    assert count > 0 and count % 100 == 0  # whole batches only


def _scripted(rates: dict[str, float], seed: int = 0):
    """A scripted policy: sample i of a task succeeds with the task's known probability."""

    async def episode(task: TaskSpec, index: int) -> RolloutResult:
        rng = random.Random(f"{seed}/{task.instance_id}/{index}")
        reward = float(rng.random() < rates[task.instance_id])
        return RolloutResult(
            task_id=task.instance_id,
            sample_index=index,
            reward=reward,
            exit_reason=ExitReason.SUBMITTED,
            resolved=reward == 1.0,
        )

    return episode


def test_best_of_n_estimates_land_in_their_beta_interval(tmp_path) -> None:
    rates = {f"t{i}": p for i, p in enumerate([0.0, 1.0, 0.1, 0.3, 0.5, 0.5, 0.7, 0.9] * 3)}
    tasks = [TaskSpec(instance_id=t, problem_statement="x") for t in rates]
    history = AttemptHistory(tmp_path / "h.sqlite")
    report = asyncio.run(
        estimate_difficulty(tasks, _scripted(rates), n=40, history=history, concurrency=8)
    )
    inside = sum(t.interval[0] <= rates[t.instance_id] <= t.interval[1] for t in report.tasks)
    assert inside >= 0.8 * len(tasks)  # 90% intervals
    by_id = {t.instance_id: t for t in report.tasks}
    assert by_id["t0"].bucket == "unsolved" and not by_id["t0"].kept
    assert "never solved" in by_id["t0"].reason
    assert by_id["t1"].bucket == "solved" and "always solved" in by_id["t1"].reason
    assert by_id["t4"].kept and history.count() == 40 * len(tasks)
    target = write_difficulty(report, tmp_path / "out")
    assert target.is_file() and "| t4 |" in (tmp_path / "out" / "difficulty.md").read_text()
    assert bucket_of(0.2) == "hard" and bucket_of(0.5) == "medium" and bucket_of(0.8) == "easy"


def _history(tmp_path):
    history = AttemptHistory(tmp_path / "h.sqlite")
    history.record([Attempt("a", 0.0), Attempt("a", 0.0), Attempt("b", 1.0), Attempt("b", 0.0)])
    return history


def _refresh(history, directory):
    return refresh_curriculum(
        history,
        ["a", "b", "c"],
        directory,
        window=8,
        band=(0.0, 1.0),
        min_attempts=2,
        source_checkpoint="runs/x/checkpoints/step-000004",
    )


def test_refresh_is_idempotent_and_versions_changes(tmp_path) -> None:
    history = _history(tmp_path)
    first = _refresh(history, tmp_path / "cur")
    again = _refresh(history, tmp_path / "cur")
    assert first.published and not again.published and again.version == first.version == 1
    document = current_version(tmp_path / "cur")[1]
    assert document["tasks"]["a"]["bucket"] == "unsolved" and not document["tasks"]["a"]["active"]
    assert document["tasks"]["b"]["active"] and document["tasks"]["c"]["bucket"] == "unknown"
    history.record([Attempt("a", 1.0)])
    second = _refresh(history, tmp_path / "cur")
    assert second.published and second.version == 2
    assert second.diff["previous_version"] == 1 and second.diff["activated"] == ["a"]


def test_a_failed_publish_leaves_the_previous_version(tmp_path, monkeypatch) -> None:
    history = _history(tmp_path)
    _refresh(history, tmp_path / "cur")
    history.record([Attempt("a", 1.0)])
    real_replace = os.replace

    def failing(src, dst):
        if str(dst).endswith("LATEST"):
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(refresh_module.os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        _refresh(history, tmp_path / "cur")
    version, document = current_version(tmp_path / "cur")
    assert version == 1 and not document["tasks"]["a"]["active"]
