"""The sandbox section: where agent commands and hidden tests run, with explicit limits.

A discriminated union on `type`: `local` (a process tree, bubblewrap isolation), `swerex` (a
SWE-ReX remote runtime), `docker`, `modal`, and `plugin` (a user's backend by import path).
Every backend states its start, command and wall-clock timeouts, each at most a day
(`Duration`); no backend waits forever.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from uni_agent_core.config.base import (
    MAX_DURATION_S,
    ConfigModel,
    Duration,
    PluginRef,
    raise_conflicts,
)

MODAL_MAX_LIFETIME_S = 24 * 3600
"""Modal's cap on a sandbox's lifetime, in seconds."""

MAX_SANDBOX_MEMORY_MB = 1024 * 1024
"""1 TiB in MiB: the largest memory cap a sandbox may ask for. One rollout's commands and tests
never need more, and a larger value is almost always a unit slip (KiB or bytes for MiB) that
would leave the sandbox uncapped in practice."""


class _SandboxLimits(ConfigModel):
    """Timeouts shared by every sandbox backend."""

    type: str
    """Sandbox backend; each subclass narrows it to its own tag."""

    startup_timeout_s: Duration = 60.0
    """Seconds allowed to create the sandbox and check out the task's repository."""
    exec_timeout_s: Duration = 120.0
    """Default per-command timeout; the command's process tree is killed when it passes."""
    wall_clock_s: Duration = 3600.0
    """Hard deadline on the sandbox's whole life, at most a day; it is torn down when it
    passes."""
    start_retries: int = Field(default=2, ge=0)
    """Retries of a failed sandbox start before the rollout ends with `sandbox_error`."""
    start_backoff_s: Duration = 1.0
    """Wait before the first retry of a failed start; it doubles with each further one."""
    max_concurrent_starts: int = Field(default=16, ge=1)
    """Cap on the run's sandboxes starting at once, the agents' and the verifiers' together
    (`envs/verifier.py::TaskSandboxes`), so a step of many episodes does not flood the host,
    a docker daemon or a cloud API."""

    @model_validator(mode="after")
    def _check_timeouts(self) -> _SandboxLimits:
        problems: list[tuple[str, str]] = []
        if self.exec_timeout_s > self.wall_clock_s:
            problems.append(
                (
                    "exec_timeout_s",
                    f"{self.exec_timeout_s:g} s exceeds wall_clock_s ({self.wall_clock_s:g} s); "
                    "a single command could never reach its own timeout",
                )
            )
        raise_conflicts(problems)
        return self


NetworkMode = Literal["none", "gateway", "host"]
"""What a sandbox's commands may reach: `none`, nothing (a private loopback); `gateway`, the
episode's gateway and nothing else, once a harness that runs its agent inside links it
(`sandbox/gateway_link.py`; `none` until then); `host`, this host's whole network: every local
service (the Prefect API, MLflow, other episodes' gateways) and the internet where the host has
it. `true` and `false` still read as `host` and `none`."""


class _ResourceCaps(_SandboxLimits):
    """Memory and network caps of backends that create the sandbox themselves."""

    memory_mb: int = Field(default=4096, ge=64, le=MAX_SANDBOX_MEMORY_MB)
    """Memory cap in MiB, at most `MAX_SANDBOX_MEMORY_MB` (1 TiB)."""
    network: NetworkMode = "none"
    """What the agent's commands may reach (`NetworkMode`); `none` by default, so agents cannot
    fetch fixes. `gateway` is the local bubblewrap sandbox's and docker's (a local daemon and
    socat in the image); `host` is an explicit opt-in."""

    @field_validator("network", mode="before")
    @classmethod
    def _network_from_bool(cls, value: object) -> object:
        if isinstance(value, bool):
            return "host" if value else "none"
        return value


class LocalSandboxConfig(_ResourceCaps):
    """A local process tree in a scratch directory (the embedded default)."""

    type: Literal["local"] = "local"
    """Selects the local sandbox."""
    isolation: Literal["bubblewrap", "none"] = "bubblewrap"
    """`bubblewrap` isolates the file system, processes and network (needs `bwrap`); `none`
    only uses a scratch directory and rlimits (trusted CI tasks only)."""
    network: NetworkMode = "gateway"
    """What the agent's commands may reach (`NetworkMode`). `gateway` by default: nothing,
    unless a harness running its agent inside (the agent-CLI presets) links the sandbox to its
    gateway, and then that gateway alone (needs `socat`). Without bubblewrap the host's network
    is shared whatever this says."""
    max_processes: int = Field(default=256, ge=1)
    """Cap on processes the agent's commands may create (fork bombs end the rollout)."""
    cpu_time_s: int | None = Field(default=None, ge=1, le=int(MAX_DURATION_S))
    """CPU-seconds rlimit of each process, at most a day; None sets none (the wall-clock limits
    still hold)."""
    read_only_paths: list[str] = Field(default_factory=list)
    """Host directories bound read-only into a bubblewrap sandbox besides the system's runtime
    (`/usr`, `/bin`, `/lib*`, a minimal `/etc`): a task interpreter installed elsewhere and its
    packages, e.g. `/opt/conda/envs/task`. Nothing else of the host is visible; name no
    directory that holds task data or an agent-rl install."""

    @model_validator(mode="after")
    def _check_read_only_paths(self) -> LocalSandboxConfig:
        problems = [
            ("read_only_paths", f"{path!r} is not an absolute path other than /")
            for path in self.read_only_paths
            if not path.startswith("/") or path.rstrip("/") == ""
        ]
        raise_conflicts(problems)
        return self


