"""SwerexSandbox for real: swe-rex's in-process `LocalDeployment`, and a `swerex-remote` server
started on loopback for the `remote` deployment (the HTTP path the `swerex` recipe type uses).
Fake deployments only stand in for swe-rex's own failures (its timeout backstop, a dead runtime).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swerex.exceptions import CommandTimeoutError
from swerex.runtime.abstract import CommandResponse, IsAliveResponse

from uni_agent_core.config.sandbox import SwerexSandboxConfig
from uni_agent_core.sandbox.base import Sandbox, SandboxDeadlineError, SandboxError
from uni_agent_core.sandbox.swerex import SwerexSandbox

TOKEN = "test-token"


def marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


def host_sleeps(mark: str) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            count += argv[0].endswith(b"sleep") and mark.encode() in argv
    return count


@pytest.fixture(scope="module")
def server_port() -> Iterator[int]:
    """A `swerex-remote` server on 127.0.0.1 (loopback only) for the module's tests."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "swerex", "--host", "127.0.0.1", "--port", str(port)]
        + ["--auth-token", TOKEN],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            pytest.fail("swerex-remote did not listen within 30 s")
        yield port
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_local_deployment_exec_files_diff_and_close(tmp_path: Path) -> None:
    repo = tmp_path / "repo"

    async def main() -> None:
        sb = SwerexSandbox(deployment="local", workdir=str(repo), env={"A": "1"})
        async with sb:
            assert isinstance(sb, Sandbox) and repo.is_dir()
            result = await sb.exec("pwd; echo $A $B; echo oops >&2; exit 3", env={"B": "2"})
            assert (result.exit_code, result.stdout, result.stderr) == (
                3,
                f"{repo}\n1 2\n",
                "oops\n",
            )
            await sb.write_file("pkg/a.py", "x = 1\n")
            assert await sb.read_file(str(repo / "pkg" / "a.py")) == "x = 1\n"
            with pytest.raises(FileNotFoundError):
                await sb.read_file("missing.py")
            git = "git -c user.email=a@b -c user.name=a"
            assert (await sb.exec(f"git init -q && git add -A && {git} commit -qm base")).ok
            await sb.write_file("pkg/a.py", "x = 2\n")
            await sb.write_file("new.txt", "hi\n")
            patch = await sb.diff()
            assert "-x = 1\n+x = 2" in patch and "+++ b/new.txt" in patch
            source = tmp_path / "up"
            (source / "sub").mkdir(parents=True)
            (source / "sub" / "f.bin").write_bytes(b"\x00\xff")
            await sb.upload(str(source), "data")
            await sb.download("data", str(tmp_path / "down"))
            assert (tmp_path / "down" / "sub" / "f.bin").read_bytes() == b"\x00\xff"
            await sb.download("new.txt", str(tmp_path / "single.txt"))
            assert (tmp_path / "single.txt").read_text() == "hi\n"
        with pytest.raises(SandboxError, match="closed"):
            await sb.exec("true")
        await sb.close()

    asyncio.run(main())


def test_local_timeout_kills_the_tree_and_keeps_output(tmp_path: Path) -> None:
    mark = marker()

    async def main() -> None:
        async with SwerexSandbox(deployment="local", workdir=str(tmp_path)) as sb:
            began = time.monotonic()
            result = await sb.exec(f"echo partial; sleep {mark} & sleep {mark}", timeout=0.5)
            assert time.monotonic() - began < 3
            assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "partial\n")
            assert host_sleeps(mark) == 0
            done = await sb.exec(f"(sleep {mark} &); echo ok")
            assert done.ok and host_sleeps(mark) == 0

    asyncio.run(main())


def test_local_deadline_fails_the_command_and_every_later_call(tmp_path: Path) -> None:
    mark = marker()

    async def main() -> None:
        sb = SwerexSandbox(
            deployment="local", workdir=str(tmp_path), wall_clock_s=0.8, exec_timeout_s=0.5
        )
        async with sb:
            with pytest.raises(SandboxDeadlineError):
                await sb.exec(f"sleep {mark}", timeout=30)
            assert host_sleeps(mark) == 0
            with pytest.raises(SandboxDeadlineError):
                await sb.read_file("x")

    asyncio.run(main())


def test_remote_server_round_trip(tmp_path: Path, server_port: int) -> None:
    repo = tmp_path / "repo"

    async def main() -> None:
        sb = SwerexSandbox(
            deployment="remote", port=server_port, auth_token=TOKEN, workdir=str(repo)
        )
        async with sb:
            result = await sb.exec("pwd; echo $X", env={"X": "over http"})
            assert (result.exit_code, result.stdout) == (0, f"{repo}\nover http\n")
            timed = await sb.exec("echo partial; sleep 30", timeout=0.5)
            assert (timed.exit_code, timed.timed_out, timed.stdout) == (124, True, "partial\n")
            await sb.write_file("d/f.txt", "text")
            assert await sb.read_file("d/f.txt") == "text"
            with pytest.raises(FileNotFoundError):
                await sb.read_file("nope.txt")
            source = tmp_path / "up"
            source.mkdir()
            (source / "g.txt").write_text("G")
            await sb.upload(str(source), "uploaded")
            assert await sb.read_file("uploaded/g.txt") == "G"
            await sb.download("uploaded", str(tmp_path / "down"))
            assert (tmp_path / "down" / "g.txt").read_text() == "G"

    asyncio.run(main())


