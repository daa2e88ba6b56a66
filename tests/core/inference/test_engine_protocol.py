"""The `Engine` protocol names every capability its users read: each shipped engine provides
every member, and the gateway and the router use them as declared (no engine is probed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.request import ChatRequest, Message, StreamDelta
from uni_agent_core.inference.hf_engine import HFEngine
from uni_agent_core.inference.openai_server import OpenAIServerEngine
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.inference.types import Engine, GenerateRequest, TokenOutput
from uni_agent_core.models import load_policy
from uni_agent_core.rl.role_switch import TrainerReplica
from uni_agent_core.rl.verl.engine_adapter import VerlServerEngine
from uni_agent_core.router.policies import make_policy
from uni_agent_core.router.router import Router

MEMBERS = {
    "generate",
    "update_weights",
    "pause",
    "resume",
    "stats",
    "close",
    "tokenizer",
    "max_model_len",
    "streams",
    "generate_stream",
    "end_session",
    "refresh_server_stats",
}
SHIPPED = [HFEngine, TrainerReplica, ScriptedEngine, OpenAIServerEngine, VerlServerEngine, Router]


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return load_policy("tiny")


class WindowedEngine(ScriptedEngine):
    """A scripted engine that knows its context window and counts refreshes."""

    def __init__(self, tokenizer: Any, window: int | None, free: int | None = None) -> None:
        super().__init__(tokenizer)
        self.max_model_len, self.free, self.refreshed = window, free, 0

    async def refresh_server_stats(self) -> int | None:
        self.refreshed += 1
        return self.free


class StreamingEngine(ScriptedEngine):
    """A scripted engine that streams its reply one token at a time."""

    streams = True

    async def generate_stream(
        self, request: GenerateRequest
    ) -> AsyncIterator[list[int] | TokenOutput]:
        output = await self.generate(request)
        for token in output.token_ids:
            yield [token]
        yield output


def test_the_protocol_names_exactly_these_members() -> None:
    assert {name for name in vars(Engine) if not name.startswith("_")} == MEMBERS


@pytest.mark.parametrize("cls", SHIPPED, ids=lambda cls: cls.__name__)
def test_every_shipped_engine_class_provides_every_member(cls: type) -> None:
    assert sorted(name for name in MEMBERS if not hasattr(cls, name)) == []


def test_engines_without_a_capability_report_its_default(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    hf = HFEngine(model, tokenizer, max_model_len=64)
    server = OpenAIServerEngine("http://127.0.0.1:9", model="m")
    verl = VerlServerEngine(object(), eos_token_ids=[0])
    scripted = ScriptedEngine(tokenizer)
    for engine in (hf, server, verl, scripted):
        assert isinstance(engine, Engine)
    assert (hf.tokenizer, hf.max_model_len, hf.streams) == (tokenizer, 64, True)
    assert scripted.tokenizer is tokenizer
    assert (scripted.max_model_len, scripted.streams) == (None, False)
    for plain in (server, verl):
        assert (plain.tokenizer, plain.max_model_len, plain.streams) == (None, None, False)

    async def main() -> list[list[int] | TokenOutput]:
        assert scripted.end_session("s") is None
        assert await scripted.refresh_server_stats() is None
        request = GenerateRequest(prompt_ids=[1, 2], request_id="r")
        items = [item async for item in scripted.generate_stream(request)]
        await server.close()
        await hf.close()
        return items

    items = asyncio.run(main())
    # The default stream is the one output of `generate`: no tokens before it.
    assert len(items) == 1 and isinstance(items[0], TokenOutput)
    assert items[0].token_ids == tokenizer("reply 0", add_special_tokens=False)["input_ids"] + [
        scripted.eos
    ]


def test_a_router_forwards_the_capabilities_of_its_replicas(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    replicas = [
        WindowedEngine(tokenizer, 128, free=10),
        WindowedEngine(tokenizer, None, free=5),
        WindowedEngine(tokenizer, 96, free=1),
    ]
    router = Router(replicas, make_policy("sticky"))
    assert isinstance(router, Engine)
    assert router.tokenizer is tokenizer
    assert router.max_model_len == 96  # the smallest window any replica knows
    assert router.streams is False  # failover cannot take back streamed tokens
    router.add_lendable(WindowedEngine(tokenizer, 80), "trainer")
    assert router.max_model_len == 80
    unknown = Router([WindowedEngine(tokenizer, None)], make_policy("sticky"))
    assert unknown.max_model_len is None

    async def main() -> int | None:
        await router.generate(GenerateRequest(prompt_ids=[1, 2, 3], session_id="s"))
        assert router.core.placements.get("s") is not None
        router.end_session("s")
        assert router.core.placements.get("s") is None
        return await router.refresh_server_stats()

    # The free KV of all, and None as soon as one replica (the lent trainer) does not know it.
    assert asyncio.run(main()) is None
    assert [r.refreshed for r in replicas] == [1, 1, 1]
    known = Router(replicas, make_policy("sticky"))
    assert asyncio.run(known.refresh_server_stats()) == 16


def test_the_gateway_uses_an_engine_with_the_defaults_as_it_is(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    manager = SessionManager(ScriptedEngine(tokenizer), tokenizer)
    session, _ = manager.create()
    bounded, _ = manager.create(max_total_tokens=500)
    assert (session.capacity, bounded.capacity) == (None, 500)
    deltas: list[StreamDelta] = []

    async def sink(delta: StreamDelta) -> None:
        deltas.append(delta)

    asyncio.run(session.chat(ChatRequest(messages=[Message(role="user", content="hi")]), sink))
    # No real stream: `generate` once, the whole reply as one delta.
    assert deltas == [StreamDelta(index=0, text="reply 0")]
    manager.delete(session.session_id)  # the default end_session: nothing to forget
    bounded.close()
    assert session.closed and bounded.closed


def test_the_gateway_streams_only_through_an_engine_that_streams(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    engine = StreamingEngine(tokenizer)
    engine.replies[0] = "one two three"
    session, _ = SessionManager(engine, tokenizer).create()
    deltas: list[StreamDelta] = []

    async def sink(delta: StreamDelta) -> None:
        deltas.append(delta)

    asyncio.run(session.chat(ChatRequest(messages=[Message(role="user", content="hi")]), sink))
    assert len(deltas) > 1
    assert "".join(d.text for d in deltas) == "one two three"


def test_the_gateway_over_a_router_is_bounded_and_ends_sessions(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    router = Router(
        [WindowedEngine(tokenizer, 300), WindowedEngine(tokenizer, 200)], make_policy("sticky")
    )
    manager = SessionManager(router, tokenizer)
    session, _ = manager.create()
    assert session.capacity == 200
    asyncio.run(session.chat(ChatRequest(messages=[Message(role="user", content="hi")])))
    assert router.core.placements.get(session.session_id) is not None
    manager.delete(session.session_id)
    assert router.core.placements.get(session.session_id) is None
