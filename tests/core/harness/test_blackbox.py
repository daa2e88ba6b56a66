"""The black-box harness: agent scripts run in and beside local sandboxes against a live gateway."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

from uni_agent_core.config.harness import BlackboxHarnessConfig
from uni_agent_core.gateway.tito import tito_violations
from uni_agent_core.harness.blackbox import BlackboxHarness
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.types import ExitReason, TaskSpec

HAS_BWRAP = shutil.which("bwrap") is not None
TASK = TaskSpec(instance_id="demo-7", problem_statement="Say hello twice.")

TWO_CALLS = """
import os, pathlib
from openai import OpenAI

client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                max_retries=0, timeout=30)
task = pathlib.Path(os.environ["AGENT_RL_TASK_FILE"]).read_text()
messages = [{"role": "user", "content": task}]
for _ in range(2):
    reply = client.chat.completions.create(model=os.environ["OPENAI_MODEL"], messages=messages)
    messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                 {"role": "user", "content": "again"}]
    print("model said:", reply.choices[0].message.content)
pathlib.Path("agent-was-here.txt").write_text(os.environ["AGENT_RL_INSTANCE_ID"])
"""

TWO_CALLS_STDLIB = """
import json, os, pathlib, urllib.request

def chat(messages):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": messages}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["choices"][0]["message"]["content"]

messages = [{"role": "user", "content": pathlib.Path(os.environ["AGENT_RL_TASK_FILE"]).read_text()}]
for _ in range(2):
    content = chat(messages)
    messages += [{"role": "assistant", "content": content}, {"role": "user", "content": "again"}]
    print("model said:", content)
pathlib.Path("agent-was-here.txt").write_text(os.environ["AGENT_RL_INSTANCE_ID"])
"""

SLEEPER = """
import os, pathlib, subprocess, time
child = subprocess.Popen(["sleep", "60"])
pathlib.Path("pids").write_text(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""

FAILING = """
import sys
print("working...")
sys.stderr.write("Traceback: boom, the agent crashed\\n")
sys.exit(3)
"""

CALL_FOREVER = """
import os, time
from openai import OpenAI

client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                max_retries=0, timeout=30)
while True:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    time.sleep(0.1)
"""


async def _episode(harness, endpoint, script: str, **sandbox_kwargs):
    """Runs `script` (as `../agent.py` next to the repo) and returns (result, repo listing)."""
    async with LocalSandbox(**({"isolation": "none"} | sandbox_kwargs)) as sandbox:
        await sandbox.exec(f"mkdir -p {sandbox.workdir} && git init -q {sandbox.workdir}")
        await sandbox.write_file("../agent.py", script)
        result = await harness.run(TASK, sandbox, endpoint)
        listing = await sandbox.exec("ls -a")
        return result, listing.stdout


def _config(**kwargs) -> BlackboxHarnessConfig:
    return BlackboxHarnessConfig(command=[sys.executable, "../agent.py"], **kwargs)


def _alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="needs bubblewrap")

# Inside bubblewrap commands run as `nobody`, which may not read this test's Python (e.g. a
# pyenv under /root), so that agent uses the sandbox's own `python3` and the standard library.
SETUPS = [
    pytest.param("sandbox", {"isolation": "none"}, None, id="in-sandbox-unisolated"),
    pytest.param(
        "sandbox",
        {"isolation": "bubblewrap", "network": "gateway"},
        "python3",
        id="in-bubblewrap-gateway-only",
        marks=needs_bwrap,
    ),
    pytest.param(
        "host", {"isolation": "bubblewrap"}, None, id="beside-bubblewrap", marks=needs_bwrap
    ),
]


