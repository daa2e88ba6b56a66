"""SessionManager: long encodes run off the event loop; keys; limits; idle expiry."""

from __future__ import annotations

import asyncio
import threading
import time
from unittest import mock

import pytest

from uni_agent_core.gateway.manager import SessionLimitError, SessionManager, SessionNotFoundError
from uni_agent_core.gateway.request import ChatRequest, Message


def test_a_long_encode_does_not_stall_other_sessions(tiny_tokenizer, scripted_engine_cls) -> None:
    manager = SessionManager(scripted_engine_cls(tiny_tokenizer), tiny_tokenizer)
    slow, _ = manager.create()
    fast, _ = manager.create()
    huge = Message(role="user", content="lorem ipsum dolor sit amet " * 1_000)
    small = Message(role="user", content="hi")
    # The big encode is held in the codec pool until the fast chat has finished: if it ran on
    # the event loop, the fast chat could not finish and the wait would time out.
    big_encode_started, fast_finished = threading.Event(), threading.Event()
    encode_full = slow.codec.encode_full

    def held_encode_full(messages, *args, **kwargs):
        if any(len(m.content) > 4096 for m in messages):
            big_encode_started.set()
            assert fast_finished.wait(timeout=10), "the fast chat never finished"
        return encode_full(messages, *args, **kwargs)

    finished: list[str] = []

    async def chat(session, message, name):
        await session.chat(ChatRequest(messages=[message]))
        finished.append(name)

    async def go():
        big = asyncio.create_task(chat(slow, huge, "slow"))
        await asyncio.to_thread(big_encode_started.wait, 10)
        started = time.perf_counter()
        await chat(fast, small, "fast")
        fast_latency = time.perf_counter() - started
        fast_finished.set()
        await big
        return fast_latency

    with mock.patch.object(slow.codec, "encode_full", held_encode_full):
        fast_latency = asyncio.run(go())
    assert big_encode_started.is_set()
    assert finished == ["fast", "slow"]
    assert fast_latency < 2.0


def test_keys_limits_and_expiry(tiny_tokenizer, scripted_engine_cls) -> None:
    manager = SessionManager(
        scripted_engine_cls(tiny_tokenizer), tiny_tokenizer, max_sessions=2, session_ttl_s=10
    )
    a, key_a = manager.create(sampling={"temperature": 0.5})
    b, _ = manager.create()
    assert a.settings.temperature == 0.5
    with pytest.raises(SessionLimitError):
        manager.create()
    assert manager.authenticate(a.session_id, key_a) is a
    with pytest.raises(PermissionError):
        manager.authenticate(a.session_id, "sk-wrong")
    with pytest.raises(SessionNotFoundError):
        manager.get("missing")
    with pytest.raises(ValueError, match="unknown keys"):
        manager.delete(b.session_id) or manager.create(sampling={"temprature": 1.0})
    assert manager.expire_idle(now=a.last_used + 5) == 0
    assert manager.expire_idle(now=a.last_used + 11) == 1
    assert len(manager) == 0 and a.closed


def test_a_routing_engine_hears_when_sessions_end(tiny_tokenizer, scripted_engine_cls) -> None:
    """Finalize, delete and expiry all call the engine's `end_session` (the `Router` stops
    counting the session's context for load control; other engines' default does nothing)."""
    engine = scripted_engine_cls(tiny_tokenizer)
    ended: list[str] = []
    engine.end_session = ended.append
    manager = SessionManager(engine, tiny_tokenizer, session_ttl_s=10)
    finalized, _ = manager.create()
    deleted, _ = manager.create()
    idle, _ = manager.create()
    finalized.close()  # what POST /sessions/<id>/finalize does
    manager.delete(deleted.session_id)
    assert manager.expire_idle(now=idle.last_used + 11) == 2  # the finalized one goes too
    assert ended[:3] == [finalized.session_id, deleted.session_id, finalized.session_id]
    assert set(ended) == {finalized.session_id, deleted.session_id, idle.session_id}
    plain = SessionManager(scripted_engine_cls(tiny_tokenizer), tiny_tokenizer)
    session, _ = plain.create()
    plain.delete(session.session_id)  # the default end_session: nothing to forget
