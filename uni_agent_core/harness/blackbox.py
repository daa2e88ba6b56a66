"""The black-box harness: run any agent command against a gateway session.

The agent (Claude Code, Codex, OpenCode, a script, ...) is a process that finds the policy
through its environment and acts on the task's repository; every token it makes the model
produce is captured by the gateway, so the harness only starts it, bounds it and reports how it
ended. Where it runs is chosen per harness:

- `where="sandbox"`: inside the sandbox, via `Sandbox.exec`, with the sandbox's isolation. The
  agent must reach the gateway over HTTP: the harness links a bubblewrap `LocalSandbox` with
  `network="gateway"` (its default) to the session's gateway before the agent starts, and the
  agent reaches that gateway and nothing else (`sandbox/gateway_link.py`). `network="none"`
  is refused before anything runs (the agent could reach nothing); `network="host"` and
  `isolation="none"` share the host's whole network.
- `where="host"`: beside the sandbox, as a host process whose working directory is the
  sandbox's repository on the host (a `LocalSandbox`, which exposes its host directory). The
  agent is not isolated; its process group is killed when it ends or times out.

The agent's environment (session variables win over `config.env`):
`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`,
`OPENAI_MODEL` and `AGENT_RL_MODEL` (the endpoint's model name), `AGENT_RL_TASK_FILE` (the
problem statement, written next to the repository: `<workdir>/../.agent-rl/task.md`, outside
the diff) and `AGENT_RL_INSTANCE_ID`. The gateway host is added to `NO_PROXY`.

Exit reasons: exit status 0 is `finished`, non-zero `harness_error`, passing `timeout_s`
`timeout` (the process tree is killed), a sandbox failure `sandbox_error`, and more model
calls than `max_model_calls` `max_turns` (the session is polled while the agent runs and the
agent is stopped once the gateway has served more calls than the cap).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from uni_agent_core.config.harness import BlackboxHarnessConfig
from uni_agent_core.harness.base import Endpoint, HarnessResult
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.sandbox.local import DEFAULT_MAX_OUTPUT_BYTES, MOUNT_POINT
from uni_agent_core.sandbox.process import run_process
from uni_agent_core.types import ExitReason, TaskSpec

logger = logging.getLogger(__name__)

TAIL_CHARS = 4000
"""Characters of the agent's stdout and stderr kept in `HarnessResult.info`."""
CALLS_TIMEOUT_S = 10.0
"""Timeout of one `GET /calls` request to the gateway."""
CALLS_POLL_S = 0.5
"""Interval of the call-count poll that enforces `max_model_calls`."""
AGENT_DIR = PurePosixPath(".agent-rl")
"""The episode's private directory, relative to the parent of the sandbox's `workdir`."""
TASK_FILE = AGENT_DIR / "task.md"
"""The problem statement's file, relative to the parent of the sandbox's `workdir`."""

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True)
class AgentLaunch:
    """How to start the agent process of one episode."""

    command: list[str]
    """Argument vector, run without a shell in the repository."""
    env: dict[str, str]
    """Extra environment (on top of the host's for `where="host"`)."""
    timeout_s: float
    """Deadline on the process; passing it kills its tree and ends with `timeout`."""
    max_model_calls: int | None = None
    """More model calls than this stop the agent and end with `max_turns`."""


@dataclass(frozen=True)
class AgentDir:
    """The episode's private directory next to the repository (outside the diff), as the
    sandbox API addresses it and as the agent process sees it (they differ for
    `where="host"`). It holds `task.md` and the agent's `home/`."""

    in_sandbox: PurePosixPath
    for_process: PurePosixPath

    def sandbox_path(self, relative: str) -> str:
        return str(self.in_sandbox / relative)

    def process_path(self, relative: str) -> str:
        return str(self.for_process / relative)


@dataclass(frozen=True)
class _Finished:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool


async def count_session_calls(endpoint: Endpoint, *, timeout_s: float = CALLS_TIMEOUT_S) -> int:
    """The number of engine calls the gateway has recorded for the endpoint's session.

    Args:
        endpoint: The session (its `/calls` route is next to the OpenAI base URL), with the
            gateway's control key (`/calls` is on the control plane).
        timeout_s: Timeout of the request.

    Raises:
        httpx.HTTPError: The gateway did not answer or refused the request.
        ValueError: The endpoint carries no control key.
    """
    if endpoint.control_key is None:
        raise ValueError("counting a session's calls needs the gateway's control key")
    root = endpoint.openai_base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {endpoint.control_key}"}
    async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as client:
        response = await client.get(root + "/calls", headers=headers)
        response.raise_for_status()
        return len(response.json())


def no_proxy_with(endpoint: Endpoint, current: str | None) -> str:
    """`NO_PROXY` extended with the gateway's host, so no HTTP proxy sits between them."""
    host = urlsplit(endpoint.openai_base_url).hostname or "127.0.0.1"
    entries = [e for e in (current or "").split(",") if e.strip()]
    return ",".join([*entries, *(h for h in (host, "127.0.0.1", "localhost") if h not in entries)])


