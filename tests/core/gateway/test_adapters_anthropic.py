"""Anthropic Messages adapter: lowering, 400s, responses, streaming, read back by the SDK.

Also pins that an OpenAI and an Anthropic payload of the same conversation lower to the same
messages and tools (up to tool-call ids), so both protocols produce the same tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from uni_agent_core.gateway.adapters.anthropic import (
    anthropic_error,
    anthropic_wire_error,
    parse_anthropic_count_tokens,
    parse_anthropic_request,
)
from uni_agent_core.gateway.adapters.anthropic_render import (
    AnthropicEventStream,
    anthropic_response,
    anthropic_sse_event,
    anthropic_stream_events,
    invalid_tool_inputs,
)
from uni_agent_core.gateway.adapters.errors import WireError
from uni_agent_core.gateway.adapters.openai import parse_openai_request
from uni_agent_core.gateway.history import HistoryCache
from uni_agent_core.gateway.request import (
    ChatChoice,
    ChatRequest,
    Message,
    StreamDelta,
    ToolCall,
)

TOOL_USE_ID = re.compile(r"^toolu_[0-9a-f]{24}$")
STREAM_EVENT = TypeAdapter(RawMessageStreamEvent)

SHELL_SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
SHELL_TOOL = {"name": "shell", "description": "Run a shell command.", "input_schema": SHELL_SCHEMA}
SHELL_FUNCTION = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": SHELL_SCHEMA,
    },
}


def _choice(**fields: Any) -> ChatChoice:
    values: dict[str, Any] = {
        "index": 0,
        "content": "",
        "finish_reason": "stop",
        "chain_id": 0,
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "cached_tokens": 16,
    }
    values.update(fields)
    return ChatChoice(**values)


def _request(**fields: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": "policy",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "hi"}],
    }
    payload.update(fields)
    return payload


def _client(handler: Callable[[dict[str, Any]], httpx2.Response]) -> anthropic.Anthropic:
    def transport(request: httpx2.Request) -> httpx2.Response:
        return handler(json.loads(request.content))

    return anthropic.Anthropic(
        api_key="sk-session",
        base_url="http://gateway.test/sessions/s1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(transport)),
        max_retries=0,
        _strict_response_validation=True,
    )


def _serve(respond: Callable[[ChatRequest, dict[str, Any]], httpx2.Response]):
    """A stand-in server: parse with the adapter, map `WireError` to the Anthropic envelope."""

    def handler(payload: dict[str, Any]) -> httpx2.Response:
        try:
            request = parse_anthropic_request(payload)
        except WireError as error:
            status, body = anthropic_wire_error(error)
            return httpx2.Response(status, json=body)
        return respond(request, payload)

    return handler


def test_parse_claude_code_style_conversation() -> None:
    payload = _request(
        system=[
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "inspect first", "signature": "sig"},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "shell", "input": {"cmd": "pwd"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "no"},
                            {"type": "text", "text": "cwd"},
                        ],
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "Keep going."},
                ],
            },
            {"role": "assistant", "content": "Done."},
        ],
        tools=[{**SHELL_TOOL, "cache_control": {"type": "ephemeral"}}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": False},
        metadata={"user_id": "u"},
        thinking={"type": "disabled"},
        temperature=1.0,
        top_p=0.95,
        top_k=20,
        stop_sequences=["</done>"],
        stream=True,
    )
    request = parse_anthropic_request(payload)
    assert request.messages == [
        Message(role="system", content="You are Claude Code.\nBe brief."),
        Message(role="user", content="Fix the bug."),
        Message(
            role="assistant",
            content="Looking.",
            reasoning_content="inspect first",
            tool_calls=[
                ToolCall(id="toolu_1", name="shell", arguments={"cmd": "ls"}),
                ToolCall(id="toolu_2", name="shell", arguments={"cmd": "pwd"}),
            ],
        ),
        Message(role="tool", content="a.py", tool_call_id="toolu_1"),
        Message(role="tool", content="no\ncwd", tool_call_id="toolu_2"),
        Message(role="user", content="Keep going."),
        Message(role="assistant", content="Done."),
    ]
    assert request.tools == [SHELL_FUNCTION]
    sampling = request.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (1.0, 0.95, 20)
    assert (sampling.max_tokens, sampling.stop) == (256, ["</done>"])
    assert (request.n, request.stream) == (1, True)


def test_user_blocks_keep_their_order_around_tool_results() -> None:
    request = parse_anthropic_request(
        _request(
            system="sys",
            messages=[
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
                        {"type": "tool_use", "id": "t2", "name": "ls", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "before"},
                        {"type": "tool_result", "tool_use_id": "t1"},
                        {"type": "text", "text": "after 1"},
                        {"type": "text", "text": "after 2"},
                        {"type": "tool_result", "tool_use_id": "t2", "content": []},
                    ],
                },
                {"role": "user", "content": []},
            ],
        )
    )
    assert [(m.role, m.content, m.tool_call_id) for m in request.messages] == [
        ("system", "sys", None),
        ("assistant", "", None),
        ("user", "before", None),
        ("tool", "", "t1"),
        ("user", "after 1\nafter 2", None),
        ("tool", "", "t2"),
        ("user", "", None),
    ]


def test_tool_choice_none_drops_tools() -> None:
    assert parse_anthropic_request(_request(tools=[SHELL_TOOL])).tools == [SHELL_FUNCTION]
    dropped = parse_anthropic_request(_request(tools=[SHELL_TOOL], tool_choice={"type": "none"}))
    assert dropped.tools is None
    no_description = parse_anthropic_request(
        _request(tools=[{"name": "f", "input_schema": {"type": "object"}, "type": "custom"}])
    )
    assert no_description.tools == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]


def test_openai_and_anthropic_payloads_of_one_conversation_lower_alike() -> None:
    openai_payload = {
        "model": "policy",
        "max_tokens": 128,
        "messages": [
            {"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": "Tests fail."},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_x",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd":"pytest -x"}'},
                    },
                    {
                        "id": "call_y",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd": "git diff"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_x", "content": "1 failed"},
            {"role": "tool", "tool_call_id": "call_y", "content": ""},
            {"role": "user", "content": "Please fix it."},
        ],
        "tools": [SHELL_FUNCTION],
        "temperature": 1.0,
        "stop": ["</end>"],
    }
    anthropic_payload = _request(
        max_tokens=128,
        system="You fix bugs.",
        messages=[
            {"role": "user", "content": "Tests fail."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_x",
                        "name": "shell",
                        "input": {"cmd": "pytest -x"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_y",
                        "name": "shell",
                        "input": {"cmd": "git diff"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_x", "content": "1 failed"},
                    {"type": "tool_result", "tool_use_id": "toolu_y", "content": ""},
                    {"type": "text", "text": "Please fix it."},
                ],
            },
        ],
        tools=[SHELL_TOOL],
        temperature=1.0,
        stop_sequences=["</end>"],
    )

    def without_ids(request: ChatRequest) -> ChatRequest:
        messages = [
            message.model_copy(
                update={
                    "tool_call_id": None,
                    "tool_calls": [
                        call.model_copy(update={"id": None}) for call in message.tool_calls
                    ]
                    if message.tool_calls
                    else None,
                }
            )
            for message in request.messages
        ]
        return request.model_copy(update={"messages": messages})

    from_openai = without_ids(parse_openai_request(openai_payload))
    from_anthropic = without_ids(parse_anthropic_request(anthropic_payload))
    assert len(from_openai.messages) == 6
    assert from_openai.messages == from_anthropic.messages
    assert from_openai.tools == from_anthropic.tools
    assert from_openai.sampling == from_anthropic.sampling


def _user(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


def _assistant_turn(*blocks: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hi"}, {"role": "assistant", "content": list(blocks)}]


REFUSED_FIELDS: dict[str, tuple[Any, str, str]] = {
    "web_search_tool": (
        _request(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
        "tools[0].type",
        "server tool 'web_search_20250305'",
    ),
    "input_examples": (
        _request(tools=[{**SHELL_TOOL, "input_examples": [{"cmd": "ls"}]}]),
        "tools[0].input_examples",
        "cannot show examples",
    ),
    "allowed_callers_without_direct": (
        _request(tools=[{**SHELL_TOOL, "allowed_callers": ["code_execution_20250825"]}]),
        "tools[0].allowed_callers",
        "must include 'direct'",
    ),
    "mcp_servers": (
        _request(mcp_servers=[{"type": "url", "url": "https://mcp.test", "name": "m"}]),
        "mcp_servers",
        "no MCP server",
    ),
    "structured_output": (
        _request(output_config={"format": {"type": "json_schema", "schema": {}}}),
        "output_config.format",
        "structured output",
    ),
    "task_budget": (
        _request(output_config={"task_budget": {"type": "tokens", "total": 9}}),
        "output_config.task_budget",
        "budget",
    ),
    "bad_effort": (_request(output_config={"effort": "huge"}), "output_config.effort", "one of"),
    "clear_tool_uses": (
        _request(
            context_management={
                "edits": [
                    {"type": "clear_thinking_20251015", "keep": "all"},
                    {"type": "clear_tool_uses_20250919"},
                ]
            }
        ),
        "context_management.edits[1].type",
        "drops or summarises context",
    ),
    "compaction": (_request(compaction={"type": "summarize"}), "compaction", "summarise"),
    "thread": (_request(thread={"type": "create"}), "thread", "conversation state"),
    "container_skills": (
        _request(container={"skills": [{"type": "anthropic", "skill_id": "pptx"}]}),
        "container.skills",
        "skills",
    ),
    "thinking_type": (_request(thinking={"type": "sometimes"}), "thinking.type", "one of"),
    "search_result": (
        _request(messages=_user({"type": "search_result", "source": "s", "title": "t"})),
        "messages[0].content[0]",
        "search results are not supported",
    ),
    "tool_reference": (
        _request(
            messages=_user(
                {
                    "type": "tool_result",
                    "tool_use_id": "t",
                    "content": [{"type": "tool_reference", "tool_name": "x"}],
                }
            )
        ),
        "messages[0].content[0].content[0]",
        "tool references are not supported",
    ),
    "toolset_name": (
        _request(
            messages=_assistant_turn(
                {"type": "tool_use", "id": "t", "name": "f", "input": {}, "toolset_name": "m"}
            )
        ),
        "messages[1].content[0].toolset_name",
        "MCP toolsets",
    ),
    "code_execution_caller": (
        _request(
            messages=_assistant_turn(
                {
                    "type": "tool_use",
                    "id": "t",
                    "name": "f",
                    "input": {},
                    "caller": {"type": "code_execution_20250825", "tool_id": "x"},
                }
            )
        ),
        "messages[1].content[0].caller",
        "only 'direct'",
    ),
    "compaction_block": (
        _request(messages=_assistant_turn({"type": "compaction", "content": "summary"})),
        "messages[1].content[0].type",
        "unsupported block 'compaction'",
    ),
    "tool_addition": (
        _request(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "tool_addition", "tool": SHELL_TOOL}]},
            ]
        ),
        "messages[1].content[0]",
        "mid-conversation tool changes",
    ),
    "clear_at_next_user_message": (
        _request(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "note", "clear_at": "next_user_message"},
            ]
        ),
        "messages[1].clear_at",
        "keeps every message",
    ),
    "system_message_format": (
        _request(
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "system", "content": "n", "output_config": {"format": {}}},
            ]
        ),
        "messages[1].output_config.format",
        "not supported",
    ),
    "unknown_block_key": (
        _request(messages=_user({"type": "text", "text": "x", "cache": True})),
        "messages[0].content[0].cache",
        "not supported",
    ),
    "unknown_message_key": (
        _request(messages=[{"role": "user", "content": "x", "name": "bob"}]),
        "messages[0].name",
        "not supported",
    ),
}
"""Fields that would make the recorded tokens differ from what the client asked for."""

BAD_PAYLOADS: dict[str, tuple[Any, str, str]] = {
    "not_an_object": ("x", "request body", "must be an object"),
    "missing_max_tokens": (
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        "max_tokens",
        "required",
    ),
    "max_tokens_zero": (_request(max_tokens=0), "max_tokens", "at least 1"),
    "no_messages": (_request(messages=[]), "messages", "at least one"),
    "unknown_role": (
        _request(messages=[{"role": "developer", "content": "x"}]),
        "messages[0].role",
        "'user', 'assistant' or 'system'",
    ),
    "numeric_content": (
        _request(messages=[{"role": "user", "content": 3}]),
        "messages[0].content",
        "string or an array",
    ),
    "image": (
        _request(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image", "source": {"type": "base64", "data": "x"}},
                    ],
                }
            ]
        ),
        "messages[0].content[1]",
        "images are not supported",
    ),
    "document": (
        _request(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}]),
        "messages[0].content[0]",
        "documents are not supported",
    ),
    "image_in_tool_result": (
        _request(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}
                    ],
                }
            ]
        ),
        "messages[0].content[0].content[0]",
        "images are not supported",
    ),
    "tool_result_without_id": (
        _request(messages=[{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]),
        "messages[0].content[0].tool_use_id",
        "must be a string",
    ),
    "tool_use_in_user_turn": (
        _request(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                }
            ]
        ),
        "messages[0].content[0].type",
        "in a user message",
    ),
    "tool_use_input_not_object": (
        _request(
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
                },
            ]
        ),
        "messages[1].content[0].input",
        "must be an object",
    ),
    "server_tool_block": (
        _request(
            messages=[
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
                    ],
                },
            ]
        ),
        "messages[1].content[0].type",
        "in an assistant message",
    ),
    "system_image": (
        _request(system=[{"type": "image"}]),
        "system[0]",
        "images are not supported",
    ),
    "unknown_key": (_request(betas=["x"]), "betas", "not supported"),
    "tool_choice_any": (
        _request(tool_choice={"type": "any"}),
        "tool_choice.type",
        "forcing tool use",
    ),
    "tool_choice_tool": (
        _request(tool_choice={"type": "tool", "name": "shell"}),
        "tool_choice.type",
        "forcing tool use",
    ),
    "server_tool": (
        _request(tools=[SHELL_TOOL, {"type": "bash_20250124", "name": "bash"}]),
        "tools[1].type",
        "server tool 'bash_20250124'",
    ),
    "tool_without_schema": (
        _request(tools=[{"name": "f", "description": "d"}]),
        "tools[0].input_schema",
        "must be an object",
    ),
    "tool_unknown_key": (
        _request(tools=[{**SHELL_TOOL, "input_schema_version": 2}]),
        "tools[0].input_schema_version",
        "not supported",
    ),
    **REFUSED_FIELDS,
    "top_k_zero": (_request(top_k=0), "top_k", "at least 1"),
    "top_p_too_large": (_request(top_p=1.5), "top_p", "at most 1"),
    "empty_stop_sequence": (
        _request(stop_sequences=[""]),
        "stop_sequences[0]",
        "must not be empty",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_bad_payloads_are_400_naming_the_field(case: str) -> None:
    payload, param, fragment = BAD_PAYLOADS[case]
    with pytest.raises(WireError) as caught:
        parse_anthropic_request(payload)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert param in caught.value.message
    assert fragment in caught.value.message


def test_sdk_surfaces_wire_errors() -> None:
    client = _client(_serve(lambda request, payload: httpx2.Response(500)))
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="policy",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            tool_choice={"type": "any"},
        )
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "tool_choice.type 'any' is not supported" in caught.value.message


@pytest.mark.parametrize(
    ("status", "error_class", "type_"),
    [
        (401, anthropic.AuthenticationError, "authentication_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (409, anthropic.ConflictError, "invalid_request_error"),
        (500, anthropic.InternalServerError, "api_error"),
    ],
)
def test_error_envelopes_map_to_sdk_exceptions(
    status: int, error_class: type[anthropic.APIStatusError], type_: str
) -> None:
    status_out, body = anthropic_error(status, f"status {status} happened")
    assert status_out == status
    assert body == {
        "type": "error",
        "error": {"type": type_, "message": f"status {status} happened"},
    }
    client = _client(lambda payload: httpx2.Response(status, json=body))
    with pytest.raises(error_class) as caught:
        client.messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    assert f"status {status} happened" in caught.value.message
    assert anthropic_error(400, "x", "api_error")[1]["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("tool_calls", "tool_use")],
)
def test_response_is_a_valid_message(finish_reason: str, stop_reason: str) -> None:
    choice = _choice(
        content="Running it.",
        tool_calls=[
            ToolCall(id="toolu_keep", name="shell", arguments={"cmd": "ls"}),
            ToolCall(name="shell", arguments='{"cmd": "pwd"}'),
            ToolCall(name="shell", arguments="{broken"),
        ],
        finish_reason=finish_reason,
    )
    message = AnthropicMessage.model_validate(
        anthropic_response(choice, model="policy", message_id="msg_1")
    )
    assert message.stop_reason == stop_reason
    assert message.content[0].type == "text"
    assert message.content[0].text == "Running it."
    tool_uses = message.content[1:]
    assert [block.id for block in tool_uses][0] == "toolu_keep"
    assert all(TOOL_USE_ID.match(block.id) for block in tool_uses[1:])
    assert [block.input for block in tool_uses] == [{"cmd": "ls"}, {"cmd": "pwd"}, {}]
    assert invalid_tool_inputs(choice) == 1
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == 40
    assert message.usage.cache_read_input_tokens == 16
    assert message.usage.output_tokens == 9


def test_response_without_text_has_only_tool_use_blocks() -> None:
    choice = _choice(tool_calls=[ToolCall(name="shell", arguments={})], finish_reason="tool_calls")
    body = anthropic_response(choice, model="policy", message_id="msg_2")
    assert [block["type"] for block in body["content"]] == ["tool_use"]
    empty = anthropic_response(_choice(), model="policy", message_id="msg_3")
    assert empty["content"] == []
    AnthropicMessage.model_validate(empty)


def test_sdk_round_trip_echoes_the_assistant_turn_unchanged() -> None:
    sampled = _choice(
        content="Checking.",
        tool_calls=[ToolCall(name="shell", arguments={"cmd": "cat a.py", "n": 2})],
        finish_reason="tool_calls",
    )
    seen: list[ChatRequest] = []

    def respond(request: ChatRequest, payload: dict[str, Any]) -> httpx2.Response:
        seen.append(request)
        body = anthropic_response(sampled, model=payload["model"], message_id="msg_rt")
        return httpx2.Response(200, json=body)

    client = _client(_serve(respond))
    history: list[Any] = [{"role": "user", "content": "fix it"}]
    reply = client.messages.create(
        model="policy", max_tokens=64, system="sys", messages=history, tools=[SHELL_TOOL]
    )
    assert reply.stop_reason == "tool_use"
    history.append(
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
    )
    tool_use = reply.content[1]
    history.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "ok"}],
        }
    )
    client.messages.create(
        model="policy", max_tokens=64, system="sys", messages=history, tools=[SHELL_TOOL]
    )
    assert seen[1].messages[:2] == seen[0].messages
    echoed = seen[1].messages[2]
    assert echoed == Message(
        role="assistant",
        content="Checking.",
        tool_calls=[ToolCall(id=tool_use.id, name="shell", arguments={"cmd": "cat a.py", "n": 2})],
    )
    assert seen[1].messages[3] == Message(role="tool", content="ok", tool_call_id=tool_use.id)


def _parse_sse(body: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in body.decode().split("\n\n"):
        if not frame:
            continue
        name_line, data_line = frame.split("\n")
        event = json.loads(data_line.removeprefix("data: "))
        assert name_line == f"event: {event['type']}"
        events.append(event)
    return events


def test_stream_event_sequence_validates_and_accumulates_in_the_sdk() -> None:
    choice = _choice(
        content="I will run two commands.",
        tool_calls=[
            ToolCall(name="shell", arguments={"cmd": "ls"}),
            ToolCall(name="shell", arguments={"cmd": "cat ä.py"}),
        ],
        finish_reason="tool_calls",
    )
    stream = AnthropicEventStream(model="policy", message_id="msg_s")
    events = stream.start(prompt_tokens=40, cached_tokens=16)
    events += stream.delta(StreamDelta(index=0, text="I will "))
    events += stream.delta(StreamDelta(index=0, text=""))
    events += stream.delta(StreamDelta(index=0, text="run two"))
    events += stream.finish(choice)  # unsent tail " commands." comes with finish

    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("content_block_start", 2),
        ("content_block_delta", 2),
        ("content_block_stop", 2),
        ("message_delta", None),
        ("message_stop", None),
    ]
    for event in events:
        STREAM_EVENT.validate_python(event)
    assert events[6]["content_block"]["input"] == {}
    assert events[7]["delta"]["type"] == "input_json_delta"
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-2]["usage"]["output_tokens"] == 9

    body = b"".join(anthropic_sse_event(event) for event in events)
    assert _parse_sse(body) == events
    client = _client(
        lambda payload: httpx2.Response(
            200, content=body, headers={"content-type": "text/event-stream"}
        )
    )
    with client.messages.stream(
        model="policy", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as sdk_stream:
        final = sdk_stream.get_final_message()
    assert final.id == "msg_s"
    assert final.stop_reason == "tool_use"
    assert final.content[0].text == "I will run two commands."
    assert [(block.name, block.input) for block in final.content[1:]] == [
        ("shell", {"cmd": "ls"}),
        ("shell", {"cmd": "cat ä.py"}),
    ]
    assert all(TOOL_USE_ID.match(block.id) for block in final.content[1:])
    assert (final.usage.input_tokens, final.usage.output_tokens) == (24, 9)


def test_one_shot_stream_of_tool_calls_only_and_of_an_empty_reply() -> None:
    tools_only = _choice(
        tool_calls=[ToolCall(name="f", arguments="nope")], finish_reason="tool_calls"
    )
    events = anthropic_stream_events(tools_only, model="m", message_id="msg_t")
    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert events[2]["delta"]["partial_json"] == "{}"
    empty = anthropic_stream_events(_choice(finish_reason="length"), model="m", message_id="msg_e")
    assert [e["type"] for e in empty] == ["message_start", "message_delta", "message_stop"]
    assert empty[1]["delta"]["stop_reason"] == "max_tokens"
    for event in events + empty:
        STREAM_EVENT.validate_python(event)


def test_stream_finish_rejects_text_that_diverged_from_what_was_streamed() -> None:
    stream = AnthropicEventStream(model="m", message_id="msg")
    stream.delta(StreamDelta(index=0, text="abc"))
    with pytest.raises(ValueError, match="not a prefix"):
        stream.finish(_choice(content="xyz"))


def test_error_event_framing() -> None:
    _, body = anthropic_error(529, "busy")
    assert body["error"]["type"] == "overloaded_error"
    assert anthropic_sse_event(body).startswith(b"event: error\ndata: ")


CLAUDE_CODE = json.loads(
    (Path(__file__).parent / "fixtures" / "claude_code_2.1.328_request.json").read_text()
)["body"]


def test_claude_code_first_request_lowers_with_its_ignored_fields() -> None:
    request = parse_anthropic_request(CLAUDE_CODE)
    assert [m.role for m in request.messages] == ["system", "user", "system"]
    system, user, environment = request.messages
    assert system.content == "\n".join(block["text"] for block in CLAUDE_CODE["system"])
    assert user.content == "\n".join(b["text"] for b in CLAUDE_CODE["messages"][0]["content"])
    assert user.content.endswith("\nfix a.py")
    assert environment.content.startswith("# Environment")
    # The deferred placeholder stays out of the prompt, as Anthropic keeps it out of its own.
    names = [tool["function"]["name"] for tool in request.tools or []]
    assert len(names) == len(CLAUDE_CODE["tools"]) - 1 and "DeferredToolPlaceholder" not in names
    assert (request.sampling.max_tokens, request.stream) == (128000, True)
    assert request.ignored == (
        "context_management",
        "messages.content.cache_control",
        "messages.output_config",
        "metadata",
        "output_config",
        "system.cache_control",
        "thinking",
    )


EVERY_IGNORED_FIELD = _request(
    system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}, "citations": []}],
    messages=[
        {
            "role": "user",
            "content": [{"type": "text", "text": "q", "citations": [{"type": "char_location"}]}],
        },
        {"role": "system", "content": "note", "clear_at": "never", "output_config": {}},
        {"role": "system", "output_config": {"effort": "high"}},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {
                    "type": "tool_use",
                    "id": "t1",
                    "name": "shell",
                    "input": {},
                    "caller": {"type": "direct"},
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "is_error": True,
                    "cache_control": {"type": "ephemeral"},
                    "content": [
                        {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
                    ],
                }
            ],
        },
    ],
    tools=[
        {
            **SHELL_TOOL,
            "cache_control": {"type": "ephemeral"},
            "strict": True,
            "eager_input_streaming": True,
            "allowed_callers": ["direct"],
            "input_examples": [],
        },
        {**SHELL_TOOL, "name": "later", "defer_loading": True},
    ],
    tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    metadata={"user_id": "u"},
    thinking={"type": "enabled", "budget_tokens": 2048},
    output_config={"effort": "medium"},
    context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    cache_control={"type": "ephemeral"},
    service_tier="auto",
    speed="fast",
    inference_geo="us",
    diagnostics={"previous_message_id": None},
    billing_policy={"type": "billing_policy", "bill_to": "self"},
    fallbacks="default",
    fallback_credit_token="tok",
    container="container_1",
    mcp_servers=[],
)


def test_every_ignored_field_is_named_once_without_indices() -> None:
    request = parse_anthropic_request(EVERY_IGNORED_FIELD)
    assert request.ignored == (
        "billing_policy",
        "cache_control",
        "container",
        "context_management",
        "diagnostics",
        "fallback_credit_token",
        "fallbacks",
        "inference_geo",
        "mcp_servers",
        "messages.content.cache_control",
        "messages.content.caller",
        "messages.content.citations",
        "messages.content.content.cache_control",
        "messages.content.is_error",
        "messages.content.redacted_thinking",
        "messages.content.signature",
        "messages.output_config",
        "metadata",
        "output_config",
        "service_tier",
        "speed",
        "system.cache_control",
        "system.citations",
        "thinking",
        "tool_choice.disable_parallel_tool_use",
        "tools.allowed_callers",
        "tools.cache_control",
        "tools.eager_input_streaming",
        "tools.input_examples",
        "tools.strict",
    )
    # What is honoured: the system note in place (the one with only output_config renders
    # nothing), the thinking as reasoning, the deferred tool left out.
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "s"),
        ("user", "q"),
        ("system", "note"),
        ("assistant", ""),
        ("tool", "x"),
    ]
    assert request.messages[3].reasoning_content == "hm"
    assert request.tools == [SHELL_FUNCTION]


def test_ignored_fields_of_remembered_messages_are_still_reported() -> None:
    # The memo spares lowering the messages it vouches for; their ignored fields come with it.
    cache = HistoryCache()
    history = [
        {"role": "user", "content": [{"type": "text", "text": "q", "citations": []}]},
        {"role": "assistant", "content": "a"},
    ]
    first = parse_anthropic_request(_request(messages=history), cache)
    assert first.ignored == ("messages.content.citations",)
    history += [{"role": "user", "content": "more"}]
    second = parse_anthropic_request(_request(messages=history), cache)
    assert second.messages.raw_known == 2 and cache.hits == 1
    assert second.ignored == ("messages.content.citations",)
    plain = parse_anthropic_request(_request(), cache)
    assert plain.ignored == ()


def test_count_tokens_body_takes_no_generation_fields() -> None:
    body = {key: value for key, value in CLAUDE_CODE.items() if key in _COUNT_TOKENS_BODY}
    request = parse_anthropic_count_tokens(body)
    assert request.sampling.max_tokens is None and not request.stream
    assert [m.role for m in request.messages] == ["system", "user", "system"]
    for key, value in (("max_tokens", 5), ("stream", True), ("temperature", 0.5)):
        with pytest.raises(WireError) as caught:
            parse_anthropic_count_tokens({**body, key: value})
        assert caught.value.param == key


_COUNT_TOKENS_BODY = {
    "model",
    "messages",
    "system",
    "tools",
    "thinking",
    "output_config",
    "context_management",
}
