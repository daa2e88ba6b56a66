"""mini-swe-agent (the `mini-swe-agent` package) as a harness, its actions run in the sandbox.

mini-swe-agent runs unmodified in a child process (`python -m
uni_agent_core.harness.mini_swe_agent SPEC`, the runner at the end of this module): its
`DefaultAgent` with a LiteLLM model pointed at the session (`openai/<model>`, `api_base` = the
session's OpenAI base URL), so every call goes through the gateway and is recorded in tokens.
Its environment is a bridge: each bash action is sent over a Unix socket to this process, which
runs it with `Sandbox.exec` and sends back the output. The agent thus works in any sandbox
backend with the sandbox's isolation, while its model calls leave from the host.

The child gets no network other than the gateway's: LiteLLM's cost map is the bundled one
(`LITELLM_LOCAL_MODEL_COST_MAP`, `LITELLM_OFFLINE_MODE`), mini-swe-agent's global config
directory is a private scratch directory, cost tracking is off, and a failed model call is not
retried (`MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1`, LiteLLM's and the OpenAI client's retries 0:
the gateway's errors are not transient, and a retry would hide an engine error).

Exit reasons, from mini-swe-agent's exit status: `Submitted` (the model ran
`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) is `submitted`; `LimitsExceeded` (`max_turns`
model calls made) `max_turns`; `RepeatedFormatError` (`agent.max_consecutive_format_errors`
replies in a row without exactly one action) `format_error_budget`; `TimeExceeded` and
passing `wall_clock_s` (the child's process group is killed) `timeout`; a failed model call
`engine_error` (`max_tokens` when LiteLLM reports the context window exceeded); a failed
sandbox `sandbox_error`; a crash of the child `harness_error`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import platform
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml

from uni_agent_core.config.harness import MiniSweAgentHarnessConfig
from uni_agent_core.errors import AgentRLError
from uni_agent_core.harness.base import Endpoint, HarnessResult
from uni_agent_core.harness.blackbox import TAIL_CHARS, count_session_calls, no_proxy_with
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.sandbox.local import DEFAULT_MAX_OUTPUT_BYTES
from uni_agent_core.sandbox.process import Finished, run_process
from uni_agent_core.types import ExitReason, TaskSpec

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).parent / "assets" / "mini_swe_agent.yaml"
"""agent-rl's mini-swe-agent YAML (text-based actions), used when `config_path` is None."""
RUNNER_MODULE = "uni_agent_core.harness.mini_swe_agent"
MODEL_CLASSES = ("litellm_textbased", "litellm")
"""mini-swe-agent model classes the harness can drive (text actions or native tool calls)."""

_BRIDGE_LINE_LIMIT = 64 << 20
_BRIDGE_GRACE_S = 60.0
"""Time the runner waits for a command's reply beyond the command's own timeout."""

EXIT_STATUSES: dict[str, ExitReason] = {
    "Submitted": ExitReason.SUBMITTED,
    "LimitsExceeded": ExitReason.MAX_TURNS,
    "TimeExceeded": ExitReason.TIMEOUT,
    "RepeatedFormatError": ExitReason.FORMAT_ERROR_BUDGET,
    "sandbox_error": ExitReason.SANDBOX_ERROR,
    "engine_error": ExitReason.ENGINE_ERROR,
    "max_tokens": ExitReason.MAX_TOKENS,
}
"""The runner's exit status -> exit reason; anything else is `harness_error`."""


def load_mini_config(path: Path | None) -> dict[str, Any]:
    """Reads and checks a mini-swe-agent YAML for this harness.

    Args:
        path: The YAML; None is `DEFAULT_CONFIG`.

    Raises:
        ValueError: A section or class the harness cannot honour; the message names the key.
    """
    path = path or DEFAULT_CONFIG
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a mini-swe-agent config must be a mapping")
    unknown = set(data) - {"agent", "environment", "model"}
    if unknown:
        raise ValueError(
            f"{path}: unsupported sections {sorted(unknown)}; allowed: agent, environment, model"
        )
    agent, env, model = (data.setdefault(k, {}) for k in ("agent", "environment", "model"))
    problems = []
    for key in ("system_template", "instance_template"):
        if not agent.get(key):
            problems.append(f"agent.{key} is required")
    if agent.pop("agent_class", "default") != "default":
        problems.append("agent.agent_class: only mini-swe-agent's DefaultAgent runs unattended")
    if env.pop("environment_class", "local") != "local":
        problems.append(
            "environment.environment_class: commands always run in the task's sandbox; remove it"
        )
    extra_env = set(env) - {"env", "timeout", "cwd"}
    if extra_env:
        problems.append(
            f"environment: unsupported keys {sorted(extra_env)} (allowed: env, timeout)"
        )
    if model.setdefault("model_class", MODEL_CLASSES[0]) not in MODEL_CLASSES:
        problems.append(f"model.model_class must be one of {list(MODEL_CLASSES)}")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return data


