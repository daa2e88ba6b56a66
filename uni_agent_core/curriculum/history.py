"""The attempt history: every rollout's outcome per task, in SQLite (WAL), and pass-rate estimates.

One row per attempt — task id, policy version, run id, reward, exit reason, time — appended in
one transaction per batch, so a process killed mid-write leaves either the whole batch or none
of it (SQLite's journal guarantees the file stays consistent). `estimates(window)` gives each
task's pass rate over its most recent `window` attempts with a Beta(1 + successes, 1 + failures)
posterior (mean and central interval), which the difficulty estimate, the dynamic sampler and
the curriculum refresh all read. `snapshot(path)` copies the database consistently (SQLite's
backup API) for MLflow.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SUCCESS_THRESHOLD = 1.0
"""An attempt counts as a success when its reward reaches this (resolved)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    policy_version INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    reward REAL NOT NULL,
    exit_reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_by_task ON attempts (task_id, id);
"""


@dataclass(frozen=True)
class Attempt:
    """One rollout's outcome."""

    task_id: str
    reward: float
    policy_version: int = 0
    run_id: str = ""
    exit_reason: str = "submitted"

    @property
    def success(self) -> bool:
        return self.reward >= SUCCESS_THRESHOLD


@dataclass(frozen=True)
class PassRate:
    """A task's recent record and the Beta posterior of its pass rate."""

    task_id: str
    attempts: int
    successes: int
    interval: tuple[float, float]
    """90% credible interval of Beta(1 + successes, 1 + failures) (see `beta_interval`)."""

    @property
    def rate(self) -> float:
        return self.successes / self.attempts if self.attempts else 0.0

    @property
    def posterior_mean(self) -> float:
        return (1 + self.successes) / (2 + self.attempts)


def beta_interval(successes: int, attempts: int, mass: float = 0.9) -> tuple[float, float]:
    """A `mass` credible interval of Beta(1 + successes, 1 + attempts - successes).

    Central (equal tails) in general; one-sided at the edges, `[0, q]` after no success and
    `[q, 1]` after no failure, where the posterior's mode sits on the boundary.
    """
    # scipy.stats takes 1.5 s to import: only the runs that ask for an interval pay for it
    from scipy.stats import beta as beta_distribution

    a, b = 1 + successes, 1 + attempts - successes
    if successes == 0:
        return 0.0, float(beta_distribution.ppf(mass, a, b))
    if successes == attempts:
        return float(beta_distribution.ppf(1 - mass, a, b)), 1.0
    tail = (1.0 - mass) / 2
    return float(beta_distribution.ppf(tail, a, b)), float(beta_distribution.ppf(1 - tail, a, b))


def pass_rate(task_id: str, rewards: list[float]) -> PassRate:
    successes = sum(reward >= SUCCESS_THRESHOLD for reward in rewards)
    return PassRate(task_id, len(rewards), successes, beta_interval(successes, len(rewards)))


class AttemptHistory:
    """The SQLite attempt store of a run (or shared by runs: rows carry the run id)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        connection = sqlite3.connect(self.path, timeout=30.0)
        try:
            connection.execute("PRAGMA synchronous=NORMAL")
            yield connection
        finally:
            connection.close()

    def record(self, attempts: Iterable[Attempt]) -> int:
        """Append attempts in one transaction; returns how many were written."""
        now = time.time()
        rows = [
            (a.task_id, a.policy_version, a.run_id, float(a.reward), a.exit_reason, now)
            for a in attempts
        ]
        if not rows:
            return 0
        with self._connect() as connection, connection:
            connection.executemany(
                "INSERT INTO attempts (task_id, policy_version, run_id, reward, exit_reason, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def recent_rewards(self, window: int) -> dict[str, list[float]]:
        """Each task's last `window` rewards, oldest first."""
        query = (
            "SELECT task_id, reward FROM (SELECT task_id, reward, id, ROW_NUMBER() OVER "
            "(PARTITION BY task_id ORDER BY id DESC) AS k FROM attempts) WHERE k <= ? "
            "ORDER BY task_id, id"
        )
        found: dict[str, list[float]] = {}
        with self._connect() as connection:
            for task_id, reward in connection.execute(query, (window,)):
                found.setdefault(task_id, []).append(float(reward))
        return found

    def estimates(self, window: int) -> dict[str, PassRate]:
        """Pass rate and posterior of every task with attempts, over its last `window`."""
        return {
            task: pass_rate(task, rewards) for task, rewards in self.recent_rewards(window).items()
        }

    def count(self) -> int:
        with self._connect() as connection:
            return int(connection.execute("SELECT COUNT(*) FROM attempts").fetchone()[0])

    def snapshot(self, target: str | Path) -> Path:
        """A consistent copy of the database (for MLflow), even while others write."""
        destination = Path(target)
        destination.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as source:
            copy = sqlite3.connect(destination)
            try:
                source.backup(copy)
            finally:
                copy.close()
        return destination
