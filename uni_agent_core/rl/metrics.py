"""Per-step statistics of a batch of episodes, under the metric names the run logs.

Names are a contract with MLflow dashboards and the published comparisons: `train/reward_mean`,
`train/pass_rate`, `train/zero_std_group_frac`, `train/response_tokens_mean`, `train/turns_mean`,
`train/exit/<reason>` (fraction of episodes), `train/staleness_mean|max`, and
`train/multi_version_frac` (chains whose sampled tokens span several policy versions: partial
rollouts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from uni_agent_core.types import ExitReason, RolloutResult


def group_by_task(results: Sequence[RolloutResult]) -> dict[str, list[RolloutResult]]:
    groups: dict[str, list[RolloutResult]] = defaultdict(list)
    for result in results:
        groups[result.task_id].append(result)
    return dict(groups)


def zero_variance_tasks(results: Sequence[RolloutResult]) -> set[str]:
    """Tasks whose group has a single distinct reward (their advantages are all zero)."""
    return {
        task
        for task, group in group_by_task(results).items()
        if len({result.reward for result in group}) == 1
    }


def episode_metrics(results: Sequence[RolloutResult], trainer_version: int) -> dict[str, float]:
    """Reward, pass rate, exits, lengths and staleness of one step's episodes."""
    if not results:
        return {}
    n = len(results)
    groups = group_by_task(results)
    metrics = {
        "train/reward_mean": sum(r.reward for r in results) / n,
        "train/pass_rate": sum(r.resolved for r in results) / n,
        "train/zero_std_group_frac": len(zero_variance_tasks(results)) / len(groups),
        "train/response_tokens_mean": sum(r.sampled_tokens for r in results) / n,
        "train/turns_mean": sum(r.turns for r in results) / n,
        "train/leak_frac": sum(r.leak_flagged for r in results) / n,
        "train/episodes": float(n),
    }
    for reason in ExitReason:
        metrics[f"train/exit/{reason.value}"] = sum(r.exit_reason is reason for r in results) / n
    spans = [span for r in results for t in r.trajectories if (span := t.version_span) is not None]
    if spans:
        metrics["train/multi_version_frac"] = sum(s[1] > s[0] for s in spans) / len(spans)
    staleness = [
        trainer_version - oldest for r in results if (oldest := r.oldest_version) is not None
    ]
    if staleness:
        metrics["train/staleness_mean"] = sum(staleness) / len(staleness)
        metrics["train/staleness_max"] = float(max(staleness))
    return metrics
