"""Load control: live-context tracking, `token_load`'s deferral rule, and the callers that hold
a request back (the routing core, the async `Router`, the simulator)."""

from __future__ import annotations

import asyncio
import time

import pytest
from test_router import FakeReplica, _request

from uni_agent_core.config.inference import RouterConfig
from uni_agent_core.inference.types import EngineClosedError, GenerateRequest, TokenOutput
from uni_agent_core.router.build import router_over
from uni_agent_core.router.core import RoutingCore
from uni_agent_core.router.load_control import LiveContexts
from uni_agent_core.router.policies import ReplicaLoad, RouteRequest, TokenLoad, make_policy
from uni_agent_core.router.prefix_tree import PrefixTree
from uni_agent_core.router.router import Router
from uni_agent_core.router.sim import VLLM_H200, WORKLOADS, RunMetrics, simulate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_live_contexts_sum_the_latest_context_of_each_session() -> None:
    live = LiveContexts(capacity=3, window_s=100.0, clock=Clock())
    live.start("a", 1_000)
    live.start("b", 500)
    live.finish("a", 1_200)  # a's request completed: its context grew, replaced, not added
    assert (live.total(), len(live)) == (1_700, 2)
    live.finish("b", None)  # b's request failed: its context is unchanged
    assert live.total() == 1_700
    live.finish("never-seen", 99)
    live.end("b")
    live.end("never-seen")
    assert live.total() == 1_200
    live.start("b", 10)  # an ended session is not counted again
    assert ("b" in live, live.ended("b")) == (False, True)
    live.start("c", 20)
    live.start("d", 30)
    live.start("e", 40)  # over capacity: "a", the least recently updated, leaves
    assert (live.total(), len(live)) == (90, 3)
    live.clear()
    assert (live.total(), len(live)) == (0, 0)


def test_a_session_leaves_the_working_set_after_the_window_unless_a_request_runs() -> None:
    clock = Clock()
    live = LiveContexts(window_s=100.0, clock=clock)
    live.start("paused", 5_000)
    live.finish("paused", 5_000)
    live.start("long-request", 30_000)  # still running when the window has passed
    clock.now = 60.0
    live.start("busy", 1_000)
    clock.now = 100.0
    assert live.total() == 36_000  # exactly window_s: still in the working set
    clock.now = 120.0
    assert live.total() == 31_000  # "paused" left; the running request keeps its session
    clock.now = 500.0
    live.finish("long-request", 30_100)
    assert live.total() == 31_100  # "busy" is in flight too
    with pytest.raises(ValueError, match="window_s"):
        LiveContexts(window_s=0)
    with pytest.raises(ValueError, match="capacity"):
        LiveContexts(capacity=0)


def _replicas(n: int, capacity: int | None) -> list[ReplicaLoad]:
    return [
        ReplicaLoad(index=i, name=f"r{i}", tree=PrefixTree(capacity), kv_capacity_tokens=capacity)
        for i in range(n)
    ]


def test_token_load_defers_an_uncached_long_context_only_when_the_cluster_is_overcommitted() -> (
    None
):
    policy = TokenLoad(defer_overcommit=0.9, defer_uncached_tokens=100)
    replicas = _replicas(2, capacity=1_000)  # 2,000 KV tokens in all
    replicas[0].in_flight = 1  # work in flight, which holding a request lets finish
    context = list(range(500))
    request = RouteRequest("r", context, 10, "s")
    assert not policy.defer(request, replicas, live_context_tokens=1_800)  # not above 90%
    assert policy.defer(request, replicas, live_context_tokens=1_801)
    # Cached on one replica (all but 60 tokens): sent at once, it evicts little.
    replicas[1].tree.insert(context[:440])
    assert not policy.defer(request, replicas, live_context_tokens=5_000)
    # A short prompt takes little KV: never held.
    assert not policy.defer(RouteRequest("r", list(range(1_000, 1_090)), 10), replicas, 5_000)
    # Nothing in flight: waiting would free nothing.
    assert not policy.defer(request, _replicas(2, capacity=1_000), live_context_tokens=10**9)
    # Unknown capacity, or load control off: never held.
    unknown = _replicas(2, capacity=None)
    unknown[0].in_flight = 1
    assert not policy.defer(request, unknown, live_context_tokens=10**9)
    off = TokenLoad(defer_overcommit=0.0)
    assert not off.defer(request, replicas, live_context_tokens=10**9)
    for name in ("round_robin", "least_requests", "sticky", "cache_aware"):
        assert not make_policy(name).defer(request, replicas, 10**9)
    with pytest.raises(ValueError, match="defer_overcommit"):
        TokenLoad(defer_overcommit=-1)


