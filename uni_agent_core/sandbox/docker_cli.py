"""`run_cli`: runs a host command (a `docker ...` invocation) with a timeout and capped output.

`DockerSandbox` reaches the CLI through a `CommandRunner`, so tests inject a fake that records
argv; `run_cli` is the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CliResult:
    """What one host command (a `docker ...` invocation) did."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    """The command passed its host-side timeout and was killed."""
    stdout_dropped: int = 0
    """Bytes of stdout beyond `max_output_bytes`, not kept."""
    stderr_dropped: int = 0
    """Bytes of stderr beyond `max_output_bytes`, not kept."""


class CommandRunner(Protocol):
    """Runs a host command; the default is `run_cli`, tests inject fakes."""

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        stdin: bytes | None = None,
        max_output_bytes: int | None = None,
    ) -> CliResult: ...


async def run_cli(
    argv: Sequence[str],
    *,
    timeout_s: float,
    stdin: bytes | None = None,
    max_output_bytes: int | None = None,
) -> CliResult:
    """Runs a host command in its own process group, killed on timeout or cancellation.

    Args:
        argv: Program and arguments.
        timeout_s: Seconds until the process group is killed and the result says `timed_out`.
        stdin: Bytes fed to the command's stdin (None: /dev/null).
        max_output_bytes: Bytes kept of stdout and of stderr (None: all).
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None
    readers = [
        asyncio.ensure_future(_read_capped(process.stdout, max_output_bytes)),
        asyncio.ensure_future(_read_capped(process.stderr, max_output_bytes)),
    ]
    try:
        timed_out = False
        try:
            async with asyncio.timeout(timeout_s):
                if stdin is not None:
                    assert process.stdin is not None
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                        process.stdin.write(stdin)
                        await process.stdin.drain()
                        process.stdin.close()
                await process.wait()
        except TimeoutError:
            timed_out = True
            _kill_group(process)
            await process.wait()
        done, _ = await asyncio.wait(readers, timeout=1.0)
        (out, out_dropped), (err, err_dropped) = (
            r.result() if r in done else (b"", 0) for r in readers
        )
        assert process.returncode is not None
        return CliResult(process.returncode, out, err, timed_out, out_dropped, err_dropped)
    finally:
        if process.returncode is None:
            _kill_group(process)
        for reader in readers:
            reader.cancel()


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


async def _read_capped(stream: asyncio.StreamReader, cap: int | None) -> tuple[bytes, int]:
    kept = bytearray()
    dropped = 0
    while chunk := await stream.read(1 << 16):
        room = len(chunk) if cap is None else max(cap - len(kept), 0)
        kept += chunk[:room]
        dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped
