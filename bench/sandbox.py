"""Benchmark sandbox start-up and command round trips: LocalSandbox vs SWE-ReX.

    python bench/sandbox.py [--starts 50] [--execs 200] [--concurrent 32]

All figures come from the same run (this machine is noisy; compare the ratios), with
`LocalSandbox` (bubblewrap) as the baseline:

1. start latency, p50 and p99 over `--starts` sandboxes started one after another (`start()`
   including its probe command; `close()` not counted);
2. exec round trip of `true`, median and p99 over `--execs` calls in one sandbox;

for `LocalSandbox`, `SwerexSandbox` on swe-rex's in-process `LocalDeployment` (no isolation), and
`SwerexSandbox` on a `swerex-remote` server on 127.0.0.1 (the HTTP path of the `swerex` type);
3. `--concurrent` LocalSandboxes at once: wall time to start all, exec `true` in all, close all,
   and the per-sandbox start and exec latencies within those phases.

Everything stays on this host (loopback only); every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.sandbox.swerex import SwerexSandbox

TOKEN = "bench-token"


@dataclass
class Row:
    name: str
    start_s: list[float]
    exec_s: list[float]


def p(samples: list[float], q: float) -> float:
    """The q-quantile (0..1) of `samples`, interpolated."""
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=1000, method="inclusive")[round(q * 1000) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


async def measure(name: str, make: Callable[[], Sandbox], starts: int, execs: int) -> Row:
    start_s: list[float] = []
    for i in range(starts):
        sandbox = make()
        began = time.perf_counter()
        await sandbox.start()
        start_s.append(time.perf_counter() - began)
        if i < starts - 1:
            await sandbox.close()
    exec_s: list[float] = []
    try:
        for _ in range(execs):
            began = time.perf_counter()
            result = await sandbox.exec("true", timeout=30)
            exec_s.append(time.perf_counter() - began)
            assert result.ok, result
    finally:
        await sandbox.close()
    print(
        f"  {name}: {starts} starts, median {ms(statistics.median(start_s)).strip()} ms; "
        f"{execs} execs, median {ms(statistics.median(exec_s)).strip()} ms",
        flush=True,
    )
    return Row(name, start_s, exec_s)


@contextmanager
def swerex_server() -> Iterator[int]:
    """A `swerex-remote` server on 127.0.0.1; yields its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [sys.executable, "-m", "swerex", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(
        [*argv, "--auth-token", TOKEN], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError("swerex-remote did not listen within 30 s")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


@dataclass
class Burst:
    """Wall time of each phase of the concurrent run, and each sandbox's own latency."""

    start_wall_s: float
    exec_wall_s: float
    close_wall_s: float
    start_s: list[float]
    exec_s: list[float]


async def concurrent_local(count: int, root: str) -> Burst:
    """Starts `count` LocalSandboxes at once, runs `true` in all, closes all."""
    sandboxes = [LocalSandbox(root_dir=root) for _ in range(count)]

    async def timed(work: Awaitable[object]) -> float:
        began = time.perf_counter()
        await work
        return time.perf_counter() - began

    async def phase(works: list[Awaitable[object]]) -> tuple[float, list[float]]:
        began = time.perf_counter()
        each = await asyncio.gather(*(timed(w) for w in works))
        return time.perf_counter() - began, list(each)

    try:
        start_wall, start_each = await phase([sb.start() for sb in sandboxes])
        exec_wall, exec_each = await phase([sb.exec("true", timeout=60) for sb in sandboxes])
    finally:
        close_wall, _ = await phase([sb.close() for sb in sandboxes])
    return Burst(start_wall, exec_wall, close_wall, start_each, exec_each)


def print_table(rows: list[Row]) -> None:
    base = rows[0]
    base_start, base_exec = statistics.median(base.start_s), statistics.median(base.exec_s)
    print()
    header = (
        f"{'backend':<32} {'start p50':>10} {'start p99':>10} {'exec p50':>10} {'exec p99':>10}"
        f" {'start/base':>10} {'exec/base':>10}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        start, execs = statistics.median(row.start_s), statistics.median(row.exec_s)
        print(
            f"{row.name:<32} {ms(start):>10} {ms(p(row.start_s, 0.99)):>10} {ms(execs):>10}"
            f" {ms(p(row.exec_s, 0.99)):>10} {start / base_start:>9.2f}x {execs / base_exec:>9.2f}x"
        )
    print("(times in ms)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=50)
    parser.add_argument("--execs", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=32)
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("LocalSandbox needs bubblewrap (`bwrap`); install it first")

    with tempfile.TemporaryDirectory(prefix="agent-rl-bench-") as root:
        print("measuring (sequential starts, then execs in the last sandbox):", flush=True)
        rows = [
            await measure(
                "LocalSandbox (bubblewrap)",
                lambda: LocalSandbox(root_dir=root),
                args.starts,
                args.execs,
            )
        ]

        def swerex_local() -> Sandbox:
            workdir = tempfile.mkdtemp(dir=root)
            return SwerexSandbox(deployment="local", workdir=workdir)

        rows.append(await measure("swe-rex LocalDeployment", swerex_local, args.starts, args.execs))
        with swerex_server() as port:

            def swerex_remote() -> Sandbox:
                workdir = tempfile.mkdtemp(dir=root)
                return SwerexSandbox(
                    deployment="remote", port=port, auth_token=TOKEN, workdir=workdir
                )

            rows.append(
                await measure(
                    "swe-rex remote (loopback HTTP)", swerex_remote, args.starts, args.execs
                )
            )
        print_table(rows)

        print(f"\n{args.concurrent} concurrent LocalSandboxes:", flush=True)
        burst = await concurrent_local(args.concurrent, root)
        print(f"{'phase':<8} {'wall (ms)':>10} {'per-sandbox p50':>16} {'p99 (ms)':>9}")
        for phase, wall, each in (
            ("start", burst.start_wall_s, burst.start_s),
            ("exec", burst.exec_wall_s, burst.exec_s),
        ):
            print(
                f"{phase:<8} {ms(wall):>10} {ms(statistics.median(each)):>16}"
                f" {ms(p(each, 0.99)):>9}"
            )
        print(f"{'close':<8} {ms(burst.close_wall_s):>10}")
        base_start = statistics.median(rows[0].start_s)
        print(
            f"per-sandbox start p50 under {args.concurrent}-way concurrency: "
            f"{statistics.median(burst.start_s) / base_start:.2f}x the sequential p50"
        )


if __name__ == "__main__":
    asyncio.run(main())
