"""What one simulated rollout batch measured, and how it is summarised.

Definitions (all from the replicas' ground truth, not the router's estimates):

- throughput: output tokens of the batch / makespan (tokens/s);
- throughput p90: 90% of the batch's output tokens / the time by which requests finished had
  produced them. It leaves out the straggler tail: a batch's makespan is set by its longest
  sessions, largely by their long tool pauses, which no routing changes;
- makespan: from the start of the batch to the last response of its last session;
- prefill tokens: prompt tokens the replicas computed, recomputation after preemption included;
- cache hit rate: prompt tokens served from a replica's prefix cache when the request was first
  admitted / all prompt tokens;
- request latency: from a request's arrival at the router to its last token (p50, p99);
- load imbalance: max / mean of the replicas' busy time (1.0 is perfectly even);
- sessions placed per replica: requests that brought a session to a replica (its first, or one
  that moved it from another replica; `RoutingCore`'s `sessions_placed`);
- KV demand: the peak over time of the live sessions' context tokens / the cluster's KV capacity
  (above 1: the cluster cannot hold every session's context, so caching is memory-bound).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) by linear interpolation; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class RunMetrics:
    """One policy on one workload at one load level."""

    policy: str
    workload: str
    profile: str
    replicas: int
    sessions: int
    seed: int
    requests: int
    output_tokens: int
    makespan_s: float
    throughput_tok_s: float
    throughput_p90_tok_s: float
    prompt_tokens: int
    cached_tokens: int
    prefill_tokens: int
    cache_hit_rate: float
    latency_p50_s: float
    latency_p99_s: float
    ttft_p50_s: float
    imbalance: float
    evicted_tokens: int
    preemptions: int
    kv_demand: float
    deferrals: int = 0
    """Times load control held a request back (`RoutingCore.should_defer`)."""
    defer_timeouts: int = 0
    """Requests sent after `max_defer_s` although load control still held them."""
    busy_s: list[float] = field(default_factory=list)
    sessions_placed_per_replica: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


def imbalance(busy: Sequence[float]) -> float:
    """max / mean of per-replica busy time (1.0 when even or idle)."""
    mean = sum(busy) / len(busy) if busy else 0.0
    return max(busy) / mean if mean > 0 else 1.0
