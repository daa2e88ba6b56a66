"""The Anthropic Messages wire adapter, outbound: `ChatChoice` -> messages and stream events.

Pure functions, no server or session state. Owns the `message` body, the event sequence of a
stream (live or from a finished choice), SSE framing, the finish-reason -> `stop_reason` map and
tool-use ids. `tool_use.input` must be an object, so tool-call arguments that are not a JSON
object are sent as `{}` and logged; `invalid_tool_inputs` says how many calls of a choice that hits.

Request parsing and error envelopes live in `adapters.anthropic`.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from uni_agent_core.gateway.adapters.errors import decode_arguments
from uni_agent_core.gateway.request import ChatChoice, StreamDelta

logger = logging.getLogger(__name__)

STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
}
"""Our finish reasons as Anthropic stop reasons."""


def new_tool_use_id() -> str:
    """A fresh Anthropic-style tool-use id: `toolu_` and 24 hex characters."""
    return "toolu_" + secrets.token_hex(12)


def tool_input(arguments: dict[str, Any] | str) -> dict[str, Any] | None:
    """Tool-call arguments as an Anthropic `input` object, or None when they are not one.

    A string that decodes to a JSON object is accepted; any other string is not (the caller
    substitutes `{}` and counts it, since `tool_use.input` must be an object).
    """
    if isinstance(arguments, dict):
        return arguments
    decoded = decode_arguments(arguments)
    return decoded if isinstance(decoded, dict) else None


def invalid_tool_inputs(choice: ChatChoice) -> int:
    """How many of a choice's tool calls render as `{}` because their arguments are no object.

    The server adds this to its metrics for every Anthropic response it sends.
    """
    return sum(tool_input(call.arguments) is None for call in choice.tool_calls)


def _tool_use_blocks(choice: ChatChoice) -> list[dict[str, Any]]:
    blocks = []
    for call in choice.tool_calls:
        arguments = tool_input(call.arguments)
        if arguments is None:
            logger.warning(
                "tool call %r of choice %d has arguments that are not a JSON object; sending "
                "input {} to the Anthropic client",
                call.name,
                choice.index,
            )
            arguments = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id or new_tool_use_id(),
                "name": call.name,
                "input": arguments,
            }
        )
    return blocks


def _usage(choice: ChatChoice) -> dict[str, int]:
    # Anthropic's input_tokens exclude cache reads: total input = input + cache_read (+ creation).
    return {
        "input_tokens": choice.prompt_tokens - choice.cached_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": choice.cached_tokens,
        "output_tokens": choice.completion_tokens,
    }


def anthropic_response(choice: ChatChoice, *, model: str, message_id: str) -> dict[str, Any]:
    """Render one sampled choice as a Messages API `message` object.

    Content is a text block (when the text is non-empty) followed by one `tool_use` block per
    tool call; arguments that are not a JSON object become `input: {}` (see
    `invalid_tool_inputs`). `stop_reason` maps `stop -> end_turn`, `length -> max_tokens`,
    `tool_calls -> tool_use`.

    Args:
        choice: The sampled reply.
        model: Model name echoed to the client.
        message_id: Message id, e.g. `msg_<hex>`.

    Returns:
        The JSON-ready response body.
    """
    content: list[dict[str, Any]] = []
    if choice.content:
        content.append({"type": "text", "text": choice.content})
    content.extend(_tool_use_blocks(choice))
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": STOP_REASONS[choice.finish_reason],
        "stop_sequence": None,
        "usage": _usage(choice),
    }


class AnthropicEventStream:
    """Builds the event payloads of one streamed Messages response, in the API's order.

    `start()` gives `message_start`; `delta()` opens the text block (index 0) on the first text
    and gives `content_block_delta`/`text_delta` events; `finish()` sends any text not yet
    streamed, closes the text block, gives `content_block_start` (tool_use, `input: {}`), one
    `input_json_delta` with the full JSON and `content_block_stop` per tool call, then
    `message_delta` (stop reason, usage) and `message_stop`. Frame each payload with
    `anthropic_sse_event`. Streamed text must be a prefix of the final content.
    """

    def __init__(self, *, model: str, message_id: str) -> None:
        """Create the stream.

        Args:
            model: Model name echoed to the client.
            message_id: Message id, e.g. `msg_<hex>`.
        """
        self.model = model
        self.message_id = message_id
        self._sent = ""
        self._text_open = False
        self._next_index = 0

    def start(self, *, prompt_tokens: int = 0, cached_tokens: int = 0) -> list[dict[str, Any]]:
        """The `message_start` event (empty content; usage as far as known)."""
        return [
            {
                "type": "message_start",
                "message": {
                    "id": self.message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": prompt_tokens - cached_tokens,
                        "cache_creation_input_tokens": 0,
                        "cache_read_input_tokens": cached_tokens,
                        "output_tokens": 0,
                    },
                },
            }
        ]

    def _text(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        events: list[dict[str, Any]] = []
        if not self._text_open:
            self._text_open = True
            self._next_index = 1
            events.append(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                }
            )
        self._sent += text
        events.append(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
        )
        return events

    def delta(self, delta: StreamDelta) -> list[dict[str, Any]]:
        """Events for newly final text (none for empty text)."""
        return self._text(delta.text)

    def finish(self, choice: ChatChoice) -> list[dict[str, Any]]:
        """The closing events: unsent text, text block stop, tool_use blocks, message end.

        Raises:
            ValueError: When the streamed text is not a prefix of `choice.content`.
        """
        if not choice.content.startswith(self._sent):
            raise ValueError("streamed text is not a prefix of the final content")
        events = self._text(choice.content[len(self._sent) :])
        if self._text_open:
            events.append({"type": "content_block_stop", "index": 0})
            self._text_open = False
        for block in _tool_use_blocks(choice):
            index = self._next_index
            self._next_index += 1
            events.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"], ensure_ascii=False),
                    },
                }
            )
            events.append({"type": "content_block_stop", "index": index})
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": STOP_REASONS[choice.finish_reason], "stop_sequence": None},
                "usage": _usage(choice),
            }
        )
        events.append({"type": "message_stop"})
        return events


def anthropic_stream_events(
    choice: ChatChoice, *, model: str, message_id: str
) -> list[dict[str, Any]]:
    """All event payloads of a response whose choice is already complete (no live deltas)."""
    stream = AnthropicEventStream(model=model, message_id=message_id)
    return stream.start(
        prompt_tokens=choice.prompt_tokens, cached_tokens=choice.cached_tokens
    ) + stream.finish(choice)


def anthropic_sse_event(event: dict[str, Any]) -> bytes:
    """Frame one event as `event: <type>\\ndata: <json>\\n\\n` (error envelopes included)."""
    data = json.dumps(event, ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
