"""Routing policies: which replica serves a generation request.

Every policy sees the request (`RouteRequest`) and the router-side view of the healthy replicas
(`ReplicaLoad`: in-flight requests, queued token work, an estimated prefix tree of what each
replica holds in its KV cache, free KV memory) and returns one of them. Policies are pure
decisions; the bookkeeping (what a dispatch adds to a replica's load and tree, and which replica
served each session's last request, `RouteRequest.previous_replica`) is `RoutingCore`'s.

- `round_robin`: in turn.
- `least_requests`: fewest in-flight requests (what verl's agent loop does).
- `sticky`: a session stays on the replica it first went to (least requests then) until that
  replica leaves the pool (or the router forgets the session, `router/affinity.py`).
- `cache_aware`: SGLang-router style — the replica with the longest prefix in the policy's own
  approximate trees when the match covers at least `cache_threshold` of the prompt, else the
  replica with the emptiest tree; but when in-flight counts are imbalanced (max - min >
  `balance_abs_threshold` and max > `balance_rel_threshold` x min) simply the least-loaded
  replica. As in SGLang, the trees hold the prompts routed to each replica (bounded, LRU), not
  the router's engine-reconciled residency model, and no KV-memory signal is used. Defaults
  are the sglang-gateway / vllm-router ones (prefix threshold 0.3; rebalance above 64 and
  1.5x; trees of 2**26 characters).
- `token_load` (agent-rl): the cost of a request on a replica is the prefill it would compute
  there (prompt tokens not covered by that replica's cached prefix), its expected decode tokens,
  and the cached tokens of parked sessions its new KV would evict from a full replica (they will
  be prefilled again), added to the token work already queued there. The session's previous
  replica is kept while it still caches a useful part of the prompt, its cost stays within a
  tolerance band of the cheapest, and its free KV memory stays above `kv_free_threshold`; under
  memory pressure the affinity is released (keeping it would only evict parked sessions). A new
  session treats the replica caching its group's task prefix as its home on the same terms.
  Decode is priced by the KV it reads (`kv_read_weight` prefill-token equivalents per context
  token), so a replica busy with long contexts costs more than its token count says. It is also
  the one policy with load control (`defer`, `router/load_control.py`): while the live sessions'
  contexts exceed `defer_overcommit` of the replicas' KV, a request with more than
  `defer_uncached_tokens` cached on no replica waits instead of evicting other sessions' caches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from uni_agent_core.config.inference import (
    DEFER_OVERCOMMIT,
    DEFER_UNCACHED_TOKENS,
    KV_READ_WEIGHT_H200,
    SGLANG_MAX_TREE_TOKENS,
)
from uni_agent_core.router.prefix_tree import PrefixTree


@dataclass
class RouteRequest:
    """What a policy knows of a request."""

    request_id: str
    prompt_ids: Sequence[int]
    expected_decode_tokens: int
    session_id: str | None = None
    previous_replica: int | None = None
    """Index of the replica that served the session's last request. Callers leave it unset:
    `RoutingCore.route` hands the policy a copy with it filled in (None for a new session, or
    one the router no longer remembers)."""


@dataclass
class ReplicaLoad:
    """The router's view of one replica."""

    index: int
    name: str
    tree: PrefixTree
    """Estimated resident prefixes (router-side; reconciled with what the engine reports)."""
    kv_capacity_tokens: int | None = None
    """KV tokens the replica can hold; None when unknown (no memory-pressure signal)."""
    in_flight: int = 0
    """Requests dispatched here and not finished."""
    queued_tokens: int = 0
    """Token work of those requests: uncached prefill plus expected decode."""
    active_kv_tokens: int = 0
    """KV the in-flight requests hold (prompt plus expected decode)."""
    reported_free_kv_tokens: int | None = None
    """Free KV tokens the engine last reported (`EngineStats.free_kv_tokens`), if it does."""
    active_kv_at_report: int = 0
    """`active_kv_tokens` when that report came, so the estimate follows later dispatches."""
    healthy: bool = True
    """In the pool: takes new requests."""
    parked: bool = False
    """Out of the pool on purpose (a lendable replica, e.g. the trainer, while it trains): never
    re-admitted by health checks, only by `RoutingCore.unpark`."""
    lendable: bool = False
    """Lent by its owner (the trainer's own model): never health-probed, lent or not, so a
    reclaim that waited for its requests leaves nothing running on it."""
    consecutive_failures: int = 0
    sessions_placed: int = 0
    """Sessions placed here: a session's first request, or one that moved it from another
    replica (so a session that comes back after moving away counts again)."""

    def free_kv_fraction(self) -> float | None:
        """Share of KV memory still free for new work; None when unknown."""
        if not self.kv_capacity_tokens:
            return None
        if self.reported_free_kv_tokens is not None:
            free = self.reported_free_kv_tokens - (self.active_kv_tokens - self.active_kv_at_report)
        else:
            free = self.kv_capacity_tokens - self.active_kv_tokens
        return max(0.0, free / self.kv_capacity_tokens)


