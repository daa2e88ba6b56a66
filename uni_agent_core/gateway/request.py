"""The gateway's internal, provider-neutral request and result records.

The wire adapters (OpenAI Chat Completions and Responses, Anthropic Messages) lower their
payloads to one OpenAI-shaped `ChatRequest`; the session never sees wire payloads, which is why
the protocols yield identical tokens for the same conversation. A session answers with one
`ChatChoice` per requested sample (`n`), which the adapters render back to their wire format.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(BaseModel):
    """A function call made by the assistant."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    """Call id as the client sees it; ignored when matching history (clients may rename)."""
    name: str
    arguments: dict[str, Any] | str
    """Parsed JSON object when the arguments are valid JSON, else the raw string."""


class Message(BaseModel):
    """One chat message in OpenAI shape (text content only)."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class SamplingOverrides(BaseModel):
    """Per-request sampling settings; unset fields take the session's defaults."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    """Stop strings; each must encode to a single token (exact-token training cannot cut a
    sampled token in half)."""


class ChatRequest(BaseModel):
    """A provider-neutral chat request."""

    model_config = ConfigDict(extra="forbid")

    messages: Sequence[Message] = Field(min_length=1)
    """A list, or from the wire adapters a `LoweredHistory` (lowered incrementally)."""
    tools: list[dict[str, Any]] | None = None
    """OpenAI function tools: `{"type": "function", "function": {name, description,
    parameters}}`; None or empty means no tools."""
    sampling: SamplingOverrides = Field(default_factory=SamplingOverrides)
    n: int = Field(default=1, ge=1, le=64)
    """Samples to draw; each becomes its own (sibling) chain."""
    stream: bool = False
    ignored: tuple[str, ...] = ()
    """Request fields the adapter accepted and dropped because they cannot change the sampled
    tokens (`context_management`, `cache_control`, `metadata`, ...), as dotted names without
    indices; the server counts them per field in `/metrics`."""


FinishReasonOut = Literal["stop", "length", "tool_calls"]


class ChatChoice(BaseModel):
    """One sampled assistant reply, decoded and parsed."""

    model_config = ConfigDict(extra="forbid")

    index: int
    content: str
    """Assistant text outside tool calls."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReasonOut
    """`tool_calls` when complete calls were parsed; a reply cut by the token limit is
    `length` even if it began a tool call."""
    chain_id: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    parse_error: str | None = None
    """Why tool-call parsing failed (the reply is then returned as text)."""


class StreamDelta(BaseModel):
    """Text of choice `index` that became final while generating (for SSE streaming)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    text: str
