"""DockerSandbox without a Docker daemon: a fake CLI runner records every argv.

Two kinds of fake: a scripted one (answers each `docker` verb with a canned result) to check
the exact commands (caps, kill-on-timeout, cleanup on every path), and a loopback one that runs
each `docker exec` payload on this host (the host plays the container) to check that the
in-sandbox wrapper really kills a command's whole process tree on timeout and cancellation.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from uni_agent_core.config.sandbox import DockerSandboxConfig
from uni_agent_core.sandbox import docker as docker_module
from uni_agent_core.sandbox import timed_shell
from uni_agent_core.sandbox.base import Sandbox, SandboxDeadlineError, SandboxError
from uni_agent_core.sandbox.docker import DockerSandbox
from uni_agent_core.sandbox.docker_cli import CliResult, run_cli

Handler = Callable[[list[str]], Awaitable[CliResult]]


@dataclass
class Call:
    argv: list[str]
    timeout_s: float
    stdin: bytes | None


class FakeDocker:
    """A `CommandRunner` that records calls; `handlers[verb]` answers `docker <verb> ...`."""

    def __init__(self, *, loopback: bool = False, **handlers: Handler) -> None:
        self.calls: list[Call] = []
        self.loopback = loopback
        self.handlers = handlers

    async def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        stdin: bytes | None = None,
        max_output_bytes: int | None = None,
    ) -> CliResult:
        argv = list(argv)
        self.calls.append(Call(argv, timeout_s, stdin))
        verb = argv[3] if argv[1] == "-H" else argv[1]
        if verb in self.handlers:
            return await self.handlers[verb](argv)
        if verb == "exec" and self.loopback:
            payload = argv[argv.index("exec") + 1 :]
            payload = payload[2:] if payload[0] == "-i" else payload[1:]
            return await run_cli(
                payload, timeout_s=timeout_s, stdin=stdin, max_output_bytes=max_output_bytes
            )
        if verb == "cp" and self.loopback:
            return _loopback_cp(*argv[-2:])
        if verb == "run":
            return CliResult(0, b"0123456789abcdef\n", b"")
        return CliResult(0, b"", b"")

    def verbs(self) -> list[str]:
        return [c.argv[1] for c in self.calls]

    def removals(self) -> list[list[str]]:
        return [c.argv for c in self.calls if c.argv[1] == "rm"]


def _loopback_cp(source: str, target: str) -> CliResult:
    """`docker cp` with the host as the container (`NAME:/path` is `/path`)."""
    source, target = source.split(":", 1)[-1], target.split(":", 1)[-1]
    if source.endswith("/."):
        shutil.copytree(source[:-2], target, dirs_exist_ok=True)
    elif os.path.isdir(source):
        shutil.copytree(source, target)
    elif os.path.exists(source):
        shutil.copy2(source, target)
    else:
        return CliResult(1, b"", f"Error: Could not find the file {source}".encode())
    return CliResult(0, b"", b"")


def answer(returncode: int, stdout: str = "", stderr: str = "") -> Handler:
    async def handler(_: list[str]) -> CliResult:
        return CliResult(returncode, stdout.encode(), stderr.encode())

    return handler


def marker() -> str:
    return f"1000.{uuid.uuid4().int % 10**9:09d}"


async def sleeps_gone(mark: str, within_s: float = 3.0) -> bool:
    """Whether every host `sleep <mark>` has exited within `within_s` (a kill is asynchronous)."""
    for _ in range(int(within_s / 0.02)):
        if not host_sleeps(mark):
            return True
        await asyncio.sleep(0.02)
    return host_sleeps(mark) == 0


def host_sleeps(mark: str) -> int:
    """Live host processes running `sleep <mark>`."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"sleep") and mark.encode() in argv:
            count += 1
    return count


def make(fake: FakeDocker, **kwargs: object) -> DockerSandbox:
    options: dict[str, object] = {"image": "sweb.eval.django-1", "runner": fake} | kwargs
    return DockerSandbox(**options)  # type: ignore[arg-type]


def test_run_command_sets_every_cap_and_a_self_ending_lifetime() -> None:
    fake = FakeDocker()
    sb = make(fake, memory_mb=2048, cpus=1.5, max_processes=300, wall_clock_s=1800.5)

    async def main() -> None:
        async with sb:
            assert isinstance(sb, Sandbox)

    asyncio.run(main())
    assert fake.calls[0].argv == [
        "docker", "run", "-d", "--rm", "--name", sb.name, "--label", "agent-rl.sandbox=1",
        "--pull", "missing", "--network", "none", "--memory", "2048m", "--memory-swap", "2048m",
        "--pids-limit", "300", "--cpus", "1.5", "--entrypoint", "sleep", "sweb.eval.django-1",
        "1801",
    ]  # fmt: skip
    probe = fake.calls[1].argv
    assert probe[:5] == ["docker", "exec", sb.name, "bash", "-c"]
    assert probe[-1] == "mkdir -p -- /testbed" and probe[-2] == "/"
    assert fake.calls[-1].argv == ["docker", "rm", "-f", sb.name]
    assert fake.verbs() == ["run", "exec", "rm"]


def test_network_and_daemon_address_options() -> None:
    fake = FakeDocker()
    sb = make(fake, network=True, docker_host="tcp://10.0.0.5:2375", pull="never")
    argv = sb.run_argv()
    assert "--network" not in argv
    assert argv[:4] == ["docker", "-H", "tcp://10.0.0.5:2375", "run"]
    assert argv[argv.index("--pull") + 1] == "never"

    async def main() -> None:
        async with sb:
            await sb.exec("true")

    asyncio.run(main())
    assert all(c.argv[:3] == ["docker", "-H", "tcp://10.0.0.5:2375"] for c in fake.calls)


def test_exec_runs_under_the_in_container_kill_wrapper() -> None:
    fake = FakeDocker()
    sb = make(fake, exec_timeout_s=30, env={"A": "1"})

    async def main() -> None:
        async with sb:
            await sb.exec("make test", timeout=7.5, cwd="src", env={"B": "x y"})

    asyncio.run(main())
    call = fake.calls[2]
    argv = call.argv
    assert argv[:6] == ["docker", "exec", sb.name, "bash", "-c", timed_shell._TIMED_SHELL]
    pidfile, limit, cwd, command, *env = argv[7:]
    assert pidfile.startswith("/tmp/.agent-rl-exec-") and pidfile.endswith(".pid")
    assert (limit, cwd, command, env) == ("7.500", "/testbed/src", "make test", ["A=1", "B=x y"])
    assert "timeout -s KILL" in timed_shell._TIMED_SHELL
    assert call.timeout_s == pytest.approx(7.5 + docker_module.EXEC_GRACE_S)


def test_failed_run_is_reported_and_the_container_still_removed() -> None:
    fake = FakeDocker(run=answer(125, stderr="Unable to find image 'nope:latest' locally"))
    sb = make(fake, image="nope")

    async def main() -> None:
        with pytest.raises(SandboxError, match="Unable to find image"):
            await sb.start()
        with pytest.raises(SandboxError, match="closed"):
            await sb.start()

    asyncio.run(main())
    assert fake.removals() == [["docker", "rm", "-f", sb.name]]


def test_image_without_bash_or_coreutils_fails_start_and_is_removed() -> None:
    fake = FakeDocker(exec=answer(127, stderr="bash: line 3: timeout: command not found"))
    sb = make(fake)

    async def main() -> None:
        with pytest.raises(SandboxError, match="bash and GNU coreutils"):
            await sb.start()

    asyncio.run(main())
    assert fake.verbs() == ["run", "exec", "rm"]


def test_startup_timeout_and_cancellation_remove_the_container() -> None:
    async def hang(_: list[str]) -> CliResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async def main() -> None:
        slow = FakeDocker(run=hang)
        sb = make(slow, startup_timeout_s=0.2)
        with pytest.raises(SandboxError, match="did not start within 0.2 s"):
            await sb.start()
        assert slow.removals() == [["docker", "rm", "-f", sb.name]]

        stuck = FakeDocker(run=hang)
        other = make(stuck)
        task = asyncio.ensure_future(other.start())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stuck.removals() == [["docker", "rm", "-f", other.name]]

    asyncio.run(main())


def test_an_error_in_the_body_still_removes_the_container() -> None:
    fake = FakeDocker()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="agent crashed"):
            async with make(fake):
                raise RuntimeError("agent crashed")

    asyncio.run(main())
    assert fake.verbs()[-1] == "rm"


def test_close_is_idempotent_tolerates_a_gone_container_and_reports_a_failed_removal() -> None:
    async def main() -> None:
        gone = FakeDocker(rm=answer(1, stderr="Error response from daemon: No such container: x"))
        sb = make(gone)
        await sb.start()
        await sb.close()
        await sb.close()
        assert len(gone.removals()) == 1

        broken = FakeDocker(rm=answer(1, stderr="Error response from daemon: device busy"))
        other = make(broken)
        await other.start()
        with pytest.raises(SandboxError, match="device busy"):
            await other.close()

        never = FakeDocker()
        await make(never).close()
        assert never.calls == []

    asyncio.run(main())


def test_daemon_errors_during_exec_are_sandbox_errors() -> None:
    fake = FakeDocker()

    async def main() -> None:
        async with make(fake) as sb:
            fake.handlers["exec"] = answer(
                1, stderr="Error response from daemon: container abc is not running"
            )
            with pytest.raises(SandboxError, match="is not running"):
                await sb.exec("ls")
            fake.handlers["exec"] = answer(1, stderr="ls: cannot access 'x'")
            result = await sb.exec("ls x")
            assert (result.exit_code, result.timed_out) == (1, False)

    asyncio.run(main())


def test_file_commands(tmp_path: Path) -> None:
    fake = FakeDocker()

    async def main() -> None:
        async with make(fake) as sb:
            fake.handlers["exec"] = answer(0, stdout="caf\u00e9\n")
            assert await sb.read_file("a.py") == "caf\u00e9\n"
            assert fake.calls[-1].argv == ["docker", "exec", sb.name, "cat", "--", "/testbed/a.py"]
            fake.handlers["exec"] = answer(1, stderr="cat: /x: No such file or directory")
            with pytest.raises(FileNotFoundError):
                await sb.read_file("/x")
            fake.handlers["exec"] = answer(0)
            await sb.write_file("pkg/new.py", "print(1)\n")
            write = fake.calls[-1]
            assert write.argv[:4] == ["docker", "exec", "-i", sb.name]
            assert write.argv[-1] == "/testbed/pkg/new.py" and write.stdin == b"print(1)\n"
            (tmp_path / "dir").mkdir()
            await sb.upload(str(tmp_path / "dir"), "/data")
            assert fake.calls[-2].argv == ["docker", "exec", sb.name, "mkdir", "-p", "/data"]
            assert fake.calls[-1].argv == ["docker", "cp", f"{tmp_path}/dir/.", f"{sb.name}:/data"]
            with pytest.raises(FileNotFoundError):
                await sb.upload(str(tmp_path / "missing"), "/data")

    asyncio.run(main())


