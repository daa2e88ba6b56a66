"""`bench/_gateway_floor.py`: the HTTP floor server encodes exactly what a gateway must."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import httpx
import pytest

from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.request import Message

BENCH = Path(__file__).resolve().parents[3] / "bench"
TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
FIRST = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}]
CALL = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
LATER = [
    *FIRST,
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "tests/test_x.py F"},
]


@pytest.fixture
def floor(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location("gateway_floor", BENCH / "_gateway_floor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("_gateway_server", None)


def test_turn_one_encodes_the_conversation_and_later_turns_only_the_new_messages(
    floor, tiny_tokenizer
) -> None:
    codec = ChatCodec(tiny_tokenizer)
    full = codec.encode_full([Message(**m) for m in FIRST], TOOLS)
    delta = codec.encode_delta([Message(**LATER[-1])], TOOLS, previous_ended=True)
    assert floor._new_tokens(codec, {"messages": FIRST, "tools": TOOLS}) == len(full)
    assert floor._new_tokens(codec, {"messages": LATER, "tools": TOOLS}) == len(delta)
    assert len(delta) < len(full)


def test_the_app_answers_the_benchmark_client_shapes(floor, tiny_tokenizer) -> None:
    async def exchange(app) -> tuple[dict, dict]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
            session = (await client.post("/sessions", json={})).json()
            url = session["openai_base_url"].removeprefix("http://127.0.0.1:8124")
            reply = await client.post(
                url + "/chat/completions", json={"messages": LATER, "tools": TOOLS}
            )
            assert reply.headers["content-length"] == str(len(reply.content))
            return session, reply.json()

    codec = ChatCodec(tiny_tokenizer)
    session, reply = asyncio.run(exchange(floor.make_app(8124, codec)))
    assert session["session_id"] and session["api_key"]
    message = reply["choices"][0]["message"]
    assert message["tool_calls"][0]["function"]["name"] == "shell"
    delta = codec.encode_delta([Message(**LATER[-1])], TOOLS, previous_ended=True)
    assert reply["usage"]["prompt_tokens"] == len(delta)
    _, plain = asyncio.run(exchange(floor.make_app(8124, None)))
    assert plain["usage"]["prompt_tokens"] == 1
