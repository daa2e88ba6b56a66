"""The step's routing figures, from a router's counters at the step's start and end."""

from __future__ import annotations

import pytest

from uni_agent_core.rl.metrics import router_step_metrics
from uni_agent_core.router.core import RoutingCore
from uni_agent_core.router.policies import RouteRequest, make_policy


def test_router_step_metrics_are_the_steps_deltas() -> None:
    core = RoutingCore(make_policy("token_load"), ["a", "b"], kv_capacity_tokens=10_000)
    earlier = core.route(RouteRequest("old", list(range(100)), 8, "s"))
    core.complete(earlier, [1] * 8, cached_tokens=0)
    before = vars(core.counters).copy()
    prompt = [*range(100), *[1] * 8, *range(500, 592)]  # 108 tokens cached there, 92 new
    dispatch = core.route(RouteRequest("new", prompt, 8, "s"))
    core.complete(dispatch, [2] * 8, cached_tokens=96)  # the engine caches whole blocks only
    core.fail(core.route(RouteRequest("lost", [7] * 40, 8, "t")))  # counts only as a failure
    metrics = router_step_metrics(before, vars(core.counters))
    assert metrics["router/prompt_tokens"] == 200
    assert metrics["router/cache_hit_rate"] == pytest.approx(96 / 200)
    assert metrics["router/expected_cache_hit_rate"] == pytest.approx(108 / 200)
    assert (metrics["router/failed"], metrics["router/session_moves"]) == (1, 0)
    assert (metrics["router/deferrals"], metrics["router/defer_timeouts"]) == (0, 0)
    # A step in which nothing was routed reports counts of zero and no rates.
    idle = router_step_metrics(vars(core.counters), vars(core.counters))
    assert "router/cache_hit_rate" not in idle
    assert idle["router/retried"] == 0
