"""The OpenAI Responses wire adapter, outbound: a `ChatChoice` -> a Response and its stream.

Pure functions, no server or session state. Owns the `response` object, its output items, the
event sequence of a streamed response and its SSE framing (`event: <type>` and `data: <json>`).

Output: a `message` item with one `output_text` part when the reply has text, or has no tool
calls (an empty reply is an empty message, so its echo lowers to the same turn); then one item
per tool call: `custom_tool_call` (its `input` string) for a call to a custom tool whose
arguments are exactly `{"input": <string>}`, otherwise `function_call` (arguments as a JSON
string); a call to a namespaced tool carries `name` and `namespace` apart. A reply cut by the
token limit is `status: incomplete` with `incomplete_details.reason: max_output_tokens`.
Instructions and tools are not echoed (`instructions: null`, `tools: []`).

Streaming, for each item: `response.output_item.added`; text as `response.content_part.added`,
`response.output_text.delta`s, `response.output_text.done`, `response.content_part.done`; a
call's whole arguments as one `response.function_call_arguments.delta` and `.done` (or
`response.custom_tool_call_input.delta` and `.done`); then `response.output_item.done` with the
finished item. The stream opens with `response.created` and `response.in_progress` and ends
with `response.completed` or `response.incomplete` carrying the whole response (Codex reads the
items from the `output_item.done` events and needs the terminal event's `id`); a failure after
the start is an `error` event then `response.failed`. Every event has a `sequence_number`.

Request parsing lives in `adapters.responses`.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from uni_agent_core.gateway.adapters.responses import CUSTOM_INPUT, WireTool
from uni_agent_core.gateway.request import ChatChoice, Message, StreamDelta, ToolCall


def new_id(prefix: str) -> str:
    """A fresh OpenAI-style id: `<prefix>_` and 24 hex characters."""
    return f"{prefix}_{secrets.token_hex(12)}"


def responses_usage(choice: ChatChoice) -> dict[str, Any]:
    """The Responses `usage` object of one choice."""
    return {
        "input_tokens": choice.prompt_tokens,
        "input_tokens_details": {"cached_tokens": choice.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": choice.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": choice.prompt_tokens + choice.completion_tokens,
    }


def _status(choice: ChatChoice) -> str:
    return "incomplete" if choice.finish_reason == "length" else "completed"


class ResponseHeader:
    """What every rendering of one response shares: its id, time, model and request echo."""

    def __init__(
        self,
        *,
        response_id: str,
        created_at: int,
        model: str,
        tools: dict[str, WireTool] | None = None,
        previous_response_id: str | None = None,
        store: bool = True,
    ) -> None:
        self.response_id = response_id
        self.created_at = created_at
        self.model = model
        self.tools = tools or {}
        self.previous_response_id = previous_response_id
        self.store = store

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The `response` object in a given state."""
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "instructions": None,
            "max_output_tokens": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": self.previous_response_id,
            "store": self.store,
            "temperature": None,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "truncation": "disabled",
            "usage": usage,
            "metadata": {},
        }

    def call_item(self, call: ToolCall, status: str = "completed") -> dict[str, Any]:
        """The output item of one tool call (a fresh `call_id` unless the call has an id)."""
        wire = self.tools.get(call.name)
        arguments = call.arguments
        item: dict[str, Any]
        if (
            wire is not None
            and wire.custom
            and isinstance(arguments, dict)
            and arguments.keys() == {CUSTOM_INPUT}
            and isinstance(arguments[CUSTOM_INPUT], str)
        ):
            item = {
                "id": new_id("ctc"),
                "type": "custom_tool_call",
                "status": status,
                "call_id": call.id or new_id("call"),
                "name": wire.name,
                "input": arguments[CUSTOM_INPUT],
            }
        else:
            # A string here is text the model produced that is not a JSON object; pass it
            # through verbatim so the client sees (and echoes) exactly what was sampled.
            text = (
                arguments
                if isinstance(arguments, str)
                else json.dumps(arguments, ensure_ascii=False)
            )
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": status,
                "call_id": call.id or new_id("call"),
                "name": wire.name if wire is not None else call.name,
                "arguments": text,
            }
        if wire is not None and wire.namespace is not None:
            item["namespace"] = wire.namespace
        return item


def message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    """An assistant `message` output item with one `output_text` part."""
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [_text_part(text)],
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def output_items(header: ResponseHeader, choice: ChatChoice) -> list[dict[str, Any]]:
    """The finished output items of a choice (see the module docstring)."""
    items = []
    if choice.content or not choice.tool_calls:
        items.append(message_item(new_id("msg"), choice.content, _status(choice)))
    items.extend(header.call_item(call) for call in choice.tool_calls)
    return items


