"""Session placements: the routing core remembers each session's replica, in bounded memory."""

from __future__ import annotations

import pytest

from uni_agent_core.router.affinity import SessionPlacements
from uni_agent_core.router.core import RoutingCore
from uni_agent_core.router.policies import RouteRequest, make_policy


def _core(policy: str = "sticky", replicas: int = 3, max_sessions: int = 1_000) -> RoutingCore:
    return RoutingCore(
        make_policy(policy),
        [f"r{i}" for i in range(replicas)],
        kv_capacity_tokens=100_000,
        max_tracked_sessions=max_sessions,
    )


def _turn(core: RoutingCore, session: str, prompt: list[int] | None = None) -> int:
    """One request of `session`, routed and completed; the index of its replica."""
    dispatch = core.route(RouteRequest(f"{session}/req", prompt or [1, 2, 3], 4, session))
    core.complete(dispatch, [7, 7, 7, 7])
    return dispatch.replica.index


def test_placements_keep_the_most_recently_routed_sessions() -> None:
    placements = SessionPlacements(capacity=2)
    placements.place("a", 0)
    placements.place("b", 1)
    placements.place("a", 2)  # routed again: now the most recent, on its new replica
    placements.place("c", 0)  # over capacity: "b", the least recently routed, is forgotten
    assert (placements.get("a"), placements.get("b"), placements.get("c")) == (2, None, 0)
    assert len(placements) == 2
    placements.forget_replica(0)
    assert (placements.get("a"), placements.get("c")) == (2, None)
    with pytest.raises(ValueError, match="capacity >= 1"):
        SessionPlacements(capacity=0)


def test_the_core_hands_each_policy_the_sessions_previous_replica_and_counts_moves() -> None:
    core = _core()
    request = RouteRequest("s/0", [1, 2, 3], 4, "s")
    dispatch = core.route(request)
    home = dispatch.replica.index
    assert dispatch.request.previous_replica is None
    core.complete(dispatch, [7])
    again = core.route(RouteRequest("s/1", [1, 2, 3, 7, 5], 4, "s"))
    core.complete(again, [7])
    assert (again.request.previous_replica, again.replica.index) == (home, home)
    assert request.previous_replica is None  # the caller's request is left as it was
    # Its replica leaves the pool: the session is forgotten there and placed afresh.
    core.eject(home)
    assert core.counters.sessions_displaced == 1
    moved = _turn(core, "s")
    assert moved != home
    assert _turn(core, "s") == moved
    assert (core.counters.session_placements, core.counters.session_moves) == (2, 0)
    # A retry excluding its replica moves it (and is counted as a move).
    retry = core.route(RouteRequest("s/4", [1, 2, 3], 4, "s"), exclude=[moved])
    assert retry.request.previous_replica == moved
    assert (core.counters.session_placements, core.counters.session_moves) == (3, 1)
    assert sum(r.sessions_placed for r in core.replicas) == 3
    # Parking a replica (a lent trainer taken back) displaces its sessions the same way.
    core.park(retry.replica.index)
    assert core.counters.sessions_displaced == 2
    assert core.placements.get("s") is None


def test_an_empty_session_id_is_no_session() -> None:
    core = _core()
    for i in range(3):
        dispatch = core.route(RouteRequest(f"r{i}", [1, 2, 3], 4, ""))
        assert dispatch.request.previous_replica is None
    assert (len(core.placements), core.counters.session_placements) == (0, 0)


@pytest.mark.parametrize("policy", ["sticky", "token_load"])
def test_memory_stays_bounded_over_many_sessions_and_live_ones_keep_their_replica(
    policy: str,
) -> None:
    core = _core(policy, max_sessions=100)
    live = {f"live-{i}": _turn(core, f"live-{i}", [i, 1, 2, 3]) for i in range(10)}
    for batch in range(20):
        for i in range(50):  # sessions of one turn each, never seen again
            _turn(core, f"done-{batch}-{i}", [1000 + i, 1, 2])
        for session, home in live.items():  # the live sessions keep working meanwhile
            assert _turn(core, session, [int(session[5:]), 1, 2, 3]) == home
    assert len(core.placements) == 100
    assert core.counters.session_moves == 0