class SwerexSandboxConfig(_SandboxLimits):
    """A SWE-ReX runtime: a remote one reached over HTTP, or one swe-rex deploys itself."""

    type: Literal["swerex"] = "swerex"
    """Selects a SWE-ReX runtime."""
    host: str
    """Runtime URL of a `remote` deployment, e.g. `http://sandbox-host`; its memory and
    network limits are the runtime host's."""
    port: int | None = Field(default=None, ge=1, le=65_535)
    """Runtime port; None uses the URL's port."""
    auth_token_env: str | None = None
    """Environment variable holding the runtime's auth token; None sends none."""
    runtime_timeout_s: Duration = 60.0
    """Timeout of each control request to the runtime (not of the command it runs)."""
    deployment: Literal["remote", "local", "docker", "modal"] = "remote"
    """Where the runtime runs: `remote` (at `host`), or a swe-rex `local`, `docker` or `modal`
    deployment started for the sandbox."""
    image: str | None = None
    """Image of a `docker` or `modal` deployment; None uses each task's own image."""
    memory_mb: int = Field(default=4096, ge=64, le=MAX_SANDBOX_MEMORY_MB)
    """Memory cap in MiB of a `docker` or `modal` deployment, at most `MAX_SANDBOX_MEMORY_MB`
    (1 TiB)."""
    cpus: float = Field(default=2.0, gt=0)
    """CPU cap of a `docker` or `modal` deployment."""
    max_processes: int = Field(default=1024, ge=1)
    """Process cap of a `docker` deployment."""


class DockerSandboxConfig(_ResourceCaps):
    """One container per rollout, from the task's image."""

    type: Literal["docker"] = "docker"
    """Selects docker containers."""
    image: str | None = None
    """Image for every task; None uses each task's own image (SWE-bench style)."""
    pull: Literal["missing", "always", "never"] = "missing"
    """When to pull the image before starting a container."""
    cpus: float = Field(default=2.0, gt=0)
    """CPU quota per container."""
    max_processes: int = Field(default=1024, ge=1)
    """Cap on processes and threads in each container (`--pids-limit`)."""
    docker_host: str | None = None
    """Docker daemon address (`DOCKER_HOST`); None uses the local daemon."""
    warm_pool_size: int = Field(default=0, ge=0)
    """Containers kept started ahead of need for the placement (image, task) asked for last;
    0 starts each on demand (`TaskSandboxes`)."""

    @model_validator(mode="after")
    def _check_network(self) -> DockerSandboxConfig:
        if self.network == "gateway" and self.docker_host:
            raise_conflicts(
                [
                    (
                        "network",
                        "`gateway` bind-mounts a socket of this host into the container, so it "
                        "needs the local docker daemon; `docker_host` names another",
                    )
                ]
            )
        return self


class ModalSandboxConfig(_ResourceCaps):
    """A Modal sandbox per rollout."""

    type: Literal["modal"] = "modal"
    """Selects Modal sandboxes."""
    app_name: str = "agent-rl-sandboxes"
    """Modal app the sandboxes belong to."""
    cpu: float = Field(default=2.0, gt=0)
    """CPU cores per sandbox."""
    region: str | None = None
    """Modal region; None lets Modal choose."""
    rpc_timeout_s: Duration = 60.0
    """Timeout of each Modal call, on top of the command's own time."""
    max_concurrent_starts: int = Field(default=32, ge=1)
    """Cap on sandboxes being created at once (Modal rate-limits creation)."""
    warm_pool_size: int = Field(default=0, ge=0)
    """Sandboxes kept created ahead of need for the placement (image, task) asked for last;
    0 creates each on demand (`TaskSandboxes`)."""

    @model_validator(mode="after")
    def _check_modal_lifetime(self) -> ModalSandboxConfig:
        if self.wall_clock_s > MODAL_MAX_LIFETIME_S:
            raise_conflicts(
                [("wall_clock_s", f"{self.wall_clock_s:g} s exceeds Modal's 24 h sandbox cap")]
            )
        return self

    @model_validator(mode="after")
    def _check_network(self) -> ModalSandboxConfig:
        if self.network == "gateway":
            raise_conflicts(
                [
                    (
                        "network",
                        "`gateway` (egress to the gateway alone) is not offered for Modal "
                        "sandboxes: use `none` or `host` (Modal's allow-list cannot name a "
                        "gateway on this host)",
                    )
                ]
            )
        return self


class PluginSandboxConfig(_SandboxLimits):
    """A user's own sandbox backend, by import path (`docs/extending.md`). The run's pool
    starts, retries and times it like a built-in (the fields shared by every backend)."""

    type: Literal["plugin"] = "plugin"
    """Selects a user's backend."""
    path: PluginRef
    """`package.module:attribute`, or an installed package's `agent_rl.sandboxes` name: a callable
    that takes `options` and a task's placement as keywords (`hide_paths=` for local tasks;
    `image=`, `workdir=` for image tasks) and returns a not yet started `Sandbox`
    (`sandbox/base.py`)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Handed to the callable as one mapping; its meaning is the backend's own."""


SandboxConfig = Annotated[
    LocalSandboxConfig
    | SwerexSandboxConfig
    | DockerSandboxConfig
    | ModalSandboxConfig
    | PluginSandboxConfig,
    Field(discriminator="type"),
]
"""A sandbox backend, chosen by its `type:` tag."""

SANDBOX_SECTIONS: tuple[type[ConfigModel], ...] = (
    LocalSandboxConfig,
    SwerexSandboxConfig,
    DockerSandboxConfig,
    ModalSandboxConfig,
    PluginSandboxConfig,
)
"""The classes of `SandboxConfig`'s members."""

CONTAINER_SANDBOXES: frozenset[str] = frozenset({"swerex", "docker", "modal"})
"""Sandbox types that can run a task's container image."""
