"""The host's end of a sandbox's gateway link bounds what one agent can hold (issue 48,
finding 4: 7,000 held connections exhausted the host's descriptors): connections past the cap
are closed as they arrive, and silent ones are closed after the idle timeout."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from uni_agent_core.sandbox.gateway_link import (
    GatewayLink,
    descriptor_budget_problem,
    raise_open_files_limit,
)


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@contextlib.asynccontextmanager
async def _linked(socket_path: Path | None = None, **limits: float) -> AsyncIterator[GatewayLink]:
    """A started link to an echo server (by default in a directory of the link's own)."""
    upstream, port = await _echo_server()
    link = GatewayLink(socket_path, socat="socat", **limits)
    link.connect("127.0.0.1", port)
    await link.start()
    try:
        yield link
    finally:
        await link.close()
        upstream.close()


async def _closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout=2) == b""
    except (TimeoutError, ConnectionError):
        return False


def test_connections_past_the_cap_are_closed_and_counted() -> None:
    async def main() -> None:
        async with _linked(max_connections=4) as link:
            held = [await asyncio.open_unix_connection(link.socket_path) for _ in range(4)]
            for reader, writer in held:  # each of the first four is piped through
                writer.write(b"ping")
                assert await asyncio.wait_for(reader.readexactly(4), timeout=2) == b"ping"
            extra = [await asyncio.open_unix_connection(link.socket_path) for _ in range(20)]
            assert all([await _closed_by_peer(reader) for reader, _ in extra])
            assert link.refused == 20 and len(link._pipes) == 4
            held[0][1].close()  # a slot freed is a slot to use again
            await asyncio.sleep(0.1)
            reader, writer = await asyncio.open_unix_connection(link.socket_path)
            writer.write(b"pong")
            assert await asyncio.wait_for(reader.readexactly(4), timeout=2) == b"pong"
            for _, w in [*held[1:], *extra, (reader, writer)]:
                w.close()

    asyncio.run(main())


def test_a_silent_connection_is_closed_after_the_idle_timeout() -> None:
    async def main() -> None:
        async with _linked(idle_timeout_s=0.3) as link:
            busy_reader, busy = await asyncio.open_unix_connection(link.socket_path)
            silent_reader, silent = await asyncio.open_unix_connection(link.socket_path)
            for _ in range(6):  # 0.6 s of traffic on one, nothing on the other
                busy.write(b"x")
                assert await asyncio.wait_for(busy_reader.readexactly(1), timeout=2) == b"x"
                await asyncio.sleep(0.1)
            assert await _closed_by_peer(silent_reader)
            assert link.idle_closed >= 1
            busy.write(b"y")
            assert await asyncio.wait_for(busy_reader.readexactly(1), timeout=2) == b"y"
            busy.close()
            silent.close()

    asyncio.run(main())


def test_the_descriptor_limit_is_raised_to_the_hard_one() -> None:
    import resource

    assert raise_open_files_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def test_a_concurrency_the_descriptor_limit_cannot_hold_is_named() -> None:
    limit = raise_open_files_limit()
    assert descriptor_budget_problem(1) is None
    problem = descriptor_budget_problem(limit)
    assert problem is not None and "ulimit -n" in problem


@pytest.mark.parametrize("wanted", ["too long", None])
def test_a_socket_path_too_long_or_none_moves_to_a_directory_of_the_links_own(
    tmp_path, wanted
) -> None:
    if wanted == "too long":
        deep = tmp_path / ("d" * 60) / ("e" * 60)
        deep.mkdir(parents=True)
        wanted = deep / "gateway.sock"
        assert len(str(wanted)) > 108  # AF_UNIX would refuse to bind it

    async def main() -> Path:
        async with _linked(wanted) as link:
            assert link.socket_path != wanted and link.socket_path.name == "gateway.sock"
            assert len(str(link.socket_path)) <= 107
            assert link.bwrap_options() == [
                "--ro-bind",
                str(link.socket_path),
                "/run/agent-rl/gateway.sock",
            ]
            reader, writer = await asyncio.open_unix_connection(link.socket_path)
            writer.write(b"ping")
            assert await asyncio.wait_for(reader.readexactly(4), timeout=2) == b"ping"
            writer.close()
            return link.socket_path.parent

    short_dir = asyncio.run(main())
    assert not short_dir.exists()  # removed with the link
    assert wanted is None or not wanted.exists()
