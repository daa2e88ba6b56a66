"""The gateway over HTTP on loopback, driven by the real `openai` and `anthropic` SDKs."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.inference import HFEngine
from uni_agent_core.models import load_policy
from uni_agent_core.types import EngineCall, Trajectory

SHELL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
}
ANTHROPIC_SHELL = {
    "name": "shell",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
BAD_ARGUMENTS = json.dumps(
    {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": "{oops"}}
                ],
            },
        ]
    }
).encode()
CALL = '<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def scripted_gateway(tiny_tokenizer, scripted_engine_cls):
    engine = scripted_engine_cls(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, session_ttl_s=3600, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url, engine, manager


@pytest.fixture(scope="module")
def tiny_gateway():
    model, tokenizer = load_policy("tiny")
    manager = SessionManager(HFEngine(model, tokenizer), tokenizer, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url


def new_session(url: str, **body) -> dict:
    response = httpx.post(url + "/sessions", json=body, headers=CONTROL, timeout=10)
    response.raise_for_status()
    return response.json()


def record(url: str, session: dict) -> tuple[list[Trajectory], list[EngineCall]]:
    headers = CONTROL
    sid = session["session_id"]
    trajectories = httpx.get(f"{url}/sessions/{sid}/trajectories", headers=headers).json()
    calls = httpx.get(f"{url}/sessions/{sid}/calls", headers=headers).json()
    return [Trajectory(**t) for t in trajectories], [EngineCall(**c) for c in calls]


def assert_tito(url: str, session: dict) -> None:
    trajectories, calls = record(url, session)
    assert calls, "no engine call was recorded"
    assert tito_violations(trajectories, calls) == []


def test_openai_sdk_tool_loop_keeps_one_chain(scripted_gateway) -> None:
    url, engine, _ = scripted_gateway
    session = new_session(url)
    client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])
    engine.replies[len(engine.requests)] = CALL
    messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": "list"}]
    first = client.chat.completions.create(model="tiny", messages=messages, tools=[SHELL])
    call = first.choices[0].message.tool_calls[0]
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "shell" and call.function.arguments == '{"cmd": "ls"}'
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "a.py"},
    ]
    second = client.chat.completions.create(model="tiny", messages=messages, tools=[SHELL])
    assert second.choices[0].finish_reason == "stop"
    trajectories, calls = record(url, session)
    assert len(trajectories) == 1 and len(calls) == 2
    assert_tito(url, session)


def test_openai_sdk_streaming_real_tokens(tiny_gateway) -> None:
    # Seeded: the random tiny policy, sampled freely, can end on an EOS before 12 tokens.
    session = new_session(tiny_gateway, sampling={"seed": 11})
    client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])
    messages = [{"role": "user", "content": "hello"}]
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert finish == "length" and usage.completion_tokens == 12
    assert sum(1 for p in pieces if p) >= 3, "text must arrive in several chunks"
    text = "".join(pieces)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    client.chat.completions.create(model="tiny", messages=messages, max_tokens=5)
    trajectories, _ = record(tiny_gateway, session)
    assert len(trajectories) == 1  # the streamed reply, echoed back, continued the chain
    assert_tito(tiny_gateway, session)


def test_anthropic_sdk_plain_and_streaming(scripted_gateway) -> None:
    url, engine, _ = scripted_gateway
    session = new_session(url)
    client = anthropic.Anthropic(base_url=session["anthropic_base_url"], api_key=session["api_key"])
    engine.replies[len(engine.requests)] = "Let me look." + "\n" + CALL
    first = client.messages.create(
        model="tiny",
        max_tokens=64,
        system="agent",
        tools=[ANTHROPIC_SHELL],
        messages=[{"role": "user", "content": "list"}],
    )
    assert first.stop_reason == "tool_use"
    assert first.content[0].text == "Let me look."
    tool_use = first.content[1]
    assert tool_use.name == "shell" and tool_use.input == {"cmd": "ls"}
    history = [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "a.py"}],
        },
    ]
    with client.messages.stream(
        model="tiny", max_tokens=64, system="agent", tools=[ANTHROPIC_SHELL], messages=history
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and text == final.content[0].text
    trajectories, _ = record(url, session)
    assert len(trajectories) == 1
    assert_tito(url, session)


def test_openai_and_anthropic_requests_yield_identical_tokens(scripted_gateway) -> None:
    url, engine, _ = scripted_gateway
    a, b = new_session(url), new_session(url)
    oa = openai.OpenAI(base_url=a["openai_base_url"], api_key=a["api_key"])
    an = anthropic.Anthropic(base_url=b["anthropic_base_url"], api_key=b["api_key"])
    oa.chat.completions.create(
        model="tiny",
        max_tokens=64,
        tools=[SHELL],
        messages=[
            {"role": "system", "content": "agent"},
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [
                    {
                        "id": "x",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd": "ls"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "x", "content": "a.py"},
        ],
    )
    an.messages.create(
        model="tiny",
        max_tokens=64,
        system="agent",
        tools=[ANTHROPIC_SHELL],
        messages=[
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "tool_use", "id": "y", "name": "shell", "input": {"cmd": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "y", "content": "a.py"}],
            },
        ],
    )
    (_, calls_a), (_, calls_b) = record(url, a), record(url, b)
    assert calls_a[0].prompt_ids == calls_b[0].prompt_ids


def _chains(url: str, session: dict) -> list[dict]:
    return httpx.get(f"{url}/sessions/{session['session_id']}/trajectories", headers=CONTROL).json()


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "needle"),
    [
        ("/v1/chat/completions", b"{not json", {}, 400, "not valid JSON"),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "robot", "content": "x"}]}',
            {},
            400,
            "messages[0].role",
        ),
        (
            "/v1/chat/completions",
            BAD_ARGUMENTS,
            {},
            400,
            "arguments",
        ),
        (
            "/v1/chat/completions",
            b'{"messages": [{"role": "user", "content": "x"}]}',
            {"authorization": "Bearer wrong"},
            401,
            "invalid API key",
        ),
        (
            "/v1/messages",
            b'{"messages": [{"role": "user", "content": "x"}]}',
            {},
            400,
            "max_tokens",
        ),
        ("/v1/messages", b"[1, 2]", {}, 400, ""),
        (
            "/v1/messages",
            b'{"max_tokens": 5, "messages": []}',
            {"x-api-key": "wrong"},
            401,
            "invalid API key",
        ),
    ],
)
def test_bad_input_gets_provider_envelope_and_leaves_chains_alone(
    scripted_gateway, path, body, headers, status, needle
) -> None:
    url, _, _ = scripted_gateway
    session = new_session(url)
    client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    before = _chains(url, session)
    sent = {"content-type": "application/json"}
    sent.update(headers or {"authorization": f"Bearer {session['api_key']}"})
    response = httpx.post(
        f"{url}/sessions/{session['session_id']}{path}", content=body, headers=sent
    )
    assert response.status_code == status
    payload = response.json()
    if path.endswith("completions"):
        assert needle in payload["error"]["message"] or needle in (payload["error"]["param"] or "")
    else:
        assert payload["type"] == "error" and needle in payload["error"]["message"]
    assert _chains(url, session) == before


def test_unknown_session_oversized_request_and_expiry(scripted_gateway, tiny_tokenizer) -> None:
    url, engine, manager = scripted_gateway
    missing = httpx.post(f"{url}/sessions/nope/v1/chat/completions", json={"messages": []})
    assert missing.status_code == 401 and "invalid API key" in missing.json()["error"]["message"]
    session = new_session(url)
    headers = {"authorization": f"Bearer {session['api_key']}"}
    huge = b'{"messages": [{"role": "user", "content": "' + b"x" * (17 << 20) + b'"}]}'
    big = httpx.post(
        f"{url}/sessions/{session['session_id']}/v1/chat/completions", content=huge, headers=headers
    )
    assert big.status_code == 413
    manager.session_ttl_s = 0.0
    try:
        assert manager.expire_idle() >= 1
    finally:
        manager.session_ttl_s = 3600
    gone = httpx.get(f"{url}/sessions/{session['session_id']}/calls", headers=CONTROL)
    assert gone.status_code == 404 and "does not exist" in gone.json()["error"]["message"]
    expired = httpx.post(
        f"{url}/sessions/{session['session_id']}/v1/chat/completions", json={}, headers=headers
    )
    assert expired.status_code == 401  # to its agent, as any wrong key: nothing is told


def test_finalize_delete_and_metrics(scripted_gateway) -> None:
    url, _, _ = scripted_gateway
    session = new_session(url)
    client = openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    base = f"{url}/sessions/{session['session_id']}"
    final = httpx.post(base + "/finalize", headers=CONTROL).json()
    assert len(final["trajectories"]) == 1
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert httpx.delete(base, headers=CONTROL).json()["deleted"] is True
    metrics = httpx.get(url + "/metrics", headers=CONTROL).text
    assert "agent_rl_gateway_requests_total" in metrics
    assert "agent_rl_gateway_request_seconds_bucket" in metrics
    assert "agent_rl_gateway_engine_seconds_count 0" not in metrics
    assert "agent_rl_gateway_rollbacks_total" in metrics
