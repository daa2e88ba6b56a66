"""Gateway-only egress: a bubblewrap sandbox's commands reach the episode's gateway and nothing
else (`sandbox.network: gateway`).

Each bubblewrap command runs in a network namespace of its own with a loopback interface and
nothing else: no route to the host, its other interfaces, a DNS server or the internet.
`GatewayLink` gives that namespace one way out, to the gateway's address alone:

- **On the host**, a Unix socket in the sandbox's host directory; every connection to it is piped
  to the gateway's TCP address by an asyncio server in the rollout process.
- **Inside**, that socket is bound at `/run/agent-rl/gateway.sock`, and each command first starts
  `socat` listening on `127.0.0.1:<the gateway's port>` in the command's namespace, piping each
  connection to the socket. The agent's gateway URLs (`http://127.0.0.1:<port>/...`) work
  unchanged.

The socket leads to the gateway's address only, whatever the agent sends through it. An agent
can kill its own `socat` (losing only its own access) or connect to the socket directly (reaching
the same gateway); it cannot name another destination. What reaches the gateway is its data
plane only: the agent holds its session's key, never the control key (`gateway/manager.py`).

Each link holds at most `MAX_CONNECTIONS` connections at once (more are closed as they arrive,
counted in `refused`), and closes a connection on which nothing moved either way for
`IDLE_TIMEOUT_S` (counted in `idle_closed`): an agent that opens and holds thousands of
connections costs the host `3 * MAX_CONNECTIONS` descriptors (its socket, the pipe's connection
to the gateway, the gateway's end), not the process's whole budget, so one sandbox cannot starve
the gateway or another sandbox. The first link raises the process's soft descriptor limit to
its hard one. `socat` comes from the host's `/usr`
(bound read-only in every sandbox): `find_socat` says how to install it where it is missing.

A Unix socket's path holds at most `MAX_SOCKET_PATH_BYTES`: a sandbox directory deep in a run
directory (or a test's temporary one) can pass it, so such a link listens in a short directory of
its own under the system's temporary directory instead, removed with the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import os
import resource
import shlex
import shutil
import tempfile
import time
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from uni_agent_core.sandbox.base import SandboxError

SANDBOX_SOCKET = PurePosixPath("/run/agent-rl/gateway.sock")
"""Where the host's end of the link appears inside the sandbox."""

INSTALL_HINT = "install socat (`apt-get install socat`, `dnf install socat`)"

MAX_CONNECTIONS = 32
"""Connections one sandbox's link holds at once (an agent CLI uses a few)."""

IDLE_TIMEOUT_S = 600.0
"""A connection with no bytes either way for this long is closed (longer than any one
generation: a non-streamed reply is silent until it is whole)."""

MAX_SOCKET_PATH_BYTES = 107
"""The longest path a Unix socket binds to (`sun_path` is 108 bytes with its terminating NUL)."""

_CHUNK = 1 << 16
_LISTEN_WAIT_TRIES = 400
"""Checks, 5 ms apart, that the in-sandbox listener is up before the command runs (2 s)."""


def find_socat() -> str:
    """The `socat` the sandboxes run (on the host's PATH, under a bound `/usr`).

    Raises:
        SandboxError: there is none; the message says how to install it.
    """
    path = shutil.which("socat")
    if path is None:
        raise SandboxError(f"`sandbox.network: gateway` needs socat on this host: {INSTALL_HINT}")
    return path


