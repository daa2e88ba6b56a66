"""What the `agent-rl data ...` commands do: generate micro-swe, validate a task set, score
the gold patches (oracle), with progress lines on stderr and a summary on stdout.

Each returns 0 when the command ran (defective tasks are a finding, not a failure); input that
cannot be read (tasks, a dataset key) raises `UserError`, which `agent-rl` reports as exit 2.
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
from uni_agent_core.envs.micro_swe.keys import dataset_key, read_key
from uni_agent_core.envs.parallel import map_bounded
from uni_agent_core.envs.sources import load_task_file
from uni_agent_core.envs.validation import progress_printer, validate_tasks, write_report
from uni_agent_core.envs.verifier import Verdict, Verifier, task_sandbox_factory
from uni_agent_core.errors import UserError
from uni_agent_core.progress import ProgressLines
from uni_agent_core.types import TaskSpec


def generate_micro_swe(
    n: int,
    seed: int,
    out: str,
    levels: Sequence[str],
    split: Split,
    *,
    key_file: str | None = None,
    stdout: TextIO | None = None,
) -> int:
    """`agent-rl data generate micro-swe`: writes the dataset, keyed (see `micro_swe/keys.py`).

    Raises:
        DatasetKeyError: the key file cannot be read or holds a weak key (a `UserError`).
    """
    stdout = stdout or sys.stdout
    started = time.perf_counter()
    key = read_key(key_file) if key_file else dataset_key(out)
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


def _load(path: str, split: str) -> list[TaskSpec]:
    """The tasks of the file, directory or dataset id the user named.

    Raises:
        UserError: the rows cannot be read or parsed, or there are none.
    """
    try:
        tasks = load_task_file(path, split)
    except (OSError, ValueError) as error:  # TaskSourceError, bad JSON/parquet, invalid rows
        raise UserError(f"cannot read tasks from {path}: {error}") from error
    if not tasks:
        raise UserError(f"{path} holds no tasks")
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
    """`agent-rl data validate`: check every task, write validation.{json,md}.

    Raises:
        UserError: the tasks cannot be read, or there are none.
    """
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    tasks = _load(path, split)
    factory = task_sandbox_factory(sandbox or LocalSandboxConfig())
    report = asyncio.run(
        validate_tasks(
            tasks,
            factory,
            reruns=reruns,
            timeout_s=timeout_s,
            concurrency=concurrency,
            on_result=progress_printer(stderr),
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
    """`agent-rl data oracle`: the verifier's reward of every gold patch, and the resolved rate.

    Raises:
        UserError: the tasks cannot be read, or there are none.
    """
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    tasks = _load(path, split)
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
