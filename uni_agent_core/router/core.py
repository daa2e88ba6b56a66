"""The routing core: policy decisions plus the bookkeeping that feeds them, without any I/O.

`RoutingCore` holds one `ReplicaLoad` per replica. `route()` asks the policy for a replica among
the healthy ones (minus those a retry excludes) and books the dispatch: in-flight count, queued
token work (the prefill the replica must compute after its cached prefix, plus the expected
decode), active KV and a pin on the prompt's path in the replica's prefix tree. It also remembers
which replica served each session's last request (`SessionPlacements`, bounded) and hands that
to the policy as `RouteRequest.previous_replica`, with the prompt as an int32 array (converted
once, so the trees read it without making Python ints of it). `complete()` releases the booking
and records the prompt plus the sampled tokens as resident there; `fail()` releases it and
counts the failure, taking the replica out of the pool after `unhealthy_after_failures` in a
row. `reconcile()` applies what an engine reports (its KV capacity when none was configured,
free KV, how many prefix tokens it really caches) so the router's residency model cannot drift
far from the truth. `should_defer()` is the policy's load control against KV thrash
(`router/load_control.py`), over the context sizes of the live sessions that `route()` and
`complete()` record and `end_session()` removes. The async `Router` engine and the cluster
simulator (`router/sim/`) share this class, so the simulator measures exactly the routing that
production runs.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from uni_agent_core.config.inference import (
    DEFAULT_MAX_TRACKED_SESSIONS,
    DEFER_RETRY_S,
    MAX_DEFER_S,
    WORKING_SET_S,
)
from uni_agent_core.errors import AgentRLError
from uni_agent_core.router.affinity import SessionPlacements
from uni_agent_core.router.load_control import LiveContexts
from uni_agent_core.router.policies import Policy, ReplicaLoad, RouteRequest
from uni_agent_core.router.prefix_tree import PrefixTree, as_int32


class NoReplicaError(AgentRLError, RuntimeError):
    """No healthy replica is left to serve a request."""


@dataclass
class Dispatch:
    """One booked request on one replica."""

    request: RouteRequest
    replica: ReplicaLoad
    cached_tokens: int
    """Prompt tokens the router expects the replica to have cached."""
    work_tokens: int
    """What was added to the replica's queued token work."""
    kv_tokens: int
    """What was added to the replica's active KV."""
    tree: PrefixTree
    """The tree the prompt was pinned in (replaced when weights change)."""


@dataclass
class RouterCounters:
    """Totals over the core's life (exported in `Router.stats().extra`)."""

    dispatched: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    ejected: int = 0
    """Replicas taken out of the pool as unhealthy (lending a replica is counted apart)."""
    readmitted: int = 0
    parked: int = 0
    """Times a lendable replica was taken out of the pool on purpose (role switching)."""
    unparked: int = 0
    prompt_tokens: int = 0
    """Prompt tokens of the dispatched requests (retries included)."""
    expected_cached_tokens: int = 0
    """Of those, what the router's residency model expected the chosen replicas to have cached."""
    completed_prompt_tokens: int = 0
    """Prompt tokens of the requests replicas completed."""
    completed_cached_tokens: int = 0
    """Of those, what the replicas report serving from their prefix cache (a server that does not
    report cached tokens counts none)."""
    completed_expected_cached_tokens: int = 0
    """Of those, what the router's residency model expected to be cached when it routed them."""
    session_placements: int = 0
    """Requests routed to another replica than the session's remembered one, or with none
    remembered (a new session, one forgotten as least recently routed, or one whose replica left
    the pool); a failed attempt counts as well as its retry."""
    session_moves: int = 0
    """Those of them that left a remembered replica still in the pool (the policy released the
    affinity, or a retry excluded it)."""
    sessions_displaced: int = 0
    """Sessions forgotten because their replica left the pool (ejected or parked)."""
    deferrals: int = 0
    """Times load control held a request back for `defer_retry_s` (a request held three times
    counts three)."""
    defer_timeouts: int = 0
    """Requests sent after waiting `max_defer_s` although load control still held them."""


