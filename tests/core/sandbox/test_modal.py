"""ModalSandbox against a fake `modal` module (Modal cannot be reached here).

The fake records every call with its arguments and offers only the async (`.aio`) variants:
calling a blocking variant fails the test. Its sandbox runs `exec` on this host, so the
in-sandbox kill wrapper, bash and git are real; Modal's side (creation, limits, exec timeouts,
the filesystem API, termination) is what the fake stands in for.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from uni_agent_core.config.sandbox import ModalSandboxConfig
from uni_agent_core.sandbox import modal as modal_module
from uni_agent_core.sandbox.base import Sandbox, SandboxDeadlineError, SandboxError
from uni_agent_core.sandbox.modal import ModalSandbox
from uni_agent_core.sandbox.timed_shell import _KILL_GROUP, _TIMED_SHELL, EXEC_GRACE_S


class Aio:
    """A Modal-style function: only `.aio` may be used; every call is recorded."""

    def __init__(self, name: str, calls: list[tuple[str, tuple, dict]], fn: Callable) -> None:
        self.name, self.calls, self.fn = name, calls, fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"blocking modal call {self.name}(); use {self.name}.aio()")

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((self.name, args, kwargs))
        result = self.fn(*args, **kwargs)
        return await result if asyncio.iscoroutine(result) else result


class Errors:
    class Error(Exception):
        pass

    class SandboxFilesystemError(Error):
        pass

    class SandboxFilesystemNotFoundError(SandboxFilesystemError):
        pass

    class SandboxFilesystemIsADirectoryError(SandboxFilesystemError):
        pass

    class SandboxFilesystemPermissionError(SandboxFilesystemError):
        pass


class FakeProcess:
    def __init__(self, process: asyncio.subprocess.Process, timeout: int | None, calls) -> None:
        self._process, self._timeout = process, timeout
        assert process.stdout is not None and process.stderr is not None
        self.stdout = SimpleNamespace(read=Aio("stdout.read", calls, process.stdout.read))
        self.stderr = SimpleNamespace(read=Aio("stderr.read", calls, process.stderr.read))
        self.wait = Aio("wait", calls, self._wait)

    async def _wait(self) -> int:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._process.wait()
        except TimeoutError:
            os.killpg(self._process.pid, 9)
            await self._process.wait()
            return -1  # what Modal's wait() answers when the exec timeout passed


class FakeSandbox:
    def __init__(self, fake: FakeModal) -> None:
        calls = fake.calls
        self.fake = fake
        self.terminated = 0
        self.exec = Aio("exec", calls, self._exec)
        self.terminate = Aio("terminate", calls, self._terminate)
        self.filesystem = SimpleNamespace(
            read_bytes=Aio("read_bytes", calls, self._read_bytes),
            write_text=Aio("write_text", calls, self._write_text),
            copy_from_local=Aio("copy_from_local", calls, self._copy_from_local),
            copy_to_local=Aio("copy_to_local", calls, self._copy_to_local),
        )

    async def _exec(self, *argv: str, timeout: int | None = None, text: bool = True) -> Any:
        assert text is False
        if self.fake.exec_hook is not None:
            hooked = await self.fake.exec_hook(list(argv), timeout)
            if hooked is not None:
                return hooked
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        return FakeProcess(process, timeout, self.fake.calls)

    def _terminate(self) -> None:
        self.terminated += 1

    def _read_bytes(self, path: str) -> bytes:
        if not os.path.exists(path):
            raise Errors.SandboxFilesystemNotFoundError(path)
        if os.path.isdir(path):
            raise Errors.SandboxFilesystemIsADirectoryError(path)
        return Path(path).read_bytes()

    def _write_text(self, data: str, path: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(data)

    def _copy_from_local(self, local: Path, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(local, remote)

    def _copy_to_local(self, remote: str, local: Path) -> None:
        if not os.path.exists(remote):
            raise Errors.SandboxFilesystemNotFoundError(remote)
        shutil.copy(remote, local)


class FakeModal:
    """Stands in for the `modal` module: App, Image, Sandbox and exception."""

    def __init__(self, *, create_error: Exception | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.sandboxes: list[FakeSandbox] = []
        self.exec_hook: Callable[[list[str], int | None], Any] | None = None
        self.create_error = create_error
        self.App = SimpleNamespace(lookup=Aio("App.lookup", self.calls, lambda *a, **k: "app"))
        self.Image = SimpleNamespace(from_registry=self._from_registry)
        self.Sandbox = SimpleNamespace(create=Aio("Sandbox.create", self.calls, self._create))
        self.exception = Errors

    def _from_registry(self, tag: str) -> tuple[str, str]:
        self.calls.append(("Image.from_registry", (tag,), {}))
        return ("image", tag)

    def _create(self, *args: str, **kwargs: Any) -> FakeSandbox:
        if self.create_error is not None:
            raise self.create_error
        sandbox = FakeSandbox(self)
        self.sandboxes.append(sandbox)
        return sandbox

    def named(self, name: str) -> list[tuple[tuple, dict]]:
        return [(args, kwargs) for n, args, kwargs in self.calls if n == name]


def make(fake: FakeModal, workdir: Path, **kwargs: Any) -> ModalSandbox:
    options: dict[str, Any] = {
        "image": "sweb.eval.x86_64.django-1",
        "workdir": str(workdir),
        "modal_module": fake,
    }
    return ModalSandbox(**(options | kwargs))


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


def fake_kills(fake: FakeModal) -> int:
    return sum(args[2] == _KILL_GROUP for args, _ in fake.named("exec"))


def test_create_caps_memory_in_mib_blocks_network_and_sets_the_lifetime(tmp_path: Path) -> None:
    fake = FakeModal()
    sb = make(fake, tmp_path, memory_mb=3072, cpu=1.5, wall_clock_s=1799.2, region="us-east")

    async def main() -> None:
        async with sb:
            assert isinstance(sb, Sandbox)

    asyncio.run(main())
    assert fake.named("App.lookup") == [(("agent-rl-sandboxes",), {"create_if_missing": True})]
    assert fake.named("Image.from_registry") == [(("sweb.eval.x86_64.django-1",), {})]
    [(args, kwargs)] = fake.named("Sandbox.create")
    assert args == ("sleep", "1800")
    assert kwargs == {
        "app": "app",
        "image": ("image", "sweb.eval.x86_64.django-1"),
        "timeout": 1800,
        "cpu": (1.5, 1.5),
        "memory": (3072, 3072),
        "block_network": True,
        "workdir": str(tmp_path),
        "region": "us-east",
    }
    assert fake.sandboxes[0].terminated == 1


def test_network_when_allowed_and_config_mapping(tmp_path: Path) -> None:
    config = ModalSandboxConfig(
        app_name="rl", cpu=4, memory_mb=8192, network=True, wall_clock_s=900
    )
    with pytest.raises(ValueError, match="image"):
        ModalSandbox.from_config(config)
    sb = ModalSandbox.from_config(config, image="img", modal_module=FakeModal())
    assert (sb.app_name, sb.cpu, sb.memory_mb, sb.network, sb.wall_clock_s) == (
        "rl",
        4,
        8192,
        "host",  # `true` reads as the host's network
        900,
    )
    with pytest.raises(ValueError, match="24 h"):
        ModalSandbox(image="img", wall_clock_s=90_000)

    fake = FakeModal()

    async def main() -> None:
        async with ModalSandbox.from_config(
            config, image="img", workdir=str(tmp_path), modal_module=fake
        ):
            pass

    asyncio.run(main())
    [(_, kwargs)] = fake.named("Sandbox.create")
    assert kwargs["block_network"] is False and kwargs["memory"] == (8192, 8192)


def test_exec_sets_timeouts_and_runs_under_the_kill_wrapper(tmp_path: Path) -> None:
    fake = FakeModal()

    async def main() -> None:
        async with make(fake, tmp_path, env={"A": "1"}) as sb:
            result = await sb.exec("pwd; echo $A $B; echo bad >&2; exit 4", env={"B": "2"})
            assert (result.exit_code, result.stdout, result.stderr) == (
                4,
                f"{tmp_path}\n1 2\n",
                "bad\n",
            )
            await sb.exec("true", timeout=7.2, cwd="sub")

    asyncio.run(main())
    args, kwargs = fake.named("exec")[-1]
    assert args[:3] == ("bash", "-c", _TIMED_SHELL)
    assert args[5:8] == ("7.200", f"{tmp_path}/sub", "true")
    assert kwargs == {"timeout": int(7.2 + EXEC_GRACE_S) + 1, "text": False}


def test_timeout_kills_the_tree_and_modal_exec_timeout_is_a_timeout(tmp_path: Path) -> None:
    fake = FakeModal()
    mark = marker()

    async def main() -> None:
        async with make(fake, tmp_path) as sb:
            result = await sb.exec(f"echo partial; sleep {mark} & sleep {mark}", timeout=0.5)
            assert (result.exit_code, result.timed_out, result.stdout) == (124, True, "partial\n")
            assert host_sleeps(mark) == 0

            async def modal_side_timeout(argv: list[str], timeout: int | None) -> Any:
                return SimpleNamespace(
                    stdout=SimpleNamespace(read=Aio("r", fake.calls, lambda: b"so far")),
                    stderr=SimpleNamespace(read=Aio("r", fake.calls, lambda: b"")),
                    wait=Aio("wait", fake.calls, lambda: -1),
                )

            fake.exec_hook = modal_side_timeout
            backstop = await sb.exec("sleep 100", timeout=1)
            assert (backstop.exit_code, backstop.timed_out, backstop.stdout) == (
                124,
                True,
                "so far",
            )

    asyncio.run(main())


def test_hung_rpc_and_cancellation_kill_the_command_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(modal_module, "EXEC_GRACE_S", 0.2)
    fake = FakeModal()
    mark = marker()

    async def main() -> None:
        async with make(fake, tmp_path, rpc_timeout_s=0.3) as sb:

            async def hang_wrapped(argv: list[str], timeout: int | None) -> Any:
                if argv[2] == _TIMED_SHELL:
                    await asyncio.sleep(3600)
                return None

            fake.exec_hook = hang_wrapped
            with pytest.raises(SandboxError, match="did not return"):
                await sb.exec("true", timeout=0.2)
            assert fake.named("exec")[-1][0][2] == _KILL_GROUP

            fake.exec_hook = None
            task = asyncio.ensure_future(sb.exec(f"sleep {mark}", timeout=60))
            for _ in range(100):
                await asyncio.sleep(0.02)
                if host_sleeps(mark):
                    break
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert fake.named("exec")[-1][0][2] == _KILL_GROUP
            # The fake's process is not killed with the task; only the pid-file kill did it.
            for _ in range(50):
                if not host_sleeps(mark):
                    break
                await asyncio.sleep(0.02)
            assert host_sleeps(mark) == 0

    asyncio.run(main())


def test_terminate_on_every_path(tmp_path: Path) -> None:
    async def main() -> None:
        failing = FakeModal()

        async def no_bash(argv: list[str], timeout: int | None) -> Any:
            return SimpleNamespace(
                stdout=SimpleNamespace(read=Aio("r", failing.calls, lambda: b"")),
                stderr=SimpleNamespace(read=Aio("r", failing.calls, lambda: b"bash: not found")),
                wait=Aio("wait", failing.calls, lambda: 127),
            )

        failing.exec_hook = no_bash
        with pytest.raises(SandboxError, match="bash and GNU coreutils"):
            await make(failing, tmp_path).start()
        assert failing.sandboxes[0].terminated == 1

        quota = FakeModal(create_error=RuntimeError("sandbox quota exceeded"))
        with pytest.raises(SandboxError, match="quota exceeded"):
            await make(quota, tmp_path).start()
        assert quota.sandboxes == []

        slow = FakeModal()

        async def hang(argv: list[str], timeout: int | None) -> Any:
            if argv[2] == _TIMED_SHELL:
                await asyncio.sleep(3600)

        slow.exec_hook = hang
        with pytest.raises(SandboxError, match="did not start within 0.2 s"):
            await make(slow, tmp_path, startup_timeout_s=0.2).start()
        assert slow.sandboxes[0].terminated == 1
        assert fake_kills(slow) == 0

        body = FakeModal()
        with pytest.raises(RuntimeError, match="boom"):
            async with make(body, tmp_path) as sb:
                raise RuntimeError("boom")
        await sb.close()
        assert body.sandboxes[0].terminated == 1

        cancelled = FakeModal()
        cancelled.exec_hook = hang
        task = asyncio.ensure_future(make(cancelled, tmp_path).start())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancelled.sandboxes[0].terminated == 1

    asyncio.run(main())


def test_deadline_terminates_and_fails_later_calls(tmp_path: Path) -> None:
    fake = FakeModal()
    mark = marker()

    async def main() -> None:
        async with make(fake, tmp_path, wall_clock_s=0.6, exec_timeout_s=0.5) as sb:
            with pytest.raises(SandboxDeadlineError):
                await sb.exec(f"sleep {mark}", timeout=10)
            await asyncio.sleep(0.05)
            assert fake.sandboxes[0].terminated == 1
            assert host_sleeps(mark) == 0
            with pytest.raises(SandboxDeadlineError):
                await sb.write_file("x", "y")
        assert fake.sandboxes[0].terminated == 1

    asyncio.run(main())


def test_files_directories_and_diff(tmp_path: Path) -> None:
    fake = FakeModal()
    repo = tmp_path / "repo"

    async def main() -> None:
        async with make(fake, repo) as sb:
            await sb.write_file("pkg/a.py", "x = 1\n")
            assert fake.named("write_text")[-1][0] == ("x = 1\n", f"{repo}/pkg/a.py")
            assert await sb.read_file("pkg/a.py") == "x = 1\n"
            with pytest.raises(FileNotFoundError):
                await sb.read_file("missing.py")
            with pytest.raises(IsADirectoryError):
                await sb.read_file("pkg")
            git = "git -c user.email=a@b -c user.name=a"
            assert (await sb.exec(f"git init -q && git add -A && {git} commit -qm b")).ok
            await sb.write_file("pkg/a.py", "x = 2\n")
            assert "-x = 1\n+x = 2" in await sb.diff()

            source = tmp_path / "upload"
            (source / "sub").mkdir(parents=True)
            (source / "sub" / "f.txt").write_text("F")
            await sb.upload(str(source), "data")
            assert (repo / "data" / "sub" / "f.txt").read_text() == "F"
            await sb.upload(str(source / "sub" / "f.txt"), "one/f.txt")
            assert (repo / "one" / "f.txt").read_text() == "F"
            await sb.download("data", str(tmp_path / "down"))
            assert (tmp_path / "down" / "sub" / "f.txt").read_text() == "F"
            await sb.download("one/f.txt", str(tmp_path / "single.txt"))
            assert (tmp_path / "single.txt").read_text() == "F"
            with pytest.raises(FileNotFoundError):
                await sb.download("nothing", str(tmp_path / "x"))
            leftovers = [p for p in os.listdir("/tmp") if p.startswith(".agent-rl-")]
            staged = [n for n, a, _ in fake.calls if n == "copy_from_local"]
            assert staged and not [p for p in leftovers if p.endswith(".tar")]

    asyncio.run(main())
