"""The Anthropic Messages API as current clients send it, against a live gateway.

Claude Code 2.1.328 (its captured first request, `fixtures/claude_code_2.1.328_request.json`,
and a multi-turn conversation the way it continues one) and the real `anthropic` SDK
(`messages`, `beta.messages`, `count_tokens`), through a scripted engine that answers with a
tool call, then text. Each conversation must stay on one chain with the TITO invariant intact;
ignored fields are reported per field in `/metrics`; refused ones are a 400 naming the field.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.types import EngineCall, Trajectory

CAPTURE = json.loads(
    (Path(__file__).parent / "fixtures" / "claude_code_2.1.328_request.json").read_text()
)
CAPTURE_IGNORED = {
    "anthropic-beta",
    "context_management",
    "messages.content.cache_control",
    "messages.output_config",
    "metadata",
    "output_config",
    "system.cache_control",
    "thinking",
}
"""What the gateway ignores (and counts) in Claude Code's first request."""
BASH_CALL = '<tool_call>\n{"name": "Bash", "arguments": {"command": "cat a.py"}}\n</tool_call>'
SHELL_CALL = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>'
SHELL = {
    "name": "shell",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
EPHEMERAL = {"type": "ephemeral"}
IGNORED_METRIC = re.compile(
    r'^agent_rl_gateway_ignored_request_fields_total\{protocol="anthropic",field="([^"]+)"\} '
    r"(\d+)$",
    re.MULTILINE,
)


@pytest.fixture(scope="module")
def gateway(tiny_tokenizer, scripted_engine_cls):
    engine = scripted_engine_cls(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, session_ttl_s=3600, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url, engine, manager


def new_session(url: str) -> dict[str, Any]:
    response = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10)
    response.raise_for_status()
    return response.json()


def record(url: str, session: dict) -> tuple[list[Trajectory], list[EngineCall]]:
    headers = CONTROL
    base = f"{url}/sessions/{session['session_id']}"
    trajectories = httpx.get(base + "/trajectories", headers=headers).json()
    calls = httpx.get(base + "/calls", headers=headers).json()
    return [Trajectory(**t) for t in trajectories], [EngineCall(**c) for c in calls]


def assert_one_chain_tito(url: str, session: dict, calls: int) -> list[EngineCall]:
    trajectories, recorded = record(url, session)
    assert len(recorded) == calls
    assert {c.chain_id for c in recorded} == {0} and len(trajectories) == 1
    assert trajectories[0].num_turns == calls
    assert tito_violations(trajectories, recorded) == []
    return recorded


def ignored_counts(url: str) -> dict[str, int]:
    return {
        f: int(n)
        for f, n in IGNORED_METRIC.findall(httpx.get(url + "/metrics", headers=CONTROL).text)
    }


def claude_code_post(url: str, session: dict, body: dict[str, Any], path: str = "") -> list[dict]:
    """POST the way Claude Code does (its headers, `?beta=true`, stream); the SSE events."""
    headers = {k: v for k, v in CAPTURE["headers"].items() if k.lower() != "x-api-key"}
    headers["x-api-key"] = session["api_key"]
    response = httpx.post(
        f"{url}/sessions/{session['session_id']}/v1/messages{path}?beta=true",
        content=json.dumps(body),
        headers=headers,
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = []
    for frame in response.text.strip().split("\n\n"):
        kind, data = frame.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


def assistant_blocks(events: list[dict]) -> list[dict[str, Any]]:
    """The content blocks a streamed reply accumulates to (as a client echoes them back)."""
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for event in events:
        if event["type"] == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            else:
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return [blocks[i] for i in sorted(blocks)]


def test_claude_code_first_request_is_answered_and_its_ignored_fields_counted(gateway) -> None:
    url, engine, _ = gateway
    session = new_session(url)
    before = ignored_counts(url)
    engine.replies[len(engine.requests)] = "I will read it.\n" + BASH_CALL
    events = claude_code_post(url, session, CAPTURE["body"])
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    assert events[-1]["type"] == "message_stop"
    text, call = assistant_blocks(events)
    assert text == {"type": "text", "text": "I will read it."}
    assert call["name"] == "Bash" and call["input"] == {"command": "cat a.py"}
    after = ignored_counts(url)
    grew = {f for f in after if after[f] != before.get(f, 0)}
    assert grew == CAPTURE_IGNORED
    assert all(after[f] == before.get(f, 0) + 1 for f in grew)
    # The system-role message is rendered in place, after the user turn, in the prompt.
    (call_record,) = record(url, session)[1]
    prompt = engine.tokenizer.decode(call_record.prompt_ids)
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
    environment = CAPTURE["body"]["messages"][1]["content"][0]["text"]
    assert prompt.index("fix a.py") < prompt.index("<|im_start|>system\n" + environment)
    assert "DeferredToolPlaceholder" not in prompt  # defer_loading: out of the prompt
    assert '"name": "ToolSearch"' in prompt


def test_claude_code_conversation_stays_on_one_chain(gateway) -> None:
    """Claude Code's way: system-role notes mid-history, cache breakpoints moving each turn."""
    url, engine, manager = gateway
    session = new_session(url)
    body = copy.deepcopy(CAPTURE["body"])
    engine.replies[len(engine.requests)] = BASH_CALL
    first = assistant_blocks(claude_code_post(url, session, body))
    (tool_use,) = first
    # Turn 2: the environment note loses its breakpoint, the new last block gets it; a
    # system-role reminder follows the tool result.
    del body["messages"][1]["content"][0]["cache_control"]
    body["messages"] += [
        {"role": "assistant", "content": first},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_use["id"],
                    "content": [{"type": "text", "text": "print('hi')"}],
                    "is_error": False,
                }
            ],
        },
        {
            "role": "system",
            "content": [
                {"type": "text", "text": "<system-reminder>a.py was read</system-reminder>"}
            ],
        },
    ]
    body["messages"][-1]["content"][-1]["cache_control"] = EPHEMERAL
    engine.replies[len(engine.requests)] = "Found it.\n" + BASH_CALL.replace(
        "cat", "sed -i s/hi/ho/"
    )
    second = assistant_blocks(claude_code_post(url, session, body))
    # Turn 3: Claude Code echoes the turn with its own breakpoint on the last tool_use block.
    del body["messages"][-1]["content"][-1]["cache_control"]
    echoed = copy.deepcopy(second)
    echoed[-1]["cache_control"] = EPHEMERAL
    body["messages"] += [
        {"role": "assistant", "content": echoed},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": second[-1]["id"], "content": "done"},
                {"type": "text", "text": "thanks", "cache_control": EPHEMERAL},
            ],
        },
    ]
    engine.replies[len(engine.requests)] = "Fixed a.py."
    third = assistant_blocks(claude_code_post(url, session, body))
    assert third == [{"type": "text", "text": "Fixed a.py."}]
    calls = assert_one_chain_tito(url, session, 3)
    # Turns 2 and 3 appended to the chain: each prompt extends the previous call's tokens.
    for earlier, later in zip(calls, calls[1:], strict=False):
        assert later.prompt_ids[: len(earlier.prompt_ids)] == earlier.prompt_ids
    reminder = "<|im_start|>system\n<system-reminder>a.py was read</system-reminder><|im_end|>"
    assert reminder in engine.tokenizer.decode(calls[2].prompt_ids)
    assert manager.get(session["session_id"]).history.misses == 3  # moved breakpoints: no memo