class RoutingCore:
    """Replica views, a policy and the dispatch bookkeeping."""

    def __init__(
        self,
        policy: Policy,
        names: Sequence[str],
        *,
        kv_capacity_tokens: Sequence[int | None] | int | None = None,
        unhealthy_after_failures: int = 3,
        decode_estimate_tokens: int = 256,
        max_tracked_sessions: int = DEFAULT_MAX_TRACKED_SESSIONS,
        defer_retry_s: float = DEFER_RETRY_S,
        max_defer_s: float = MAX_DEFER_S,
        working_set_s: float = WORKING_SET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not names:
            raise ValueError("a router needs at least one replica")
        capacities = (
            list(kv_capacity_tokens)
            if isinstance(kv_capacity_tokens, Sequence)
            else [kv_capacity_tokens] * len(names)
        )
        if len(capacities) != len(names):
            raise ValueError(f"{len(capacities)} KV capacities for {len(names)} replicas")
        self.policy = policy
        self.replicas = [
            ReplicaLoad(index=i, name=name, tree=PrefixTree(cap), kv_capacity_tokens=cap)
            for i, (name, cap) in enumerate(zip(names, capacities, strict=True))
        ]
        self._configured_capacity = {i for i, cap in enumerate(capacities) if cap is not None}
        """Replicas whose KV capacity was given: what an engine reports does not override it."""
        self.unhealthy_after_failures = unhealthy_after_failures
        self._decode_estimate = float(decode_estimate_tokens)
        self.placements = SessionPlacements(max_tracked_sessions)
        self.live = LiveContexts(max_tracked_sessions, window_s=working_set_s, clock=clock)
        if defer_retry_s <= 0 or max_defer_s < 0:
            raise ValueError("defer_retry_s must be positive and max_defer_s >= 0")
        self.defer_retry_s = defer_retry_s
        """How long a held request waits before it asks `should_defer` again."""
        self.max_defer_s = max_defer_s
        self.counters = RouterCounters()

    def expected_decode(self, max_new_tokens: int) -> int:
        """Decode tokens to expect: the running mean of outputs, capped by the request's max."""
        return max(1, min(max_new_tokens, round(self._decode_estimate)))

    def healthy(self) -> list[ReplicaLoad]:
        """Replicas in the pool."""
        return [r for r in self.replicas if r.healthy]

    def should_defer(self, request: RouteRequest, waited_s: float = 0.0) -> bool:
        """Whether `request` should wait `defer_retry_s` before it is routed: the policy's load
        control (`Policy.defer`, over the healthy replicas and the live sessions' contexts),
        until it has waited `max_defer_s`. Counts each decision to hold, and each request sent
        because its wait ran out while the policy still held it."""
        if not self.max_defer_s:
            return False
        candidates = self.healthy()
        if not candidates or not self.policy.defer(request, candidates, self.live.total()):
            return False
        if waited_s >= self.max_defer_s:
            self.counters.defer_timeouts += 1
            return False
        self.counters.deferrals += 1
        return True

    def end_session(self, session_id: str) -> None:
        """The session is over: its context no longer counts as live (nor will a later request
        of it: a retry, or one held back), its placement is dropped."""
        self.live.end(session_id)
        self.placements.forget(session_id)

    def route(self, request: RouteRequest, exclude: Collection[int] = ()) -> Dispatch:
        """Choose a replica and book the request on it.

        Raises:
            NoReplicaError: every healthy replica is excluded (or none is healthy).
            OverflowError: a prompt id does not fit int32 (no vocabulary comes near; nothing is
                booked).
        """
        candidates = [r for r in self.replicas if r.healthy and r.index not in exclude]
        if not candidates:
            raise NoReplicaError(
                f"no healthy replica left for request {request.request_id} "
                f"({len(self.healthy())} healthy of {len(self.replicas)}, {len(exclude)} tried)"
            )
        session = request.session_id or None
        if session is not None and self.live.ended(session):
            session = None  # a retry or late request of an ended session: nothing to remember
        previous = None if session is None else self.placements.get(session)
        request = replace(
            request, prompt_ids=as_int32(request.prompt_ids), previous_replica=previous
        )
        replica = self.policy.choose(request, candidates)
        cached = replica.tree.match(request.prompt_ids, touch=True)
        work = len(request.prompt_ids) - cached + request.expected_decode_tokens
        kv = len(request.prompt_ids) + request.expected_decode_tokens
        replica.in_flight += 1
        replica.queued_tokens += work
        replica.active_kv_tokens += kv
        replica.tree.insert(request.prompt_ids)
        replica.tree.pin(request.prompt_ids)
        if session is not None:
            self._place(session, previous, replica)
            self.live.start(session, kv)
        self.counters.dispatched += 1
        self.counters.prompt_tokens += len(request.prompt_ids)
        self.counters.expected_cached_tokens += cached
        if exclude:
            self.counters.retried += 1
        return Dispatch(request, replica, cached, work, kv, replica.tree)

    def _place(self, session: str, previous: int | None, replica: ReplicaLoad) -> None:
        if previous != replica.index:
            replica.sessions_placed += 1
            self.counters.session_placements += 1
            if previous is not None:
                self.counters.session_moves += 1
        self.placements.place(session, replica.index)

    def _release(self, dispatch: Dispatch, context_tokens: int | None = None) -> None:
        """Undo the booking; the session's live context becomes `context_tokens` (completed) or
        stays as it was (None: failed or cancelled)."""
        replica = dispatch.replica
        replica.in_flight -= 1
        replica.queued_tokens -= dispatch.work_tokens
        replica.active_kv_tokens -= dispatch.kv_tokens
        dispatch.tree.unpin(dispatch.request.prompt_ids)
        if dispatch.request.session_id:
            self.live.finish(dispatch.request.session_id, context_tokens)

    def complete(
        self, dispatch: Dispatch, output_ids: Sequence[int], *, cached_tokens: int = 0
    ) -> None:
        """The request finished: its prompt and output are now cached on the replica.
        `cached_tokens`: prompt tokens the replica reports it served from its prefix cache.

        Raises:
            OverflowError: an output id does not fit int32 (nothing is booked then).
        """
        resident = array("i", dispatch.request.prompt_ids)
        resident.extend(as_int32(output_ids))
        self._release(dispatch, len(resident))
        self.counters.completed_prompt_tokens += len(dispatch.request.prompt_ids)
        self.counters.completed_cached_tokens += cached_tokens
        self.counters.completed_expected_cached_tokens += dispatch.cached_tokens
        replica = dispatch.replica
        replica.consecutive_failures = 0
        if dispatch.tree is replica.tree:  # else new weights came: the old KV is not reusable
            replica.tree.insert(resident)
        self._decode_estimate += 0.1 * (len(output_ids) - self._decode_estimate)
        self.counters.completed += 1

    def cancel(self, dispatch: Dispatch) -> None:
        """The request was cancelled by its caller: release it, count nothing against anyone."""
        self._release(dispatch)

    def fail(self, dispatch: Dispatch) -> bool:
        """The request failed on its replica; returns True when that ejected the replica."""
        self._release(dispatch)
        self.counters.failed += 1
        return self.count_failure(dispatch.replica.index)

    def count_failure(self, index: int) -> bool:
        """One more failure (request or health probe) in a row on a replica; returns True when
        that takes it out of the pool."""
        replica = self.replicas[index]
        replica.consecutive_failures += 1
        if replica.healthy and replica.consecutive_failures >= self.unhealthy_after_failures:
            self.eject(index)
            return True
        return False

    def eject(self, index: int) -> None:
        """Take an unhealthy replica out of the pool; its sessions are re-placed."""
        if self._leave_pool(index):
            self.counters.ejected += 1

    def readmit(self, index: int) -> None:
        """Return a recovered replica to the pool with an empty cache model."""
        if self._join_pool(index):
            self.counters.readmitted += 1

    def _leave_pool(self, index: int) -> bool:
        replica = self.replicas[index]
        left = replica.healthy
        replica.healthy = False
        self.policy.forget(index)
        self.counters.sessions_displaced += self.placements.forget_replica(index)
        return left

    def _join_pool(self, index: int) -> bool:
        replica = self.replicas[index]
        if replica.healthy:
            return False
        replica.healthy = True
        replica.consecutive_failures = 0
        replica.tree = PrefixTree(replica.kv_capacity_tokens)  # in-flight pins stay on the old
        return True

    def add_replica(self, name: str, *, kv_capacity_tokens: int | None = None) -> int:
        """A new lendable replica, parked (out of the pool until `unpark`); returns its index."""
        index = len(self.replicas)
        if kv_capacity_tokens is not None:
            self._configured_capacity.add(index)
        self.replicas.append(
            ReplicaLoad(
                index=index,
                name=name,
                tree=PrefixTree(kv_capacity_tokens),
                kv_capacity_tokens=kv_capacity_tokens,
                healthy=False,
                parked=True,
                lendable=True,
            )
        )
        return index

    def park(self, index: int) -> None:
        """Take a replica out of the pool on purpose (its in-flight requests still finish)."""
        if self._leave_pool(index):
            self.counters.parked += 1
        self.replicas[index].parked = True

    def unpark(self, index: int) -> None:
        """Return a parked replica to the pool (with an empty cache model)."""
        self.replicas[index].parked = False
        if self._join_pool(index):
            self.counters.unparked += 1

    def reconcile(
        self,
        index: int,
        *,
        free_kv_tokens: int | None,
        cached_prefix_tokens: int | None,
        kv_capacity_tokens: int | None,
    ) -> None:
        """Apply an engine's report: its KV capacity (`adopt_capacity`), its free KV, and (when
        it is less than the router thinks) how many prefix tokens it really caches, evicting the
        router's model down to that."""
        self.adopt_capacity(index, kv_capacity_tokens)
        replica = self.replicas[index]
        replica.reported_free_kv_tokens = free_kv_tokens
        replica.active_kv_at_report = replica.active_kv_tokens
        if cached_prefix_tokens is not None and replica.tree.size > cached_prefix_tokens:
            replica.tree.evict(replica.tree.size - cached_prefix_tokens)

    def adopt_capacity(self, index: int, kv_capacity_tokens: int | None) -> None:
        """Size replica `index` by the KV capacity its engine reports, unless one was
        configured (or the report is missing or empty); its tree is evicted down to it."""
        replica = self.replicas[index]
        if not kv_capacity_tokens or index in self._configured_capacity:
            return
        if kv_capacity_tokens != replica.kv_capacity_tokens:
            replica.kv_capacity_tokens = kv_capacity_tokens
            replica.tree.set_capacity(kv_capacity_tokens)

    def invalidate_caches(self) -> None:
        """New weights: no replica's cached KV is reusable (it was computed by old weights).

        Each replica gets a fresh tree; in-flight dispatches unpin the old one harmlessly. The
        live contexts start again from nothing: none of them is cached any more, and load
        control must not hold every request back for it.
        """
        for replica in self.replicas:
            replica.tree = PrefixTree(replica.kv_capacity_tokens)
        self.live.clear()
