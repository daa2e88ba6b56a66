"""The real agent CLIs agent-rl trains black-box: which releases, where they live, installing them,
and what their harness presets share (`AgentCliHarness`).

Claude Code (`@anthropic-ai/claude-code`) and Codex (`@openai/codex`) come from the npm registry
at the versions pinned in `config/harness.py`, installed into one npm prefix: by default the
project's git-ignored `.agent-clis/` (what `make setup` runs, `agent-rl agents install`), or
`AGENT_RL_AGENT_CLIS`. Both packages ship a native executable in a per-platform package, which
the harness runs directly, so neither needs node at run time (inside a sandbox included).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core import PROJECT_ROOT
from uni_agent_core.config.harness import (
    CLAUDE_CODE_VERSION,
    CODEX_VERSION,
    AgentCliHarnessConfig,
    BlackboxHarnessConfig,
    HarnessConfig,
    harness_members,
)
from uni_agent_core.config.sandbox import DockerSandboxConfig, LocalSandboxConfig, SandboxConfig
from uni_agent_core.errors import UserError
from uni_agent_core.harness.blackbox import BlackboxHarness
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.sandbox.gateway_link import find_socat
from uni_agent_core.types import TaskSpec

PREFIX_ENV = "AGENT_RL_AGENT_CLIS"
"""Environment variable naming the npm prefix of the agent CLIs."""


class AgentCliError(UserError, RuntimeError):
    """An agent CLI is missing, of another version, or could not be installed."""


@dataclass(frozen=True)
class AgentCli:
    """One agent CLI as npm ships it."""

    name: str
    """Its harness type (`claude_code`, `codex`)."""
    title: str
    package: str
    version: str
    """The pinned release."""

    def package_dir(self, prefix: Path) -> Path:
        return prefix / "node_modules" / self.package

    def executable(self, prefix: Path) -> Path:
        """The native executable under `prefix` (it may not exist)."""
        arch = _NPM_ARCH.get(platform.machine(), platform.machine())
        if self.name == "claude_code":
            return self.package_dir(prefix) / "bin" / "claude.exe"
        triple = _RUST_TRIPLE.get(platform.machine(), platform.machine())
        vendor = prefix / "node_modules" / f"{self.package}-linux-{arch}" / "vendor" / triple
        return vendor / "bin" / "codex"

    def installed_version(self, prefix: Path) -> str | None:
        manifest = self.package_dir(prefix) / "package.json"
        try:
            return str(json.loads(manifest.read_text())["version"])
        except (OSError, ValueError, KeyError):
            return None


CLAUDE_CODE = AgentCli(
    "claude_code", "Claude Code", "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION
)
CODEX = AgentCli("codex", "Codex", "@openai/codex", CODEX_VERSION)
AGENT_CLIS = {cli.name: cli for cli in (CLAUDE_CODE, CODEX)}

_NPM_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_RUST_TRIPLE = {
    "x86_64": "x86_64-unknown-linux-musl",
    "amd64": "x86_64-unknown-linux-musl",
    "aarch64": "aarch64-unknown-linux-musl",
    "arm64": "aarch64-unknown-linux-musl",
}


def default_prefix() -> Path:
    """`AGENT_RL_AGENT_CLIS`, else the project's `.agent-clis/`."""
    configured = os.environ.get(PREFIX_ENV)
    return Path(configured).expanduser().resolve() if configured else PROJECT_ROOT / ".agent-clis"


def locate(cli: AgentCli, version: str, prefix: Path | None = None) -> Path:
    """The executable of `cli` at `version`, checked to be installed.

    Raises:
        AgentCliError: it is not installed under the prefix, or another version is; the message
            says how to install it.
    """
    prefix = prefix or default_prefix()
    installed = cli.installed_version(prefix)
    executable = cli.executable(prefix)
    how = f"run `make setup` or `agent-rl agents install --prefix {prefix}`"
    if installed is None or not executable.is_file():
        raise AgentCliError(f"{cli.title} {version} is not installed under {prefix}: {how}")
    if installed != version:
        raise AgentCliError(
            f"{cli.title} {installed} is installed under {prefix}, but the recipe asks for "
            f"{version}: {how} (it installs the pinned {cli.version}), or set the harness's "
            f"`version: {installed}`"
        )
    return executable


def sandbox_for_agent_clis(sandbox: SandboxConfig, harness: HarnessConfig) -> SandboxConfig:
    """The sandbox section with what the harness's in-sandbox agent CLIs need to run.

    A bubblewrap sandbox shows only its allow-list; each CLI that runs inside it (`where:
    sandbox`) needs its npm packages (`<prefix>/node_modules`, nothing else of the prefix) bound
    read-only. Other sections come back unchanged.
    """
    if not isinstance(sandbox, LocalSandboxConfig) or sandbox.isolation != "bubblewrap":
        return sandbox
    needed = [
        str((member.cli_prefix or default_prefix()).resolve() / "node_modules")
        for _, member in harness_members(harness)
        if isinstance(member, AgentCliHarnessConfig) and member.where == "sandbox"
    ]
    missing = [path for path in dict.fromkeys(needed) if path not in sandbox.read_only_paths]
    if not missing:
        return sandbox
    return sandbox.model_copy(update={"read_only_paths": [*sandbox.read_only_paths, *missing]})


