"""A recipe's tasks as verl dataset rows (parquet), for `UniAgentLoop`.

One row per task: `prompt` (the problem statement as a chat, which verl's dataset needs for its
`raw_prompt`), `agent_name: uni_agent`, `data_source`, a rule `reward_model` stub (the reward is
the agent loop's verifier score), and `extra_info` with the full `TaskSpec` as JSON (per-sample
harness, sandbox and reward overrides included), the task id and the row index.

The task set is the curriculum's: when the run has a published curriculum, tasks it marks
inactive (always or never solved in the recent window) are left out, so the nightly refresh
steers what verl samples; verl's group filter drops zero-variance groups within a step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uni_agent_core.rl.verl.names import AGENT_NAME
from uni_agent_core.types import TaskSpec


@dataclass(frozen=True)
class WrittenDataset:
    """The files written and what went into them."""

    train_files: Path
    val_files: Path
    tasks: int
    skipped_by_curriculum: int
    curriculum_version: int | None


def task_row(task: TaskSpec, index: int, data_source: str) -> dict[str, Any]:
    """The verl row of one task."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": task.problem_statement}],
        "agent_name": AGENT_NAME,
        "ability": "software-engineering",
        "reward_model": {"style": "rule", "ground_truth": ""},
        "extra_info": {
            "index": index,
            "task_id": task.instance_id,
            "task_spec": task.model_dump_json(),
        },
    }


def active_tasks(tasks: list[TaskSpec], published_dir: Path) -> tuple[list[TaskSpec], int | None]:
    """Tasks the current published curriculum keeps active (all, when none is published)."""
    from uni_agent_core.curriculum.refresh import current_version

    current = current_version(published_dir) if published_dir.is_dir() else None
    if current is None:
        return tasks, None
    version, document = current
    entries = document.get("tasks", {})
    kept = [t for t in tasks if entries.get(t.instance_id, {}).get("active", True)]
    return kept, version


def write_verl_dataset(
    tasks: list[TaskSpec],
    out_dir: Path,
    *,
    data_source: str,
    published_curriculum: Path | None = None,
) -> WrittenDataset:
    """Write `train.parquet` (the active tasks) and `val.parquet` (all tasks) under `out_dir`.

    Raises:
        ValueError: no task is left to train on.
    """
    import pandas as pd

    kept, version = (
        active_tasks(tasks, published_curriculum) if published_curriculum else (tasks, None)
    )
    if not kept:
        raise ValueError(
            f"no task to train on: {len(tasks)} tasks, none active in curriculum v{version} "
            f"({published_curriculum})"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    pd.DataFrame([task_row(t, i, data_source) for i, t in enumerate(kept)]).to_parquet(train)
    pd.DataFrame([task_row(t, i, data_source) for i, t in enumerate(tasks)]).to_parquet(val)
    return WrittenDataset(train, val, len(kept), len(tasks) - len(kept), version)


def read_task_specs(path: Path) -> list[TaskSpec]:
    """The `TaskSpec`s of a written parquet file (round-trip check and debugging)."""
    import pandas as pd

    frame = pd.read_parquet(path)
    return [TaskSpec.model_validate(json.loads(e["task_spec"])) for e in frame["extra_info"]]
