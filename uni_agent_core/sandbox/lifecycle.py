"""The life cycle every sandbox backend shares.

`StartOnce.start()` is idempotent and serialised; it runs the backend's `_start()` under
`startup_timeout_s`, and on *any* failure (timeout, error, cancellation) runs `_abort_start()`
so nothing is left behind, then raises a `SandboxError` (which `SandboxPool` retries) or
re-raises. `SandboxLifecycle` adds what else the backends had each written out: the closed /
started / expired state, the wall-clock deadline (armed at start; when it passes the backend's
resource is torn down once), `close()` (idempotent, tears down once, shielded from
cancellation), `async with`, the usability check before every call, and `diff()`.

A backend keeps its recipe section as `config` (SWE-ReX's pattern: the section's model holds
the defaults and the checks, so no constructor re-declares them). `settings_for` makes that
object from a section and keyword settings; `from_config` is the same constructor given a
section. What is not the recipe's (the repository directory inside the sandbox, extra
environment, output caps, the `diff()` base) is the sandbox's placement, set through
`_init_lifecycle`. A backend says only what differs: how to start, exec and copy files,
whether it holds a resource, and how to tear it down.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import shlex
from collections.abc import Awaitable, Callable, Mapping
from pathlib import PurePosixPath
from typing import Any, Self, TypeVar

from pydantic import ValidationError

from uni_agent_core.config.base import ConfigModel, Conflict
from uni_agent_core.sandbox.base import ExecResult, SandboxDeadlineError, SandboxError
from uni_agent_core.sandbox.timed_shell import DEFAULT_MAX_OUTPUT_BYTES, diff_script

logger = logging.getLogger(__name__)

SectionT = TypeVar("SectionT", bound=ConfigModel)


def settings_for(
    model: type[SectionT], config: SectionT | None, settings: Mapping[str, Any], *, owner: str
) -> SectionT:
    """The backend's section: `config` (or the model's defaults) with `settings` applied.

    The result is validated by the recipe's own model, so a constructor call and a recipe get
    the same defaults, bounds and cross-field rules.

    Raises:
        TypeError: A setting is neither a field of the section nor an argument of `owner`.
        ValueError: The settings do not validate (a bound, a cross-field rule).
    """
    unknown = sorted(set(settings) - set(model.model_fields))
    if unknown:
        raise TypeError(
            f"{owner}() got unexpected argument(s) {', '.join(unknown)}; its settings are the "
            f"fields of {model.__name__}: {', '.join(sorted(model.model_fields))}"
        )
    if not settings and config is not None:
        return config
    base = config.model_dump() if config is not None else {}
    try:
        return model.model_validate(base | dict(settings))
    except ValidationError as e:
        raise ValueError(f"{owner}: {'; '.join(_problems(e))}") from None


def _problems(error: ValidationError) -> list[str]:
    """`key: message` for each problem pydantic found (a cross-field `Conflict` names its keys)."""
    problems: list[str] = []
    for item in error.errors():
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, Conflict):
            problems += [f"{key}: {message}" for key, message in cause.problems]
        else:
            key = ".".join(str(part) for part in item["loc"]) or "settings"
            problems.append(f"{key}: {item['msg']}")
    return problems


class StartOnce:
    """Mixin: `start()` for backends with `_start_lock`, `_closed`, `_started` and
    `startup_timeout_s`."""

    _start_lock: asyncio.Lock
    _closed: bool
    _started: bool
    startup_timeout_s: float

    async def start(self) -> None:
        """Create the sandbox once; raises `SandboxError` (after cleaning up) if it cannot."""
        async with self._start_lock:
            if self._closed:
                raise SandboxError("the sandbox is closed; create a new one")
            if self._started:
                return
            try:
                async with asyncio.timeout(self.startup_timeout_s):
                    await self._start()
            except TimeoutError as e:
                await self._abort_start()
                raise SandboxError(self._start_timeout_message()) from e
            except SandboxError:
                await self._abort_start()
                raise
            except Exception as e:
                await self._abort_start()
                wrapped = self._start_error(e)
                if wrapped is None:
                    raise
                raise wrapped from e
            except BaseException:
                await self._abort_start()
                raise
            self._started = True

    async def _start(self) -> None:
        raise NotImplementedError

    async def _abort_start(self) -> None:
        """Undo a failed start (must not raise)."""
        raise NotImplementedError

    def _start_timeout_message(self) -> str:
        return f"sandbox did not start within {self.startup_timeout_s:g} s"

    def _start_error(self, error: Exception) -> SandboxError | None:
        """A backend exception translated to `SandboxError`; None re-raises it unchanged."""
        return None


class SandboxLifecycle(StartOnce):
    """Base of the sandbox backends: config, state, deadline, close, context management, `diff()`.

    A subclass sets `config` (its recipe section, via `settings_for`) and calls
    `_init_lifecycle()` in its constructor and `_arm_deadline()` first thing in `_start()`,
    sets `label` (how errors name it, e.g. "container agent-rl-1f2e") and `torn_down` (what
    happened at the deadline, e.g. "removed"), and implements `_holds_resource()` and
    `_teardown()`; `_start`, `_abort_start`, `exec` and the file methods stay its own.

    The section's fields read as the sandbox's own attributes (`sandbox.memory_mb` is
    `sandbox.config.memory_mb`).
    """

    label: str = "sandbox"
    torn_down: str = "closed"
    config: ConfigModel
    workdir: PurePosixPath
    """The repository inside the sandbox."""
    max_output_bytes: int
    """Bytes of stdout and of stderr kept per command."""
    diff_base: str
    """The commit `diff()` compares the working tree with."""

    def __init__(self, config: Any = None, /, **settings: Any) -> None:
        """A backend's constructor: its recipe section (None: the defaults), then keyword
        arguments of its own or fields of the section; it calls `_init_lifecycle()`."""
        raise NotImplementedError

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> Self:
        """The sandbox a recipe section describes; `overrides` sets any other argument of the
        backend's constructor, or a field of the section (e.g. a task's `image`)."""
        return cls(config, **overrides)

    def __getattr__(self, name: str) -> Any:
        config = self.__dict__.get("config")
        if config is not None and name in type(config).model_fields:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def exec_timeout_s(self) -> float:
        """Default per-command timeout."""
        return self.config.exec_timeout_s  # type: ignore[attr-defined]

    @property
    def wall_clock_s(self) -> float:
        """Deadline on the whole sandbox, counted from `start()`."""
        return self.config.wall_clock_s  # type: ignore[attr-defined]

    @property
    def startup_timeout_s(self) -> float:  # type: ignore[override]
        """Time allowed for `start()`."""
        return self.config.startup_timeout_s  # type: ignore[attr-defined]

    def _init_lifecycle(
        self,
        *,
        workdir: str,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        diff_base: str = "HEAD",
    ) -> None:
        """Set the placement (see the module docstring) and the fresh, unstarted state.

        Raises:
            ValueError: `workdir` is not an absolute path.
        """
        if not workdir.startswith("/"):
            raise ValueError(f"workdir must be absolute, got {workdir!r}")
        self.workdir = PurePosixPath(posixpath.normpath(workdir))
        self.max_output_bytes = max_output_bytes
        self.diff_base = diff_base
        self._extra_env = dict(env or {})
        self._start_lock = asyncio.Lock()
        self._started = False
        self._expired = False
        self._closed = False
        self._deadline = 0.0
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._teardown_task: asyncio.Future[None] | None = None

    async def __aenter__(self):  # noqa: ANN204 - the backend itself
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _arm_deadline(self) -> None:
        """Start the wall-clock deadline (call at the beginning of `_start`)."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self.wall_clock_s
        self._deadline_handle = loop.call_later(self.wall_clock_s, self._expire)

    def _holds_resource(self) -> bool:
        """Whether there is something to tear down (a container, a remote sandbox)."""
        raise NotImplementedError

    async def _teardown(self) -> None:
        """Remove the backend's resource with everything in it (called at most once)."""
        raise NotImplementedError

    def _start_teardown(self) -> None:
        if self._teardown_task is None and self._holds_resource():
            self._teardown_task = asyncio.ensure_future(self._teardown())

    async def close(self) -> None:
        """Tear the sandbox down with every process in it (idempotent).

        Raises:
            SandboxError: the teardown failed (the resource may be left behind).
        """
        if self._closed:
            return
        self._closed = True
        if self._deadline_handle is not None:
            self._deadline_handle.cancel()
        self._start_teardown()
        if self._teardown_task is not None:
            await asyncio.shield(self._teardown_task)

    async def _close_quietly(self) -> None:
        """Close after a failed start; the start error is the one the caller sees."""
        try:
            await self.close()
        except (SandboxError, OSError):
            logger.exception("tearing down %s after a failed start failed", self.label)

    def _expire(self) -> None:
        """The wall-clock deadline passed: tear the resource down."""
        if self._expired:
            return
        self._expired = True
        logger.warning(
            "%s passed its %g s deadline; it is being %s",
            self.label,
            self.wall_clock_s,
            self.torn_down,
        )
        self._start_teardown()

    def _check_usable(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")
        if not self._started:
            raise SandboxError("the sandbox is not started; call start() or use `async with`")
        if self._expired:
            raise self._deadline_error()

    def _deadline_error(self) -> SandboxDeadlineError:
        return SandboxDeadlineError(
            f"{self.label} passed its wall-clock deadline ({self.wall_clock_s:g} s) and was "
            f"{self.torn_down}"
        )

    async def diff(self) -> str:
        """The patch from `diff_base` to `workdir`'s working tree, untracked files included.

        Untracked files are staged into a throwaway index, so the repo's own index is untouched;
        files that `.gitignore` ignores are left out.

        Raises:
            SandboxError: `workdir` is not a git repository or git failed.
        """
        script = diff_script(self.diff_base)
        result = await self.exec(script, cwd=str(self.workdir))
        if not result.ok:
            raise SandboxError(
                f"git diff in {self.workdir} failed (exit {result.exit_code}): "
                f"{result.stderr.strip()}"
            )
        return result.stdout


async def probe_workdir(
    run: Callable[..., Awaitable[ExecResult]], workdir: PurePosixPath, what: str
) -> None:
    """Create `workdir` in a fresh sandbox, proving it can run the command wrapper.

    Args:
        run: the backend's exec (called as `run(command, cwd="/")`).
        workdir: the repository directory inside the sandbox.
        what: how to name the sandbox in the error, e.g. "container abc (the image needs ...)".

    Raises:
        SandboxError: the probe command failed.
    """
    probe = await run(f"mkdir -p -- {shlex.quote(str(workdir))}", cwd="/")
    if not probe.ok:
        raise SandboxError(
            f"{what} cannot run commands (exit {probe.exit_code}; it needs bash and GNU "
            f"coreutils): {probe.stderr.strip() or probe.stdout.strip()}"
        )
