"""A lean HTTP/1.1 keep-alive client: the load generator of `bench/gateway.py` (not a public tool).

On this 2-core machine the load generator shares the cores with the gateway under test. httpx
spends about 0.8 ms of CPU on each request here, more than the gateway spends on a turn, so with
it the client, not the gateway, capped the measured turns/s. `LeanConnection` writes one request
with a prebuilt header block and reads a `Content-Length` response on one keep-alive connection
(asyncio streams), which costs the client a fraction of that. Only what the gateway's chat
endpoints send back is understood: a status line, headers, a `Content-Length` body.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class LeanConnection:
    """One keep-alive connection to `host:port`; `post` sends a request and reads its reply."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> LeanConnection:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        """POST `body` to `path`; returns the status code and the response body."""
        assert self._reader is not None and self._writer is not None, "not connected"
        lines = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, _, header_block = head.partition(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = None
        for line in header_block.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise ValueError(f"unsupported transfer encoding {value.strip()!r}")
        if length is None:
            raise ValueError(f"response without Content-Length: {head[:200]!r}")
        return status, await self._reader.readexactly(length)
