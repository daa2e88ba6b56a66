"""Resource limits of the local sandbox: a per-sandbox cgroup where writable, else rlimits.

A cgroup (v1 controller hierarchy, or a v2 subtree whose parent delegates the controller) caps
the *sum* over a sandbox's processes: `pids.max` stops fork bombs and the memory limit stops
memory hogs (the kernel OOM-kills inside the group, never outside). Every process of the sandbox
joins it before `exec` (`join_argv`), so nothing escapes the count, and `kill()` reaches
processes that left their process group or session.

Where no cgroup is writable, `prlimit_argv` applies per-process rlimits instead: `RLIMIT_AS`
for memory and `RLIMIT_NPROC` for processes. The kernel does not apply `RLIMIT_NPROC` to
processes of host root (user namespaces included), so as root without a cgroup the process cap
is unenforced and `LocalSandbox` says so loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from uni_agent_core.sandbox.base import SandboxError

logger = logging.getLogger(__name__)

Controller = Literal["pids", "memory"]
MemoryMechanism = Literal["cgroup", "rlimit"]
ProcessMechanism = Literal["cgroup", "rlimit", "unenforced"]

_UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT, errno.ENOTDIR}


@dataclass(frozen=True)
class _Hierarchy:
    """Where one controller is mounted and which cgroup this process is in there."""

    version: Literal[1, 2]
    mount: Path
    own: str


def _controller_hierarchies() -> dict[Controller, _Hierarchy]:
    """Finds, per controller, the hierarchy to use: a v1 mount, else a delegating v2 mount."""
    v1_mounts: dict[str, Path] = {}
    v2_mount: Path | None = None
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fields, post_fields = pre.split(), post.split()
            if len(fields) < 5 or len(post_fields) < 3:
                continue
            fstype, mount = post_fields[0], Path(fields[4])
            if fstype == "cgroup":
                for option in post_fields[2].split(","):
                    v1_mounts.setdefault(option, mount)
            elif fstype == "cgroup2" and v2_mount is None:
                v2_mount = mount
    own_v1: dict[str, str] = {}
    own_v2: str | None = None
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            hierarchy_id, controllers, path = line.rstrip("\n").split(":", 2)
            if hierarchy_id == "0" and not controllers:
                own_v2 = path
            for name in controllers.split(","):
                own_v1[name] = path
    found: dict[Controller, _Hierarchy] = {}
    wanted: tuple[Controller, ...] = ("pids", "memory")
    for name in wanted:
        if name in v1_mounts and name in own_v1:
            found[name] = _Hierarchy(1, v1_mounts[name], own_v1[name])
        elif v2_mount is not None and own_v2 is not None:
            parent = v2_mount / own_v2.lstrip("/")
            delegated = parent / "cgroup.subtree_control"
            with contextlib.suppress(OSError):
                if name in delegated.read_text().split():
                    found[name] = _Hierarchy(2, v2_mount, own_v2)
    return found


def controller_mounts() -> dict[Controller, Path]:
    """Where each controller a sandbox cgroup can use is mounted here (both at one v2 mount).

    Sandbox cgroups are created below the creating process's own cgroup, which differs between
    processes (a systemd scope or a job's cgroup each), so whoever looks for them searches from
    these mounts.
    """
    return {controller: found.mount for controller, found in _controller_hierarchies().items()}


class Cgroup:
    """One sandbox's cgroup directories (one per v1 controller, one shared in v2)."""

    def __init__(self, dirs: dict[Controller, Path]) -> None:
        self.dirs = dirs

    @property
    def controllers(self) -> frozenset[Controller]:
        """The controllers this cgroup enforces."""
        return frozenset(self.dirs)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        max_processes: int | None,
        memory_bytes: int | None,
    ) -> Cgroup | None:
        """Creates the sandbox's cgroup below this process's own, with the given limits.

        Args:
            name: Directory name, unique per sandbox.
            max_processes: `pids.max`; None skips the pids controller.
            memory_bytes: The memory limit; None skips the memory controller.

        Returns:
            The cgroup, or None when no wanted controller is writable here (not root, read-only
            cgroupfs, or a v2 parent that does not delegate the controller).

        Raises:
            SandboxError: A cgroup directory was created but its limit could not be written.
        """
        wanted: dict[Controller, int] = {}
        if max_processes is not None:
            wanted["pids"] = max_processes
        if memory_bytes is not None:
            wanted["memory"] = memory_bytes
        dirs: dict[Controller, Path] = {}
        cgroup = cls(dirs)
        try:
            for controller, hierarchy in _controller_hierarchies().items():
                if controller not in wanted:
                    continue
                path = hierarchy.mount / hierarchy.own.lstrip("/") / name
                if path not in dirs.values():
                    try:
                        path.mkdir()
                    except OSError as e:
                        if e.errno not in _UNWRITABLE:
                            raise
                        logger.debug("cgroup %s is not writable here: %s", path, e)
                        continue
                dirs[controller] = path
                _write_limit(controller, hierarchy.version, path, wanted[controller])
        except BaseException:
            cgroup._rmdirs()
            raise
        return cgroup if dirs else None

    def procs_files(self) -> list[Path]:
        """The `cgroup.procs` files a process writes its pid to in order to join."""
        return sorted({d / "cgroup.procs" for d in self.dirs.values()})

    def pids(self) -> set[int]:
        """Every process now in the cgroup."""
        found: set[int] = set()
        for procs in self.procs_files():
            with contextlib.suppress(FileNotFoundError):
                found.update(int(p) for p in procs.read_text().split())
        return found

    def kill(self) -> None:
        """Sends SIGKILL to every process in the cgroup (one pass; see `remove`)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    async def remove(self, *, timeout_s: float = 5.0) -> None:
        """Kills every process, waits until the cgroup is empty, removes its directories.

        Raises:
            SandboxError: Processes were still in the cgroup after `timeout_s`.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            self.kill()
            if not self.pids() and self._rmdirs():
                return
            if loop.time() >= deadline:
                raise SandboxError(
                    f"cgroup {sorted(map(str, self.dirs.values()))} still holds processes "
                    f"{sorted(self.pids())} {timeout_s:g} s after SIGKILL"
                )
            await asyncio.sleep(0.05)

    def _rmdirs(self) -> bool:
        """Removes the directories that are empty; True when none is left."""
        for controller, path in list(self.dirs.items()):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                continue
            del self.dirs[controller]
        return not self.dirs