def test_loopback_exec_files_and_diff(tmp_path: Path) -> None:
    """Everything but the daemon is real: the wrapper, bash, git and the copies."""
    fake = FakeDocker(loopback=True)
    workdir = tmp_path / "repo"

    async def main() -> None:
        async with make(fake, workdir=str(workdir), env={"A": "1"}) as sb:
            result = await sb.exec("pwd; echo $A $B; echo oops >&2; exit 3", env={"B": "2"})
            assert (result.exit_code, result.stdout, result.stderr) == (
                3,
                f"{workdir}\n1 2\n",
                "oops\n",
            )
            await sb.write_file("pkg/mod.py", "x = 1\n")
            assert await sb.read_file(str(workdir / "pkg/mod.py")) == "x = 1\n"
            git = "git -c user.email=a@b -c user.name=a"
            committed = await sb.exec(f"git init -q && git add -A && {git} commit -qm base")
            assert committed.ok, committed
            await sb.write_file("pkg/mod.py", "x = 2\n")
            await sb.write_file("new.txt", "hi\n")
            patch = await sb.diff()
            assert "-x = 1\n+x = 2" in patch and "+++ b/new.txt" in patch
            (tmp_path / "up").mkdir()
            (tmp_path / "up" / "f.txt").write_text("F")
            await sb.upload(str(tmp_path / "up"), "data")
            await sb.download("data", str(tmp_path / "down"))
            assert (tmp_path / "down" / "f.txt").read_text() == "F"

    asyncio.run(main())


def test_loopback_timeout_kills_the_whole_tree_and_keeps_output(tmp_path: Path) -> None:
    fake = FakeDocker(loopback=True)
    mark = marker()

    async def main() -> None:
        async with make(fake, workdir=str(tmp_path)) as sb:
            result = await sb.exec(f"echo started; sleep {mark} & sleep {mark}", timeout=0.5)
            assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "started\n")
            assert host_sleeps(mark) == 0
            done = await sb.exec(f"(sleep {mark} &); echo left a child")
            assert done.ok and host_sleeps(mark) == 0
            killed = await sb.exec("kill -KILL $$", timeout=5)
            assert (killed.exit_code, killed.timed_out) == (137, False)

    asyncio.run(main())


def test_cancelled_exec_is_killed_inside_the_container(tmp_path: Path) -> None:
    fake = FakeDocker(loopback=True)
    mark = marker()

    async def main() -> None:
        async with make(fake, workdir=str(tmp_path)) as sb:
            task = asyncio.ensure_future(sb.exec(f"sleep {mark}", timeout=60))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if host_sleeps(mark):
                    break
            # The CLI client dies with the task; only the pid-file kill reaches the command.
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            kill = fake.calls[-1].argv
            assert kill[3:6] == ["bash", "-c", timed_shell._KILL_GROUP]
            assert await sleeps_gone(mark)

    asyncio.run(main())


