"""Before -> after on the same held-out tasks: the paired pass@1 delta with its bootstrap
interval, the flip table and the exit reasons of each side.

The train flow evaluates the policy RL starts from and the trained checkpoint with one recipe,
so both evaluations hold the same task ids, k, run seed and sampling temperature, and each
sample's seed depends only on (run seed, task, sample index) (`runner.sample_seed`): the two
evaluations are paired task by task and sample by sample. `compare_evaluations` checks that from
their `eval.json` (and refuses two evaluations that are not paired), scores each task on each
side (its pass@1 estimate: the share of its samples resolved; its mean reward), and takes the
mean of the per-task differences — exactly `eval/pass@1` after minus before — with the
`paired_bootstrap_delta` 95% interval. The flip table holds every paired task, flipped or not.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from uni_agent_core.eval.metrics import SampleRow, paired_bootstrap_delta
from uni_agent_core.eval.runner import SAMPLES, SPEC, read_rows
from uni_agent_core.tracking.runs import noise_verdict
from uni_agent_core.types import ExitReason

PAIRED_SPEC_KEYS = ("suite", "tasks", "k", "seed", "temperature")
"""What two evaluations must share to be paired (the weights are what differs)."""
FLIPS_CSV = "flips.csv"
FLIPS_MD = "flips.md"
MD_DIFF_CHARS = 160
"""Characters of each diff the markdown flip table shows (the CSV keeps the row's clip)."""

Direction = Literal["up", "down", "same"]


@dataclass(frozen=True)
class Side:
    """One task in one evaluation: its k samples summed up."""

    resolved: float
    """Share of its samples resolved (the task's pass@1 estimate)."""
    reward: float
    """Mean reward of its samples."""
    exits: str
    """Exit reasons of its samples in sample order, `;`-joined."""
    test_timeouts: int
    """Samples whose verifier timed out (`test_timeout`)."""
    diff: str
    """The first sample's diff (clipped)."""


@dataclass(frozen=True)
class TaskPair:
    """A held-out task before and after RL."""

    task_id: str
    before: Side
    after: Side

    @property
    def direction(self) -> Direction:
        """`up` when more of its samples are resolved after RL, `down` when fewer."""
        if self.after.resolved > self.before.resolved:
            return "up"
        if self.after.resolved < self.before.resolved:
            return "down"
        return "same"


@dataclass(frozen=True)
class BeforeAfter:
    """The paired comparison of two evaluations of the same tasks."""

    pairs: list[TaskPair]
    delta: float
    """Mean over tasks of after - before pass@1 (= the difference of the two `eval/pass@1`)."""
    low: float
    high: float
    """The paired bootstrap 95% interval of `delta`."""
    exits_before: dict[str, int]
    exits_after: dict[str, int]
    """Samples per exit reason on each side."""

    @property
    def verdict(self) -> str:
        """In words: a gain or a loss beyond noise, or not distinguishable from noise."""
        return noise_verdict(self.low, self.high)

    def metrics(self) -> dict[str, float]:
        """The comparison as `eval/...` metrics (agent-rl names; MLflow's replace `@`)."""
        directions = Counter(pair.direction for pair in self.pairs)
        return {
            "eval/pass@1_delta": self.delta,
            "eval/pass@1_delta_ci_low": self.low,
            "eval/pass@1_delta_ci_high": self.high,
            "eval/paired_tasks": float(len(self.pairs)),
            "eval/flips_up": float(directions["up"]),
            "eval/flips_down": float(directions["down"]),
        }


def _side(rows: Sequence[SampleRow]) -> Side:
    rows = sorted(rows, key=lambda row: row.sample_index)
    return Side(
        resolved=sum(row.resolved for row in rows) / len(rows),
        reward=sum(row.reward for row in rows) / len(rows),
        exits=";".join(row.exit_reason for row in rows),
        test_timeouts=sum(row.exit_reason == ExitReason.TEST_TIMEOUT for row in rows),
        diff=rows[0].diff,
    )


def _evaluation(directory: Path) -> tuple[dict, dict[str, list[SampleRow]]]:
    spec = json.loads((directory / SPEC).read_text())
    samples: dict[str, dict[int, SampleRow]] = {task: {} for task in spec["tasks"]}
    for row in read_rows(directory / SAMPLES):
        if row.task_id in samples and row.sample_index < spec["k"]:
            samples[row.task_id][row.sample_index] = row
    by_task = {task: list(rows.values()) for task, rows in samples.items()}
    missing = [task for task, rows in by_task.items() if len(rows) < spec["k"]]
    if missing:
        raise ValueError(
            f"{directory} is unfinished: {len(missing)} tasks lack samples ({missing[0]}, ...)"
        )
    return spec, by_task


def compare_evaluations(
    before_dir: Path, after_dir: Path, *, resamples: int = 10_000
) -> BeforeAfter:
    """Pair two finished evaluations task by task (their `eval.json` and `samples.jsonl`).

    Raises:
        ValueError: the evaluations differ in what they must share (`PAIRED_SPEC_KEYS`: the
            message names the keys), or one of them is unfinished.
    """
    before_spec, before = _evaluation(before_dir)
    after_spec, after = _evaluation(after_dir)
    differ = [k for k in PAIRED_SPEC_KEYS if before_spec.get(k) != after_spec.get(k)]
    if differ:
        raise ValueError(
            f"{before_dir} and {after_dir} are not paired: they differ in {', '.join(differ)}"
        )
    pairs = [TaskPair(task, _side(before[task]), _side(after[task])) for task in before]
    delta, low, high = paired_bootstrap_delta(
        [pair.after.resolved for pair in pairs],
        [pair.before.resolved for pair in pairs],
        resamples=resamples,
    )
    return BeforeAfter(
        pairs=pairs,
        delta=delta,
        low=low,
        high=high,
        exits_before=dict(Counter(r.exit_reason for rows in before.values() for r in rows)),
        exits_after=dict(Counter(r.exit_reason for rows in after.values() for r in rows)),
    )


FLIP_COLUMNS = (
    "task_id",
    "direction",
    "before_resolved",
    "after_resolved",
    "before_reward",
    "after_reward",
    "before_exit",
    "after_exit",
    "before_test_timeouts",
    "after_test_timeouts",
    "before_diff",
    "after_diff",
)
"""The flip table's columns: `*_resolved` is the share of the task's samples resolved (0 or 1
at k = 1), `*_exit` the samples' exit reasons, `*_diff` the first sample's diff (clipped)."""


def _row(pair: TaskPair) -> list[str]:
    b, a = pair.before, pair.after
    return [
        pair.task_id,
        pair.direction,
        f"{b.resolved:g}",
        f"{a.resolved:g}",
        f"{b.reward:g}",
        f"{a.reward:g}",
        b.exits,
        a.exits,
        str(b.test_timeouts),
        str(a.test_timeouts),
        b.diff,
        a.diff,
    ]


def _order(pair: TaskPair) -> tuple[int, str]:
    return ({"down": 0, "up": 1, "same": 2}[pair.direction], pair.task_id)


def _cell(text: str) -> str:
    clipped = text[:MD_DIFF_CHARS] + ("…" if len(text) > MD_DIFF_CHARS else "")
    return "`" + clipped.replace("|", "\\|").replace("`", "'").replace("\n", "⏎") + "`"


def write_flip_table(comparison: BeforeAfter, directory: Path) -> list[Path]:
    """`flips.csv` and `flips.md` under `directory`: one row per paired task (downs, ups, then
    the unchanged), with the delta, its interval and the verdict atop the markdown."""
    directory.mkdir(parents=True, exist_ok=True)
    pairs = sorted(comparison.pairs, key=_order)
    with (directory / FLIPS_CSV).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FLIP_COLUMNS)
        writer.writerows(_row(pair) for pair in pairs)
    c = comparison
    lines = [
        "# Held-out tasks before -> after RL",
        "",
        f"pass@1 delta {c.delta:+.3f} (95% paired bootstrap interval [{c.low:+.3f}, "
        f"{c.high:+.3f}], {len(pairs)} tasks): {c.verdict}.",
        "",
        "| " + " | ".join(FLIP_COLUMNS) + " |",
        "|" + "---|" * len(FLIP_COLUMNS),
    ]
    for pair in pairs:
        cells = _row(pair)
        cells[-2:] = [_cell(pair.before.diff), _cell(pair.after.diff)]
        lines.append("| " + " | ".join(cells) + " |")
    (directory / FLIPS_MD).write_text("\n".join(lines) + "\n")
    return [directory / FLIPS_CSV, directory / FLIPS_MD]
