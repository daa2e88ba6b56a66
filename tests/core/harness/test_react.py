"""The ReAct harness through a live gateway, in local sandboxes, with injected faults."""

from __future__ import annotations

import asyncio
import shutil
import time

import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.config.harness import ReactHarnessConfig
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.harness.react.loop import ReactHarness
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.tools.registry import ToolSet
from uni_agent_core.types import ExitReason, TaskSpec

TASK = TaskSpec(instance_id="demo-1", problem_statement="Create hello.txt containing hi.")


async def _episode(harness, endpoint, *, isolation="none", sandbox_wrapper=None, **limits):
    async with LocalSandbox(isolation=isolation, **limits) as sandbox:
        await sandbox.exec(f"mkdir -p {sandbox.workdir} && cd {sandbox.workdir} && git init -q")
        target = sandbox_wrapper(sandbox) if sandbox_wrapper else sandbox
        result = await harness.run(TASK, target, endpoint)
        listing = await sandbox.exec(f"ls {sandbox.workdir}")
        return result, listing.stdout


def _script(engine, replies: list[str]) -> None:
    start = len(engine.requests)
    engine.replies.update({start + i: text for i, text in enumerate(replies)})


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_episode_acts_in_a_bubblewrap_sandbox_and_submits(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(
        engine,
        [
            fns["tool_call"]("shell", {"command": "echo hi > hello.txt && cat hello.txt"}),
            fns["tool_call"]("submit", {}),
        ],
    )
    harness = ReactHarness(ReactHarnessConfig(max_turns=5))
    result, listing = asyncio.run(_episode(harness, endpoint, isolation="bubblewrap"))
    assert result.exit_reason == ExitReason.SUBMITTED and result.steps == 2
    assert result.info["tool_calls"] == 2 and result.info["tool_errors"] == 0
    assert "hello.txt" in listing
    trajectories, calls = fns["record"](url, endpoint)
    assert len(trajectories) == 1 and len(calls) == 2
    assert tito_violations(trajectories, calls) == []


def test_engine_error_ends_with_engine_error(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    engine.fail.add(len(engine.requests))
    result, _ = asyncio.run(_episode(ReactHarness(ReactHarnessConfig()), endpoint))
    assert result.exit_reason == ExitReason.ENGINE_ERROR and result.steps == 0
    assert "engine" in result.info["last_error"]


def test_a_context_length_refusal_ends_with_max_tokens(scripted, fns) -> None:
    import httpx

    from uni_agent_core.harness.base import Endpoint

    url, engine, _ = scripted
    created = httpx.post(
        url + "/sessions", json={"max_total_tokens": 16}, headers=CONTROL, timeout=10
    ).json()
    endpoint = Endpoint.from_session(created, model="tiny", control_key=CONTROL_KEY)
    result, _ = asyncio.run(_episode(ReactHarness(ReactHarnessConfig()), endpoint))
    assert result.exit_reason == ExitReason.MAX_TOKENS and result.steps == 0
    assert "context" in result.info["last_error"]


def test_replies_without_tool_calls_are_nudged_then_budgeted(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(engine, ["I think", "still thinking", "hmm"])
    config = ReactHarnessConfig(format_error_budget=2)
    result, _ = asyncio.run(_episode(ReactHarness(config), endpoint))
    assert result.exit_reason == ExitReason.FORMAT_ERROR_BUDGET and result.steps == 3
    endpoint = fns["open_session"](url)
    _script(engine, ["done talking"])
    stop = ReactHarnessConfig(on_no_tool_call="stop")
    result, _ = asyncio.run(_episode(ReactHarness(stop), endpoint))
    assert result.exit_reason == ExitReason.FINISHED and result.steps == 1


def test_malformed_tool_calls_count_against_the_budget(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    broken = "<tool_call>\n{not json}\n</tool_call>"
    _script(engine, [broken, broken])
    result, _ = asyncio.run(
        _episode(ReactHarness(ReactHarnessConfig(format_error_budget=1)), endpoint)
    )
    assert result.exit_reason == ExitReason.FORMAT_ERROR_BUDGET
    assert result.info["format_errors"] == 2


def test_bad_tool_arguments_are_observed_not_fatal(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(engine, [fns["tool_call"]("shell", {"cmd": "ls"}), fns["tool_call"]("submit", {})])
    result, _ = asyncio.run(_episode(ReactHarness(ReactHarnessConfig()), endpoint))
    assert result.exit_reason == ExitReason.SUBMITTED and result.info["tool_errors"] == 1
    terminate = ReactHarnessConfig(on_tool_error="terminate")
    endpoint = fns["open_session"](url)
    _script(engine, [fns["tool_call"]("shell", {"command": "false"})])
    result, _ = asyncio.run(_episode(ReactHarness(terminate), endpoint))
    assert result.exit_reason == ExitReason.HARNESS_ERROR


def test_a_hanging_tool_times_out_and_the_episode_goes_on(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    _script(
        engine,
        [fns["tool_call"]("shell", {"command": "sleep 30"}), fns["tool_call"]("submit", {})],
    )
    tools = ToolSet.from_names(["shell", "submit"], exec_timeout_s=1.0)
    harness = ReactHarness(ReactHarnessConfig(tools=["shell", "submit"]), tools=tools)
    started = time.monotonic()
    result, _ = asyncio.run(_episode(harness, endpoint))
    assert result.exit_reason == ExitReason.SUBMITTED and result.info["tool_errors"] == 1
    assert time.monotonic() - started < 10  # the 30 s command was killed at its 1 s limit


class _DyingSandbox:
    """Wraps a sandbox whose transport dies after `healthy` execs."""

    def __init__(self, inner, healthy: int) -> None:
        self.inner, self.healthy, self.workdir = inner, healthy, inner.workdir

    async def exec(self, command, **kwargs):
        if self.healthy <= 0:
            raise SandboxError("sandbox process died")
        self.healthy -= 1
        return await self.inner.exec(command, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_sandbox_that_dies_mid_episode_ends_with_sandbox_error(scripted, fns) -> None:
    url, engine, _ = scripted
    endpoint = fns["open_session"](url)
    ls = fns["tool_call"]("shell", {"command": "ls"})
    _script(engine, [ls, ls, ls])
    config = ReactHarnessConfig(sandbox_retries=1)
    result, _ = asyncio.run(
        _episode(ReactHarness(config), endpoint, sandbox_wrapper=lambda s: _DyingSandbox(s, 1))
    )
    assert result.exit_reason == ExitReason.SANDBOX_ERROR
    assert result.info["sandbox_errors"] == 2  # the first try and one retry


def test_budgets_end_episodes(scripted, fns) -> None:
    url, engine, _ = scripted
    ls = fns["tool_call"]("shell", {"command": "ls"})
    endpoint = fns["open_session"](url)
    _script(engine, [ls] * 3)
    result, _ = asyncio.run(_episode(ReactHarness(ReactHarnessConfig(max_turns=3)), endpoint))
    assert result.exit_reason == ExitReason.MAX_TURNS and result.steps == 3
    endpoint = fns["open_session"](url)
    _script(engine, [ls])
    tight = ReactHarnessConfig(context_budget_tokens=50)
    result, _ = asyncio.run(_episode(ReactHarness(tight), endpoint))
    assert result.exit_reason == ExitReason.MAX_TOKENS
    endpoint = fns["open_session"](url)
    engine.delay = 0.5
    try:
        quick = ReactHarnessConfig(wall_clock_s=0.2)
        result, _ = asyncio.run(_episode(ReactHarness(quick), endpoint))
    finally:
        engine.delay = 0.0
    assert result.exit_reason == ExitReason.TIMEOUT


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_tiny_policy_episodes_keep_tito(fns) -> None:
    from uni_agent_core.gateway.manager import SessionManager
    from uni_agent_core.gateway.session import SessionSettings
    from uni_agent_core.gateway.testing import running_gateway
    from uni_agent_core.inference import HFEngine

    engine = HFEngine.from_policy("tiny")
    manager = SessionManager(
        engine, engine.tokenizer, settings=SessionSettings(max_tokens=16), control_key=CONTROL_KEY
    )
    config = ReactHarnessConfig(max_turns=4, format_error_budget=10)
    with running_gateway(manager, model_name="tiny") as url:
        for _ in range(2):
            endpoint = fns["open_session"](url)
            result, _ = asyncio.run(
                _episode(ReactHarness(config), endpoint, isolation="bubblewrap")
            )
            # Random weights: the episode ends by a budget, but it ends, and every token the
            # engine sampled is recorded exactly.
            assert result.exit_reason in set(ExitReason)
            assert result.steps >= 1
            trajectories, calls = fns["record"](url, endpoint)
            assert calls and tito_violations(trajectories, calls) == []


def test_compact_tool_schemas_shorten_every_prompt(scripted, fns) -> None:
    url, engine, _ = scripted
    prompt_tokens = {}
    for schemas in ("full", "compact"):
        endpoint = fns["open_session"](url)
        _script(engine, [fns["tool_call"]("submit", {})])
        harness = ReactHarness(ReactHarnessConfig(tools=["editor", "submit"], tool_schemas=schemas))
        result, _ = asyncio.run(_episode(harness, endpoint))
        assert result.exit_reason == ExitReason.SUBMITTED
        prompt_tokens[schemas] = len(engine.requests[-1].prompt_ids)
    assert prompt_tokens["compact"] < prompt_tokens["full"] * 0.75
