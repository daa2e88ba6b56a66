"""Best-of-N difficulty: N rollouts per task with the current policy, pass rates and buckets.

`estimate_difficulty` runs N episodes of every task through an episode function (in a run: the
same rollout driver as training), records every attempt in the history, and classifies each task
by its pass rate: `unsolved` (0), `hard` (< 1/3), `medium`, `easy` (> 2/3), `solved` (1). The
initial training set keeps the tasks whose pass rate lies strictly inside the target band;
`DifficultyReport` says what was dropped and why, and is written as `difficulty.json` plus a
markdown table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from uni_agent_core.curriculum.history import Attempt, AttemptHistory, pass_rate
from uni_agent_core.envs.parallel import map_bounded
from uni_agent_core.types import RolloutResult, TaskSpec

EpisodeFn = Callable[[TaskSpec, int], Awaitable[RolloutResult]]
"""Runs sample `i` of a task and returns its result."""

BUCKETS = ("unsolved", "hard", "medium", "easy", "solved")


def bucket_of(rate: float) -> str:
    if rate <= 0.0:
        return "unsolved"
    if rate >= 1.0:
        return "solved"
    if rate < 1 / 3:
        return "hard"
    return "easy" if rate > 2 / 3 else "medium"


class TaskDifficulty(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance_id: str
    level: str | None = None
    attempts: int
    successes: int
    pass_rate: float
    interval: tuple[float, float]
    """90% Beta posterior interval of the pass rate (one-sided at 0 and 1)."""
    bucket: str
    kept: bool
    reason: str = ""
    """Why the task was dropped from the initial training set."""


class DifficultyReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int
    band: tuple[float, float]
    tasks: list[TaskDifficulty]
    duration_s: float = 0.0

    @property
    def kept_ids(self) -> list[str]:
        return [task.instance_id for task in self.tasks if task.kept]

    def counts(self) -> dict[str, int]:
        return {bucket: sum(t.bucket == bucket for t in self.tasks) for bucket in BUCKETS}


def classify(
    task_id: str, rewards: Sequence[float], band: tuple[float, float], level: str | None = None
) -> TaskDifficulty:
    """A task's difficulty entry from its rewards."""
    estimate = pass_rate(task_id, list(rewards))
    low, high = band
    kept = low < estimate.rate < high
    reason = ""
    if not kept:
        reason = (
            f"pass rate {estimate.rate:.2f} <= {low:g} (never solved)"
            if estimate.rate <= low
            else f"pass rate {estimate.rate:.2f} >= {high:g} (always solved)"
        )
    return TaskDifficulty(
        instance_id=task_id,
        level=level,
        attempts=estimate.attempts,
        successes=estimate.successes,
        pass_rate=estimate.rate,
        interval=estimate.interval,
        bucket=bucket_of(estimate.rate),
        kept=kept,
        reason=reason,
    )


async def estimate_difficulty(
    tasks: Sequence[TaskSpec],
    episode: EpisodeFn,
    *,
    n: int,
    band: tuple[float, float] = (0.0, 1.0),
    history: AttemptHistory | None = None,
    run_id: str = "best-of-n",
    concurrency: int | None = None,
    on_episode: Callable[[int, int, RolloutResult], None] | None = None,
) -> DifficultyReport:
    """Roll out every task `n` times and classify it.

    Args:
        tasks: the task set.
        episode: runs one sample of a task.
        n: samples per task.
        band: the open pass-rate band of tasks kept for training.
        history: where every attempt is recorded (None records nothing).
        run_id: the run id written with the attempts.
        concurrency: episodes at once.
        on_episode: progress callback (done, total, result).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    started = time.perf_counter()
    jobs = [(task, i) for task in tasks for i in range(n)]
    results = await map_bounded(
        jobs, lambda job: episode(*job), concurrency=concurrency, on_result=on_episode
    )
    if history is not None:
        history.record(
            Attempt(r.task_id, r.reward, r.started_version, run_id, r.exit_reason.value)
            for r in results
        )
    by_task: dict[str, list[float]] = {task.instance_id: [] for task in tasks}
    for result in results:
        by_task[result.task_id].append(result.reward)
    levels = {task.instance_id: task.difficulty for task in tasks}
    entries = [classify(t, rewards, band, levels[t]) for t, rewards in by_task.items()]
    return DifficultyReport(n=n, band=band, tasks=entries, duration_s=time.perf_counter() - started)


def render_markdown(report: DifficultyReport) -> str:
    counts = report.counts()
    kept = len(report.kept_ids)
    lines = [
        f"# Best-of-{report.n} difficulty",
        "",
        f"{len(report.tasks)} tasks, {kept} kept for training (pass rate strictly inside "
        f"({report.band[0]:g}, {report.band[1]:g})), {report.duration_s:.1f} s.",
        "",
        "| bucket | tasks |",
        "|---|---|",
        *[f"| {bucket} | {counts[bucket]} |" for bucket in BUCKETS],
        "",
        "| task | level | pass rate | 90% interval | bucket | kept | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in report.tasks:
        lines.append(
            f"| {t.instance_id} | {t.level or ''} | {t.successes}/{t.attempts} | "
            f"[{t.interval[0]:.2f}, {t.interval[1]:.2f}] | {t.bucket} | "
            f"{'yes' if t.kept else 'no'} | {t.reason} |"
        )
    return "\n".join(lines) + "\n"


def write_difficulty(report: DifficultyReport, out_dir: str | Path) -> Path:
    """`difficulty.json` and `difficulty.md` under `out_dir`; returns the JSON path."""
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    payload = report.model_dump(mode="json") | {
        "counts": report.counts(),
        "kept_ids": report.kept_ids,
    }
    target = root / "difficulty.json"
    target.write_text(json.dumps(payload, indent=2) + "\n")
    (root / "difficulty.md").write_text(render_markdown(report))
    return target
