"""What an episode's trace learns from the gateway: each engine call as a `ModelCall` (how it
continued its chain, timing, where its tokens lie), why each chain was opened, and where a
rolled-back action was replaced."""

from __future__ import annotations

import asyncio

from uni_agent_core.gateway.chain import OpenedBy
from uni_agent_core.gateway.request import ChatRequest, Message

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
SYSTEM = Message(role="system", content="You are a coding agent.")
USER = Message(role="user", content="Fix the bug.")


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def tool(text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id="c1")


async def ask(session, messages, tools=None, **kw):
    (choice,) = await session.chat(ChatRequest(messages=messages, tools=tools, **kw))
    return choice


def opened_by(session) -> dict[int, str]:
    return {t.chain_id: t.metadata["opened_by"] for t in session.trajectories()}


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


def test_a_rollback_is_marked_where_the_rewrite_starts(make_session) -> None:
    session, engine = make_session()

    async def go():
        history = [SYSTEM, USER]
        a = await ask(session, history)
        history += [assistant(a.content), tool("out 1")]
        b = await ask(session, history)
        await ask(session, history + [assistant("a much better action"), tool("out 2")])
        return b

    b = asyncio.run(go())
    (trajectory,) = session.trajectories()
    (mark,) = trajectory.metadata["rollback_marks"]
    superseded = session.model_calls()[mark["call"]]
    assert superseded.superseded and superseded.completion_tokens == b.completion_tokens
    assert superseded.dropped_ids == session.calls[mark["call"]].output_ids
    rewrite = engine.tokenizer.decode(trajectory.response_ids[mark["at"] :])
    assert "a much better action" in rewrite
    assert "a much better action" not in engine.tokenizer.decode(
        trajectory.response_ids[: mark["at"]]
    )
    assert [c.continuation for c in session.model_calls()] == ["new", "append", "rollback"]


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
