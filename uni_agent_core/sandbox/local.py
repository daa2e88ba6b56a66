"""`LocalSandbox`: the embedded default backend, a bubblewrap-isolated workspace on this host.

Each sandbox owns a host directory with `workspace/` (mounted at `/workspace`, the task's repo
in `/workspace/repo`) and `tmp/` (mounted at `/tmp`); both outlive single commands, processes do
not (see `bwrap.py`). Limits come from `limits.py`: a per-sandbox cgroup where one is writable,
per-process rlimits otherwise; `limits` says which are in force. Every command has a
timeout that kills its whole process tree, and the sandbox a wall-clock deadline after which
everything in it is killed and every call raises `SandboxDeadlineError`.

File calls (`read_file`, `write_file`, `upload`, `download`) act on the host directory directly;
paths are resolved inside the workspace and anything that leads out of it, by `..`, an absolute
path or a symlink, is refused with `PermissionError`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.sandbox.bwrap import (
    bwrap_argv,
    command_options,
    find_bwrap,
    options_file,
    sandbox_options,
)
from uni_agent_core.sandbox.gateway_link import GatewayLink, find_socat, loopback_address
from uni_agent_core.sandbox.lifecycle import SandboxLifecycle, settings_for
from uni_agent_core.sandbox.limits import Limits, join_argv
from uni_agent_core.sandbox.process import kill_group, run_process
from uni_agent_core.sandbox.timed_shell import DEFAULT_MAX_OUTPUT_BYTES
from uni_agent_core.sandbox.workspace_files import confine, copy_path, force_rmtree

logger = logging.getLogger(__name__)

T = TypeVar("T")

MOUNT_POINT = PurePosixPath("/workspace")
"""The workspace inside a bubblewrap sandbox (also `HOME`)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TIMEOUT_EXIT_CODE = 124
_REMOVE_TIMEOUT_S = 120.0
SANDBOX_DIR_PREFIX = "agent-rl-sandbox-"
"""A sandbox's host directory is `<prefix><owner pid>-<random>`: a later run can tell from the
pid whether its owner is dead and sweep it."""


_warned_unisolated = False
_warned_host_network = False


def _warn_host_network_once() -> None:
    global _warned_host_network
    if not _warned_host_network:
        _warned_host_network = True
        logger.warning(
            "sandbox.network: host: agents share this host's whole network (every local "
            "service, such as the Prefect API and MLflow, other episodes' gateways, and the "
            "internet where the host has it); `gateway` lets them reach their gateway alone"
        )


def _warn_unisolated_once() -> None:
    global _warned_unisolated
    if not _warned_unisolated:
        _warned_unisolated = True
        logger.warning(
            "LocalSandbox with isolation='none': commands run UNISOLATED on this host with "
            "its network and file system; use it for trusted tasks only"
        )


