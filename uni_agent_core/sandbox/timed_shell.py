"""The in-sandbox command wrapper shared by the `docker`, `swerex` and `modal` backends.

Killing a transport client (a `docker exec` CLI, an HTTP request, an RPC) leaves its process
running in the sandbox. Every command instead runs under `timed_shell_argv`, a bash wrapper
*inside* the sandbox that starts it under GNU `timeout -s KILL` in a process group of its own,
kills that whole group when the command ends or times out (background children do not outlive
their command) and records the group in a pid file. A command whose client outlives its timeout,
or whose caller is cancelled, is killed through that pid file (`kill_group_argv`). This module
also owns turning the wrapper's exit into an `ExecResult` (`finish_exec`), output capping and
the `git diff` script every backend runs.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import signal
import uuid
from collections.abc import Mapping
from pathlib import PurePosixPath

from uni_agent_core.sandbox.base import ExecResult

DEFAULT_MAX_OUTPUT_BYTES = 10 * 1024 * 1024
TIMEOUT_EXIT_CODE = 124
KILLED_EXIT_CODE = 128 + signal.SIGKILL
EXEC_GRACE_S = 10.0
"""Time a transport (CLI, HTTP, RPC) may take beyond a command's in-sandbox timeout before the
host gives up on it."""
CONTROL_TIMEOUT_S = 30.0
"""Timeout of control commands: the pid-file kill, `mkdir` before a copy."""
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_TIMED_SHELL = """pidfile=$1 limit=$2 dir=$3 cmd=$4; shift 4
cd -- "$dir" || exit 1
timeout -s KILL "$limit" env -- "$@" bash -c "$cmd" &
pid=$!
echo "$pid" > "$pidfile" 2>/dev/null
wait "$pid" 2>/dev/null; rc=$?
kill -KILL -- "-$pid" 2>/dev/null
rm -f -- "$pidfile"
exit "$rc"
"""
# `timeout` (without --foreground) moves itself and the command into a new process group whose
# id is its pid, so `kill -- -$pid` reaches every process of the command that did not setsid.
# Background jobs of a non-interactive bash read /dev/null, like local commands.

_KILL_GROUP = 'pid=$(cat -- "$1" 2>/dev/null) && kill -KILL -- "-$pid" 2>/dev/null; rm -f -- "$1"'


def timed_shell_argv(
    command: str, *, limit_s: float, cwd: str, env: Mapping[str, str], pidfile: str
) -> list[str]:
    """The argv that runs `command` with bash inside a sandbox and kills it after `limit_s`.

    The sandbox needs bash and GNU coreutils (`timeout`, `env`).

    Args:
        command: A bash script.
        limit_s: Seconds until the command's whole process group gets SIGKILL (exit 137).
        cwd: Absolute working directory inside the sandbox.
        env: Extra environment of the command, on top of the sandbox's own.
        pidfile: Sandbox path where the wrapper records the command's process group.

    Raises:
        ValueError: An environment variable name is not a valid shell name.
    """
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"environment variable name {name!r} is not a valid shell name")
    assignments = [f"{name}={value}" for name, value in env.items()]
    limit = f"{limit_s:.3f}"
    return ["bash", "-c", _TIMED_SHELL, "agent-rl-exec", pidfile, limit, cwd, command, *assignments]


def kill_group_argv(pidfile: str) -> list[str]:
    """The argv that SIGKILLs the process group a `timed_shell_argv` command recorded."""
    return ["bash", "-c", _KILL_GROUP, "agent-rl-kill", pidfile]


def new_pidfile() -> str:
    """A fresh pid-file path for one command (in the sandbox's /tmp)."""
    return f"/tmp/.agent-rl-exec-{uuid.uuid4().hex}.pid"


def finish_exec(
    returncode: int, stdout: str, stderr: str, *, elapsed_s: float, limit_s: float
) -> ExecResult:
    """The `ExecResult` of a `timed_shell_argv` command.

    The wrapper's SIGKILL shows as exit 137, like any other SIGKILL; it counts as the timeout
    when at least `limit_s` passed on the host, which always holds for a real timeout (the host
    clock starts before the sandbox's). A timed-out command reports exit 124.
    """
    if returncode == KILLED_EXIT_CODE and elapsed_s >= limit_s:
        return ExecResult(TIMEOUT_EXIT_CODE, stdout, stderr, timed_out=True)
    return ExecResult(returncode, stdout, stderr)


def decode_capped(data: bytes, max_bytes: int | None, dropped: int = 0) -> str:
    """UTF-8 text of `data` cut to `max_bytes`, saying how much was dropped (as `LocalSandbox`)."""
    if max_bytes is not None and len(data) > max_bytes:
        dropped += len(data) - max_bytes
        data = data[:max_bytes]
    text = data.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[output truncated: {dropped} more bytes dropped]"
    return text


def diff_script(diff_base: str) -> str:
    """A bash script printing the patch from `diff_base` to the working tree, untracked files
    included.

    Files are staged into a throwaway index seeded from `diff_base`'s tree, so the repository's
    own index is untouched and every file is compared by content: a copied index would carry
    stat data that can call a same-size rewrite "unchanged" (git's racy-clean check is tied
    to the index file's own timestamp, which a copy does not keep).
    """
    base = shlex.quote(diff_base)
    return (
        "set -e; scratch=$(mktemp -d); trap 'rm -rf \"$scratch\"' EXIT; "
        'export GIT_INDEX_FILE="$scratch/index"; '
        f"git read-tree {base}; git add -A; "
        "git -c core.quotepath=off diff --cached --binary --no-color "
        f"--no-ext-diff {base} --"
    )


def sandbox_path(workdir: PurePosixPath, path: str) -> str:
    """`path` as an absolute, normalized sandbox path (relative paths are under `workdir`)."""
    return posixpath.normpath(workdir / path)
