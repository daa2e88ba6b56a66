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
def test_container_backends_refuse_gateway_only_and_read_booleans(section) -> None:
    with pytest.raises(ValueError, match="gateway"):
        section(network="gateway")
    assert section(network=True).network == "host"
    assert section(network=False).network == "none"