class LocalSandbox(SandboxLifecycle):
    """A workspace on this host whose commands run under bubblewrap (or, trusted, without).

    Use as `async with LocalSandbox(...) as sb:`; `close()` runs on every path.
    """

    config: LocalSandboxConfig

    def __init__(
        self,
        config: LocalSandboxConfig | None = None,
        *,
        workdir: str = "/workspace/repo",
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        diff_base: str = "HEAD",
        hide_paths: Sequence[str] = (),
        root_dir: str | None = None,
        use_cgroups: bool = True,
        bwrap_path: str | None = None,
        **settings: Any,
    ) -> None:
        """Configures the sandbox; nothing is created until `start()`.

        Args:
            config: The recipe's local section (isolation, memory and process caps, network,
                timeouts); None uses its defaults.
            workdir: The repository inside the sandbox, under `/workspace`.
            env: Extra environment of every command (per-call `env` overrides it).
            max_output_bytes: Bytes of stdout and of stderr kept per command.
            diff_base: The commit `diff()` compares the working tree with.
            hide_paths: Host paths hidden inside the sandbox (e.g. task data, hidden tests).
            root_dir: Host directory that holds the sandbox's directory; None is the temp dir.
                It is hidden inside every sandbox, so sandboxes cannot see each other.
            use_cgroups: Use a per-sandbox cgroup for limits when one is writable.
            bwrap_path: bubblewrap binary; None looks up `bwrap` on PATH.
            **settings: Fields of `LocalSandboxConfig` set over `config` (`isolation="none"`
                for trusted tasks, run without bubblewrap and logged as a warning; `memory_mb=`,
                ...).

        Raises:
            TypeError: A setting is not a field of the local section.
            ValueError: `workdir` is not under `/workspace`, or a setting is out of bounds.
        """
        sandbox_workdir = PurePosixPath(posixpath.normpath(workdir))
        if MOUNT_POINT not in sandbox_workdir.parents and sandbox_workdir != MOUNT_POINT:
            raise ValueError(f"workdir {workdir!r} must be under {MOUNT_POINT}")
        self.config = settings_for(LocalSandboxConfig, config, settings, owner="LocalSandbox")
        self.use_cgroups = use_cgroups
        self.hide_paths = tuple(hide_paths)
        self.limits: Limits | None = None
        """The limits and what enforces each; set by `start()`."""
        self._root_dir = root_dir
        self._bwrap_path = bwrap_path
        self._mount = MOUNT_POINT
        self._root: Path | None = None
        self._bwrap = ""
        self._bash = ""
        self._sandbox_options: list[str] = []
        """bwrap's options shared by every command (`sandbox_options`), set by `start()`."""
        self._option_args: dict[str, Any] = {}
        """What `sandbox_options` was computed from (a gateway link recomputes them)."""
        self.gateway_link: GatewayLink | None = None
        """The link to the episode's gateway (`connect_gateway`), if any."""
        self._init_lifecycle(
            workdir=workdir, env=env, max_output_bytes=max_output_bytes, diff_base=diff_base
        )
        self.torn_down = "stopped: all its processes were killed"
        self._processes: set[asyncio.subprocess.Process] = set()

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"sandbox {self._root}"

    @property
    def host_dir(self) -> Path:
        """The sandbox's host directory (`workspace/` and `tmp/`); raises before `start()`."""
        if self._root is None:
            raise SandboxError("the sandbox is not started")
        return self._root

    async def _start(self) -> None:
        if self.config.isolation == "bubblewrap":
            self._bwrap = find_bwrap(self._bwrap_path)
        else:
            _warn_unisolated_once()
        prlimit, bash = shutil.which("prlimit"), shutil.which("bash")
        if prlimit is None or bash is None:
            raise SandboxError("the local sandbox needs `prlimit` (util-linux) and `bash`")
        self._bash = bash
        root = Path(
            tempfile.mkdtemp(prefix=f"{SANDBOX_DIR_PREFIX}{os.getpid()}-", dir=self._root_dir)
        )
        self._root = root
        workspace = root / "workspace"
        (workspace / self.workdir.relative_to(MOUNT_POINT)).mkdir(parents=True)
        (root / "tmp").mkdir()
        if self.config.isolation == "none":
            self._mount = PurePosixPath(workspace)
            self.workdir = self._mount / self.workdir.relative_to(MOUNT_POINT)

        self.limits = Limits.create(
            f"agent-rl-{os.getpid()}-{uuid.uuid4().hex[:12]}",
            prlimit=prlimit,
            memory_mb=self.config.memory_mb,
            max_processes=self.config.max_processes,
            cpu_time_s=self.config.cpu_time_s,
            use_cgroups=self.use_cgroups,
        )

        if self.config.isolation == "bubblewrap":
            if self.config.network == "host":
                _warn_host_network_once()
            self._option_args = {
                "workspace_host": root / "workspace",
                "tmp_host": root / "tmp",
                "mount_point": MOUNT_POINT,
                "network": self.config.network,
                "read_only_paths": self.config.read_only_paths,
                "hidden": [*self.hide_paths, *self._hidden_root_dir(), *self._hidden_host_data()],
            }
            self._sandbox_options = sandbox_options(**self._option_args)

        self._arm_deadline()
        probe = await self.exec("exit 0", timeout=self.startup_timeout_s, cwd=str(self._mount))
        if not probe.ok:
            raise SandboxError(
                f"the sandbox cannot run commands (exit {probe.exit_code}): "
                f"{probe.stderr.strip() or probe.stdout.strip()}"
            )

    async def connect_gateway(self, url: str) -> None:
        """Let the agent's commands reach the gateway at `url`, and with bubblewrap's
        `network: gateway` nothing else (`gateway_link.py`); idempotent for one gateway.

        Without bubblewrap, or with `network: host`, the host's network is shared already and
        nothing changes.

        Raises:
            ValueError: `network: none` (the agent may reach nothing), or `url` is not on this
                host's IPv4 loopback.
            SandboxError: the sandbox is not usable, or socat is missing.
        """
        root = self._usable_root()
        if self.config.isolation != "bubblewrap" or self.config.network == "host":
            return
        if self.config.network == "none":
            raise ValueError(
                "this sandbox has `network: none`, so its agent cannot reach the gateway: set "
                "`sandbox.network: gateway`"
            )
        host, port = loopback_address(url)
        if self.gateway_link is not None:
            self.gateway_link.connect(host, port)  # the same gateway, or ValueError
            return
        link = GatewayLink(root / "gateway.sock", socat=find_socat())
        link.connect(host, port)
        await link.start()
        self.gateway_link = link
        self._sandbox_options = sandbox_options(
            **self._option_args, gateway_link=link.bwrap_options()
        )

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
            timeout: Seconds until the command's whole process tree is killed (exit code 124,
                `timed_out`); None uses `exec_timeout_s`.
            cwd: Working directory (relative paths are relative to `workdir`); default `workdir`.
            env: Extra environment variables of this command.

        Raises:
            SandboxDeadlineError: The sandbox's wall-clock deadline has passed (or passed while
                the command ran); everything in the sandbox has been killed.
            SandboxError: The sandbox is not started or is closed.
        """
        root = self._usable_root()
        limit = self.exec_timeout_s if timeout is None else timeout
        if limit <= 0:
            raise ValueError(f"timeout must be > 0, got {limit}")
        remaining = self._deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            self._expire()
            raise self._deadline_error()
        work = PurePosixPath(posixpath.normpath(self.workdir / (cwd or ".")))
        env_all = {
            "PATH": DEFAULT_PATH,
            "HOME": str(self._mount),
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp" if self.config.isolation == "bubblewrap" else str(root / "tmp"),
            **self._extra_env,
            **(env or {}),
        }
        limits = self.limits
        assert limits is not None
        options_fd: int | None = None
        if self.gateway_link is not None:
            command = self.gateway_link.command_prelude() + command
        command_argv = [*limits.prefix, self._bash, "-c", command]
        if self.config.isolation == "bubblewrap":
            per_command = command_options(cwd=work, env=env_all)
            options_fd = options_file([*self._sandbox_options, *per_command])
            argv = bwrap_argv(self._bwrap, options_fd=options_fd, command=command_argv)
            host_cwd, process_env = root, {"PATH": os.environ.get("PATH", DEFAULT_PATH)}
        else:
            argv, host_cwd, process_env = command_argv, Path(work), env_all
        if limits.cgroup is not None:
            argv = join_argv(limits.cgroup.procs_files(), argv)
        try:
            finished = await run_process(
                argv,
                env=process_env,
                cwd=host_cwd,
                timeout_s=min(limit, remaining),
                max_output_bytes=self.max_output_bytes,
                on_start=self._processes.add,
                on_end=self._processes.discard,
                pass_fds=() if options_fd is None else (options_fd,),
            )
        finally:
            if options_fd is not None:
                os.close(options_fd)
        if self._closed:
            raise SandboxError("the sandbox was closed while the command ran")
        if self._expired or (finished.timed_out and remaining <= limit):
            self._expire()
            raise self._deadline_error()
        if finished.timed_out:
            return ExecResult(TIMEOUT_EXIT_CODE, finished.stdout, finished.stderr, timed_out=True)
        return ExecResult(finished.returncode, finished.stdout, finished.stderr)

    async def read_file(self, path: str) -> str:
        """The text of a workspace file (undecodable bytes become U+FFFD)."""
        host = self._host_path(path)
        return await self._io(host.read_text, encoding="utf-8", errors="replace")

    async def write_file(self, path: str, content: str) -> None:
        """Writes a workspace file, creating its parent directories."""
        host = self._host_path(path)

        def write() -> None:
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_text(content, encoding="utf-8")

        await self._io(write)

    async def upload(self, local_path: str, sandbox_path: str) -> None:
        """Copies a host file or directory into the workspace (symlinks are copied as links)."""
        await self._io(copy_path, Path(local_path), self._host_path(sandbox_path))

    async def download(self, sandbox_path: str, local_path: str) -> None:
        """Copies a workspace file or directory out to the host (symlinks stay links)."""
        await self._io(copy_path, self._host_path(sandbox_path), Path(local_path))

    async def close(self) -> None:
        """Kills every process and removes the sandbox's directory and cgroup (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        for process in list(self._processes):
            kill_group(process)
        if self.gateway_link is not None:
            await self.gateway_link.close()
        root, cgroup = self._root, self.limits.cgroup if self.limits else None
        try:
            if cgroup is not None:
                await cgroup.remove()
        finally:
            if root is not None:
                try:
                    async with asyncio.timeout(_REMOVE_TIMEOUT_S):
                        await asyncio.to_thread(force_rmtree, root)
                except TimeoutError as e:
                    raise SandboxError(f"removing {root} took over {_REMOVE_TIMEOUT_S} s") from e

    async def _abort_start(self) -> None:
        await self.close()

    def _usable_root(self) -> Path:
        """The sandbox's root directory, usable from the moment `_start()` made it (the base's
        `_check_usable()` waits for the start to finish)."""
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if self._root is None:
            raise SandboxError("the sandbox is not started; call start() or use `async with`")
        if self._expired:
            raise self._deadline_error()
        return self._root

    def _expire(self) -> None:
        """Kills everything in the sandbox once its wall-clock deadline passes."""
        if self._expired:
            return
        self._expired = True
        logger.warning(
            "sandbox %s passed its %g s deadline; killing it", self._root, self.wall_clock_s
        )
        for process in list(self._processes):
            kill_group(process)
        if self.limits is not None and self.limits.cgroup is not None:
            self.limits.cgroup.kill()

    def _hidden_host_data(self) -> list[str]:
        """Host places that hold task data an agent must not read: the agent-rl cache (built
        tasks, datasets and their keys, hidden tests) and the directory the run was started
        from. The allow-list leaves them out already; they are covered too should a
        `read_only_paths` entry contain them."""
        from uni_agent_core.models.registry import cache_root

        candidates = [cache_root(), Path.cwd()]
        sandbox_root = self.host_dir
        return [
            str(path)
            for path in candidates
            if path != Path("/") and path.exists() and path not in sandbox_root.parents
        ]

    def _hidden_root_dir(self) -> list[str]:
        """The directory holding every sandbox on this host, should a bound path contain it."""
        parent = self.host_dir.parent
        return [] if parent == Path("/tmp") or Path("/tmp") in parent.parents else [str(parent)]

    def _host_path(self, path: str) -> Path:
        root = self._usable_root()
        return confine(path, workdir=self.workdir, mount=self._mount, host=root / "workspace")

    async def _io(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs blocking file work in a thread, within `exec_timeout_s`."""
        self._usable_root()
        work: Awaitable[T] = asyncio.to_thread(fn, *args, **kwargs)
        try:
            async with asyncio.timeout(self.exec_timeout_s):
                return await work
        except TimeoutError as e:
            raise SandboxError(f"file operation took over {self.exec_timeout_s:g} s") from e