class MiniSweAgentHarness:
    """Runs mini-swe-agent against the session, its actions executed in the sandbox.

    Args:
        config: The mini-swe-agent YAML (None: the bundled default), step limit and deadline.
    """

    def __init__(self, config: MiniSweAgentHarnessConfig) -> None:
        self.config = config
        self.mini_config = load_mini_config(config.config_path)

    async def run(self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint) -> HarnessResult:
        """Play one episode; never raises for model, agent or sandbox failures."""
        bridge = _Bridge(sandbox)
        with tempfile.TemporaryDirectory(prefix="agent-rl-mini-") as scratch_name:
            scratch = Path(scratch_name)
            bridge_path = str(scratch / "bridge.sock")
            spec = {
                "config": self.runner_config(sandbox, endpoint),
                "task": task.problem_statement,
                "bridge": bridge_path,
                "result": str(scratch / "result.json"),
            }
            (scratch / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
            server = await asyncio.start_unix_server(
                bridge.serve, path=bridge_path, limit=_BRIDGE_LINE_LIMIT
            )
            try:
                finished = await run_process(
                    [sys.executable, "-m", RUNNER_MODULE, str(scratch / "spec.json")],
                    env=self.runner_environment(endpoint, scratch),
                    cwd=scratch,
                    timeout_s=self.config.wall_clock_s,
                    max_output_bytes=DEFAULT_MAX_OUTPUT_BYTES,
                    on_start=lambda _: None,
                    on_end=lambda _: None,
                )
            finally:
                server.close()
                await bridge.stop()
                await server.wait_closed()
            result_file = scratch / "result.json"
            outcome = json.loads(result_file.read_text()) if result_file.exists() else None

        info: dict[str, Any] = {
            "exit_code": finished.returncode,
            "commands": bridge.commands,
            "stderr_tail": finished.stderr[-TAIL_CHARS:],
        }
        if outcome is not None:
            info |= {k: outcome[k] for k in ("exit_status", "model_calls", "format_errors")}
        try:
            steps = await count_session_calls(endpoint)
        except (httpx.HTTPError, ValueError) as exc:  # deliberate boundary: the agent's count
            info["calls_error"] = f"{type(exc).__name__}: {exc}"
            steps = outcome["model_calls"] if outcome else 0
        return HarnessResult(self._exit_reason(finished, outcome, bridge, info), steps, info)

    def runner_config(self, sandbox: Sandbox, endpoint: Endpoint) -> dict[str, Any]:
        """The mini-swe-agent config of one episode: the YAML plus the session and budgets."""
        config = copy.deepcopy(self.mini_config)
        config["agent"] |= {"step_limit": self.config.max_turns, "cost_limit": 0.0}
        config["agent"]["output_path"] = None
        model = config["model"]
        model |= {"model_name": f"openai/{endpoint.model}", "cost_tracking": "ignore_errors"}
        model["model_kwargs"] = {
            **model.get("model_kwargs", {}),
            "api_base": endpoint.openai_base_url,
            "api_key": endpoint.api_key,
            "max_retries": 0,  # the OpenAI client's own retries would hide engine errors
            "num_retries": 0,
        }
        config["environment"]["cwd"] = str(sandbox.workdir)
        return config

    def runner_environment(self, endpoint: Endpoint, scratch: Path) -> dict[str, str]:
        """The child's environment: the host's, with telemetry, retries and lookups off."""
        return {
            **os.environ,
            "MSWEA_SILENT_STARTUP": "1",
            "MSWEA_GLOBAL_CONFIG_DIR": str(scratch),
            "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1",
            "MSWEA_GLOBAL_COST_LIMIT": "0",
            "MSWEA_GLOBAL_CALL_LIMIT": "0",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "NO_PROXY": no_proxy_with(endpoint, os.environ.get("NO_PROXY")),
            "no_proxy": no_proxy_with(endpoint, os.environ.get("no_proxy")),
        }

    def _exit_reason(
        self,
        finished: Finished,
        outcome: dict[str, Any] | None,
        bridge: _Bridge,
        info: dict[str, Any],
    ) -> ExitReason:
        if finished.timed_out:
            info["last_error"] = (
                f"mini-swe-agent ran past wall_clock_s={self.config.wall_clock_s:g}"
            )
            return ExitReason.TIMEOUT
        if bridge.sandbox_error is not None:
            info["last_error"] = f"sandbox: {bridge.sandbox_error}"
            return ExitReason.SANDBOX_ERROR
        if outcome is None:
            last = finished.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
            info["last_error"] = f"mini-swe-agent exited with {finished.returncode}: {last[0]}"
            return ExitReason.HARNESS_ERROR
        if outcome["error"]:
            info["last_error"] = outcome["error"]
        reason = EXIT_STATUSES.get(outcome["exit_status"], ExitReason.HARNESS_ERROR)
        if reason == ExitReason.HARNESS_ERROR and not outcome["error"]:
            info["last_error"] = f"unknown mini-swe-agent exit status {outcome['exit_status']!r}"
        return reason


class _Bridge:
    """Serves the runner's actions with `Sandbox.exec` (one JSON line each way per action)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.commands = 0
        self.sandbox_error: str | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while line := await reader.readline():
                reply = await self._execute(json.loads(line))
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ValueError, ConnectionError) as exc:  # the runner died or sent garbage
            logger.warning("mini-swe-agent bridge closed: %s", exc)
        finally:
            writer.close()
            self._handlers.discard(handler)

    async def _execute(self, request: dict[str, Any]) -> dict[str, Any]:
        self.commands += 1
        try:
            result = await self.sandbox.exec(
                str(request["command"]),
                timeout=float(request["timeout"]),
                cwd=request.get("cwd") or None,
                env=request.get("env") or None,
            )
        except SandboxError as exc:  # deliberate boundary: the episode ends, reported
            self.sandbox_error = f"{type(exc).__name__}: {exc}"
            return {"error": self.sandbox_error}
        return {
            "exit_code": result.exit_code,
            "output": result.stdout + result.stderr,
            "timed_out": result.timed_out,
        }

    async def stop(self) -> None:
        """Cancels actions still running (the runner is gone) and waits for them."""
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()
        # Only the handlers' own cancellations are gathered here; ours propagates.
        await asyncio.gather(*handlers, return_exceptions=True)


# -- the runner (the child process; imports mini-swe-agent) ----------------------------------


class BridgeError(AgentRLError, RuntimeError):
    """The sandbox failed while running an action (raised in the runner)."""


class _BridgeEnvironment:
    """mini-swe-agent's `Environment` whose actions run in the harness's sandbox."""

    def __init__(
        self, path: str, *, cwd: str = "", env: dict[str, str] | None = None, timeout: int = 60
    ) -> None:
        self.config: dict[str, Any] = {"cwd": cwd, "env": dict(env or {}), "timeout": timeout}
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(path)
        self._stream = self._socket.makefile("rwb")

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
        from minisweagent.exceptions import Submitted

        limit = timeout or self.config["timeout"]
        request = {
            "command": action.get("command", ""),
            "cwd": cwd or self.config["cwd"],
            "env": self.config["env"],
            "timeout": limit,
        }
        self._socket.settimeout(limit + _BRIDGE_GRACE_S)
        self._stream.write(json.dumps(request).encode() + b"\n")
        self._stream.flush()
        line = self._stream.readline()
        if not line:
            raise BridgeError("the harness closed the sandbox bridge")
        reply = json.loads(line)
        if "error" in reply:
            raise BridgeError(reply["error"])
        output = {"output": reply["output"], "returncode": reply["exit_code"], "exception_info": ""}
        if reply["timed_out"]:
            output |= {
                "returncode": -1,
                "exception_info": f"The command timed out after {limit} s and was killed.",
            }
        # mini-swe-agent's submission convention (as in its LocalEnvironment).
        lines = output["output"].lstrip().splitlines(keepends=True)
        marker = bool(lines) and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        if marker and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config, **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self.config, "environment_type": "sandbox"}}}

    def close(self) -> None:
        self._stream.close()
        self._socket.close()


def _run_agent(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs mini-swe-agent's DefaultAgent on the task; returns its outcome."""
    import litellm
    import openai
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

    litellm.suppress_debug_info = True
    config = spec["config"]
    model_config = dict(config["model"])
    classes = {"litellm": LitellmModel, "litellm_textbased": LitellmTextbasedModel}
    model = classes[model_config.pop("model_class")](**model_config)
    environment = _BridgeEnvironment(spec["bridge"], **config["environment"])
    agent = DefaultAgent(model, environment, **config["agent"])
    error = ""
    try:
        status = agent.run(spec["task"]).get("exit_status", "")
    except BridgeError as exc:
        status, error = "sandbox_error", f"sandbox: {exc}"
    except litellm.exceptions.ContextWindowExceededError as exc:
        status, error = "max_tokens", f"engine: {exc}"
    except openai.APIError as exc:
        status, error = "engine_error", f"engine: {type(exc).__name__}: {exc}"
    finally:
        environment.close()
    format_errors = sum(
        m.get("extra", {}).get("interrupt_type") == "FormatError" for m in agent.messages
    )
    return {
        "exit_status": status,
        "error": error[:2000],
        "model_calls": agent.n_calls,
        "format_errors": format_errors,
    }


def _runner_main(argv: list[str]) -> int:
    """`python -m uni_agent_core.harness.mini_swe_agent SPEC.json`: one episode."""
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    outcome = _run_agent(spec)
    Path(spec["result"]).write_text(json.dumps(outcome), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(_runner_main(sys.argv[1:]))