def host_workdir(sandbox: Sandbox) -> Path:
    """The host path of a local sandbox's `workdir`.

    Raises:
        TypeError: The sandbox does not live on this host (it has no `host_dir`).
    """
    host_dir = getattr(sandbox, "host_dir", None)
    if host_dir is None:
        raise TypeError(
            f"{type(sandbox).__name__} has no host directory; `where='host'` needs a "
            "LocalSandbox (use `where='sandbox'` for other backends)"
        )
    workdir = Path(str(sandbox.workdir))
    if workdir.is_relative_to(host_dir):  # isolation "none": workdir is already a host path
        return workdir
    return Path(host_dir) / "workspace" / PurePosixPath(sandbox.workdir).relative_to(MOUNT_POINT)


class BlackboxHarness:
    """Runs `config.command` against the session, in or beside the sandbox.

    Subclasses that run a particular agent (`harness/claude_code.py`, `harness/codex.py`)
    override `launch`, which writes the agent's own files and says how to start it.

    Args:
        config: The command, its deadline, extra environment and call cap.
        where: `sandbox` runs the command through `Sandbox.exec`; `host` runs it on this host
            in the sandbox's repository (needs a `LocalSandbox`).
    """

    def __init__(
        self, config: BlackboxHarnessConfig, *, where: Literal["sandbox", "host"] = "sandbox"
    ) -> None:
        self.config = config
        self.where = where

    async def launch(
        self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint, agent_dir: AgentDir
    ) -> AgentLaunch:
        """The agent process of this episode: `config.command` with `config.env`.

        Raises:
            SandboxError: writing the agent's files failed (the episode is a `sandbox_error`).
        """
        return AgentLaunch(
            command=list(self.config.command),
            env=dict(self.config.env),
            timeout_s=self.config.timeout_s,
            max_model_calls=self.config.max_model_calls,
        )

    async def run(self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint) -> HarnessResult:
        """Play one episode; never raises for agent or sandbox failures.

        Raises:
            ValueError: `where="sandbox"` with a bubblewrap sandbox of `network: none` while
                the gateway is on loopback (the agent could never reach it).
            TypeError: `where="host"` with a sandbox that is not on this host.
        """
        self._check_reachable(sandbox, endpoint)
        info: dict[str, Any] = {"where": self.where}
        if self.where == "sandbox" and hasattr(sandbox, "connect_gateway"):
            try:
                await sandbox.connect_gateway(endpoint.openai_base_url)
            except SandboxError as exc:  # deliberate boundary: the episode ends, reported
                info["last_error"] = f"sandbox: {exc}"
                return HarnessResult(
                    ExitReason.SANDBOX_ERROR, await self._steps(endpoint, info), info
                )
        workdir_host = host_workdir(sandbox) if self.where == "host" else None
        in_sandbox = PurePosixPath(sandbox.workdir).parent / AGENT_DIR
        for_process = (
            PurePosixPath(workdir_host.parent / AGENT_DIR)
            if workdir_host is not None
            else in_sandbox
        )
        agent_dir = AgentDir(in_sandbox, for_process)
        try:
            await sandbox.write_file(agent_dir.sandbox_path("task.md"), task.problem_statement)
            launch = await self.launch(task, sandbox, endpoint, agent_dir)
        except SandboxError as exc:  # deliberate boundary: the episode ends, reported
            info["last_error"] = f"sandbox: {exc}"
            return HarnessResult(ExitReason.SANDBOX_ERROR, await self._steps(endpoint, info), info)
        env = {**launch.env, **self.environment(task, endpoint, agent_dir.process_path("task.md"))}

        if workdir_host is not None:
            process = self._on_host(launch, env, workdir_host)
        else:
            process = self._in_sandbox(sandbox, launch, env)
        try:
            finished = await self._with_call_cap(process, endpoint, launch.max_model_calls)
        except SandboxError as exc:  # deliberate boundary: the episode ends, reported
            info["last_error"] = f"sandbox: {exc}"
            return HarnessResult(ExitReason.SANDBOX_ERROR, await self._steps(endpoint, info), info)
        except OSError as exc:  # the program could not be started on the host
            info["last_error"] = f"could not start {launch.command[0]!r}: {exc}"
            return HarnessResult(ExitReason.HARNESS_ERROR, await self._steps(endpoint, info), info)

        steps = await self._steps(endpoint, info)
        cap = launch.max_model_calls
        if finished is None or (cap is not None and steps > cap):
            info["last_error"] = f"the agent made more than max_model_calls={cap} model calls"
            return HarnessResult(ExitReason.MAX_TURNS, steps, info)
        info |= {
            "exit_code": finished.exit_code,
            "stdout_tail": finished.stdout[-TAIL_CHARS:],
            "stderr_tail": finished.stderr[-TAIL_CHARS:],
        }
        if finished.timed_out:
            info["last_error"] = f"the agent ran past timeout_s={launch.timeout_s:g}"
            return HarnessResult(ExitReason.TIMEOUT, steps, info)
        ended = self.agent_ending(finished.exit_code, finished.stdout)
        if ended is not None:
            info["last_error"] = ended[1]
            return HarnessResult(ended[0], steps, info)
        if finished.exit_code != 0:
            last = finished.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
            info["last_error"] = f"the agent exited with {finished.exit_code}: {last[0][:500]}"
            return HarnessResult(ExitReason.HARNESS_ERROR, steps, info)
        return HarnessResult(ExitReason.FINISHED, steps, info)

    def agent_ending(self, exit_code: int, stdout: str) -> tuple[ExitReason, str] | None:
        """How the agent says it ended, where that is more than its exit status (an agent that
        stopped at its own turn limit, or on a reply cut by the token limit): the exit reason
        and why; None leaves it to the exit status. The plain black-box harness knows no agent's
        output."""
        return None

    def environment(self, task: TaskSpec, endpoint: Endpoint, task_file: str) -> dict[str, str]:
        """The session's variables (they win over the launch's own environment)."""
        return {
            "OPENAI_BASE_URL": endpoint.openai_base_url,
            "OPENAI_API_KEY": endpoint.api_key,
            "ANTHROPIC_BASE_URL": endpoint.anthropic_base_url,
            "ANTHROPIC_API_KEY": endpoint.api_key,
            "OPENAI_MODEL": endpoint.model,
            "AGENT_RL_MODEL": endpoint.model,
            "AGENT_RL_TASK_FILE": task_file,
            "AGENT_RL_INSTANCE_ID": task.instance_id,
            "NO_PROXY": no_proxy_with(endpoint, self._inherited("NO_PROXY")),
            "no_proxy": no_proxy_with(endpoint, self._inherited("no_proxy")),
        }

    def _inherited(self, name: str) -> str | None:
        return self.config.env.get(name, os.environ.get(name) if self.where == "host" else None)

    def _check_reachable(self, sandbox: Sandbox, endpoint: Endpoint) -> None:
        host = urlsplit(endpoint.openai_base_url).hostname or ""
        loopback = host in _LOOPBACK_HOSTS or host.startswith("127.")
        offline = (
            getattr(sandbox, "isolation", None) == "bubblewrap"
            and getattr(sandbox, "network", "host") == "none"
        )
        if self.where == "sandbox" and offline and loopback:
            raise ValueError(
                f"the gateway is on this host's loopback ({host}) but the bubblewrap sandbox "
                "has `network: none`, so the agent cannot reach it: set `sandbox.network: "
                "gateway` (the gateway alone) or run the agent with where='host'"
            )

    async def _in_sandbox(
        self, sandbox: Sandbox, launch: AgentLaunch, env: dict[str, str]
    ) -> _Finished:
        result = await sandbox.exec(shlex.join(launch.command), timeout=launch.timeout_s, env=env)
        return _Finished(result.exit_code, result.stdout, result.stderr, result.timed_out)

    async def _on_host(self, launch: AgentLaunch, env: dict[str, str], cwd: Path) -> _Finished:
        # The agent's own children are in its process group, which run_process kills on every
        # exit path (normal end, timeout, cancellation).
        finished = await run_process(
            launch.command,
            env={**os.environ, **env},
            cwd=cwd,
            timeout_s=launch.timeout_s,
            max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES,
            on_start=lambda _: None,
            on_end=lambda _: None,
        )
        return _Finished(finished.returncode, finished.stdout, finished.stderr, finished.timed_out)

    async def _with_call_cap(
        self, process: Coroutine[Any, Any, _Finished], endpoint: Endpoint, cap: int | None
    ) -> _Finished | None:
        """Awaits the agent; None when it was stopped for passing `cap` model calls."""
        if cap is not None and endpoint.control_key is None:
            process.close()
            raise ValueError("max_model_calls needs an endpoint with the gateway's control key")
        agent = asyncio.ensure_future(process)
        if cap is None:
            return await agent
        watcher = asyncio.ensure_future(_wait_for_calls(endpoint, cap + 1))
        try:
            done, _ = await asyncio.wait({agent, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for child in (agent, watcher):
                child.cancel()
            # Only the children's own cancellations are gathered here; ours propagates.
            await asyncio.gather(agent, watcher, return_exceptions=True)
        return agent.result() if agent in done else None

    async def _steps(self, endpoint: Endpoint, info: dict[str, Any]) -> int:
        try:
            return await count_session_calls(endpoint)
        except (httpx.HTTPError, ValueError) as exc:  # deliberate boundary: informational
            info["calls_error"] = f"{type(exc).__name__}: {exc}"
            logger.warning("could not count the session's model calls: %s", exc)
            return 0


async def _wait_for_calls(endpoint: Endpoint, count: int) -> None:
    """Returns once the session has at least `count` recorded calls (polling the gateway)."""
    failures = 0
    while True:
        try:
            if await count_session_calls(endpoint) >= count:
                return
        except httpx.HTTPError as exc:  # deliberate boundary: a missed poll, counted
            failures += 1
            logger.warning("call-count poll %d failed: %s", failures, exc)
        await asyncio.sleep(CALLS_POLL_S)