def test_hung_client_is_given_up_on_and_its_command_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI that never returns (daemon stuck) costs the grace period, not forever; the command,
    whose in-container timeout is made ineffective here, is killed through its pid file."""
    monkeypatch.setattr(docker_module, "EXEC_GRACE_S", 0.3)
    mark = marker()

    async def stuck_exec(argv: list[str]) -> CliResult:
        payload = argv[argv.index("exec") + 2 :]
        if payload[2] != timed_shell._TIMED_SHELL:
            return await run_cli(payload, timeout_s=5)
        payload[5] = "3600"  # the in-container timeout fails to fire
        await asyncio.create_subprocess_exec(*payload, start_new_session=True)
        await asyncio.sleep(fake.calls[-1].timeout_s)
        return CliResult(-9, b"", b"", timed_out=True)

    fake = FakeDocker(loopback=True)

    async def main() -> None:
        async with make(fake, workdir=str(tmp_path)) as sb:
            fake.handlers["exec"] = stuck_exec
            with pytest.raises(SandboxError, match="did not return within 0.5 s"):
                await sb.exec(f"sleep {mark}", timeout=0.2)
            assert fake.calls[-1].argv[5] == timed_shell._KILL_GROUP
            assert await sleeps_gone(mark)

    asyncio.run(main())


def test_deadline_removes_the_container_and_fails_every_later_call(tmp_path: Path) -> None:
    fake = FakeDocker(loopback=True)
    mark = marker()

    async def main() -> None:
        async with make(fake, workdir=str(tmp_path), wall_clock_s=0.6, exec_timeout_s=0.5) as sb:
            with pytest.raises(SandboxDeadlineError):
                await sb.exec(f"sleep {mark}", timeout=10)
            await asyncio.sleep(0.05)
            assert fake.removals() == [["docker", "rm", "-f", sb.name]]
            assert host_sleeps(mark) == 0
            with pytest.raises(SandboxDeadlineError):
                await sb.read_file("x")
        assert len(fake.removals()) == 1

    asyncio.run(main())


def test_from_config_maps_the_recipe_and_needs_an_image() -> None:
    config = DockerSandboxConfig(
        memory_mb=8192, cpus=4, network=True, pull="always", wall_clock_s=600, exec_timeout_s=60
    )
    with pytest.raises(ValueError, match="image"):
        DockerSandbox.from_config(config)
    sb = DockerSandbox.from_config(config, image="task-image", workdir="/repo")
    assert (sb.image, sb.memory_mb, sb.cpus, sb.network, sb.pull) == (
        "task-image",
        8192,
        4,
        "host",  # `true` reads as the host's network
        "always",
    )
    assert (sb.wall_clock_s, sb.exec_timeout_s, str(sb.workdir)) == (600, 60, "/repo")
    fixed = DockerSandbox.from_config(DockerSandboxConfig(image="one-image"))
    assert fixed.image == "one-image"


def test_missing_docker_cli_is_a_clear_start_error() -> None:
    sb = DockerSandbox(image="img", docker="/nonexistent/docker")

    async def main() -> None:
        with pytest.raises(SandboxError, match="cannot run the docker CLI"):
            await sb.start()

    asyncio.run(main())


async def _gateway() -> asyncio.Server:
    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\n\r\ngateway")
        await writer.drain()
        writer.close()

    return await asyncio.start_server(reply, "127.0.0.1", 0)


def test_gateway_only_mounts_the_link_and_starts_the_images_socat() -> None:
    fake = FakeDocker()
    sb = make(fake, network="gateway")

    async def main() -> Path:
        gateway = await _gateway()
        port = gateway.sockets[0].getsockname()[1]
        try:
            async with sb:
                run = fake.calls[0].argv
                assert run[run.index("--network") + 1] == "none"
                host_socket, inside = run[run.index("-v") + 1].split(":")
                assert inside == "/run/agent-rl/gateway.sock" and Path(host_socket).is_socket()
                await sb.connect_gateway(f"http://127.0.0.1:{port}/v1")
                (listener,) = [c.argv for c in fake.calls if c.argv[1:3] == ["exec", "-d"]]
                assert listener[3:] == [
                    sb.name,
                    "socat",
                    f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay",
                    "UNIX-CONNECT:/run/agent-rl/gateway.sock",
                ]
                execs = len(fake.calls)
                await sb.connect_gateway(f"http://127.0.0.1:{port}/v1")  # linked already
                assert len(fake.calls) == execs
                # the host end of the link leads to the gateway
                reader, writer = await asyncio.open_unix_connection(host_socket)
                writer.write(b"GET / HTTP/1.0\r\n\r\n")
                assert (await reader.read()).endswith(b"gateway")
                writer.close()
            return Path(host_socket)
        finally:
            gateway.close()

    assert not asyncio.run(main()).exists()  # the link ends with the container


def test_gateway_only_needs_socat_in_the_image() -> None:
    async def no_socat(argv: list[str]) -> CliResult:
        return CliResult(3 if "command -v socat" in " ".join(argv) else 0, b"", b"")

    sb = make(FakeDocker(exec=no_socat), network="gateway")

    async def main() -> None:
        async with sb:
            await sb.connect_gateway("http://127.0.0.1:8000/v1")

    with pytest.raises(SandboxError, match="has no socat"):
        asyncio.run(main())


def test_gateway_only_needs_the_local_daemon() -> None:
    with pytest.raises(ValueError, match="local docker daemon"):
        DockerSandboxConfig(network="gateway", docker_host="tcp://10.0.0.5:2375")
