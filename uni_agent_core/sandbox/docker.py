"""`DockerSandbox`: one container per rollout, driven through the `docker` CLI.

The container is started detached with its caps (`--network none` unless `network: host`,
`--memory` with swap off, `--pids-limit`, `--cpus`) and `sleep <wall_clock_s>` as its only
process, so it stops by itself at the deadline even if this process dies (`--rm` then removes
it). A host timer removes it at the same deadline; `close()` removes it on every path with
`docker rm -f`.

Commands do not rely on the CLI for their timeout (killing a `docker exec` client leaves its
process running in the container): they run under the in-sandbox wrapper of `timed_shell`.
The CLI is reached through a `CommandRunner` (`docker_cli`), so tests inject a fake.

`network: gateway` (a local daemon only): the container has no network, and the host end of a
`GatewayLink` (a Unix socket in a host directory, piped to the gateway) is bind-mounted at
`/run/agent-rl/gateway.sock`; `connect_gateway(url)` starts the image's own `socat` listening on
`127.0.0.1:<the gateway's port>` in the container, where it stays until the container ends.
"""

from __future__ import annotations

import asyncio
import logging
import math
import posixpath
import shlex
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from uni_agent_core.config.sandbox import DockerSandboxConfig
from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.sandbox.docker_cli import CliResult, CommandRunner, run_cli
from uni_agent_core.sandbox.gateway_link import SANDBOX_SOCKET, GatewayLink, loopback_address
from uni_agent_core.sandbox.lifecycle import SandboxLifecycle, probe_workdir, settings_for
from uni_agent_core.sandbox.timed_shell import (
    CONTROL_TIMEOUT_S,
    DEFAULT_MAX_OUTPUT_BYTES,
    EXEC_GRACE_S,
    decode_capped,
    finish_exec,
    kill_group_argv,
    new_pidfile,
    sandbox_path,
    timed_shell_argv,
)
from uni_agent_core.sandbox.workspace_files import copy_path

logger = logging.getLogger(__name__)

_REMOVE_TIMEOUT_S = 60.0
_DAEMON_ERRORS = (
    "Error response from daemon",
    "Error: No such container",
    "OCI runtime exec failed",
    "Cannot connect to the Docker daemon",
    "error during connect",
)
"""How the docker CLI (rather than the command) reports a failure on stderr."""
_GONE = ("No such container", "is already in progress")
"""`docker rm -f` answers for a container that is already removed (or being removed)."""


