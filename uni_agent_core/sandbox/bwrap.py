"""The bubblewrap command line of the local sandbox: mounts, namespaces, identity, environment.

Each command runs in a fresh set of namespaces (`--unshare-all`: user, pid, net, ipc, uts,
cgroup), so a command's processes die with it: bwrap is the pid namespace's init and is killed
when its parent dies (`--die-with-parent`), and the kernel then kills everything in the
namespace. The host's top-level directories are bound read-only (so bash, git and python
exist), the sandbox's workspace and `/tmp` are host directories bound read-write (so they
persist between commands), and `/dev` and `/proc` are private. Commands run as `nobody`
(65534) with every capability dropped, so no remount can make the host's files writable.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from uni_agent_core.sandbox.base import SandboxError

BWRAP_EXECUTABLE = "bwrap"
"""Name or path of the bubblewrap binary (tests point it elsewhere)."""

INSTALL_HINT = "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`)"

SANDBOX_UID = 65534
"""uid and gid of commands inside the sandbox (`nobody`); host root maps to it."""

# Top-level host entries that are never bound: the sandbox gets its own of each (or none).
_PRIVATE_TOP_LEVEL = frozenset({"proc", "dev", "sys", "tmp"})


def find_bwrap(path: str | None = None) -> str:
    """The absolute path of bubblewrap.

    Args:
        path: A name or path; None uses `BWRAP_EXECUTABLE`.

    Raises:
        SandboxError: bubblewrap is not installed (the message says how to install it).
    """
    name = path or BWRAP_EXECUTABLE
    found = shutil.which(name)
    if found is None:
        raise SandboxError(
            f"bubblewrap ({name!r}) was not found on PATH; the local sandbox needs it: "
            f"{INSTALL_HINT}, or set `sandbox.isolation: none` for trusted tasks only"
        )
    return found


def root_binds(mount_point: PurePosixPath, hidden: Sequence[str] = ()) -> list[str]:
    """Arguments that rebuild the host's root read-only, minus private and hidden entries.

    Binding `/` itself read-only would leave no way to create `mount_point` inside it, so each
    top-level entry is bound on its own (symlinks such as `/bin -> usr/bin` are recreated).

    Args:
        mount_point: Where the workspace is mounted; a host entry of that name is not bound.
        hidden: Host paths covered by an empty tmpfs (other sandboxes' directories, task
            data such as hidden tests).
    """
    skip = _PRIVATE_TOP_LEVEL | {mount_point.parts[1]}
    args: list[str] = []
    for name in sorted(os.listdir("/")):
        if name in skip:
            continue
        host = f"/{name}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        else:
            args += ["--ro-bind", host, host]
    for path in hidden:
        if Path(path).is_dir():
            args += ["--tmpfs", path]
        elif Path(path).exists():
            args += ["--ro-bind", "/dev/null", path]
    return args


def bwrap_argv(
    bwrap: str,
    *,
    workspace_host: Path,
    tmp_host: Path,
    mount_point: PurePosixPath,
    cwd: PurePosixPath,
    env: Mapping[str, str],
    network: bool,
    hidden: Sequence[str],
    command: Sequence[str],
) -> list[str]:
    """The full bwrap invocation that runs `command` in the sandbox.

    Args:
        bwrap: Path of the bubblewrap binary.
        workspace_host: Host directory bound read-write at `mount_point`.
        tmp_host: Host directory bound read-write at `/tmp`.
        mount_point: The workspace inside the sandbox (`/workspace`).
        cwd: Working directory inside the sandbox.
        env: The command's whole environment (everything else is cleared).
        network: Share the host's network namespace (otherwise only a private loopback).
        hidden: Host paths hidden behind an empty tmpfs.
        command: The program and its arguments.
    """
    argv = [bwrap, *root_binds(mount_point, hidden)]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--bind", str(workspace_host), str(mount_point), "--bind", str(tmp_host), "/tmp"]
    argv += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID)]
    argv += ["--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--hostname", "sandbox"]
    if network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--chdir", str(cwd), "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]