class Policy(Protocol):
    """Chooses a replica among healthy candidates (never empty)."""

    name: str

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """The replica that serves `request`."""
        ...

    def forget(self, index: int) -> None:
        """Drop what the policy keeps about replica `index` (it left the pool or lost its cache).
        Session placements are the routing core's: it forgets that replica's sessions itself."""
        ...

    def defer(
        self, request: RouteRequest, replicas: Sequence[ReplicaLoad], live_context_tokens: int
    ) -> bool:
        """Whether `request` should wait before being routed (load control against KV thrash,
        `router/load_control.py`); `live_context_tokens` is what the live sessions' contexts
        add up to. The caller asks again later, and sends it anyway after a maximum wait."""
        ...


class _Defaults:
    """What a policy does unless it says otherwise: keep nothing per replica, never defer."""

    def forget(self, index: int) -> None:
        """Nothing to forget."""

    def defer(
        self, request: RouteRequest, replicas: Sequence[ReplicaLoad], live_context_tokens: int
    ) -> bool:
        """Never: every request is routed at once."""
        return False


class RoundRobin(_Defaults):
    """Replicas in turn."""

    name = "round_robin"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """The next replica in turn."""
        chosen = replicas[self._turn % len(replicas)]
        self._turn += 1
        return chosen


class LeastRequests(_Defaults):
    """Fewest in-flight requests; ties go in turn so idle replicas share the work."""

    name = "least_requests"

    def __init__(self) -> None:
        self._turn = 0

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """The least busy replica by request count."""
        self._turn += 1
        n = len(replicas)
        return min(replicas, key=lambda r: (r.in_flight, (r.index - self._turn) % max(n, 1)))


class Sticky(_Defaults):
    """Session affinity: a session's first replica (by least requests) serves it for good."""

    name = "sticky"

    def __init__(self) -> None:
        self._fallback = LeastRequests()

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """The session's replica while it is a candidate, else the least busy one."""
        for replica in replicas:
            if replica.index == request.previous_replica:
                return replica
        return self._fallback.choose(request, replicas)


