"""The adversary (`rl/adversary.py`) plays one episode inside a `network: gateway` sandbox
against a live gateway, and every attack it makes fails (issue 48): it cannot end, finalize or
read its session, open side sessions, read the operational endpoints or tell other sessions'
ids from wrong keys; its uncapped request is held to the session's cap; the connections it holds
are capped at the link; its sandbox is still removed; and the gateway holds nothing of it."""

from __future__ import annotations

import asyncio
import json
import shutil

import httpx
import pytest
from support.gateway_control import CONTROL, CONTROL_KEY
from support.tasks import micro_swe_tasks

from uni_agent_core.envs.verifier import task_sandbox_factory
from uni_agent_core.envs.workspace import prepare_agent_workspace
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.session import SessionSettings
from uni_agent_core.gateway.testing import running_gateway
from uni_agent_core.harness.base import Endpoint
from uni_agent_core.harness.factory import build_harness
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.rl.adversary import ATTEMPTS_MARKER, adversary_harness
from uni_agent_core.sandbox.gateway_link import MAX_CONNECTIONS
from uni_agent_core.types import ExitReason

HELD = 100
"""Connections the adversary holds: past the link's cap of 32."""
ATTACKER = adversary_harness(flood=50, held=HELD)

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="needs bubblewrap and socat (make setup installs both)",
)


def test_every_attack_from_inside_fails_and_the_episode_ends_normally(
    tiny_tokenizer, tmp_path
) -> None:
    from uni_agent_core.config.sandbox import LocalSandboxConfig

    task = micro_swe_tasks(tmp_path / "tasks", n=1, seed=0)[0]
    engine = ScriptedEngine(tiny_tokenizer)
    manager = SessionManager(
        engine, tiny_tokenizer, settings=SessionSettings(max_tokens=8), control_key=CONTROL_KEY
    )
    sandbox = LocalSandboxConfig(isolation="bubblewrap", network="gateway")
    with running_gateway(manager, model_name="tiny") as url:
        created = httpx.post(url + "/sessions", json={}, headers=CONTROL, timeout=10).json()
        endpoint = Endpoint.from_session(created, control_key=CONTROL_KEY)

        async def episode():
            async with task_sandbox_factory(sandbox)(task) as box:
                await prepare_agent_workspace(box, task)
                result = await build_harness(ATTACKER).run(task, box, endpoint)
                link, root = box.gateway_link, box.host_dir
            return result, link, root

        result, link, root = asyncio.run(episode())
        calls = httpx.get(
            f"{url}/sessions/{created['session_id']}/calls", headers=CONTROL, timeout=10
        ).json()
        assert len(manager) == 1 and manager.metrics.sessions_created == 1
    assert result.exit_reason is ExitReason.FINISHED, result.info
    line = next(
        line for line in result.info["stdout_tail"].splitlines() if line.startswith(ATTEMPTS_MARKER)
    )
    got = json.loads(line.removeprefix(ATTEMPTS_MARKER))
    for attack in ("delete_own", "finalize_own", "read_trajectories", "read_calls"):
        assert got[attack] == 401, attack
    assert got["side_session_with_key"] == got["side_session_without_key"] == 401
    assert got["flood_created"] == 0
    assert got["read/metrics"] == 401
    assert got["read/docs"] == got["read/openapi.json"] == got["read/redoc"] == 404
    assert got["unknown_session"] == got["wrong_key_own_session"] == 401
    assert got["chat_uncapped"] == 200
    assert len(calls) == 1  # the uncapped request; the one sent while holding was refused
    assert [request.max_new_tokens for request in engine.requests] == [8]  # not 100000
    assert got["connections_opened"] == HELD  # accepted, then closed past the cap
    assert link is not None and link.refused >= HELD - MAX_CONNECTIONS
    assert not root.exists()  # removed, locked directories and all
