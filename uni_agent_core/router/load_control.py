"""Load control against KV thrash: how much context the live sessions hold, router-side.

When the contexts of the agent sessions at work add up to more than the cluster's KV memory,
some paused session's cache must go whenever another one is prefilled. A request whose context
is cached nowhere is the worst case: its whole context is prefilled from scratch, and the KV it
takes evicts the caches of other paused sessions, which are prefilled from scratch in turn when
they come back — a thrash that feeds itself. It is Denning's argument for paging: once the
working sets exceed memory, running everything at once only moves pages; an operating system
suspends processes until the rest fit. A router can do the same for KV: hold such a request back
for a while, so the sessions whose caches are still resident finish without being evicted.

`LiveContexts` is the demand side of that decision, the sessions' working set in Denning's
sense: the context size (prompt plus output of the last request) of every session whose last
request started or ended within the past `window_s` seconds. A session in a longer tool pause
leaves it (LRU evicts its cache first anyway, so holding others back would not save it); one
that ends leaves at once (`RoutingCore.end_session`: the gateway calls it when a session is
finalized, deleted or expires). The table is bounded like `SessionPlacements`. The decision
itself is the policy's (`TokenLoad.defer`), and the caller (the async `Router`, or the
simulator) retries a held request every `defer_retry_s` until the policy lets it go or it has
waited `max_defer_s`.

The window was chosen in the simulator (`bench/router.py`, 512 sessions on 8 replicas): with 60 s
rather than 900 s, `mixed` kept its hit rate (seed 0: 93.25% against 93.3%; seed 4: 92.5% against
92.7%) and gained throughput (2220 against 2009 tokens/s at seed 0), since fewer requests are held
for sessions that are not coming back soon.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from uni_agent_core.config.inference import DEFAULT_MAX_TRACKED_SESSIONS


class LiveContexts:
    """session id -> context tokens, with their total; ended, idle and excess sessions leave.

    Args:
        capacity: sessions tracked at most (the least recently updated is dropped first).
        window_s: the working-set window: a session not updated for this long no longer counts.
        clock: seconds, monotone (the simulator passes its own).
    """

    def __init__(
        self,
        capacity: int = DEFAULT_MAX_TRACKED_SESSIONS,
        *,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"a live-context table needs capacity >= 1, got {capacity}")
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.capacity = capacity
        self.window_s = window_s
        self.clock = clock
        self._sessions: OrderedDict[str, tuple[int, float]] = OrderedDict()
        """session id -> (context tokens, last update), least recently updated first."""
        self._total = 0

    def update(self, session_id: str, context_tokens: int) -> None:
        """The session's context is now `context_tokens` long."""
        self.end(session_id)
        self._sessions[session_id] = (context_tokens, self.clock())
        self._total += context_tokens
        if len(self._sessions) > self.capacity:
            _, (tokens, _) = self._sessions.popitem(last=False)
            self._total -= tokens

    def end(self, session_id: str) -> None:
        """The session is over (unknown ids are ignored)."""
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            self._total -= entry[0]

    def total(self) -> int:
        """Context tokens of the sessions in the working set (those idle longer than `window_s`
        are dropped first)."""
        horizon = self.clock() - self.window_s
        sessions = self._sessions
        while sessions:
            session_id, (tokens, updated) = next(iter(sessions.items()))
            if updated >= horizon:
                break
            del sessions[session_id]
            self._total -= tokens
        return self._total

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)