def _write_limit(controller: Controller, version: int, path: Path, value: int) -> None:
    if controller == "pids":
        files = ["pids.max"]
    elif version == 1:
        # memsw (memory + swap) must stay >= limit_in_bytes, so it is written second.
        files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    else:
        files = ["memory.max"]
    for file in files:
        target = path / file
        if file != files[0] and not target.exists():
            continue
        try:
            target.write_text(str(value))
        except OSError as e:
            raise SandboxError(f"cannot set cgroup limit {target} = {value}: {e}") from e
    if controller == "memory" and version == 2 and (path / "memory.swap.max").exists():
        (path / "memory.swap.max").write_text("0")


@dataclass(frozen=True)
class Limits:
    """One sandbox's limits and the mechanism that enforces each."""

    memory: MemoryMechanism
    """`cgroup`: the sum over the sandbox's processes; `rlimit`: address space per process."""
    processes: ProcessMechanism
    """`unenforced` as root without a writable pids cgroup (root is exempt from RLIMIT_NPROC)."""
    cgroup: Cgroup | None
    """The sandbox's cgroup; every command joins it (`join_argv`)."""
    prefix: tuple[str, ...]
    """The `prlimit` command prefix of every command."""

    @classmethod
    def create(
        cls,
        name: str,
        *,
        prlimit: str,
        memory_mb: int,
        max_processes: int,
        cpu_time_s: int | None,
        use_cgroups: bool,
    ) -> Limits:
        """Creates the cgroup if one is writable (and wanted) and rlimits for the rest.

        Args:
            name: The cgroup's directory name, unique per sandbox.
            prlimit: Path of util-linux `prlimit`.
            memory_mb: Memory cap in MiB.
            max_processes: Cap on processes alive at once.
            cpu_time_s: CPU-seconds rlimit per process; None sets none.
            use_cgroups: Try a cgroup first; False uses rlimits only.
        """
        memory_bytes = memory_mb * 1024 * 1024
        cgroup = None
        if use_cgroups:
            cgroup = Cgroup.create(name, max_processes=max_processes, memory_bytes=memory_bytes)
        controllers = cgroup.controllers if cgroup else frozenset()
        processes: ProcessMechanism = "cgroup"
        if "pids" not in controllers:
            processes = "rlimit" if os.geteuid() != 0 else "unenforced"
        if processes == "unenforced":
            logger.warning(
                "no writable pids cgroup and running as root, so max_processes=%d is NOT "
                "enforced (the kernel exempts root from RLIMIT_NPROC); fork bombs are only "
                "stopped by the command timeout",
                max_processes,
            )
        prefix = prlimit_argv(
            prlimit,
            memory_bytes=None if "memory" in controllers else memory_bytes,
            max_processes=max_processes if processes == "rlimit" else None,
            cpu_time_s=cpu_time_s,
        )
        memory: MemoryMechanism = "cgroup" if "memory" in controllers else "rlimit"
        return cls(memory=memory, processes=processes, cgroup=cgroup, prefix=tuple(prefix))


def join_argv(procs_files: list[Path], argv: list[str]) -> list[str]:
    """Wraps `argv` so the process joins the cgroups before it `exec`s (children follow).

    The `sh` wrapper writes its own pid and then `exec`s, so `argv` keeps the wrapper's pid,
    parent and process group; nothing forks before it is counted.
    """
    if not procs_files:
        return argv
    script = 'for f in "$@"; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; done; '
    script += 'while [ "$1" != -- ]; do shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *map(str, procs_files), "--", *argv]


def prlimit_argv(
    prlimit: str,
    *,
    memory_bytes: int | None,
    max_processes: int | None,
    cpu_time_s: int | None,
) -> list[str]:
    """The `prlimit` prefix that sets per-process rlimits (inherited by every descendant).

    Core dumps are always disabled: a crashing test must not write gigabytes to the workspace.
    """
    argv = [prlimit, "--core=0"]
    if memory_bytes is not None:
        argv.append(f"--as={memory_bytes}")
    if max_processes is not None:
        argv.append(f"--nproc={max_processes}")
    if cpu_time_s is not None:
        argv.append(f"--cpu={cpu_time_s}")
    return [*argv, "--"]
