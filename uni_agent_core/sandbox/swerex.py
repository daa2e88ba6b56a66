"""`SwerexSandbox`: the `Sandbox` contract over a SWE-ReX deployment and its runtime.

The section's `deployment` picks how the runtime is reached: `remote` (a `swerex-remote` server
somebody else runs, at `host`), `local` (swe-rex's in-process runtime on this host: no
isolation, trusted tasks only), `docker` or `modal` (swe-rex starts a container with the runtime
server in it and talks to it over HTTP).

Commands go through the runtime's `execute` (a subprocess per command, not a stateful session)
under the in-sandbox wrapper shared with the docker backend (`docker.timed_shell_argv`): GNU
`timeout -s KILL` in a process group of its own, the group killed when the command ends, so a
timeout kills the whole tree and keeps the output so far. swe-rex's own `Command.timeout` (a
little longer) is the backstop; when it fires the result is `timed_out` without output. Every
runtime call also has a host-side timeout, since swe-rex's HTTP client has none of its own.

A swe-rex server runs one `execute` at a time and blocks while it does, so a command cannot be
killed from outside while it runs; the wrapper's in-sandbox timeout is what bounds it, and it is
clamped to the sandbox's remaining wall-clock time. The in-process runtime blocks its event loop
the same way, so its calls run in a worker thread.

Memory, process and network limits are the deployment's: a remote runtime's host sets them;
`docker` gets `--memory/--pids-limit/--cpus` but keeps a network (swe-rex reaches its server
through a published port); `modal` gets hard CPU and memory limits. Use the `docker` or `modal`
backends for network-less sandboxes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import io
import logging
import os
import posixpath
import shlex
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.remote import RemoteDeployment
from swerex.exceptions import CommandTimeoutError, SwerexException
from swerex.runtime.abstract import (
    Command,
    CommandResponse,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)
from swerex.runtime.local import LocalRuntime

from uni_agent_core.config.sandbox import SwerexSandboxConfig
from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.sandbox.lifecycle import SandboxLifecycle, probe_workdir, settings_for
from uni_agent_core.sandbox.timed_shell import (
    DEFAULT_MAX_OUTPUT_BYTES,
    EXEC_GRACE_S,
    TIMEOUT_EXIT_CODE,
    decode_capped,
    finish_exec,
    new_pidfile,
    sandbox_path,
    timed_shell_argv,
)
from uni_agent_core.sandbox.workspace_files import copy_path

logger = logging.getLogger(__name__)

T = TypeVar("T")

LOCAL_RUNTIME_HOST = "http://127.0.0.1"
"""The `remote` runtime's host when no recipe section names one."""
_ALIVE_POLL_S = 0.1
_IN_PROCESS_THREADS = 64
"""Commands of in-process (`local`) swe-rex sandboxes that can run at once."""