def agent_cli_problems(harness: HarnessConfig) -> list[tuple[str, str]]:
    """`(recipe key, why)` for each agent CLI a harness section runs that is not installed."""
    problems: list[tuple[str, str]] = []
    for name, member in harness_members(harness):
        if isinstance(member, AgentCliHarnessConfig):
            try:
                locate(AGENT_CLIS[member.type], member.version, member.cli_prefix)
            except AgentCliError as error:
                key = "harness" if member is harness else f"harness.{name}"
                problems.append((f"{key}.version", str(error)))
    return problems


def gateway_reach_problems(sandbox: SandboxConfig, harness: HarnessConfig) -> list[tuple[str, str]]:
    """`(recipe key, why)` when the harness's in-sandbox agents could not reach their gateway
    from a bubblewrap sandbox or a container: `network: none`, or a bubblewrap sandbox's
    `network: gateway` on a host without socat (`sandbox/gateway_link.py`)."""
    if isinstance(sandbox, LocalSandboxConfig):
        if sandbox.isolation != "bubblewrap":
            return []
    elif not isinstance(sandbox, DockerSandboxConfig):
        return []
    inside = [
        name
        for name, member in harness_members(harness)
        if isinstance(member, BlackboxHarnessConfig)
        or (isinstance(member, AgentCliHarnessConfig) and member.where == "sandbox")
    ]
    if not inside:
        return []
    if sandbox.network == "none":
        return [
            (
                "sandbox.network",
                f"`none`, but {', '.join(inside)} run their agent inside the sandbox, where it "
                "must reach the gateway: use `gateway` (the gateway alone)",
            )
        ]
    if isinstance(sandbox, LocalSandboxConfig) and sandbox.network == "gateway":
        try:
            find_socat()
        except SandboxError as error:
            return [("sandbox.network", str(error))]
    return []


def require_agent_clis(harness: HarnessConfig) -> None:
    """Fail fast when a harness section runs an agent CLI that is not installed.

    Raises:
        AgentCliError: one line per missing CLI, with how to install it.
    """
    problems = agent_cli_problems(harness)
    if problems:
        raise AgentCliError("; ".join(f"{key}: {why}" for key, why in problems))


def install(clis: Sequence[AgentCli], prefix: Path | None = None) -> list[str]:
    """Install `clis` at their pinned versions with npm into `prefix`; skip those already there.

    Returns:
        One line per CLI saying what was done.

    Raises:
        AgentCliError: npm is missing or failed.
    """
    prefix = prefix or default_prefix()
    wanted = [cli for cli in clis if cli.installed_version(prefix) != cli.version]
    lines = [f"{cli.title} {cli.version}: already installed" for cli in clis if cli not in wanted]
    if not wanted:
        return lines
    npm = shutil.which("npm")
    if npm is None:
        raise AgentCliError(
            "npm is not on PATH; install Node.js 18+ (it brings npm) to install the agent CLIs"
        )
    prefix.mkdir(parents=True, exist_ok=True)
    specs = [f"{cli.package}@{cli.version}" for cli in wanted]
    command = [
        npm,
        "install",
        "--prefix",
        str(prefix),
        "--no-audit",
        "--no-fund",
        "--loglevel=error",
        *specs,
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
        raise AgentCliError(f"npm install {' '.join(specs)} failed: " + " | ".join(tail))
    for cli in wanted:
        if not cli.executable(prefix).is_file():
            raise AgentCliError(
                f"{cli.title} {cli.version} installed, but its native executable for this "
                f"platform ({platform.machine()}) is missing: {cli.executable(prefix)}"
            )
        lines.append(f"{cli.title} {cli.version}: installed under {prefix}")
    return lines


def last_json_line(text: str) -> dict | None:
    """The last line of a CLI's output that is a JSON object, or None."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            return value if isinstance(value, dict) else None
    return None


CHECK_TIMEOUT_S = 30.0
"""Deadline of the in-sandbox check that a CLI can be executed."""


async def check_runs_in(sandbox: Sandbox, executable: Path, prefix: Path | None) -> None:
    """Refuses a sandbox in which a CLI's executable cannot be run.

    Raises:
        SandboxError: the sandbox does not show the executable (a bubblewrap sandbox shows only
            its allow-list: the CLI prefix must be among `sandbox.read_only_paths`).
    """
    result = await sandbox.exec(f"test -x {shlex.quote(str(executable))}", timeout=CHECK_TIMEOUT_S)
    if result.exit_code != 0:
        raise SandboxError(
            f"the sandbox cannot run {executable}: add {prefix or default_prefix()} to "
            "sandbox.read_only_paths, or run the agent with `where: host`"
        )


class AgentCliHarness(BlackboxHarness):
    """A black-box harness that runs one of the pinned agent CLIs (`cli`) with its preset."""

    cli: AgentCli
    config: AgentCliHarnessConfig  # type: ignore[assignment]

    def __init__(self, config: AgentCliHarnessConfig) -> None:
        super().__init__(config, where=config.where)  # type: ignore[arg-type]

    async def executable(self, sandbox: Sandbox) -> Path:
        """The CLI's executable, checked to be installed and, in a sandbox, runnable there.

        Raises:
            AgentCliError: it is not installed (or another version is).
            SandboxError: the sandbox cannot run it.
        """
        executable = locate(self.cli, self.config.version, self.config.cli_prefix)
        if self.where == "sandbox":
            await check_runs_in(sandbox, executable, self.config.cli_prefix)
        return executable

    def task_prompt(self, task: TaskSpec) -> str:
        """The message the CLI is started with."""
        return self.config.prompt.format(problem_statement=task.problem_statement)
