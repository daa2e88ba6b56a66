"""`agent-rl gateway serve`: its flags are a recipe overlay, and the served gateway answers."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.cli.main import _gateway_overlay
from uni_agent_core.config import Recipe
from uni_agent_core.config.loading import parse_recipe
from uni_agent_core.gateway.manager import CONTROL_KEY_VARIABLE

ROOT = Path(__file__).resolve().parents[3]


def _args(**given) -> argparse.Namespace:
    flags = dict(
        model=None,
        engine=None,
        engine_url=[],
        server_api="vllm",
        served_model=None,
        host=None,
        port=None,
        max_total_tokens=None,
        session_ttl_s=None,
    )
    return argparse.Namespace(**(flags | given))


def test_flags_become_recipe_overrides() -> None:
    base = Recipe(name="gateway")
    args = _args(
        engine="openai_server",
        engine_url=["http://127.0.0.1:8001", "http://127.0.0.1:8002"],
        served_model="served",
        session_ttl_s=30.0,
        port=9000,
    )
    recipe = parse_recipe({"name": "gateway"}, _gateway_overlay(args, base))
    assert recipe.engine.type == "openai_server"
    assert recipe.engine.base_urls == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert recipe.engine.model == "served" and recipe.router.replicas == 2
    assert (recipe.gateway.session_ttl_s, recipe.gateway.port) == (30.0, 9000)


def test_no_flags_leave_the_recipe_as_it_is() -> None:
    assert _gateway_overlay(_args(), Recipe(name="gateway")) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_serve_answers_session_requests() -> None:
    port = _free_port()
    command = [sys.executable, "-m", "uni_agent_core.cli", "gateway", "serve", "--model", "tiny"]
    server = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=ROOT,
        env={**os.environ, CONTROL_KEY_VARIABLE: CONTROL_KEY},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/sessions", data=b"{}", method="POST", headers=CONTROL
                )
                with urllib.request.urlopen(request, timeout=5) as response:
                    created = json.loads(response.read())
                break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "the gateway did not come up"
                time.sleep(0.5)
        assert created["openai_base_url"].endswith(f"/sessions/{created['session_id']}/v1")
        assert created["api_key"]
    finally:
        server.terminate()
        server.wait(timeout=30)
