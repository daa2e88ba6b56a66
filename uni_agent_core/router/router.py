"""`Router`: an `Engine` over N engine replicas, so the gateway uses one or many the same way.

Each `generate` is routed by the recipe's policy (`RoutingCore`); while the policy's load control
holds it back (`router/load_control.py`: the live sessions' contexts overcommit the replicas' KV
and the request's context is cached nowhere), it waits, asking again every `defer_retry_s` for
at most `max_defer_s`. `end_session` tells the router a session is over. A request whose
replica fails is retried on another replica — only after the failed attempt has ended, and never
after a success, so no request is lost or served twice. A replica that fails
`unhealthy_after_failures` requests or health probes in a row leaves the pool; a background task
probes every replica every `health_check_interval_s` (a one-token generation, skipped while an
engine is paused for a weight update), re-admits a recovered one, and reconciles the router's
residency model with what each engine reports in `stats()` (remote servers are first asked for
their KV capacity and free KV memory; a replica whose capacity the recipe left open is sized by
what it reports). Weight updates, pause and resume go to every replica; a weight update clears
the residency model (KV computed by old weights is never reused).

Role switching: `add_lendable` registers a replica that stays out of the pool (parked) until
`lend` and is never probed; `reclaim` parks it again and waits for its in-flight requests to
finish, so its owner (the trainer, whose own model it serves) can train on it safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from uni_agent_core.config.inference import (
    DEFAULT_MAX_TRACKED_SESSIONS,
    DEFER_RETRY_S,
    MAX_DEFER_S,
    WORKING_SET_S,
)
from uni_agent_core.errors import AgentRLError
from uni_agent_core.inference.types import (
    Engine,
    EngineClosedError,
    EngineDefaults,
    EngineStats,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)
from uni_agent_core.router.core import NoReplicaError, RoutingCore
from uni_agent_core.router.policies import Policy, RouteRequest

logger = logging.getLogger(__name__)


def _sum_known(values: Sequence[int | None]) -> int | None:
    """The replicas' total, or None when any of them does not know its figure."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


class RouterError(AgentRLError, RuntimeError):
    """Every replica that could serve a request failed it."""


def _smallest_known(values: Sequence[int | None]) -> int | None:
    """The smallest figure a replica knows, or None when none of them knows one."""
    known = [v for v in values if v is not None]
    return min(known) if known else None


