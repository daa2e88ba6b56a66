"""Sample trajectories of a step, rendered for people: text segments marked trainable or context,
and every token with its id, text, loss mask, logprob and policy version.

Each line of `<run dir>/trajectories/step-<NNNNNN>.jsonl` is one chain of one episode: task,
sample, harness, group, task level, reward, exit reason, the episode's MLflow trace (when it was
traced), the decoded prompt, the response as contiguous segments with `trainable` true where the
engine sampled the tokens (loss mask 1) and false for context the harness added (tool output,
user turns), why the gateway opened the chain, every response token (`tokens`), and each
rolled-back action (`rollbacks`: where in `tokens` the rewrite that replaced it starts, and the
text that was dropped). The first `per_step` episodes (by task and sample) and every traced one
are written; the token-level view (`uni_agent_core/viewer/`) reads these files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from uni_agent_core.types import RolloutResult, Trajectory


def render(trajectory: Trajectory, tokenizer: Any) -> dict[str, Any]:
    """One chain for people: the decoded prompt, trainable/context segments and its tokens."""
    segments = []
    position = 0
    for trainable, run in groupby(trajectory.loss_mask):
        length = len(list(run))
        ids = trajectory.response_ids[position : position + length]
        segments.append({"trainable": bool(trainable), "text": tokenizer.decode(ids)})
        position += length
    return {
        "chain_id": trajectory.chain_id,
        "opened_by": trajectory.metadata.get("opened_by", "unknown"),
        "prompt": tokenizer.decode(trajectory.prompt_ids),
        "segments": segments,
        "trainable_tokens": trajectory.trainable_tokens,
        "policy_versions": sorted(set(v for v in trajectory.policy_versions if v >= 0)),
        "tokens": {
            "ids": trajectory.response_ids,
            "text": [tokenizer.decode([token]) for token in trajectory.response_ids],
            "mask": trajectory.loss_mask,
            "logprob": [round(value, 4) for value in trajectory.logprobs],
            "version": trajectory.policy_versions,
        },
    }


def _rollbacks(result: RolloutResult, trajectory: Trajectory, tokenizer: Any) -> list[dict]:
    calls = {call.index: call for call in result.calls}
    marks = []
    for mark in trajectory.metadata.get("rollback_marks", []):
        call = calls.get(mark["call"])
        dropped = call.dropped_ids if call is not None else []
        marks.append(
            {
                "at": mark["at"],
                "dropped_text": tokenizer.decode(dropped),
                "dropped_tokens": len(dropped),
            }
        )
    return marks


def write_samples(
    results: Sequence[RolloutResult],
    step: int,
    directory: Path,
    per_step: int,
    tokenizer: Any,
    traces: Mapping[tuple[str, int], str] | None = None,
) -> Path | None:
    """Write the step's first `per_step` episodes and every episode in `traces` (their trace
    ids by (task, sample)); returns the file (None when none was written)."""
    traces = traces or {}
    ordered = sorted(results, key=lambda r: (r.task_id, r.sample_index))
    chosen = [
        result
        for i, result in enumerate(ordered)
        if i < per_step or (result.task_id, result.sample_index) in traces
    ]
    if not chosen:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"step-{step:06d}.jsonl"
    with target.open("w") as handle:
        for result in chosen:
            episode = {
                "task_id": result.task_id,
                "sample_index": result.sample_index,
                "reward": result.reward,
                "exit_reason": result.exit_reason.value,
                "harness": result.harness,
                "group_id": result.group_id,
                "level": result.task_level,
                "resolved": result.resolved,
                "trace_id": traces.get((result.task_id, result.sample_index)),
            }
            for trajectory in result.trajectories:
                row = {
                    **episode,
                    **render(trajectory, tokenizer),
                    "rollbacks": _rollbacks(result, trajectory, tokenizer),
                }
                handle.write(json.dumps(row) + "\n")
    return target
