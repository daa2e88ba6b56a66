"""Sample trajectories of a step, rendered for people: text segments marked trainable or context.

Each line of `<run dir>/trajectories/step-<NNNNNN>.jsonl` is one chain of one episode: task,
sample, reward, exit reason, the decoded prompt, and the response as contiguous segments with
`trainable` true where the engine sampled the tokens (loss mask 1) and false for context the
harness added (tool output, user turns). The first `per_step` episodes (by task and sample) are
written; the training run logs the directory to MLflow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from uni_agent_core.types import RolloutResult, Trajectory


def render(trajectory: Trajectory, tokenizer: Any) -> dict[str, Any]:
    segments = []
    position = 0
    for trainable, run in groupby(trajectory.loss_mask):
        length = len(list(run))
        ids = trajectory.response_ids[position : position + length]
        segments.append({"trainable": bool(trainable), "text": tokenizer.decode(ids)})
        position += length
    return {
        "chain_id": trajectory.chain_id,
        "prompt": tokenizer.decode(trajectory.prompt_ids),
        "segments": segments,
        "trainable_tokens": trajectory.trainable_tokens,
        "policy_versions": sorted(set(v for v in trajectory.policy_versions if v >= 0)),
    }


def write_samples(
    results: Sequence[RolloutResult], step: int, directory: Path, per_step: int, tokenizer: Any
) -> Path | None:
    """Write the step's first `per_step` episodes; returns the file (None when none written)."""
    if per_step <= 0 or not results:
        return None
    chosen = sorted(results, key=lambda r: (r.task_id, r.sample_index))[:per_step]
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"step-{step:06d}.jsonl"
    with target.open("w") as handle:
        for result in chosen:
            for trajectory in result.trajectories:
                row = {
                    "task_id": result.task_id,
                    "sample_index": result.sample_index,
                    "reward": result.reward,
                    "exit_reason": result.exit_reason.value,
                    **render(trajectory, tokenizer),
                }
                handle.write(json.dumps(row) + "\n")
    return target