class SwerexSandbox(SandboxLifecycle):
    """A swe-rex runtime as a sandbox: `async with SwerexSandbox(deployment=..., ...) as sb:`.

    Needs bash and GNU coreutils where the runtime runs.
    """

    config: SwerexSandboxConfig

    def __init__(
        self,
        config: SwerexSandboxConfig | None = None,
        *,
        auth_token: str | None = None,
        workdir: str = "/testbed",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        diff_base: str = "HEAD",
        deployment_factory: Callable[[], AbstractDeployment] | None = None,
        **settings: Any,
    ) -> None:
        """Configures the sandbox; nothing is contacted or created until `start()`.

        Args:
            config: The recipe's swerex section; None uses its defaults with `host`
                `http://127.0.0.1` (a runtime on this machine).
            auth_token: Token of a `remote` runtime (`X-API-Key`); None reads the variable
                `config.auth_token_env` names, and sends none when it names none.
            workdir: The repository where the runtime runs (created if missing).
            env: Extra environment of every command (per-call `env` overrides it).
            max_output_bytes: Bytes of stdout and of stderr kept per command.
            diff_base: The commit `diff()` compares the working tree with.
            deployment_factory: Makes the swe-rex deployment instead of `config.deployment`
                (tests, or deployments this class does not know).
            **settings: Fields of `SwerexSandboxConfig` set over `config` (`deployment=`,
                `image=`, `port=`, ...).

        Raises:
            TypeError: A setting is not a field of the swerex section.
            ValueError: A setting is out of bounds, `workdir` is relative, a `docker`/`modal`
                deployment has no image, or `auth_token_env` names a variable that is not set.
        """
        if config is None:
            settings = {"host": LOCAL_RUNTIME_HOST} | settings
        self.config = settings_for(SwerexSandboxConfig, config, settings, owner="SwerexSandbox")
        deployment = self.config.deployment
        if deployment in ("docker", "modal") and not (self.config.image or deployment_factory):
            raise ValueError(f"a swe-rex {deployment} deployment needs an image")
        self._auth_token = auth_token if auth_token is not None else self._token_from_env()
        self._factory = deployment_factory or self._make_deployment
        self._deployment: AbstractDeployment | None = None
        self._in_process = False
        self._last_alive_message = ""
        self._init_lifecycle(
            workdir=workdir, env=env, max_output_bytes=max_output_bytes, diff_base=diff_base
        )
        self.label = "swe-rex sandbox"
        self.torn_down = "stopped with its deployment"

    def _token_from_env(self) -> str:
        name = self.config.auth_token_env
        if name is None:
            return ""
        if name not in os.environ:
            raise ValueError(
                f"sandbox.auth_token_env names ${name}, which is not set; export the runtime's "
                "token there or set auth_token_env: null"
            )
        return os.environ[name]

    def _make_deployment(self) -> AbstractDeployment:
        """The swe-rex deployment for `deployment` (imported lazily: docker/modal are heavy)."""
        if self.config.deployment == "local":
            from swerex.deployment.local import LocalDeployment

            return LocalDeployment()
        if self.config.deployment == "remote":
            return _RemoteDeployment(
                host=self.config.host,
                port=self.config.port,
                auth_token=self._auth_token,
                timeout=self.config.runtime_timeout_s,
            )
        if self.config.deployment == "docker":
            from swerex.deployment.docker import DockerDeployment

            caps = [f"--memory={self.config.memory_mb}m", f"--memory-swap={self.config.memory_mb}m"]
            caps += [f"--pids-limit={self.config.max_processes}", f"--cpus={self.config.cpus:g}"]
            return DockerDeployment(
                image=self.config.image, docker_args=caps, startup_timeout=self.startup_timeout_s
            )
        if self.config.deployment == "modal":
            from swerex.deployment.modal import ModalDeployment

            return ModalDeployment(
                image=self.config.image or "",
                startup_timeout=self.startup_timeout_s,
                runtime_timeout=self.config.runtime_timeout_s,
                deployment_timeout=self.wall_clock_s,
                modal_sandbox_kwargs={
                    "cpu": (self.config.cpus, self.config.cpus),
                    "memory": (self.config.memory_mb, self.config.memory_mb),
                },
            )
        raise ValueError(f"unknown swe-rex deployment {self.config.deployment!r}")

    async def _start(self) -> None:
        self._arm_deadline()
        # Building some deployments already talks to their service (modal looks up its app).
        self._deployment = await asyncio.to_thread(self._factory)
        await self._deployment.start()
        runtime = self._deployment.runtime
        self._in_process = isinstance(runtime, LocalRuntime)
        while not (alive := await runtime.is_alive(timeout=self.config.runtime_timeout_s)):
            self._last_alive_message = alive.message
            await asyncio.sleep(_ALIVE_POLL_S)
        await probe_workdir(self._exec, self.workdir, "the swe-rex runtime")

    async def _abort_start(self) -> None:
        await self._close_quietly()

    def _start_timeout_message(self) -> str:
        last = self._last_alive_message.strip().splitlines()
        return (
            f"swe-rex {self.config.deployment} runtime did not start within "
            f"{self.startup_timeout_s:g} s" + (f"; its last answer: {last[0]}" if last else "")
        )

    def _start_error(self, error: Exception) -> SandboxError:
        # swe-rex, docker and modal raise their own types; the pool retries SandboxError.
        return SandboxError(f"swe-rex {self.config.deployment} deployment failed to start: {error}")

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs `command` with bash through the runtime's `execute`.

        Args:
            command: A bash script.
            timeout: Seconds until the command's whole process group is killed (exit 124,
                `timed_out`); None uses `exec_timeout_s`.
            cwd: Working directory (relative paths are relative to `workdir`).
            env: Extra environment variables of this command.

        Raises:
            SandboxDeadlineError: The sandbox's deadline passed (or passed while it ran).
            SandboxError: The sandbox is not started or closed, or the runtime failed.
        """
        self._check_usable()
        return await self._exec(command, timeout=timeout, cwd=cwd, env=env)

    async def _exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        limit = self.exec_timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be > 0, got {limit}")
        remaining = self._deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            self._expire()
            raise self._deadline_error()
        bound = min(limit, remaining)
        argv = timed_shell_argv(
            command,
            limit_s=bound,
            cwd=sandbox_path(self.workdir, cwd or "."),
            env={**self._extra_env, **(env or {})},
            pidfile=new_pidfile(),
        )
        request = Command(command=argv, shell=False, timeout=bound + EXEC_GRACE_S)
        runtime = self._runtime()
        began = time.monotonic()
        response: CommandResponse | None = None
        try:
            response = await self._call(
                runtime.execute, request, bound + EXEC_GRACE_S + self.config.runtime_timeout_s
            )
        except CommandTimeoutError:
            pass  # swe-rex's backstop fired; handled as a timeout below
        except TimeoutError as e:
            raise SandboxError(
                f"the swe-rex runtime did not answer within "
                f"{bound + EXEC_GRACE_S + self.config.runtime_timeout_s:g} s"
            ) from e
        except Exception as e:
            raise SandboxError(f"swe-rex execute failed: {e}") from e
        if self._closed:
            raise SandboxError("the sandbox was closed while the command ran")
        if self._expired:
            raise self._deadline_error()
        if response is None:
            result = ExecResult(TIMEOUT_EXIT_CODE, "", "", timed_out=True)
        elif response.exit_code is None:
            raise SandboxError(f"swe-rex returned no exit code: {response.stderr.strip()}")
        else:
            result = finish_exec(
                response.exit_code,
                decode_capped(response.stdout.encode(), self.max_output_bytes),
                decode_capped(response.stderr.encode(), self.max_output_bytes),
                elapsed_s=time.monotonic() - began,
                limit_s=bound,
            )
        if result.timed_out and remaining <= limit:
            self._expire()
            raise self._deadline_error()
        return result

    async def read_file(self, path: str) -> str:
        """The text of a file (undecodable bytes become U+FFFD).

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError: As the runtime reports them.
        """
        self._check_usable()
        request = ReadFileRequest(
            path=sandbox_path(self.workdir, path), encoding="utf-8", errors="replace"
        )
        with _transport_errors("read_file"):
            response = await self._call(
                self._runtime().read_file, request, self.config.runtime_timeout_s
            )
        return response.content

    async def write_file(self, path: str, content: str) -> None:
        """Writes a file, creating its parent directories."""
        self._check_usable()
        request = WriteFileRequest(path=sandbox_path(self.workdir, path), content=content)
        with _transport_errors("write_file"):
            await self._call(self._runtime().write_file, request, self.config.runtime_timeout_s)

    async def upload(self, local_path: str, sandbox_path_: str) -> None:
        """Copies a host file or directory to the runtime (swe-rex `upload`; a directory is
        sent as a zip). The in-process runtime refuses a directory whose target exists."""
        self._check_usable()
        source = Path(local_path).resolve()
        if not source.exists():
            raise FileNotFoundError(f"no such host file or directory: {local_path}")
        target = sandbox_path(self.workdir, sandbox_path_)
        made = await self.exec(f"mkdir -p -- {shlex.quote(posixpath.dirname(target))}")
        if not made.ok:
            raise SandboxError(f"cannot create the parent of {target}: {made.stderr.strip()}")
        request = UploadRequest(source_path=str(source), target_path=target)
        with _transport_errors("upload"):
            await self._call(self._runtime().upload, request, self.exec_timeout_s)

    async def download(self, sandbox_path_: str, local_path: str) -> None:
        """Copies a file or directory out to the host, merged into `local_path` as
        `LocalSandbox` does (swe-rex has no download: it travels as a base64 tar)."""
        self._check_usable()
        source = sandbox_path(self.workdir, sandbox_path_)
        parent, name = posixpath.split(source)
        packed = await self.exec(
            f"tar -cf - -C {shlex.quote(parent or '/')} -- {shlex.quote(name)} | base64 -w0; "
            "exit ${PIPESTATUS[0]}"
        )
        if not packed.ok:
            if "No such file" in packed.stderr:
                raise FileNotFoundError(f"no such file in the sandbox: {source}")
            raise SandboxError(f"packing {source} failed: {packed.stderr.strip()}")
        if "[output truncated" in packed.stdout:  # base64 never contains "["
            raise SandboxError(
                f"{source} is larger than max_output_bytes ({self.max_output_bytes}) as a "
                "base64 tar; download its parts separately"
            )
        data = base64.b64decode(packed.stdout)

        def unpack() -> None:
            with tempfile.TemporaryDirectory(prefix="agent-rl-download-") as scratch:
                with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                    archive.extractall(scratch, filter="data")
                copy_path(Path(scratch) / name, Path(local_path))

        await asyncio.to_thread(unpack)

    def _holds_resource(self) -> bool:
        return self._deployment is not None

    async def _teardown(self) -> None:
        """Stop the deployment: remove a docker/modal container, close a runtime."""
        deployment = self._deployment
        assert deployment is not None
        # swe-rex's ModalDeployment.stop only terminates sandboxes that already exited.
        modal_sandbox = (
            getattr(deployment, "_sandbox", None) if self.config.deployment == "modal" else None
        )
        try:
            async with asyncio.timeout(self.config.runtime_timeout_s):
                await deployment.stop()
                if modal_sandbox is not None:
                    await modal_sandbox.terminate.aio()
        except Exception as e:
            raise SandboxError(
                f"stopping the swe-rex {self.config.deployment} deployment failed: {e}"
            ) from e

    async def _call(
        self, method: Callable[[Any], Awaitable[T]], request: Any, timeout_s: float
    ) -> T:
        """Calls a runtime method within `timeout_s`; the in-process runtime blocks its event
        loop while it works, so it gets a thread (and a loop) of its own."""
        work: Awaitable[T] = (
            asyncio.get_running_loop().run_in_executor(
                _in_process_executor(), _run_coroutine, method, request
            )
            if self._in_process
            else method(request)
        )
        async with asyncio.timeout(timeout_s):
            return await work

    def _runtime(self) -> Any:
        assert self._deployment is not None
        return self._deployment.runtime


class _RemoteDeployment(RemoteDeployment):
    """swe-rex's `RemoteDeployment` with an idempotent `stop()`: every deployment's `__del__`
    calls `stop()` again, which the original cannot do twice (a "never retrieved" task error)."""

    async def stop(self) -> None:
        if self._runtime is not None:
            await super().stop()


@functools.cache
def _in_process_executor() -> ThreadPoolExecutor:
    """Threads for in-process runtime calls, apart from asyncio's default executor, which
    long-running commands would otherwise starve (it also serves every `to_thread`)."""
    return ThreadPoolExecutor(max_workers=_IN_PROCESS_THREADS, thread_name_prefix="swerex-local")


def _run_coroutine(method: Callable[[Any], Awaitable[T]], request: Any) -> T:
    async def call() -> T:
        return await method(request)

    return asyncio.run(call())


@contextlib.contextmanager
def _transport_errors(what: str) -> Iterator[None]:
    """Turns runtime and transport failures into `SandboxError`; file errors pass through."""
    try:
        yield
    except TimeoutError as e:
        raise SandboxError(f"swe-rex {what} did not answer in time") from e
    except (aiohttp.ClientError, SwerexException) as e:
        raise SandboxError(f"swe-rex {what} failed: {e}") from e