class CacheAware(_Defaults):
    """Longest prefix in its own approximate trees unless request counts are imbalanced
    (the SGLang router's `cache_aware`).

    Like SGLang's, the trees are built from the request history alone: each routed prompt is
    inserted into its replica's tree (bounded by `max_tree_tokens`, least recently used first
    out); what the engines really evicted is never learned, nor how full their KV is.
    """

    name = "cache_aware"

    def __init__(
        self,
        *,
        cache_threshold: float = 0.3,
        balance_abs_threshold: int = 64,
        balance_rel_threshold: float = 1.5,
        max_tree_tokens: int = SGLANG_MAX_TREE_TOKENS,
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = balance_rel_threshold
        self.max_tree_tokens = int(max_tree_tokens)
        self._least = LeastRequests()
        self._trees: dict[int, PrefixTree] = {}

    def tree(self, index: int) -> PrefixTree:
        """The approximate tree of replica `index` (what was routed there)."""
        tree = self._trees.get(index)
        if tree is None:
            tree = self._trees[index] = PrefixTree(self.max_tree_tokens)
        return tree

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """See the module docstring."""
        chosen = self._choose(request, replicas)
        self.tree(chosen.index).insert(request.prompt_ids)
        return chosen

    def _choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        loads = [r.in_flight for r in replicas]
        high, low = max(loads), min(loads)
        if high - low > self.balance_abs_threshold and high > self.balance_rel_threshold * low:
            return self._least.choose(request, replicas)
        matches = [self.tree(r.index).match(request.prompt_ids) for r in replicas]
        best = max(range(len(replicas)), key=lambda i: (matches[i], -replicas[i].in_flight))
        if matches[best] > self.cache_threshold * len(request.prompt_ids):
            return replicas[best]
        return min(replicas, key=lambda r: (self.tree(r.index).size, r.in_flight, r.index))

    def forget(self, index: int) -> None:
        """Replica `index` left the pool: its tree goes (SGLang removes the worker's tenant)."""
        self._trees.pop(index, None)


@dataclass
class TokenCost:
    """A request's token cost on one replica."""

    replica: ReplicaLoad
    cached: int
    prefill: int
    evicted: int
    total: float


class TokenLoad(_Defaults):
    """Queued token work + uncached prefill + expected decode + the cached prefixes of other
    sessions its KV would evict, with an affinity band released under memory pressure."""

    name = "token_load"

    def __init__(
        self,
        *,
        prefill_weight: float = 1.0,
        decode_weight: float = 1.0,
        eviction_weight: float = 1.0,
        balance_tolerance: float = 1.0,
        balance_min_tokens: int = 4096,
        kv_free_threshold: float = 0.1,
        min_cached_fraction: float = 0.3,
        kv_read_weight: float = KV_READ_WEIGHT_H200,
        defer_overcommit: float = DEFER_OVERCOMMIT,
        defer_uncached_tokens: int = DEFER_UNCACHED_TOKENS,
    ) -> None:
        if defer_overcommit < 0 or defer_uncached_tokens < 0:
            raise ValueError("defer_overcommit and defer_uncached_tokens must be >= 0")
        self.defer_overcommit = defer_overcommit
        self.defer_uncached_tokens = defer_uncached_tokens
        self.prefill_weight = prefill_weight
        self.decode_weight = decode_weight
        self.eviction_weight = eviction_weight
        self.balance_tolerance = balance_tolerance
        self.balance_min_tokens = balance_min_tokens
        self.kv_free_threshold = kv_free_threshold
        self.min_cached_fraction = min_cached_fraction
        self.kv_read_weight = kv_read_weight

    def cost(self, request: RouteRequest, replica: ReplicaLoad) -> TokenCost:
        """The token work `request` adds to `replica`, plus what is queued there.

        The eviction term counts the cached tokens of other sessions that the request's new KV
        (uncached prompt + expected decode) pushes out of a full replica: each will be
        prefilled again when its session comes back, so it is work of the same kind.

        Decode is priced by the KV it reads: every decoded token reads the request's whole
        context, `kv_read_weight` prefill-token equivalents per context token (HBM time per KV
        token over GEMM time per token; Llama-3.1-8B on an H200: 34.1 ns / 29.5 us). The
        in-flight requests still to decode read `active_kv_tokens`, about the expected decode
        each, so a replica busy with long contexts costs more than its token count says.
        """
        cached = replica.tree.match(request.prompt_ids, touch=False)
        prefill = len(request.prompt_ids) - cached
        evicted = 0
        if replica.kv_capacity_tokens:
            need = prefill + request.expected_decode_tokens
            evicted = max(0, replica.tree.size + need - replica.kv_capacity_tokens)
            evicted = min(evicted, need)
        decode = request.expected_decode_tokens
        context = len(request.prompt_ids) + replica.active_kv_tokens
        kv_read = self.kv_read_weight * decode * context
        total = (
            replica.queued_tokens
            + self.prefill_weight * prefill
            + self.decode_weight * (decode + kv_read)
            + self.eviction_weight * evicted
        )
        return TokenCost(replica, cached, prefill, evicted, total)

    def defer(
        self, request: RouteRequest, replicas: Sequence[ReplicaLoad], live_context_tokens: int
    ) -> bool:
        """Hold the request back while the live sessions' contexts exceed `defer_overcommit`
        of the replicas' KV capacity and more than `defer_uncached_tokens` of its prompt is
        cached on no replica: prefilled now, its KV would evict other sessions' caches. Never
        when a replica's capacity is unknown, `defer_overcommit` is 0, or no replica has work
        in flight (waiting would free nothing)."""
        if not self.defer_overcommit or not any(replica.in_flight for replica in replicas):
            return False
        capacities = [replica.kv_capacity_tokens for replica in replicas]
        if not all(capacities):
            return False
        if live_context_tokens <= self.defer_overcommit * sum(capacities):  # type: ignore[arg-type]
            return False
        uncached = len(request.prompt_ids) - max(
            replica.tree.match(request.prompt_ids, touch=False) for replica in replicas
        )
        return uncached > self.defer_uncached_tokens

    def _under_pressure(self, replica: ReplicaLoad) -> bool:
        free = replica.free_kv_fraction()
        return free is not None and free < self.kv_free_threshold

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaLoad]) -> ReplicaLoad:
        """See the module docstring."""
        costs = [self.cost(request, replica) for replica in replicas]
        roomy = [c for c in costs if not self._under_pressure(c.replica)] or costs
        cheapest = min(roomy, key=lambda c: (c.total, c.replica.in_flight, c.replica.index))
        chosen = cheapest
        home = request.previous_replica
        if home is None and request.session_id is not None:
            # A new session joins the replica caching the longest prefix beyond what every
            # replica shares (its GRPO group's task), on the same terms as a session's home.
            deepest = max(costs, key=lambda c: (c.cached, -c.replica.in_flight))
            if deepest.cached > min(c.cached for c in costs):
                home = deepest.replica.index
        if home is not None and home != cheapest.replica.index:
            kept = next((c for c in roomy if c.replica.index == home), None)
            band = max(self.balance_tolerance * cheapest.total, float(self.balance_min_tokens))
            if (
                kept is not None
                and kept.cached >= self.min_cached_fraction * len(request.prompt_ids)
                and kept.total <= cheapest.total + band
            ):
                chosen = kept
        return chosen.replica


POLICIES = ("round_robin", "least_requests", "sticky", "cache_aware", "token_load")


def make_policy(name: str, **options: float) -> Policy:
    """A policy by name; `options` go to the policies that take them (others ignore them).

    Raises:
        ValueError: an unknown policy name.
    """
    if name == "round_robin":
        return RoundRobin()
    if name == "least_requests":
        return LeastRequests()
    if name == "sticky":
        return Sticky()
    keys: tuple[str, ...]
    if name == "cache_aware":
        keys = (
            "cache_threshold",
            "balance_abs_threshold",
            "balance_rel_threshold",
            "max_tree_tokens",
        )
        return CacheAware(**{k: options[k] for k in keys if k in options})  # type: ignore[arg-type]
    if name == "token_load":
        keys = (
            "prefill_weight",
            "decode_weight",
            "eviction_weight",
            "balance_tolerance",
            "balance_min_tokens",
            "kv_free_threshold",
            "min_cached_fraction",
            "kv_read_weight",
            "defer_overcommit",
            "defer_uncached_tokens",
        )
        return TokenLoad(**{k: options[k] for k in keys if k in options})  # type: ignore[arg-type]
    raise ValueError(f"unknown router policy {name!r}; choose one of {', '.join(POLICIES)}")
