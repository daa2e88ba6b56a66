"""The OpenAI Responses endpoint over HTTP on loopback: the real `openai` SDK and Codex's wire.

A scripted engine answers with a tool call, then text; every conversation must stay one chain
and keep the TITO invariant, whether it is sent Codex's way (the whole history, `store: false`)
or the SDK's (`previous_response_id`).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import openai
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY
from support.responses_tools import AGENTS, CODEX_REQUEST, PATCH, SHELL

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.types import EngineCall, Trajectory

FIXTURE = CODEX_REQUEST
SHELL_CALL = 'Looking.\n<tool_call>\n{"name": "shell", "arguments": {"cmd": "ls"}}\n</tool_call>'
PATCH_TEXT = "*** Begin Patch\n*** Add File: a.py\n+x = 1\n*** End Patch"
PATCH_CALL = (
    "<tool_call>\n"
    + json.dumps({"name": "apply_patch", "arguments": {"input": PATCH_TEXT}})
    + "\n</tool_call>\n<tool_call>\n"
    + json.dumps({"name": "multi_agent_v1__spawn_agent", "arguments": {"message": "go"}})
    + "\n</tool_call>"
)


@pytest.fixture(scope="module")
def gateway(tiny_tokenizer, scripted_engine_cls):
    engine = scripted_engine_cls(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, session_ttl_s=3600, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url, engine


def new_session(url: str) -> dict[str, Any]:
    response = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10)
    response.raise_for_status()
    return response.json()


def client_for(session: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=session["openai_base_url"], api_key=session["api_key"])


def record(url: str, session: dict[str, Any]) -> tuple[list[Trajectory], list[EngineCall]]:
    headers = CONTROL
    sid = session["session_id"]
    trajectories = httpx.get(f"{url}/sessions/{sid}/trajectories", headers=headers).json()
    calls = httpx.get(f"{url}/sessions/{sid}/calls", headers=headers).json()
    return [Trajectory(**t) for t in trajectories], [EngineCall(**c) for c in calls]


def assert_one_chain(url: str, session: dict[str, Any], calls: int) -> None:
    trajectories, made = record(url, session)
    assert len(made) == calls and {c.chain_id for c in made} == {trajectories[0].chain_id}
    assert len(trajectories) == 1, "the conversation split into several chains"
    assert tito_violations(trajectories, made) == []


def script(engine: Any, *replies: str) -> None:
    start = len(engine.requests)
    for k, reply in enumerate(replies):
        engine.replies[start + k] = reply


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    events = []
    for block in response.text.split("\n\n"):
        if not block.strip():
            continue
        kind, data = block.split("\n", 1)
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


def test_sdk_tool_loop_sent_codex_way_keeps_one_chain(gateway) -> None:
    url, engine = gateway
    session = new_session(url)
    client = client_for(session)
    script(engine, SHELL_CALL, "Done.")
    history: list[Any] = [{"role": "user", "content": "list the files"}]
    first = client.responses.create(
        model="tiny", instructions="agent", input=history, tools=[SHELL], store=False
    )
    message, call = first.output
    assert first.status == "completed" and first.id.startswith("resp_")
    assert message.type == "message" and first.output_text == "Looking."
    assert call.type == "function_call" and call.name == "shell"
    assert json.loads(call.arguments) == {"cmd": "ls"}
    assert first.usage is not None and first.usage.output_tokens > 0
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.py"})
    second = client.responses.create(
        model="tiny", instructions="agent", input=history, tools=[SHELL], store=False
    )
    assert second.output_text == "Done." and second.status == "completed"
    assert_one_chain(url, session, calls=2)


def test_sdk_streaming_then_previous_response_id_keeps_one_chain(gateway) -> None:
    url, engine = gateway
    session = new_session(url)
    client = client_for(session)
    script(engine, SHELL_CALL, "Done.", "Bye.")
    events = list(
        client.responses.create(
            model="tiny", instructions="agent", input="list", tools=[SHELL], stream=True
        )
    )
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and "response.function_call_arguments.done" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    first = events[-1].response
    call = first.output[-1]
    assert text == "Looking." and call.type == "function_call"

    # The SDK's way: stored responses, continued by id (tools and instructions sent again).
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "a.py"}
    with client.responses.stream(
        model="tiny",
        instructions="agent",
        input=[output],
        tools=[SHELL],
        previous_response_id=first.id,
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        second = stream.get_final_response()
    assert "".join(deltas) == "Done." and second.output_text == "Done."
    third = client.responses.create(
        model="tiny",
        instructions="agent",
        input="thanks",
        tools=[SHELL],
        previous_response_id=second.id,
    )
    assert third.output_text == "Bye." and third.previous_response_id == second.id
    assert_one_chain(url, session, calls=3)


def test_custom_and_namespaced_tool_round_trip_keeps_one_chain(gateway) -> None:
    url, engine = gateway
    session = new_session(url)
    client = client_for(session)
    script(engine, PATCH_CALL, "Patched.")
    history: list[Any] = [{"role": "user", "content": "add a.py"}]
    tools: list[Any] = [SHELL, PATCH, AGENTS]
    first = client.responses.create(model="tiny", input=history, tools=tools, store=False)
    patch, spawn = first.output
    assert patch.type == "custom_tool_call" and patch.name == "apply_patch"
    assert patch.input == PATCH_TEXT
    assert spawn.type == "function_call"
    assert (spawn.name, spawn.namespace) == ("spawn_agent", "multi_agent_v1")
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history += [
        {"type": "custom_tool_call_output", "call_id": patch.call_id, "output": "applied"},
        {"type": "function_call_output", "call_id": spawn.call_id, "output": "agent 1"},
    ]
    second = client.responses.create(model="tiny", input=history, tools=tools, store=False)
    assert second.output_text == "Patched."
    assert_one_chain(url, session, calls=2)


def test_codex_request_replays_and_its_history_extends_the_chain(gateway) -> None:
    url, engine = gateway
    session = new_session(url)
    body = json.loads(FIXTURE.read_text())["body"]
    body["tools"].insert(0, SHELL)
    headers = {"authorization": f"Bearer {session['api_key']}", "accept": "text/event-stream"}
    endpoint = session["openai_base_url"] + "/responses"
    script(engine, SHELL_CALL, "Fixed.")
    first = httpx.post(endpoint, json=body, headers=headers, timeout=30)
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/event")
    events = sse_events(first)
    completed = events[-1]
    assert completed["type"] == "response.completed" and completed["response"]["id"]
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [item["type"] for item in items] == ["message", "function_call"]
    assert completed["response"]["usage"]["input_tokens"] > 0

    # Codex's next turn: the whole history again, with the output items and the tool output.
    follow = copy.deepcopy(body)
    follow["input"] += [
        *items,
        {"type": "function_call_output", "call_id": items[1]["call_id"], "output": "done"},
    ]
    second = sse_events(httpx.post(endpoint, json=follow, headers=headers, timeout=30))
    assert second[-1]["type"] == "response.completed"
    assert second[-1]["response"]["output"][0]["content"][0]["text"] == "Fixed."
    assert_one_chain(url, session, calls=2)
    metrics = httpx.get(url + "/metrics", headers=CONTROL).text
    for field in ("client_metadata", "include", "reasoning", "store", "tools.web_search"):
        assert f'protocol="responses",field="{field}"' in metrics


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "truncation": "auto"}, "truncation"),
        ({"input": "x", "previous_response_id": "resp_nope"}, "previous_response_id"),
        ({"input": [{"type": "input_file", "file_id": "f"}]}, "input[0].type"),
        ({"input": "x", "tools": [{"type": "mcp", "server_label": "s"}]}, "tools[0].type"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ],
)
def test_bad_input_is_an_openai_400_and_leaves_chains_alone(gateway, body, param) -> None:
    url, engine = gateway
    session = new_session(url)
    client = client_for(session)
    client.responses.create(model="tiny", input="hi", store=False)
    before = record(url, session)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", **body)
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert record(url, session) == before


def test_finalized_session_is_a_409_and_a_failure_mid_stream_is_response_failed(gateway) -> None:
    url, engine = gateway
    session = new_session(url)
    client = client_for(session)
    engine.fail.add(len(engine.requests))
    events = list(client.responses.create(model="tiny", input="hi", stream=True))
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert events[-1].response.status == "failed"
    httpx.post(f"{url}/sessions/{session['session_id']}/finalize", headers=CONTROL)
    with pytest.raises(openai.ConflictError):
        client.responses.create(model="tiny", input="hi")