@pytest.mark.parametrize(("where", "sandbox_kwargs", "python"), SETUPS)
def test_an_agent_script_talks_to_the_gateway_and_finishes(
    scripted, fns, where, sandbox_kwargs, python
) -> None:
    if python and shutil.which(python, path="/usr/local/bin:/usr/bin:/bin") is None:
        pytest.skip(f"no {python} for the sandbox")
    url, _, _ = scripted
    endpoint = fns["open_session"](url)
    config = BlackboxHarnessConfig(command=[python or sys.executable, "../agent.py"], timeout_s=60)
    script = TWO_CALLS_STDLIB if python else TWO_CALLS
    harness = BlackboxHarness(config, where=where)
    result, listing = asyncio.run(_episode(harness, endpoint, script, **sandbox_kwargs))
    assert result.exit_reason == ExitReason.FINISHED, result.info
    assert result.steps == 2 and result.info["exit_code"] == 0
    assert result.info["stdout_tail"].count("model said:") == 2
    assert "agent-was-here.txt" in listing  # it ran in the repo
    trajectories, calls = fns["record"](url, endpoint)
    assert len(calls) == 2 and len(trajectories) == 1
    # The task file reached the model: the first prompt holds the problem statement.
    assert "Say hello twice." in scripted[1].tokenizer.decode(calls[0].prompt_ids)
    assert tito_violations(trajectories, calls) == []


@pytest.mark.parametrize("where", ["sandbox", "host"])
def test_a_hanging_agent_times_out_and_its_process_tree_is_killed(scripted, fns, where) -> None:
    url, _, _ = scripted
    endpoint = fns["open_session"](url)
    harness = BlackboxHarness(_config(timeout_s=4.0), where=where)

    async def episode():
        async with LocalSandbox(isolation="none") as sandbox:
            await sandbox.exec(f"mkdir -p {sandbox.workdir}")
            await sandbox.write_file("../agent.py", SLEEPER)
            result = await harness.run(TASK, sandbox, endpoint)
            return result, await sandbox.read_file("pids")

    started = time.monotonic()
    result, pids = asyncio.run(episode())
    assert result.exit_reason == ExitReason.TIMEOUT and result.steps == 0
    assert time.monotonic() - started < 15
    assert [_alive(int(pid)) for pid in pids.split()] == [False, False]


def test_a_failing_agent_is_a_harness_error_with_its_stderr(scripted, fns) -> None:
    url, _, _ = scripted
    endpoint = fns["open_session"](url)
    result, _ = asyncio.run(_episode(BlackboxHarness(_config()), endpoint, FAILING))
    assert result.exit_reason == ExitReason.HARNESS_ERROR
    assert result.info["exit_code"] == 3
    assert "boom, the agent crashed" in result.info["stderr_tail"]
    assert "working..." in result.info["stdout_tail"]
    assert "exited with 3" in result.info["last_error"]


def test_an_agent_past_max_model_calls_is_stopped(scripted, fns) -> None:
    url, _, _ = scripted
    endpoint = fns["open_session"](url)
    harness = BlackboxHarness(_config(timeout_s=30, max_model_calls=2))
    started = time.monotonic()
    result, _ = asyncio.run(_episode(harness, endpoint, CALL_FOREVER))
    assert result.exit_reason == ExitReason.MAX_TURNS and result.steps > 2
    assert time.monotonic() - started < 15  # stopped by the cap, not by the 30 s timeout


class _BrokenSandbox:
    """A started sandbox whose transport has died."""

    def __init__(self, inner) -> None:
        self.inner, self.workdir = inner, inner.workdir

    async def exec(self, command, **kwargs):
        raise SandboxError("sandbox process died")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_dead_sandbox_is_a_sandbox_error(scripted, fns) -> None:
    url, _, _ = scripted
    endpoint = fns["open_session"](url)

    async def episode():
        async with LocalSandbox(isolation="none") as sandbox:
            return await BlackboxHarness(_config()).run(TASK, _BrokenSandbox(sandbox), endpoint)

    result = asyncio.run(episode())
    assert result.exit_reason == ExitReason.SANDBOX_ERROR
    assert "sandbox process died" in result.info["last_error"]


def test_an_offline_bubblewrap_sandbox_is_refused_before_running(scripted, fns) -> None:
    url, _, _ = scripted
    endpoint = fns["open_session"](url)
    offline = LocalSandbox(isolation="bubblewrap", network="none")  # never started
    with pytest.raises(ValueError, match="sandbox.network: gateway"):
        asyncio.run(BlackboxHarness(_config()).run(TASK, offline, endpoint))
    with pytest.raises(TypeError, match="LocalSandbox"):
        asyncio.run(BlackboxHarness(_config(), where="host").run(TASK, object(), endpoint))
