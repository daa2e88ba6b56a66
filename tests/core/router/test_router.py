"""`Router`: an Engine over replicas — routing, bookkeeping, failover, health, broadcast."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from uni_agent_core.inference.types import (
    Engine,
    EngineDefaults,
    EngineStats,
    FinishReason,
    GenerateRequest,
    TokenOutput,
)
from uni_agent_core.router.policies import make_policy
from uni_agent_core.router.router import Router, RouterError


class FakeReplica(EngineDefaults):
    """An engine double that echoes, records what it served, and can be made to fail."""

    def __init__(self, name: str, delay_s: float = 0.0) -> None:
        self.name, self.delay_s = name, delay_s
        self.failing = False
        self.served: list[str] = []
        self.attempts: list[str] = []
        self.versions: list[int] = []
        self.paused = False
        self.closed = False
        self.cached = 0
        """Prompt tokens it reports serving from its prefix cache, per request."""

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        self.attempts.append(request.request_id)
        await asyncio.sleep(self.delay_s)
        if self.failing:
            raise ConnectionError(f"{self.name} is down")
        self.served.append(request.request_id)
        tokens = [7, 8, 9][: request.max_new_tokens]
        return TokenOutput(
            request_id=request.request_id,
            token_ids=tokens,
            logprobs=[-0.1] * len(tokens),
            finish_reason=FinishReason.LENGTH,
            policy_version=[0] * len(tokens),
            prompt_tokens=len(request.prompt_ids),
            cached_prefix_tokens=self.cached,
        )

    async def update_weights(self, state: Any, version: int) -> None:
        self.versions.append(version)

    async def pause(self, mode: str = "keep") -> None:
        self.paused = True

    async def resume(self) -> None:
        self.paused = False

    def stats(self) -> EngineStats:
        return EngineStats(running_requests=0, paused=self.paused, free_kv_tokens=1000)

    async def close(self) -> None:
        self.closed = True


def _request(session: str, prompt: list[int], rid: str) -> GenerateRequest:
    return GenerateRequest(prompt_ids=prompt, max_new_tokens=3, session_id=session, request_id=rid)


def test_router_is_an_engine_and_books_then_releases_every_dispatch() -> None:
    replicas = [FakeReplica("a"), FakeReplica("b")]
    router = Router(
        replicas, make_policy("token_load"), kv_capacity_tokens=10_000, max_tracked_sessions=8
    )
    assert isinstance(router, Engine)
    assert router.core.placements.capacity == 8
    for replica in replicas:
        replica.cached = 3

    async def main() -> None:
        out = await router.generate(_request("s", [1, 2, 3, 4], "r1"))
        assert out.token_ids == [7, 8, 9]
        # The next turn extends the context: token_load sends it where the prefix is cached.
        await router.generate(_request("s", [1, 2, 3, 4, 7, 8, 9, 5], "r2"))
        await router.close()

    asyncio.run(main())
    assert [len(r.served) for r in replicas] in ([2, 0], [0, 2])
    for view in router.core.replicas:
        assert (view.in_flight, view.queued_tokens, view.active_kv_tokens) == (0, 0, 0)
    home = router.core.replicas[0 if replicas[0].served else 1]
    assert home.tree.match([1, 2, 3, 4, 7, 8, 9, 5, 7, 8, 9], touch=False) == 11
    assert router.core.counters.expected_cached_tokens == 7
    counters = router.core.counters
    assert (counters.completed_prompt_tokens, counters.completed_cached_tokens) == (12, 6)
    assert counters.completed_expected_cached_tokens == 7
    stats = router.stats().extra
    assert (stats["router"]["session_placements"], stats["router"]["session_moves"]) == (1, 0)
    assert sorted(r["sessions_placed"] for r in stats["replicas"]) == [0, 1]
    assert all(r.closed for r in replicas)


def test_a_failing_replica_is_drained_and_no_request_is_lost_or_duplicated() -> None:
    replicas = [FakeReplica(name, delay_s=0.001) for name in "abc"]
    router = Router(replicas, make_policy("round_robin"), unhealthy_after_failures=2)
    replicas[1].failing = True

    async def main() -> list[TokenOutput]:
        calls = [_request(f"s{i}", [i, i + 1], f"req-{i}") for i in range(30)]
        return await asyncio.gather(*(router.generate(call) for call in calls))

    outputs = asyncio.run(main())
    assert sorted(o.request_id for o in outputs) == sorted(f"req-{i}" for i in range(30))
    served = Counter(rid for r in replicas for rid in r.served)
    assert set(served) == {f"req-{i}" for i in range(30)} and set(served.values()) == {1}
    assert replicas[1].served == []
    assert not router.core.replicas[1].healthy
    # Once drained, the failed replica gets no more attempts.
    attempts_before = len(replicas[1].attempts)
    asyncio.run(router.generate(_request("late", [5], "late")))
    assert len(replicas[1].attempts) == attempts_before
    assert router.core.counters.ejected == 1
    assert router.core.counters.retried == attempts_before


def test_health_checks_eject_a_dead_replica_and_readmit_it_after_recovery() -> None:
    replicas = [FakeReplica("a"), FakeReplica("b")]
    router = Router(replicas, make_policy("least_requests"), unhealthy_after_failures=2)

    async def main() -> None:
        replicas[0].failing = True
        await router.check_health()
        assert router.core.replicas[0].healthy  # one failed probe is not enough
        await router.check_health()
        assert not router.core.replicas[0].healthy
        for i in range(4):
            await router.generate(_request(f"s{i}", [i], f"q{i}"))
        assert replicas[0].served == []
        replicas[0].failing = False
        await router.check_health()
        assert router.core.replicas[0].healthy
        assert router.core.replicas[0].reported_free_kv_tokens == 1000

    asyncio.run(main())
    assert router.core.counters.readmitted == 1


def test_when_every_replica_fails_the_error_names_it() -> None:
    replicas = [FakeReplica("a"), FakeReplica("b")]
    for replica in replicas:
        replica.failing = True
    router = Router(replicas, make_policy("sticky"))
    with pytest.raises(RouterError, match="no healthy replica left for request x"):
        asyncio.run(router.generate(_request("s", [1], "x")))
    assert [r.attempts for r in replicas] == [["x"], ["x"]]


def test_weight_updates_pause_and_resume_reach_every_replica_and_reset_residency() -> None:
    replicas = [FakeReplica("a"), FakeReplica("b")]
    router = Router(replicas, make_policy("token_load"), kv_capacity_tokens=1000)

    async def main() -> None:
        await router.generate(_request("s", [1, 2, 3], "r"))
        assert sum(view.tree.size for view in router.core.replicas) == 6
        await router.pause()
        assert router.stats().paused
        await router.update_weights({}, 3)
        await router.resume()

    asyncio.run(main())
    assert [r.versions for r in replicas] == [[3], [3]]
    assert sum(view.tree.size for view in router.core.replicas) == 0
    stats = router.stats()
    assert not stats.paused and stats.free_kv_tokens == 2000
    assert stats.extra["router_policy"] == "token_load"
    assert [r["name"] for r in stats.extra["replicas"]] == ["replica-0", "replica-1"]


def test_a_cancelled_request_releases_its_booking_without_blame() -> None:
    slow = FakeReplica("slow", delay_s=10)
    router = Router([slow, FakeReplica("b")], make_policy("round_robin"))

    async def main() -> None:
        task = asyncio.create_task(router.generate(_request("s", [1, 2], "c")))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    view = router.core.replicas[0]
    assert (view.in_flight, view.queued_tokens, view.consecutive_failures) == (0, 0, 0)
    assert view.healthy


def test_probes_ask_remote_replicas_for_their_free_kv_before_reconciling() -> None:
    class RemoteReplica(FakeReplica):
        def __init__(self, name: str, free: int) -> None:
            super().__init__(name)
            self.free, self.refreshed = free, 0

        async def refresh_server_stats(self) -> int:
            self.refreshed += 1
            return self.free

        def stats(self) -> EngineStats:
            return EngineStats(free_kv_tokens=self.free if self.refreshed else None)

    replicas = [RemoteReplica("a", 900), RemoteReplica("b", 50)]
    router = Router(replicas, make_policy("token_load"), kv_capacity_tokens=1000)
    asyncio.run(router.check_health())
    assert [r.refreshed for r in replicas] == [1, 1]
    assert [view.reported_free_kv_tokens for view in router.core.replicas] == [900, 50]
    # Replica b is under memory pressure (5% free): new work goes to a.
    outputs = [asyncio.run(router.generate(_request(f"s{i}", [i], f"q{i}"))) for i in range(3)]
    assert len(outputs) == 3
    assert [rid for rid in replicas[1].served if rid.startswith("q")] == []  # (b answered a probe)


def test_a_replica_without_a_configured_capacity_is_sized_by_what_it_reports() -> None:
    class SizedReplica(FakeReplica):
        def __init__(self, name: str, capacity: int | None) -> None:
            super().__init__(name)
            self.capacity = capacity

        def stats(self) -> EngineStats:
            return EngineStats(free_kv_tokens=self.capacity, kv_capacity_tokens=self.capacity)

    replicas = [SizedReplica("a", 40), SizedReplica("b", 40), SizedReplica("c", None)]
    router = Router(replicas, make_policy("sticky"), kv_capacity_tokens=[None, 30, None])

    async def main() -> None:
        for i, session in enumerate(["s", "t", "u"] * 5):  # sticky: one session per replica
            await router.generate(_request(session, list(range(100 * i, 100 * i + 20)), f"r{i}"))
        await router.check_health()

    asyncio.run(main())
    a, b, c = router.core.replicas
    # a: nothing configured, 40 reported: adopted, and its model evicted down to it.
    assert (a.kv_capacity_tokens, a.tree.capacity_tokens, a.tree.size) == (40, 40, 40)
    # b: the recipe's 30 stands; c: no figure anywhere, so it stays unbounded.
    assert (b.kv_capacity_tokens, b.tree.size) == (30, 30)
    assert (c.kv_capacity_tokens, c.tree.capacity_tokens, c.tree.size) == (None, None, 115)
    assert router.stats().kv_capacity_tokens is None  # c does not know its capacity
    # A new model after a weight update, and a re-admission, keep the learned capacity.
    asyncio.run(router.update_weights({}, 1))
    assert router.core.replicas[0].tree.capacity_tokens == 40
    router.core.eject(0)
    router.core.readmit(0)
    assert router.core.replicas[0].tree.capacity_tokens == 40
    # A lendable replica (never probed) is sized when it is added: by what it reports, or by
    # the capacity the router was given for every replica.
    assert (
        router.core.replicas[router.add_lendable(SizedReplica("t", 25), "t")].tree.capacity_tokens
        == 25
    )
    shared = Router([SizedReplica("x", 40)], make_policy("sticky"), kv_capacity_tokens=10)
    assert (
        shared.core.replicas[shared.add_lendable(SizedReplica("t", 25), "t")].kv_capacity_tokens
        == 10
    )
    sized = Router([SizedReplica("x", 40), SizedReplica("y", 60)], make_policy("sticky"))
    assert sized.stats().kv_capacity_tokens == 100


def test_a_lendable_replica_serves_only_while_lent_and_reclaim_drains_it() -> None:
    rollout, trainer = FakeReplica("rollout"), FakeReplica("trainer", delay_s=0.05)
    router = Router([rollout], make_policy("least_requests"), health_check_interval_s=0.01)
    index = router.add_lendable(trainer, "trainer")

    async def main() -> None:
        # Parked: never routed to, never probed (the trainer may be mid-update).
        await asyncio.gather(*(router.generate(_request(f"s{i}", [i], f"a{i}")) for i in range(4)))
        await router.check_health()
        assert trainer.attempts == [] and rollout.served
        router.lend(index)
        lent = [router.generate(_request(f"t{i}", [i], f"b{i}")) for i in range(6)]
        batch = asyncio.gather(*lent)
        await asyncio.sleep(0.01)  # some requests are now in flight on the trainer
        drained_s = await router.reclaim(index)
        # Reclaim returned only after the trainer's requests finished; none were lost.
        assert router.core.replicas[index].in_flight == 0 and drained_s > 0
        await batch
        served_while_lent = len(trainer.served)
        await router.generate(_request("late", [9], "c0"))
        await router.check_health()
        assert len(trainer.served) == served_while_lent > 0
        assert len(trainer.attempts) == served_while_lent  # no probe touched it
        await router.close()

    asyncio.run(main())
    assert router.lends == 1 and router.core.replicas[index].parked
    counters = router.core.counters
    assert (counters.parked, counters.unparked) == (1, 1)
    assert (counters.ejected, counters.readmitted) == (0, 0)  # lending is not a health event
