"""Per-step statistics of a batch of episodes, under the metric names the run logs.

Names are a contract with MLflow dashboards and the published comparisons: `train/reward_mean`,
`train/pass_rate`, `train/zero_std_group_frac`, `train/response_tokens_mean`, `train/turns_mean`,
`train/exit/<reason>` (fraction of episodes), `train/staleness_mean|max`, and
`train/multi_version_frac` (chains whose sampled tokens span several policy versions: partial
rollouts), and per harness (`RolloutResult.harness`: its type, or its name in a `mix`)
`train/harness/<name>/reward_mean|pass_rate|episodes|turns_mean|response_tokens_mean` and
`train/harness/<name>/exit/<reason>`. With several inference replicas behind a `Router`, the
step's routing:
`router/prompt_tokens` (prompt tokens of the requests completed during the step),
`router/cache_hit_rate` (the share of them the replicas report serving from their prefix cache),
`router/expected_cache_hit_rate` (the share the router's residency model expected when it routed
them), `router/session_moves`, `router/sessions_displaced`, `router/retried`, `router/failed`,
`router/deferrals` and `router/defer_timeouts` (counts over the step; the last two are the
router's load control, `router/load_control.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from uni_agent_core.types import ExitReason, RolloutResult


def group_episodes(results: Sequence[RolloutResult]) -> dict[str, list[RolloutResult]]:
    """Episodes by the GRPO group they were launched in (`RolloutResult.group_key`)."""
    groups: dict[str, list[RolloutResult]] = defaultdict(list)
    for result in results:
        groups[result.group_key].append(result)
    return dict(groups)


def zero_variance_groups(results: Sequence[RolloutResult]) -> set[str]:
    """Groups with a single distinct reward (their advantages are all zero)."""
    return {
        key
        for key, group in group_episodes(results).items()
        if len({result.reward for result in group}) == 1
    }


def episode_metrics(results: Sequence[RolloutResult], trainer_version: int) -> dict[str, float]:
    """Reward, pass rate, exits, lengths and staleness of one step's episodes."""
    if not results:
        return {}
    n = len(results)
    groups = group_episodes(results)
    metrics = {
        "train/reward_mean": sum(r.reward for r in results) / n,
        "train/pass_rate": sum(r.resolved for r in results) / n,
        "train/zero_std_group_frac": len(zero_variance_groups(results)) / len(groups),
        "train/response_tokens_mean": sum(r.sampled_tokens for r in results) / n,
        "train/turns_mean": sum(r.turns for r in results) / n,
        "train/leak_frac": sum(r.leak_flagged for r in results) / n,
        "train/episodes": float(n),
    }
    for reason in ExitReason:
        metrics[f"train/exit/{reason.value}"] = sum(r.exit_reason is reason for r in results) / n
    metrics.update(harness_metrics(results))
    metrics.update(task_env_metrics(results))
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


def harness_metrics(results: Sequence[RolloutResult]) -> dict[str, float]:
    """Reward, pass rate, turns, tokens and exits of each harness's episodes."""
    return _metrics_by(results, "train/harness", lambda result: result.harness)


def task_env_metrics(results: Sequence[RolloutResult]) -> dict[str, float]:
    """The same of each kind of task's episodes (`train/task_env/swe/...`, `.../shell/...`)."""
    return _metrics_by(results, "train/task_env", lambda result: result.task_env)


def _metrics_by(
    results: Sequence[RolloutResult], root: str, name_of: Callable[[RolloutResult], str]
) -> dict[str, float]:
    groups: dict[str, list[RolloutResult]] = defaultdict(list)
    for result in results:
        if name_of(result):
            groups[name_of(result)].append(result)
    metrics: dict[str, float] = {}
    for name, episodes in sorted(groups.items()):
        n, prefix = len(episodes), f"{root}/{name}"
        metrics[f"{prefix}/episodes"] = float(n)
        metrics[f"{prefix}/reward_mean"] = sum(r.reward for r in episodes) / n
        metrics[f"{prefix}/pass_rate"] = sum(r.resolved for r in episodes) / n
        metrics[f"{prefix}/turns_mean"] = sum(r.turns for r in episodes) / n
        metrics[f"{prefix}/response_tokens_mean"] = sum(r.sampled_tokens for r in episodes) / n
        for reason in ExitReason:
            share = sum(r.exit_reason is reason for r in episodes) / n
            metrics[f"{prefix}/exit/{reason.value}"] = share
    return metrics


def sandbox_step_metrics(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """The step's sandbox starts, from the run pool's `PoolStats` at its start and its end:
    attempts, failures, retries and sandboxes given up on (their episodes end with
    `sandbox_error`) during the step, and the most starts in flight at once so far."""
    metrics = {
        f"sandbox/{key}": float(after[key] - before.get(key, 0))
        for key in ("start_attempts", "start_failures", "retries", "exhausted")
    }
    metrics["sandbox/starting_peak"] = float(after["starting_peak"])
    return metrics


def router_step_metrics(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """The step's routing, from the `RouterCounters` at its start and at its end."""
    delta = {key: after[key] - before.get(key, 0) for key in after}
    metrics = {
        f"router/{key}": float(delta[key])
        for key in (
            "session_moves",
            "sessions_displaced",
            "retried",
            "failed",
            "deferrals",
            "defer_timeouts",
        )
    }
    prompt = delta["completed_prompt_tokens"]
    if prompt > 0:
        metrics["router/prompt_tokens"] = float(prompt)
        metrics["router/cache_hit_rate"] = delta["completed_cached_tokens"] / prompt
        metrics["router/expected_cache_hit_rate"] = (
            delta["completed_expected_cached_tokens"] / prompt
        )
    return metrics
