"""Playing the agent inside a `network: gateway` bubblewrap sandbox: its gateway answers; another
service on the host's loopback, the host's other interfaces, DNS and an outside address do not.
The same probes from a `network: host` sandbox show what the mode takes away."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

import pytest

from uni_agent_core.config.sandbox import DockerSandboxConfig, ModalSandboxConfig
from uni_agent_core.sandbox.gateway_link import loopback_address
from uni_agent_core.sandbox.local import LocalSandbox

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("socat") is None,
    reason="needs bubblewrap and socat (make setup installs both)",
)

# bash alone (no curl in the sandbox): one HTTP/1.1 request over /dev/tcp, the reply on stdout
HTTP_GET = (
    "exec 3<>/dev/tcp/{host}/{port} && "
    'printf "GET /v1/models HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n" >&3 && '
    "cat <&3"
)


async def _http_server(name: str, host: str = "127.0.0.1") -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = name.encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, host, 0)


def _port(server: asyncio.Server) -> int:
    return server.sockets[0].getsockname()[1]


def _host_address() -> str | None:
    """One of this host's non-loopback IPv4 addresses (the route to the outside), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


async def _probes(sandbox: LocalSandbox, gateway: int, other: int, exposed: int | None):
    """What an agent's commands reach: (gateway, other service, host's other interface,
    outside address, DNS) as bools."""

    async def ok(command: str) -> bool:
        return (await sandbox.exec(command, timeout=20)).ok

    reached_gateway = await sandbox.exec(HTTP_GET.format(host="127.0.0.1", port=gateway))
    host = _host_address()
    return (
        reached_gateway.ok and reached_gateway.stdout.endswith("gateway"),
        await ok(HTTP_GET.format(host="127.0.0.1", port=other)),
        None
        if host is None or exposed is None
        else await ok(HTTP_GET.format(host=host, port=exposed)),
        await ok("timeout 5 bash -c 'exec 3<>/dev/tcp/192.0.2.1/80'"),
        await ok("getent hosts pypi.org"),
    )


def test_a_gateway_only_sandbox_reaches_its_gateway_and_nothing_else(tmp_path: Path) -> None:
    async def main() -> tuple:
        gateway, other = await _http_server("gateway"), await _http_server("other")
        exposed = await _http_server("exposed", host="0.0.0.0")
        try:
            async with LocalSandbox(root_dir=str(tmp_path), network="gateway") as sandbox:
                await sandbox.connect_gateway(f"http://127.0.0.1:{_port(gateway)}/v1")
                found = await _probes(sandbox, _port(gateway), _port(other), _port(exposed))
                again = await sandbox.exec(HTTP_GET.format(host="127.0.0.1", port=_port(gateway)))
            return found, again.ok
        finally:
            for server in (gateway, other, exposed):
                server.close()

    (gateway, other, interface, outside, dns), again = asyncio.run(main())
    assert gateway and again  # every command gets its own way to the gateway
    assert not other
    assert interface in (False, None)
    assert not outside
    assert not dns


def test_the_host_network_reaches_the_hosts_other_services(tmp_path: Path) -> None:
    """What `network: host` exposes, and `gateway` takes away."""

    async def main() -> tuple:
        gateway, other = await _http_server("gateway"), await _http_server("other")
        try:
            async with LocalSandbox(root_dir=str(tmp_path), network="host") as sandbox:
                await sandbox.connect_gateway(f"http://127.0.0.1:{_port(gateway)}/v1")  # no-op
                return await _probes(sandbox, _port(gateway), _port(other), None)
        finally:
            gateway.close()
            other.close()

    gateway, other, *_ = asyncio.run(main())
    assert gateway and other


def test_the_link_ends_with_the_sandbox(tmp_path: Path) -> None:
    async def main() -> tuple[bool, bool]:
        gateway = await _http_server("gateway")
        try:
            async with LocalSandbox(root_dir=str(tmp_path), network="gateway") as sandbox:
                await sandbox.connect_gateway(f"http://127.0.0.1:{_port(gateway)}/v1")
                link = sandbox.gateway_link
                assert link is not None
                existed = link.socket_path.exists()
            return existed, link.socket_path.exists()
        finally:
            gateway.close()

    assert asyncio.run(main()) == (True, False)


def test_a_no_network_sandbox_refuses_a_gateway_link(tmp_path: Path) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), network="none") as sandbox:
            await sandbox.connect_gateway("http://127.0.0.1:9/v1")

    with pytest.raises(ValueError, match="sandbox.network: gateway"):
        asyncio.run(main())


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000/v1", "http://[::1]:8000/v1", "http://x/v1"])
def test_a_link_goes_to_this_hosts_ipv4_loopback_only(url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        loopback_address(url)
    assert loopback_address("http://localhost:8000/v1") == ("127.0.0.1", 8000)


@pytest.mark.parametrize("section", [DockerSandboxConfig, ModalSandboxConfig])
def test_container_backends_read_booleans_and_modal_refuses_gateway_only(section) -> None:
    if section is ModalSandboxConfig:
        with pytest.raises(ValueError, match="gateway"):
            section(network="gateway")
    assert section(network=True).network == "host"
    assert section(network=False).network == "none"


STREAMED_CALLS = r"""
import http.client, json, statistics, sys, time
connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
seconds = []
for _ in range(7):
    start = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", json.dumps({"stream": True, "x": "y" * 512}),
                       {"Content-Type": "application/json"})
    connection.getresponse().read()
    seconds.append(time.perf_counter() - start)
print(statistics.median(seconds))
"""


async def _streaming_server() -> asyncio.Server:
    """Kept-alive connections; each reply is 64 server-sent events, each flushed on its own."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for i in range(64):
                    event = b'data: {"choices":[{"delta":{"content":"tok%02d"}}]}\n\n' % i
                    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def test_a_streamed_reply_is_not_held_back_by_the_link(tmp_path: Path) -> None:
    """Small flushed writes (token streaming) pass at once: without TCP_NODELAY on the
    in-sandbox listener each streamed call waited out the client's delayed ACK (~40 ms)."""

    async def main() -> float:
        server = await _streaming_server()
        try:
            async with LocalSandbox(root_dir=str(tmp_path), network="gateway") as sandbox:
                await sandbox.connect_gateway(f"http://127.0.0.1:{_port(server)}/v1")
                await sandbox.write_file("calls.py", STREAMED_CALLS)
                result = await sandbox.exec(f"python3 calls.py {_port(server)}", timeout=60)
                assert result.ok, result.stderr
                return float(result.stdout)
        finally:
            server.close()

    if shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") is None:
        pytest.skip("no python3 for the sandbox")
    assert asyncio.run(main()) < 0.02
