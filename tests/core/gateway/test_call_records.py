"""What an episode's trace learns from the gateway: each engine call as a `ModelCall` (how it
continued its chain, timing, where its tokens lie) and why each chain was opened (where a
rolled-back action was replaced: `test_session_chains.py`)."""

from __future__ import annotations

import asyncio

from support.gateway_chat import SYSTEM, TOOLS, USER, ask, assistant, tool

from uni_agent_core.gateway.chain import OpenedBy
from uni_agent_core.gateway.request import ChatRequest, Message


def test_each_chain_says_why_it_was_opened(make_session) -> None:
    session, _ = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history, tools=TOOLS)
        history += [assistant(a.content), tool("out")]
        await ask(session, history, tools=TOOLS)
        await ask(session, [Message(role="system", content="You search."), USER], tools=TOOLS)
        await ask(session, history, tools=TOOLS + [{"type": "function", "function": {"name": "x"}}])
        compacted = [SYSTEM, Message(role="user", content="Summary: half done. Continue.")]
        await ask(session, compacted, tools=TOOLS)
        await session.chat(ChatRequest(messages=[SYSTEM, USER], tools=TOOLS, n=2))

    asyncio.run(go())
    reasons = [t.metadata["opened_by"] for t in session.trajectories()]
    assert reasons == [
        OpenedBy.FIRST,
        OpenedBy.SYSTEM,
        OpenedBy.TOOLS,
        OpenedBy.DIVERGED,
        OpenedBy.SIBLING,  # n = 2: the first sample repeats a prompt chain 0 already answered
        OpenedBy.SIBLING,
    ]
    calls = session.model_calls()
    assert [c.continuation for c in calls] == ["new", "append", "new", "new", "new", "new", "new"]
    assert [c.opened_by for c in calls][:3] == [OpenedBy.FIRST, None, OpenedBy.SYSTEM]


def test_model_calls_locate_their_tokens_and_time(make_session) -> None:
    session, _ = make_session()

    async def go():
        history = [SYSTEM, USER]
        for turn in range(3):
            choice = await ask(session, history)
            history += [assistant(choice.content), Message(role="user", content=f"go {turn}")]

    asyncio.run(go())
    (trajectory,) = session.trajectories()
    for record, call in zip(session.model_calls(), session.calls, strict=True):
        start = record.response_start
        assert trajectory.response_ids[start : start + record.completion_tokens] == call.output_ids
        assert record.prompt_tokens == len(call.prompt_ids)
        assert record.started_at > 1e9 and record.latency_s >= 0
        assert record.replica is None and not record.superseded


def test_tool_calls_of_a_reply_are_summarized(make_session) -> None:
    session, engine = make_session()

    async def go():
        call = '{"name": "shell", "arguments": {"command": "ls"}}'
        engine.replies = {0: f"<tool_call>\n{call}\n</tool_call>"}
        return await ask(session, [SYSTEM, USER], tools=TOOLS)

    choice = asyncio.run(go())
    assert [call.name for call in choice.tool_calls] == ["shell"]
    (record,) = session.model_calls()
    assert record.tool_calls == [{"name": "shell", "arguments": '{"command": "ls"}'}]