def loopback_address(url: str) -> tuple[str, int]:
    """The gateway's host and port from one of its URLs, which must be on this host's loopback
    (the in-sandbox end listens on 127.0.0.1 at the same port, so the URL works unchanged).

    Raises:
        ValueError: the URL has no port, or its host is not a loopback address.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        address = ipaddress.ip_address(host)
        loopback = address.version == 4 and address.is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(
            "`sandbox.network: gateway` links a sandbox to a gateway on this host's IPv4 "
            f"loopback; {url!r} is not on it"
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return ("127.0.0.1" if host == "localhost" else host), port


class GatewayLink:
    """The host's end of one sandbox's link to its gateway (see the module docstring)."""

    def __init__(
        self,
        socket_path: Path | None,
        *,
        socat: str,
        max_connections: int = MAX_CONNECTIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        """Args:
        socket_path: the host-side Unix socket (in the sandbox's host directory); None: one in
            a directory of the link's own (a container's sandbox has no host directory).
        socat: the `socat` the sandbox runs (`find_socat`'s, under a directory bound into a
            bubblewrap sandbox; the image's own in a container).
        max_connections: connections held at once; more are closed as they arrive.
        idle_timeout_s: a connection silent both ways for this long is closed.
        """
        self.socket_path = socket_path or Path("gateway.sock")
        self.socat = socat
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.refused = 0
        """Connections closed on arrival: the link held `max_connections` already."""
        self.idle_closed = 0
        """Connections closed after `idle_timeout_s` without a byte."""
        self.host: str | None = None
        """The gateway's loopback address, once `connect` named it."""
        self.port: int | None = None
        """The gateway's port (the in-sandbox listener takes the same one)."""
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._own_dir = socket_path is None or len(os.fsencode(socket_path)) > MAX_SOCKET_PATH_BYTES
        self._short_dir: Path | None = None

    async def start(self) -> None:
        """Listen on the host-side socket (mode 0666: the sandbox's `nobody` connects).

        No `socket_path`, or one longer than a Unix socket allows, is replaced by one in a short
        directory of the link's own (`socket_path` then names it; `close` removes it).
        """
        raise_open_files_limit()
        if self._own_dir:
            self._short_dir = Path(tempfile.mkdtemp(prefix="agent-rl-link-"))
            self._short_dir.chmod(0o755)  # the sandbox's `nobody` reaches the socket through it
            self.socket_path = self._short_dir / self.socket_path.name
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket_path))
        os.chmod(self.socket_path, 0o666)

    def connect(self, host: str, port: int) -> None:
        """Name the gateway the socket leads to (connections before this are closed).

        Raises:
            ValueError: the link leads to another gateway already.
        """
        if self.port is not None and (self.host, self.port) != (host, port):
            raise ValueError(
                f"this sandbox is linked to the gateway at {self.host}:{self.port} already, "
                f"not {host}:{port}"
            )
        self.host, self.port = host, port

    def bwrap_options(self) -> list[str]:
        """bwrap's options that put the host-side socket in the sandbox."""
        return ["--ro-bind", str(self.socket_path), str(SANDBOX_SOCKET)]

    def listener_argv(self) -> list[str]:
        """The in-sandbox listener: `socat` on the gateway's loopback port, piping each
        connection to the socket."""
        if self.host is None or self.port is None:
            raise RuntimeError("the gateway link is not connected to a gateway")
        # nodelay: without it, the small writes of a streamed reply wait out the client's
        # delayed ACK (measured: +43 ms per streamed call on a kept-alive connection)
        return [
            self.socat,
            f"TCP-LISTEN:{self.port},bind={self.host},reuseaddr,fork,nodelay",
            f"UNIX-CONNECT:{SANDBOX_SOCKET}",
        ]

    def wait_listening(self) -> str:
        """Bash that waits (2 s at most) until the in-sandbox listener is up; it fails after
        that."""
        assert self.host is not None and self.port is not None
        address = f"{_proc_net_hex(self.host)}:{self.port:04X}"
        return (
            f"for ((__agent_rl_i = 0; __agent_rl_i < {_LISTEN_WAIT_TRIES}; __agent_rl_i++)); do\n"
            "  __agent_rl_up=0\n"
            "  while read -r _ __agent_rl_local _ __agent_rl_state _; do\n"
            f"    [[ $__agent_rl_local == {address} && $__agent_rl_state == 0A ]] && "
            "__agent_rl_up=1\n"
            "  done </proc/net/tcp\n"
            "  (( __agent_rl_up )) && break\n"
            "  sleep 0.005\n"
            "done\n"
            "(( __agent_rl_up )); __agent_rl_rc=$?\n"
            "unset __agent_rl_i __agent_rl_up __agent_rl_local __agent_rl_state\n"
        )

    def command_prelude(self) -> str:
        """Bash that starts the in-sandbox listener (detached, so the command's own `wait` does
        not wait for it; it dies with the command's namespace) and waits until it listens."""
        listener = " ".join(shlex.quote(arg) for arg in self.listener_argv())
        return (
            f"( exec {listener} </dev/null >/dev/null 2>&1 & )\n"
            + self.wait_listening()
            + "unset __agent_rl_rc\n"
        )

    async def close(self) -> None:
        """Stop listening, end open connections and remove the socket (idempotent)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for pipe in list(self._pipes):
            pipe.cancel()
        if self._pipes:
            await asyncio.gather(*self._pipes, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self._short_dir is not None:
            shutil.rmtree(self._short_dir, ignore_errors=True)
            self._short_dir = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._pipes) >= self.max_connections:
            self.refused += 1
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        try:
            if self.host is None or self.port is None:
                return  # no gateway named yet: the agent sees its connection closed
            try:
                up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                return  # the gateway is gone: the agent sees its connection closed
            try:
                await self._pipe(reader, writer, up_reader, up_writer)
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._pipes.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Both directions until each has ended, or until nothing moved for the idle
        timeout."""
        moved = [time.monotonic()]
        both = asyncio.gather(_copy(reader, up_writer, moved), _copy(up_reader, writer, moved))
        try:
            while True:
                left = moved[0] + self.idle_timeout_s - time.monotonic()
                if left <= 0:
                    self.idle_closed += 1
                    return
                done, _ = await asyncio.wait({both}, timeout=left)
                if done:
                    return
        finally:
            if not both.done():
                both.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await both


DESCRIPTORS_PER_CONNECTION = 3
"""Host descriptors one linked connection holds: its socket, the pipe's connection to the
gateway, and the gateway's end of that connection (same process when embedded)."""


def descriptor_budget_problem(sandboxes: int) -> str | None:
    """Why `sandboxes` linked sandboxes at once could run this process out of descriptors
    (their links full, with half the limit left for everything else), or None."""
    needed = sandboxes * MAX_CONNECTIONS * DESCRIPTORS_PER_CONNECTION
    limit = raise_open_files_limit()
    if needed <= limit // 2:
        return None
    return (
        f"{sandboxes} sandboxes at once may hold {needed} descriptors through their gateway "
        f"links ({MAX_CONNECTIONS} connections each), over half of this process's limit of "
        f"{limit}: raise it (`ulimit -n`) or run fewer episodes at once"
    )


@functools.cache
def raise_open_files_limit() -> int:
    """Raises this process's soft limit on open descriptors to its hard one (once); returns
    the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


async def _copy(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, moved: list[float]
) -> None:
    """Bytes from `source` to `sink` until EOF, then half-close `sink`; a reset ends it.
    `moved[0]` is set to the time of each chunk."""
    try:
        while chunk := await source.read(_CHUNK):
            moved[0] = time.monotonic()
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        pass


def _proc_net_hex(host: str) -> str:
    """An IPv4 address as `/proc/net/tcp` writes it (little-endian hex)."""
    return "".join(f"{int(octet):02X}" for octet in reversed(host.split(".")))
