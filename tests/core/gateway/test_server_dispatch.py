"""`GatewayApp`: chat turns skip FastAPI's layers but keep its behaviour at the edges."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway import server
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.server import GatewayApp, create_app
from uni_agent_core.inference.scripted import ScriptedEngine


async def _post_chat(app: GatewayApp, path: str, body: dict, root_path: str = "") -> httpx.Response:
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        created = (await client.post(f"{root_path}/sessions", json={}, headers=CONTROL)).json()
        headers = {"authorization": f"Bearer {created['api_key']}"}
        url = f"{root_path}/sessions/{created['session_id']}/v1/{path}"
        return await client.post(url, json=body, headers=headers)


@pytest.fixture
def app(tiny_tokenizer) -> GatewayApp:
    engine = ScriptedEngine(tiny_tokenizer)
    engine.replies = {i: "done" for i in range(8)}
    return create_app(
        SessionManager(engine, tiny_tokenizer, control_key=CONTROL_KEY), close_engine=False
    )


def test_chat_turns_are_served_directly_and_other_routes_by_fastapi(app) -> None:
    openai = asyncio.run(
        _post_chat(app, "chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    )
    assert openai.status_code == 200 and openai.json()["choices"][0]["message"]["content"]
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    anthropic = asyncio.run(_post_chat(app, "messages", body))
    assert anthropic.status_code == 200 and anthropic.json()["type"] == "message"
    # Under a root path (a reverse proxy's prefix) the same routes match.
    prefixed = asyncio.run(
        _post_chat(
            app, "chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "/gw"
        )
    )
    assert prefixed.status_code == 200
    assert app.state.manager.metrics.requests == 3


@pytest.mark.parametrize(
    ("path", "target", "body", "error_key"),
    [
        ("chat/completions", "parse_openai_request", {"messages": []}, "error"),
        ("messages", "parse_anthropic_request", {"max_tokens": 1, "messages": []}, "error"),
    ],
)
def test_an_unexpected_error_is_a_500_in_the_protocols_envelope(
    app, monkeypatch, path, target, body, error_key
) -> None:
    def broken(*_args, **_kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(server, target, broken)
    response = asyncio.run(_post_chat(app, path, body))
    assert response.status_code == 500
    payload = response.json()
    assert "KeyError" in str(payload[error_key])
    if path == "messages":
        assert payload["type"] == "error"
    assert app.state.manager.metrics.request_errors == 1


def test_the_sdks_beta_query_takes_the_fast_path_and_count_tokens_goes_to_fastapi(app) -> None:
    seen: list[str] = []
    fastapi = app.api

    async def spy(scope, receive, send):
        seen.append(scope.get("path", scope["type"]))
        await fastapi(scope, receive, send)

    app.api = spy
    body = {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    beta = asyncio.run(_post_chat(app, "messages?beta=true", body))
    assert beta.status_code == 200 and beta.json()["type"] == "message"
    assert not any(path.endswith("/v1/messages") for path in seen)
    body.pop("max_tokens")
    counted = asyncio.run(_post_chat(app, "messages/count_tokens?beta=true", body))
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
    assert seen[-1].endswith("/v1/messages/count_tokens")
