"""Harness fixtures: a live gateway over a scripted engine, and a fresh repo in a sandbox."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.models import load_policy

HAS_BWRAP = shutil.which("bwrap") is not None


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return load_policy("tiny")[1]


@pytest.fixture(scope="module")
def scripted(tiny_tokenizer):
    """(gateway URL, engine, manager) over a ScriptedEngine."""
    engine = ScriptedEngine(tiny_tokenizer)
    manager = SessionManager(engine, tiny_tokenizer, control_key=CONTROL_KEY)
    with running_gateway(manager, model_name="tiny") as url:
        yield url, engine, manager


def tool_call(name: str, arguments: dict) -> str:
    """A hermes tool call as the model would write it."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def open_session(url: str) -> Endpoint:
    created = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10).json()
    return Endpoint.from_session(created, model="tiny", control_key=CONTROL_KEY)


def session_record(url: str, endpoint: Endpoint):
    from uni_agent_core.types import EngineCall, Trajectory

    root = endpoint.openai_base_url.removesuffix("/v1")
    headers = CONTROL
    trajectories = [
        Trajectory(**t) for t in httpx.get(root + "/trajectories", headers=headers).json()
    ]
    calls = [EngineCall(**c) for c in httpx.get(root + "/calls", headers=headers).json()]
    return trajectories, calls


@pytest.fixture
def fns():
    """Helpers for tests (conftest modules are not importable)."""
    return {"tool_call": tool_call, "open_session": open_session, "record": session_record}
