"""Session registry of one gateway process: creation, API keys, idle expiry, shared codec.

Two credentials, two planes (docs/architecture.md, "Gateway planes"):

- a **session key** per session, handed to the episode's agent: it opens that session's model
  endpoints and nothing else (`authenticate`);
- the gateway's one **control key**, held by the process that runs episodes and never put in a
  sandbox: it creates, reads, finalizes and deletes sessions and reads `/metrics`
  (`authorize_control`). Without it, an agent cannot end its own episode's session, open side
  sessions outside its budget, or fill the session table.

One codec and one decoder serve every session (they are stateless per call). Chat-template
renders and tokenization of large messages run in a small thread pool (`run_blocking`) so a
100K-token encode never stalls the event loop that serves the other sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from uni_agent_core.errors import AgentRLError
from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.decoding import ReplyDecoder
from uni_agent_core.gateway.metrics import GatewayMetrics
from uni_agent_core.gateway.parsers import ParserName
from uni_agent_core.gateway.request import Message
from uni_agent_core.gateway.session import GatewaySession, SessionSettings
from uni_agent_core.inference.types import Engine

logger = logging.getLogger(__name__)


class SessionNotFoundError(AgentRLError, KeyError):
    """No live session has this id (HTTP 404)."""


class SessionLimitError(AgentRLError, RuntimeError):
    """The gateway already holds `max_sessions` live sessions (HTTP 429)."""


CONTROL_KEY_VARIABLE = "AGENT_RL_GATEWAY_CONTROL_KEY"
"""Environment variable that gives `agent-rl gateway serve` its control key (generated and
printed when unset)."""

INVALID_SESSION_KEY = "invalid API key for this session"
"""The one answer to a wrong key and to a session id that does not exist: which ids exist is
not told to a caller without the key."""


def _same_key(given: str | None, expected: str) -> bool:
    """Whether `given` is `expected`, in constant time (any characters a header may carry)."""
    return given is not None and hmac.compare_digest(
        given.encode("utf-8", "surrogateescape"), expected.encode()
    )


def new_control_key() -> str:
    """A fresh control key."""
    return "ck-agent-rl-" + secrets.token_hex(24)


class SessionManager:
    """Creates, finds, authenticates and expires sessions.

    Args:
        engine: the engine (or router) every session generates with.
        tokenizer: the policy's tokenizer (with its chat template).
        settings: default session settings; a create request may override sampling ones.
        tool_parser: tool-call format of the policy.
        session_ttl_s: idle seconds after which an unfinalized session is dropped.
        max_sessions: live-session cap.
        encode_threads: threads for chat-template rendering and tokenization.
        control_key: the control plane's key (`new_control_key()` when None).
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        *,
        settings: SessionSettings | None = None,
        tool_parser: ParserName = "hermes",
        session_ttl_s: float = 3600.0,
        max_sessions: int = 1024,
        encode_threads: int = 2,
        template_kwargs: dict[str, Any] | None = None,
        control_key: str | None = None,
    ) -> None:
        self.engine = engine
        self.control_key = control_key or new_control_key()
        """Opens the control plane; never handed to an agent."""
        self.metrics = GatewayMetrics()
        self.codec = ChatCodec(tokenizer, template_kwargs)
        self.decoder = ReplyDecoder(tokenizer, tool_parser, self.metrics)
        self.settings = settings or SessionSettings()
        self.session_ttl_s = session_ttl_s
        self.max_sessions = max_sessions
        self._sessions: dict[str, GatewaySession] = {}
        self._keys: dict[str, str] = {}
        self._pool = ThreadPoolExecutor(max_workers=encode_threads, thread_name_prefix="codec")
        self._reaper: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the idle-session reaper (call from the running event loop)."""
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())

    async def stop(self) -> None:
        """Stop the reaper and the encode threads; sessions are dropped."""
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.wait([self._reaper])
            self._reaper = None
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        self._keys.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- sessions -----------------------------------------------------------------------------

    def create(
        self,
        *,
        sampling: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        max_total_tokens: int | None = None,
    ) -> tuple[GatewaySession, str]:
        """Open a session; returns it and its API key."""
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitError(
                f"the gateway holds {self.max_sessions} live sessions (max_sessions); "
                "finalize or delete finished ones"
            )
        settings = self.settings
        if sampling:
            allowed = {"temperature", "top_p", "top_k", "max_tokens", "seed"}
            unknown = set(sampling) - allowed
            if unknown:
                raise ValueError(
                    f"sampling: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}"
                )
            settings = replace(settings, **sampling)
        if max_total_tokens is not None:
            settings = replace(settings, max_total_tokens=max_total_tokens)
        session_id = uuid.uuid4().hex
        session = GatewaySession(
            session_id,
            engine=self.engine,
            codec=self.codec,
            decoder=self.decoder,
            settings=settings,
            metrics=self.metrics,
            run_blocking=self._run_blocking,
            metadata=metadata,
        )
        key = "sk-agent-rl-" + secrets.token_hex(24)
        self._sessions[session_id] = session
        self._keys[session_id] = key
        self.metrics.sessions_created += 1
        self.metrics.live_sessions = len(self._sessions)
        return session, key

    def get(self, session_id: str) -> GatewaySession:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFoundError(session_id) from None

    def authenticate(self, session_id: str, key: str | None) -> GatewaySession:
        """The session, if `key` is its API key; raises `PermissionError` otherwise, and also
        when no such session lives (`INVALID_SESSION_KEY` either way)."""
        expected = self._keys.get(session_id)
        if expected is None or not _same_key(key, expected):
            raise PermissionError(INVALID_SESSION_KEY)
        return self._sessions[session_id]

    def authorize_control(self, key: str | None) -> None:
        """Returns if `key` is the control key; raises `PermissionError` otherwise."""
        if not _same_key(key, self.control_key):
            raise PermissionError(
                "this endpoint is the gateway's control plane: it needs the control key, "
                "not a session key"
            )

    def delete(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        self._keys.pop(session_id, None)
        if session is None:
            raise SessionNotFoundError(session_id)
        session.close()
        self.metrics.live_sessions = len(self._sessions)

    def __len__(self) -> int:
        return len(self._sessions)

    # -- internals ----------------------------------------------------------------------------

    async def _run_blocking(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # Small encodes are cheaper inline than a thread hop; big ones must not block the loop.
        size = sum(
            len(m.content)
            for a in args
            if isinstance(a, Sequence) and not isinstance(a, str)
            for m in a
            if isinstance(m, Message)
        )
        if size < 4096:
            return fn(*args, **kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))

    def expire_idle(self, now: float | None = None) -> int:
        """Drop sessions idle for longer than the TTL; returns how many."""
        now = time.monotonic() if now is None else now
        stale = [
            sid
            for sid, s in self._sessions.items()
            if now - s.last_used > self.session_ttl_s and not s.busy
        ]
        for session_id in stale:
            with contextlib.suppress(SessionNotFoundError):
                self.delete(session_id)
        self.metrics.sessions_expired += len(stale)
        return len(stale)

    async def _reap_forever(self) -> None:
        interval = max(1.0, min(60.0, self.session_ttl_s / 4))
        while True:
            await asyncio.sleep(interval)
            expired = self.expire_idle()
            if expired:
                logger.info("expired %d idle gateway sessions", expired)
