"""SandboxPool: start retries with backoff, the start concurrency cap, warm spares, and closing
every sandbox on every path (errors, start timeouts, cancellation)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from uni_agent_core.sandbox.base import ExecResult, SandboxError
from uni_agent_core.sandbox.local import LocalSandbox
from uni_agent_core.sandbox.pool import SandboxPool


class FakeSandbox:
    """A sandbox whose start fails, hangs or is slow on demand; it records its life."""

    def __init__(self, fleet: Fleet, *, fail: bool, hang: bool) -> None:
        self.fleet = fleet
        self.fail = fail
        self.hang = hang
        self.started = False
        self.closed = False

    async def start(self) -> None:
        self.fleet.starting += 1
        self.fleet.peak_starting = max(self.fleet.peak_starting, self.fleet.starting)
        try:
            await asyncio.sleep(self.fleet.start_s)
            if self.hang:
                await asyncio.sleep(3600)
            if self.fail:
                raise SandboxError("start failed")
            self.started = True
        finally:
            self.fleet.starting -= 1

    async def exec(self, command: str, **_: object) -> ExecResult:
        return ExecResult(0, command, "")

    async def close(self) -> None:
        await asyncio.sleep(0.01)  # a close that yields, so cancellation can hit it
        if self.fleet.close_error:
            raise RuntimeError("close failed")
        self.closed = True


class Fleet:
    """A factory of fake sandboxes; `plan` says how each start goes, in order."""

    def __init__(self, plan: list[str] | None = None, *, start_s: float = 0.0) -> None:
        self.plan = list(plan or [])
        self.start_s = start_s
        self.made: list[FakeSandbox] = []
        self.start_times: list[float] = []
        self.starting = 0
        self.peak_starting = 0
        self.close_error = False

    def __call__(self) -> FakeSandbox:
        step = self.plan.pop(0) if self.plan else "ok"
        self.start_times.append(time.monotonic())
        sandbox = FakeSandbox(self, fail=step == "fail", hang=step == "hang")
        self.made.append(sandbox)
        return sandbox

    def all_closed(self) -> bool:
        return all(s.closed for s in self.made)


def test_failed_starts_are_retried_with_exponential_backoff() -> None:
    fleet = Fleet(["fail", "fail", "ok"])
    pool = SandboxPool(fleet, max_concurrent_starts=1, start_retries=3, backoff_s=0.05)

    async def main() -> None:
        async with pool.sandbox() as sb:
            assert isinstance(sb, FakeSandbox) and sb.started
            assert (await sb.exec("hi")).stdout == "hi"

    asyncio.run(main())
    gaps = [b - a for a, b in zip(fleet.start_times, fleet.start_times[1:], strict=False)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.10, gaps
    assert fleet.all_closed() and len(fleet.made) == 3
    s = pool.stats
    assert (s.start_attempts, s.started, s.start_failures, s.retries, s.exhausted) == (
        3,
        1,
        2,
        2,
        0,
    )
    assert s.closed == 3


def test_giving_up_after_the_last_retry_raises_and_closes_everything() -> None:
    fleet = Fleet(["fail"] * 5)
    pool = SandboxPool(fleet, max_concurrent_starts=2, start_retries=2, backoff_s=0.0)

    async def main() -> None:
        with pytest.raises(SandboxError, match="failed to start 3 times"):
            async with pool.sandbox():
                pytest.fail("the body must not run")

    asyncio.run(main())
    assert fleet.all_closed() and len(fleet.made) == 3
    assert (pool.stats.start_failures, pool.stats.exhausted) == (3, 1)


def test_a_hung_start_times_out_and_is_retried() -> None:
    fleet = Fleet(["hang", "ok"])
    pool = SandboxPool(
        fleet, max_concurrent_starts=1, start_retries=1, backoff_s=0.0, start_timeout_s=0.1
    )

    async def main() -> None:
        async with pool.sandbox() as sb:
            assert sb is fleet.made[1]

    asyncio.run(main())
    assert fleet.all_closed()
    assert (pool.stats.start_failures, pool.stats.retries) == (1, 1)


def test_errors_other_than_sandbox_errors_are_not_retried() -> None:
    def factory() -> FakeSandbox:
        raise OSError("no such image")

    pool = SandboxPool(factory, max_concurrent_starts=1, start_retries=3, backoff_s=0.0)

    async def main() -> None:
        with pytest.raises(OSError, match="no such image"):
            async with pool.sandbox():
                pass

    asyncio.run(main())
    assert pool.stats.retries == 0


def test_concurrent_starts_never_exceed_the_cap() -> None:
    fleet = Fleet(start_s=0.05)
    pool = SandboxPool(fleet, max_concurrent_starts=2, start_retries=0, backoff_s=0.0)

    async def use() -> None:
        async with pool.sandbox():
            await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(*(use() for _ in range(8)))

    started = time.monotonic()
    asyncio.run(main())
    assert fleet.peak_starting == 2
    assert time.monotonic() - started >= 4 * 0.05
    assert fleet.all_closed() and pool.stats.started == 8


def test_sandbox_is_closed_when_the_body_is_cancelled() -> None:
    fleet = Fleet()
    pool = SandboxPool(fleet, max_concurrent_starts=1, start_retries=0, backoff_s=0.0)

    async def main() -> None:
        inside = asyncio.Event()

        async def body() -> None:
            async with pool.sandbox():
                inside.set()
                await asyncio.sleep(3600)

        task = asyncio.ensure_future(body())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(fleet.made) == 1 and fleet.all_closed()


def test_sandbox_is_closed_when_its_start_is_cancelled() -> None:
    fleet = Fleet(["hang"])
    pool = SandboxPool(fleet, max_concurrent_starts=1, start_retries=0, backoff_s=0.0)

    async def main() -> None:
        async def body() -> None:
            async with pool.sandbox():
                pytest.fail("the body must not run")

        task = asyncio.ensure_future(body())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(fleet.made) == 1 and fleet.all_closed()


def test_body_error_wins_over_a_failing_close() -> None:
    fleet = Fleet()
    pool = SandboxPool(fleet, max_concurrent_starts=1, start_retries=0, backoff_s=0.0)

    async def main() -> None:
        with pytest.raises(ValueError, match="agent bug"):
            async with pool.sandbox():
                fleet.close_error = True
                raise ValueError("agent bug")
        with pytest.raises(RuntimeError, match="close failed"):
            async with pool.sandbox():
                pass

    asyncio.run(main())
    assert pool.stats.close_failures == 2


def test_warm_spares_are_handed_out_and_closed_with_the_pool() -> None:
    fleet = Fleet()
    pool = SandboxPool(fleet, max_concurrent_starts=2, start_retries=0, backoff_s=0.0, warm=2)

    async def main() -> None:
        async with pool:
            for _ in range(50):
                if len(fleet.made) == 2 and all(s.started for s in fleet.made):
                    break
                await asyncio.sleep(0.01)
            assert len(fleet.made) == 2
            async with pool.sandbox() as sb:
                assert sb in fleet.made[:2]
            assert pool.stats.warm_hits == 1
            await asyncio.sleep(0.05)  # the refill replaces the spare that was used
            assert len(fleet.made) == 3
        with pytest.raises(SandboxError, match="closed"):
            async with pool.sandbox():
                pass

    asyncio.run(main())
    assert fleet.all_closed() and pool.stats.closed == 3


def test_a_callers_own_sandbox_without_a_key_gets_no_spares() -> None:
    fleet, own = Fleet(), Fleet()
    pool = SandboxPool(fleet, max_concurrent_starts=2, start_retries=0, backoff_s=0.0, warm=2)

    async def main() -> None:
        async with pool:
            await asyncio.sleep(0.05)  # the pool's own spares are up
            async with pool.sandbox(own) as sb:
                assert sb is own.made[0]
            await asyncio.sleep(0.05)
            async with pool.sandbox(own, key="task-a"):
                pass
            await asyncio.sleep(0.05)  # spares of "task-a" now, made the caller's way

    asyncio.run(main())
    assert pool.stats.warm_hits == 0
    assert len(own.made) == 2 + 2  # one per request, then task-a's two spares; none for no key
    assert fleet.all_closed() and own.all_closed()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_pool_of_local_sandboxes(tmp_path: Path) -> None:
    pool = SandboxPool(
        lambda: LocalSandbox(root_dir=str(tmp_path)),
        max_concurrent_starts=2,
        start_retries=1,
        backoff_s=0.01,
    )

    async def use(i: int) -> str:
        async with pool.sandbox() as sb:
            return (await sb.exec(f"echo {i}")).stdout

    async def main() -> list[str]:
        return await asyncio.gather(*(use(i) for i in range(3)))

    assert asyncio.run(main()) == ["0\n", "1\n", "2\n"]
    assert list(tmp_path.iterdir()) == []
