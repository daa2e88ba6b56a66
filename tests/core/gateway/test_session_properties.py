"""Property test: random agent conversations never break the TITO invariant.

Hypothesis drives a client that keeps several conversation threads and, step by step,
continues one (echoing the reply and adding a tool result or user message), branches (a
subagent with its own system prompt, or a resample of an earlier prefix), rewrites the latest
assistant turn (rollback), or compacts a thread into a summary (a new chain). Replies are
scripted and randomly carry tool calls; requests are randomly sent as OpenAI wire payloads,
lowered incrementally against the session's history memo. After every run, every engine call
and chain must satisfy the TITO invariant and masks, logprobs and versions must stay aligned.
"""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uni_agent_core.gateway.adapters.openai import parse_openai_request
from uni_agent_core.gateway.request import ChatRequest, Message, ToolCall
from uni_agent_core.gateway.tito import tito_violations

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
WORDS = st.sampled_from(["ls", "cat a.py", "fix", "héllo", "x\ny", "  spaced ", "{json}", ""])
REPLY = st.one_of(
    st.builds(lambda w: f"I will {w}", WORDS),
    st.builds(
        lambda w: (
            f'<tool_call>\n{{"name": "shell", "arguments": {{"cmd": "{w.strip()}"}}}}\n</tool_call>'
        ),
        st.sampled_from(["ls", "pytest", "cat b.py"]),
    ),
)
ACTION = st.sampled_from(
    ["continue", "continue", "continue", "branch", "rollback", "rollback", "compact"]
)


def _echo(choice) -> Message:
    calls = [
        ToolCall(id=f"id{i}", name=c.name, arguments=c.arguments)
        for i, c in enumerate(choice.tool_calls)
    ]
    return Message(role="assistant", content=choice.content, tool_calls=calls or None)


def _wire(message: Message) -> dict:
    """The OpenAI wire form of a message (what a harness would send)."""
    raw: dict = {"role": message.role, "content": message.content}
    if message.tool_calls:
        raw["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        raw["tool_call_id"] = message.tool_call_id
    return raw


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(st.tuples(ACTION, st.integers(0, 7), WORDS), min_size=1, max_size=14),
    replies=st.lists(REPLY, min_size=40, max_size=40),
    use_tools=st.booleans(),
    over_the_wire=st.booleans(),
)
def test_random_conversations_keep_tito(
    make_session, steps, replies, use_tools, over_the_wire
) -> None:
    session, engine = make_session()
    engine.replies = dict(enumerate(replies))
    tools = TOOLS if use_tools else None

    async def go():
        system = Message(role="system", content="agent")
        threads: list[list[Message]] = [[system, Message(role="user", content="task")]]
        for action, pick, word in steps:
            thread = threads[pick % len(threads)]
            if action == "branch":
                if pick % 2:  # a subagent, handed the last message as its task
                    last = thread[-1]
                    if last.role == "tool":  # a tool result alone would answer no call
                        last = Message(role="user", content=last.content)
                    thread = [Message(role="system", content=f"sub {word}"), last]
                else:
                    cut = max(2, len(thread) - 2 * (pick % 3))
                    thread = list(thread[:cut])
                threads.append(thread)
            elif action == "rollback" and len(thread) >= 4 and thread[-2].role == "assistant":
                # A rewrite keeps its tool calls: the tool result after it still answers one.
                calls = thread[-2].tool_calls
                thread[-2] = Message(
                    role="assistant", content=f"rewritten {word}", tool_calls=calls
                )
            elif action == "compact":
                thread = [system, Message(role="user", content=f"summary {word}")]
                threads.append(thread)
            if thread[-1].role == "assistant":
                thread.append(Message(role="user", content=word or "go"))
            if over_the_wire:  # lowered incrementally against the session's history memo
                payload = {"messages": [_wire(m) for m in thread], "tools": tools}
                request = parse_openai_request(payload, session.history)
                assert list(request.messages) == thread
            else:
                request = ChatRequest(messages=list(thread), tools=tools)
            (choice,) = await session.chat(request)
            follow = (
                Message(role="tool", content=word, tool_call_id="id0")
                if choice.tool_calls
                else Message(role="user", content=f"next {word}")
            )
            thread += [_echo(choice), follow]

    asyncio.run(go())
    assert tito_violations(session.trajectories(), session.calls) == []
    for trajectory in session.trajectories():
        n = len(trajectory.response_ids)
        assert len(trajectory.loss_mask) == len(trajectory.logprobs) == n
        assert len(trajectory.policy_versions) == n