class Router(EngineDefaults):
    """Routes generation over engine replicas; itself an `Engine`.

    Of the optional capabilities: `tokenizer` is its first replica's; `max_model_len` the
    smallest window a replica knows (any replica may serve a request); `end_session` ends the
    session in the routing core; `refresh_server_stats` refreshes every replica. It does not
    stream (`streams` stays False): a request that fails on one replica is retried on another,
    and tokens already handed to a client could not be taken back.
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        policy: Policy,
        *,
        names: Sequence[str] | None = None,
        kv_capacity_tokens: int | Sequence[int | None] | None = None,
        unhealthy_after_failures: int = 3,
        health_check_interval_s: float = 5.0,
        probe_timeout_s: float = 30.0,
        probe_prompt_ids: Sequence[int] = (0,),
        invalidate_on_update: bool = True,
        max_tracked_sessions: int = DEFAULT_MAX_TRACKED_SESSIONS,
        defer_retry_s: float = DEFER_RETRY_S,
        max_defer_s: float = MAX_DEFER_S,
        working_set_s: float = WORKING_SET_S,
    ) -> None:
        if not engines:
            raise ValueError("a router needs at least one engine replica")
        self.engines = list(engines)
        self.core = RoutingCore(
            policy,
            list(names) if names else [f"replica-{i}" for i in range(len(engines))],
            kv_capacity_tokens=kv_capacity_tokens,
            unhealthy_after_failures=unhealthy_after_failures,
            max_tracked_sessions=max_tracked_sessions,
            defer_retry_s=defer_retry_s,
            max_defer_s=max_defer_s,
            working_set_s=working_set_s,
        )
        self._shared_capacity = kv_capacity_tokens if isinstance(kv_capacity_tokens, int) else None
        """A capacity given for every replica also applies to lendable ones added later."""
        self.tokenizer = self.engines[0].tokenizer
        self.max_model_len = _smallest_known([e.max_model_len for e in self.engines])
        self.health_check_interval_s = health_check_interval_s
        self.probe_timeout_s = probe_timeout_s
        self.probe_prompt_ids = list(probe_prompt_ids)
        self.invalidate_on_update = invalidate_on_update
        self._health_task: asyncio.Task[None] | None = None
        self._closed = False
        self.lends = 0
        """Times a lendable replica joined the pool."""

    @property
    def policy_name(self) -> str:
        return self.core.policy.name

    # -- generation ---------------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Serve `request` on the replica the policy picks; retry elsewhere on failure.

        Raises:
            EngineClosedError: the router was closed.
            RouterError: every healthy replica failed the request (the last error is chained).
        """
        if self._closed:
            raise EngineClosedError("the router is closed")
        self._ensure_health_task()
        route = RouteRequest(
            request_id=request.request_id,
            prompt_ids=request.prompt_ids,
            expected_decode_tokens=self.core.expected_decode(request.max_new_tokens),
            session_id=request.session_id,
        )
        held_since = time.monotonic()
        while self.core.should_defer(route, time.monotonic() - held_since):
            await asyncio.sleep(self.core.defer_retry_s)
            if self._closed:
                raise EngineClosedError("the router was closed while the request was held")
        tried: list[int] = []
        last_error: BaseException | None = None
        while True:
            try:
                dispatch = self.core.route(route, exclude=tried)
            except NoReplicaError as error:
                raise RouterError(str(error)) from last_error
            index = dispatch.replica.index
            try:
                output = await self.engines[index].generate(request)
            except (asyncio.CancelledError, EngineClosedError):
                self.core.cancel(dispatch)
                raise
            except Exception as error:  # noqa: BLE001 - any replica failure is retried elsewhere
                ejected = self.core.fail(dispatch)
                logger.warning(
                    "replica %s failed request %s (%s: %s)%s; retrying on another replica",
                    dispatch.replica.name,
                    request.request_id,
                    type(error).__name__,
                    error,
                    " and left the pool" if ejected else "",
                )
                tried.append(index)
                last_error = error
                continue
            self.core.complete(
                dispatch, output.token_ids, cached_tokens=output.cached_prefix_tokens
            )
            output.replica = dispatch.replica.name
            return output

    def end_session(self, session_id: str) -> None:
        """The agent session is over (the gateway calls this when it is finalized, deleted or
        expires): its context stops counting toward load control and its placement is dropped."""
        self.core.end_session(session_id)

    async def refresh_server_stats(self) -> int | None:
        """Refresh every replica's figures; returns their free KV tokens in all, or None when
        any of them does not know its own."""
        free = await asyncio.gather(*(e.refresh_server_stats() for e in self.engines))
        return _sum_known(free)

    # -- health -------------------------------------------------------------------------------

    def _ensure_health_task(self) -> None:
        if self._health_task is None and len(self.engines) > 1:
            self._health_task = asyncio.get_running_loop().create_task(self._health_loop())

    async def _health_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.health_check_interval_s)
            await self.check_health()

    async def check_health(self) -> None:
        """Probe every replica once: re-admit recovered ones, eject failing ones, reconcile."""
        await asyncio.gather(*(self._probe(i) for i in range(len(self.engines))))

    async def _probe(self, index: int) -> None:
        engine, replica = self.engines[index], self.core.replicas[index]
        if replica.parked or replica.lendable:
            return  # its owner's (the trainer's) model: only routed requests, which reclaim awaits
        try:
            await asyncio.wait_for(engine.refresh_server_stats(), self.probe_timeout_s)
            stats = engine.stats()
            if not stats.paused:
                probe = GenerateRequest(prompt_ids=self.probe_prompt_ids, max_new_tokens=1)
                await asyncio.wait_for(engine.generate(probe), self.probe_timeout_s)
        except Exception as error:  # noqa: BLE001 - a failed probe is a health signal
            if self.core.count_failure(index):
                logger.warning("replica %s failed its health check (%s)", replica.name, error)
            return
        if not replica.healthy:
            self.core.readmit(index)
            logger.info("replica %s recovered and is back in the pool", replica.name)
        replica.consecutive_failures = 0
        self.core.reconcile(
            index,
            free_kv_tokens=stats.free_kv_tokens,
            cached_prefix_tokens=stats.cached_prefix_tokens if stats.cached_prefixes else None,
            kv_capacity_tokens=stats.kv_capacity_tokens,
        )

    # -- lendable replicas (role switching) -----------------------------------------------------

    def add_lendable(self, engine: Engine, name: str) -> int:
        """Add a replica that is out of the pool until `lend` (e.g. the trainer's own model).

        It is never probed, so its KV capacity is settled now: the router's shared capacity if
        it was given one, else what the engine reports.
        """
        self.engines.append(engine)
        self.max_model_len = _smallest_known([e.max_model_len for e in self.engines])
        index = self.core.add_replica(name, kv_capacity_tokens=self._shared_capacity)
        self.core.adopt_capacity(index, engine.stats().kv_capacity_tokens)
        return index

    def lend(self, index: int) -> None:
        """Put a lendable replica in the pool: it takes new requests from now on."""
        self.core.unpark(index)
        self.lends += 1

    async def reclaim(self, index: int, *, poll_s: float = 0.005) -> float:
        """Take a lent replica out of the pool and wait until its requests have finished;
        returns the seconds spent draining."""
        self.core.park(index)
        replica = self.core.replicas[index]
        started = time.perf_counter()
        while replica.in_flight:
            await asyncio.sleep(poll_s)
        return time.perf_counter() - started

    # -- the rest of the Engine protocol --------------------------------------------------------

    async def update_weights(self, state: Any, version: int) -> None:
        """Load new weights on every replica (healthy or not, so a re-admitted one is current)."""
        await asyncio.gather(*(e.update_weights(state, version) for e in self.engines))
        if self.invalidate_on_update:
            self.core.invalidate_caches()

    async def pause(self, mode: PauseMode = "keep") -> None:
        """Pause every replica."""
        await asyncio.gather(*(e.pause(mode) for e in self.engines))

    async def resume(self) -> None:
        """Resume every replica."""
        await asyncio.gather(*(e.resume() for e in self.engines))

    def stats(self) -> EngineStats:
        """Totals over the replicas, with per-replica figures and router counters in `extra`."""
        each = [e.stats() for e in self.engines]
        counters = self.core.counters
        return EngineStats(
            running_requests=sum(s.running_requests for s in each),
            waiting_requests=sum(s.waiting_requests for s in each),
            queued_tokens=sum(s.queued_tokens for s in each),
            free_kv_tokens=_sum_known([s.free_kv_tokens for s in each]),
            kv_capacity_tokens=_sum_known([s.kv_capacity_tokens for s in each]),
            cached_prefixes=sum(s.cached_prefixes for s in each),
            cached_prefix_tokens=sum(s.cached_prefix_tokens for s in each),
            prefix_cache_hits=sum(s.prefix_cache_hits for s in each),
            prefix_cache_lookups=sum(s.prefix_cache_lookups for s in each),
            policy_version=min(s.policy_version for s in each),
            paused=all(s.paused for s in each),
            extra={
                "router_policy": self.policy_name,
                "router": vars(counters).copy(),
                "replicas": [
                    {
                        "name": r.name,
                        "healthy": r.healthy,
                        "in_flight": r.in_flight,
                        "queued_tokens": r.queued_tokens,
                        "tree_tokens": r.tree.size,
                        "sessions_placed": r.sessions_placed,
                        **s.model_dump(exclude={"extra"}),
                    }
                    for r, s in zip(self.core.replicas, each, strict=True)
                ],
            },
        )

    async def close(self) -> None:
        """Stop probing and close every replica."""
        if self._closed:
            return
        self._closed = True
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        await asyncio.gather(*(e.close() for e in self.engines))
