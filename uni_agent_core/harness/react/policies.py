"""The ReAct harness's error policies and budgets — each a small, swappable part.

A policy looks at one event (a reply without a tool call, a malformed call, a failing tool, a
sandbox failure, the clock, the context size) and answers with a `Verdict`: go on (optionally
with a message for the model) or stop with an `ExitReason`. The loop only sequences them, so a
recipe (or a researcher) can swap any one without touching the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from uni_agent_core.types import ExitReason

NUDGE = (
    "Your reply did not call a tool. Act by calling one of the provided tools; call `submit` "
    "when the task is done."
)
FORMAT_CORRECTION = (
    "Your tool call could not be parsed ({error}). Call a tool with a JSON object of arguments "
    "that matches its schema."
)


@dataclass(frozen=True)
class Verdict:
    """What the loop does after an event."""

    stop: ExitReason | None = None
    message: str | None = None
    """A user message to show the model before the next turn."""


CONTINUE = Verdict()


@dataclass
class NoToolCallPolicy:
    """A reply without any tool call: remind the model (`nudge`) or end (`stop`)."""

    mode: str = "nudge"

    def on_reply_without_call(self, formats: FormatErrorBudget) -> Verdict:
        if self.mode == "stop":
            return Verdict(stop=ExitReason.FINISHED)
        return formats.spend(NUDGE)


@dataclass
class FormatErrorBudget:
    """Malformed calls (and nudges) tolerated per episode; one more ends it."""

    budget: int = 3
    spent: int = 0

    def spend(self, message: str) -> Verdict:
        self.spent += 1
        if self.spent > self.budget:
            return Verdict(stop=ExitReason.FORMAT_ERROR_BUDGET)
        return Verdict(message=message)

    def on_malformed_call(self, error: str) -> Verdict:
        return self.spend(FORMAT_CORRECTION.format(error=error))


@dataclass
class ToolErrorPolicy:
    """A tool that failed: show the error to the model (`observe`) or end (`terminate`)."""

    mode: str = "observe"

    def on_tool_error(self) -> Verdict:
        return Verdict(stop=ExitReason.HARNESS_ERROR) if self.mode == "terminate" else CONTINUE


@dataclass
class SandboxErrorPolicy:
    """The sandbox itself failed: retry the command up to `retries` times, or end."""

    mode: str = "retry"
    retries: int = 2

    def attempts(self) -> int:
        return 1 + (self.retries if self.mode == "retry" else 0)


@dataclass
class Budgets:
    """Turn, token and wall-clock budgets of one episode."""

    max_turns: int = 30
    context_tokens: int | None = None
    wall_clock_s: float = 3000.0
    started: float = field(default_factory=time.monotonic)

    def remaining_s(self) -> float:
        return self.wall_clock_s - (time.monotonic() - self.started)

    def before_turn(self, turn: int) -> Verdict:
        if turn >= self.max_turns:
            return Verdict(stop=ExitReason.MAX_TURNS)
        if self.remaining_s() <= 0:
            return Verdict(stop=ExitReason.TIMEOUT)
        return CONTINUE

    def after_reply(self, context_tokens: int) -> Verdict:
        if self.context_tokens is not None and context_tokens >= self.context_tokens:
            return Verdict(stop=ExitReason.MAX_TOKENS)
        return CONTINUE