def reply_message(choice: ChatChoice, items: list[dict[str, Any]]) -> Message:
    """The assistant turn a choice added, with the call ids its rendering gave the calls."""
    call_ids = [item["call_id"] for item in items if "call_id" in item]
    calls = [
        call.model_copy(update={"id": call_id})
        for call, call_id in zip(choice.tool_calls, call_ids, strict=True)
    ]
    return Message(role="assistant", content=choice.content, tool_calls=calls or None)


def responses_response(header: ResponseHeader, choice: ChatChoice) -> dict[str, Any]:
    """Render a sampled choice as a (non-streamed) `response` object."""
    return header.response(
        _status(choice), output_items(header, choice), usage=responses_usage(choice)
    )


class ResponsesEventStream:
    """Builds the events of one streamed response, in order, numbering them.

    Call `start()` once, `delta()` for every `StreamDelta`, then `finish()` with the choice (or
    `fail()` after an error); frame each event with `responses_sse_event`. Streamed text must be
    a prefix of the final `content`; `finish()` sends the rest. `output` holds the finished
    items once `finish()` has run.
    """

    def __init__(self, header: ResponseHeader) -> None:
        self.header = header
        self.output: list[dict[str, Any]] = []
        self._sequence = 0
        self._message_id: str | None = None
        self._sent = ""

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        """`response.created` and `response.in_progress`."""
        response = self.header.response("in_progress", [])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def _open_message(self) -> list[dict[str, Any]]:
        if self._message_id is not None:
            return []
        self._message_id = new_id("msg")
        item = message_item(self._message_id, "", "in_progress")
        item["content"] = []
        return [
            self._event("response.output_item.added", output_index=0, item=item),
            self._event(
                "response.content_part.added",
                item_id=self._message_id,
                output_index=0,
                content_index=0,
                part=_text_part(""),
            ),
        ]

    def _text_delta(self, text: str) -> dict[str, Any]:
        self._sent += text
        return self._event(
            "response.output_text.delta",
            item_id=self._message_id,
            output_index=0,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def delta(self, delta: StreamDelta) -> list[dict[str, Any]]:
        """Newly final text (nothing for empty text)."""
        if not delta.text:
            return []
        return [*self._open_message(), self._text_delta(delta.text)]

    def finish(self, choice: ChatChoice) -> list[dict[str, Any]]:
        """The closing events: unsent text, the message's done events, each tool call, then
        `response.completed` (or `response.incomplete`).

        Raises:
            ValueError: When the streamed text is not a prefix of `choice.content`.
        """
        if not choice.content.startswith(self._sent):
            raise ValueError("streamed text is not a prefix of the final content")
        status = _status(choice)
        events: list[dict[str, Any]] = []
        if self._message_id is not None or choice.content or not choice.tool_calls:
            events += self._open_message()
            tail = choice.content[len(self._sent) :]
            if tail:
                events.append(self._text_delta(tail))
            item = message_item(self._message_id or "", choice.content, status)
            events += [
                self._event(
                    "response.output_text.done",
                    item_id=self._message_id,
                    output_index=0,
                    content_index=0,
                    text=choice.content,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=self._message_id,
                    output_index=0,
                    content_index=0,
                    part=item["content"][0],
                ),
                self._event("response.output_item.done", output_index=0, item=item),
            ]
            self.output.append(item)
        for call in choice.tool_calls:
            events += self._call_events(call, len(self.output))
        usage = responses_usage(choice)
        terminal = "response.incomplete" if status == "incomplete" else "response.completed"
        response = self.header.response(status, self.output, usage=usage)
        events.append(self._event(terminal, response=response))
        return events

    def _call_events(self, call: ToolCall, index: int) -> list[dict[str, Any]]:
        item = self.header.call_item(call)
        self.output.append(item)
        custom = item["type"] == "custom_tool_call"
        field, prefix = (
            ("input", "custom_tool_call_input")
            if custom
            else ("arguments", "function_call_arguments")
        )
        added = {**item, "status": "in_progress", field: ""}
        ids = {"item_id": item["id"], "output_index": index}
        done: dict[str, Any] = {**ids, field: item[field]}
        if not custom:
            done["name"] = item["name"]
        return [
            self._event("response.output_item.added", output_index=index, item=added),
            self._event(f"response.{prefix}.delta", **ids, delta=item[field]),
            self._event(f"response.{prefix}.done", **done),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def fail(self, status: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        """An `error` event, then `response.failed`, for an error after the stream started.

        Args:
            status: the HTTP status the error would have had.
            body: its OpenAI envelope (`{"error": {message, type, param, code}}`).
        """
        error = body.get("error", {})
        code = error.get("code") or ("server_error" if status >= 500 else error.get("type"))
        message = error.get("message", "")
        return [
            self._event("error", code=code, message=message, param=error.get("param")),
            self._event(
                "response.failed",
                response=self.header.response(
                    "failed", self.output, error={"code": code, "message": message}
                ),
            ),
        ]


def responses_sse_event(event: dict[str, Any]) -> bytes:
    """Frame one event: `event: <type>\\ndata: <json>\\n\\n`."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
