"""OpenAI Chat Completions adapter: lowering, 400s, responses, streaming, read back by the SDK."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from uni_agent_core.gateway.adapters.errors import WireError
from uni_agent_core.gateway.adapters.openai import (
    openai_error,
    openai_include_usage,
    openai_wire_error,
    parse_openai_request,
)
from uni_agent_core.gateway.adapters.openai_render import (
    SSE_DONE,
    OpenAIChunkStream,
    openai_response,
    openai_stream_chunks,
    sse_event,
)
from uni_agent_core.gateway.request import (
    ChatChoice,
    ChatRequest,
    Message,
    StreamDelta,
    ToolCall,
)

CALL_ID = re.compile(r"^call_[0-9a-f]{24}$")

SHELL_TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
}


def _choice(index: int = 0, **fields: Any) -> ChatChoice:
    values: dict[str, Any] = {
        "index": index,
        "content": "",
        "finish_reason": "stop",
        "chain_id": index,
        "prompt_tokens": 50,
        "completion_tokens": 7,
        "cached_tokens": 32,
    }
    values.update(fields)
    return ChatChoice(**values)


def _client(handler: Callable[[dict[str, Any]], httpx2.Response]) -> openai.OpenAI:
    def transport(request: httpx2.Request) -> httpx2.Response:
        return handler(json.loads(request.content))

    return openai.OpenAI(
        api_key="sk-session",
        base_url="http://gateway.test/sessions/s1/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(transport)),
        max_retries=0,
        _strict_response_validation=True,
    )


def _serve(respond: Callable[[ChatRequest, dict[str, Any]], httpx2.Response]):
    """A stand-in server: parse with the adapter, map `WireError` to the OpenAI envelope."""

    def handler(payload: dict[str, Any]) -> httpx2.Response:
        try:
            request = parse_openai_request(payload)
        except WireError as error:
            status, body = openai_wire_error(error)
            return httpx2.Response(status, json=body)
        return respond(request, payload)

    return handler


def test_parse_multi_turn_conversation_with_parallel_tool_calls() -> None:
    payload = {
        "model": "policy",
        "messages": [
            {"role": "developer", "content": "You are a coding agent."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Fix"}, {"type": "text", "text": "the bug."}],
            },
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "reasoning_content": "look first",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd":"pwd"}'},
                    },
                    {
                        "id": "call_c",
                        "type": "function",
                        "function": {"name": "shell", "arguments": {"cmd": "id"}},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "a.py"},
            {
                "role": "tool",
                "tool_call_id": "call_b",
                "content": [{"type": "text", "text": "err"}],
            },
            {"role": "tool", "tool_call_id": "call_c", "name": "shell", "content": None},
            {"role": "user", "content": "Go on.", "name": "alice"},
        ],
        "tools": [SHELL_TOOL],
        "tool_choice": "auto",
    }
    request = parse_openai_request(payload)
    assert request.messages == [
        Message(role="system", content="You are a coding agent."),
        Message(role="user", content="Fix\nthe bug."),
        Message(
            role="assistant",
            content="",
            reasoning_content="look first",
            tool_calls=[
                ToolCall(id="call_a", name="shell", arguments={"cmd": "ls"}),
                ToolCall(id="call_b", name="shell", arguments={"cmd": "pwd"}),
                ToolCall(id="call_c", name="shell", arguments={"cmd": "id"}),
            ],
        ),
        Message(role="tool", content="a.py", tool_call_id="call_a"),
        Message(role="tool", content="err", tool_call_id="call_b"),
        Message(role="tool", content="", tool_call_id="call_c", name="shell"),
        Message(role="user", content="Go on.", name="alice"),
    ]
    assert request.tools == [SHELL_TOOL]
    assert request.n == 1
    assert request.stream is False


def test_parse_sampling_and_stream_fields() -> None:
    payload = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 1,
        "top_p": 0.9,
        "top_k": 0,
        "max_completion_tokens": 128,
        "seed": 7,
        "stop": "</answer>",
        "n": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = parse_openai_request(payload)
    sampling = request.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k) == (1.0, 0.9, -1)
    assert (sampling.max_tokens, sampling.seed, sampling.stop) == (128, 7, ["</answer>"])
    assert (request.n, request.stream) == (3, True)
    assert openai_include_usage(payload) is True
    assert openai_include_usage({"stream": True}) is False

    plain = parse_openai_request({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
    assert plain.sampling.max_tokens == 5
    assert plain.sampling.stop == []
    assert plain.sampling.temperature is None


def test_harmless_options_are_ignored_and_strict_is_dropped() -> None:
    strict_tool = {"type": "function", "function": {**SHELL_TOOL["function"], "strict": True}}
    request = parse_openai_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [strict_tool],
            "user": "u1",
            "metadata": {"run": "1"},
            "parallel_tool_calls": True,
            "store": False,
            "logprobs": False,
            "top_logprobs": 0,
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "logit_bias": {},
            "response_format": {"type": "text"},
        }
    )
    assert request.tools == [SHELL_TOOL]


def test_tool_choice_none_drops_tools_and_empty_tool_lists_are_none() -> None:
    base = {"messages": [{"role": "user", "content": "hi"}], "tools": [SHELL_TOOL]}
    assert parse_openai_request({**base, "tool_choice": "none"}).tools is None
    assert parse_openai_request({**base, "tool_choice": "auto"}).tools == [SHELL_TOOL]
    assert parse_openai_request({**base, "tools": []}).tools is None
    echoed = parse_openai_request(
        {"messages": [{"role": "assistant", "content": "x", "tool_calls": []}]}
    )
    assert echoed.messages[0].tool_calls is None


def _user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


BAD_PAYLOADS: dict[str, tuple[Any, str, str]] = {
    "not_an_object": (["x"], "request body", "must be an object"),
    "no_messages": ({"model": "m"}, "messages", "must be an array"),
    "empty_messages": ({"messages": []}, "messages", "at least one"),
    "unknown_role": (
        {"messages": [_user(), {"role": "function", "content": "x"}]},
        "messages[1].role",
        "unsupported role 'function'",
    ),
    "image_part": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image_url", "image_url": {"url": "data:x"}},
                    ],
                }
            ]
        },
        "messages[0].content[1]",
        "images are not supported",
    ),
    "audio_part": (
        {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        "messages[0].content[0].type",
        "only 'text' parts",
    ),
    "numeric_content": (
        {"messages": [{"role": "user", "content": 3}]},
        "messages[0].content",
        "must be a string, null or an array",
    ),
    "tool_calls_on_user": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": "x",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                }
            ]
        },
        "messages[0].tool_calls",
        "only assistant messages",
    ),
    "numeric_arguments": (
        {
            "messages": [
                _user(),
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": 1}}],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "must be a JSON string",
    ),
    "arguments_not_json": (
        {
            "messages": [
                _user(),
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": "{oops"}}
                    ],
                },
            ]
        },
        "messages[1].tool_calls[0].function.arguments",
        "must encode a JSON object",
    ),
    "unknown_key": ({"messages": [_user()], "functions": []}, "functions", "not supported"),
    "presence_penalty": (
        {"messages": [_user()], "presence_penalty": 0.5},
        "presence_penalty",
        "must be 0",
    ),
    "frequency_penalty": (
        {"messages": [_user()], "frequency_penalty": 1},
        "frequency_penalty",
        "must be 0",
    ),
    "logit_bias": ({"messages": [_user()], "logit_bias": {"42": 5}}, "logit_bias", "sampling"),
    "json_mode": (
        {"messages": [_user()], "response_format": {"type": "json_object"}},
        "response_format",
        "structured output",
    ),
    "logprobs": ({"messages": [_user()], "logprobs": True}, "logprobs", "/calls"),
    "top_logprobs": ({"messages": [_user()], "top_logprobs": 5}, "top_logprobs", "no logprobs"),
    "tool_choice_required": (
        {"messages": [_user()], "tools": [SHELL_TOOL], "tool_choice": "required"},
        "tool_choice",
        "'auto' or 'none'",
    ),
    "tool_choice_function": (
        {
            "messages": [_user()],
            "tools": [SHELL_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "shell"}},
        },
        "tool_choice",
        "forcing tool use",
    ),
    "tool_type": (
        {"messages": [_user()], "tools": [{"type": "retrieval"}]},
        "tools[0].type",
        "must be 'function'",
    ),
    "tool_name": (
        {"messages": [_user()], "tools": [{"type": "function", "function": {"description": "d"}}]},
        "tools[0].function.name",
        "must be a string",
    ),
    "tool_parameters": (
        {
            "messages": [_user()],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}],
        },
        "tools[0].function.parameters",
        "must be an object",
    ),
    "max_tokens_zero": ({"messages": [_user()], "max_tokens": 0}, "max_tokens", "at least 1"),
    "max_tokens_text": ({"messages": [_user()], "max_tokens": "9"}, "max_tokens", "integer"),
    "max_tokens_disagree": (
        {"messages": [_user()], "max_tokens": 5, "max_completion_tokens": 6},
        "max_completion_tokens",
        "disagree",
    ),
    "n_too_large": ({"messages": [_user()], "n": 65}, "n", "at most 64"),
    "top_p_zero": ({"messages": [_user()], "top_p": 0}, "top_p", "greater than 0"),
    "negative_temperature": (
        {"messages": [_user()], "temperature": -0.1},
        "temperature",
        "at least 0",
    ),
    "top_k_negative": ({"messages": [_user()], "top_k": -2}, "top_k", "-1 (disabled)"),
    "empty_stop": ({"messages": [_user()], "stop": ["</a>", ""]}, "stop[1]", "must not be empty"),
    "stream_options_without_stream": (
        {"messages": [_user()], "stream_options": {"include_usage": True}},
        "stream_options",
        "only allowed when stream is true",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PAYLOADS))
def test_bad_payloads_are_400_naming_the_field(case: str) -> None:
    payload, param, fragment = BAD_PAYLOADS[case]
    with pytest.raises(WireError) as caught:
        parse_openai_request(payload)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert param in caught.value.message
    assert fragment in caught.value.message


def test_sdk_surfaces_wire_errors_with_param_and_message() -> None:
    client = _client(_serve(lambda request, payload: httpx2.Response(500)))
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "hi"}],
            presence_penalty=0.3,
        )
    assert caught.value.status_code == 400
    assert caught.value.param == "presence_penalty"
    assert caught.value.type == "invalid_request_error"
    assert "presence_penalty must be 0" in caught.value.message


@pytest.mark.parametrize(
    ("status", "error_class", "type_", "code"),
    [
        (401, openai.AuthenticationError, "invalid_request_error", "invalid_api_key"),
        (404, openai.NotFoundError, "invalid_request_error", None),
        (409, openai.ConflictError, "invalid_request_error", None),
        (500, openai.InternalServerError, "server_error", None),
    ],
)
def test_error_envelopes_map_to_sdk_exceptions(
    status: int, error_class: type[openai.APIStatusError], type_: str, code: str | None
) -> None:
    status_out, body = openai_error(status, f"status {status} happened")
    assert status_out == status
    assert body == {
        "error": {
            "message": f"status {status} happened",
            "type": type_,
            "param": None,
            "code": code,
        }
    }
    client = _client(lambda payload: httpx2.Response(status, json=body))
    with pytest.raises(error_class) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == code
    assert f"status {status} happened" in caught.value.message


def test_response_shape_is_a_valid_chat_completion() -> None:
    choices = [
        _choice(
            1,
            content="Looking.",
            tool_calls=[ToolCall(name="shell", arguments={"cmd": "ls -la"})],
            finish_reason="tool_calls",
            completion_tokens=11,
        ),
        _choice(
            0,
            tool_calls=[
                ToolCall(id="call_keep", name="shell", arguments={"cmd": "pwd"}),
                ToolCall(name="shell", arguments="{broken"),
            ],
            finish_reason="tool_calls",
        ),
        _choice(2, content="done", finish_reason="length", completion_tokens=3),
    ]
    body = openai_response(choices, model="policy", created=1_700_000_000, response_id="chatcmpl-1")
    completion = ChatCompletion.model_validate(body)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    first, second, third = completion.choices
    assert first.message.content is None  # empty text with tool calls
    assert [call.id for call in first.message.tool_calls][0] == "call_keep"
    assert CALL_ID.match(first.message.tool_calls[1].id)
    assert first.message.tool_calls[1].function.arguments == "{broken"
    assert json.loads(first.message.tool_calls[0].function.arguments) == {"cmd": "pwd"}
    assert second.message.content == "Looking."
    assert CALL_ID.match(second.message.tool_calls[0].id)
    assert third.message.content == "done"
    assert third.message.tool_calls is None
    assert [choice.finish_reason for choice in completion.choices] == [
        "tool_calls",
        "tool_calls",
        "length",
    ]
    # n > 1: the prompt counts once, completions add up.
    assert completion.usage.prompt_tokens == 50
    assert completion.usage.completion_tokens == 7 + 11 + 3
    assert completion.usage.total_tokens == 50 + 21
    assert completion.usage.prompt_tokens_details.cached_tokens == 32
    with pytest.raises(ValueError, match="at least one choice"):
        openai_response([], model="m", created=0, response_id="x")


def test_sdk_round_trip_echoes_the_assistant_turn_unchanged() -> None:
    sampled = _choice(
        content="",
        tool_calls=[
            ToolCall(name="shell", arguments={"cmd": "cat a.py", "ünïcode": "✓"}),
            ToolCall(name="shell", arguments={"cmd": "ls"}),
        ],
        finish_reason="tool_calls",
    )
    seen: list[ChatRequest] = []

    def respond(request: ChatRequest, payload: dict[str, Any]) -> httpx2.Response:
        seen.append(request)
        body = openai_response([sampled], model=payload["model"], created=1, response_id="c1")
        return httpx2.Response(200, json=body)

    client = _client(_serve(respond))
    history: list[Any] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "fix it"},
    ]
    completion = client.chat.completions.create(
        model="policy", messages=history, tools=[SHELL_TOOL], temperature=1.0, max_tokens=64
    )
    assert seen[0].sampling.max_tokens == 64
    assert seen[0].tools == [SHELL_TOOL]
    message = completion.choices[0].message
    assert [call.function.name for call in message.tool_calls] == ["shell", "shell"]

    history.append(message.model_dump(exclude_none=True))
    history.extend(
        {"role": "tool", "tool_call_id": call.id, "content": "ok"} for call in message.tool_calls
    )
    client.chat.completions.create(model="policy", messages=history, tools=[SHELL_TOOL])
    echoed = seen[1].messages[2]
    assert echoed.role == "assistant"
    assert echoed.content == ""
    assert [(call.name, call.arguments) for call in echoed.tool_calls] == [
        (call.name, call.arguments) for call in sampled.tool_calls
    ]
    assert [m.tool_call_id for m in seen[1].messages[3:]] == [c.id for c in message.tool_calls]


def _sse_body(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(sse_event(chunk) for chunk in chunks) + SSE_DONE


def test_sse_framing() -> None:
    assert sse_event({"a": "é"}) == 'data: {"a": "é"}\n\n'.encode()
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_stream_chunks_validate_and_accumulate_in_the_sdk() -> None:
    stream = OpenAIChunkStream(
        model="policy", created=5, response_id="chatcmpl-s", n=2, include_usage=True
    )
    first = _choice(
        0,
        content="I will list files.",
        tool_calls=[
            ToolCall(name="shell", arguments={"cmd": "ls"}),
            ToolCall(name="read", arguments={"path": "a.py"}),
        ],
        finish_reason="tool_calls",
    )
    second = _choice(1, content="No tools needed.", finish_reason="stop", completion_tokens=4)
    chunks = stream.start()
    chunks += stream.delta(StreamDelta(index=0, text="I will "))
    chunks += stream.delta(StreamDelta(index=1, text="No tools"))
    chunks += stream.delta(StreamDelta(index=0, text=""))
    chunks += stream.delta(StreamDelta(index=0, text="list files."))
    chunks += stream.finish(second)  # unsent tail " needed." comes with finish
    chunks += stream.finish(first)
    chunks += stream.usage([first, second])

    parsed = [ChatCompletionChunk.model_validate(chunk) for chunk in chunks]
    assert all(chunk.object == "chat.completion.chunk" for chunk in parsed)
    assert [c.choices[0].delta.role for c in parsed[:2]] == ["assistant", "assistant"]
    assert parsed[-1].choices == []
    assert parsed[-1].usage.completion_tokens == 11
    assert all(chunk.usage is None for chunk in parsed[:-1])
    finishes = [
        (c.choices[0].index, c.choices[0].finish_reason)
        for c in parsed
        if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == [(1, "stop"), (0, "tool_calls")]

    client = _client(
        lambda payload: httpx2.Response(
            200, content=_sse_body(chunks), headers={"content-type": "text/event-stream"}
        )
    )
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    ):
        state.handle_chunk(chunk)
    final = state.get_final_completion()
    by_index = {choice.index: choice for choice in final.choices}
    assert by_index[0].message.content == "I will list files."
    calls = by_index[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("shell", {"cmd": "ls"}),
        ("read", {"path": "a.py"}),
    ]
    assert all(CALL_ID.match(call.id) for call in calls)
    assert by_index[1].message.content == "No tools needed."
    assert by_index[1].finish_reason == "stop"
    assert final.usage.prompt_tokens == 50


def test_one_shot_stream_without_usage() -> None:
    choice = _choice(content="hello", finish_reason="length")
    chunks = openai_stream_chunks([choice], model="m", created=1, response_id="r")
    assert [chunk["choices"][0]["delta"] for chunk in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "hello"},
        {},
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in chunk for chunk in chunks)
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)


def test_stream_finish_rejects_text_that_diverged_from_what_was_streamed() -> None:
    stream = OpenAIChunkStream(model="m", created=1, response_id="r")
    stream.delta(StreamDelta(index=0, text="abc"))
    with pytest.raises(ValueError, match="not a prefix"):
        stream.finish(_choice(content="abd"))
