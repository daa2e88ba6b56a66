"""The bubblewrap command line of the local sandbox: mounts, namespaces, identity, environment.

Each command runs in a fresh set of namespaces (`--unshare-all`: user, pid, net, ipc, uts,
cgroup), so a command's processes die with it: bwrap is the pid namespace's init and is killed
when its parent dies (`--die-with-parent`), and the kernel then kills everything in the
namespace. Commands run as `nobody` (65534) with every capability dropped, so no remount can
make the host's files writable.

The file system is an allow-list (docs/architecture.md, "Sandbox"): the system's runtime
(`/usr`, `/bin`, `/sbin`, `/lib*`) and a minimal `/etc` read-only, the recipe's
`read_only_paths` (a task interpreter installed elsewhere), the sandbox's workspace and `/tmp`
read-write (host directories, so they persist between commands), a private `/dev` and `/proc`.
Nothing else of the host exists inside: not the project's checkout or virtualenv, not the
agent-rl cache with its datasets and hidden tests, not other sandboxes, not `/opt`, `/root` or
`/home`. An agent-rl package installed under a bound directory (a system-wide pip install) is
covered by an empty tmpfs. The options reach bwrap through a file descriptor (`--args`), so
`/proc/1/cmdline` inside names no host path.
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

RUNTIME_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""The system's runtime, bound read-only (merged-/usr symlinks such as `/bin -> usr/bin` are
recreated as symlinks)."""

ETC_ENTRIES = (
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "profile",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
"""What of `/etc` commands need: the dynamic linker, users and groups, name resolution, TLS
roots, locale and time zone, git's and Python's system configuration (`python3.X/` is added
for every version present)."""

AGENT_RL_PACKAGES = ("uni_agent_core",)
"""Top-level packages of agent-rl: wherever one is installed under a bound directory, it is
hidden, so no sandbox can run the task generator."""


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


def runtime_binds(read_only_paths: Sequence[str] = ()) -> list[str]:
    """Arguments that bind the allow-listed host paths read-only.

    Args:
        read_only_paths: Further host directories to bind at the same path (missing ones are
            skipped).
    """
    args: list[str] = []
    for host in RUNTIME_DIRS:
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    for host in _etc_entries():
        if os.path.islink(host) and not os.path.exists(host):
            continue
        # A symlinked entry (resolv.conf -> /run/...) is bound from its target.
        args += ["--ro-bind", os.path.realpath(host), host]
    for host in read_only_paths:
        if os.path.isdir(host):
            args += ["--ro-bind", host, host]
    return args


def _etc_entries() -> list[str]:
    names = [*ETC_ENTRIES, *(p.name for p in Path("/etc").glob("python3.*"))]
    return [f"/etc/{name}" for name in sorted(set(names)) if os.path.lexists(f"/etc/{name}")]


def installed_agent_rl_packages(bound: Sequence[str]) -> list[str]:
    """agent-rl packages installed in site directories under the bound paths.

    Covers `<prefix>/lib/pythonX.Y/{site,dist}-packages/<package>` (and its `.dist-info` /
    `.egg-link` / `.pth` neighbours are harmless without it) for every bound prefix, and the
    package this process imported, when it lies under a bound path.
    """
    found: set[str] = set()
    roots = [Path(path) for path in bound]
    for root in roots:
        for pattern in ("lib/python3*/*-packages", "local/lib/python3*/*-packages"):
            for site in root.glob(pattern):
                found.update(
                    str(site / name) for name in AGENT_RL_PACKAGES if (site / name).is_dir()
                )
    own = Path(__file__).resolve().parents[1]
    if _under(own, roots):
        found.add(str(own))
    return sorted(found)


def _under(path: Path, roots: Sequence[Path]) -> bool:
    """Whether `path` is one of `roots` or lies below one."""
    return any(root == path or root in path.parents for root in roots)


def hide_args(paths: Sequence[str], bound: Sequence[str]) -> list[str]:
    """Arguments that cover each path lying under a bound directory (an empty tmpfs over a
    directory, `/dev/null` over a file); paths that are not bound are absent already."""
    roots = [Path(path) for path in bound]
    args: list[str] = []
    for raw in paths:
        path = Path(raw)
        if not _under(path, roots):
            continue
        if path.is_dir():
            args += ["--tmpfs", raw]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", raw]
    return args


def sandbox_options(
    *,
    workspace_host: Path,
    tmp_host: Path,
    mount_point: PurePosixPath,
    network: str,
    read_only_paths: Sequence[str] = (),
    hidden: Sequence[str] = (),
    gateway_link: Sequence[str] = (),
) -> list[str]:
    """The bwrap options one sandbox's commands share: mounts, namespaces, identity.

    Computed once per sandbox (it reads the host's file system); `command_options` adds what
    differs per command.

    Args:
        workspace_host: Host directory bound read-write at `mount_point`.
        tmp_host: Host directory bound read-write at `/tmp`.
        mount_point: The workspace inside the sandbox (`/workspace`).
        network: `host` shares the host's network namespace; anything else leaves a private
            loopback only (`gateway` adds its way out through `gateway_link`).
        read_only_paths: Host directories bound read-only besides the system's runtime.
        hidden: Host paths to cover where they lie under a bound directory (task data).
        gateway_link: The options that put a gateway link's socket in the sandbox
            (`GatewayLink.bwrap_options`).
    """
    bound = [*RUNTIME_DIRS, *read_only_paths]
    hidden_all = [*hidden, *installed_agent_rl_packages(bound)]
    # A path under /tmp would be covered by the private /tmp: it is bound after it.
    in_tmp = [path for path in read_only_paths if _under(Path(path), [Path("/tmp")])]
    elsewhere = [path for path in read_only_paths if path not in in_tmp]
    argv = [*runtime_binds(elsewhere)]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--bind", str(workspace_host), str(mount_point), "--bind", str(tmp_host), "/tmp"]
    argv += [arg for path in in_tmp if os.path.isdir(path) for arg in ("--ro-bind", path, path)]
    argv += hide_args(hidden_all, bound)
    argv += gateway_link
    # The root is bwrap's tmpfs; once every mount point exists, nothing new may appear in it.
    argv += ["--remount-ro", "/"]
    argv += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID)]
    argv += ["--gid", str(SANDBOX_UID), "--cap-drop", "ALL", "--hostname", "sandbox"]
    if network == "host":
        argv.append("--share-net")
    return [*argv, "--die-with-parent", "--new-session"]


def command_options(*, cwd: PurePosixPath, env: Mapping[str, str]) -> list[str]:
    """The bwrap options of one command: its working directory and whole environment
    (everything else is cleared)."""
    argv = ["--chdir", str(cwd), "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return argv


def options_file(options: Sequence[str]) -> int:
    """A file descriptor that holds `options` NUL-separated, for `bwrap --args FD`.

    The caller passes it to the child (`pass_fds`) and closes it once the child has started.
    """
    fd = os.memfd_create("bwrap-args")
    try:
        data = memoryview(b"".join(option.encode() + b"\0" for option in options))
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def bwrap_argv(bwrap: str, *, options_fd: int, command: Sequence[str]) -> list[str]:
    """The bwrap invocation that runs `command` with the options behind `options_fd`."""
    return [bwrap, "--args", str(options_fd), "--", *command]
