"""LocalSandbox isolation and limits: network, file system, processes, memory, timeouts, deadline.

Commands really run under bubblewrap; every test that needs it skips where `bwrap` is missing.
Processes are checked from the host by a unique marker in their command line, since pids inside
the sandbox's pid namespace mean nothing on the host.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Literal

import pytest

from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.sandbox import bwrap
from uni_agent_core.sandbox.base import Sandbox, SandboxDeadlineError, SandboxError
from uni_agent_core.sandbox.local import LocalSandbox

Isolation = Literal["bubblewrap", "none"]
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def marker() -> str:
    """A `sleep` argument no other process on the host uses."""
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def host_processes(mark: str) -> list[list[bytes]]:
    """Command lines of the live host processes whose command line contains `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if mark.encode() in cmdline:
            found.append(cmdline.split(b"\0"))
    return found


def host_sleeps(mark: str) -> int:
    return sum(1 for argv in host_processes(mark) if argv[0].endswith(b"sleep"))


async def wait_until(predicate, timeout_s: float) -> bool:  # noqa: ANN001 - test helper
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


@needs_bwrap
def test_sandbox_satisfies_protocol_and_runs_commands_as_nobody(tmp_path: Path) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path)) as sb:
            assert isinstance(sb, Sandbox)
            result = await sb.exec("id -u; pwd; echo $HOME; echo $FOO", env={"FOO": "bar"})
            assert result.ok, result
            assert result.stdout.split() == ["65534", "/workspace/repo", "/workspace", "bar"]
            failed = await sb.exec("echo oops >&2; exit 3")
            assert (failed.exit_code, failed.stderr, failed.ok) == (3, "oops\n", False)
            host_dir = sb.host_dir
        assert not host_dir.exists()

    asyncio.run(main())


@needs_bwrap
def test_host_environment_does_not_leak_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_RL_TEST_SECRET", "s3cret")

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path)) as sb:
            result = await sb.exec("env")
            assert result.ok
            assert "s3cret" not in result.stdout
            assert "PATH=" in result.stdout

    asyncio.run(main())


@needs_bwrap
@pytest.mark.parametrize("network", ["none", "gateway", "host"])
def test_host_loopback_is_reachable_with_the_host_network_only(
    tmp_path: Path, network: str
) -> None:
    """`gateway` without a link (`connect_gateway`) reaches nothing, like `none`."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    connect = (
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', "
        f"{port}), timeout=3); print('connected')\""
    )

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), network=network) as sb:
            result = await sb.exec(connect, timeout=10)
            if network == "host":
                assert result.ok and "connected" in result.stdout, result
            else:
                assert not result.ok
                assert "ConnectionRefusedError" in result.stderr, result

    try:
        asyncio.run(main())
    finally:
        server.close()


@needs_bwrap
def test_writes_outside_the_workspace_fail(tmp_path: Path) -> None:
    name = f"agent-rl-test-{uuid.uuid4().hex}"

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path)) as sb:
            for target in (f"/etc/{name}", f"/root/{name}", f"/usr/{name}", f"{tmp_path}/{name}"):
                result = await sb.exec(f"touch {target}")
                assert not result.ok, target
                assert not Path(target).exists()
            result = await sb.exec(f"touch /workspace/{name} /tmp/{name}")
            assert result.ok, result
            assert (sb.host_dir / "workspace" / name).exists()
            assert not Path(f"/tmp/{name}").exists()
            # Mounts are locked: no capability is left to make the host's root writable.
            remount = await sb.exec("mount -o remount,rw,bind /etc")
            assert not remount.ok

    asyncio.run(main())


@needs_bwrap
def test_sandbox_sees_only_its_own_processes(tmp_path: Path) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path)) as sb:
            result = await sb.exec("ps -eo pid=,comm=")
            assert result.ok, result
            processes = [line.split() for line in result.stdout.strip().splitlines()]
            # bwrap as the namespace's init, then bash and ps; no host process, not this test.
            assert processes[0] == ["1", "bwrap"], processes
            assert {comm for _, comm in processes} <= {"bwrap", "bash", "ps"}, processes
            pids = await sb.exec("ls /proc | grep -cE '^[0-9]+$'")
            assert int(pids.stdout) <= 4

    asyncio.run(main())


@needs_bwrap
@pytest.mark.parametrize("use_cgroups", [True, False])
def test_memory_hog_hits_the_limit(tmp_path: Path, use_cgroups: bool) -> None:
    hog = "python3 -c 'b = bytearray(4 * 1024**3); print(len(b))'"

    async def main() -> None:
        async with LocalSandbox(
            root_dir=str(tmp_path), memory_mb=256, use_cgroups=use_cgroups
        ) as sb:
            assert sb.limits is not None
            if not use_cgroups:
                assert sb.limits.memory == "rlimit"
                assert sb.limits.processes == ("rlimit" if os.geteuid() else "unenforced")
            result = await sb.exec(hog, timeout=30)
            assert not result.ok and not result.timed_out, result
            if sb.limits.memory == "rlimit":
                assert "MemoryError" in result.stderr
            else:
                assert result.exit_code == 128 + 9  # OOM-killed inside the cgroup
            assert (await sb.exec("echo still-alive")).stdout == "still-alive\n"

    asyncio.run(main())
    assert len(bytearray(64 * 1024 * 1024)) == 64 * 1024 * 1024
    assert subprocess.run(["true"], check=False, timeout=10).returncode == 0


@needs_bwrap
@pytest.mark.parametrize("use_cgroups", [True, False])
def test_fork_bomb_is_bounded_and_cleaned_up(tmp_path: Path, use_cgroups: bool) -> None:
    # the bomb's processes are counted by a marker in their command line (every fork keeps
    # the shell's), not as all host processes: other tests' processes come and go meanwhile
    max_processes = 48
    mark = marker()
    peak = 0

    async def sample() -> None:
        nonlocal peak
        while True:
            peak = max(peak, len(host_processes(mark)))
            await asyncio.sleep(0.02)

    async def main() -> None:
        async with LocalSandbox(
            root_dir=str(tmp_path),
            max_processes=max_processes,
            use_cgroups=use_cgroups,
            max_output_bytes=64 * 1024,
        ) as sb:
            assert sb.limits is not None
            if sb.limits.processes == "unenforced":
                pytest.skip("root without a writable pids cgroup: RLIMIT_NPROC does not bind")
            sampler = asyncio.ensure_future(sample())
            try:
                bomb = f": {mark}; bomb() {{ bomb | bomb & }}; bomb; sleep 2"
                result = await sb.exec(bomb, timeout=2.5)
            finally:
                sampler.cancel()
            assert "fork" in result.stderr or "Resource temporarily unavailable" in result.stderr
        assert await wait_until(lambda: not host_processes(mark), timeout_s=3.0)

    asyncio.run(main())
    assert max_processes // 2 <= peak <= max_processes + 10, peak
    assert subprocess.run(["true"], check=False, timeout=10).returncode == 0


@pytest.mark.parametrize(
    "isolation",
    [pytest.param("bubblewrap", marks=needs_bwrap), "none"],
)
def test_timeout_kills_the_whole_tree_within_a_second(tmp_path: Path, isolation: Isolation) -> None:
    mark = marker()
    children = "for i in 1 2 3; do ( sleep MARK & wait ) & done; "
    # Without bubblewrap a process that leaves the session escapes the group kill (trusted use).
    escapee = "setsid sleep MARK & " if isolation == "bubblewrap" else ""
    command = (children + escapee + "sleep MARK").replace("MARK", mark)
    expected = 5 if isolation == "bubblewrap" else 4
    limit = 1.5

    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), isolation=isolation) as sb:
            started = time.monotonic()
            run = asyncio.ensure_future(sb.exec(command, timeout=limit))
            assert await wait_until(lambda: host_sleeps(mark) == expected, timeout_s=limit)
            result = await run
            assert result.timed_out and result.exit_code == 124 and not result.ok
            # The call returns within about a second of its timeout, and the tree is gone soon
            # after (bounds leave room for a loaded CI machine).
            assert time.monotonic() - started < limit + 1.5
            gone = await wait_until(lambda: not host_processes(mark), timeout_s=2.0)
            assert gone, host_processes(mark)

    asyncio.run(main())


@needs_bwrap
def test_wall_clock_deadline_kills_everything_and_fails_every_call(tmp_path: Path) -> None:
    mark = marker()

    async def main() -> None:
        started = time.monotonic()  # the deadline counts from before start()'s probe
        async with LocalSandbox(root_dir=str(tmp_path), wall_clock_s=1.5, exec_timeout_s=1.0) as sb:
            with pytest.raises(SandboxDeadlineError):
                await sb.exec(f"sleep {mark} & sleep {mark}", timeout=30)
            assert 1.4 < time.monotonic() - started < 3.5
            assert await wait_until(lambda: not host_processes(mark), timeout_s=2.0)
            with pytest.raises(SandboxDeadlineError):
                await sb.exec("true")
            with pytest.raises(SandboxDeadlineError):
                await sb.read_file("x.txt")

    asyncio.run(main())


@needs_bwrap
def test_output_is_capped(tmp_path: Path) -> None:
    async def main() -> None:
        async with LocalSandbox(root_dir=str(tmp_path), max_output_bytes=1000) as sb:
            result = await sb.exec("head -c 5000000 /dev/zero | tr '\\0' a")
            assert result.ok
            assert result.stdout.startswith("a" * 1000 + "\n[output truncated: 4999000 more")

    asyncio.run(main())


def test_missing_bwrap_fails_start_with_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bwrap, "BWRAP_EXECUTABLE", "/nonexistent/bwrap")

    async def main() -> None:
        sb = LocalSandbox(root_dir=str(tmp_path))
        with pytest.raises(SandboxError, match="apt-get install bubblewrap"):
            await sb.start()
        with pytest.raises(SandboxError, match="closed"):
            await sb.exec("true")

    asyncio.run(main())
    assert list(tmp_path.iterdir()) == []


def test_isolation_none_warns_once_and_runs_in_the_scratch_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from uni_agent_core.sandbox import local

    monkeypatch.setattr(local, "_warned_unisolated", False)

    async def main() -> None:
        with caplog.at_level(logging.WARNING):
            async with LocalSandbox(root_dir=str(tmp_path), isolation="none") as sb:
                result = await sb.exec("pwd")
                assert result.ok
                assert Path(result.stdout.strip()) == Path(str(sb.workdir))
                assert Path(str(sb.workdir)).is_relative_to(tmp_path)
        assert "UNISOLATED" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            async with LocalSandbox(root_dir=str(tmp_path), isolation="none"):
                pass
        assert "UNISOLATED" not in caplog.text  # once per process, not per sandbox

    asyncio.run(main())


def test_from_config_takes_the_recipe_limits() -> None:
    config = LocalSandboxConfig(
        memory_mb=1024, max_processes=32, network=True, exec_timeout_s=5, wall_clock_s=50
    )
    sb = LocalSandbox.from_config(config, cpu_time_s=10)
    assert (sb.memory_mb, sb.max_processes, sb.network) == (1024, 32, "host")  # true: host
    assert (sb.exec_timeout_s, sb.wall_clock_s, sb.cpu_time_s) == (5, 50, 10)
    assert sb.isolation == "bubblewrap"
    with pytest.raises(ValueError, match="workdir"):
        LocalSandbox(workdir="/etc")


@needs_bwrap
def test_cancelled_exec_kills_its_processes_and_close_cleans_up(tmp_path: Path) -> None:
    mark = marker()

    async def main() -> None:
        sb = LocalSandbox(root_dir=str(tmp_path))
        async with sb:
            run = asyncio.ensure_future(sb.exec(f"sleep {mark} & sleep {mark}", timeout=30))
            assert await wait_until(lambda: host_sleeps(mark) == 2, timeout_s=5.0)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            assert await wait_until(lambda: not host_processes(mark), timeout_s=1.0)
            running = asyncio.ensure_future(sb.exec(f"sleep {mark}", timeout=30))
            assert await wait_until(lambda: host_sleeps(mark) == 1, timeout_s=5.0)
        with pytest.raises(SandboxError, match="closed while the command ran"):
            await running
        assert await wait_until(lambda: not host_processes(mark), timeout_s=1.0)
        assert list(tmp_path.iterdir()) == []

    asyncio.run(main())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_run_directory_and_cache_are_hidden_from_the_agent(monkeypatch) -> None:
    # Outside /tmp (private in every sandbox), where the host is otherwise visible read-only.
    secret_dir = Path("/var/tmp") / f"agent-rl-run-{uuid.uuid4().hex}"
    secret_dir.mkdir()
    try:
        (secret_dir / "hidden_tests.py").write_text("assert answer == 42\n")
        monkeypatch.chdir(secret_dir)

        async def go():
            async with LocalSandbox() as sandbox:
                return await sandbox.exec(f"ls -A {secret_dir}; cat {secret_dir}/hidden_tests.py")

        result = asyncio.run(go())
    finally:
        shutil.rmtree(secret_dir)
    assert "hidden_tests.py" not in result.stdout and "42" not in result.stdout


@needs_bwrap
def test_a_read_only_path_under_tmp_is_bound_over_the_private_tmp(tmp_path: Path) -> None:
    tool = tmp_path / "tools"  # pytest's tmp_path lies under /tmp
    tool.mkdir()
    (tool / "hello").write_text("from the host\n")
    config = LocalSandboxConfig(isolation="bubblewrap", read_only_paths=[str(tool)])
    (tmp_path / "sandboxes").mkdir()

    async def main() -> None:
        async with LocalSandbox.from_config(config, root_dir=str(tmp_path / "sandboxes")) as sb:
            seen = await sb.exec(f"cat {tool}/hello; touch {tool}/new; echo fresh > /tmp/own")
            assert seen.stdout == "from the host\n"
            assert "Read-only file system" in seen.stderr
            private = await sb.exec("cat /tmp/own")
            assert private.stdout == "fresh\n"  # /tmp is still the sandbox's own

    asyncio.run(main())
    assert not (tool / "new").exists()
