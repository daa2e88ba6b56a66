"""mini-swe-agent as a harness: the real package, its actions in local sandboxes, a live gateway."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest
from support.gateway_control import CONTROL_KEY

from uni_agent_core.config.harness import MiniSweAgentHarnessConfig
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.harness.mini_swe_agent import MiniSweAgentHarness, load_mini_config
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.types import ExitReason, TaskSpec

pytest.importorskip("minisweagent")

HAS_BWRAP = shutil.which("bwrap") is not None
TASK = TaskSpec(instance_id="demo-3", problem_statement="Create hello.txt containing hi.")


def action(command: str) -> str:
    """A reply in the bundled config's format."""
    return f"THOUGHT: next step.\n\n```mswea_bash_command\n{command}\n```"


def _script(engine, replies: list[str]) -> None:
    start = len(engine.requests)
    engine.replies.update({start + i: text for i, text in enumerate(replies)})


async def _episode(harness, endpoint, *, isolation: str = "none", wrap=None):
    async with LocalSandbox(isolation=isolation) as sandbox:
        await sandbox.exec(f"mkdir -p {sandbox.workdir} && git init -q {sandbox.workdir}")
        result = await harness.run(TASK, wrap(sandbox) if wrap else sandbox, endpoint)
        listing = await sandbox.exec("ls -a")
        return result, listing.stdout


@pytest.mark.skipif(not HAS_BWRAP, reason="needs bubblewrap")
def test_actions_run_in_a_bubblewrap_sandbox_and_the_agent_submits(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(
        engine,
        [
            action("echo hi > hello.txt && cat /proc/1/comm"),
            action("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        ],
    )
    harness = MiniSweAgentHarness(MiniSweAgentHarnessConfig(max_turns=5, wall_clock_s=60))
    result, listing = asyncio.run(_episode(harness, endpoint, isolation="bubblewrap"))
    assert result.exit_reason == ExitReason.SUBMITTED, result.info
    assert result.steps == 2 and result.info["commands"] == 2
    assert "hello.txt" in listing
    trajectories, calls = fns["record"](url, endpoint)
    assert len(calls) == 2 and len(trajectories) == 1  # the second call extended the chain
    # The observation the model saw came from inside the sandbox (bwrap is its pid 1).
    assert "bwrap" in engine.tokenizer.decode(calls[1].prompt_ids)
    assert tito_violations(trajectories, calls) == []


def test_the_step_limit_ends_with_max_turns(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(engine, [action("ls")] * 3)
    harness = MiniSweAgentHarness(MiniSweAgentHarnessConfig(max_turns=2, wall_clock_s=60))
    result, _ = asyncio.run(_episode(harness, endpoint))
    assert result.exit_reason == ExitReason.MAX_TURNS, result.info
    assert result.steps == 2 and result.info["exit_status"] == "LimitsExceeded"


@pytest.mark.slow
def test_failures_map_to_exit_reasons(scripted, fns) -> None:
    url, engine, _ = scripted
    harness = MiniSweAgentHarness(MiniSweAgentHarnessConfig(max_turns=10, wall_clock_s=60))
    # A failed model call is an engine error (no retries).
    endpoint = fns["open_session"](url)
    engine.fail.add(len(engine.requests))
    result, _ = asyncio.run(_episode(harness, endpoint))
    assert result.exit_reason == ExitReason.ENGINE_ERROR, result.info
    assert "engine" in result.info["last_error"]
    # A dead sandbox is a sandbox error.
    endpoint = fns["open_session"](url)
    _script(engine, [action("ls")])
    result, _ = asyncio.run(_episode(harness, endpoint, wrap=_DeadSandbox))
    assert result.exit_reason == ExitReason.SANDBOX_ERROR, result.info
    assert "transport lost" in result.info["last_error"]


def test_a_slow_episode_is_killed_at_its_deadline(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    harness = MiniSweAgentHarness(MiniSweAgentHarnessConfig(wall_clock_s=8))
    _script(engine, [action("sleep 30")])
    started = time.monotonic()
    result, _ = asyncio.run(_episode(harness, endpoint))
    assert result.exit_reason == ExitReason.TIMEOUT, result.info
    assert time.monotonic() - started < 20


def test_tiny_policy_episodes_keep_tito(fns) -> None:
    from uni_agent_core.gateway.manager import SessionManager
    from uni_agent_core.gateway.session import SessionSettings
    from uni_agent_core.gateway.testing import running_gateway
    from uni_agent_core.inference import HFEngine

    engine = HFEngine.from_policy("tiny")
    manager = SessionManager(
        engine, engine.tokenizer, settings=SessionSettings(max_tokens=24), control_key=CONTROL_KEY
    )
    harness = MiniSweAgentHarness(MiniSweAgentHarnessConfig(max_turns=4, wall_clock_s=60))
    with running_gateway(manager, model_name="tiny") as url:
        endpoint = fns["open_session"](url)
        result, _ = asyncio.run(_episode(harness, endpoint))
        trajectories, calls = fns["record"](url, endpoint)
    # Random weights write no valid action: the format-error budget (3 in a row) or the step
    # limit ends the episode, after several calls whose every sampled token is recorded exactly.
    assert result.exit_reason in {ExitReason.FORMAT_ERROR_BUDGET, ExitReason.MAX_TURNS}, result.info
    assert result.steps >= 2 and len(calls) == result.steps
    assert tito_violations(trajectories, calls) == []


def test_configs_the_harness_cannot_honour_are_refused(tmp_path) -> None:
    default = load_mini_config(None)
    assert default["model"]["model_class"] == "litellm_textbased"
    bad = tmp_path / "docker.yaml"
    bad.write_text(
        "agent: {system_template: s, instance_template: '{{task}}'}\n"
        "environment: {environment_class: docker, image: python:3.11}\n"
        "model: {model_class: portkey}\n"
    )
    with pytest.raises(ValueError, match="environment_class") as caught:
        MiniSweAgentHarness(MiniSweAgentHarnessConfig(config_path=bad))
    assert "image" in str(caught.value) and "model.model_class" in str(caught.value)


class _DeadSandbox:
    """A started sandbox whose transport is gone."""

    def __init__(self, inner) -> None:
        self.inner, self.workdir = inner, inner.workdir

    async def exec(self, command, **kwargs):
        raise SandboxError("transport lost")

    def __getattr__(self, name):
        return getattr(self.inner, name)
