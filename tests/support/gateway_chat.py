"""Building chat requests for gateway session tests: a system prompt, a task, assistant and tool
turns, and `ask` (one request, one choice)."""

from __future__ import annotations

from uni_agent_core.gateway.request import ChatRequest, Message, ToolCall

TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
SYSTEM = Message(role="system", content="You are a coding agent.")
USER = Message(role="user", content="Fix the bug.")


def assistant(text: str, calls: list[ToolCall] | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=calls)


def tool(text: str, call_id: str = "c1") -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id)


async def ask(session, messages, tools=None, **kw):
    """One request to `session`; its only choice."""
    (choice,) = await session.chat(ChatRequest(messages=messages, tools=tools, **kw))
    return choice
