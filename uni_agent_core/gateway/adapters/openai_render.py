"""The OpenAI Chat Completions wire adapter, outbound: `ChatChoice`s -> responses and stream chunks.

Pure functions, no server or session state. Owns the `chat.completion` body, the
`chat.completion.chunk` sequence of a stream (live or from finished choices), SSE framing and
tool-call ids. Usage follows the OpenAI API for `n > 1`: the prompt is counted once, completion
tokens are summed over the choices.

Request parsing and error envelopes live in `adapters.openai`.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from uni_agent_core.gateway.request import ChatChoice, StreamDelta


def new_tool_call_id() -> str:
    """A fresh OpenAI-style tool-call id: `call_` and 24 hex characters."""
    return "call_" + secrets.token_hex(12)


def _arguments_json(arguments: dict[str, Any] | str) -> str:
    # A string here is text the model produced that is not a JSON object; pass it through
    # verbatim so the client sees (and echoes) exactly what was sampled.
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def _wire_tool_calls(choice: ChatChoice) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id or new_tool_call_id(),
            "type": "function",
            "function": {"name": call.name, "arguments": _arguments_json(call.arguments)},
        }
        for call in choice.tool_calls
    ]


def _usage(choices: list[ChatChoice]) -> dict[str, Any]:
    first = min(choices, key=lambda choice: choice.index)
    completion = sum(choice.completion_tokens for choice in choices)
    return {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": first.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": first.cached_tokens},
    }


def openai_response(
    choices: list[ChatChoice], *, model: str, created: int, response_id: str
) -> dict[str, Any]:
    """Render sampled choices as a `chat.completion` object.

    `message.content` is null when the reply is empty and has tool calls, as OpenAI does.
    Tool calls without an id get `call_<24 hex>`. Usage counts the prompt once (that of the
    lowest-index choice) and sums completion tokens over the choices.

    Args:
        choices: One or more choices, in any order (they are sorted by `index`).
        model: Model name echoed to the client.
        created: Unix timestamp of the response.
        response_id: Response id, e.g. `chatcmpl-<hex>`.

    Returns:
        The JSON-ready response body.

    Raises:
        ValueError: When `choices` is empty.
    """
    if not choices:
        raise ValueError("openai_response needs at least one choice")
    rendered = []
    for choice in sorted(choices, key=lambda choice: choice.index):
        tool_calls = _wire_tool_calls(choice)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if tool_calls and not choice.content else choice.content,
        }
        if tool_calls:
            message["tool_calls"] = tool_calls
        rendered.append(
            {
                "index": choice.index,
                "message": message,
                "logprobs": None,
                "finish_reason": choice.finish_reason,
            }
        )
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": rendered,
        "usage": _usage(choices),
        "system_fingerprint": None,
    }


class OpenAIChunkStream:
    """Builds the `chat.completion.chunk` payloads of one streamed response, in order.

    Call `start()` once, `delta()` for every `StreamDelta`, `finish()` once per choice when it
    is done, then `usage()`; frame each payload with `sse_event` and end with `SSE_DONE`.
    Streamed text of a choice must be a prefix of its final `content`; whatever was not streamed
    is sent by `finish()`, followed by one chunk per tool call (id, name and the full arguments)
    and a chunk carrying the finish reason.
    """

    def __init__(
        self,
        *,
        model: str,
        created: int,
        response_id: str,
        n: int = 1,
        include_usage: bool = False,
    ) -> None:
        """Create the stream.

        Args:
            model: Model name echoed to the client.
            created: Unix timestamp shared by every chunk.
            response_id: Id shared by every chunk.
            n: Number of choices in the response.
            include_usage: Whether the client sent `stream_options.include_usage: true`; every
                chunk then carries `usage: null` and `usage()` returns the usage chunk.
        """
        self.model = model
        self.created = created
        self.response_id = response_id
        self.n = n
        self.include_usage = include_usage
        self._sent: dict[int, str] = {}

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.response_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "system_fingerprint": None,
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _choice_chunk(
        self, index: int, delta: dict[str, Any], finish_reason: str | None = None
    ) -> dict[str, Any]:
        return self._chunk(
            [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        )

    def start(self) -> list[dict[str, Any]]:
        """The opening chunk of every choice: `delta: {role: assistant, content: ""}`."""
        return [
            self._choice_chunk(index, {"role": "assistant", "content": ""})
            for index in range(self.n)
        ]

    def delta(self, delta: StreamDelta) -> list[dict[str, Any]]:
        """A content chunk for newly final text (none for empty text)."""
        if not delta.text:
            return []
        self._sent[delta.index] = self._sent.get(delta.index, "") + delta.text
        return [self._choice_chunk(delta.index, {"content": delta.text})]

    def finish(self, choice: ChatChoice) -> list[dict[str, Any]]:
        """The closing chunks of one choice: unsent text, tool calls, then the finish reason.

        Raises:
            ValueError: When the streamed text is not a prefix of `choice.content` (the session
                broke the `StreamDelta` contract; the client already holds different text).
        """
        sent = self._sent.get(choice.index, "")
        if not choice.content.startswith(sent):
            raise ValueError(
                f"choice {choice.index}: streamed text is not a prefix of the final content"
            )
        chunks: list[dict[str, Any]] = []
        tail = choice.content[len(sent) :]
        if tail:
            self._sent[choice.index] = choice.content
            chunks.append(self._choice_chunk(choice.index, {"content": tail}))
        for position, call in enumerate(_wire_tool_calls(choice)):
            chunks.append(
                self._choice_chunk(choice.index, {"tool_calls": [{"index": position, **call}]})
            )
        chunks.append(self._choice_chunk(choice.index, {}, choice.finish_reason))
        return chunks

    def usage(self, choices: list[ChatChoice]) -> list[dict[str, Any]]:
        """The final usage chunk (`choices: []`) when the client asked for it, else nothing."""
        if not self.include_usage:
            return []
        chunk = self._chunk([])
        chunk["usage"] = _usage(choices)
        return [chunk]


def openai_stream_chunks(
    choices: list[ChatChoice],
    *,
    model: str,
    created: int,
    response_id: str,
    include_usage: bool = False,
) -> list[dict[str, Any]]:
    """All chunk payloads of a response whose choices are already complete (no live deltas).

    Args:
        choices: The finished choices.
        model: Model name echoed to the client.
        created: Unix timestamp shared by every chunk.
        response_id: Id shared by every chunk.
        include_usage: Whether to end with the usage chunk.

    Returns:
        The payloads in send order (without the terminal `[DONE]`).
    """
    stream = OpenAIChunkStream(
        model=model,
        created=created,
        response_id=response_id,
        n=len(choices),
        include_usage=include_usage,
    )
    chunks = stream.start()
    for choice in sorted(choices, key=lambda choice: choice.index):
        chunks.extend(stream.finish(choice))
    chunks.extend(stream.usage(choices))
    return chunks


def sse_event(data: dict[str, Any] | str) -> bytes:
    """Frame one server-sent event: `data: <json>\\n\\n` (a string is sent verbatim)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


SSE_DONE = sse_event("[DONE]")
"""The terminal event of an OpenAI stream."""
