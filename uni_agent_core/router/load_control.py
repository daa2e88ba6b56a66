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
sense: the context size (prompt plus output of the last request) of every session with a request
in flight or one that started or ended within the past `window_s` seconds. A session in a longer
tool pause leaves it (LRU evicts its cache first anyway, so holding others back would not save
it); one that ends leaves at once and is not counted again (`RoutingCore.end_session`: the
gateway calls it when a session is finalized, deleted or expires); a weight update empties it
(no cached context survives one). The table is bounded like `SessionPlacements`. The decision
itself is the policy's (`TokenLoad.defer`), and the caller (the async `Router`, or the
simulator) retries a held request every `defer_retry_s` until the policy lets it go or it has
waited `max_defer_s`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from uni_agent_core.config.inference import DEFAULT_MAX_TRACKED_SESSIONS, WORKING_SET_S


class _Session:
    __slots__ = ("in_flight", "stamp", "tokens")

    def __init__(self, tokens: int, stamp: float, in_flight: int) -> None:
        self.tokens, self.stamp, self.in_flight = tokens, stamp, in_flight


class LiveContexts:
    """session id -> context tokens, with their total; ended, idle and excess sessions leave.

    Args:
        capacity: sessions tracked at most, and ended ones remembered at most (the least
            recently updated is dropped first).
        window_s: the working-set window: a session with no request in flight that has not
            started or finished one for this long no longer counts.
        clock: seconds, monotone (the simulator passes its own).
    """

    def __init__(
        self,
        capacity: int = DEFAULT_MAX_TRACKED_SESSIONS,
        *,
        window_s: float = WORKING_SET_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"a live-context table needs capacity >= 1, got {capacity}")
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.capacity = capacity
        self.window_s = window_s
        self.clock = clock
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        """Least recently stamped first."""
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._total = 0

    def start(self, session_id: str, context_tokens: int) -> None:
        """A request of the session was dispatched; with its expected output, its context is
        `context_tokens`. Ignored for an ended session."""
        if session_id in self._ended:
            return
        entry = self._sessions.pop(session_id, None)
        in_flight = 1
        if entry is not None:
            self._total -= entry.tokens
            in_flight += entry.in_flight
        self._put(session_id, _Session(context_tokens, self.clock(), in_flight))

    def finish(self, session_id: str, context_tokens: int | None) -> None:
        """A request of the session ended: completed, its context is now `context_tokens`;
        failed or cancelled (None), it is unchanged. Ignored for a session no longer tracked."""
        entry = self._sessions.pop(session_id, None)
        if entry is None:
            return
        self._total -= entry.tokens
        tokens = entry.tokens if context_tokens is None else context_tokens
        self._put(session_id, _Session(tokens, self.clock(), max(0, entry.in_flight - 1)))

    def end(self, session_id: str) -> None:
        """The session is over: it leaves now, and later requests of it are not counted."""
        entry = self._sessions.pop(session_id, None)
        if entry is not None:
            self._total -= entry.tokens
        self._ended[session_id] = None
        self._ended.move_to_end(session_id)
        if len(self._ended) > self.capacity:
            self._ended.popitem(last=False)

    def ended(self, session_id: str) -> bool:
        """Whether the session was ended (as far as the bounded memory of ended ones goes)."""
        return session_id in self._ended

    def clear(self) -> None:
        """Forget every session's context (new weights: none of it is cached any more)."""
        self._sessions.clear()
        self._total = 0

    def total(self) -> int:
        """Context tokens of the sessions in the working set (those idle longer than `window_s`
        with nothing in flight are dropped first; one still in flight is active now)."""
        now = self.clock()
        horizon = now - self.window_s
        sessions = self._sessions
        while sessions:
            session_id, entry = next(iter(sessions.items()))
            if entry.stamp >= horizon:
                break
            if entry.in_flight:
                entry.stamp = now
                sessions.move_to_end(session_id)
                continue
            del sessions[session_id]
            self._total -= entry.tokens
        return self._total

    def _put(self, session_id: str, entry: _Session) -> None:
        self._sessions[session_id] = entry
        self._total += entry.tokens
        if len(self._sessions) > self.capacity:
            _, dropped = self._sessions.popitem(last=False)
            self._total -= dropped.tokens

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)
