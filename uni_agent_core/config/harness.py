"""The harness section: the agent program that drives a rollout through a gateway session.

A discriminated union on `type`: `react` (the white-box ReAct loop with swappable error
policies), `blackbox` (any command pointed at the session's base URLs), `mini_swe_agent`, the
real agent CLIs `claude_code` and `codex` (pinned versions, installed by `make setup`), `plugin`
(a user's harness by import path), and `mix`, which picks one of several harnesses per task so
that one run trains them side by side.
A harness never computes reward; its budgets end an episode with a named `ExitReason`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from uni_agent_core.config.base import ConfigModel, Duration, PluginRef, raise_conflicts

ToolName = Literal["shell", "editor", "submit", "finish"]
"""Tools the ReAct harness can expose."""


def _default_react_tools() -> list[ToolName]:
    return ["shell", "editor", "submit"]


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_names(value: dict[str, str]) -> dict[str, str]:
    bad = [name for name in value if not _ENV_NAME.match(name)]
    if bad:
        raise ValueError(f"invalid environment variable names: {bad}")
    return value


AgentEnv = Annotated[dict[str, str], AfterValidator(_check_env_names)]
"""Extra environment variables of an agent process, their names checked."""


class ReactHarnessConfig(ConfigModel):
    """The white-box ReAct loop: think, call a tool, observe, until submit or a budget ends it."""

    type: Literal["react"] = "react"
    """Selects the ReAct harness."""
    max_turns: int = Field(default=30, ge=1)
    """Most model calls in one episode; reaching it ends with `max_turns`."""
    tools: list[ToolName] = Field(default_factory=_default_react_tools)
    """Tools offered to the model; must include `submit` or `finish` so an episode can end."""
    tool_parser: Literal["native", "hermes", "xml"] = "native"
    """`native` uses the gateway's tool calling (parsed by `gateway.tool_parser`); `hermes` or
    `xml` describe tools in the prompt and parse calls from plain text in the harness."""
    tool_schemas: Literal["full", "compact"] = "full"
    """How the tools are described to the model: `full` (every description) or `compact` (each
    tool's first sentence, its parameters' names and types: about half the prompt tokens of
    the tool list, which every turn attends to; `tools/registry.py::compact_schema`)."""
    on_no_tool_call: Literal["nudge", "stop"] = "nudge"
    """A reply without a tool call gets a reminder to use a tool (`nudge`, counted against
    `format_error_budget`) or ends the episode with `finished` (`stop`)."""
    format_error_budget: int = Field(default=3, ge=0)
    """Malformed tool calls tolerated per episode (each answered with a correction message);
    one more ends the episode with `format_error_budget`."""
    on_tool_error: Literal["observe", "terminate"] = "observe"
    """A tool that fails (non-zero exit, bad path) is shown to the model (`observe`) or ends the
    episode with `harness_error` (`terminate`)."""
    on_sandbox_error: Literal["retry", "terminate"] = "retry"
    """A sandbox failure (lost container, exec transport error) retries the command or ends the
    episode with `sandbox_error`."""
    sandbox_retries: int = Field(default=2, ge=0)
    """Retries per command under `on_sandbox_error: retry`."""
    max_observation_chars: int = Field(default=16_000, ge=256)
    """Tool output longer than this is clipped (head and tail kept) before the model sees it."""
    context_budget_tokens: int | None = Field(default=None, ge=1)
    """Prompt + response tokens a call may reach; passing it ends with `max_tokens`. None uses
    `trainer.max_context_tokens`."""
    wall_clock_s: Duration = 3000.0
    """Deadline on the whole episode (at most a day); passing it ends with `timeout`."""

    @model_validator(mode="after")
    def _check_tools(self) -> ReactHarnessConfig:
        problems: list[tuple[str, str]] = []
        if not {"submit", "finish"} & set(self.tools):
            problems.append(("tools", "include `submit` or `finish`, or no episode can end"))
        if len(set(self.tools)) != len(self.tools):
            problems.append(("tools", "each tool may appear once"))
        raise_conflicts(problems)
        return self


class BlackboxHarnessConfig(ConfigModel):
    """Any agent CLI (Claude Code, Codex, OpenCode, ...) run against the session's URLs.

    The command gets `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and the session API key in its
    environment; every token it makes the model produce is captured by the gateway.
    """

    type: Literal["blackbox"] = "blackbox"
    """Selects the black-box harness."""
    command: list[str] = Field(min_length=1)
    """Argument vector of the agent process, run in the sandbox's work directory without a
    shell."""
    timeout_s: Duration = 3000.0
    """Deadline on the agent process (at most a day); passing it kills the process tree and ends
    with `timeout`."""
    env: AgentEnv = Field(default_factory=dict)
    """Extra environment variables of the agent process (no secrets: use the blocks store)."""
    max_model_calls: int | None = Field(default=None, ge=1)
    """Most model calls per episode: the harness watches the session's recorded calls and stops
    the agent (ending with `max_turns`) once it has made more; one call past the cap may be
    served. None leaves turn limits to the agent."""

    @field_validator("command")
    @classmethod
    def _check_command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program name (first item) must not be empty")
        return value


class MiniSweAgentHarnessConfig(ConfigModel):
    """mini-swe-agent: bash-only actions parsed from text, driven through the gateway."""

    type: Literal["mini_swe_agent"] = "mini_swe_agent"
    """Selects mini-swe-agent."""
    config_path: Path | None = None
    """mini-swe-agent YAML (prompts, action regex); None uses agent-rl's bundled default."""
    max_turns: int = Field(default=50, ge=1)
    """Step limit; reaching it ends with `max_turns`."""
    wall_clock_s: Duration = 3000.0
    """Deadline on the whole episode (at most a day); passing it ends with `timeout`."""


CLAUDE_CODE_VERSION = "2.1.328"
"""The Claude Code release (`@anthropic-ai/claude-code` on npm) that `make setup` installs."""
CODEX_VERSION = "0.169.0"
"""The Codex CLI release (`@openai/codex` on npm) that `make setup` installs."""


class AgentCliHarnessConfig(ConfigModel):
    """What the Claude Code and Codex presets share: a real agent CLI run against the session.

    The harness writes the CLI's own configuration into a private home next to the repository
    (outside the diff), points it at the session's URLs, and turns off its telemetry, updater
    and every other network use; the agent's model calls are the only traffic it makes.
    """

    version: str
    """The CLI release to run; it must be the one installed (`agent-rl agents list`)."""
    where: Literal["sandbox", "host"] = "sandbox"
    """`sandbox` runs the CLI inside the task's sandbox (a bubblewrap sandbox then needs
    `network: true` to reach the gateway on loopback, and the CLI prefix among its
    `read_only_paths`); `host` runs it on this host in the sandbox's repository (a local
    sandbox only; the agent is then not isolated)."""
    max_turns: int = Field(default=30, ge=1)
    """Most model calls of the episode's main conversation; more ends with `max_turns`."""
    timeout_s: Duration = 1800.0
    """Deadline on the CLI process (at most a day); passing it kills its process tree and ends
    with `timeout`."""
    prompt: str = (
        "{problem_statement}\n\nThe repository is the current directory. Make the change the "
        "issue asks for by editing its files. Do not commit."
    )
    """The task message the CLI gets; `{problem_statement}` is replaced by the task's."""
    env: AgentEnv = Field(default_factory=dict)
    """Extra environment variables of the CLI (no secrets: use the blocks store)."""
    extra_args: list[str] = Field(default_factory=list)
    """More command-line arguments, appended after the preset's own."""
    cli_prefix: Path | None = None
    """The npm prefix the CLIs are installed under; None uses `AGENT_RL_AGENT_CLIS` or the
    project's `.agent-clis/` (where `make setup` puts them)."""

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str) -> str:
        if "{problem_statement}" not in value:
            raise ValueError("the prompt must contain {problem_statement}")
        return value


class ClaudeCodeHarnessConfig(AgentCliHarnessConfig):
    """Claude Code (`claude -p`) over the session's Anthropic Messages URL."""

    type: Literal["claude_code"] = "claude_code"
    """Selects the Claude Code preset."""
    version: str = CLAUDE_CODE_VERSION
    """The Claude Code release to run."""
    allowed_tools: list[str] = Field(
        default_factory=lambda: ["Bash", "Read", "Edit", "Write", "Glob", "Grep"]
    )
    """Claude Code's tools the agent may use (`--tools`); all others are removed from its
    prompt."""


class CodexHarnessConfig(AgentCliHarnessConfig):
    """Codex CLI (`codex exec`) over the session's OpenAI Responses URL."""

    type: Literal["codex"] = "codex"
    """Selects the Codex preset."""
    version: str = CODEX_VERSION
    """The Codex release to run."""


class PluginHarnessConfig(ConfigModel):
    """A user's own harness, by import path (`docs/extending.md`)."""

    type: Literal["plugin"] = "plugin"
    """Selects a user's harness."""
    path: PluginRef
    """`package.module:attribute`, or an installed package's `agent_rl.harnesses` name: a callable
    that takes `options` and returns an object with `async def run(task, sandbox, endpoint) ->
    HarnessResult` (`harness/base.py`)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Handed to the callable as one mapping; its meaning is the harness's own."""
    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    """The name its metrics go under; default the attribute's name, lowercased."""
    wall_clock_s: Duration = 3000.0
    """The episode's deadline, which the sandbox's `wall_clock_s` must cover; the harness
    enforces it."""

    @property
    def label(self) -> str:
        return self.name or self.path.rpartition(":")[2].rpartition(".")[2].lower()


LeafHarnessConfig = Annotated[
    ReactHarnessConfig
    | BlackboxHarnessConfig
    | MiniSweAgentHarnessConfig
    | ClaudeCodeHarnessConfig
    | CodexHarnessConfig
    | PluginHarnessConfig,
    Field(discriminator="type"),
]
"""A harness that runs an episode itself (every type but `mix`)."""


class MixMember(ConfigModel):
    """One harness of a mix and its share of the tasks."""

    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    """The name its metrics are logged under (`train/harness/<name>/...`); default its type."""
    weight: float = Field(default=1.0, gt=0.0)
    """Its share of the tasks, relative to the other members' weights."""
    harness: LeafHarnessConfig
    """The harness."""

    @property
    def label(self) -> str:
        return self.name or harness_label(self.harness)


class MixHarnessConfig(ConfigModel):
    """Several harnesses in one run, chosen per task.

    Each task is given one member, in weighted round-robin order as tasks are first met, and
    keeps it: all samples of a task's group (which GRPO compares with one another) run under one
    harness, in every step (`harness/factory.py::HarnessAssignment`).
    """

    type: Literal["mix"] = "mix"
    """Selects the mix."""
    harnesses: list[MixMember] = Field(min_length=1)
    """The members; their names must differ."""

    @model_validator(mode="after")
    def _check_names(self) -> MixHarnessConfig:
        labels = [member.label for member in self.harnesses]
        if len(set(labels)) != len(labels):
            raise_conflicts(
                [("harnesses", f"member names must differ (got {labels}); set `name:`")]
            )
        return self


HarnessConfig = Annotated[
    ReactHarnessConfig
    | BlackboxHarnessConfig
    | MiniSweAgentHarnessConfig
    | ClaudeCodeHarnessConfig
    | CodexHarnessConfig
    | PluginHarnessConfig
    | MixHarnessConfig,
    Field(discriminator="type"),
]
"""An agent harness, chosen by its `type:` tag."""


def harness_label(harness: LeafHarnessConfig) -> str:
    """The name a harness's metrics go under: its type, or a plug-in's label."""
    return harness.label if isinstance(harness, PluginHarnessConfig) else harness.type


def harness_members(harness: HarnessConfig) -> list[tuple[str, LeafHarnessConfig]]:
    """`(name, harness)` of every harness a section can run: a mix's members, else itself."""
    if isinstance(harness, MixHarnessConfig):
        return [(member.label, member.harness) for member in harness.harnesses]
    return [(harness_label(harness), harness)]


def harness_deadline_key(harness: HarnessConfig) -> tuple[str, float]:
    """The name and value of a harness's episode deadline.

    Args:
        harness: any harness config.

    Returns:
        `(field name, seconds)`, e.g. `("wall_clock_s", 3000.0)`.
    """
    if isinstance(harness, MixHarnessConfig):  # the longest member's, named `<member>.<key>`
        key, deadline, name = max(
            ((*harness_deadline_key(member.harness), member.label) for member in harness.harnesses),
            key=lambda key_deadline_name: key_deadline_name[1],
        )
        return f"{name}.{key}", deadline
    if isinstance(harness, BlackboxHarnessConfig | AgentCliHarnessConfig):
        return "timeout_s", harness.timeout_s
    return "wall_clock_s", harness.wall_clock_s
