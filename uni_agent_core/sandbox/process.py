"""One command as a killable process group with capped output (the local sandbox's `exec`).

The command starts in a new session, so its process group can be killed as a whole; in the
bubblewrap sandbox the group's leader is bwrap, whose death takes the command's whole pid
namespace with it. Output is read while the command runs and kept up to a cap per stream, so a
chatty command cannot exhaust the host's memory; the rest is counted and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.sandbox.base import SandboxError

_READ_CHUNK = 1 << 16
_DRAIN_GRACE_S = 1.0
"""How long output may keep flowing after the command's group is dead (only processes that
left the group, possible without bubblewrap, can hold the pipes longer)."""
_REAP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Finished:
    """How a process ended and what it wrote."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def kill_group(process: asyncio.subprocess.Process) -> None:
    """SIGKILLs the process group that `process` leads (it was started in its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    timeout_s: float,
    max_output_bytes: int,
    on_start: Callable[[asyncio.subprocess.Process], None],
    on_end: Callable[[asyncio.subprocess.Process], None],
    pass_fds: Sequence[int] = (),
) -> Finished:
    """Runs `argv` and kills its process group when it exits, times out or is cancelled.

    Args:
        argv: Program and arguments.
        env: The process's whole environment.
        cwd: Host working directory of the process.
        timeout_s: Seconds until the group is killed and the result says `timed_out`.
        max_output_bytes: Bytes kept per stream; more is dropped and the text says how much.
        on_start: Called with the process once it exists (so a deadline can kill it).
        on_end: Called with the process once it is dead and reaped.
        pass_fds: File descriptors the process inherits (bwrap's options).

    Raises:
        SandboxError: The killed process was not reaped within a few seconds.
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        pass_fds=tuple(pass_fds),
    )
    on_start(process)
    assert process.stdout is not None and process.stderr is not None
    readers = [
        asyncio.ensure_future(_read_capped(process.stdout, max_output_bytes)),
        asyncio.ensure_future(_read_capped(process.stderr, max_output_bytes)),
    ]
    try:
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                await process.wait()
        except TimeoutError:
            timed_out = True
        # Also after a normal exit: background children must not outlive their command.
        kill_group(process)
        try:
            async with asyncio.timeout(_REAP_TIMEOUT_S):
                await process.wait()
        except TimeoutError as e:
            raise SandboxError(f"process {process.pid} survived SIGKILL") from e
        done, _ = await asyncio.wait(readers, timeout=_DRAIN_GRACE_S)
        stdout, stderr = (_decode(*r.result()) if r in done else _LEFT_OPEN for r in readers)
        returncode = process.returncode
        assert returncode is not None
        return Finished(returncode, stdout, stderr, timed_out)
    finally:
        if process.returncode is None:
            kill_group(process)
        for reader in readers:
            reader.cancel()
        on_end(process)


_LEFT_OPEN = "[output unavailable: a background process kept the stream open]"


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(_READ_CHUNK):
        room = max(cap - len(kept), 0)
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped


def _decode(data: bytes, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    if dropped:
        text += f"\n[output truncated: {dropped} more bytes dropped]"
    return text
