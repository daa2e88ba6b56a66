"""What the `agent-rl data ...` commands do: generate micro-swe, validate a task set, score
the gold patches (oracle), with progress lines on stderr and a summary on stdout.

Exit codes: 0 when the command ran (defective tasks are a finding, not a failure), 2 when the
input could not be read.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from uni_agent_core.config.sandbox import LocalSandboxConfig, SandboxConfig
from uni_agent_core.envs.micro_swe.generator import Split, generate, write_dataset
from uni_agent_core.envs.micro_swe.keys import DatasetKeyError, dataset_key, read_key
from uni_agent_core.envs.parallel import map_bounded
from uni_agent_core.envs.sources import TaskSourceError, load_task_file
from uni_agent_core.envs.validation import TaskValidation, validate_tasks, write_report
from uni_agent_core.envs.verifier import Verdict, Verifier, task_sandbox_factory
from uni_agent_core.progress import ProgressLines
from uni_agent_core.types import TaskSpec

INPUT_ERROR = 2


def generate_micro_swe(
    n: int,
    seed: int,
    out: str,
    levels: Sequence[str],
    split: Split,
    *,
    key_file: str | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """`agent-rl data generate micro-swe`: writes the dataset, keyed (see `micro_swe/keys.py`)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    started = time.perf_counter()
    try:
        key = read_key(key_file) if key_file else dataset_key(out)
    except DatasetKeyError as error:
        print(f"error: {error}", file=stderr)
        return INPUT_ERROR
    tasks = generate(n, seed, levels, split, key=key)
    path = write_dataset(tasks, out, key=key)
    counts: dict[str, int] = {}
    for generated in tasks:
        level = generated.task.difficulty or "?"
        counts[level] = counts.get(level, 0) + 1
    per_level = ", ".join(f"{level}: {count}" for level, count in sorted(counts.items()))
    print(
        f"wrote {len(tasks)} micro-swe tasks ({split} split, seed {seed}; {per_level}) to {path} "
        f"in {time.perf_counter() - started:.1f}s",
        file=stdout,
    )
    return 0


def _load(path: str, split: str, err: TextIO) -> list[TaskSpec] | None:
    try:
        tasks = load_task_file(path, split)
    except (TaskSourceError, OSError, ValueError) as error:
        print(f"error: cannot read tasks from {path}: {error}", file=err)
        return None
    if not tasks:
        print(f"error: {path} holds no tasks", file=err)
        return None
    return tasks


def validate_data(
    path: str,
    *,
    out: str | None,
    reruns: int,
    timeout_s: float,
    concurrency: int | None,
    sandbox: SandboxConfig | None = None,
    split: str = "test",
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """`agent-rl data validate`: check every task, write validation.{json,md}."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    tasks = _load(path, split, stderr)
    if tasks is None:
        return INPUT_ERROR
    progress = ProgressLines("validate", stderr)

    def on_result(done: int, total: int, result: TaskValidation) -> None:
        outcome = "ok" if result.valid else ", ".join(map(str, result.defects))
        progress.line(done, total, result.instance_id, outcome, notable=not result.valid)

    factory = task_sandbox_factory(sandbox or LocalSandboxConfig())
    report = asyncio.run(
        validate_tasks(
            tasks,
            factory,
            reruns=reruns,
            timeout_s=timeout_s,
            concurrency=concurrency,
            on_result=on_result,
        )
    )
    target_dir = Path(out) if out else _default_report_dir(path)
    target = write_report(report, target_dir, source=str(path))
    share = 100.0 * report.valid / report.total
    print(
        f"{report.valid}/{report.total} valid ({share:.1f}%) in {report.duration_s:.1f}s",
        file=stdout,
    )
    for defect, count in report.by_defect.items():
        print(f"  {defect}: {count}", file=stdout)
    for level, row in report.by_difficulty.items():
        print(f"  {level}: {row['valid']}/{row['total']} valid", file=stdout)
    print(f"report: {target} and {target.with_suffix('.md')}", file=stdout)
    return 0


def _default_report_dir(path: str) -> Path:
    source = Path(path)
    return source if source.is_dir() else source.parent


def oracle_score(
    path: str,
    *,
    concurrency: int | None,
    sandbox: SandboxConfig | None = None,
    split: str = "test",
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """`agent-rl data oracle`: the verifier's reward of every gold patch, and the resolved rate."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    tasks = _load(path, split, stderr)
    if tasks is None:
        return INPUT_ERROR
    verifier = Verifier(task_sandbox_factory(sandbox or LocalSandboxConfig()))
    progress = ProgressLines("oracle", stderr)

    def on_result(done: int, total: int, verdict: Verdict) -> None:
        outcome = "resolved" if verdict.resolved else f"NOT resolved ({verdict.error or ''})"
        progress.line(done, total, verdict.instance_id, outcome, notable=not verdict.resolved)

    started = time.perf_counter()
    verdicts = asyncio.run(
        map_bounded(tasks, verifier.oracle, concurrency=concurrency, on_result=on_result)
    )
    rewards = [verdict.reward for verdict in verdicts]
    resolved = sum(reward == 1.0 for reward in rewards)
    print(
        f"oracle: {resolved}/{len(tasks)} resolved ({100.0 * resolved / len(tasks):.1f}%), "
        f"mean reward {sum(rewards) / len(rewards):.3f}, {time.perf_counter() - started:.1f}s",
        file=stdout,
    )
    return 0