class DockerSandbox(SandboxLifecycle):
    """A container from `image`, driven by the docker CLI: `async with DockerSandbox(...) as sb:`.

    Needs bash and GNU coreutils in the image (every SWE-bench-style image has both).
    """

    config: DockerSandboxConfig

    def __init__(
        self,
        config: DockerSandboxConfig | None = None,
        *,
        workdir: str = "/testbed",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        diff_base: str = "HEAD",
        docker: str = "docker",
        extra_run_args: Sequence[str] = (),
        runner: CommandRunner = run_cli,
        **settings: Any,
    ) -> None:
        """Configures the sandbox; nothing is created until `start()`.

        Args:
            config: The recipe's docker section; None uses its defaults.
            workdir: The repository inside the container (created if missing).
            env: Extra environment of every command (per-call `env` overrides it).
            max_output_bytes: Bytes of stdout and of stderr kept per command.
            diff_base: The commit `diff()` compares the working tree with.
            docker: The docker CLI binary.
            extra_run_args: More `docker run` flags (e.g. `--platform linux/amd64`).
            runner: Runs the CLI; tests inject a fake.
            **settings: Fields of `DockerSandboxConfig` set over `config` (`image=` for the
                task's image, `memory_mb=`, ...).

        Raises:
            TypeError: A setting is not a field of the docker section.
            ValueError: No image is named, `workdir` is relative, or a setting is out of bounds.
        """
        self.config = settings_for(DockerSandboxConfig, config, settings, owner="DockerSandbox")
        image = self.config.image
        if not image:
            raise ValueError(
                "the docker sandbox needs an image: sandbox.image is unset, so each task brings "
                "its own (build_sandbox(config, image=...))"
            )
        self.image: str = image
        """The container's image (the section's `image`, which this backend requires)."""
        self.name = f"agent-rl-{uuid.uuid4().hex[:16]}"
        """The container's name (fixed up front, so a failed `docker run` can still be removed)."""
        self._docker = [docker, *(["-H", h] if (h := self.config.docker_host) else [])]
        self._extra_run_args = list(extra_run_args)
        self._run = runner
        self._init_lifecycle(
            workdir=workdir, env=env, max_output_bytes=max_output_bytes, diff_base=diff_base
        )
        self._launched = False
        self.gateway_link: GatewayLink | None = None
        """The host end of the container's way to its gateway (`network: gateway`)."""
        self.label = f"container {self.name}"
        self.torn_down = "removed"

    def run_argv(self) -> list[str]:
        """The `docker run` command that creates the container."""
        link = (
            ["-v", f"{self.gateway_link.socket_path}:{SANDBOX_SOCKET}"]
            if self.gateway_link is not None
            else []
        )
        caps = [
            *([] if self.config.network == "host" else ["--network", "none", *link]),
            "--memory",
            f"{self.config.memory_mb}m",
            "--memory-swap",
            f"{self.config.memory_mb}m",
            "--pids-limit",
            str(self.config.max_processes),
            "--cpus",
            f"{self.config.cpus:g}",
        ]
        return [
            *self._docker,
            "run",
            "-d",
            "--rm",
            "--name",
            self.name,
            "--label",
            "agent-rl.sandbox=1",
            "--pull",
            self.config.pull,
            *caps,
            *self._extra_run_args,
            "--entrypoint",
            "sleep",
            self.image,
            str(math.ceil(self.wall_clock_s)),
        ]

    async def _start(self) -> None:
        self._arm_deadline()
        if self.config.network == "gateway":
            self.gateway_link = GatewayLink(None, socat="socat")
            await self.gateway_link.start()
        self._launched = True
        created = await self._run(self.run_argv(), timeout_s=self.startup_timeout_s)
        if created.returncode != 0 or created.timed_out:
            raise SandboxError(
                f"docker run {self.image} failed (exit {created.returncode}): "
                f"{_text(created.stderr)}"
            )
        await probe_workdir(self.exec, self.workdir, f"container {self.name} (its image)")

    async def _abort_start(self) -> None:
        await self._close_quietly()

    def _start_timeout_message(self) -> str:
        return f"container {self.name} did not start within {self.startup_timeout_s:g} s"

    def _start_error(self, error: Exception) -> SandboxError | None:
        if isinstance(error, OSError):
            return SandboxError(f"cannot run the docker CLI ({self._docker[0]}): {error}")
        return None

    async def connect_gateway(self, url: str) -> None:
        """Let the container reach the gateway at `url` and nothing else (`network: gateway`):
        starts the image's `socat` on the gateway's loopback port in the container; idempotent
        for one gateway. With `network: host` nothing changes.

        Raises:
            ValueError: `network: none`, or `url` is not on this host's IPv4 loopback.
            SandboxError: the image has no `socat`, or its listener did not come up.
        """
        self._check_usable()
        if self.config.network == "host":
            return
        if self.gateway_link is None:
            raise ValueError(
                "this sandbox has `network: none`, so its agent cannot reach the gateway: set "
                "`sandbox.network: gateway`"
            )
        host, port = loopback_address(url)
        connected = self.gateway_link.port is not None
        self.gateway_link.connect(host, port)
        if connected:
            return
        found = await self.exec("command -v socat >/dev/null 2>&1", timeout=30)
        if not found.ok:
            raise SandboxError(
                f"the image {self.image} has no socat; `sandbox.network: gateway` runs "
                "it in the container (install it in the image, or use `network: host`)"
            )
        # Detached (`exec -d`), outside the per-command wrapper that kills what a command
        # leaves behind: the listener lives as long as the container.
        listener = [*self._docker, "exec", "-d", self.name, *self.gateway_link.listener_argv()]
        launched = await self._control(listener)
        up = await self.exec(self.gateway_link.wait_listening() + "exit $__agent_rl_rc")
        if launched.returncode != 0 or not up.ok:
            raise SandboxError(
                f"the gateway listener did not come up in {self.name}: "
                f"{_text(launched.stderr) or up.stderr.strip() or 'not listening after 2 s'}"
            )

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs `command` with bash in the container.

        Args:
            command: A bash script.
            timeout: Seconds until the command's whole process group is killed inside the
                container (exit 124, `timed_out`); None uses `exec_timeout_s`.
            cwd: Working directory (relative paths are relative to `workdir`).
            env: Extra environment variables of this command.

        Raises:
            SandboxDeadlineError: The sandbox's deadline passed (or passed while it ran).
            SandboxError: The sandbox is not started or closed, or docker failed.
        """
        self._check_usable(starting_ok=True)
        limit = self.exec_timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be > 0, got {limit}")
        remaining = self._deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            self._expire()
            raise self._deadline_error()
        bound = min(limit, remaining)
        pidfile = new_pidfile()
        shell = timed_shell_argv(
            command,
            limit_s=bound,
            cwd=sandbox_path(self.workdir, cwd or "."),
            env={**self._extra_env, **(env or {})},
            pidfile=pidfile,
        )
        began = time.monotonic()
        try:
            done = await self._run(
                [*self._docker, "exec", self.name, *shell],
                timeout_s=bound + EXEC_GRACE_S,
                max_output_bytes=self.max_output_bytes,
            )
        except asyncio.CancelledError:
            await self._kill_command(pidfile)
            raise
        if done.timed_out:
            await self._kill_command(pidfile)
        if self._closed:
            raise SandboxError("the sandbox was closed while the command ran")
        if self._expired:
            raise self._deadline_error()
        if done.timed_out:
            raise SandboxError(
                f"docker exec in {self.name} did not return within {bound + EXEC_GRACE_S:g} s; "
                "the command was killed in the container"
            )
        stderr = _text(done.stderr)
        if done.returncode != 0 and stderr.lstrip().startswith(_DAEMON_ERRORS):
            raise SandboxError(f"docker exec in {self.name} failed: {stderr.strip()}")
        result = finish_exec(
            done.returncode,
            decode_capped(done.stdout, self.max_output_bytes, done.stdout_dropped),
            decode_capped(done.stderr, self.max_output_bytes, done.stderr_dropped),
            elapsed_s=time.monotonic() - began,
            limit_s=bound,
        )
        if result.timed_out and remaining <= limit:
            self._expire()
            raise self._deadline_error()
        return result

    async def read_file(self, path: str) -> str:
        """The text of a container file (undecodable bytes become U+FFFD).

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError: As for a local file.
        """
        self._check_usable()
        target = sandbox_path(self.workdir, path)
        done = await self._control([*self._docker, "exec", self.name, "cat", "--", target])
        if done.returncode != 0:
            raise _file_error(_text(done.stderr), target)
        return done.stdout.decode("utf-8", errors="replace")

    async def write_file(self, path: str, content: str) -> None:
        """Writes a container file, creating its parent directories."""
        self._check_usable()
        target = sandbox_path(self.workdir, path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        argv = [*self._docker, "exec", "-i", self.name, "bash", "-c", script, "agent-rl", target]
        done = await self._control(argv, stdin=content.encode("utf-8"))
        if done.returncode != 0:
            raise _file_error(_text(done.stderr), target)

    async def upload(self, local_path: str, sandbox_path_: str) -> None:
        """Copies a host file or directory into the container (`docker cp`); a directory's
        contents are merged into the target directory."""
        self._check_usable()
        source = Path(local_path)
        if not source.exists():
            raise FileNotFoundError(f"no such host file or directory: {local_path}")
        target = sandbox_path(self.workdir, sandbox_path_)
        parent = target if source.is_dir() else posixpath.dirname(target)
        mkdir = await self._control([*self._docker, "exec", self.name, "mkdir", "-p", parent])
        if mkdir.returncode != 0:
            raise _file_error(_text(mkdir.stderr), parent)
        copied_from = f"{source}/." if source.is_dir() else str(source)
        done = await self._control([*self._docker, "cp", copied_from, f"{self.name}:{target}"])
        if done.returncode != 0:
            raise SandboxError(f"docker cp to {self.name}:{target} failed: {_text(done.stderr)}")

    async def download(self, sandbox_path_: str, local_path: str) -> None:
        """Copies a container file or directory out to the host (`docker cp`, then merged into
        `local_path` as `LocalSandbox` does)."""
        self._check_usable()
        source = sandbox_path(self.workdir, sandbox_path_)
        with tempfile.TemporaryDirectory(prefix="agent-rl-download-") as scratch:
            staged = Path(scratch) / "item"
            done = await self._control([*self._docker, "cp", f"{self.name}:{source}", str(staged)])
            if done.returncode != 0:
                raise _file_error(_text(done.stderr), source)
            await asyncio.to_thread(copy_path, staged, Path(local_path))

    def _holds_resource(self) -> bool:
        return self._launched

    async def _teardown(self) -> None:
        """`docker rm -f` the container (a container already gone is fine), and end the
        gateway link."""
        if self.gateway_link is not None:
            await self.gateway_link.close()
        argv = [*self._docker, "rm", "-f", self.name]
        try:
            done = await self._run(argv, timeout_s=_REMOVE_TIMEOUT_S)
        except OSError as e:
            raise SandboxError(f"cannot run {shlex.join(argv)}: {e}") from e
        stderr = _text(done.stderr)
        if done.timed_out or (done.returncode != 0 and not any(g in stderr for g in _GONE)):
            raise SandboxError(
                f"docker rm -f {self.name} failed (exit {done.returncode}): {stderr}; the "
                f"container is labelled agent-rl.sandbox=1 and stops by itself at its deadline"
            )

    async def _kill_command(self, pidfile: str) -> None:
        """Kills a command's process group in the container, even while being cancelled (not
        during `start()`: a container that fails to start is removed as a whole)."""
        if not self._started:
            return
        argv = [*self._docker, "exec", self.name, *kill_group_argv(pidfile)]
        killing = asyncio.ensure_future(self._run(argv, timeout_s=CONTROL_TIMEOUT_S))
        try:
            await asyncio.shield(killing)
        except asyncio.CancelledError:
            await asyncio.wait([killing])
            raise
        except Exception:
            logger.exception("could not kill a command in container %s", self.name)

    async def _control(self, argv: list[str], *, stdin: bytes | None = None) -> CliResult:
        """Runs a file or control command within `exec_timeout_s`."""
        done = await self._run(argv, timeout_s=self.exec_timeout_s, stdin=stdin)
        if done.timed_out:
            raise SandboxError(f"{shlex.join(argv[:4])} took over {self.exec_timeout_s:g} s")
        return done

    def _check_usable(self, *, starting_ok: bool = False) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if not (self._started or (starting_ok and self._launched)):
            raise SandboxError("the sandbox is not started; call start() or use `async with`")
        if self._expired:
            raise self._deadline_error()


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace").strip()


def _file_error(stderr: str, path: str) -> OSError | SandboxError:
    """The local exception a failed file command in a sandbox corresponds to."""
    if "No such file" in stderr or "Could not find the file" in stderr:
        return FileNotFoundError(f"no such file in the sandbox: {path}")
    if "Is a directory" in stderr:
        return IsADirectoryError(f"is a directory in the sandbox: {path}")
    if "Permission denied" in stderr:
        return PermissionError(f"permission denied in the sandbox: {path}")
    return SandboxError(f"file operation on {path} failed: {stderr}")
