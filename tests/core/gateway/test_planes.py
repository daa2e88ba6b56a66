"""The gateway's two planes: a session key opens its own session's model endpoints and nothing
else; sessions are created, read, finalized and deleted, and `/metrics` read, with the control
key only (issue 48, findings 1, 2 and 6)."""

from __future__ import annotations

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.manager import INVALID_SESSION_KEY, SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.inference.scripted import ScriptedEngine

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gateway(tiny_tokenizer):
    manager = SessionManager(
        ScriptedEngine(tiny_tokenizer), tiny_tokenizer, control_key=CONTROL_KEY
    )
    with running_gateway(manager, model_name="tiny") as url:
        yield url, manager


def _session(url: str) -> tuple[str, dict[str, str]]:
    created = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10).json()
    return f"{url}/sessions/{created['session_id']}", {
        "Authorization": f"Bearer {created['api_key']}"
    }


def test_an_agent_key_cannot_delete_finalize_or_read_its_session(gateway) -> None:
    url, manager = gateway
    root, agent = _session(url)
    for method, path in (
        ("DELETE", ""),
        ("POST", "/finalize"),
        ("GET", "/trajectories"),
        ("GET", "/calls"),
    ):
        answer = httpx.request(method, root + path, headers=agent, timeout=10)
        assert answer.status_code == 401, (method, path, answer.text)
        assert "control key" in answer.json()["error"]["message"]
    assert len(manager) == 1
    reply = httpx.post(root + "/v1/chat/completions", json=CHAT, headers=agent, timeout=10)
    assert reply.status_code == 200  # the session lives on, and its agent still works


def test_sessions_are_created_with_the_control_key_only(gateway) -> None:
    url, manager = gateway
    _, agent = _session(url)
    for headers in ({}, agent, {"Authorization": "Bearer sk-agent-rl-guess"}):
        body = {"sampling": {"max_tokens": 100000}}
        answer = httpx.post(url + "/sessions", json=body, headers=headers, timeout=10)
        assert answer.status_code == 401
    assert len(manager) == 1  # the one the control plane opened


def test_operational_endpoints_are_not_served_without_the_control_key(gateway) -> None:
    url, _ = gateway
    _, agent = _session(url)
    assert httpx.get(url + "/metrics", headers=agent).status_code == 401
    assert "agent_rl_gateway_requests_total" in httpx.get(url + "/metrics", headers=CONTROL).text
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert httpx.get(url + path, headers=CONTROL).status_code == 404
    assert httpx.get(url + "/health").json() == {"status": "ok"}


def test_a_wrong_key_and_an_unknown_session_get_the_same_answer(gateway) -> None:
    url, _ = gateway
    root, agent = _session(url)
    other_root, _ = _session(url)
    answers = [
        httpx.post(other_root + "/v1/chat/completions", json=CHAT, headers=agent),
        httpx.post(
            url + "/sessions/" + "0" * 32 + "/v1/chat/completions", json=CHAT, headers=agent
        ),
        httpx.post(root + "/v1/chat/completions", json=CHAT, headers=CONTROL),
    ]
    assert {answer.status_code for answer in answers} == {401}
    assert {answer.json()["error"]["message"] for answer in answers} == {INVALID_SESSION_KEY}
