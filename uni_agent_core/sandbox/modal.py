"""`ModalSandbox`: one Modal sandbox per rollout, through Modal's async (`.aio`) client API.

The sandbox is created in the app `app_name` from a registry image with hard caps: CPU and
memory as `(request, limit)` pairs (a bare `memory=` is only a request, and it is in MiB),
`block_network=True` unless the task allows network, and Modal's own `timeout` (whole seconds)
set to the wall-clock deadline, so Modal ends it even if this process dies. A host timer
terminates it at the same deadline and `close()` terminates it on every path.

Commands run under the in-sandbox wrapper shared with the docker backend
(`docker.timed_shell_argv`: GNU `timeout -s KILL` on the command's own process group, the group
killed when it ends), with Modal's exec `timeout` a little longer as the backstop (Modal then
reports exit -1, taken as a timeout). A host-side timeout bounds every RPC; a command whose
caller gives up or is cancelled is killed through the wrapper's pid file. Files go through the
sandbox filesystem API; directories travel as tar archives.

`modal` is imported on first use, and tests inject a fake module (`modal_module=`).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import math
import shlex
import tarfile
import tempfile
import time
import uuid
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from uni_agent_core.config.sandbox import ModalSandboxConfig
from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.sandbox.lifecycle import SandboxLifecycle, probe_workdir, settings_for
from uni_agent_core.sandbox.timed_shell import (
    DEFAULT_MAX_OUTPUT_BYTES,
    EXEC_GRACE_S,
    TIMEOUT_EXIT_CODE,
    decode_capped,
    finish_exec,
    kill_group_argv,
    new_pidfile,
    sandbox_path,
    timed_shell_argv,
)
from uni_agent_core.sandbox.workspace_files import copy_path

logger = logging.getLogger(__name__)

T = TypeVar("T")

_EXEC_TIMED_OUT = -1
"""What Modal's `ContainerProcess.wait` returns when the exec's own timeout passed."""


class ModalSandbox(SandboxLifecycle):
    """A Modal sandbox from `image`: `async with ModalSandbox(image=...) as sb:`.

    Needs bash and GNU coreutils (and `tar` for directory copies) in the image.
    """

    config: ModalSandboxConfig

    def __init__(
        self,
        config: ModalSandboxConfig | None = None,
        *,
        image: str,
        workdir: str = "/testbed",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        diff_base: str = "HEAD",
        modal_module: Any = None,
        **settings: Any,
    ) -> None:
        """Configures the sandbox; nothing is contacted until `start()`.

        Args:
            config: The recipe's modal section; None uses its defaults.
            image: Registry image (`modal.Image.from_registry`), the task's.
            workdir: The repository inside the sandbox (created if missing).
            env: Extra environment of every command (per-call `env` overrides it).
            max_output_bytes: Bytes of stdout and of stderr kept per command.
            diff_base: The commit `diff()` compares the working tree with.
            modal_module: The `modal` module to use; None imports it (tests pass a fake).
            **settings: Fields of `ModalSandboxConfig` set over `config` (`cpu=`, ...).

        Raises:
            TypeError: A setting is not a field of the modal section.
            ValueError: `image` is empty, `workdir` is relative, or a setting is out of bounds
                (`wall_clock_s` is at most 24 h, Modal's cap).
        """
        if not image:
            raise ValueError("image must name a registry image")
        self.config = settings_for(ModalSandboxConfig, config, settings, owner="ModalSandbox")
        self.image = image
        self._modal_module = modal_module
        self._sandbox: Any = None
        self._init_lifecycle(
            workdir=workdir, env=env, max_output_bytes=max_output_bytes, diff_base=diff_base
        )
        self.label = "modal sandbox"
        self.torn_down = "terminated"

    @classmethod
    def from_config(cls, config: ModalSandboxConfig, **overrides: Any) -> ModalSandbox:
        """A sandbox with the recipe's caps; `overrides` must give the task's `image` (the
        recipe has none) and may set any other argument.

        Raises:
            ValueError: `overrides` has no image.
        """
        if not overrides.get("image"):
            raise ValueError(
                "a modal sandbox needs the task's image: build_sandbox(config, image=...)"
            )
        return cls(config, **overrides)

    @property
    def modal(self) -> Any:
        """The `modal` module in use (imported on first use)."""
        if self._modal_module is None:
            self._modal_module = importlib.import_module("modal")
        return self._modal_module

    async def _start(self) -> None:
        modal = self.modal
        self._arm_deadline()
        lifetime = math.ceil(self.wall_clock_s)
        app = await modal.App.lookup.aio(self.config.app_name, create_if_missing=True)
        self._sandbox = await modal.Sandbox.create.aio(
            "sleep",
            str(lifetime),
            app=app,
            image=modal.Image.from_registry(self.image),
            timeout=lifetime,
            cpu=(self.config.cpu, self.config.cpu),
            memory=(self.config.memory_mb, self.config.memory_mb),
            block_network=self.config.network != "host",
            workdir=str(self.workdir),
            region=self.config.region,
        )
        await probe_workdir(self._exec, self.workdir, "the modal sandbox (its image)")

    async def _abort_start(self) -> None:
        await self._close_quietly()

    def _start_timeout_message(self) -> str:
        return f"modal sandbox did not start within {self.startup_timeout_s:g} s"

    def _start_error(self, error: Exception) -> SandboxError:
        # Modal raises its own types (auth, quota, image build); the pool retries these.
        return SandboxError(f"creating the modal sandbox failed: {error}")

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Runs `command` with bash in the sandbox.

        Args:
            command: A bash script.
            timeout: Seconds until the command's whole process group is killed (exit 124,
                `timed_out`); None uses `exec_timeout_s`.
            cwd: Working directory (relative paths are relative to `workdir`).
            env: Extra environment variables of this command.

        Raises:
            SandboxDeadlineError: The sandbox's deadline passed (or passed while it ran).
            SandboxError: The sandbox is not started or closed, or Modal failed.
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
        pidfile = new_pidfile()
        argv = timed_shell_argv(
            command,
            limit_s=bound,
            cwd=sandbox_path(self.workdir, cwd or "."),
            env={**self._extra_env, **(env or {})},
            pidfile=pidfile,
        )
        began = time.monotonic()
        try:
            async with asyncio.timeout(bound + EXEC_GRACE_S + self.config.rpc_timeout_s):
                process = await self._sandbox.exec.aio(
                    *argv, timeout=math.ceil(bound + EXEC_GRACE_S), text=False
                )
                stdout, stderr, returncode = await asyncio.gather(
                    process.stdout.read.aio(), process.stderr.read.aio(), process.wait.aio()
                )
        except asyncio.CancelledError:
            await self._kill_command(pidfile)
            raise
        except TimeoutError as e:
            await self._kill_command(pidfile)
            waited = bound + EXEC_GRACE_S + self.config.rpc_timeout_s
            raise SandboxError(
                f"modal exec did not return within {waited:g} s; the command was killed in the "
                "sandbox"
            ) from e
        except Exception as e:
            if self._closed or self._expired:
                raise self._gone_error() from e
            raise SandboxError(f"modal exec failed: {e}") from e
        if self._closed or self._expired:
            raise self._gone_error()
        out = decode_capped(stdout, self.max_output_bytes)
        err = decode_capped(stderr, self.max_output_bytes)
        if returncode == _EXEC_TIMED_OUT:
            result = ExecResult(TIMEOUT_EXIT_CODE, out, err, timed_out=True)
        else:
            result = finish_exec(
                returncode, out, err, elapsed_s=time.monotonic() - began, limit_s=bound
            )
        if result.timed_out and remaining <= limit:
            self._expire()
            raise self._deadline_error()
        return result

    async def read_file(self, path: str) -> str:
        """The text of a sandbox file (undecodable bytes become U+FFFD).

        Raises:
            FileNotFoundError, IsADirectoryError, PermissionError: As for a local file.
        """
        self._check_usable()
        target = sandbox_path(self.workdir, path)
        data = await self._files(self._sandbox.filesystem.read_bytes.aio(target), target)
        return bytes(data).decode("utf-8", errors="replace")

    async def write_file(self, path: str, content: str) -> None:
        """Writes a sandbox file, creating its parent directories."""
        self._check_usable()
        target = sandbox_path(self.workdir, path)
        await self._files(self._sandbox.filesystem.write_text.aio(content, target), target)

    async def upload(self, local_path: str, sandbox_path_: str) -> None:
        """Copies a host file or directory into the sandbox (a directory as a tar archive,
        merged into the target directory)."""
        self._check_usable()
        source = Path(local_path)
        target = sandbox_path(self.workdir, sandbox_path_)
        if not source.exists():
            raise FileNotFoundError(f"no such host file or directory: {local_path}")
        files = self._sandbox.filesystem
        if not source.is_dir():
            await self._files(files.copy_from_local.aio(source, target), target)
            return
        staged = f"/tmp/.agent-rl-upload-{uuid.uuid4().hex}.tar"
        with tempfile.TemporaryDirectory(prefix="agent-rl-upload-") as scratch:
            archive = Path(scratch) / "upload.tar"
            await asyncio.to_thread(_pack, source, archive)
            await self._files(files.copy_from_local.aio(archive, staged), staged)
        unpacked = await self.exec(
            f"mkdir -p -- {shlex.quote(target)} && tar -xf {staged} -C {shlex.quote(target)}; "
            f"rc=$?; rm -f {staged}; exit $rc"
        )
        if not unpacked.ok:
            raise SandboxError(f"unpacking into {target} failed: {unpacked.stderr.strip()}")

    async def download(self, sandbox_path_: str, local_path: str) -> None:
        """Copies a sandbox file or directory out to the host, merged into `local_path` as
        `LocalSandbox` does (a directory travels as a tar archive)."""
        self._check_usable()
        source = sandbox_path(self.workdir, sandbox_path_)
        staged = f"/tmp/.agent-rl-download-{uuid.uuid4().hex}.tar"
        quoted = shlex.quote(source)
        kind = await self.exec(
            f"if [ -d {quoted} ]; then tar -cf {staged} -C {quoted} . && echo dir; "
            f"elif [ -e {quoted} ]; then echo file; else echo missing; fi"
        )
        what = kind.stdout.strip()
        if not kind.ok or what not in ("dir", "file"):
            if what == "missing":
                raise FileNotFoundError(f"no such file in the sandbox: {source}")
            raise SandboxError(f"inspecting {source} failed: {kind.stderr.strip()}")
        files = self._sandbox.filesystem
        with tempfile.TemporaryDirectory(prefix="agent-rl-download-") as scratch:
            item = Path(scratch) / "item"
            if what == "file":
                await self._files(files.copy_to_local.aio(source, item), source)
            else:
                archive = Path(scratch) / "download.tar"
                try:
                    await self._files(files.copy_to_local.aio(staged, archive), staged)
                finally:
                    await self.exec(f"rm -f {staged}")
                await asyncio.to_thread(_unpack, archive, item)
            await asyncio.to_thread(copy_path, item, Path(local_path))

    def _holds_resource(self) -> bool:
        return self._sandbox is not None

    async def _teardown(self) -> None:
        """Terminate the Modal sandbox (Modal ends it at its own timeout otherwise)."""
        try:
            async with asyncio.timeout(self.config.rpc_timeout_s):
                await self._sandbox.terminate.aio()
        except Exception as e:
            raise SandboxError(
                f"terminating the modal sandbox failed: {e}; Modal ends it at its timeout "
                f"({math.ceil(self.wall_clock_s)} s)"
            ) from e

    async def _kill_command(self, pidfile: str) -> None:
        """Kills a command's process group in the sandbox, even while being cancelled (not
        during `start()`: a sandbox that fails to start is terminated as a whole)."""
        if not self._started:
            return

        async def kill() -> None:
            async with asyncio.timeout(self.config.rpc_timeout_s):
                process = await self._sandbox.exec.aio(*kill_group_argv(pidfile), text=False)
                await process.wait.aio()

        killing = asyncio.ensure_future(kill())
        try:
            await asyncio.shield(killing)
        except asyncio.CancelledError:
            await asyncio.wait([killing])
            raise
        except Exception:
            logger.exception("could not kill a command in the modal sandbox")

    async def _files(self, call: Awaitable[T], path: str) -> T:
        """Awaits a filesystem call within `rpc_timeout_s`, with local exception types."""
        errors = self.modal.exception
        try:
            async with asyncio.timeout(self.config.rpc_timeout_s):
                return await call
        except TimeoutError as e:
            raise SandboxError(
                f"modal file call on {path} took over {self.config.rpc_timeout_s:g} s"
            ) from e
        except errors.SandboxFilesystemNotFoundError as e:
            raise FileNotFoundError(f"no such file in the sandbox: {path}") from e
        except errors.SandboxFilesystemIsADirectoryError as e:
            raise IsADirectoryError(f"is a directory in the sandbox: {path}") from e
        except errors.SandboxFilesystemPermissionError as e:
            raise PermissionError(f"permission denied in the sandbox: {path}") from e
        except errors.Error as e:
            raise SandboxError(f"modal file call on {path} failed: {e}") from e

    def _gone_error(self) -> SandboxError:
        if self._expired:
            return self._deadline_error()
        return SandboxError("the sandbox was closed while the command ran")


def _pack(source: Path, archive: Path) -> None:
    with tarfile.open(archive, "w") as tar:
        tar.add(source, arcname=".")


def _unpack(archive: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(target, filter="data")
