"""OpenAI Responses adapter: lowering, 400s, the stored-response store, rendering, events."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter
from support.responses_tools import AGENTS, CODEX_REQUEST, PATCH, SHELL

from uni_agent_core.gateway.adapters.errors import WireError
from uni_agent_core.gateway.adapters.responses import (
    CUSTOM_INPUT,
    WireTool,
    parse_responses_request,
    remember_response,
)
from uni_agent_core.gateway.adapters.responses_render import (
    ResponseHeader,
    ResponsesEventStream,
    reply_message,
    responses_response,
    responses_sse_event,
)
from uni_agent_core.gateway.hashing import prefix_hashes
from uni_agent_core.gateway.history import HistoryCache, ResponseStore
from uni_agent_core.gateway.request import ChatChoice, Message, StreamDelta, ToolCall

FIXTURE = CODEX_REQUEST
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _choice(**fields: Any) -> ChatChoice:
    values: dict[str, Any] = {
        "index": 0,
        "content": "",
        "finish_reason": "stop",
        "chain_id": 0,
        "prompt_tokens": 50,
        "completion_tokens": 7,
        "cached_tokens": 32,
    }
    values.update(fields)
    return ChatChoice(**values)


def _error(body: Any) -> WireError:
    with pytest.raises(WireError) as caught:
        parse_responses_request(body)
    return caught.value


# -- lowering ----------------------------------------------------------------------------------


def test_string_input_and_instructions() -> None:
    request = parse_responses_request({"model": "m", "instructions": "be brief", "input": "hi"})
    assert list(request.chat.messages) == [
        Message(role="system", content="be brief"),
        Message(role="user", content="hi"),
    ]
    assert request.chat.tools is None and request.store and request.chat.n == 1
    assert request.conversation == [Message(role="user", content="hi")]  # no instructions


def test_items_lower_to_chat_messages() -> None:
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {"role": "user", "content": "easy"},  # EasyInputMessage: no type
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]},
        {
            "type": "message",
            "role": "assistant",
            "phase": "commentary",
            "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
        },
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** x"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
        {
            "type": "custom_tool_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "ok"}],
        },
        {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
        {
            "type": "function_call",
            "call_id": "c3",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
    ]
    request = parse_responses_request({"input": items, "tools": [SHELL, PATCH, AGENTS]})
    assert list(request.chat.messages) == [
        Message(role="system", content="d"),
        Message(role="user", content="easy"),
        Message(
            role="assistant",
            content="a\nb",
            tool_calls=[
                ToolCall(id="c1", name="shell", arguments={"cmd": "ls"}),
                ToolCall(id="c2", name="apply_patch", arguments={CUSTOM_INPUT: "*** x"}),
            ],
        ),
        Message(role="tool", content="a.py", tool_call_id="c1"),
        Message(role="tool", content="ok", tool_call_id="c2"),
        Message(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id="c3", name="multi_agent_v1__spawn_agent", arguments={})],
        ),
    ]
    assert request.chat.ignored == ("input.phase", "input.reasoning")


def test_tools_are_flattened_to_function_tools() -> None:
    request = parse_responses_request(
        {"input": "x", "tools": [SHELL, PATCH, AGENTS, {"type": "web_search"}]}
    )
    shell, patch, spawn = request.chat.tools or []
    assert shell == {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a command.",
            "parameters": SHELL["parameters"],
        },
    }
    parameters = patch["function"]["parameters"]
    assert patch["function"]["name"] == "apply_patch"
    assert parameters["required"] == [CUSTOM_INPUT]
    assert "lark grammar:\nstart: /.+/" in parameters["properties"][CUSTOM_INPUT]["description"]
    assert spawn["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert request.tools == {
        "shell": WireTool("shell"),
        "apply_patch": WireTool("apply_patch", custom=True),
        "multi_agent_v1__spawn_agent": WireTool("spawn_agent", "multi_agent_v1"),
    }
    assert request.chat.ignored == ("tools.web_search",)
    assert (
        parse_responses_request({"input": "x", "tools": [SHELL], "tool_choice": "none"}).chat.tools
        is None
    )


def test_codex_request_parses_with_its_ignored_fields() -> None:
    capture = json.loads(FIXTURE.read_text())
    body = capture["body"]
    assert capture["path"].endswith("/v1/responses")
    request = parse_responses_request(body)
    assert request.chat.ignored == (
        "client_metadata",
        "include",
        "parallel_tool_calls",
        "prompt_cache_key",
        "reasoning",
        "store",
        "tools.web_search",
    )
    assert not request.store and request.conversation is None and request.chat.stream
    assert [m.role for m in request.chat.messages] == ["system", "system", "user", "user"]
    names = [tool["function"]["name"] for tool in request.chat.tools or []]
    assert "exec_command" in names and "multi_agent_v1__close_agent" in names
    assert request.tools["multi_agent_v1__close_agent"] == WireTool("close_agent", "multi_agent_v1")


def test_history_memo_lowers_only_new_items() -> None:
    cache = HistoryCache()
    items = [
        _user("a"),
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
    ]
    first = parse_responses_request({"input": items}, cache)
    items = [*items, {"type": "function_call_output", "call_id": "c1", "output": "x"}, _user("b")]
    second = parse_responses_request({"input": items}, cache)
    # One unit (a user message and the call after it) came from the memo: two messages.
    assert cache.hits == 1 and second.chat.messages.raw_known == 1  # type: ignore[attr-defined]
    assert repr(second.chat.messages) == "LoweredHistory(4 messages, 2 from the memo)"
    assert list(second.chat.messages)[:2] == list(first.chat.messages)
    assert prefix_hashes(list(second.chat.messages)) == second.chat.messages.hashes  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "frequency_penalty": 0.5}, "frequency_penalty"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "truncation": "auto"}, "truncation"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice"),
        ({"input": "x", "tool_choice": {"type": "function", "name": "shell"}}, "tool_choice"),
        ({"input": "x", "top_logprobs": 3}, "top_logprobs"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": []}, "input"),
        ({"input": 3}, "input"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": [{"role": "critic", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0]",
        ),
        (
            {
                "input": [
                    _user("x"),
                    {"type": "function_call_output", "call_id": "zz", "output": "y"},
                ]
            },
            "input[1].call_id",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
            "input[0].arguments",
        ),
        ({"input": "x", "tools": [{"type": "computer_use_preview"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{**SHELL, "defer": True}]}, "tools[0].defer"),
        ({"input": "x", "tools": [SHELL, {**SHELL}]}, "tools[1].name"),
        (
            {"input": "x", "tools": [{**PATCH, "format": {"type": "regexp"}}]},
            "tools[0].format.type",
        ),
        (
            {"input": "x", "tools": [{**AGENTS, "tools": [{"type": "mcp"}]}]},
            "tools[0].tools[0].type",
        ),
        ({"input": "x", "previous_response_id": "resp_missing"}, "previous_response_id"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(body: dict[str, Any], param: str) -> None:
    error = _error(body)
    assert error.status == 400 and error.param == param, error


def test_previous_response_id_continues_the_stored_conversation() -> None:
    store = ResponseStore(limit=2)
    first = parse_responses_request({"instructions": "sys", "input": "hi", "tools": [SHELL]})
    header = ResponseHeader(response_id="resp_1", created_at=0, model="m", tools=first.tools)
    choice = _choice(
        content="",
        tool_calls=[ToolCall(name="shell", arguments={"cmd": "ls"})],
        finish_reason="tool_calls",
    )
    body = responses_response(header, choice)
    remember_response(store, "resp_1", first, reply_message(choice, body["output"]))
    call_id = body["output"][0]["call_id"]
    follow = {
        "instructions": "sys",
        "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "a.py"}],
        "tools": [SHELL],
    }
    second = parse_responses_request(follow, stored=store)
    assert list(second.chat.messages) == [
        Message(role="system", content="sys"),
        Message(role="user", content="hi"),
        Message(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name="shell", arguments={"cmd": "ls"})],
        ),
        Message(role="tool", content="a.py", tool_call_id=call_id),
    ]
    # Instructions are not carried over; the store keeps only the newest `limit` responses.
    without = parse_responses_request({**follow, "instructions": None}, stored=store)
    assert list(without.chat.messages)[0] == Message(role="user", content="hi")
    store.put("resp_2", []), store.put("resp_3", [])
    assert store.get("resp_1") is None and len(store) == 2


# -- rendering ---------------------------------------------------------------------------------


def _header(**fields: Any) -> ResponseHeader:
    tools = {
        "shell": WireTool("shell"),
        "apply_patch": WireTool("apply_patch", custom=True),
        "multi_agent_v1__spawn_agent": WireTool("spawn_agent", "multi_agent_v1"),
    }
    return ResponseHeader(response_id="resp_x", created_at=7, model="tiny", tools=tools, **fields)


CALLS = [
    ToolCall(name="shell", arguments={"cmd": "ls"}),
    ToolCall(name="apply_patch", arguments={CUSTOM_INPUT: "*** Begin Patch"}),
    ToolCall(name="multi_agent_v1__spawn_agent", arguments={"message": "go"}),
    ToolCall(name="apply_patch", arguments={"patch": "not the input"}),
]


def test_response_object_items_and_usage() -> None:
    choice = _choice(content="Sure.", tool_calls=CALLS, finish_reason="tool_calls")
    body = responses_response(_header(), choice)
    parsed = Response.model_validate(body)
    assert parsed.status == "completed" and parsed.output_text == "Sure."
    message, shell, patch, spawn, odd = body["output"]
    assert message["type"] == "message" and message["content"][0]["text"] == "Sure."
    assert shell["type"] == "function_call" and json.loads(shell["arguments"]) == {"cmd": "ls"}
    assert patch == {
        **patch,
        "type": "custom_tool_call",
        "name": "apply_patch",
        "input": "*** Begin Patch",
    }
    assert (spawn["name"], spawn["namespace"]) == ("spawn_agent", "multi_agent_v1")
    assert odd["type"] == "function_call"  # not `{"input": str}`: kept as the call it was
    assert body["usage"] == {
        "input_tokens": 50,
        "input_tokens_details": {"cached_tokens": 32, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 57,
    }
    assert body["id"] == "resp_x" and body["object"] == "response" and body["created_at"] == 7


def test_length_is_incomplete_and_an_empty_reply_is_an_empty_message() -> None:
    body = responses_response(_header(), _choice(content="cut", finish_reason="length"))
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    empty = responses_response(_header(), _choice())
    assert [item["type"] for item in empty["output"]] == ["message"]


def test_rendered_items_lower_back_to_the_sampled_turn() -> None:
    """What Codex echoes (our output items) hashes like the turn the chain committed."""
    choice = _choice(content="Sure.", tool_calls=CALLS, finish_reason="tool_calls")
    header = _header()
    items = responses_response(header, choice)["output"]
    echoed = parse_responses_request(
        {"input": [_user("go"), *items], "tools": [SHELL, PATCH, AGENTS]}
    ).chat.messages
    said = Message(role="assistant", content=choice.content, tool_calls=choice.tool_calls)
    history = [Message(role="user", content="go")]
    assert prefix_hashes(list(echoed)) == prefix_hashes([*history, said])
    assert reply_message(choice, items).tool_calls[0].id == items[1]["call_id"]  # type: ignore[index]


def _events(choice: ChatChoice, deltas: list[str]) -> list[dict[str, Any]]:
    stream = ResponsesEventStream(_header())
    events = stream.start()
    for text in deltas:
        events += stream.delta(StreamDelta(index=0, text=text))
    return events + stream.finish(choice)


def test_stream_events_in_order_and_parseable() -> None:
    choice = _choice(content="Hello there", tool_calls=CALLS[:2], finish_reason="tool_calls")
    events = _events(choice, ["Hel", "", "lo"])
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    for event in events:
        EVENTS.validate_python(event)
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "Hello there"
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert events[-1]["response"]["output"] == done
    assert done[2]["input"] == "*** Begin Patch" and events[-1]["response"]["id"] == "resp_x"
    frame = responses_sse_event(events[-1]).decode()
    assert frame.startswith("event: response.completed\ndata: {") and frame.endswith("}\n\n")


def test_stream_of_calls_only_length_and_failure() -> None:
    calls_only = _events(_choice(tool_calls=CALLS[:1], finish_reason="tool_calls"), [])
    assert [e["type"] for e in calls_only][2:4] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
    ]
    assert calls_only[2]["output_index"] == 0
    cut = _events(_choice(content="abc", finish_reason="length"), ["ab"])
    assert cut[-1]["type"] == "response.incomplete"
    assert cut[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    stream = ResponsesEventStream(_header())
    stream.start()
    body = {
        "error": {
            "message": "too long",
            "type": "x",
            "param": None,
            "code": "context_length_exceeded",
        }
    }
    error, failed = stream.fail(400, body)
    assert (error["type"], error["code"]) == ("error", "context_length_exceeded")
    assert failed["type"] == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "context_length_exceeded"
    with pytest.raises(ValueError, match="prefix"):
        _events(_choice(content="xyz"), ["ab"])
