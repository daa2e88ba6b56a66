"""Which replica each agent session was last routed to, in bounded memory.

A router that serves a long RL run sees millions of sessions, each alive for minutes, and the
placement of a finished session is never read again; the router is not always told when a
session ends. `SessionPlacements` therefore keeps the `capacity` most recently routed sessions
and forgets the least recently routed one first. A session still at work keeps its entry: it is
forgotten only after `capacity` other sessions have been routed since its own last request, or
when it is ended (`RoutingCore.end_session`). A forgotten session is placed afresh on its next
request, as a new one would be.
"""

from __future__ import annotations

from collections import OrderedDict

from uni_agent_core.config.inference import DEFAULT_MAX_TRACKED_SESSIONS


class SessionPlacements:
    """session id -> index of the replica that served its last request (LRU-bounded)."""

    def __init__(self, capacity: int = DEFAULT_MAX_TRACKED_SESSIONS) -> None:
        if capacity < 1:
            raise ValueError(f"a session placement table needs capacity >= 1, got {capacity}")
        self.capacity = capacity
        self._replica: OrderedDict[str, int] = OrderedDict()

    def get(self, session_id: str) -> int | None:
        """The replica that served the session's last request, if it is remembered."""
        return self._replica.get(session_id)

    def place(self, session_id: str, index: int) -> None:
        """The session's request went to replica `index`; forget the least recent beyond
        capacity."""
        self._replica[session_id] = index
        self._replica.move_to_end(session_id)
        if len(self._replica) > self.capacity:
            self._replica.popitem(last=False)

    def forget(self, session_id: str) -> None:
        """The session is over (unknown ids are ignored)."""
        self._replica.pop(session_id, None)

    def forget_replica(self, index: int) -> int:
        """Replica `index` left the pool: its sessions are placed afresh on their next request.
        Returns how many were forgotten."""
        gone = [session_id for session_id, i in self._replica.items() if i == index]
        for session_id in gone:
            del self._replica[session_id]
        return len(gone)

    def __len__(self) -> int:
        return len(self._replica)
