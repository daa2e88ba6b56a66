"""The harness contract: drive one episode of a task through a gateway session.

`Harness.run(task, sandbox, endpoint) -> HarnessResult`. The endpoint is a gateway session (its
OpenAI and Anthropic base URLs and API key); the harness talks to it over HTTP exactly like any
agent would, acts in the sandbox, and reports how the episode ended. A harness never computes
reward: verification happens afterwards, in a fresh sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall


@dataclass(frozen=True)
class Endpoint:
    """Where a harness reaches the policy: one gateway session."""

    openai_base_url: str
    anthropic_base_url: str
    api_key: str
    """The session key: the agent's credential, for the session's model endpoints only."""
    model: str = "agent-rl-policy"
    control_key: str | None = field(default=None, repr=False)
    """The gateway's control key, for the harness's own reads of the session on the host
    (`count_session_calls`); never put in an agent's environment or a sandbox."""

    @classmethod
    def from_session(
        cls,
        created: dict[str, Any],
        model: str = "agent-rl-policy",
        *,
        control_key: str | None = None,
    ) -> Endpoint:
        """From the body of `POST /sessions` (and the control key that created it)."""
        return cls(
            openai_base_url=created["openai_base_url"],
            anthropic_base_url=created["anthropic_base_url"],
            api_key=created["api_key"],
            model=model,
            control_key=control_key,
        )


@dataclass
class HarnessResult:
    """How an episode ended."""

    exit_reason: ExitReason
    steps: int
    """Model calls made."""
    info: dict[str, Any] = field(default_factory=dict)
    """Diagnostics for logs only (counters, the last error); nothing reads them by key."""
    actions: list[ToolCall] = field(default_factory=list)
    """The tool calls a white-box harness ran, in order, arguments in full (the leak audit
    reads them; the trace clips them). Black-box harnesses, whose tools run out of sight,
    report none."""


@runtime_checkable
class Harness(Protocol):
    """An agent program."""

    async def run(self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint) -> HarnessResult: ...
