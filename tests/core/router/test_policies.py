"""Routing policies: each decides as documented on hand-built replica views."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from uni_agent_core.router.policies import (
    POLICIES,
    CacheAware,
    LeastRequests,
    Policy,
    ReplicaLoad,
    RoundRobin,
    RouteRequest,
    Sticky,
    TokenLoad,
    make_policy,
)
from uni_agent_core.router.prefix_tree import PrefixTree


def _replicas(n: int, capacity: int | None = None) -> list[ReplicaLoad]:
    return [
        ReplicaLoad(index=i, name=f"r{i}", tree=PrefixTree(capacity), kv_capacity_tokens=capacity)
        for i in range(n)
    ]


def _request(prompt: list[int], session: str | None = None, decode: int = 10) -> RouteRequest:
    return RouteRequest("req", prompt, decode, session)


def _session(policy: Policy, session: str) -> Callable[[list[int], list[ReplicaLoad]], int]:
    """Routes one session's requests, handing the policy its previous replica as the core does."""
    previous: int | None = None

    def route(prompt: list[int], replicas: list[ReplicaLoad]) -> int:
        nonlocal previous
        request = RouteRequest("req", prompt, 10, session, previous_replica=previous)
        previous = policy.choose(request, replicas).index
        return previous

    return route


def test_round_robin_takes_replicas_in_turn() -> None:
    replicas, policy = _replicas(3), RoundRobin()
    picks = [policy.choose(_request([1]), replicas).index for _ in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_least_requests_picks_the_idlest_and_spreads_ties() -> None:
    replicas, policy = _replicas(3), LeastRequests()
    replicas[0].in_flight, replicas[1].in_flight, replicas[2].in_flight = 2, 0, 1
    assert policy.choose(_request([1]), replicas).index == 1
    for replica in replicas:
        replica.in_flight = 0
    assert len({policy.choose(_request([1]), replicas).index for _ in range(3)}) == 3


def test_sticky_keeps_a_session_home_until_it_leaves_the_pool() -> None:
    replicas, policy = _replicas(3), Sticky()
    route = _session(policy, "s")
    home = route([1], replicas)
    replicas[home].in_flight = 50
    assert route([1], replicas) == home
    others = [r for r in replicas if r.index != home]
    moved = route([1], others)
    assert moved != home
    assert route([1], replicas) == moved  # the new home holds, even with the old one back
    assert policy.choose(_request([1], "t"), replicas).index != home  # busy replica avoided


def test_cache_aware_follows_the_longest_prefix_unless_requests_are_imbalanced() -> None:
    replicas, policy = _replicas(3), CacheAware()
    prompt = list(range(100))
    policy.tree(2).insert(prompt[:80])
    assert policy.choose(_request(prompt), replicas).index == 2
    # A short match (below the 0.3 threshold) goes to the replica with the emptiest tree.
    policy.tree(1).insert(list(range(500, 520)))
    assert policy.choose(_request(list(range(10)) + [999] * 90), replicas).index == 0
    # Imbalance: max - min > 64 and max > 1.5 x min -> least requests, whatever is cached.
    replicas[2].in_flight, replicas[0].in_flight, replicas[1].in_flight = 100, 3, 10
    assert policy.choose(_request(prompt), replicas).index == 0


def test_cache_aware_trees_learn_only_from_its_own_routing() -> None:
    """SGLang's approximate trees: routed prompts go in; engine state never reaches them."""
    replicas, policy = _replicas(2, capacity=1_000), CacheAware()
    prompt = list(range(400))
    first = policy.choose(_request(prompt), replicas).index
    assert policy.tree(first).match(prompt) == 400
    # The engine evicted it and the router's residency model knows (reconcile); cache_aware
    # still routes the continuation there, as SGLang's router does.
    replicas[first].tree.clear()
    replicas[1 - first].tree.insert(prompt)
    assert policy.choose(_request(prompt + [7] * 50), replicas).index == first
    # A replica that leaves the pool loses its tree.
    policy.forget(first)
    assert policy.tree(first).size == 0
    # The tree is bounded (least recently used prefixes go first).
    small = CacheAware(max_tree_tokens=500)
    small.choose(_request(list(range(400))), replicas)
    small.choose(_request(list(range(1_000, 1_400))), replicas[:1])
    assert small.tree(0).size <= 500


def test_token_load_counts_uncached_prefill_plus_decode_plus_queued_work() -> None:
    replicas = _replicas(2, capacity=100_000)
    policy = TokenLoad(balance_min_tokens=0, kv_read_weight=0.0)
    prompt = list(range(10_000))
    replicas[0].tree.insert(prompt[:9_000])
    cost0 = policy.cost(_request(prompt, decode=500), replicas[0])
    assert (cost0.cached, cost0.prefill, cost0.total) == (9_000, 1_000, 1_500)
    # Ten requests queued on replica 1 do not matter; its uncached 10K prefill does.
    replicas[0].in_flight, replicas[0].queued_tokens = 1, 2_000
    replicas[1].in_flight = 10
    assert policy.choose(_request(prompt, decode=500), replicas).index == 0
    # Heavy token work queued on the cached replica outweighs the re-prefill.
    replicas[0].queued_tokens = 50_000
    assert policy.choose(_request(prompt, decode=500), replicas).index == 1


def test_token_load_keeps_affinity_within_the_band_and_releases_it_under_memory_pressure() -> None:
    replicas = [
        ReplicaLoad(index=i, name=f"r{i}", tree=PrefixTree(), kv_capacity_tokens=100_000)
        for i in range(2)
    ]
    policy = TokenLoad(balance_tolerance=0.5, balance_min_tokens=4096, kv_free_threshold=0.1)
    route = _session(policy, "s")
    prompt = list(range(2_000))
    assert route(prompt, replicas) == 0
    # Replica 0 holds the prefix and is busier, but within the band (4096 tokens): it stays.
    replicas[0].tree.insert(prompt)
    replicas[0].queued_tokens = 5_000
    assert route(prompt, replicas) == 0
    # Without the prefix there is nothing to be loyal to: the cheaper replica takes it.
    replicas[0].tree.clear()
    assert route(prompt, replicas) == 1
    # Back to replica 0, which caches the prefix again; then it runs out of KV memory: the
    # session moves.
    replicas[1].queued_tokens = 20_000
    replicas[0].tree.insert(prompt)
    assert route(prompt, replicas) == 0
    replicas[0].active_kv_tokens = 95_000
    assert route(prompt, replicas) == 1
    # When every replica is under pressure, cost and affinity decide as usual.
    replicas[1].active_kv_tokens = 99_000
    replicas[0].queued_tokens = 0
    assert route(prompt, replicas) == 0


def test_token_load_charges_the_parked_prefixes_a_request_would_evict() -> None:
    replicas = _replicas(2, capacity=10_000)
    policy = TokenLoad(balance_min_tokens=0, kv_read_weight=0.0)
    replicas[0].tree.insert(list(range(100_000, 109_500)))  # full of another session's cache
    cost = policy.cost(_request(list(range(1_000)), decode=500), replicas[0])
    assert (cost.prefill, cost.evicted, cost.total) == (1_000, 1_000, 2_500)
    assert policy.choose(_request(list(range(1_000)), decode=500), replicas).index == 1


def test_engine_reported_free_kv_overrides_the_estimate() -> None:
    replica = _replicas(1, capacity=1_000)[0]
    replica.active_kv_tokens = 100
    assert replica.free_kv_fraction() == pytest.approx(0.9)
    replica.reported_free_kv_tokens, replica.active_kv_at_report = 50, 100
    assert replica.free_kv_fraction() == pytest.approx(0.05)
    replica.active_kv_tokens = 80  # a request finished since the report
    assert replica.free_kv_fraction() == pytest.approx(0.07)
    assert ReplicaLoad(index=0, name="x", tree=PrefixTree()).free_kv_fraction() is None


def test_make_policy_names_every_policy_and_rejects_unknown_ones() -> None:
    assert [make_policy(name).name for name in POLICIES] == list(POLICIES)
    assert make_policy("token_load", kv_free_threshold=0.2).kv_free_threshold == 0.2
    with pytest.raises(ValueError, match="unknown router policy 'fastest'"):
        make_policy("fastest")
