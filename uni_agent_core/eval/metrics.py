"""pass@k (the unbiased estimator of Chen et al., 2021) and avg@k over per-sample results, and
the paired bootstrap interval of a difference between two evaluations of the same tasks."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from math import comb
from random import Random

from pydantic import BaseModel, ConfigDict, Field


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n is correct), c correct.

    `1 - C(n - c, k) / C(n, k)`; exactly 1.0 when fewer than k samples are wrong.

    Raises:
        ValueError: k > n, or counts out of range.
    """
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def paired_bootstrap_delta(
    after: Sequence[float],
    before: Sequence[float],
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean of `after - before` over paired tasks, and its percentile bootstrap interval.

    Tasks are resampled with replacement, keeping each task's two scores together (the pairing
    removes the spread of task difficulty from the interval).

    Returns:
        `(delta, low, high)`.

    Raises:
        ValueError: the sequences are empty or of different lengths.
    """
    if not after or len(after) != len(before):
        raise ValueError(f"need paired scores, got {len(after)} and {len(before)}")
    differences = [a - b for a, b in zip(after, before, strict=True)]
    n = len(differences)
    rng = Random(seed)
    means = sorted(sum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    tail = (1.0 - confidence) / 2
    low = means[int(tail * (resamples - 1))]
    high = means[int(round((1.0 - tail) * (resamples - 1)))]
    return sum(differences) / n, low, high


class SampleRow(BaseModel):
    """One evaluated sample of a task (a line of `samples.jsonl`)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    sample_index: int
    reward: float
    resolved: bool
    exit_reason: str
    level: str | None = None
    harness: str | None = None
    """The harness that played it (its type, or its name in a `mix`)."""
    task_env: str | None = None
    """The task's environment (`swe`, `shell`, a user's): the kind of task."""
    turns: int = 0
    tokens: int = 0
    seconds: float = 0.0
    leak_flagged: bool = False
    error: str | None = None
    diff: str = ""
    """The agent's diff, clipped (`runner.DIFF_ROW_CHARS`)."""


class EvalSummary(BaseModel):
    """Scores of one evaluation."""

    model_config = ConfigDict(extra="forbid")

    tasks: int
    samples: int
    k: int
    pass_at_1: float
    avg_at_k: float
    """Mean reward over every sample of every task."""
    pass_at_k: float
    by_level: dict[str, dict[str, float]]
    by_harness: dict[str, dict[str, float]] = Field(default_factory=dict)
    """The same scores over each harness's tasks (a `mix` gives each task one harness)."""
    by_task_env: dict[str, dict[str, float]] = Field(default_factory=dict)
    """The same scores over each kind of task (`swe`, `shell`, ...)."""
    exit_reasons: dict[str, int]
    leak_flagged: int


def summarize(rows: Sequence[SampleRow], k: int) -> EvalSummary:
    """Scores of an evaluation's rows (k samples per task, at least)."""
    per_task: dict[str, list[SampleRow]] = defaultdict(list)
    for row in rows:
        per_task[row.task_id].append(row)
    if not per_task:
        raise ValueError("no evaluated samples")

    def scores(task_rows: dict[str, list[SampleRow]]) -> dict[str, float]:
        n_tasks = len(task_rows)
        at1 = sum(pass_at_k(len(r), sum(x.resolved for x in r), 1) for r in task_rows.values())
        atk = sum(pass_at_k(len(r), sum(x.resolved for x in r), k) for r in task_rows.values())
        rewards = [x.reward for r in task_rows.values() for x in r]
        return {
            "tasks": float(n_tasks),
            "pass@1": at1 / n_tasks,
            f"pass@{k}": atk / n_tasks,
            f"avg@{k}": sum(rewards) / len(rewards),
        }

    levels: dict[str, dict[str, list[SampleRow]]] = defaultdict(dict)
    harnesses: dict[str, dict[str, list[SampleRow]]] = defaultdict(dict)
    kinds: dict[str, dict[str, list[SampleRow]]] = defaultdict(dict)
    for task, task_rows in per_task.items():
        levels[task_rows[0].level or "unknown"][task] = task_rows
        if task_rows[0].harness:
            harnesses[task_rows[0].harness][task] = task_rows
        if task_rows[0].task_env:
            kinds[task_rows[0].task_env][task] = task_rows
    overall = scores(per_task)
    return EvalSummary(
        tasks=len(per_task),
        samples=len(rows),
        k=k,
        pass_at_1=overall["pass@1"],
        avg_at_k=overall[f"avg@{k}"],
        pass_at_k=overall[f"pass@{k}"],
        by_level={level: scores(task_rows) for level, task_rows in sorted(levels.items())},
        by_harness={name: scores(task_rows) for name, task_rows in sorted(harnesses.items())},
        by_task_env={name: scores(task_rows) for name, task_rows in sorted(kinds.items())},
        exit_reasons=dict(Counter(row.exit_reason for row in rows)),
        leak_flagged=sum(row.leak_flagged for row in rows),
    )
