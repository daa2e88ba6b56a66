"""The discrete-event simulation of a rollout cluster: sessions, the production router, replicas.

`simulate()` runs one rollout batch: every session of the workload sends its first turn at time
0; each request is routed by agent-rl's own `RoutingCore` (the class the async `Router` uses),
with the session id, the prompt ids and `core.expected_decode(max_new_tokens)`, exactly as the
gateway's requests are; it then waits, prefills and decodes on the chosen `Replica`. A request
the policy's load control holds back (`RoutingCore.should_defer`) arrives again after
`defer_retry_s`, as the `Router` retries it; its latency counts from its first arrival. A session
that ends is ended in the core too (`end_session`), as the gateway does. A finished
request is reported back with `core.complete(dispatch, output_ids, cached_tokens=...)`, and the
session sends its next turn after its tool pause. Every `reconcile_interval_s` (the `Router`'s
health-check period) the router's view of each replica is reconciled with the replica's true
state (`core.reconcile(i, free_kv_tokens=..., cached_prefix_tokens=...)`), as the `Router` does
from `Engine.stats()`.

Events (a heap ordered by time, then insertion): a session's request arriving, a replica's step
ending (stale ones, superseded when an arrival cuts a multi-iteration decode step short, are
skipped by version), and the periodic reconcile. Nothing here knows which policy runs.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uni_agent_core.router.core import Dispatch, RoutingCore
from uni_agent_core.router.policies import RouteRequest, make_policy
from uni_agent_core.router.sim.metrics import RunMetrics, imbalance, percentile
from uni_agent_core.router.sim.profiles import ReplicaProfile
from uni_agent_core.router.sim.replica import Job, Replica
from uni_agent_core.router.sim.workloads import Session, Turn, Workload

_STEP, _ARRIVE, _RECONCILE = 0, 1, 2


@dataclass(eq=False)
class _Request:
    session: Session
    turn: Turn
    dispatch: Dispatch


def simulate(
    profile: ReplicaProfile,
    policy: str,
    workload: Workload,
    sessions: int,
    *,
    replicas: int = 8,
    seed: int = 0,
    policy_options: Mapping[str, float] | None = None,
    reconcile_interval_s: float = 5.0,
) -> RunMetrics:
    """Run one rollout batch of `sessions` sessions on `replicas` replicas under `policy`."""
    return ClusterSim(
        profile,
        policy,
        workload,
        sessions,
        replicas=replicas,
        seed=seed,
        policy_options=policy_options,
        reconcile_interval_s=reconcile_interval_s,
    ).run()


def _time_to_share(finishes: list[tuple[float, int]], share: float) -> tuple[float, int]:
    """When the completed requests first hold `share` of all output tokens, and how many."""
    total = sum(tokens for _, tokens in finishes)
    done = 0
    for at, tokens in sorted(finishes):
        done += tokens
        if done >= share * total:
            return at, done
    return 0.0, 0


class ClusterSim:
    """One simulated rollout batch (see the module docstring)."""

    def __init__(
        self,
        profile: ReplicaProfile,
        policy: str,
        workload: Workload,
        sessions: int,
        *,
        replicas: int = 8,
        seed: int = 0,
        policy_options: Mapping[str, float] | None = None,
        reconcile_interval_s: float = 5.0,
    ) -> None:
        self.profile = profile
        self.workload = workload
        self.seed = seed
        self.reconcile_interval_s = reconcile_interval_s
        self.sessions = workload.sessions(sessions, seed, profile.block_size)
        self.replicas = [Replica(i, profile) for i in range(replicas)]
        capacity = (
            profile.kv_capacity_tokens
            if profile.kv_capacity_tokens is not None
            else profile.cache_capacity_tokens
        )
        self.capacity = capacity
        self.now = 0.0
        """Simulated seconds (the routing core's clock)."""
        self.core = RoutingCore(
            make_policy(policy, **dict(policy_options or {})),
            [f"replica-{i}" for i in range(replicas)],
            kv_capacity_tokens=capacity,
            clock=lambda: self.now,
        )
        self._held: dict[str, tuple[Turn, float]] = {}
        """Sessions whose request load control holds back: the turn and when it first came."""
        self._events: list[tuple[float, int, int, Any, int]] = []
        self._serial = 0
        self.completed: list[str] = []
        """Request ids in completion order."""
        self.latencies: list[float] = []
        self.ttfts: list[float] = []
        self.output_tokens = 0
        self.last_response = 0.0
        self.finishes: list[tuple[float, int]] = []
        """(time, output tokens) of every completed request."""
        self.live = len(self.sessions)
        self.peak_demand = 0

    def _push(self, time: float, kind: int, payload: Any, version: int = 0) -> None:
        self._serial += 1
        heapq.heappush(self._events, (time, kind, self._serial, payload, version))

    def run(self) -> RunMetrics:
        """Simulate until every session has finished; the batch's metrics."""
        for session in self.sessions:
            self._push(0.0, _ARRIVE, session)
        self._push(0.0, _RECONCILE, None)
        events = self._events
        while events:
            now, kind, _, payload, version = heapq.heappop(events)
            self.now = now
            if kind == _STEP:
                replica: Replica = payload
                if version == replica.version and replica.step is not None:
                    self._step_done(replica, now)
            elif kind == _ARRIVE:
                self._arrive(payload, now)
            elif self.live:
                self._reconcile()
                self._push(now + self.reconcile_interval_s, _RECONCILE, None)
        return self._metrics()

    def _arrive(self, session: Session, now: float) -> None:
        held = self._held.pop(session.session_id, None)
        turn, arrival = held if held is not None else (session.next_turn(), now)
        request = RouteRequest(
            request_id=f"{session.session_id}/{turn.index}",
            prompt_ids=turn.prompt,
            expected_decode_tokens=self.core.expected_decode(turn.max_new_tokens),
            session_id=session.session_id,
        )
        if self.core.should_defer(request, now - arrival):
            # Held back by load control, as the `Router` holds it: ask again later. Its latency
            # counts from the first arrival.
            self._held[session.session_id] = (turn, arrival)
            self._push(now + self.core.defer_retry_s, _ARRIVE, session)
            return
        dispatch = self.core.route(request)
        replica = self.replicas[dispatch.replica.index]
        job = Job(
            key=_Request(session, turn, dispatch),
            prompt_len=len(turn.prompt),
            output_len=len(turn.output),
            blocks=turn.blocks,
            arrival=arrival,
        )
        replica.enqueue(job)
        end = replica.interrupt(now) if replica.busy else replica.plan(now)
        if end is not None:
            self._push(end, _STEP, replica, replica.version)

    def _step_done(self, replica: Replica, now: float) -> None:
        for job in replica.finish_step():
            request: _Request = job.key
            self.core.complete(
                request.dispatch, request.turn.output, cached_tokens=job.cached_tokens
            )
            self.completed.append(request.dispatch.request.request_id)
            self.latencies.append(job.finished_at - job.arrival)
            self.ttfts.append(job.first_token_at - job.arrival)
            self.output_tokens += job.output_len
            self.last_response = max(self.last_response, job.finished_at)
            self.finishes.append((job.finished_at, job.output_len))
            pause = request.session.finish_turn(request.turn)
            if pause is None:
                self.live -= 1
                self.core.end_session(request.session.session_id)
            else:
                self._push(now + pause, _ARRIVE, request.session)
        end = replica.plan(now)
        if end is not None:
            self._push(end, _STEP, replica, replica.version)

    def _reconcile(self) -> None:
        for replica in self.replicas:
            cached = replica.cached_tokens()
            self.core.reconcile(
                replica.index,
                free_kv_tokens=replica.free_kv_tokens(),
                cached_prefix_tokens=cached if cached else None,
                kv_capacity_tokens=None,  # the cluster's capacity is configured
            )
        demand = sum(len(s.context) for s in self.sessions if not s.finished)
        self.peak_demand = max(self.peak_demand, demand)

    def _metrics(self) -> RunMetrics:
        stats = [r.stats for r in self.replicas]
        prompt = sum(s.prompt_tokens for s in stats)
        cached = sum(s.cached_tokens for s in stats)
        makespan = self.last_response
        at90, tokens90 = _time_to_share(self.finishes, 0.9)
        busy = [s.busy_s for s in stats]
        total_capacity = (self.capacity or 0) * len(self.replicas)
        return RunMetrics(
            policy=self.core.policy.name,
            workload=self.workload.name,
            profile=self.profile.name,
            replicas=len(self.replicas),
            sessions=len(self.sessions),
            seed=self.seed,
            requests=len(self.latencies),
            output_tokens=self.output_tokens,
            makespan_s=makespan,
            throughput_tok_s=self.output_tokens / makespan if makespan > 0 else 0.0,
            throughput_p90_tok_s=tokens90 / at90 if at90 > 0 else 0.0,
            prompt_tokens=prompt,
            cached_tokens=cached,
            prefill_tokens=sum(s.prefill_tokens for s in stats),
            cache_hit_rate=cached / prompt if prompt else 0.0,
            latency_p50_s=percentile(self.latencies, 50),
            latency_p99_s=percentile(self.latencies, 99),
            ttft_p50_s=percentile(self.ttfts, 50),
            imbalance=imbalance(busy),
            evicted_tokens=sum(s.evicted_tokens for s in stats),
            preemptions=sum(s.preemptions for s in stats),
            kv_demand=self.peak_demand / total_capacity if total_capacity else 0.0,
            deferrals=self.core.counters.deferrals,
            defer_timeouts=self.core.counters.defer_timeouts,
            busy_s=busy,
            sessions_placed_per_replica=[r.sessions_placed for r in self.core.replicas],
        )
