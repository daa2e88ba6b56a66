"""The ReAct loop: ask the model through the gateway, run its tool calls, observe, repeat.

The model is called over HTTP through the session's OpenAI endpoint (the `openai` SDK, no
retries: a failed call is an engine error, and the gateway never records half a call). The
parts — tool set, prompts and the policies in `policies.py` — are injected, so each can be
swapped. Every episode ends with an `ExitReason`:

- `submitted` / `finished`: the model called `submit` / `finish` (or `stop` on a reply
  without a tool call);
- `max_turns`, `max_tokens`, `timeout`: a budget ran out (`max_tokens` also when the gateway
  refuses the history as longer than the context, OpenAI's `context_length_exceeded`);
- `format_error_budget`: too many replies without a valid tool call;
- `harness_error`: a tool failed under `on_tool_error: terminate`;
- `sandbox_error`: the sandbox failed beyond its retries;
- `engine_error`: the model call failed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from uni_agent_core.config.harness import ReactHarnessConfig
from uni_agent_core.harness.base import Endpoint, HarnessResult
from uni_agent_core.harness.react.policies import (
    Budgets,
    FormatErrorBudget,
    NoToolCallPolicy,
    SandboxErrorPolicy,
    ToolErrorPolicy,
    Verdict,
)
from uni_agent_core.harness.react.prompts import SYSTEM_PROMPT, task_prompt
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.tools.registry import ToolSet
from uni_agent_core.types import ExitReason, TaskSpec, ToolCall

logger = logging.getLogger(__name__)

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
"""The OpenAI error code of a prompt longer than the context."""

_CALL_MARKERS = ("<tool_call>", "<function=")

TRACED_OUTPUT_CHARS = 2000
"""Characters of a tool call's observation kept in its action record (the episode's trace)."""


@dataclass
class _Episode:
    messages: list[dict[str, Any]]
    steps: int = 0
    info: dict[str, Any] = field(
        default_factory=lambda: {
            "tool_calls": 0,
            "tool_errors": 0,
            "format_errors": 0,
        }
    )
    """Counters: tool calls, tool errors, format errors, sandbox errors, the last error."""
    actions: list[ToolCall] = field(default_factory=list)
    """Every tool call, arguments in full (what the leak auditor reads), with what it did:
    its output (clipped), error, exit code, start and duration (the episode's trace)."""

    def say(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


class ReactHarness:
    """The white-box ReAct harness with swappable parts.

    Args:
        config: the recipe's `harness` section (`type: react`).
        tools: the tool set offered to the model (default: from `config.tools`).
        system_prompt: the system message.
    """

    def __init__(
        self,
        config: ReactHarnessConfig,
        tools: ToolSet | None = None,
        system_prompt: str = SYSTEM_PROMPT,
    ) -> None:
        self.config = config
        self.tools = tools or ToolSet.from_names(
            config.tools, max_output_chars=config.max_observation_chars
        )
        self.system_prompt = system_prompt

    async def run(self, task: TaskSpec, sandbox: Sandbox, endpoint: Endpoint) -> HarnessResult:
        """Play one episode; never raises for model, tool or sandbox failures."""
        c = self.config
        budgets = Budgets(c.max_turns, c.context_budget_tokens, c.wall_clock_s)
        formats = FormatErrorBudget(c.format_error_budget)
        no_call = NoToolCallPolicy(c.on_no_tool_call)
        tool_errors = ToolErrorPolicy(c.on_tool_error)
        sandbox_errors = SandboxErrorPolicy(c.on_sandbox_error, c.sandbox_retries)
        episode = _Episode(
            [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": task_prompt(task, str(sandbox.workdir))},
            ]
        )
        client = openai.AsyncOpenAI(
            base_url=endpoint.openai_base_url, api_key=endpoint.api_key, max_retries=0
        )
        try:
            reason = await self._loop(
                episode,
                client,
                endpoint,
                sandbox,
                budgets,
                formats,
                no_call,
                tool_errors,
                sandbox_errors,
            )
        finally:
            await client.close()
        return HarnessResult(reason, episode.steps, episode.info, episode.actions)

    async def _loop(
        self,
        episode: _Episode,
        client: openai.AsyncOpenAI,
        endpoint: Endpoint,
        sandbox: Sandbox,
        budgets: Budgets,
        formats: FormatErrorBudget,
        no_call: NoToolCallPolicy,
        tool_errors: ToolErrorPolicy,
        sandbox_errors: SandboxErrorPolicy,
    ) -> ExitReason:
        schemas = self.tools.schemas(compact=self.config.tool_schemas == "compact")
        while True:
            verdict = budgets.before_turn(episode.steps)
            if verdict.stop:
                return verdict.stop
            try:
                reply = await asyncio.wait_for(
                    # The history and tool schemas are plain JSON dicts (replies re-enter it as
                    # `model_dump()`); openai's per-role TypedDicts cannot describe them.
                    client.chat.completions.create(
                        model=endpoint.model,
                        messages=episode.messages,  # type: ignore[arg-type]
                        tools=schemas,  # type: ignore[arg-type]
                    ),
                    timeout=budgets.remaining_s(),
                )
            except TimeoutError:
                return ExitReason.TIMEOUT
            except openai.BadRequestError as exc:
                episode.info["last_error"] = f"engine: {exc}"
                if exc.code == CONTEXT_LENGTH_EXCEEDED:  # the history fills the context
                    return ExitReason.MAX_TOKENS
                return ExitReason.ENGINE_ERROR
            except openai.APIError as exc:  # deliberate boundary: the episode ends, counted
                episode.info["last_error"] = f"engine: {exc}"
                return ExitReason.ENGINE_ERROR
            episode.steps += 1
            choice = reply.choices[0]
            message = choice.message
            episode.messages.append(message.model_dump(exclude_none=True))
            usage = reply.usage
            used = (usage.prompt_tokens + usage.completion_tokens) if usage else 0
            verdict = budgets.after_reply(used)
            if verdict.stop:
                return verdict.stop
            if not message.tool_calls:
                verdict = self._without_call(
                    message.content or "", choice.finish_reason, episode, formats, no_call
                )
                if verdict.stop:
                    return verdict.stop
                if verdict.message:
                    episode.say(verdict.message)
                continue
            for call in message.tool_calls:
                stop = await self._run_call(call, sandbox, episode, tool_errors, sandbox_errors)
                if stop is not None:
                    return stop

    def _without_call(
        self,
        content: str,
        finish_reason: str | None,
        episode: _Episode,
        formats: FormatErrorBudget,
        no_call: NoToolCallPolicy,
    ) -> Verdict:
        if any(marker in content for marker in _CALL_MARKERS) or finish_reason == "length":
            episode.info["format_errors"] += 1
            error = "the reply was cut off" if finish_reason == "length" else "malformed call"
            return formats.on_malformed_call(error)
        return no_call.on_reply_without_call(formats)

    async def _run_call(
        self,
        call: Any,
        sandbox: Sandbox,
        episode: _Episode,
        tool_errors: ToolErrorPolicy,
        sandbox_errors: SandboxErrorPolicy,
    ) -> ExitReason | None:
        episode.info["tool_calls"] += 1
        name, arguments = call.function.name, call.function.arguments
        started_at, clock = time.time(), time.perf_counter()
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
        for attempt in range(sandbox_errors.attempts()):
            try:
                result = await self.tools.dispatch(sandbox, name, arguments)
                episode.actions.append(
                    ToolCall(
                        name=name,
                        arguments=shown,
                        output=result.output[:TRACED_OUTPUT_CHARS],
                        error=result.error,
                        exit_code=result.exit_code,
                        started_at=started_at,
                        seconds=time.perf_counter() - clock,
                    )
                )
                break
            except SandboxError as exc:  # deliberate boundary: retried, counted
                episode.info["sandbox_errors"] = episode.info.get("sandbox_errors", 0) + 1
                episode.info["last_error"] = f"sandbox: {exc}"
                logger.warning("sandbox error on %s (attempt %d): %s", name, attempt + 1, exc)
        else:
            seconds = time.perf_counter() - clock
            episode.actions.append(
                ToolCall(
                    name=name, arguments=shown, error=True, started_at=started_at, seconds=seconds
                )
            )
            return ExitReason.SANDBOX_ERROR
        episode.messages.append({"role": "tool", "tool_call_id": call.id, "content": result.output})
        if result.done:
            return ExitReason.SUBMITTED if name == "submit" else ExitReason.FINISHED
        if result.error:
            episode.info["tool_errors"] += 1
            verdict = tool_errors.on_tool_error()
            if verdict.stop:
                episode.info["last_error"] = f"tool {name}: {result.output[:200]}"
                return verdict.stop
        return None