def test_remote_wrong_token_fails_start_with_the_runtime_answer(server_port: int) -> None:
    async def main() -> None:
        sb = SwerexSandbox(
            deployment="remote",
            port=server_port,
            auth_token="wrong",
            startup_timeout_s=3.0,
            runtime_timeout_s=1.5,
        )
        with pytest.raises(SandboxError, match="Invalid API Key"):
            await sb.start()

    asyncio.run(main())


class FakeRuntime:
    def __init__(self, *, execute: Any = None, alive: bool = True) -> None:
        self.alive = alive
        self._execute = execute
        self.commands: list[Any] = []

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        return IsAliveResponse(is_alive=self.alive, message="" if self.alive else "booting")

    async def execute(self, command: Any) -> CommandResponse:
        self.commands.append(command)
        if self._execute is None:
            return CommandResponse(stdout="", stderr="", exit_code=0)
        return await self._execute(command)


class FakeDeployment:
    def __init__(self, runtime: FakeRuntime, *, start_error: Exception | None = None) -> None:
        self.runtime = runtime
        self.start_error = start_error
        self.stopped = 0

    async def start(self) -> None:
        if self.start_error is not None:
            raise self.start_error

    async def stop(self) -> None:
        self.stopped += 1


def factory(deployment: FakeDeployment) -> Any:
    return lambda: deployment


def test_swerex_backstop_timeout_and_runtime_failures() -> None:
    async def backstop(command: Any) -> CommandResponse:
        if "mkdir" in command.command[-1]:
            return CommandResponse(exit_code=0)
        raise CommandTimeoutError("Timeout (10.5s) exceeded while running command")

    runtime = FakeRuntime(execute=backstop)
    deployment = FakeDeployment(runtime)

    async def main() -> None:
        async with SwerexSandbox(deployment_factory=factory(deployment)) as sb:
            result = await sb.exec("sleep 100", timeout=0.5)
            assert (result.exit_code, result.timed_out) == (124, True)
            command = runtime.commands[-1]
            assert command.shell is False and command.command[:2] == ["bash", "-c"]
            assert command.timeout == pytest.approx(0.5 + 10.0)

            async def broken(command: Any) -> CommandResponse:
                raise ConnectionResetError("runtime went away")

            runtime._execute = broken
            with pytest.raises(SandboxError, match="runtime went away"):
                await sb.exec("true")
        assert deployment.stopped == 1

    asyncio.run(main())


def test_failed_starts_stop_the_deployment() -> None:
    async def main() -> None:
        crashing = FakeDeployment(FakeRuntime(), start_error=RuntimeError("docker pull failed"))
        with pytest.raises(SandboxError, match="docker pull failed"):
            await SwerexSandbox(deployment_factory=factory(crashing)).start()
        assert crashing.stopped == 1

        booting = FakeDeployment(FakeRuntime(alive=False))
        sb = SwerexSandbox(deployment_factory=factory(booting), startup_timeout_s=0.3)
        with pytest.raises(SandboxError, match="within 0.3 s; its last answer: booting"):
            await sb.start()
        assert booting.stopped == 1

    asyncio.run(main())


def test_from_config_reads_the_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = SwerexSandboxConfig(
        host="http://runtime.internal",
        port=8000,
        auth_token_env="SWEREX_TEST_TOKEN",
        runtime_timeout_s=5,
        exec_timeout_s=30,
        wall_clock_s=600,
    )
    monkeypatch.delenv("SWEREX_TEST_TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"\$SWEREX_TEST_TOKEN, which is not set"):
        SwerexSandbox.from_config(config)
    monkeypatch.setenv("SWEREX_TEST_TOKEN", "s3cret")
    sb = SwerexSandbox.from_config(config, workdir="/repo")
    assert (sb.deployment, sb.host, sb.port, sb._auth_token) == (
        "remote",
        "http://runtime.internal",
        8000,
        "s3cret",
    )
    assert (sb.runtime_timeout_s, sb.exec_timeout_s, sb.wall_clock_s) == (5, 30, 600)
    assert str(sb.workdir) == "/repo"
    local = SwerexSandbox.from_config(config, deployment="local")
    assert local.deployment == "local"


def test_container_deployments_need_an_image_and_get_the_caps() -> None:
    with pytest.raises(ValueError, match="needs an image"):
        SwerexSandbox(deployment="docker")
    sb = SwerexSandbox(deployment="docker", image="python:3.11", memory_mb=1024, cpus=1)
    deployment = sb._make_deployment()
    assert deployment._config.image == "python:3.11"  # type: ignore[attr-defined]
    assert deployment._config.docker_args == [  # type: ignore[attr-defined]
        "--memory=1024m",
        "--memory-swap=1024m",
        "--pids-limit=1024",
        "--cpus=1",
    ]


def test_download_larger_than_the_output_cap_fails_clearly(tmp_path: Path) -> None:
    async def main() -> None:
        sb = SwerexSandbox(deployment="local", workdir=str(tmp_path), max_output_bytes=100)
        async with sb:
            await sb.write_file("big.txt", "x" * 1000)
            with pytest.raises(SandboxError, match="larger than max_output_bytes"):
                await sb.download("big.txt", str(tmp_path / "out.txt"))
            result = await sb.exec("head -c 1000 big.txt")
            assert result.stdout == "x" * 100 + "\n[output truncated: 900 more bytes dropped]"

    asyncio.run(main())