def _core(clock: Clock, **options: float) -> RoutingCore:
    return RoutingCore(
        make_policy("token_load", defer_uncached_tokens=100),
        ["r0", "r1"],
        kv_capacity_tokens=1_000,
        clock=clock,
        **options,  # type: ignore[arg-type]
    )


def _fill(core: RoutingCore) -> None:
    """Two sessions whose contexts fill the cluster (2 x 950 tokens > 90% of 2,000): "a" has
    finished its request, "b" is still generating."""
    done = core.route(RouteRequest("a/0", list(range(900)), 50, "a"))
    core.complete(done, [1] * 50)
    core.route(RouteRequest("b/0", list(range(10_000, 10_900)), 50, "b"))
    assert core.live.total() == 1_900  # prompt + output, prompt + expected decode


def _newcomer() -> RouteRequest:
    return RouteRequest("c/0", list(range(20_000, 20_400)), 10, "c")


def test_the_core_tracks_live_contexts_and_holds_until_max_defer_s() -> None:
    core = _core(Clock(), max_defer_s=60.0)
    _fill(core)
    assert core.should_defer(_newcomer(), waited_s=0.0)
    assert core.should_defer(_newcomer(), waited_s=59.0)
    assert not core.should_defer(_newcomer(), waited_s=60.0)  # waited long enough: sent anyway
    assert (core.counters.deferrals, core.counters.defer_timeouts) == (2, 1)
    # A session ends: the cluster has room again, and its placement is forgotten.
    core.end_session("a")
    assert core.live.total() == 950
    assert core.placements.get("a") is None
    assert not core.should_defer(_newcomer())
    assert core.counters.deferrals == 2


def test_nothing_is_held_with_no_work_in_flight_after_new_weights_or_with_no_wait() -> None:
    core = _core(Clock())
    _fill(core)
    core.invalidate_caches()  # new weights: no context is cached, none counts as live
    assert core.live.total() == 0 and not core.should_defer(_newcomer())
    idle = _core(Clock())
    for session, base in (("a", 0), ("b", 10_000)):  # both finished: nothing to wait for
        done = idle.route(RouteRequest(f"{session}/0", list(range(base, base + 900)), 50, session))
        idle.complete(done, [1] * 50)
    assert idle.live.total() == 1_900 and not idle.should_defer(_newcomer())
    never = _core(Clock(), max_defer_s=0.0)
    _fill(never)
    assert not never.should_defer(_newcomer())
    assert (never.counters.deferrals, never.counters.defer_timeouts) == (0, 0)


def test_an_ended_session_is_not_counted_again_by_its_request_or_a_retry() -> None:
    core = _core(Clock())
    dispatch = core.route(RouteRequest("a/0", list(range(300)), 10, "a"))
    core.end_session("a")
    core.complete(dispatch, [1] * 10)
    assert core.live.total() == 0
    core.fail(core.route(RouteRequest("a/1", list(range(320)), 10, "a")))
    core.route(RouteRequest("a/1", list(range(320)), 10, "a"), exclude=[0])  # the retry
    assert ("a" in core.live, core.placements.get("a")) == (False, None)
    assert core.live.total() == 0


