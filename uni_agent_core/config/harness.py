"""The harness section: the agent program that drives a rollout through a gateway session.

A discriminated union on `type`: `react` (the white-box ReAct loop with swappable error
policies), `blackbox` (any command pointed at the session's base URLs) and `mini_swe_agent`.
A harness never computes reward; its budgets end an episode with a named `ExitReason`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from uni_agent_core.config.base import ConfigModel, Duration, raise_conflicts

ToolName = Literal["shell", "editor", "submit", "finish"]
"""Tools the ReAct harness can expose."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ReactHarnessConfig(ConfigModel):
    """The white-box ReAct loop: think, call a tool, observe, until submit or a budget ends it."""

    type: Literal["react"] = "react"
    """Selects the ReAct harness."""
    max_turns: int = Field(default=30, ge=1)
    """Most model calls in one episode; reaching it ends with `max_turns`."""
    tools: list[ToolName] = Field(default_factory=lambda: ["shell", "editor", "submit"])
    """Tools offered to the model; must include `submit` or `finish` so an episode can end."""
    tool_parser: Literal["native", "hermes", "xml"] = "native"
    """`native` uses the gateway's tool calling (parsed by `gateway.tool_parser`); `hermes` or
    `xml` describe tools in the prompt and parse calls from plain text in the harness."""
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
    env: dict[str, str] = Field(default_factory=dict)
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

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [name for name in value if not _ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"invalid environment variable names: {bad}")
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


HarnessConfig = Annotated[
    ReactHarnessConfig | BlackboxHarnessConfig | MiniSweAgentHarnessConfig,
    Field(discriminator="type"),
]
"""An agent harness, chosen by its `type:` tag."""


def harness_deadline_key(harness: HarnessConfig) -> tuple[str, float]:
    """The name and value of a harness's episode deadline.

    Args:
        harness: any harness config.

    Returns:
        `(field name, seconds)`, e.g. `("wall_clock_s", 3000.0)`.
    """
    if isinstance(harness, BlackboxHarnessConfig):
        return "timeout_s", harness.timeout_s
    return "wall_clock_s", harness.wall_clock_s