def test_sdk_plain_stream_beta_and_count_tokens(gateway) -> None:
    url, engine, manager = gateway
    session = new_session(url)
    client = anthropic.Anthropic(
        base_url=session["anthropic_base_url"], api_key=session["api_key"], max_retries=0
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list the files"}]
    counted = client.messages.count_tokens(
        model="tiny", system="agent", tools=[SHELL], messages=messages
    )
    engine.replies[len(engine.requests)] = "Let me look.\n" + SHELL_CALL
    first = client.messages.create(
        model="tiny", max_tokens=64, system="agent", tools=[SHELL], messages=messages
    )
    assert first.stop_reason == "tool_use" and first.content[1].input == {"cmd": "ls"}
    usage = first.usage
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "a.py"}
            ],
        },
    ]
    # A continuation: counted from the chain's tokens plus the delta, as the call will send.
    sid = session["session_id"]
    memo = manager.get(sid).history.memo
    counted = client.messages.count_tokens(
        model="tiny", system="agent", tools=[SHELL], messages=messages
    )
    assert manager.get(sid).history.memo is memo and len(record(url, session)[1]) == 1
    engine.replies[len(engine.requests)] = "Two files."
    stream = client.messages.create(
        model="tiny",
        max_tokens=64,
        system="agent",
        tools=[SHELL],
        messages=messages,
        stream=True,
    )
    events = list(stream)
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    (end,) = [e for e in events if e.type == "message_delta"]
    assert end.delta.stop_reason == "end_turn"
    assert counted.input_tokens == end.usage.input_tokens + end.usage.cache_read_input_tokens
    assert counted.input_tokens == len(record(url, session)[1][1].prompt_ids)
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == (
        "Two files."
    )
    messages += [
        {"role": "assistant", "content": "Two files."},
        {"role": "system", "content": "The user is waiting."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "which?", "cache_control": EPHEMERAL}],
        },
    ]
    # The beta surface: betas (header), thinking, metadata, cache_control, context management.
    beta_request = {
        "model": "tiny",
        "system": [{"type": "text", "text": "agent", "cache_control": EPHEMERAL}],
        "tools": [{**SHELL, "cache_control": EPHEMERAL}],
        "messages": messages,
        "betas": ["context-management-2025-06-27", "interleaved-thinking-2025-05-14"],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "low"},
    }
    counted = client.beta.messages.count_tokens(**beta_request)
    before = ignored_counts(url)
    engine.replies[len(engine.requests)] = "a.py and b.py"
    reply = client.beta.messages.create(
        **beta_request,
        max_tokens=64,
        metadata={"user_id": "u-1"},
        cache_control=EPHEMERAL,
        service_tier="auto",
    )
    assert reply.content[0].text == "a.py and b.py" and reply.stop_reason == "end_turn"
    assert counted.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens
    after = ignored_counts(url)
    assert {f for f in after if after[f] != before.get(f, 0)} == {
        "anthropic-beta",
        "cache_control",
        "context_management",
        "messages.content.cache_control",
        "metadata",
        "output_config",
        "service_tier",
        "system.cache_control",
        "thinking",
        "tools.cache_control",
    }
    assert_one_chain_tito(url, session, 3)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "any"}}, "tool_choice.type"),
        ({"tool_choice": {"type": "tool", "name": "shell"}}, "tool_choice.type"),
        (
            {"mcp_servers": [{"type": "url", "url": "https://mcp.test", "name": "m"}]},
            "mcp_servers",
        ),
        (
            {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
            "context_management.edits[0].type",
        ),
        (
            {"output_config": {"format": {"type": "json_schema", "schema": {}}}},
            "output_config.format",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "x",
                                },
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "document",
                                "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
    ],
)
def test_refused_fields_are_a_400_naming_the_field(gateway, extra, field) -> None:
    url, _, _ = gateway
    session = new_session(url)
    client = anthropic.Anthropic(
        base_url=session["anthropic_base_url"], api_key=session["api_key"], max_retries=0
    )
    request = {
        "model": "tiny",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [SHELL],
        **extra,
    }
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.beta.messages.create(**request)
    error = caught.value.body["error"]
    assert caught.value.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["message"].startswith(field)
    request.pop("max_tokens")
    with pytest.raises(anthropic.BadRequestError) as counted:
        client.beta.messages.count_tokens(**request)
    assert counted.value.body["error"]["message"].startswith(field)
    assert record(url, session) == ([], [])


def test_count_tokens_refuses_generation_fields_and_unknown_sessions(gateway) -> None:
    url, _, _ = gateway
    session = new_session(url)
    base = f"{url}/sessions/{session['session_id']}/v1/messages/count_tokens"
    headers = {"x-api-key": session["api_key"]}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    ok = httpx.post(base + "?beta=true", json=body, headers=headers)
    assert ok.status_code == 200 and ok.json()["input_tokens"] > 0
    refused = httpx.post(base, json={**body, "max_tokens": 5}, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].startswith("max_tokens")
    missing = httpx.post(f"{url}/sessions/nope/v1/messages/count_tokens", json=body)
    assert missing.status_code == 401 and missing.json()["type"] == "error"
