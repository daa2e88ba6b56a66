"""Latency that gateway-only egress adds to an agent's model calls, against the host's network.

    python bench/gateway_egress.py [--calls 300] [--chunks 32]

An agent inside a bubblewrap sandbox makes HTTP calls to a gateway-shaped server on this host's
loopback (in this process, like the embedded gateway): `POST /v1/chat/completions` answered
whole (a ~1 KiB JSON body), and streamed (`--chunks` server-sent events, each flushed). Calls
reuse one kept-alive connection, as the CLIs' HTTP clients do, or open one each (the costly
case for the link: a connection costs a fork of the in-sandbox socat and a connection from the
rollout process to the gateway). The same calls run from a `network: host` sandbox (the host's
network namespace: the direct path) and from a `network: gateway` one (`sandbox/gateway_link.py`:
socat in the sandbox, a Unix socket, the rollout process's pipe to the gateway), alternating
rounds so that both see the same machine. Printed per kind of call: median and p90 of each
path, in ms, and the added median; the target is <= 1 ms added per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile

from uni_agent_core.sandbox.local import LocalSandbox

CLIENT = r"""
import http.client, json, sys, time
port, calls, kind, connections = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
body = json.dumps({"model": "m", "stream": kind == "stream",
                   "messages": [{"role": "user", "content": "x" * 512}]})
seconds, connection = [], None
for _ in range(calls):
    start = time.perf_counter()
    if connection is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("POST", "/v1/chat/completions", body,
                       {"Content-Type": "application/json"})
    connection.getresponse().read()
    if connections == "new":
        connection.close()
        connection = None
    seconds.append(time.perf_counter() - start)
print(json.dumps(seconds))
"""

CALLS = [("reused", "whole"), ("reused", "stream"), ("new", "whole"), ("new", "stream")]
"""(connection, reply) of each measured kind of call."""

REPLY = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "y" * 900}}],
    }
).encode()


async def serve(chunks: int) -> asyncio.Server:
    """A gateway-shaped HTTP/1.1 server that keeps connections alive: whole replies, or
    `chunks` server-sent events, each flushed as one chunk of a chunked reply."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                request = json.loads(await reader.readexactly(length))
                if request.get("stream"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n"
                    )
                    for i in range(chunks):
                        event = b'data: {"choices":[{"delta":{"content":"tok%d"}}]}\n\n' % i
                        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
                        await writer.drain()
                    writer.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(REPLY), REPLY)
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


async def calls_from(
    sandbox: LocalSandbox, port: int, calls: int, kind: str, connections: str
) -> list[float]:
    result = await sandbox.exec(
        f"python3 client.py {port} {calls} {kind} {connections}", timeout=600
    )
    if not result.ok:
        raise SystemExit(f"the client failed in the sandbox: {result.stderr.strip()[-500:]}")
    return json.loads(result.stdout)


async def measure(
    calls: int, chunks: int, rounds: int = 4
) -> dict[tuple[str, str, str], list[float]]:
    server = await serve(chunks)
    port = server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    seconds: dict[tuple[str, str, str], list[float]] = {}
    root = tempfile.mkdtemp(prefix="bench-egress-")
    try:
        async with (
            LocalSandbox(root_dir=root, network="host") as direct,
            LocalSandbox(root_dir=root, network="gateway") as linked,
        ):
            await linked.connect_gateway(url)
            for sandbox in (direct, linked):
                await sandbox.write_file("client.py", CLIENT)
            per_round = max(1, calls // rounds)
            for round_ in range(rounds):
                for connections, kind in CALLS:
                    for mode, sandbox in (("host", direct), ("gateway", linked)):
                        seconds.setdefault((connections, kind, mode), []).extend(
                            await calls_from(sandbox, port, per_round, kind, connections)
                        )
                print(f"round {round_ + 1}/{rounds} done", file=sys.stderr, flush=True)
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per kind and path")
    parser.add_argument("--chunks", type=int, default=32, help="events of a streamed reply")
    args = parser.parse_args()
    if shutil.which("bwrap") is None or shutil.which("socat") is None:
        raise SystemExit("needs bubblewrap and socat (make setup installs both)")
    seconds = asyncio.run(measure(args.calls, args.chunks))

    def ms(values: list[float], q: float) -> float:
        return 1000 * statistics.quantiles(values, n=100)[int(q * 100) - 1]

    print(f"{args.calls} calls per kind and path; streamed replies of {args.chunks} events")
    print(
        f"{'connection':<12}{'reply':<8}{'host p50':>10}{'host p90':>10}{'gateway p50':>13}"
        f"{'gateway p90':>13}{'added p50':>11}{'target':>9}"
    )
    for connections, kind in CALLS:
        host = seconds[(connections, kind, "host")]
        linked = seconds[(connections, kind, "gateway")]
        added = 1000 * (statistics.median(linked) - statistics.median(host))
        print(
            f"{connections:<12}{kind:<8}{1000 * statistics.median(host):>10.2f}"
            f"{ms(host, 0.9):>10.2f}{1000 * statistics.median(linked):>13.2f}"
            f"{ms(linked, 0.9):>13.2f}{added:>11.2f}{'met' if added <= 1.0 else 'MISSED':>9}"
        )


if __name__ == "__main__":
    main()
