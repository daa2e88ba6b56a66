"""Rewinding a run directory's per-step records to the step a run starts from.

A run appends one line per step to `metrics.jsonl` and writes `trajectories/step-<NNNNNN>.jsonl`.
Before its first step it rewinds them to where it starts: a new run (`trainer.resume: never`, or
`auto` without a checkpoint) to step 0, so an earlier run's rows are gone; a resumed run to its
checkpoint's step, so the rows a killed run recorded after its last complete checkpoint are
dropped and the file never holds a step twice (docs/architecture.md, "The run directory").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from uni_agent_core.rundir.layout import METRICS, TRAJECTORIES

_TRAJECTORY_FILE = re.compile(r"step-(\d+)\.jsonl")


def rewind_step_records(run_dir: Path, step: int) -> int:
    """Keeps the per-step records of steps 1..`step` and drops the rest.

    `metrics.jsonl` keeps one row per kept step (the last one written, when an older file holds
    a step twice) in step order; a torn last line (a process killed while writing) is dropped.
    With nothing kept the file is removed. Trajectory files of later steps are removed.

    Args:
        run_dir: the run directory.
        step: the last step to keep; 0 keeps none.

    Returns:
        The number of metrics lines dropped.
    """
    metrics = run_dir / METRICS
    dropped = 0
    if metrics.is_file():
        lines = metrics.read_text().splitlines()
        kept: dict[int, str] = {}
        for line in lines:
            try:
                row_step = int(json.loads(line)["step"])
            except (ValueError, KeyError, TypeError):
                continue
            if 1 <= row_step <= step:
                kept[row_step] = line
        dropped = len(lines) - len(kept)
        if not kept:
            metrics.unlink()
        elif dropped:
            partial = metrics.with_name(metrics.name + ".rewind")
            partial.write_text("".join(kept[s] + "\n" for s in sorted(kept)))
            os.replace(partial, metrics)
    trajectories = run_dir / TRAJECTORIES
    if trajectories.is_dir():
        for path in trajectories.iterdir():
            match = _TRAJECTORY_FILE.fullmatch(path.name)
            if match and int(match.group(1)) > step and path.is_file():
                path.unlink()
    return dropped