class GatedReplica(FakeReplica):
    """Holds every request of session "busy" until `gate` is set (work in flight)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate = asyncio.Event()

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        if request.session_id == "busy":
            await self.gate.wait()
        return await super().generate(request)


def _router(*, retry_s: float, max_defer_s: float) -> Router:
    """Two 1,000-token replicas; prompts with over 100 tokens cached nowhere can be held."""
    return Router(
        [GatedReplica("r0"), GatedReplica("r1")],
        make_policy("token_load", defer_uncached_tokens=100),
        kv_capacity_tokens=1_000,
        defer_retry_s=retry_s,
        max_defer_s=max_defer_s,
    )


async def _overcommit(router: Router) -> asyncio.Future[TokenOutput]:
    """Session "done" (1,003 tokens) finished; session "busy" (1,003) is generating."""
    await router.generate(_request("done", list(range(1_000)), "done/0"))
    busy = asyncio.ensure_future(router.generate(_request("busy", list(range(5_000, 6_000)), "b")))
    await asyncio.sleep(0.01)
    assert router.core.live.total() > 1_800
    return busy


def _release(router: Router) -> None:
    for replica in router.engines:
        replica.gate.set()  # type: ignore[attr-defined]


def test_the_router_holds_a_request_until_a_session_ends() -> None:
    router = _router(retry_s=0.02, max_defer_s=30.0)

    async def main() -> float:
        busy = await _overcommit(router)
        started = time.monotonic()
        held = asyncio.ensure_future(
            router.generate(_request("c", list(range(9_000, 9_400)), "c/0"))
        )
        await asyncio.sleep(0.1)
        assert not held.done() and router.core.counters.deferrals >= 2
        router.end_session("done")
        await held
        waited = time.monotonic() - started
        _release(router)
        await busy
        await router.close()
        return waited

    waited = asyncio.run(main())
    assert 0.1 <= waited < 5.0
    assert sum(len(r.served) for r in router.engines) == 3  # type: ignore[attr-defined]
    assert router.core.counters.defer_timeouts == 0


def test_the_router_sends_a_held_request_after_max_defer_s() -> None:
    router = _router(retry_s=0.01, max_defer_s=0.05)

    async def main() -> None:
        busy = await _overcommit(router)
        await router.generate(_request("c", list(range(9_000, 9_400)), "c/0"))
        _release(router)
        await busy
        await router.close()

    asyncio.run(main())
    assert router.core.counters.defer_timeouts == 1
    assert router.core.counters.deferrals >= 1


def test_closing_the_router_ends_a_held_request() -> None:
    router = _router(retry_s=0.02, max_defer_s=30.0)

    async def main() -> None:
        busy = await _overcommit(router)
        held = asyncio.ensure_future(
            router.generate(_request("c", list(range(9_000, 9_400)), "c/0"))
        )
        await asyncio.sleep(0.05)
        _release(router)
        await busy
        await router.close()
        with pytest.raises(EngineClosedError, match="held"):
            await held

    asyncio.run(main())


def test_the_simulator_holds_requests_back_and_still_serves_each_once() -> None:
    """A small cluster overcommitted by long agent contexts: load control holds requests back;
    every request is still served exactly once."""
    profile = VLLM_H200.with_capacity(40_000)
    workload = WORKLOADS["swe"].with_max_turns(6)

    def run(**options: float) -> RunMetrics:
        return simulate(
            profile, "token_load", workload, 16, replicas=2, seed=3, policy_options=options
        )

    held, free = run(defer_uncached_tokens=1_000), run(defer_overcommit=0.0)
    assert held.deferrals > 0 and free.deferrals == 0
    assert held.requests == free.requests
    assert held.output_tokens == free.output_tokens


def test_the_recipe_sets_load_control() -> None:
    config = RouterConfig(
        defer_overcommit=0.5,
        defer_uncached_tokens=2_048,
        defer_retry_s=2.0,
        max_defer_s=60.0,
        working_set_s=120.0,
    )
    router = router_over([FakeReplica("a"), FakeReplica("b")], config, ["a", "b"])
    assert isinstance(router, Router)
    policy = router.core.policy
    assert isinstance(policy, TokenLoad)
    assert (policy.defer_overcommit, policy.defer_uncached_tokens) == (0.5, 2_048)
    core = router.core
    assert (core.defer_retry_s, core.max_defer_s, core.live.window_s) == (2.0, 60.0, 120.0)
    with pytest.raises(ValueError):
        RouterConfig(defer_retry_s=0)
