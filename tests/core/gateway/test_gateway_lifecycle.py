"""The gateway's request lifecycle: abandoned generations end and commit nothing, prompts over
the context get each provider's 400, tool results must answer a call, SIGTERM stops the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.manager import CONTROL_KEY_VARIABLE, SessionManager
from uni_agent_core.gateway.session import GatewaySession
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.inference.scripted import ScriptedEngine

ROOT = Path(__file__).resolve().parents[3]
GENERATION_S = 3.0
"""How long each scripted generation takes: long enough to leave or delete mid-way."""


@pytest.fixture
def gateway(tiny_tokenizer, scripted_engine_cls):
    engine = scripted_engine_cls(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, session_ttl_s=3600, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url, engine, manager


def _open(url: str, manager: SessionManager, **body) -> tuple[dict, GatewaySession]:
    created = httpx.post(url + "/sessions", json=body, headers=CONTROL, timeout=10).json()
    return created, manager.authenticate(created["session_id"], created["api_key"])


def _headers(created: dict) -> dict[str, str]:
    return {"Authorization": f"Bearer {created['api_key']}"}


def _wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "fix the bug"}]}


def test_a_non_streaming_generation_ends_when_its_client_leaves(gateway) -> None:
    url, engine, manager = gateway
    engine.delay = GENERATION_S
    created, session = _open(url, manager)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            created["openai_base_url"] + "/chat/completions",
            json=CHAT,
            headers=_headers(created),
            timeout=0.5,
        )
    assert _wait_until(lambda: not session.busy, 1.5), "the generation outlived its client"
    time.sleep(GENERATION_S)  # long enough for an orphaned generation to have committed
    assert session.calls == [] and session.trajectories() == []
    assert manager.metrics.abandoned_generations == 1


def test_deleting_a_session_aborts_its_generation(gateway) -> None:
    url, engine, manager = gateway
    engine.delay = GENERATION_S
    created, session = _open(url, manager)
    answered: list[httpx.Response] = []

    def ask() -> None:
        answered.append(
            httpx.post(
                created["anthropic_base_url"] + "/v1/messages",
                json={**CHAT, "max_tokens": 64},
                headers=_headers(created),
                timeout=30,
            )
        )

    asker = threading.Thread(target=ask)
    started = time.monotonic()
    asker.start()
    assert _wait_until(lambda: session.busy, 2)
    deleted = httpx.delete(f"{url}/sessions/{created['session_id']}", headers=CONTROL)
    assert deleted.status_code == 200
    asker.join(timeout=10)
    assert time.monotonic() - started < GENERATION_S, "the generation ran to its end"
    (response,) = answered
    assert response.status_code == 409
    assert response.json()["type"] == "error"
    assert session.calls == [] and session.trajectories() == []


def test_deleting_a_session_ends_its_stream_with_an_error(gateway) -> None:
    url, engine, manager = gateway
    engine.delay = GENERATION_S
    created, session = _open(url, manager)
    events: list[str] = []

    def stream() -> None:
        with httpx.stream(
            "POST",
            created["openai_base_url"] + "/chat/completions",
            json={**CHAT, "stream": True},
            headers=_headers(created),
            timeout=30,
        ) as response:
            events.extend(line for line in response.iter_lines() if line.startswith("data: "))

    reader = threading.Thread(target=stream)
    started = time.monotonic()
    reader.start()
    assert _wait_until(lambda: session.busy, 2)
    httpx.delete(f"{url}/sessions/{created['session_id']}", headers=CONTROL)
    reader.join(timeout=10)
    assert time.monotonic() - started < GENERATION_S, "the stream ran to its end"
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert "closed while generating" in error["message"]
    assert session.calls == [] and session.trajectories() == []


def _long_prompt(tokens_at_least: int) -> str:
    return "word " * tokens_at_least


def test_a_prompt_over_the_context_gets_openais_400(gateway) -> None:
    url, _, manager = gateway
    created, session = _open(url, manager, max_total_tokens=64)
    body = {"model": "tiny", "messages": [{"role": "user", "content": _long_prompt(200)}]}
    response = httpx.post(
        created["openai_base_url"] + "/chat/completions", json=body, headers=_headers(created)
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error" and error["param"] == "messages"
    assert "This model's maximum context length is 64 tokens" in error["message"]
    assert session.chains == [] and session.calls == []


def test_a_prompt_over_the_context_gets_anthropics_400(gateway) -> None:
    url, _, manager = gateway
    created, session = _open(url, manager, max_total_tokens=64)
    body = {
        "model": "tiny",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": _long_prompt(200)}],
    }
    response = httpx.post(
        created["anthropic_base_url"] + "/v1/messages", json=body, headers=_headers(created)
    )
    assert response.status_code == 400
    payload = response.json()
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["message"].startswith("prompt is too long: ")
    assert "> 64 maximum" in payload["error"]["message"]
    assert session.chains == [] and session.calls == []


def test_the_engines_context_window_bounds_a_session_without_a_capacity(tiny_tokenizer) -> None:
    from uni_agent_core.inference import HFEngine
    from uni_agent_core.models import load_policy

    model, tokenizer = load_policy("tiny")
    manager = SessionManager(
        HFEngine(model, tokenizer, max_model_len=64), tokenizer, control_key=CONTROL_KEY
    )
    with running_gateway(manager, model_name="tiny") as url:
        created, session = _open(url, manager)
        assert session.settings.max_total_tokens is None and session.capacity == 64
        body = {"model": "tiny", "messages": [{"role": "user", "content": _long_prompt(200)}]}
        response = httpx.post(
            created["openai_base_url"] + "/chat/completions", json=body, headers=_headers(created)
        )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


class WindowedEngine(ScriptedEngine):
    """A scripted engine with a 64-token context window, as `HFEngine` reports its own."""

    max_model_len = 64


@pytest.mark.parametrize("bound_by", ["session", "engine"])
def test_max_tokens_is_bounded_by_what_is_left_of_the_context(tiny_tokenizer, bound_by) -> None:
    engine = (WindowedEngine if bound_by == "engine" else ScriptedEngine)(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, control_key=CONTROL_KEY)
    capacity = {"max_total_tokens": 64} if bound_by == "session" else {}
    with running_gateway(manager, model_name="tiny") as url:
        created, _ = _open(url, manager, **capacity)
        response = httpx.post(
            created["openai_base_url"] + "/chat/completions",
            json={**CHAT, "max_tokens": 10**12},
            headers=_headers(created),
        )
    assert response.status_code == 200
    prompt_tokens = response.json()["usage"]["prompt_tokens"]
    assert engine.requests[-1].max_new_tokens == 64 - prompt_tokens


def test_an_openai_tool_result_must_answer_a_call(gateway) -> None:
    url, _, manager = gateway
    created, session = _open(url, manager)
    messages = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": "ok"},
        {"role": "tool", "tool_call_id": "call_nobody_made", "content": "a.py"},
    ]
    response = httpx.post(
        created["openai_base_url"] + "/chat/completions",
        json={"model": "tiny", "messages": messages},
        headers=_headers(created),
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "messages[2].tool_call_id"
    assert session.chains == []


def test_an_anthropic_tool_result_must_answer_a_tool_use(gateway) -> None:
    url, _, manager = gateway
    created, session = _open(url, manager)
    messages = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_nobody", "content": "a"}],
        },
    ]
    response = httpx.post(
        created["anthropic_base_url"] + "/v1/messages",
        json={"model": "tiny", "max_tokens": 16, "messages": messages},
        headers=_headers(created),
    )
    assert response.status_code == 400
    payload = response.json()
    assert payload["error"]["type"] == "invalid_request_error"
    assert "toolu_nobody" in payload["error"]["message"]
    assert session.chains == []


def _serve(*flags: str) -> tuple[subprocess.Popen, str]:
    with_port = [*flags, "--port", str(_free_port())]
    command = [sys.executable, "-m", "uni_agent_core.cli", "gateway", "serve", *with_port]
    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env={**os.environ, CONTROL_KEY_VARIABLE: CONTROL_KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{with_port[-1]}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return server, url
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise AssertionError(f"the gateway did not start: {server.stderr.read().decode()}")
        time.sleep(0.2)


def _free_port() -> int:
    from uni_agent_core.gateway.launch import free_port

    return free_port()


@pytest.mark.slow
def test_sigterm_stops_the_server_within_seconds_while_it_generates() -> None:
    # The test needs a generation still running when the grace period ends. The tiny policy's
    # greedy reply is not the same from one server start to the next (its random-init logits
    # are near ties, so float rounding picks the token): about one reply in eight meets the
    # stop token within 1,500 tokens, and one that does so before or during the 2 s grace
    # rightly gets its 200 (seen in CI). Such a start tells nothing, and is retried with a new
    # server.
    for _ in range(4):
        server, url = _serve("--model", "tiny")
        try:
            outcome = _ask_then_terminate(server, url)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        if outcome is not None:
            break
    else:
        raise AssertionError("each of 4 replies ended on its own; nothing was tested")
    # The client saw its request cut (a 500 from uvicorn, or the connection dropped), not an
    # answer the server finished generating after it was told to stop.
    assert isinstance(outcome, httpx.HTTPError) or outcome.status_code == 500


def _ask_then_terminate(
    server: subprocess.Popen, url: str
) -> httpx.Response | httpx.HTTPError | None:
    """Start a long greedy reply, SIGTERM the server while it generates, check that it stops
    within seconds; return what the client got, or None when the reply ended on its own (a
    stop token before the signal or within the grace period)."""
    created = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10).json()
    body = {**CHAT, "max_tokens": 8000, "temperature": 0.0}
    outcome: list[httpx.Response | httpx.HTTPError] = []

    def ask() -> None:
        try:
            outcome.append(
                httpx.post(
                    created["openai_base_url"] + "/chat/completions",
                    json=body,
                    headers=_headers(created),
                    timeout=120,
                )
            )
        except httpx.HTTPError as exc:
            outcome.append(exc)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    time.sleep(0.5)  # the generation is under way within milliseconds
    if outcome:
        return None
    stopping = time.monotonic()
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=30)
    assert time.monotonic() - stopping < 6.0
    asker.join(timeout=10)
    (answer,) = outcome
    if _ended_on_its_own(answer):
        return None
    return answer


def _ended_on_its_own(answer: httpx.Response | httpx.HTTPError) -> bool:
    return (
        isinstance(answer, httpx.Response)
        and answer.status_code == 200
        and answer.json()["choices"][0]["finish_reason"] == "stop"
    )


def test_the_max_total_tokens_flag_caps_every_session() -> None:
    server, url = _serve("--model", "tiny", "--max-total-tokens", "48")
    try:
        created = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10).json()
        body = {"model": "tiny", "messages": [{"role": "user", "content": _long_prompt(100)}]}
        response = httpx.post(
            created["openai_base_url"] + "/chat/completions",
            json=body,
            headers=_headers(created),
            timeout=30,
        )
        assert response.status_code == 400, response.text
        assert (
            "maximum context length is 48 tokens" in json.loads(response.text)["error"]["message"]
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
